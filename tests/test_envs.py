"""Tests of robotrl.envs against real MuJoCo tasks (no mocks); the file runs in ~15 s."""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest

from robotrl.envs import (
    ActionChunk,
    FlattenGoalObservation,
    RenderingError,
    env_info,
    env_names,
    make_env,
    make_eval_env,
    osmesa_available,
    resolve_env,
)
from robotrl.envs.registry import ensure_registered
from robotrl.errors import ConfigError

FAMILIES = ["hopper", "pointmaze-umaze", "antmaze-umaze", "fetch-push", "adroit-pen", "kitchen"]


def _layout(env):
    return env.get_wrapper_attr("layout")


# --------------------------------------------------------------------------- registry


def test_every_table_name_resolves_to_a_registered_id():
    ensure_registered()
    for name in env_names():
        gym_id, _ = resolve_env(name)
        assert gym_id in gym.registry, (name, gym_id)
    assert resolve_env("Hopper-v5") == ("Hopper-v5", {})  # raw ids pass through
    assert resolve_env("FetchPush-v4")[0] == "FetchPush-v4"


@pytest.mark.parametrize("bad", ["hoppper", "pointmaze", "Hopper-v99", ""])
def test_unknown_name_raises_config_error_listing_known_names(bad):
    with pytest.raises(ConfigError) as err:
        make_env(bad)
    msg = str(err.value)
    assert "hopper" in msg and "pointmaze-umaze" in msg and "kitchen" in msg
    with pytest.raises(ConfigError):
        env_info(bad)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(num_envs=0),
        dict(num_envs=2.0),
        dict(num_envs=True),
        dict(action_chunk=0),
        dict(action_chunk=-3),
        dict(max_episode_steps=0),
        dict(num_envs=2, vectorization="none"),
        dict(vectorization="threads"),
        dict(seed=-1),
    ],
)
def test_invalid_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError):
        make_env("hopper", **kwargs)


# --------------------------------------------------------------------------- families


@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_makes_and_steps(name):
    info = env_info(name)
    env = make_env(name, seed=0)
    try:
        obs, reset_info = env.reset()
        assert obs.shape == (info.obs_dim,)
        assert env.action_space.shape == (info.action_dim,)
        assert reset_info["success"] is False and reset_info["episode_success"] is False
        if info.layout is not None:
            assert obs.dtype == np.float32 and info.layout.size == info.obs_dim
        for _ in range(3):
            obs, reward, terminated, truncated, step_info = env.step(env.action_space.sample())
            assert np.all(np.isfinite(obs)) and np.isfinite(reward)
            assert isinstance(step_info["success"], bool)
            assert isinstance(step_info["episode_success"], bool)
    finally:
        env.close()
    assert info.reports_success == (name != "hopper")
    assert info.max_episode_steps is not None and info.max_episode_steps > 0


def test_env_info_facts():
    info = env_info("fetch-push")
    assert (info.gym_id, info.family, info.obs_dim, info.action_dim) == ("FetchPush-v4", "fetch", 31, 4)
    assert info.layout.keys == ("achieved_goal", "desired_goal", "observation")
    assert info.max_episode_steps == 50
    assert env_info("fetch-push") is info  # cached
    hop = env_info("hopper")
    assert (hop.obs_dim, hop.action_dim, hop.layout) == (11, 3, None)
    kitchen = env_info("kitchen", {"tasks_to_complete": ["microwave", "kettle"]})
    assert kitchen.layout.keys[0] == "achieved_goal/kettle" and kitchen.obs_dim == 59 + 2 * (1 + 7)


# --------------------------------------------------------------------------- wrappers


@pytest.mark.parametrize("name,gym_id", [("pointmaze-umaze", "PointMaze_UMaze-v3"), ("kitchen", "FrankaKitchen-v1")])
def test_flatten_matches_flatlayout_of_raw_dict(name, gym_id):
    ensure_registered()
    raw = gym.make(gym_id)
    env = make_env(name)
    layout = _layout(env)
    try:
        assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (layout.size,), np.float32)
        raw_obs, _ = raw.reset(seed=4)
        obs, _ = env.reset(seed=4)
        np.testing.assert_array_equal(obs, layout.flatten(raw_obs))
        actions = np.random.default_rng(0).uniform(-1, 1, size=(3, raw.action_space.shape[0]))
        for a in actions:
            raw_obs = raw.step(a.astype(raw.action_space.dtype))[0]
            obs = env.step(a.astype(raw.action_space.dtype))[0]
            assert obs.dtype == np.float32 and obs.shape == (layout.size,)
            np.testing.assert_array_equal(obs, layout.flatten(raw_obs))
        parts = layout.unflatten(obs)
        np.testing.assert_array_equal(parts["observation"], np.asarray(raw_obs["observation"], np.float32))
    finally:
        raw.close()
        env.close()


