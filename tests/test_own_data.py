"""Your own dataset and your own env, end to end, as a user would (README: Train on your own data).

The datasets are written with Minari's own API (``minari.DataCollector``) for envs no robotrl
config names (``InvertedPendulum-v5``: Box observations; ``FetchReach-v4``: Dict
observations); training runs through the real ``robotrl train`` process and the real
configs, pretraining then fine-tuning with the experiments' default paths; and every error
of issue 12 is reproduced: a mistyped dataset id, an env that is not the data's, a
conflicting network override on a warm start, a bad schedule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robotrl.errors import ConfigError, DatasetNotFoundError

PENDULUM = "test/invpend/mixed-v0"
REACH = "test/fetchreach/noisy-v0"
#: CPU-sized networks and budgets (the path is under test, not the learning)
SMALL = ["agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
         "agent.model.target_subset=null", "agent.model.cql_n_actions=2", "trainer.eval_episodes=2",
         "trainer.eval_envs=2", "trainer.log_every=50", "trainer.progress=false"]


def _collect(env_id: str, dataset_id: str, episodes: int, policy, max_steps: int | None = None) -> None:
    """Write a dataset with Minari's own API (``create_dataset_from_buffers``; the env's spec is
    recorded by Minari), as a user with their own logs would — not with robotrl's writer."""
    import minari
    from minari.data_collector import EpisodeBuffer

    env = gym.make(env_id, max_episode_steps=max_steps) if max_steps else gym.make(env_id)
    rng = np.random.default_rng(0)
    buffers = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        observations, actions, rewards, terms, truncs = [obs], [], [], [], []
        done = False
        while not done:
            a = policy(obs, rng, env.action_space)
            obs, r, term, trunc, _ = env.step(a)
            observations.append(obs)
            actions.append(a)
            rewards.append(float(r))
            terms.append(bool(term))
            truncs.append(bool(trunc))
            done = term or trunc
        stacked = ({k: np.stack([o[k] for o in observations]) for k in observations[0]}
                   if isinstance(observations[0], dict) else np.stack(observations))
        buffers.append(EpisodeBuffer(id=ep, seed=ep, observations=stacked, actions=np.stack(actions), rewards=rewards,
                                     terminations=terms, truncations=truncs, infos={}))
    minari.create_dataset_from_buffers(dataset_id, buffers, env=env, algorithm_name="test policy",
                                       author="robotrl tests", author_email="tests@robotrl.invalid",
                                       code_permalink="https://example.invalid", description="issue 12",
                                       data_format="hdf5")
    env.close()


def _pendulum_policy(obs, rng, space):
    # a stabilising linear feedback with noise: episodes of varied length (a sub-optimal demonstrator)
    a = np.array([2.0 * obs[1] + 0.3 * obs[3] + 0.1 * obs[0]]) + rng.normal(0, 0.5, 1)
    return np.clip(a, space.low, space.high).astype(np.float32)


def _reach_policy(obs, rng, space):
    delta = obs["desired_goal"] - obs["achieved_goal"]
    a = np.concatenate([np.clip(10 * delta, -1, 1), [0.0]]) + rng.normal(0, 0.3, 4)
    return np.clip(a, space.low, space.high).astype(np.float32)


