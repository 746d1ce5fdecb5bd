"""The online and evaluation MDP is the data's MDP, for every dataset recipe.

For each recipe (tiny budgets, real MuJoCo, real Minari files): the training envs that
``build_trainer`` makes for the online phase and its evaluation env have the recorded
env id and kwargs, and the rewards of the recorded transitions, recomputed by that env,
equal the recorded ones (goal envs: ``compute_reward``; locomotion: reset with the
episode's seed and replay its actions). A configured env that pays other rewards is
refused with a ConfigError that names the way out.
"""

from __future__ import annotations

import json

import gymnasium as gym
import minari
import numpy as np
import pytest
from hydra import compose, initialize_config_module

from robotrl.collect import RECIPES, collect
from robotrl.errors import ConfigError
from robotrl.experiment import build_trainer
from robotrl.task_mdp import task_env_args

# recipe -> (env config, dataset config, recipe overrides). Locomotion medium/expert record with the same
# env as random (one collection env per task, only the acting policy differs) and would train PPO first.
CASES = {
    "pointmaze-umaze": ("pointmaze-umaze", "pointmaze-umaze-planner", dict(num_steps=1500)),
    "pointmaze-umaze-slow": ("pointmaze-umaze", "pointmaze-umaze", dict(num_steps=1500)),
    "pointmaze-umaze-noisy": ("pointmaze-umaze", "pointmaze-umaze-noisy", dict(num_steps=1500)),
    "pointmaze-medium": ("pointmaze-medium", "pointmaze-medium-planner", dict(num_steps=1500)),
    "pointmaze-medium-slow": ("pointmaze-medium", "pointmaze-medium", dict(num_steps=1500)),
    "pointmaze-medium-noisy": ("pointmaze-medium", "pointmaze-medium-noisy", dict(num_steps=1500)),
    "pointmaze-large": ("pointmaze-large", "pointmaze-large-planner", dict(num_steps=1500)),
    "pointmaze-large-slow": ("pointmaze-large", "pointmaze-large", dict(num_steps=1500)),
    "pointmaze-large-noisy": ("pointmaze-large", "pointmaze-large-noisy", dict(num_steps=1500)),
    "fetch-push-expert": ("fetch-push", "fetch-push-expert", dict(num_episodes=3)),
    "fetch-push-noisy": ("fetch-push", "fetch-push-noisy", dict(num_episodes=3)),
    "fetch-push-mixed": ("fetch-push", "fetch-push-mixed", dict(num_episodes=3)),
    "fetch-pickandplace-expert": ("fetch-pickandplace", "fetch-pickandplace-expert", dict(num_episodes=3)),
    "fetch-pickandplace-noisy": ("fetch-pickandplace", "fetch-pickandplace-noisy", dict(num_episodes=3)),
    "fetch-pickandplace-mixed": ("fetch-pickandplace", "fetch-pickandplace-mixed", dict(num_episodes=3)),
    "hopper-random": ("hopper", "hopper-random", dict(num_steps=400)),
    "halfcheetah-random": ("halfcheetah", "halfcheetah-random", dict(num_steps=400)),
    "walker2d-random": ("walker2d", "walker2d-random", dict(num_steps=400)),
}
SAME_ENV_AS = {f"{e}-{q}": f"{e}-random" for e in ("hopper", "halfcheetah", "walker2d") for q in ("medium", "expert")}


def _compose(overrides):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_every_recipe_is_covered():
    assert set(RECIPES) == set(CASES) | set(SAME_ENV_AS)


def _recorded_spec(dataset_id):
    meta = minari.load_dataset(dataset_id).storage.metadata
    return json.loads(meta["env_spec"])


def _time_limit(env: gym.Env) -> int | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return env._max_episode_steps
        env = env.env
    return None


