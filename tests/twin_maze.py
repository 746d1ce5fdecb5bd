"""Helpers of the maze-twin tests (``test_twin_zcorridor.py``, ``test_twin_deadend.py``): the actor's config for a twin
task, the twin itself through the driver factory, one episode driven by a policy and, optionally, a scripted
operator, and the episodes from the evaluation starts of the constant actions and the two controllers."""

from __future__ import annotations

import numpy as np
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from robotrl.real_robot.factory import make_robot
from robotrl.real_robot.online_cli import make_teleop
from robotrl.real_robot.online_eval import robot_overrides
from robotrl.real_robot.teleop import ScriptedTeleop, maze_controller, pointmaze_controller

EVAL_STARTS = range(10_000, 10_020)  # benchmarks/bench_online_robot.py's --eval-seeds 20


def twin_cfg(task: str, *extra: str):
    """``robotrl actor``'s composed config for the bench's twin ``task`` (sparse reward, 200 steps) plus ``extra``."""
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("online/actor", overrides=[*robot_overrides(task, "sparse", 200), "key_file=k.key", *extra])


def maze_twin(task: str, name: str, maze_map: list):
    """Yield the twin of ``task`` built by the driver factory from its config, after checking the config is robot
    ``name`` on ``maze_map`` with the sparse reward, 200 steps and no pacing (a module fixture's body)."""
    rc = OmegaConf.to_container(twin_cfg(task).robot, resolve=True)
    assert rc["name"] == name and rc["env_kwargs"]["maze_map"] == maze_map
    assert rc["env_kwargs"]["reward_type"] == "sparse" and rc["max_episode_steps"] == 200 and rc["realtime"] is False
    with make_robot(rc) as t:
        yield t


def run_episode(twin, seed: int, policy, teleop: ScriptedTeleop | None = None,
                steps: int = 200) -> tuple[bool, int, float, int]:
    """(success, steps, return, steps the teleop drove) of one episode of at most ``steps`` steps."""
    o = twin.reset(seed)
    ret, human = 0.0, 0
    if teleop is not None:
        teleop.new_episode(seed)
    for k in range(steps):
        a = policy(o.state)
        if teleop is not None:
            teleop.observe(o.state)
            cmd = teleop.poll()
            if cmd.engaged:
                a, human = cmd.action, human + 1
        twin.send_action(a)
        o = twin.get_observation()
        ret += o.reward
        if o.success or o.terminated or o.truncated:
            return bool(o.success), k + 1, ret, human
    return False, steps, ret, human


def check_scripted_operator_carries_a_still_policy(task: str) -> None:
    """The on-failure operator ``robotrl actor teleop=scripted scripted.on_failure=true`` builds for ``task``'s robot
    carries a policy that does not move to the goal from 3 evaluation starts, driving in turns."""
    cfg = twin_cfg(task, "teleop=scripted", "scripted.on_failure=true", "robot.max_episode_steps=300")
    with make_robot(OmegaConf.to_container(cfg.robot, resolve=True)) as twin:
        op = make_teleop(cfg, twin.spec())
        assert isinstance(op, ScriptedTeleop) and op.takeover is not None
        still = lambda _: np.zeros(2, np.float32)  # noqa: E731
        for s in list(EVAL_STARTS)[:3]:  # it waits `patience` (10) steps, drives 50, hands back, ...: slower than alone
            ok, steps, ret, human = run_episode(twin, s, still, op, steps=300)
            assert ok and ret == 1.0 and 0.3 < human / steps < 0.9, (s, steps, human)  # its drives did it, in turns


def compass_hits(twin) -> dict[tuple[float, float], int]:
    """For each of the 8 compass directions at full force, held as a constant action: how many of the
    :data:`EVAL_STARTS` episodes reach the goal (``{(ax, ay): hits}``)."""
    out = {}
    for k in range(8):
        a = np.round([np.cos(k * np.pi / 4), np.sin(k * np.pi / 4)]).astype(np.float32)
        out[tuple(float(v) for v in a)] = sum(run_episode(twin, s, lambda _, a=a: a)[0] for s in EVAL_STARTS)
    return out


def straight_controller_hits(twin, starts: int = 5) -> int:
    """How many of the first ``starts`` :data:`EVAL_STARTS` episodes the straight-to-goal controller
    (:func:`~robotrl.real_robot.teleop.pointmaze_controller`) ends at the goal."""
    return sum(run_episode(twin, s, pointmaze_controller())[0] for s in list(EVAL_STARTS)[:starts])


def path_controller_episodes(twin, maze_map) -> list[tuple]:
    """``run_episode``'s ``(reached, steps, return, ...)`` of the map's path controller
    (:func:`~robotrl.real_robot.teleop.maze_controller`) from every :data:`EVAL_STARTS` start."""
    ctrl = maze_controller(maze_map)
    return [run_episode(twin, s, ctrl) for s in EVAL_STARTS]