@pytest.fixture(scope="module")
def own_data(minari_module_root):
    """The user's datasets, written with Minari's API into this module's dataset root."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    _collect("InvertedPendulum-v5", PENDULUM, 30, _pendulum_policy, max_steps=100)
    _collect("FetchReach-v4", REACH, 10, _reach_policy)
    return minari_module_root


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _cli(args: list[str], cwd: Path, root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "MINARI_DATASETS_PATH": str(root), "PYTHONWARNINGS": "ignore"}
    return subprocess.run([sys.executable, "-m", "robotrl.cli", "train", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_offline_then_online_in_two_commands_on_a_minari_written_dataset(own_data, tmp_path):
    """``experiment=calql env=gym dataset.id=<own>`` then ``experiment=wsrl`` with the same two
    overrides: the env comes from the dataset, the warm start finds the pretraining run by the
    experiments' default paths and takes its architecture (not repeated), the report of the
    warm-started run starts online at 0 and shows no success for a task without one, and no
    second Hydra directory appears."""
    common = ["env=gym", f"dataset.id={PENDULUM}"]
    pre = _cli(["experiment=calql", *common, *SMALL, "trainer.offline_steps=200", "trainer.eval_every=200",
                "trainer.checkpoint_every=200"], tmp_path, own_data)
    assert pre.returncode == 0, pre.stderr[-3000:]
    pre_dir = tmp_path / "runs" / "pretrain" / "calql" / "test-invpend-mixed-v0" / "seed0"
    assert (pre_dir / "checkpoints" / "latest.pt").is_file()
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["pretrain"]  # run_dir is the one directory

    online = _cli(["experiment=wsrl", *common, "trainer.online_steps=300", "trainer.online_warmup_steps=100",
                   "trainer.batch_size=64", "trainer.eval_every=150", "trainer.checkpoint_every=150",
                   "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.log_every=50", "trainer.progress=true"],
                  tmp_path, own_data)
    assert online.returncode == 0, online.stderr[-3000:]
    assert "architecture taken from the checkpoint" in online.stdout and "hidden=[32, 32]" in online.stdout
    assert "[eval start (pretrained policy) step 0] return" in online.stderr + online.stdout
    assert "success" not in (online.stderr + online.stdout).split("run directory:")[0].replace("success_", "")
    [run] = list((tmp_path / "runs" / "wsrl_gym").iterdir())
    report = json.loads((run / "report.json").read_text())
    cfg = report["config"]
    assert cfg["derived"]["train_env"]["name"] == "InvertedPendulum-v5"
    assert cfg["derived"]["train_env"]["max_episode_steps"] == 100  # the data's time limit
    assert cfg["agent"]["model"]["hidden"] == [32, 32] and cfg["agent"]["model"]["num_critics"] == 2
    assert not any("success" in k for k in report["summary"]), report["summary"]
    assert "onset_dip_return" in report["summary"]

    from robotrl.report import online_start_step, plotted_metrics

    assert online_start_step(report["history"]) == 0  # the plot's "online starts" line
    assert plotted_metrics(report["history"]) == ["return_mean"]
    assert "success" not in (run / "report.md").read_text().split("## Evaluations")[1]


def test_dict_observations_train_offline_and_online_in_one_run(own_data, tmp_path):
    """A FetchReach dataset (Dict observations) written by Minari, no config naming FetchReach:
    BC offline then PPO online in one run (agent=bc-ppo), in the data's MDP."""
    from robotrl.experiment import build_trainer

    cfg = _compose(["agent=bc-ppo", "env=gym", f"dataset.id={REACH}", "agent.onpolicy.pretrain_steps=50",
                    "agent.onpolicy.iterations=1", "agent.onpolicy.num_envs=2", "agent.onpolicy.steps_per_iter=50",
                    "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2", "agent.model.hidden=[32,32]",
                    "agent.model.batch_size=50", "trainer.progress=false", f"run_dir={tmp_path}"])
    trainer = build_trainer(cfg, tmp_path, overrides=[])
    summary = trainer.fit()
    assert trainer.run_config["derived"]["train_env"]["name"] == "FetchReach-v4"
    assert trainer.run_config["derived"]["obs_dim"] == 10 + 3 + 3  # observation + achieved + desired goal
    assert summary["online_steps"] == 100 and 0.0 <= summary["final_success_rate"] <= 1.0


def test_mistyped_dataset_id_is_an_error_that_names_the_closest_and_generates_nothing(own_data, tmp_path):
    """Issue 12 items 1-2: a typo on a locomotion dataset config (empty recipe_args) is a clear
    error through the CLI; no expert is trained and nothing is written under the typo."""
    res = _cli(["experiment=bc", "env=gym", "dataset=walker2d-medium", "dataset.id=test/invpend/mixd-v0"],
               tmp_path, own_data)
    assert res.returncode == 2
    assert res.stderr.startswith("robotrl: error: dataset 'test/invpend/mixd-v0' is not present locally")
    assert "recipe 'walker2d-medium' writes 'robotrl/walker2d/medium-v0'" in res.stderr
    assert f"Closest names: {PENDULUM}" in res.stderr and f"Local datasets: {REACH}, {PENDULUM}." in res.stderr
    assert not (own_data / "test" / "invpend" / "mixd-v0").exists() and "Traceback" not in res.stderr


