"""The MuJoCo twin's cameras: RobotSpec lists them, observations carry their frames, and the
frames equal the ones ``make_env(..., pixels=...)`` renders for the same seed and commands;
through a live ``robotrl robot-server`` process and a :class:`RobotClient` over loopback
ZeroMQ they arrive bit-exact, and limits too small for them are a clear error, never a hang."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.envs import make_env, osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402
from robotrl.real_robot.interface import CameraSpec, RobotSpec  # noqa: E402
from robotrl.real_robot.sim import MuJoCoTwin  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")


def test_twin_cameras_in_spec_and_observations_match_the_pixel_env():
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=32)
    spec = twin.spec()
    assert spec.cameras == (CameraSpec("topdown", (32, 32, 3), spec.control_rate_hz),)
    assert RobotSpec.from_dict(spec.to_dict()) == spec  # what the bridge sends in its hello
    actions = [np.array([0.8, -0.3], np.float32), np.array([-0.5, 0.9], np.float32)] * 4
    with twin:
        first = twin.reset(seed=11)
        got = [first.images["topdown"]]
        for a in actions:
            twin.send_action(a)
            obs = twin.get_observation()
            assert obs.state.shape == (8,) and obs.images["topdown"].dtype == np.uint8
            got.append(obs.images["topdown"])
    env = make_env("pointmaze-umaze", pixels=["topdown"], size=32)
    o, _ = env.reset(seed=11)
    want = [o["pixels"]["topdown"]]
    for a in actions:
        o, *_ = env.step(a)
        want.append(o["pixels"]["topdown"])
    env.close()
    np.testing.assert_array_equal(np.stack(got), np.stack(want))
    assert not np.array_equal(got[0], got[-1])


def test_twin_without_cameras_is_unchanged_and_bad_camera_is_refused():
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False)
    assert twin.spec().cameras == () and "cameras" not in twin.spec().to_dict()
    with twin:
        assert twin.reset(seed=0).images is None
    with pytest.raises(ConfigError, match="unknown camera"):
        with MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["wrist"]):
            pass


def test_camera_frames_over_the_bridge_codec_need_the_raised_limits():
    from robotrl.real_robot.client import body_obs
    from robotrl.real_robot.handlers import obs_body
    from robotrl.real_robot.interface import ProtocolError
    from robotrl.real_robot.protocol import VERSION, Limits, camera_limits, decode, encode

    twin = MuJoCoTwin("fetch-push", realtime=False, cameras=["external_camera_0", "gripper_camera_rgb"], image_size=128)
    with twin:
        obs = twin.reset(seed=4)
    payload = encode({"v": VERSION, "type": "observe", "dir": "rep", "src": "robot", "dst": "client", "epoch": "e",
                      "seq": 1, "ts": 1.0, "body": obs_body(obs)})
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(payload, Limits())  # the state-sized defaults refuse two 128 px frames
    limits = camera_limits(twin.spec().cameras)
    assert limits.max_bytes >= 2 * 128 * 128 * 3 and limits.max_elems >= 128 * 128 * 3
    assert camera_limits((), Limits()) == Limits()  # a state-only robot keeps the defaults
    back = body_obs(decode(payload, limits)["body"])
    np.testing.assert_array_equal(back.state, obs.state)
    for k in obs.images:
        np.testing.assert_array_equal(back.images[k], obs.images[k])


PX = 128  # one 128 px RGB frame (49 152 bytes and elements) exceeds the state-sized default limits (16 384 elements)
# the twin steps as fast as asked (no wall-clock pacing), a 0.5 s step window (10 periods at 20 Hz) and a watchdog that
# never fires between two steps of the test: the server's episode is then exactly the commands the client sent
CAM_SERVER = ["robot.cameras=[topdown]", f"robot.image_size={PX}", "robot.realtime=false", "robot.safety.rate_hz=20",
              "robot.safety.watchdog_s=30", "deadline_periods=10"]


@pytest.fixture(scope="module")
def cam_server(tmp_path_factory):
    """A real ``robotrl robot-server`` process serving the PointMaze twin with a 128 px ``topdown`` camera."""
    from robotrl.real_robot.launch import ServerProcess
    from robotrl.real_robot.protocol import load_key, write_key_file

    key_file = write_key_file(tmp_path_factory.mktemp("key") / "robot.key")
    with ServerProcess(key_file, CAM_SERVER) as srv:
        yield srv, load_key(key_file)


def test_camera_frames_through_a_live_server_match_the_twin_rendered_locally(cam_server):
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.protocol import camera_limits

    srv, key = cam_server
    actions = [np.array([0.8, -0.3], np.float32), np.array([-0.5, 0.9], np.float32), np.array([0.2, 0.2], np.float32)] * 3
    with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:
        spec = c.hello()
        assert spec.cameras == (CameraSpec("topdown", (PX, PX, 3), spec.control_rate_hz),)
        limits = camera_limits(spec.cameras)
        assert c.server_limits["max_bytes"] >= limits.max_bytes > 65536  # the server raised its own from the spec
        c.use_limits(limits)
        first = c.reset(seed=11)
        states, frames, applied = [first.state], [first.images["topdown"]], []
        for a in actions:
            ans = c.step(a)
            applied.append(ans["applied"])
            states.append(ans["obs"].state)
            frames.append(ans["obs"].images["topdown"])
        watched = c.observe()  # any client may observe: the same latest frame
        assert c.status()["steps"] >= len(actions) and c.auth.rejected["oversized"] == 0
    np.testing.assert_array_equal(watched.images["topdown"], frames[-1])
    assert all(f.dtype == np.uint8 and f.shape == (PX, PX, 3) for f in frames)

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=PX)
    with twin:
        o = twin.reset(seed=11)
        want_s, want_f = [o.state], [o.images["topdown"]]
        for a in applied:
            twin.send_action(a)
            o = twin.get_observation()
            want_s.append(o.state)
            want_f.append(o.images["topdown"])
    np.testing.assert_array_equal(np.stack(frames), np.stack(want_f))
    np.testing.assert_array_equal(np.stack(states), np.stack(want_s))
    assert not np.array_equal(frames[0], frames[-1])  # the ball moved in the pictures


def test_default_limits_are_a_clear_error_naming_camera_limits_on_both_ends(cam_server):
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.protocol import Limits, camera_limits
    from robotrl.real_robot.server import RobotServer

    srv, key = cam_server
    with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:  # state-sized default limits
        c.hello()
        for request in (lambda: c.reset(seed=0), c.observe, lambda: c.step(np.zeros(2, np.float32))):
            with pytest.raises(ConfigError, match="camera_limits") as exc:
                request()
            assert "topdown" in str(exc.value) and "max_bytes" in str(exc.value)
        assert not c.lease_held and c.timeouts == 0  # refused before sending: no lease taken, nothing waited for

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=PX)
    sup = make_supervisor({}, twin.spec())
    with pytest.raises(ConfigError, match="camera_limits"):
        RobotServer(twin, sup, key, limits=Limits())  # the server refuses to start with limits its frames exceed
    RobotServer(twin, sup, key, limits=camera_limits(twin.spec().cameras)).close()
