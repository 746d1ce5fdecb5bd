"""Headless video capture of evaluation episodes (GIF, or MP4 with imageio-ffmpeg).

Rendering MuJoCo without a display needs the Debian package ``libosmesa6`` and the
environment variables ``MUJOCO_GL=osmesa`` and ``PYOPENGL_PLATFORM=osmesa``.
:func:`configure_headless_rendering` sets them when unset; mujoco reads ``MUJOCO_GL`` once, at
import, so run after that it gives mujoco the OSMesa context class it would have picked.
The ``robotrl`` command line calls :func:`prefer_headless_rendering` first thing, so recording
works on a headless machine with nothing set by hand. gymnasium's own
``RecordVideo`` needs ``moviepy``, which robotrl does not depend on, so frames are
written with ``imageio`` instead (GIF through Pillow; MP4 needs ``imageio-ffmpeg``).
Software rendering costs about 150 ms per 240x240 frame: keep frames small
(``env_kwargs={"width": 128, "height": 128}``) and episodes short.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.utils import has_display as _has_display
from robotrl.utils import osmesa_available, prefer_headless_rendering  # noqa: F401  (re-exported)
from robotrl.errors import ConfigError, RobotRLError
from robotrl.files import atomic_path

_APT_HINT = (
    "headless MuJoCo rendering needs the Debian package libosmesa6 "
    "(apt-get install -y libosmesa6) and MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa set "
    "before mujoco is imported"
)


class RenderingError(RobotRLError, RuntimeError):
    """Frames cannot be rendered or written (missing OSMesa, missing video encoder)."""


def configure_headless_rendering() -> str:
    """Select MuJoCo's OSMesa software renderer unless a backend is already chosen.

    Sets ``MUJOCO_GL=osmesa`` and ``PYOPENGL_PLATFORM=osmesa`` when they are unset (an
    existing ``MUJOCO_GL=egl``/``glfw`` is kept). Must run before PyOpenGL is first
    imported in this process; sub-processes started afterwards inherit the variables.

    Returns:
        the MuJoCo GL backend in effect (``"osmesa"``, ``"egl"``, ...).

    Raises:
        RenderingError: the OSMesa backend is selected but ``libOSMesa`` is not
            installed (the message names the Debian package ``libosmesa6``).
    """
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    if not backend:
        late = _backend_mujoco_chose() == "" and not _has_display()  # mujoco already chose GLFW, at import
        os.environ["MUJOCO_GL"] = backend = "osmesa"
    else:
        late = False
    if backend == "osmesa":
        os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
        if not osmesa_available():
            raise RenderingError(f"libOSMesa was not found: {_APT_HINT}")
        if late:
            _switch_mujoco_to_osmesa()
    return backend


def _switch_mujoco_to_osmesa() -> None:
    """mujoco picks ``mujoco.gl_context.GLContext`` once, at import, from ``MUJOCO_GL``; imported
    without it on a machine with no display, it picked GLFW, which fails at the first
    ``mujoco.Renderer`` frame ("an OpenGL platform library has not been loaded"). Give it the
    class it would have picked with ``MUJOCO_GL=osmesa`` (gymnasium's own renderer reads the
    variable per viewer and needs nothing).

    Raises:
        RenderingError: PyOpenGL is already loaded for another platform: too late in this process.
    """
    import mujoco.gl_context as gl

    if "OpenGL.GL" in sys.modules and os.environ.get("PYOPENGL_PLATFORM", "").lower() != "osmesa":
        raise RenderingError("PyOpenGL was loaded for another platform before headless rendering was configured: "
                             "set MUJOCO_GL=osmesa PYOPENGL_PLATFORM=osmesa before starting Python (the robotrl "
                             "command line does this itself)")
    from mujoco.osmesa import GLContext

    gl.GLContext = GLContext


def _backend_mujoco_chose() -> str | None:
    """The ``MUJOCO_GL`` value mujoco read when it chose its GL backend; ``None`` before that."""
    gl = sys.modules.get("mujoco.gl_context")
    return None if gl is None else str(getattr(gl, "_MUJOCO_GL", ""))


VIDEO_FORMATS = ("gif", "mp4")


def check_video_format(video_format: str) -> None:
    """Check that ``video_format`` is ``"gif"`` or ``"mp4"`` and can be written.

    Raises:
        ConfigError: another format.
        RenderingError: ``"mp4"`` without the pip package ``imageio-ffmpeg``.
    """
    if video_format not in VIDEO_FORMATS:
        raise ConfigError(f"video_format must be one of {VIDEO_FORMATS}, got {video_format!r}")
    if video_format == "mp4" and importlib.util.find_spec("imageio_ffmpeg") is None:
        raise RenderingError(
            "writing MP4 needs the pip package imageio-ffmpeg (pip install imageio-ffmpeg); "
            "use video_format='gif' to write GIF files with the installed imageio/Pillow"
        )


def write_video(path: str | os.PathLike, frames: list[np.ndarray], fps: float) -> Path:
    """Write RGB frames ``(T, H, W, 3)`` uint8 to ``path`` (``.gif`` or ``.mp4``).

    Args:
        path: output file; the suffix picks the format.
        frames: ``T >= 1`` frames of equal shape ``(H, W, 3)``, uint8.
        fps: frames per second (> 0).

    Returns:
        the written path.

    Raises:
        RenderingError: MP4 requested without ``imageio-ffmpeg``.
        ConfigError: unknown suffix or no frames.
    """
    import imageio

    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    check_video_format(fmt)
    if not frames:
        raise ConfigError(f"no frames to write to {path}")
    stack = np.stack([np.asarray(f, dtype=np.uint8) for f in frames])
    with atomic_path(path, mode=0o666) as tmp:  # ends in path's suffix: ffmpeg picks the container by it
        if fmt == "gif":
            imageio.v3.imwrite(tmp, stack, extension=".gif", duration=1000.0 / fps, loop=0)
        else:
            imageio.v2.mimwrite(tmp, list(stack), format="FFMPEG", fps=fps, macro_block_size=1)
    return path


class VideoRecorder(gym.Wrapper):
    """Record the episodes chosen by ``episode_trigger`` to ``video_dir``.

    One frame (``env.render()``, uint8 ``(H, W, 3)``) is taken after each reset and each
    step; an episode's file ``{name_prefix}-{episode:04d}.{gif|mp4}`` is written when the
    episode ends (terminated/truncated), at the next reset, or at ``close``. Written
    paths are listed in :attr:`paths`.

    Args:
        env: an env made with ``render_mode="rgb_array"``.
        video_dir: folder for the files (created).
        video_format: ``"gif"`` (default, no extra dependency) or ``"mp4"`` (needs the
            pip package ``imageio-ffmpeg``).
        fps: frames per second; default ``env.metadata["render_fps"]`` or 30.
        episode_trigger: ``f(episode_index) -> bool``; default records every episode.
        name_prefix: file name prefix.

    Raises:
        ConfigError: the env's ``render_mode`` is not ``"rgb_array"``, or bad format.
        RenderingError: MP4 without ``imageio-ffmpeg``; at reset/step, a frame could not
            be rendered (the message names the Debian package ``libosmesa6``).
    """

    def __init__(
        self,
        env: gym.Env,
        video_dir: str | os.PathLike,
        *,
        video_format: str = "gif",
        fps: float | None = None,
        episode_trigger: Callable[[int], bool] | None = None,
        name_prefix: str = "episode",
    ):
        super().__init__(env)
        if env.render_mode != "rgb_array":
            raise ConfigError(
                f"VideoRecorder needs an env made with render_mode='rgb_array', got {env.render_mode!r}"
            )
        check_video_format(video_format)
        self.video_dir = Path(video_dir)
        self.video_format = video_format
        self.fps = float(fps or env.metadata.get("render_fps") or 30)
        self.episode_trigger = episode_trigger or (lambda episode: True)
        self.name_prefix = name_prefix
        self.paths: list[Path] = []
        self._episode = -1
        self._frames: list[np.ndarray] | None = None

    def _capture(self) -> None:
        if self._frames is None:
            return
        try:
            frame = self.env.render()
        except Exception as exc:  # noqa: BLE001 - any GL failure gets the same advice
            raise RenderingError(f"rendering a frame failed ({type(exc).__name__}: {exc}); {_APT_HINT}") from exc
        if frame is None:
            raise RenderingError("env.render() returned None; make the env with render_mode='rgb_array'")
        self._frames.append(np.asarray(frame, dtype=np.uint8))

    def _finish(self) -> None:
        if self._frames:
            path = self.video_dir / f"{self.name_prefix}-{self._episode:04d}.{self.video_format}"
            self.paths.append(write_video(path, self._frames, self.fps))
        self._frames = None

    def reset(self, **kwargs) -> tuple[Any, dict[str, Any]]:
        """Reset; finishes a pending recording and starts a new one if triggered."""
        self._finish()
        obs, info = self.env.reset(**kwargs)
        self._episode += 1
        self._frames = [] if self.episode_trigger(self._episode) else None
        self._capture()
        return obs, info

    def step(self, action):
        """Step and take a frame; writes the file when the episode ends."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._capture()
        if terminated or truncated:
            self._finish()
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Write a pending recording, then close the env."""
        try:
            self._finish()
        finally:
            super().close()