def test_only_a_recipes_own_id_or_its_variants_are_generated():
    from robotrl.collect.registry import recipe_writes

    assert recipe_writes("walker2d-medium", "robotrl/walker2d/medium-v0", has_args=False)
    assert not recipe_writes("walker2d-medium", "robotrl/walker2d/mediun-v0", has_args=False)
    assert not recipe_writes("walker2d-medium", "robotrl/walker2d/medium-big-v0", has_args=False)  # no args: no variant
    assert recipe_writes("fetch-push-noisy", "robotrl/fetch-push/noisy-20ep-v0", has_args=True)
    assert not recipe_writes("fetch-push-noisy", "robotrl/fetch-push/nosy-20ep-v0", has_args=True)
    assert not recipe_writes("fetch-push-noisy", "robotrl/fetch-push/noisy", has_args=True)  # no version
    assert recipe_writes("pointmaze-umaze", "robotrl/pointmaze/umaze-bench-v0", has_args=True)


def test_an_env_that_is_not_the_datas_is_an_error_naming_the_overrides(own_data, tmp_path):
    """Issue 12 item 3: a configured env other than the data's names the override to use."""
    from robotrl.experiment import build_trainer

    with pytest.raises(ConfigError, match=r"not the MDP dataset.*env=gym takes the dataset's env.*To train on "
                                          r"Walker2d-v5: env=walker2d \(selects its own dataset too\)"):
        build_trainer(_compose(["experiment=bc", "env=walker2d", "dataset=gym", f"dataset.id={PENDULUM}"]),
                      tmp_path, overrides=[])
    with pytest.raises(ConfigError, match=r"PointMaze_UMaze-v3.*To train on this dataset in its own env: env=gym"):
        build_trainer(_compose(["experiment=bc", f"dataset.id={PENDULUM}"]), tmp_path, overrides=[])
    with pytest.raises(ConfigError, match="env.name is not set"):
        build_trainer(_compose(["agent=ppo", "env=gym", "trainer.offline_steps=0", "trainer.offline_ratio=0"]),
                      tmp_path, overrides=[])


def test_experiments_follow_the_env_override():
    """``experiment=wsrl env=walker2d`` takes Walker2d's dataset, its reward semantics and the
    matching pretraining path, not another env's (item 3)."""
    cfg = _compose(["experiment=wsrl", "env=walker2d"])
    assert cfg.dataset.id == "robotrl/walker2d/medium-v0" and cfg.dataset.recipe == "walker2d-medium"
    assert cfg.trainer.init_from == "runs/pretrain/cql/robotrl-walker2d-medium-v0/seed0"
    assert (cfg.agent.reward_scale, cfg.agent.reward_bias) == (1.0, 0.0)
    cfg = _compose(["experiment=wsrl", "env=pointmaze-umaze", "seed=3"])
    assert cfg.trainer.init_from == "runs/pretrain/calql/robotrl-pointmaze-umaze-slow-v1/seed3"
    assert (cfg.agent.reward_scale, cfg.agent.reward_bias, cfg.agent.mc_sparse_fill) == (10.0, -5.0, 0.0)
    pre = _compose(["experiment=calql", "env=pointmaze-umaze", "seed=3"])
    assert pre.run_dir == cfg.trainer.init_from


def test_a_conflicting_network_override_on_a_warm_start_names_both(own_data, tmp_path):
    """Issue 12 item 4: the checkpoint's architecture is taken; an explicit other one is an error."""
    from robotrl.experiment import build_trainer, warm_start_architecture

    pre_dir = tmp_path / "pre"
    build_trainer(_compose(["experiment=bc", "env=gym", f"dataset.id={PENDULUM}", "agent.model.hidden=[16,16]",
                            "trainer.offline_steps=20", "trainer.eval_every=20", "trainer.checkpoint_every=20",
                            "trainer.eval_episodes=1", "trainer.progress=false", f"run_dir={pre_dir}"]),
                  pre_dir, overrides=[]).fit()
    ppo = ["experiment=ppo", "env=gym", f"dataset.id={PENDULUM}", f"trainer.init_from={pre_dir}"]
    taken = warm_start_architecture(_compose(ppo), overrides=ppo)
    assert list(taken.agent.model.hidden) == [16, 16]
    with pytest.raises(ConfigError, match=r"agent.model.hidden=\[64, 64\] conflicts with the warm-start checkpoint"
                                          r".*built with agent.model.hidden=\[16, 16\]"):
        warm_start_architecture(_compose([*ppo, "agent.model.hidden=[64,64]"]),
                                overrides=[*ppo, "agent.model.hidden=[64,64]"])




