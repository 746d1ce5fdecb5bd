"""The LeRobot adapter against a fake of LeRobot's Robot interface (lerobot is not installed here)."""

from __future__ import annotations

import numpy as np
import pytest

from robotrl.real_robot.factory import make_robot, make_supervisor
from robotrl.real_robot.interface import Robot, RobotConnectionError
from robotrl.real_robot.lerobot_adapter import LeRobotAdapter

MOTORS = ["shoulder_pan", "shoulder_lift", "elbow_flex", "gripper"]


class FakeSO100:
    """LeRobot ``Robot`` API: features dicts, connect/disconnect, dict observations in degrees, send_action clipping."""

    name = "so100_follower"

    def __init__(self, max_relative_target: float = 10.0):
        self.pos = {m: 0.0 for m in MOTORS}
        self.max_rel = max_relative_target
        self.is_connected = False
        self.sent = []

    @property
    def observation_features(self):
        return {**{f"{m}.pos": float for m in MOTORS}, "front": (480, 640, 3)}

    @property
    def action_features(self):
        return {f"{m}.pos": float for m in MOTORS}

    def connect(self, calibrate: bool = True):
        self.is_connected = True

    def disconnect(self):
        if not self.is_connected:
            raise RuntimeError("not connected")  # LeRobot raises DeviceNotConnectedError
        self.is_connected = False

    def get_observation(self):
        return {**{f"{m}.pos": v for m, v in self.pos.items()}, "front": np.zeros((480, 640, 3), np.uint8)}

    def send_action(self, action):
        out = {}
        for k, v in action.items():
            m = k[:-4]
            out[k] = float(np.clip(v, self.pos[m] - self.max_rel, self.pos[m] + self.max_rel))
            self.pos[m] = out[k]
        self.sent.append(out)
        return out


def test_adapter_exposes_si_units_and_converts_both_ways():
    fake = FakeSO100()
    robot = LeRobotAdapter(fake, control_rate_hz=30)
    assert isinstance(robot, Robot)
    spec = robot.spec()  # before connecting
    assert spec.observation.names == tuple(f"{m}.pos" for m in MOTORS)  # the camera is not in the state
    assert spec.action.units == ("rad", "rad", "rad", "%") and spec.action.high[0] == pytest.approx(np.pi)
    with pytest.raises(RobotConnectionError, match="not connected"):
        robot.get_observation()
    with robot:
        fake.pos["elbow_flex"] = 90.0
        assert robot.get_observation().state[2] == pytest.approx(np.pi / 2)
        applied = robot.send_action(np.array([0.1, 1.0, np.pi / 2, 50.0]))
        assert fake.sent[-1]["shoulder_pan.pos"] == pytest.approx(np.degrees(0.1))
        # LeRobot's own max_relative_target (10 deg) clipped the lift and the gripper: the adapter reports it
        assert applied[1] == pytest.approx(np.radians(10.0), rel=1e-5) and applied[3] == pytest.approx(10.0)
        with pytest.raises(ValueError, match="Da=4"):
            robot.send_action(np.zeros(3))
        before = dict(fake.pos)
        held = robot.hold()
        assert np.allclose(held[:3], np.radians([before[m] for m in MOTORS[:3]]), atol=1e-6)
    assert not fake.is_connected


def test_supervisor_from_the_lerobot_config_limits_steps_and_holds_in_place():
    robot = LeRobotAdapter(FakeSO100(max_relative_target=1000), control_rate_hz=30)
    sup = make_supervisor({"max_delta": 0.05, "hold_mode": "last"}, robot.spec())
    with robot:
        d = sup.filter(np.array([1.0, 0, 0, 0]))
        assert d.applied[0] == pytest.approx(0.05) and "delta" in d.flags
        robot.send_action(d.applied)
        sup.estop()
        assert sup.filter(np.array([1.0, 0, 0, 0])).applied[0] == pytest.approx(0.05)  # e-stop holds in place


def test_lerobot_driver_without_lerobot_installed_says_how_to_install():
    with pytest.raises(ImportError, match=r"robotrl\[lerobot\]"):
        make_robot({"driver": "lerobot", "robot_type": "so100_follower"})
