"""The MuJoCo twin's cameras: RobotSpec lists them, observations carry their frames, and the
frames equal the ones ``make_env(..., pixels=...)`` renders for the same seed and commands."""

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
