"""The headless-rendering choice the ``robotrl`` command line makes first thing, without torch or gymnasium.

:mod:`robotrl.envs.video` re-exports these; they live here so that ``robotrl.cli.main`` can call
:func:`prefer_headless_rendering` without importing the ``robotrl.envs`` package (which imports
gymnasium and, through the data layer, torch: ~3 s that ``robotrl bench`` or ``robotrl collect
list=true`` would pay for nothing).
"""

from __future__ import annotations

import ctypes.util
import os
import sys


def osmesa_available() -> bool:
    """True when the OSMesa shared library (Debian ``libosmesa6``) can be found."""
    return ctypes.util.find_library("OSMesa") is not None


def has_display() -> bool:
    """True when an X11 (``DISPLAY``) or Wayland (``WAYLAND_DISPLAY``) display is set."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def prefer_headless_rendering() -> str | None:
    """Choose OSMesa for MuJoCo before its GL backend is chosen, on a machine without a display.

    The ``robotrl`` command line calls this first thing, so camera recording (``cameras=[...]``,
    ``video_dir=...``) works headless with no environment variable set by hand. It sets
    ``MUJOCO_GL=osmesa`` and ``PYOPENGL_PLATFORM=osmesa`` only when ``MUJOCO_GL`` is unset, no
    display (``DISPLAY``/``WAYLAND_DISPLAY``) is present, mujoco is not imported yet and libOSMesa
    is installed; otherwise it changes nothing (a display's GLFW, or the user's choice, stays).

    Returns:
        the backend set (``"osmesa"``), or ``None`` when nothing was changed.
    """
    if os.environ.get("MUJOCO_GL", "").strip() or has_display() or "mujoco" in sys.modules:
        return None
    if not osmesa_available():
        return None
    os.environ["MUJOCO_GL"] = "osmesa"
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    return "osmesa"