def test_flatten_rejects_box_observations():
    with pytest.raises(ValueError):
        FlattenGoalObservation(gym.make("Hopper-v5"))


def test_action_chunk_sums_rewards_like_single_steps_and_stops_at_termination():
    te = 4
    chunked = make_env("hopper", seed=3, action_chunk=te)
    single = make_env("hopper", seed=3)
    assert chunked.action_space.shape == (te, 3)
    rng = np.random.default_rng(1)
    obs_c, _ = chunked.reset()
    obs_s, _ = single.reset()
    np.testing.assert_array_equal(obs_c, obs_s)
    ended = False
    for _ in range(500):
        chunk = rng.uniform(-1, 1, size=(te, 3)).astype(np.float32)
        obs_c, reward_c, term_c, trunc_c, info = chunked.step(chunk)
        rewards = []
        for a in chunk:
            obs_s, r, term_s, trunc_s, _ = single.step(a)
            rewards.append(float(r))
            if term_s or trunc_s:
                break
        total = 0.0
        for r in rewards:
            total += r
        assert reward_c == total  # exactly: same values, same order
        assert info["executed_steps"] == len(rewards)
        assert info["step_rewards"].shape == (te,)
        np.testing.assert_array_equal(info["step_rewards"][: len(rewards)], rewards)
        assert np.all(info["step_rewards"][len(rewards):] == 0.0)
        np.testing.assert_array_equal(obs_c, obs_s)
        assert (term_c, trunc_c) == (term_s, trunc_s)
        if term_c:
            ended = True
            break
    assert ended, "random actions should topple the hopper"
    with pytest.raises(ValueError):
        chunked.step(np.zeros(3, np.float32))
    with pytest.raises(ValueError):
        ActionChunk(chunked, 0)


def test_action_chunk_stops_at_time_limit():
    env = make_env("pointmaze-umaze", seed=0, action_chunk=5, max_episode_steps=7)
    env.reset()
    _, _, _, truncated, info = env.step(np.zeros((5, 2), np.float32))
    assert not truncated and info["executed_steps"] == 5
    _, _, _, truncated, info = env.step(np.zeros((5, 2), np.float32))
    assert truncated and info["executed_steps"] == 2


def test_rescale_actions_uses_gymnasium_wrapper():
    env = make_env("fetch-reach", rescale_actions=True, action_chunk=2)
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1)
    assert isinstance(env.env, gym.wrappers.RescaleAction)


# --------------------------------------------------------------------------- success


def test_success_info_pointmaze_goal_reached_by_pd_controller():
    env = make_env("pointmaze-umaze", seed=0)
    layout = _layout(env)
    obs, info = env.reset(options={"reset_cell": [1, 1], "goal_cell": [1, 2]})
    assert not info["success"]
    start = layout.unflatten(obs)["achieved_goal"].copy()

    def pd(obs, target):
        state = layout.unflatten(obs)["observation"]
        return np.clip(10.0 * (target - state[:2]) - state[2:], -1, 1)

    reached = False
    for _ in range(150):
        goal = layout.unflatten(obs)["desired_goal"]
        obs, reward, _, _, info = env.step(pd(obs, goal))
        if info["success"]:
            reached = True
            assert reward == 1.0
            break
    assert reached and info["episode_success"]
    # drive back to the start cell: success drops, episode_success stays True
    for _ in range(120):
        obs, _, _, _, info = env.step(pd(obs, start))
    assert np.linalg.norm(layout.unflatten(obs)["achieved_goal"] - goal) > 0.45
    assert not info["success"] and info["episode_success"]
    _, info = env.reset()
    assert not info["episode_success"]


def test_success_info_fetch_reach_by_p_controller():
    env = make_env("fetch-reach", seed=1)
    layout = _layout(env)
    obs, _ = env.reset()
    for _ in range(40):
        parts = layout.unflatten(obs)
        action = np.zeros(4, np.float32)
        action[:3] = np.clip(10.0 * (parts["desired_goal"] - parts["achieved_goal"]), -1, 1)
        obs, _, _, _, info = env.step(action)
        if info["success"]:
            break
    assert info["success"] is True and info["episode_success"] is True


def test_success_info_kitchen_all_tasks_completed():
    import mujoco

    env = make_env("kitchen", seed=0, env_kwargs={"tasks_to_complete": ["microwave"]})
    _, info = env.reset()
    assert not info["success"] and info["tasks_to_complete"] == ["microwave"]
    base = env.unwrapped
    base.data.qpos[22] = -0.75  # microwave door at its goal angle (kitchen_env OBS_ELEMENT_INDICES)
    mujoco.mj_forward(base.model, base.data)
    _, _, terminated, _, info = env.step(np.zeros(9))
    assert info["success"] and info["episode_success"] and terminated
    assert info["episode_task_completions"] == ["microwave"]
    env.close()