def _check_rewards(env: gym.Env, dataset_id: str) -> int:
    """Recompute every recorded reward with ``env``; returns the number of transitions checked."""
    u = env.unwrapped
    n = 0
    ds = minari.load_dataset(dataset_id)
    seeds = [m["seed"] for m in ds.storage.get_episode_metadata(range(ds.total_episodes))]
    for ep in ds.iterate_episodes():
        obs = ep.observations
        if isinstance(obs, dict):  # goal env: the reward of s_{t+1}'s achieved goal w.r.t. the desired goal
            ag, dg = np.asarray(obs["achieved_goal"][1:]), np.asarray(obs["desired_goal"][1:])
            r = u.compute_reward(ag, dg, [{}] * len(ag) if "Fetch" in env.spec.id else {})
            np.testing.assert_allclose(np.asarray(r, np.float64), ep.rewards, atol=1e-9)
            if hasattr(u, "compute_terminated"):
                term = [bool(u.compute_terminated(a, d, {})) for a, d in zip(ag, dg)]
                assert term == list(map(bool, ep.terminations))
        else:  # locomotion: restore the episode's start state through its seed and replay its actions
            o, _ = env.reset(seed=int(seeds[ep.id]))
            np.testing.assert_allclose(o, obs[0], atol=1e-6)
            for t, a in enumerate(ep.actions):
                o, r, term, _, _ = env.step(a)
                np.testing.assert_allclose(r, ep.rewards[t], rtol=1e-6, atol=1e-6)
                assert bool(term) == bool(ep.terminations[t])
        n += len(ep.rewards)
    return n


@pytest.mark.parametrize("recipe", sorted(CASES))
def test_online_and_eval_envs_are_the_datas_mdp(recipe, minari_root, tmp_path):
    env_name, ds_name, args = CASES[recipe]
    extra = {} if "num_steps" in args and not recipe.startswith("pointmaze") else {"ref_episodes": 2}
    dataset_id = collect(recipe, progress=False, **extra, **args).relative_to(minari_root).as_posix()
    cfg = _compose(["agent=sac", f"env={env_name}", f"dataset={ds_name}", f"dataset.id={dataset_id}",
                    "dataset.generate=false", "trainer.offline_steps=0", "trainer.online_steps=10",
                    # the run names the recipe arguments its dataset was made with (a reuse with others is refused)
                    *[f"++dataset.recipe_args.{k}={v}" for k, v in {**extra, **args}.items()],
                    "agent.model.num_critics=2", "agent.model.hidden=[32]", "agent.model.critic_hidden=[32]"])
    trainer = build_trainer(cfg, tmp_path / "run")
    recorded = _recorded_spec(dataset_id)
    envs = trainer.make_train_envs()
    try:
        for made in [envs.envs[0], trainer.make_eval_env()]:
            spec = made.unwrapped.spec
            assert spec.id == recorded["id"]
            assert {k: spec.kwargs[k] for k in recorded["kwargs"]} == recorded["kwargs"]
            assert _time_limit(made) == recorded["max_episode_steps"]
            assert _check_rewards(gym.make(spec.id, **spec.kwargs), dataset_id) > 0
    finally:
        envs.close()


def test_pointmaze_task_pays_one_reward_per_episode_and_terminates(minari_root):
    path = collect("pointmaze-umaze", num_steps=3000, progress=False, ref_episodes=2)
    for ep in minari.load_dataset(path.relative_to(minari_root).as_posix()).iterate_episodes():
        assert ep.rewards.sum() == ep.terminations.sum() <= 1  # reward 1 exactly where the goal ends the episode
        if ep.terminations.any():
            assert ep.terminations[-1] and ep.rewards[-1] == 1


def test_a_configured_env_with_other_rewards_is_refused(minari_root, tmp_path):
    path = collect("pointmaze-umaze", num_steps=1000, progress=False, ref_episodes=2)
    dataset_id = path.relative_to(minari_root).as_posix()
    base = ["env=pointmaze-umaze", f"dataset.id={dataset_id}", "dataset.generate=false"]
    data = __import__("robotrl.data", fromlist=["load_dataset"]).load_dataset(dataset_id)
    for extra in (["env.kwargs.continuing_task=true"], ["env.kwargs.reward_type=dense"], ["env.name=PointMaze_Medium-v3"],
                  ["env.max_episode_steps=100"]):
        with pytest.raises(ConfigError, match="match_dataset=false"):
            task_env_args(_compose(base + ["+" + e if e.startswith("env.kwargs") else e for e in extra]).env, data)
    # opting out uses the configured env as given
    ok = task_env_args(_compose(base + ["+env.kwargs.continuing_task=true", "env.match_dataset=false"]).env, data)
    assert ok["env_kwargs"]["continuing_task"] is True
    # render settings are not part of the MDP
    ok = task_env_args(_compose(base + ["+env.kwargs.render_mode=rgb_array"]).env, data)
    assert ok["name"] == "PointMaze_UMaze-v3" and ok["env_kwargs"]["render_mode"] == "rgb_array"
