"""The MuJoCo twin behind the Robot interface: spec before connect, SI-unit spec, real time, faults, hold."""

from __future__ import annotations

import time

import numpy as np
import pytest

from robotrl.envs import make_env
from robotrl.real_robot.interface import Robot, RobotConnectionError
from robotrl.real_robot.sim import MuJoCoTwin


def test_spec_is_readable_before_connecting_and_matches_the_task():
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False)
    assert isinstance(twin, Robot) and not twin.is_connected
    spec = twin.spec()
    assert spec.observation.dim == 8 and spec.action.dim == 2 and spec.control_rate_hz == pytest.approx(100.0)
    assert spec.observation.units[4:] == ("m", "m", "m/s", "m/s") and spec.action.low == (-1.0, -1.0)
    assert spec.gym_env_id == "PointMaze_UMaze-v3"
    with pytest.raises(RobotConnectionError, match="not connected"):
        twin.get_observation()


def test_twin_reproduces_the_task_step_for_step_and_clips_to_its_bounds():
    env = make_env("pointmaze-umaze")
    o_env, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    with MuJoCoTwin("pointmaze-umaze", realtime=False) as twin:
        o = twin.reset(seed=3)
        assert np.array_equal(o.state, o_env)
        for _ in range(20):
            a = rng.uniform(-1.5, 1.5, 2).astype(np.float32)
            applied = twin.send_action(a)
            assert np.all(np.abs(applied) <= 1.0)
            o_env, *_ = env.step(np.clip(a, -1, 1))
            assert np.array_equal(twin.get_observation().state, o_env)
    assert not twin.is_connected
    env.close()


def test_realtime_twin_does_not_run_ahead_of_the_wall_clock():
    with MuJoCoTwin("pointmaze-umaze", realtime=True) as twin:
        twin.reset(seed=0)
        t0 = time.monotonic()
        for _ in range(30):
            twin.send_action(np.zeros(2, np.float32))
        # 30 steps of dt = 0.01 s may lead the clock by at most one step
        assert time.monotonic() - t0 >= 0.29 - 0.01


def test_dropped_commands_keep_the_previous_action_and_crash_raises():
    faults = {"drop_prob": 0.5, "crash_after_steps": 40, "seed": 1}
    with MuJoCoTwin("pointmaze-umaze", realtime=False, faults=faults) as twin:
        prev = np.zeros(2, np.float32)
        dropped = 0
        for i in range(40):
            a = np.array([0.01 * (i + 1), 0.0], np.float32)
            applied = twin.send_action(a)
            if not np.array_equal(applied, a):
                assert np.array_equal(applied, prev)
                dropped += 1
            prev = applied
        assert 5 < dropped < 35
        with pytest.raises(RobotConnectionError, match="crashed"):
            twin.send_action(np.zeros(2, np.float32))
        with pytest.raises(RobotConnectionError, match="crashed"):
            twin.get_observation()


def test_hold_keeps_physics_running_with_the_hold_action_until_a_command():
    with MuJoCoTwin("pointmaze-umaze", realtime=False) as twin:
        twin.reset(seed=0)
        for _ in range(10):
            twin.send_action(np.array([1.0, 1.0], np.float32))
        v0 = np.abs(twin.get_observation().state[6:8]).sum()
        assert np.array_equal(twin.hold(), [0.0, 0.0]) and twin.held
        time.sleep(0.3)
        assert np.abs(twin.get_observation().state[6:8]).sum() < v0  # damped, no force
        twin.send_action(np.zeros(2, np.float32))
        assert not twin.held
