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
        make_robot({"_target_": "robotrl.real_robot.lerobot_adapter.LeRobotAdapter.from_robot_type",
                    "robot_type": "so100_follower", "name": "lerobot", "safety": {}})


class FakeSO100Cameras(FakeSO100):
    """The fake arm with two cameras: frames that depend on the joint positions, a camera config naming one fps."""

    SHAPES = {"front": (24, 32, 3), "wrist": (16, 16, 3)}

    class config:  # noqa: N801  (LeRobot: robot.config.cameras = {name: CameraConfig(fps=..., width=..., height=...)})
        cameras = {"front": type("OpenCVCameraConfig", (), {"fps": 15})()}

    @property
    def observation_features(self):
        return {**{f"{m}.pos": float for m in MOTORS}, **self.SHAPES}

    def frame(self, cam):
        h, w, c = self.SHAPES[cam]
        base = int(sum(self.pos.values())) + (7 if cam == "wrist" else 0)
        return ((np.arange(h * w * c).reshape(h, w, c) + base) % 251).astype(np.uint8)

    def get_observation(self):
        return {**{f"{m}.pos": v for m, v in self.pos.items()}, **{cam: self.frame(cam) for cam in self.SHAPES}}


def test_adapter_passes_lerobot_cameras_into_spec_and_observations():
    from robotrl.errors import ConfigError
    from robotrl.real_robot.interface import CameraSpec, RobotError

    fake = FakeSO100Cameras()
    robot = LeRobotAdapter(fake, control_rate_hz=30)
    spec = robot.spec()  # before connecting
    assert spec.cameras == (CameraSpec("front", (24, 32, 3), 15.0), CameraSpec("wrist", (16, 16, 3), 30.0))
    assert spec.observation.names == tuple(f"{m}.pos" for m in MOTORS)  # frames stay out of the state
    with robot:
        robot.send_action(np.radians([5.0, 0.0, 0.0, 0.0]))
        obs = robot.get_observation()
        assert set(obs.images) == {"front", "wrist"}
        for cam in ("front", "wrist"):
            np.testing.assert_array_equal(obs.images[cam], fake.frame(cam))
            assert obs.images[cam].dtype == np.uint8
        assert obs.state[0] == pytest.approx(np.radians(5.0))
    only = LeRobotAdapter(FakeSO100Cameras(), control_rate_hz=30, cameras=["wrist"])
    assert [c.name for c in only.spec().cameras] == ["wrist"]
    with only:
        assert set(only.get_observation().images) == {"wrist"}
    with LeRobotAdapter(FakeSO100Cameras(), control_rate_hz=30, cameras=[]) as none:
        assert none.spec().cameras == () and none.get_observation().images is None
    with pytest.raises(ConfigError, match=r"\['top'\].*'front', 'wrist'"):
        LeRobotAdapter(FakeSO100Cameras(), cameras=["top"])
    broken = FakeSO100Cameras()
    broken.frame = lambda cam: np.zeros((8, 8, 3), np.uint8)  # a camera configured at another resolution
    with LeRobotAdapter(broken, control_rate_hz=30) as robot:
        with pytest.raises(RobotError, match="uint8 \\(24, 32, 3\\)"):
            robot.get_observation()
        assert np.allclose(robot.hold(), 0.0)  # holding needs the joints only: a bad camera does not stop it


def test_lerobot_camera_frames_cross_a_live_bridge_bit_exact(tmp_path):
    """The adapter served by a RobotServer on a real loopback socket (in a thread): frames arrive as the arm gave them."""
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.launch import ServerThread
    from robotrl.real_robot.protocol import camera_limits, load_key, write_key_file

    key = load_key(write_key_file(tmp_path / "robot.key"))
    fake = FakeSO100Cameras(max_relative_target=1000)
    robot = LeRobotAdapter(fake, control_rate_hz=30)
    limits = camera_limits(robot.spec().cameras)
    sup = make_supervisor({"max_delta": 0.5, "hold_mode": "last", "watchdog_s": 30.0}, robot.spec())
    with ServerThread(robot, sup, key, limits=limits, deadline_periods=10) as srv, \
            RobotClient(srv.endpoint, key, limits=limits, timeout_s=10.0, link_timeout_s=30.0) as c:
        spec = c.hello()
        assert spec.cameras == robot.spec().cameras
        c.reset()
        for target in ([0.1, 0.0, 0.0, 0.0], [0.2, 0.3, 0.0, 10.0]):
            obs = c.step(np.array(target, np.float32))["obs"]
            for cam in ("front", "wrist"):
                np.testing.assert_array_equal(obs.images[cam], fake.frame(cam))
        assert not np.array_equal(obs.images["front"], FakeSO100Cameras().frame("front"))  # the arm moved: new frames
