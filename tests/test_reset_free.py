"""Issue 46 item 4: reset-free fine-tuning (RoboFuME): a forward and a backward agent on one scene reset once.

Everything is real: PointMaze UMaze (MuJoCo) with a fixed start cell ("r") and goal cell ("g"), demonstrations of
the forward task (start -> goal) and of the backward task (goal -> start, the cells swapped) recorded by the
project's own recipe, the success classifiers trained by the ``robotrl train agent=reward-classifier`` path on
those recordings' success labels and loaded from their files, Cal-QL agents, and ``robotrl train
experiment=reset-free`` as a real process killed mid-run. The simulator's resets are counted on the real env: a
wrapper directly around the MuJoCo env counts them, and MuJoCo's own clock (``data.time``, set to 0 by every reset)
shows that no reset happened in between.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from robotrl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

FWD_MAZE = [[1, 1, 1, 1, 1], [1, "g", 0, 0, 1], [1, 1, 1, 0, 1], [1, "r", 0, 0, 1], [1, 1, 1, 1, 1]]
BWD_MAZE = [[1, 1, 1, 1, 1], [1, "r", 0, 0, 1], [1, 1, 1, 0, 1], [1, "g", 0, 0, 1], [1, 1, 1, 1, 1]]
FWD_ID, BWD_ID = "robotrl/pointmaze/umaze-rf-forward-v1", "robotrl/pointmaze/umaze-rf-backward-v1"


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


@pytest.fixture(scope="module")
def task(minari_module_root, tmp_path_factory):
    """The two recordings (full-speed noisy planner, 4000 steps each) and a classifier trained on each."""
    from robotrl.collect.pointmaze import collect_pointmaze
    from robotrl.real_robot.reward_classifier import run_train

    for ds, maze, seed in ((FWD_ID, FWD_MAZE, 0), (BWD_ID, BWD_MAZE, 1)):
        collect_pointmaze("umaze", num_steps=4000, seed=seed, dataset_id=ds, env_kwargs={"maze_map": maze},
                          progress=False, ref_episodes=2)
    out = tmp_path_factory.mktemp("classifiers")
    paths = {}
    for name, ds in (("forward", FWD_ID), ("backward", BWD_ID)):
        cfg = _compose(["agent=reward-classifier", f"dataset.id={ds}", "dataset.recipe=null", "dataset.generate=false", "agent.model.steps=600",
                        "agent.model.hidden=[64,64]"])
        summary = run_train(cfg, out / name)
        assert summary["heldout"]["auc"] > 0.95, (name, summary["heldout"])
        paths[name] = out / name
    return {"root": minari_module_root, **paths}


class CountResets(gym.Wrapper):
    """Counts the resets that reach the MuJoCo env it wraps (the innermost env: nothing else resets it)."""

    def __init__(self, env):
        super().__init__(env)
        self.resets = 0

    def reset(self, **kwargs):
        self.resets += 1
        return self.env.reset(**kwargs)


def _scene(task, *, max_episode_steps, max_timeouts=100, intervene=True, same_reward=False, goals=None):
    """A ResetFreeEnv around the real fixed-cell UMaze, flattened as robotrl's envs are, with a reset counter
    directly around the MuJoCo env; the classifiers from their files."""
    from robotrl.envs.registry import env_info, resolve_env
    from robotrl.envs.reset_free import ResetFreeEnv
    from robotrl.envs.wrappers import FlattenGoalObservation
    from robotrl.real_robot.reward_classifier import ClassifierReward

    gym_id, kw = resolve_env("pointmaze-umaze")
    raw = gym.make(gym_id, **{**kw, "maze_map": FWD_MAZE}, max_episode_steps=10**9).unwrapped
    counted = CountResets(raw)
    flat = FlattenGoalObservation(counted)
    layout = env_info("pointmaze-umaze", {"maze_map": FWD_MAZE}).layout
    sl = layout.slices
    rewards = {ph: ClassifierReward.from_file(task["forward" if same_reward else ph], obs_dim=8) for ph in ("forward", "backward")}
    env = ResetFreeEnv(flat, rewards, max_episode_steps=max_episode_steps, max_timeouts=max_timeouts,
                       intervene=intervene, goal_slices=None if same_reward else (sl["achieved_goal"], sl["desired_goal"]),
                       goals=goals)
    return env, counted, raw, layout, rewards


def test_maze_goals_draw_each_phase_its_goal_as_the_task_reset_does_without_moving_the_scene(task):
    """``goals=MazeGoals()``: every forward phase gets a new goal in the goal cell (+-0.25 m, the maze's reset noise),
    set as the env's own goal (its ``info["success"]`` follows it: the planner reaches each one); every backward phase
    a new start in the start cell; the simulator is reset once and the ball is never moved by a goal change."""
    from robotrl.collect.pointmaze import MazePlanner
    from robotrl.envs.reset_free import MazeGoals

    env, counted, raw, layout, _ = _scene(task, max_episode_steps=250, goals=MazeGoals())
    sl = layout.slices
    planner = MazePlanner(raw.maze, rng=np.random.default_rng(0))
    goal_cell, start_cell = raw.maze.cell_rowcol_to_xy(np.array([1, 1])), raw.maze.cell_rowcol_to_xy(np.array([3, 1]))
    shown = {"forward": [], "backward": []}
    obs, info = env.reset(seed=7)
    for ep in range(6):
        if ep:
            ball = obs[sl["achieved_goal"]].copy()
            obs, info = env.reset()
            np.testing.assert_allclose(obs[sl["achieved_goal"]], ball)  # a new goal does not move the ball
        ph, g = info["phase"], obs[sl["desired_goal"]].copy()
        shown[ph].append(g)
        cell = goal_cell if ph == "forward" else start_cell
        assert np.all(np.abs(g - cell) <= 0.25 + 1e-6), (ph, g, cell)
        if ph == "forward":
            np.testing.assert_allclose(raw.goal, g, atol=1e-6)  # the env's own goal, which its success flag reads
        planner.reset()
        done, hit = False, False
        while not done:
            obs, _, term, trunc, info = env.step(planner(layout.unflatten(obs)))
            hit = hit or (ph == "forward" and bool(info["success"]))
            done = term or trunc
        assert ph == "backward" or hit  # the planner reached the goal the phase showed, and the env counted it
    assert counted.resets == 1 and env.sim_resets == 1
    for ph in ("forward", "backward"):  # three different goals per phase, not the first reset's for the whole run
        assert len({tuple(np.round(g, 4)) for g in shown[ph]}) == 3, shown[ph]
    with pytest.raises(ConfigError, match="reset_free.goals=scene"):
        _scene(task, max_episode_steps=5, same_reward=True, goals=MazeGoals())


def test_one_simulator_reset_over_twelve_episodes_phases_alternate_each_scored_by_its_own_classifier(task):
    from robotrl.collect.pointmaze import MazePlanner
    from robotrl.real_robot.reward_classifier import load_classifier

    env, counted, raw, layout, _ = _scene(task, max_episode_steps=250)
    clfs = {ph: load_classifier(task[ph]) for ph in ("forward", "backward")}
    planner = MazePlanner(raw.maze, rng=np.random.default_rng(0))
    phases, successes, steps = [], [], 0
    task_hits = 0  # forward phases the classifier ended where the simulator's own success flag held too
    start = None
    for ep in range(12):
        obs, info = env.reset(seed=5 if ep == 0 else None)
        if ep == 0:
            start = obs[layout.slices["achieved_goal"]].copy()
            goal = obs[layout.slices["desired_goal"]].copy()
        assert info["sim_reset"] == (ep == 0)
        phases.append(info["phase"])
        want_goal = goal if info["phase"] == "forward" else start
        planner.reset()
        done = False
        while not done:
            np.testing.assert_allclose(obs[layout.slices["desired_goal"]], want_goal)  # the phase's own goal
            obs, r, term, trunc, info = env.step(planner(layout.unflatten(obs)))
            steps += 1
            clf, thr = clfs[info["phase"]]
            p = clf.prob(obs)
            assert info["phase_p"] == pytest.approx(p, abs=1e-6)  # this phase's classifier, on what it showed
            assert r == float(p >= thr) and term == (p >= thr)
            done = term or trunc
        successes.append(bool(term))
        task_hits += int(term and info["phase"] == "forward" and info["success"])
        other, other_thr = clfs["backward" if info["phase"] == "forward" else "forward"]
        if term:  # where one phase's classifier says done, the other one's task is still ahead
            assert other.prob(obs) < other_thr
    assert counted.resets == 1 and env.sim_resets == 1 and env.human_resets == 0
    sim = raw.point_env  # the MuJoCo env
    assert sim.data.time == pytest.approx(steps * sim.dt, rel=1e-6)  # MuJoCo's clock never went back to 0
    assert phases == ["forward", "backward"] * 6
    assert sum(successes) >= 10, successes  # the planner does both tasks; the classifiers see it
    c = env.counters()
    assert c["forward_episodes"] == c["backward_episodes"] == 6
    assert c["forward_successes"] + c["backward_successes"] == sum(successes)
    assert 1 <= c["forward_task_successes"] == task_hits <= c["forward_successes"]  # the audit counts what it says


@pytest.mark.parametrize("intervene", [True, False])
def test_k_timeouts_in_a_row_count_one_human_reset(task, intervene):
    """A ball that never moves from the start, both phases scored by the forward classifier (any reward function
    fits the scene): every phase times out; each phase's K=2nd timeout in a row is one human reset, which with
    ``intervene`` really resets the simulator (and starts the forward phase), without only counts."""
    env, counted, raw, _, _ = _scene(task, max_episode_steps=5, max_timeouts=2, intervene=intervene, same_reward=True)
    phases = []
    for ep in range(10):
        obs, info = env.reset(seed=3 if ep == 0 else None)
        phases.append(info["phase"][0].upper())
        done = False
        while not done:
            obs, r, term, trunc, info = env.step(np.zeros(2, np.float32))
            assert r == 0.0 and not term
            done = trunc
    assert env.human_resets == 3
    if intervene:
        assert "".join(phases) == "FBFFBFFBFF"
        assert counted.resets == env.sim_resets == 4
    else:
        assert "".join(phases) == "FB" * 5
        assert counted.resets == env.sim_resets == 1
    assert env.counters()["forward_timeouts"] + env.counters()["backward_timeouts"] == 10


def _train_overrides(task, run_dir, steps=300, extra=()):
    return ["experiment=reset-free", "env=pointmaze-umaze", "env.name=null", f"dataset.id={FWD_ID}", "dataset.recipe=null", "dataset.generate=false",
            f"reset_free.backward_dataset.id={BWD_ID}", "reset_free.backward_dataset.generate=false",
            f"reset_free.forward_classifier={task['forward']}", f"reset_free.backward_classifier={task['backward']}",
            "reset_free.max_episode_steps=40", "trainer.init_from=null", "reset_free.backward_init_from=null",
            f"trainer.online_steps={steps}", "trainer.eval_every=100", "trainer.checkpoint_every=100",
            "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.batch_size=32", "trainer.progress=false",
            "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
            "agent.model.cql_n_actions=2", f"run_dir={run_dir}", *extra]


def test_bad_settings_give_one_line_naming_the_fix(task, tmp_path):
    from robotrl.envs import make_env
    from robotrl.envs.reset_free import ResetFreeEnv
    from robotrl.experiment import build_trainer
    from robotrl.real_robot.reward_classifier import ClassifierReward

    cases = [
        (["trainer.offline_steps=10"], "trainer.offline_steps=0"),
        (["trainer.num_envs=2"], "trainer.num_envs=1"),
        (["reset_free.forward_classifier=null"], "reset_free.forward_classifier=runs/clf/forward"),
        ([f"reset_free.backward_classifier={tmp_path / 'nope'}"], "does not exist"),
        (["reset_free.backward_dataset.id=null"], "reset_free.backward_dataset.id=<its id>"),
        (["reset_free.max_timeouts=0"], "reset_free.max_timeouts=3"),
        (["reset_free.goals=fresh"], "choose scene"),
    ]
    for extra, fix in cases:
        cfg = _compose(_train_overrides(task, tmp_path / "bad", extra=extra))
        with pytest.raises(ConfigError) as exc:
            build_trainer(cfg, tmp_path / "bad", overrides=[])
        assert fix in str(exc.value) and "\n" not in str(exc.value), (extra, str(exc.value))
    r = ClassifierReward.from_file(task["forward"])
    with pytest.raises(ConfigError, match="Box"):  # a camera scene: states only
        ResetFreeEnv(make_env("pointmaze-umaze", pixels=["topdown"], size=16), {"forward": r, "backward": r},
                     max_episode_steps=10)
    with pytest.raises(ConfigError, match="Do=8"):  # a classifier of another state size
        ClassifierReward.from_file(task["forward"], obs_dim=6)


def test_build_trainer_runs_both_loops_on_one_scene_and_resumes(task, tmp_path):
    """Through the one build path: the scene's simulator is reset once, both agents learn from their own buffers,
    the runner evaluates the forward agent from the task's resets, and a second build resumes both loops."""
    from robotrl.checkpoint import load_checkpoint
    from robotrl.experiment import build_trainer

    run_dir = tmp_path / "rf"
    only_count = ["reset_free.intervene=false"]  # interventions counted, not done: the one reset is the only one
    runner = build_trainer(_compose(_train_overrides(task, run_dir, steps=300, extra=only_count)), run_dir, overrides=[])
    loop = runner.loop
    s = runner.fit()
    assert s["sim_resets"] == 1 and s["resume_resets"] == 0 and s["human_resets"] >= 0
    assert s["forward_env_steps"] + s["backward_env_steps"] == 300
    assert s["forward_episodes"] >= 1 and s["backward_episodes"] >= 1
    assert s["forward_updates"] > 0 and s["backward_updates"] > 0
    assert s["gradient_updates"] == s["forward_updates"] + s["backward_updates"]
    assert len(loop.forward.online) == s["forward_env_steps"] and len(loop.backward.online) == s["backward_env_steps"]
    assert all(h["episodes"] == 2 for h in runner.history if "episodes" in h)
    ckpt = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    assert ckpt["step"] == 300 and set(ckpt["reset_free"]) == {"env", "forward", "backward"}
    for ph in ("forward", "backward"):
        assert (run_dir / "checkpoints" / ph / "online_buffer.npz").exists()
    trained = {k: v.clone() for k, v in loop.backward.agent.policy.state_dict().items()}

    more = build_trainer(_compose(_train_overrides(task, run_dir, steps=400, extra=only_count)), run_dir, overrides=[])
    assert more.try_resume()
    ml = more.loop
    assert ml.step == 300 and ml.forward.step + ml.backward.step == 300
    assert len(ml.backward.online) == s["backward_env_steps"] and ml.env.sim_resets == 1
    fresh = build_trainer(_compose(_train_overrides(task, tmp_path / "fresh", steps=400, extra=only_count)),
                          tmp_path / "fresh", overrides=[]).loop.backward.agent.policy.state_dict()
    resumed = ml.backward.agent.policy.state_dict()
    assert all(torch.equal(resumed[k], v) for k, v in trained.items())  # the backward agent came back
    assert not all(torch.equal(fresh[k], v) for k, v in trained.items())  # ... and it had learned
    s2 = build_trainer(_compose(_train_overrides(task, run_dir, steps=400, extra=only_count)), run_dir, overrides=[]).fit()
    assert s2["resumed"] and s2["resume_resets"] == 1 and s2["sim_resets"] == 2
    assert s2["forward_env_steps"] + s2["backward_env_steps"] == 400


@pytest.mark.slow
def test_robotrl_train_reset_free_killed_and_resumed(task, tmp_path, kill_after_checkpoint):
    """``robotrl train experiment=reset-free`` as a real process, warm-started from Cal-QL pretrainings of both
    phases, SIGKILLed after a checkpoint, resumed to the end."""
    from robotrl.checkpoint import load_checkpoint
    from robotrl.experiment import build_trainer

    small = ["agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
             "agent.model.cql_n_actions=2", "trainer.batch_size=32", "trainer.progress=false",
             "trainer.eval_episodes=2", "trainer.eval_envs=2"]
    pre = {}
    for name, ds in (("forward", FWD_ID), ("backward", BWD_ID)):
        pre[name] = tmp_path / f"pre-{name}"
        cfg = _compose(["experiment=calql", "env=pointmaze-umaze", "env.name=null", f"dataset.id={ds}", "dataset.recipe=null", "dataset.generate=false",
                        "trainer.offline_steps=50", "trainer.eval_every=50", "trainer.checkpoint_every=50",
                        f"run_dir={pre[name]}", *small])
        build_trainer(cfg, pre[name], overrides=[]).fit()
    run_dir = tmp_path / "rf-proc"
    args = [a for a in _train_overrides(task, run_dir, steps=1500) if not a.startswith(("trainer.init_from",
                                                                                         "reset_free.backward_init_from"))]
    args += [f"trainer.init_from={pre['forward']}", f"reset_free.backward_init_from={pre['backward']}",
             "trainer.checkpoint_every=300"]
    env = {**os.environ, "MINARI_DATASETS_PATH": str(task["root"]), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    cmd = [sys.executable, "-m", "robotrl.cli", "train", *args]
    step = kill_after_checkpoint(cmd, env, run_dir, min_step=300, timeout=400)
    assert 300 <= step < 1500
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    ckpt = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    c = ckpt["reset_free"]["env"]["counters"]
    assert ckpt["step"] == 1500 and c["resume_resets"] == 1 and c["sim_resets"] == 2 + c["human_resets"]
    assert c["forward_env_steps"] + c["backward_env_steps"] == 1500
    assert ckpt["history"][0]["phase"] == "offline"  # the warm-started forward policy evaluated first
