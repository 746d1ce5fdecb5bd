"""Dataset recipes on real envs with tiny budgets: each family writes a Minari dataset
with the expected metadata; the PointMaze planner and the Fetch push expert work."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import minari
import numpy as np
import pytest

from robotrl.collect import RECIPES, collect, ensure_dataset
from robotrl.errors import ConfigError


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    return tmp_path


def _meta(ds):
    meta = ds.storage.metadata
    return meta, json.loads(meta["robotrl_provenance"])


def _eval_spec(ds):
    from gymnasium.envs.registration import EnvSpec

    return EnvSpec.from_json(ds.storage.metadata["eval_env_spec"])


def _episodes(ds):
    return list(ds.iterate_episodes())


def test_pointmaze_umaze_dataset(root):
    from robotrl.collect import collect_pointmaze

    path = collect_pointmaze("umaze", num_steps=3000, seed=0, ref_episodes=5, progress=False)
    assert path == root / "robotrl/pointmaze/umaze-v1"
    ds = minari.load_dataset("robotrl/pointmaze/umaze-v1")
    meta, prov = _meta(ds)
    assert ds.total_steps == 3000
    assert prov["recipe"] == "pointmaze-umaze" and prov["action_noise_std"] == 0.5 and prov["action_scale"] == 1.0
    # the task env: goal reaching, reward 1 and termination at the goal, sparse reward; evaluated in the same env
    assert ds.spec.env_spec.id == "PointMaze_UMaze-v3"
    kw = ds.spec.env_spec.kwargs
    assert kw["continuing_task"] is False and kw["reset_target"] is False and kw["reward_type"] == "sparse"
    ev = _eval_spec(ds)
    assert ev.id == "PointMaze_UMaze-v3" and ev.kwargs == ds.spec.env_spec.kwargs
    assert meta["ref_max_score"] > meta["ref_min_score"] + 0.5  # the planner reaches its goals, random rarely does
    eps = _episodes(ds)
    for ep in eps[:-1]:
        T = len(ep.rewards)
        assert ep.observations["observation"].shape == (T + 1, 4)
        assert ep.observations["desired_goal"].shape == (T + 1, 2)
        assert ep.terminations[-1] != ep.truncations[-1] and not (ep.terminations[:-1] | ep.truncations[:-1]).any()
        assert ep.infos["success"].shape[0] == T + 1
        assert np.abs(ep.actions).max() <= 1.0
        assert ep.rewards.sum() == ep.terminations.sum()  # one reward, where the goal is reached
    # the noisy planner reaches its goal in most episodes
    assert np.mean([ep.terminations.any() for ep in eps]) >= 0.8


def test_pointmaze_slow_demonstrator_is_slower():
    from robotrl.collect._common import mean_return
    from robotrl.collect.pointmaze import MAZES, TASK_KWARGS, MazePlanner

    from robotrl.collect._common import make_env

    env = make_env(MAZES["umaze"], **TASK_KWARGS)
    fast = mean_return(env.spec, lambda e: MazePlanner(e.unwrapped.maze), 10, success_key="success")
    slow = mean_return(env.spec, lambda e: MazePlanner(e.unwrapped.maze, action_scale=0.1,
                                                       rng=np.random.default_rng(0)), 10, success_key="success")
    env.close()
    assert fast["success_rate"] == 1.0 and slow["success_rate"] < fast["success_rate"]


def test_pointmaze_planner_reaches_goal():
    from robotrl.collect._common import make_env, mean_return
    from robotrl.collect.pointmaze import MAZES, TASK_KWARGS, MazePlanner

    for maze in ("umaze", "medium"):
        env = make_env(MAZES[maze], **TASK_KWARGS)
        res = mean_return(env.spec, lambda e: MazePlanner(e.unwrapped.maze), 6, success_key="success")
        env.close()
        assert res["success_rate"] >= 5 / 6, (maze, res)


def test_pointmaze_hover_records_near_misses_on_every_side_of_the_goal():
    """``hover_radius``: once at the goal the planner keeps moving around it, so a continuing recording (a success
    classifier's) holds frames inside the 0.45 m success radius and near misses just outside it, in several
    directions; without it the ball sits at the goal and no frame after arrival is a near miss."""
    from robotrl.collect._common import make_env
    from robotrl.collect.pointmaze import MAZES, MazePlanner

    def after_arrival(hover: float) -> tuple[np.ndarray, np.ndarray]:
        env = make_env(MAZES["umaze"], continuing_task=True, reset_target=False, max_episode_steps=400)
        planner = MazePlanner(env.unwrapped.maze, hover_radius=hover, rng=np.random.default_rng(0))
        obs, _ = env.reset(seed=3)
        planner.reset()
        offsets, success, arrived = [], [], False
        for _ in range(400):
            obs, _, _, _, info = env.step(planner(obs))
            arrived = arrived or bool(info["success"])
            if arrived:
                offsets.append(obs["achieved_goal"] - obs["desired_goal"])
                success.append(bool(info["success"]))
        env.close()
        return np.asarray(offsets), np.asarray(success)

    off, ok = after_arrival(1.0)
    dist = np.linalg.norm(off, axis=1)
    near_miss = ~ok & (dist < 0.8)
    assert ok.sum() >= 50 and near_miss.sum() >= 20, (ok.sum(), near_miss.sum())
    angles = np.arctan2(off[near_miss, 1], off[near_miss, 0])
    assert np.unique(np.floor((angles + np.pi) / (np.pi / 2))).size >= 2  # misses in at least two quadrants
    off0, ok0 = after_arrival(0.0)
    assert ok0.all()  # holding the goal: never outside the radius again


def test_fetch_push_expert_and_noisy(root):
    from robotrl.collect import collect_fetch

    collect_fetch("push", "expert", num_episodes=12, ref_episodes=4, progress=False)
    collect_fetch("push", "noisy", num_episodes=12, ref_episodes=4, progress=False)
    exp = minari.load_dataset("robotrl/fetch-push/expert-v0")
    noisy = minari.load_dataset("robotrl/fetch-push/noisy-v0")
    meta, prov = _meta(exp)
    assert exp.spec.env_spec.id == "FetchPush-v4" and _eval_spec(exp).id == "FetchPush-v4"
    assert meta["ref_min_score"] < meta["ref_max_score"] <= 0.0
    assert prov["recipe"] == "fetch-push-expert" and prov["noise_sigma"] == 0.0
    exp_eps, noisy_eps = _episodes(exp), _episodes(noisy)
    assert all(len(ep.rewards) == 50 and ep.truncations[-1] and not ep.terminations.any() for ep in exp_eps)
    assert set(exp_eps[0].observations) == {"observation", "achieved_goal", "desired_goal"}
    exp_success = np.mean([ep.infos["success"][-1] for ep in exp_eps])
    assert exp_success >= 0.75, exp_success
    assert not any(ep.infos["noisy"].any() for ep in exp_eps) and all(ep.infos["noisy"].all() for ep in noisy_eps)
    exp_ret = np.mean([ep.rewards.sum() for ep in exp_eps])
    noisy_ret = np.mean([ep.rewards.sum() for ep in noisy_eps])
    assert noisy_ret < exp_ret - 3, (noisy_ret, exp_ret)
    _, nprov = _meta(noisy)
    assert nprov["noise_sigma"] > 0 and nprov["random_action_epsilon"] > 0


def test_fetch_pickandplace_mixed(root):
    path = collect("fetch-pickandplace-mixed", num_episodes=6, ref_episodes=3, progress=False)
    assert path == root / "robotrl/fetch-pickandplace/mixed-v0"
    ds = minari.load_dataset("robotrl/fetch-pickandplace/mixed-v0")
    meta, prov = _meta(ds)
    assert ds.spec.env_spec.id == "FetchPickAndPlace-v4"
    assert prov["quality"] == "mixed" and meta["ref_max_score"] > meta["ref_min_score"]
    assert prov["ref_expert"]["success_rate"] >= 2 / 3
    flags = [bool(ep.infos["noisy"][0]) for ep in _episodes(ds)]
    assert flags == [False, True] * 3


@pytest.mark.slow
def test_locomotion_random_medium_expert_reuse_policy(root):
    from robotrl.collect import collect_locomotion
    from robotrl.collect.locomotion import D4RL_REF_SCORES

    collect_locomotion("hopper", "random", num_steps=1500, progress=False)
    ds = minari.load_dataset("robotrl/hopper/random-v0")
    meta, prov = _meta(ds)
    assert ds.total_steps == 1500 and ds.spec.env_spec.id == "Hopper-v5" and _eval_spec(ds).id == "Hopper-v5"
    assert (meta["ref_min_score"], meta["ref_max_score"]) == D4RL_REF_SCORES["hopper"]
    eps = _episodes(ds)
    assert eps[0].terminations[-1]  # a random hopper falls over quickly
    assert eps[-1].truncations[-1] or eps[-1].terminations[-1]
    assert eps[0].observations.shape == (len(eps[0].rewards) + 1, 11)

    tiny = dict(num_steps=600, train_steps=2048, n_envs=2, eval_episodes=1, progress=False)
    collect_locomotion("hopper", "medium", **tiny)
    index = root / "robotrl/hopper/.policies/ppo-2048-s0/index.json"
    assert index.exists() and list(index.parent.glob("*.zip"))
    stamp = index.stat().st_mtime_ns
    collect_locomotion("hopper", "expert", **tiny)
    assert index.stat().st_mtime_ns == stamp  # the trained model was reused, not retrained
    _, mprov = _meta(minari.load_dataset("robotrl/hopper/medium-v0"))
    _, eprov = _meta(minari.load_dataset("robotrl/hopper/expert-v0"))
    assert mprov["training_reused"] is False and eprov["training_reused"] is True
    assert eprov["policy_eval_mean_return"] >= mprov["policy_eval_mean_return"]
    assert eprov["policy_model"].endswith(".zip")
    assert "robotrl/hopper/.policies" not in "".join(minari.list_local_datasets())


def test_ensure_dataset_generates_once(root, monkeypatch):
    import robotrl.collect.pointmaze as pm

    dataset_id = ensure_dataset("pointmaze-umaze", num_steps=400, ref_episodes=2, progress=False)
    assert dataset_id == "robotrl/pointmaze/umaze-v1"
    meta_file = root / dataset_id / "data/metadata.json"
    stamp = meta_file.stat().st_mtime_ns

    def boom(**kwargs):
        raise AssertionError("ensure_dataset regenerated an existing dataset")

    monkeypatch.setattr(pm, "collect_pointmaze", boom)
    assert ensure_dataset("pointmaze-umaze", num_steps=400) == dataset_id
    assert meta_file.stat().st_mtime_ns == stamp
    assert minari.load_dataset(dataset_id).total_steps == 400


@pytest.mark.slow
def test_processes_started_together_generate_a_dataset_once(root):
    """Two real processes ask for the same missing dataset at once (a parallel multirun): one
    generates it, the other waits on the lock and loads it; both get the same valid dataset."""
    code = ("from robotrl.collect import ensure_dataset; "
            "print(ensure_dataset('pointmaze-umaze', num_steps=400, ref_episodes=2, progress=False))")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(root)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err[-2000:]
        assert out.strip().splitlines()[-1] == "robotrl/pointmaze/umaze-v1"
    assert minari.load_dataset("robotrl/pointmaze/umaze-v1").total_steps == 400
    assert not [d for d in (root / "robotrl" / "pointmaze").iterdir() if d.name.startswith(".") and d.is_dir()]


def test_unknown_recipe_lists_known_names():
    with pytest.raises(ConfigError, match="known recipes: .*hopper-medium"):
        ensure_dataset("hopper-legendary")
    with pytest.raises(ConfigError, match="pointmaze-umaze"):
        collect("nope")


def test_recipe_names():
    expected = {f"pointmaze-{m}{s}" for m in ("umaze", "medium", "large") for s in ("", "-slow", "-noisy")}
    expected |= {f"fetch-{t}-{q}" for t in ("push", "pickandplace") for q in ("expert", "noisy", "mixed")}
    expected |= {f"{e}-{q}" for e in ("hopper", "halfcheetah", "walker2d") for q in ("random", "medium", "expert")}
    assert set(RECIPES) == expected


def test_bad_arguments_raise_config_error(root):
    from robotrl.collect import collect_fetch, collect_locomotion, collect_pointmaze

    with pytest.raises(ConfigError):
        collect_pointmaze("spiral", num_steps=10)
    with pytest.raises(ConfigError):
        collect_fetch("push", "sloppy", num_episodes=1)
    with pytest.raises(ConfigError):
        collect_locomotion("ant", "random", num_steps=10)
