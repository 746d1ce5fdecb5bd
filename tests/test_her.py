"""HER goal relabelling (robotrl.data.her) on real PointMaze / Fetch episodes: relabelled goals come from the same
episode's present or future, rewards and goal terminations are the env's own for the new goal (n-step sums too),
ratio 0 is the plain sample, and data or agents it cannot serve are refused."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.data import ReplayBuffer
from robotrl.data.her import GoalRelabeler
from robotrl.envs import env_info, make_env
from robotrl.errors import ConfigError


def _collect(name: str, episodes: int, seed: int = 0, scale: float = 1.0, bias: float = 0.0) -> ReplayBuffer:
    """Random-action episodes of a real goal env, stored as the trainer stores online steps."""
    env = make_env(name, num_envs=1, seed=seed, vectorization="sync")
    info = env_info(name)
    buf = ReplayBuffer(5000, info.obs_dim, info.action_dim, gamma=0.9, seed=seed)
    obs, _ = env.reset(seed=seed)
    ended = 0
    while ended < episodes:
        a = env.action_space.sample()
        nobs, r, term, trunc, _ = env.step(a)  # gymnasium 1.x next-step autoreset: an ending step's true final obs
        buf.add(obs, a, scale * r + bias, nobs, term, trunc)
        ended += int((term | trunc).sum())
        if (term | trunc).any():
            nobs = env.step(a)[0]  # this step only resets
        obs = nobs
    env.close()
    return buf


@pytest.fixture(scope="module")
def maze():
    return _collect("pointmaze-umaze", 2)  # the ball's position (achieved goal) moves every step


def _relabeler(name, ratio, **kw):
    return GoalRelabeler(make_env(name), env_info(name).layout, ratio=ratio, seed=0, **kw)


def test_ratio_zero_is_the_plain_sample(maze):
    idx = np.arange(0, len(maze), 7)
    plain = maze.sample(len(idx), n_step=3, indices=idx, allow_small=True)
    maze.relabeler = _relabeler("pointmaze-umaze", 0.0)
    try:
        same = maze.sample(len(idx), n_step=3, indices=idx, allow_small=True)
    finally:
        maze.relabeler = None
    for f in ("observations", "next_observations", "rewards", "terminated", "truncated", "discounts"):
        np.testing.assert_allclose(getattr(same, f).numpy(), getattr(plain, f).numpy(), atol=1e-6, err_msg=f)


def test_relabelled_goals_are_achieved_later_in_the_same_episode_with_the_envs_rewards(maze):
    rel = _relabeler("pointmaze-umaze", 1.0)
    u, sl = rel.env.unwrapped, env_info("pointmaze-umaze").layout.slices
    ag, dg = sl["achieved_goal"], sl["desired_goal"]
    idx = np.arange(len(maze))
    f = rel.relabel(maze, idx, n_step=1)
    moved = 0
    for row, i in enumerate(idx):
        goal = f["observations"][row, dg]
        np.testing.assert_array_equal(f["next_observations"][row, dg], goal)
        later, j = [], int(i)  # the slots of this step and the later steps of its episode
        while j >= 0:
            later.append(j)
            j = int(maze.next_idx[j])
        assert any(np.array_equal(goal, maze.next_observations[k, ag]) for k in later)
        a_next = maze.next_observations[i, ag]
        assert f["rewards"][row] == pytest.approx(float(u.compute_reward(a_next, goal, None)))
        assert bool(f["terminated"][row]) == bool(u.compute_terminated(a_next, goal, None))
        moved += not np.array_equal(goal, maze.observations[i, dg])
    assert moved > 0.9 * len(idx)  # the task's goal is replaced (a random walk never reaches it)
    assert f["rewards"].sum() > 0  # and reaching a goal achieved later pays: the hindsight signal


def test_nstep_sums_follow_the_episode_with_the_relabelled_goal(maze):
    rel = _relabeler("pointmaze-umaze", 1.0, reward_scale=10.0, reward_bias=-5.0)
    sl = env_info("pointmaze-umaze").layout.slices
    idx = np.arange(0, len(maze), 3)
    f = rel.relabel(maze, idx, n_step=4)
    for row, i in enumerate(idx):
        goal, ret, disc, j = f["observations"][row, sl["desired_goal"]], 0.0, 1.0, int(i)
        for k in range(4):
            j = j if k == 0 else int(maze.next_idx[j])
            a = maze.next_observations[j, sl["achieved_goal"]][None]
            ret += disc * float(rel.rewards(a, goal[None])[0])
            disc *= maze.gamma
            if rel.goal_terminal(a, goal[None])[0] or maze.truncated[j] or maze.next_idx[j] < 0:
                break
        assert f["rewards"][row] == pytest.approx(ret, abs=1e-4)
        assert f["discounts"][row] == pytest.approx(disc)
        assert f["last"][row] == j


def test_fetch_success_termination_follows_the_relabelled_goal():
    """Fetch never terminates by itself; with success as termination the relabelled goal's success ends the n-step
    sum (the object's position at a later step is a goal reached there)."""
    buf = _collect("fetch-push", 2, bias=1.0)  # 0/1 success rewards (ResFiT's)
    rel = _relabeler("fetch-push", 1.0, reward_bias=1.0, terminate_on_success=True)
    f = rel.relabel(buf, np.arange(len(buf)), n_step=3)
    u, sl = rel.env.unwrapped, env_info("fetch-push").layout.slices
    succ = np.asarray(u._is_success(buf.next_observations[f["last"], sl["achieved_goal"]],
                                    f["next_observations"][:, sl["desired_goal"]]), bool)
    np.testing.assert_array_equal(f["terminated"], succ)
    assert f["terminated"].any() and (f["rewards"][f["terminated"]] >= 1.0).all()


def test_data_in_other_units_and_tasks_without_goals_are_refused(maze):
    with pytest.raises(ConfigError, match="reward transform"):
        _relabeler("pointmaze-umaze", 0.8, reward_bias=-1.0).check(maze)
    _relabeler("pointmaze-umaze", 0.8).check(maze)  # its own units pass
    with pytest.raises(ConfigError, match="achieved_goal/desired_goal"):
        GoalRelabeler(make_env("hopper"), env_info("hopper").layout, ratio=0.8)
    with pytest.raises(ConfigError, match=r"\[0, 1\]"):
        _relabeler("pointmaze-umaze", 1.5)


def test_the_trainer_refuses_her_for_agents_that_read_mc_returns(maze):
    from robotrl.agents.qlearning import QLAgent
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
    from robotrl.trainer import OffPolicyLoop, TrainerConfig

    info = env_info("pointmaze-umaze")
    agent = QLAgent(info.obs_dim, info.action_dim, obs_normalizer=ObservationNormalizer.identity(info.obs_dim),
                    action_scaler=ActionScaler(-np.ones(2), np.ones(2)), algo="calql", hidden=(8,), critic_hidden=(8,))
    with pytest.raises(ConfigError, match="her_ratio=0"):
        OffPolicyLoop(agent, TrainerConfig(offline_steps=1), offline_buffer=maze,
                      goal_relabeler=_relabeler("pointmaze-umaze", 0.8))


def test_robotrl_train_runs_the_resfit_residual_with_her_on_fetch(tmp_path, monkeypatch):
    """`robotrl train experiment=residual-offpolicy env=fetch-push trainer.her_ratio=0.8`: both buffers relabel (the
    demos checked against the task's reward first), and online updates run on relabelled batches."""
    from hydra import compose, initialize_config_module

    from robotrl.experiment import build_trainer

    def cfg(over):
        with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
            return compose(config_name="train", overrides=over)

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    data = ["env=fetch-push", "dataset=fetch-push-noisy-20ep", "dataset.id=robotrl/fetch-push/noisy-3ep-her-test-v0",
            "dataset.recipe_args.num_episodes=3", "+dataset.recipe_args.ref_episodes=1", "trainer.progress=false"]
    build_trainer(cfg(["experiment=residual-base", *data, "trainer.offline_steps=1", "trainer.batch_size=32",
                       "trainer.eval_episodes=1"]), tmp_path / "base").fit()
    run = cfg(["experiment=residual-offpolicy", *data, f"agent.model.base={tmp_path / 'base'}", "trainer.her_ratio=0.8",
               "trainer.online_steps=60", "trainer.online_warmup_steps=10", "agent.model.base_noise_steps=10",
               "agent.model.critic_warmup_updates=0", "agent.model.num_critics=2", "trainer.batch_size=32",
               "trainer.eval_every=60", "trainer.checkpoint_every=60", "trainer.eval_episodes=1"])
    tr = build_trainer(run, tmp_path / "run")
    her = tr.loop.offline.relabeler
    assert her is not None and her.terminate_on_success and her.ratio == 0.8
    batches = []
    update = tr.agent.update

    def spy(batch, step):
        batches.append(batch)
        return update(batch, step)

    tr.agent.update = spy
    summary = tr.fit()
    assert tr.loop.online.relabeler is her and summary["gradient_updates"] == len(batches) == (60 - 10) * 4  # UTD 4
    # every batch goal is its row's own or an achieved goal stored in one of the buffers (a relabelled one); the
    # relabelled share is the ratio, and the rewards are recomputed for the new goals: those rows reach them far
    # more often (0/1 success rewards, n-step 3) than the rows aiming at the episode's own goal
    bufs = (tr.loop.offline, tr.loop.online)
    achieved = {r.tobytes() for b in bufs for r in b.next_observations[: b.size, her.achieved].astype(np.float32)}
    own = {r.tobytes() for b in bufs for r in b.observations[: b.size, her.desired].astype(np.float32)}
    goals = np.concatenate([b.observations[:, her.desired].numpy() for b in batches]).astype(np.float32)
    rewards = np.concatenate([b.rewards.numpy() for b in batches])
    relabelled = np.array([g.tobytes() in achieved for g in goals])
    assert all(g.tobytes() in achieved or g.tobytes() in own for g in goals)
    assert abs(relabelled.mean() - 0.8) < 0.04, relabelled.mean()  # 6400 rows: 0.79 here
    assert rewards[relabelled].mean() > 0.5 > 0.2 > rewards[~relabelled].mean(), (rewards[relabelled].mean(),
                                                                                  rewards[~relabelled].mean())
    with pytest.raises(ConfigError, match="her_ratio"):
        build_trainer(cfg(["experiment=residual-ppo", *data, f"agent.model.base={tmp_path / 'base'}",
                           "trainer.her_ratio=0.8"]), tmp_path / "ppo")
