"""The scripted operator that takes over only when the policy fails (HIL-SERL's human,
:class:`robotrl.real_robot.teleop.OnFailureTakeover`), on the real L-corridor twin: it takes over a stuck policy and a
policy heading back, drives a bounded number of steps and hands back, and never takes over a policy that follows the
controller; and ``robotrl actor teleop=scripted scripted.on_failure=true`` builds it from the robot's maze map."""

from __future__ import annotations

import numpy as np
import pytest
from hydra import compose, initialize_config_module

from robotrl.real_robot.online_eval import env_kwargs
from robotrl.real_robot.sim import LCORRIDOR_MAP, MuJoCoTwin
from robotrl.real_robot.teleop import OnFailureTakeover, ScriptedTeleop, maze_path_progress, pointmaze_controller


def _episode(policy, teleop: ScriptedTeleop, seed: int, episode: int = 0, steps: int = 200) -> dict:
    """One episode on the L-corridor twin: the teleop is polled each step; its action replaces the policy's when engaged."""
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=steps,
                      env_kwargs=env_kwargs("lcorridor", "sparse"))
    twin.connect()
    engaged, success = [], False
    try:
        o = twin.reset(seed)
        teleop.new_episode(episode)
        for _ in range(steps):
            teleop.observe(o.state)
            cmd = teleop.poll()
            engaged.append(cmd.engaged)
            twin.send_action(cmd.action if cmd.engaged else policy(o.state))
            o = twin.get_observation()
            success |= bool(o.success)
            if o.terminated or o.truncated:
                break
    finally:
        twin.disconnect()
    return {"engaged": np.asarray(engaged), "success": success}


def _operator(**kw) -> tuple[ScriptedTeleop, OnFailureTakeover]:
    rule = OnFailureTakeover(maze_path_progress(LCORRIDOR_MAP), **kw)
    return ScriptedTeleop(pointmaze_controller(), None, [-1, -1], [1, 1], takeover=rule), rule


def test_path_progress_follows_the_corridor_from_start_to_goal():
    prog = maze_path_progress(LCORRIDOR_MAP)
    at = lambda x, y: prog(np.array([0, 0, 2.0, 1.5, x, y, 0, 0], np.float32))  # noqa: E731
    assert at(-2.0, -1.5) == pytest.approx(0.0)  # the start cell's centre
    assert at(-2.0, 1.5) == pytest.approx(3.0)  # the corner: up the vertical leg
    assert at(2.0, 1.5) == pytest.approx(7.0)  # the goal cell's centre: then along the horizontal one
    assert at(-2.0, 0.0) < at(-2.0, 1.0) < at(0.0, 1.5)  # nearer the goal along the path, not as the crow flies


def test_the_operator_takes_over_a_stuck_policy_drives_a_while_and_hands_back():
    teleop, rule = _operator(patience=10, length=30)
    ep = _episode(lambda s: np.zeros(2, np.float32), teleop, seed=3)  # a policy that does not move
    e = ep["engaged"]
    first = int(np.argmax(e))
    assert 5 <= first <= 12  # after `patience` steps without progress (the reset's noise may drift it a little)
    assert e[first:first + 30].all() and not e[first + 30]  # drove `length` steps, then handed back
    assert rule.takeovers >= 2 and 0.3 < e.mean() < 0.95  # stuck again: taken over again, the policy gets turns
    assert ep["success"]  # the operator's drives carry the ball to the goal in the end


def test_the_operator_takes_over_a_policy_heading_back():
    teleop, rule = _operator(patience=1000, max_regress=0.3, length=20)  # only the regress rule can fire

    def up_then_back(s):  # goes up the corridor for a while, then turns back down
        return np.array([0.0, 1.0 if s[5] < -0.5 and not back[0] else -1.0], np.float32)

    back = [False]

    def policy(s):
        if s[5] >= -0.5:
            back[0] = True
        return up_then_back(s)

    ep = _episode(policy, teleop, seed=4)
    assert rule.takeovers >= 1 and ep["engaged"].any()


def test_the_operator_never_takes_over_a_policy_that_follows_the_controller():
    teleop, rule = _operator()
    for i, seed in enumerate((5, 6, 7)):
        ep = _episode(pointmaze_controller(), teleop, seed=seed, episode=i)
        assert ep["success"] and not ep["engaged"].any()
    assert rule.total_takeovers == 0


def test_the_rule_refuses_bad_settings_and_the_teleop_needs_exactly_one_trigger():
    with pytest.raises(ValueError, match="patience >= 1"):
        OnFailureTakeover(lambda o: 0.0, patience=0)
    rule = OnFailureTakeover(lambda o: 0.0)
    with pytest.raises(ValueError, match="exactly one"):
        ScriptedTeleop(pointmaze_controller(), lambda ep, k: True, [-1, -1], [1, 1], takeover=rule)
    with pytest.raises(ValueError, match="exactly one"):
        ScriptedTeleop(pointmaze_controller(), None, [-1, -1], [1, 1])


def test_robotrl_actor_builds_the_on_failure_operator_from_the_robots_maze_map():
    from robotrl.real_robot.online_cli import make_teleop
    from robotrl.real_robot.factory import make_robot
    from omegaconf import OmegaConf

    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/actor", overrides=["robot=sim-lcorridor", "teleop=scripted", "scripted.on_failure=true",
                                                 "scripted.patience=7", "scripted.takeover_steps=25"])
    spec = make_robot(OmegaConf.to_container(cfg.robot, resolve=True)).spec()
    t = make_teleop(cfg, spec)
    assert isinstance(t, ScriptedTeleop) and t.engage is None and t.takeover is not None
    assert (t.takeover.patience, t.takeover.length) == (7, 25)
    assert t.takeover.progress(np.array([0, 0, 2.0, 1.5, -2.0, 1.5, 0, 0])) == pytest.approx(3.0)  # the corridor's path
