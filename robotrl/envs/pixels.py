"""Camera observations for MuJoCo tasks: ``Dict`` observations with uint8 frames.

:class:`PixelObservation` renders one or more cameras after every ``reset``/``step``
(headless, through OSMesa or EGL) and adds them to the observation::

    {"pixels": {"<camera>": uint8 (H, W, 3), ...}, <the task's own keys>}

A ``Box`` observation (locomotion) becomes the key ``"state"``; a ``Dict`` observation
(PointMaze, Fetch: ``achieved_goal``/``desired_goal``/``observation``) keeps its keys, so
scripted experts and planners that read them keep working. The data layer
(:func:`robotrl.data.spaces.split_images`) recognises every ``uint8 (H, W, C)`` entry as a
camera (key path ``"pixels/<camera>"``) and keeps it out of the flat vector.

Camera names: any camera of the MuJoCo model (Fetch: ``head_camera_rgb``,
``gripper_camera_rgb``, ``external_camera_0``; Hopper: ``track``), or one of the free
cameras robotrl defines for models without a suitable camera (PointMaze has none):

* ``"topdown"``: looks straight down at the model's centre from ``1.6 x`` its extent;
* ``"free"``: MuJoCo's default free camera (``mjv_defaultFreeCamera``);
* a named *view* of your own (``views={"goal": {"lookat": [x, y, z], "distance": d, "elevation": -90,
  "azimuth": 90}}``): a free camera looking at ``lookat`` (m, world frame) from ``distance`` m, ``elevation`` and
  ``azimuth`` in degrees (MuJoCo's ``mjvCamera``). It frames a task region, as a real camera mounted over it or
  HIL-SERL's crop of a camera to the task region would.

Symbols: ``H, W`` frame height/width in pixels, ``C = 3`` (RGB).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.errors import ConfigError

__all__ = ["PixelObservation", "FREE_CAMERAS", "VIEW_KEYS", "model_cameras", "check_views"]

#: camera names robotrl defines itself (free cameras), usable on any MuJoCo model
FREE_CAMERAS = ("topdown", "free")
#: the keys of a named view (:class:`PixelObservation`'s ``views``): ``lookat`` (3 floats, m) is required
VIEW_KEYS = ("lookat", "distance", "elevation", "azimuth")


def check_views(views: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """``views`` (name -> ``{lookat: [x, y, z] m, distance: m, elevation: deg, azimuth: deg}``) checked and as plain
    dicts of floats; ``distance`` defaults to 2 m, ``elevation`` to -90 (straight down), ``azimuth`` to 90.

    Raises:
        ConfigError: a view named like a free camera, an unknown key, a ``lookat`` that is not 3 numbers or a
            distance that is not positive (the message names the view and the fix).
    """
    out: dict[str, dict[str, Any]] = {}
    for name, v in dict(views or {}).items():
        name = str(name)
        if name in FREE_CAMERAS:
            raise ConfigError(f"camera view {name!r} has the name of a built-in free camera; name it otherwise")
        v = dict(v or {})
        unknown = sorted(set(v) - set(VIEW_KEYS))
        if unknown:
            raise ConfigError(f"camera view {name!r} has unknown keys {unknown}; a view takes {list(VIEW_KEYS)}")
        lookat = v.get("lookat")
        if lookat is None or np.asarray(lookat).shape != (3,) or not np.all(np.isfinite(np.asarray(lookat, float))):
            raise ConfigError(f"camera view {name!r} needs lookat: [x, y, z] (3 finite numbers, m), got {lookat!r}")
        dist = float(v.get("distance", 2.0))
        if not dist > 0:
            raise ConfigError(f"camera view {name!r}: distance must be > 0 m, got {dist}")
        out[name] = {"lookat": [float(x) for x in lookat], "distance": dist,
                     "elevation": float(v.get("elevation", -90.0)), "azimuth": float(v.get("azimuth", 90.0))}
    return out


def model_cameras(env: gym.Env) -> list[str]:
    """Names of the cameras defined in ``env``'s MuJoCo model (in model order)."""
    import mujoco

    model = env.unwrapped.model
    return [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, j) or f"camera{j}" for j in range(model.ncam)]