# --------------------------------------------------------------------------- seeding / vector


def test_seeding_is_reproducible():
    ensure_registered()
    a = make_env("pointmaze-umaze", seed=5)
    b = make_env("pointmaze-umaze", seed=5)
    c = make_env("pointmaze-umaze", seed=6)
    raw = gym.make("PointMaze_UMaze-v3")
    oa, _ = a.reset()
    ob, _ = b.reset()
    np.testing.assert_array_equal(oa, ob)
    np.testing.assert_array_equal(oa, _layout(a).flatten(raw.reset(seed=5)[0]))
    assert not np.array_equal(oa, c.reset()[0])
    for _ in range(5):
        act_a, act_b = a.action_space.sample(), b.action_space.sample()
        np.testing.assert_array_equal(act_a, act_b)
        np.testing.assert_array_equal(a.step(act_a)[0], b.step(act_b)[0])
    # a second reset without a seed continues the seeded generator identically
    np.testing.assert_array_equal(a.reset()[0], b.reset()[0])


def test_sync_and_async_vector_envs_agree():
    sync = make_env("pointmaze-umaze", num_envs=2, seed=11, vectorization="sync")
    asyn = make_env("pointmaze-umaze", num_envs=2, seed=11, vectorization="async")
    try:
        assert isinstance(sync, gym.vector.SyncVectorEnv) and isinstance(asyn, gym.vector.AsyncVectorEnv)
        o_s, i_s = sync.reset()
        o_a, i_a = asyn.reset()
        assert o_s.shape == (2, 8) and o_s.dtype == np.float32
        np.testing.assert_array_equal(o_s, o_a)
        assert not np.array_equal(o_s[0], o_s[1])
        # sub-env i is seeded with seed + i
        for i in range(2):
            np.testing.assert_array_equal(o_s[i], make_env("pointmaze-umaze", seed=11 + i).reset()[0])
        actions = np.random.default_rng(0).uniform(-1, 1, size=(5, 2, 2)).astype(np.float32)
        for a in actions:
            s, a_ = sync.step(a), asyn.step(a)
            np.testing.assert_array_equal(s[0], a_[0])
            np.testing.assert_array_equal(s[1], a_[1])
            np.testing.assert_array_equal(s[4]["success"], a_[4]["success"])
    finally:
        sync.close()
        asyn.close()


def test_default_vectorization():
    assert not isinstance(make_env("hopper"), gym.vector.VectorEnv)
    one = make_env("hopper", vectorization="sync")
    assert isinstance(one, gym.vector.SyncVectorEnv) and one.num_envs == 1
    venv = make_env("hopper", num_envs=3, seed=0, action_chunk=2)
    assert isinstance(venv, gym.vector.SyncVectorEnv)
    venv.reset()
    _, rewards, _, _, info = venv.step(np.zeros((3, 2, 3), np.float32))
    assert rewards.shape == (3,) and info["step_rewards"].shape == (3, 2)
    with pytest.raises(TypeError):
        make_eval_env("hopper", num_envs=2)


# --------------------------------------------------------------------------- video


@pytest.mark.skipif(
    not osmesa_available(),
    reason="libOSMesa not found: headless MuJoCo rendering needs the Debian package libosmesa6",
)
def test_video_recording_writes_a_gif(tmp_path):
    import imageio

    env = make_eval_env(
        "pointmaze-umaze",
        seed=0,
        max_episode_steps=6,
        record_video_dir=tmp_path,
        env_kwargs={"width": 48, "height": 48},
    )
    env.reset()
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    paths = env.get_wrapper_attr("paths")
    env.close()
    assert len(paths) == 1 and paths[0].suffix == ".gif" and paths[0].stat().st_size > 0
    frames = imageio.v3.imread(paths[0])
    # Pillow merges identical consecutive frames, so at most 7 (reset + 6 steps)
    assert frames.ndim == 4 and frames.shape[1:] == (48, 48, 3) and 2 <= frames.shape[0] <= 7
    assert frames.std() > 0  # not a blank image


@pytest.mark.skipif(importlib.util.find_spec("imageio_ffmpeg") is not None,
                    reason="imageio-ffmpeg is installed: MP4 works, there is no missing-encoder error to check")
def test_mp4_without_encoder_gives_clear_error(tmp_path):
    with pytest.raises(RenderingError, match="imageio-ffmpeg"):
        make_env("hopper", record_video_dir=tmp_path, video_format="mp4")
