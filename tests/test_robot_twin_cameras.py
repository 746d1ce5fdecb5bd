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