class PixelObservation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Add rendered camera frames to a MuJoCo env's observation.

    Args:
        env: a gymnasium MuJoCo or gymnasium-robotics env (``env.unwrapped`` has
            ``model`` and ``data``).
        cameras: camera names (see the module docstring), at least one, no repeats.
        size: ``H = W`` in pixels, or ``(H, W)``; at most the model's offscreen buffer
            (``model.vis.global_.offwidth/offheight``, 480-640 for the supported tasks).
        state_key: key of a ``Box`` observation in the new ``Dict`` (default ``"state"``).
        views: named free cameras of your own (see the module docstring and :func:`check_views`), usable in
            ``cameras`` by their names.

    Observation: ``Dict`` with ``"pixels"`` -> ``Dict{camera: Box(0, 255, (H, W, 3), uint8)}``
    plus the task's keys (``Dict`` observation) or ``state_key`` (``Box``). Frames are fresh
    arrays every step (never a view of the renderer's buffer).

    Raises:
        ConfigError: the env is not a MuJoCo env, a camera is unknown (the message lists the
            model's cameras, the free ones and the views), no camera is given, a name repeats, a view is
            malformed, or the size exceeds the offscreen buffer.
        RenderingError: at the first frame, when no headless GL backend works
            (see :func:`robotrl.envs.video.configure_headless_rendering`).
    """

    def __init__(self, env: gym.Env, cameras: list[str] | tuple[str, ...], size: int | tuple[int, int] = 64,
                 state_key: str = "state", views: Mapping[str, Mapping[str, Any]] | None = None):
        self.views = check_views(views)
        gym.utils.RecordConstructorArgs.__init__(self, cameras=list(cameras) if not isinstance(cameras, str) else [cameras],
                                                 size=size, state_key=state_key, views=self.views)
        gym.ObservationWrapper.__init__(self, env)
        unwrapped = env.unwrapped
        if not (hasattr(unwrapped, "model") and hasattr(unwrapped, "data")):
            raise ConfigError(f"pixels need a MuJoCo env (env.unwrapped.model/.data); {type(unwrapped).__name__} has none")
        if isinstance(cameras, str):
            cameras = [cameras]
        cameras = [str(c) for c in cameras]
        if not cameras:
            raise ConfigError("pixels=[] names no camera; give at least one, e.g. pixels=['topdown']")
        if len(set(cameras)) != len(cameras):
            raise ConfigError(f"pixels names a camera twice: {cameras}")
        known = model_cameras(env)
        for c in cameras:
            if c not in known and c not in FREE_CAMERAS and c not in self.views:
                raise ConfigError(f"unknown camera {c!r} for {env.spec.id if env.spec else type(unwrapped).__name__}; "
                                  f"the model's cameras: {known or 'none'}; free cameras: {list(FREE_CAMERAS)}; "
                                  f"views: {list(self.views) or 'none (define one with views={name: {lookat: ...}})'}")
        h, w = (int(size), int(size)) if np.isscalar(size) else (int(size[0]), int(size[1]))
        glob = unwrapped.model.vis.global_
        if h < 1 or w < 1 or w > glob.offwidth or h > glob.offheight:
            raise ConfigError(f"camera size {(h, w)} must be >= 1 and within the model's offscreen buffer "
                              f"({glob.offheight}, {glob.offwidth}); choose a smaller size")
        self.cameras, self.size = tuple(cameras), (h, w)
        self.state_key = state_key
        frame = gym.spaces.Box(0, 255, (h, w, 3), np.uint8)
        pixels = gym.spaces.Dict({c: frame for c in self.cameras})
        inner = env.observation_space
        if isinstance(inner, gym.spaces.Dict):
            if "pixels" in inner.spaces:
                raise ConfigError("the observation already has a 'pixels' key; wrap the env with cameras only once")
            self._dict_obs = True
            self.observation_space = gym.spaces.Dict({**inner.spaces, "pixels": pixels})
        else:
            self._dict_obs = False
            self.observation_space = gym.spaces.Dict({state_key: inner, "pixels": pixels})
        self._renderer: Any = None
        self._free: dict[str, Any] = {}

    def _make_renderer(self) -> None:
        import mujoco

        from robotrl.envs.video import configure_headless_rendering

        configure_headless_rendering()
        model = self.env.unwrapped.model
        self._renderer = mujoco.Renderer(model, height=self.size[0], width=self.size[1])
        for c in self.cameras:
            if c in FREE_CAMERAS or c in self.views:
                cam = mujoco.MjvCamera()
                mujoco.mjv_defaultFreeCamera(model, cam)
                if c == "topdown":
                    cam.elevation, cam.azimuth, cam.distance = -90.0, 90.0, 1.6 * float(model.stat.extent)
                elif c in self.views:
                    v = self.views[c]
                    cam.lookat[:] = v["lookat"]
                    cam.distance, cam.elevation, cam.azimuth = v["distance"], v["elevation"], v["azimuth"]
                self._free[c] = cam

    def render_cameras(self) -> dict[str, np.ndarray]:
        """Render every camera at the current state: ``{camera: uint8 (H, W, 3)}``."""
        if self._renderer is None:
            self._make_renderer()
        data = self.env.unwrapped.data
        out = {}
        for c in self.cameras:
            self._renderer.update_scene(data, camera=self._free.get(c, c))
            out[c] = np.array(self._renderer.render(), dtype=np.uint8, copy=True)
        return out

    def observation(self, observation: Any) -> dict[str, Any]:
        """The task's observation plus ``"pixels"`` (see the class docstring)."""
        pixels = self.render_cameras()
        if self._dict_obs:
            return {**observation, "pixels": pixels}
        return {self.state_key: observation, "pixels": pixels}

    def close(self) -> None:
        """Free the renderer's GL context, then close the env."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        super().close()