def test_a_warm_started_run_resumes_without_its_warm_start_source(own_data, tmp_path):
    """A resume is never warm-started again: its architecture comes from its own checkpoint, so a
    pretraining directory moved or deleted after the fine-tuning started does not stop the resume
    (before: the deleted source was read for the architecture and the resume built the defaults)."""
    import shutil

    from robotrl.experiment import build_trainer

    pre_dir, run_dir = tmp_path / "pre", tmp_path / "ft"
    build_trainer(_compose(["experiment=bc", "env=gym", f"dataset.id={PENDULUM}", "agent.model.hidden=[16,16]",
                            "trainer.offline_steps=20", "trainer.eval_every=20", "trainer.checkpoint_every=20",
                            "trainer.eval_episodes=1", "trainer.progress=false", f"run_dir={pre_dir}"]),
                  pre_dir, overrides=[]).fit()
    ppo = ["experiment=ppo", "env=gym", "env.name=InvertedPendulum-v5", f"dataset.id={PENDULUM}",
           f"trainer.init_from={pre_dir}", "agent.onpolicy.num_envs=2", "agent.onpolicy.steps_per_iter=8", "agent.onpolicy.eval_every=1",
           "agent.onpolicy.eval_episodes=1", "agent.onpolicy.eval_envs=1", "agent.onpolicy.checkpoint_every=1",
           "agent.model.critic_hidden=[16,16]", "trainer.progress=false", f"run_dir={run_dir}"]
    first = build_trainer(_compose([*ppo, "agent.onpolicy.iterations=1"]), run_dir, overrides=ppo)
    assert first.fit()["resumed"] is False
    shutil.rmtree(pre_dir)
    again = [*ppo, "agent.onpolicy.iterations=2"]
    second = build_trainer(_compose(again), run_dir, overrides=again)
    assert list(second.run_config["agent"]["model"]["hidden"]) == [16, 16]
    summary = second.fit()
    assert summary["resumed"] is True and summary["iterations"] == 2
@pytest.mark.parametrize("override, message", [
    ("trainer.offline_steps=-5", r"trainer.offline_steps=-5 must be a whole number >= 0"),
    ("trainer.batch_size=0", r"trainer.batch_size=0 must be a whole number >= 1"),
    ("trainer.offline_ratio=1.5", r"trainer.offline_ratio=1.5 must lie in \[0, 1\]"),
    ("agent.onpolicy.num_envs=0", r"agent.onpolicy.num_envs=0 must be a whole number >= 1"),
])
def test_bad_schedules_are_clear_errors(own_data, tmp_path, override, message):
    """Issue 12 item 7: negative or zero counts are refused before anything runs."""
    from robotrl.experiment import build_trainer

    agent = "agent=bc-ppo" if override.startswith("agent.onpolicy") else "agent=bc"
    with pytest.raises(ConfigError, match=message):
        build_trainer(_compose([agent, "env=gym", f"dataset.id={PENDULUM}", override]), tmp_path, overrides=[])
    assert not any(tmp_path.iterdir())


def test_no_dataset_id_is_a_clear_error(own_data, tmp_path):
    from robotrl.experiment import build_trainer

    with pytest.raises(ConfigError, match="dataset.id is not set"):
        build_trainer(_compose(["agent=bc", "env=gym"]), tmp_path, overrides=[])


def test_a_missing_id_without_recipe_lists_the_local_datasets(own_data, tmp_path):
    from robotrl.experiment import build_trainer

    with pytest.raises(DatasetNotFoundError, match=r"names no recipe.*Closest names: test/fetchreach/noisy-v0"):
        build_trainer(_compose(["agent=bc", "env=gym", "dataset.id=test/fetchreach/noisy-v1"]), tmp_path, overrides=[])
