"""Gymnasium environment layer (installed as ``robotrl.envs``).

Short task names, wrapped and optionally vectorised envs, success signals for every
task family, action chunks and headless video capture::

    from robotrl.envs import make_env, env_info
    env = make_env("pointmaze-umaze", seed=0)          # obs float32 (Do,), action (Da,)
    venv = make_env("hopper", num_envs=4, seed=0, vectorization="async")
    info = env_info("fetch-push")                        # Do, Da, FlatLayout, limits
    cam = make_env("fetch-push", pixels=["external_camera_0"], size=64)  # + uint8 (64, 64, 3) frames

Symbols: ``Do`` = flattened observation size, ``Da`` = action size, ``Te`` = actions
executed per chunk.
"""

from robotrl.envs.make import make_env, make_env_from_args, make_eval_env
from robotrl.envs.pixels import FREE_CAMERAS, PixelObservation, model_cameras
from robotrl.envs.registry import EnvInfo, env_info, env_names, ensure_registered, resolve_env
from robotrl.envs.video import (
    RenderingError,
    VideoRecorder,
    configure_headless_rendering,
    osmesa_available,
    write_video,
)
from robotrl.envs.wrappers import (
    ActionChunk,
    FlattenGoalObservation,
    RescaleAction,
    SeedFirstReset,
    SuccessInfo,
    SuccessTermination,
)

__all__ = [
    "make_env",
    "make_env_from_args",
    "make_eval_env",
    "PixelObservation",
    "FREE_CAMERAS",
    "model_cameras",
    "EnvInfo",
    "env_info",
    "env_names",
    "ensure_registered",
    "resolve_env",
    "ActionChunk",
    "SuccessTermination",
    "FlattenGoalObservation",
    "RescaleAction",
    "SeedFirstReset",
    "SuccessInfo",
    "RenderingError",
    "VideoRecorder",
    "configure_headless_rendering",
    "osmesa_available",
    "write_video",
]
