"""Camera observations from the envs: ``make_env(..., pixels=...)`` and the recipes with cameras.

Round trip on real MuJoCo renders (OSMesa): a PointMaze/Fetch recipe records frames into a
Minari dataset; replaying the recorded actions in a fresh ``make_env(..., pixels=...)``
renders the same frames bit for bit; the replay buffer built from the dataset returns them
bit-exact in sampled batches (observation and next observation).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

import gymnasium as gym  # noqa: E402

from robotrl.data import ReplayBuffer, load_dataset  # noqa: E402
from robotrl.envs import make_env, osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")


def test_pointmaze_pixels_dict_observation_keeps_goal_keys():
    env = make_env("pointmaze-umaze", pixels=["topdown"], size=48, seed=0)
    space = env.observation_space
    assert isinstance(space, gym.spaces.Dict)
    assert set(space.spaces) == {"achieved_goal", "desired_goal", "observation", "pixels"}
    assert space["pixels"]["topdown"] == gym.spaces.Box(0, 255, (48, 48, 3), np.uint8)
    obs, _ = env.reset()
    frames = [obs["pixels"]["topdown"]]
    for _ in range(15):
        obs, *_ = env.step(np.ones(2, np.float32))
        frames.append(obs["pixels"]["topdown"])
    env.close()
    assert all(f.dtype == np.uint8 and f.shape == (48, 48, 3) for f in frames)
    assert frames[0].std() > 0  # a real render, not blank
    assert not np.array_equal(frames[0], frames[-1])  # the ball moved: frames follow the state
    assert frames[0] is not frames[1] and not np.shares_memory(frames[-2], frames[-1])  # fresh arrays


def test_fetch_two_cameras_in_a_vector_env_and_box_task_state_key():
    venv = make_env("fetch-push", pixels=["external_camera_0", "gripper_camera_rgb"], size=32, num_envs=2, seed=0)
    obs, _ = venv.reset()
    assert obs["pixels"]["external_camera_0"].shape == (2, 32, 32, 3)
    assert obs["pixels"]["gripper_camera_rgb"].dtype == np.uint8
    assert obs["observation"].shape == (2, 25)
    venv.close()
    env = make_env("hopper", pixels="track", size=(24, 40), seed=0)
    obs, _ = env.reset()
    assert set(obs) == {"state", "pixels"} and obs["pixels"]["track"].shape == (24, 40, 3)
    env.close()


def test_same_seed_same_frames():
    def run():
        env = make_env("fetch-push", pixels=["external_camera_0"], size=32, seed=3)
        obs, _ = env.reset()
        out = [obs["pixels"]["external_camera_0"]]
        for k in range(5):
            obs, *_ = env.step(np.full(4, 0.5 - 0.2 * k, np.float32))
            out.append(obs["pixels"]["external_camera_0"])
        env.close()
        return np.stack(out)

    np.testing.assert_array_equal(run(), run())


def test_bad_cameras_raise_config_error_naming_the_way_out():
    with pytest.raises(ConfigError, match="external_camera_0"):
        make_env("fetch-push", pixels=["nope"])  # lists the model's cameras
    with pytest.raises(ConfigError, match="offscreen"):
        make_env("pointmaze-umaze", pixels=["topdown"], size=4096)
    with pytest.raises(ConfigError, match="no camera"):
        make_env("pointmaze-umaze", pixels=[])
    with pytest.raises(ConfigError, match="twice"):
        make_env("pointmaze-umaze", pixels=["topdown", "topdown"])


def _replay_frames(name, camera, size, episodes, seeds, **kw):
    """Re-render each episode by replaying its recorded actions from its reset seed."""
    env = make_env(name, pixels=[camera], size=size, **kw)
    out = []
    for (acts, T), seed in zip(episodes, seeds):
        obs, _ = env.reset(seed=seed)
        frames = [obs["pixels"][camera]]
        for t in range(T):
            obs, *_ = env.step(acts[t])
            frames.append(obs["pixels"][camera])
        out.append(np.stack(frames))
    env.close()
    return out


def _episodes(data):
    return [(data.actions[s:e], int(e - s)) for s, e in zip(data.episode_starts, data.episode_ends)]


def _check_buffer_bit_exact(data, key):
    buf = ReplayBuffer.from_offline(data, seed=0)
    idx = np.arange(data.num_transitions)
    batch = buf.sample(data.num_transitions, indices=idx)
    frames = data.images[key]
    np.testing.assert_array_equal(batch.images()[key].numpy(), frames[data.image_index])
    np.testing.assert_array_equal(batch.next_images()[key].numpy(), frames[data.image_index + 1])
    seq = buf.sample_sequences(8, 2, 3, indices=idx[:8])
    assert seq.images()[key].shape == (8, 2, *frames.shape[1:])
    return buf


@pytest.mark.slow
def test_pointmaze_recipe_with_cameras_round_trip_bit_exact(tmp_path):
    from robotrl.collect import collect

    collect("pointmaze-umaze-slow", cameras=["topdown"], image_size=32, num_steps=120, seed=5, root=tmp_path,
            ref_episodes=1, progress=False, dataset_id="cam/pointmaze-v0")
    data = load_dataset(tmp_path / "cam/pointmaze-v0")
    M, E = data.num_transitions, data.num_episodes
    assert M == 120 and data.images["pixels/topdown"].shape == (M + E, 32, 32, 3)
    assert data.obs_layout.keys == ("achieved_goal", "desired_goal", "observation")  # cameras out of the flat vector
    # env -> recording -> Minari: a fresh pixel env replaying the actions renders the stored frames bit for bit
    replayed = _replay_frames("pointmaze-umaze", "topdown", 32, _episodes(data), [5 + k for k in range(E)],
                              max_episode_steps=150)
    np.testing.assert_array_equal(np.concatenate(replayed), data.images["pixels/topdown"])
    # Minari -> buffer -> batch
    buf = _check_buffer_bit_exact(data, "pixels/topdown")
    frame = 32 * 32 * 3
    stored = buf.image_bytes() / M
    naive_uint8, naive_float = 2 * frame, 2 * frame * 4  # obs + next_obs copies
    assert stored <= frame * (M + E) / M + 1e-9  # one frame per transition (+ one per episode end)
    assert naive_uint8 / stored > 1.9 and naive_float / stored > 7.5


@pytest.mark.slow
def test_fetch_recipe_with_cameras_round_trip_bit_exact(tmp_path):
    from robotrl.collect import collect

    collect("fetch-push-noisy", cameras=["external_camera_0"], image_size=32, num_episodes=2, seed=2, root=tmp_path,
            ref_episodes=1, progress=False, dataset_id="cam/fetch-v0")
    data = load_dataset(tmp_path / "cam/fetch-v0")
    assert data.num_episodes == 2 and data.images["pixels/external_camera_0"].shape == (102, 32, 32, 3)
    replayed = _replay_frames("fetch-push", "external_camera_0", 32, _episodes(data), [2, 3])
    np.testing.assert_array_equal(np.concatenate(replayed), data.images["pixels/external_camera_0"])
    _check_buffer_bit_exact(data, "pixels/external_camera_0")


def test_cameras_on_a_recipe_without_them_is_refused():
    from robotrl.collect import collect

    with pytest.raises(ConfigError, match="records no cameras"):
        collect("hopper-random", cameras=["track"])


def test_pixel_layout_splits_env_observations_like_the_data_layer(tmp_path):
    """What a pixel policy sees from the env equals what it trains on from the dataset."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.data import Episode, write_dataset
    from robotrl.vision.obs import pixel_layout

    env = make_env("pointmaze-umaze", pixels=["topdown"], size=24, seed=1)
    layout = pixel_layout(env.observation_space)
    assert layout.image_shapes == {"pixels/topdown": (24, 24, 3)} and layout.state_dim == 8
    obs, _ = env.reset()
    seq = [obs]
    for _ in range(4):
        seq.append(env.step(np.ones(2, np.float32))[0])
    state, images = layout.split(obs)
    assert state.shape == (8,) and images["pixels/topdown"].shape == (24, 24, 3)
    stacked = {k: np.stack([o[k] for o in seq]) for k in ("achieved_goal", "desired_goal", "observation")}
    stacked["pixels"] = {"topdown": np.stack([o["pixels"]["topdown"] for o in seq])}
    write_dataset("cam/split-v0", [Episode(stacked, np.ones((4, 2), np.float32), np.zeros(4), np.zeros(4, bool),
                                           np.eye(4, dtype=bool)[-1])],
                  observation_space=env.observation_space, action_space=env.action_space, root=tmp_path)
    data = load_dataset(tmp_path / "cam/split-v0")
    bstate, bimages = layout.split(stacked)
    np.testing.assert_array_equal(bstate[:-1], data.observations)
    np.testing.assert_array_equal(bimages["pixels/topdown"], data.images["pixels/topdown"])
    policy = BCPolicy(layout.state_dim, 2, image_shapes=layout.image_shapes, hidden=(16,), channels=4, feature_dim=8).eval()
    import torch

    a = policy(torch.from_numpy(state[None]), {k: torch.from_numpy(v[None]) for k, v in images.items()})
    assert a.shape == (1, 2)
    with pytest.raises(Exception, match="no camera"):
        layout.split({"achieved_goal": np.zeros(2), "desired_goal": np.zeros(2), "observation": np.zeros(4)})
    env.close()
