"""``make_env``: one call from a robotrl name to a wrapped (vectorised) gymnasium env.

Wrapper order, innermost first::

    gymnasium.make(gym_id, **kwargs)      # TimeLimit(max_episode_steps), env checker
    SuccessInfo                           # info["success"], info["episode_success"]
    SuccessTermination                    # if terminate_on_success (training envs: success ends the episode)
    VideoRecorder                         # if record_video_dir (one frame per env step)
    PixelObservation(pixels, size)        # if pixels: Dict obs with uint8 (H, W, 3) cameras
    FlattenGoalObservation                # if flatten_goal, the obs space is a Dict and no pixels
    RescaleAction(-1, 1)                  # if rescale_actions
    ActionChunk(Te)                       # if action_chunk > 1
    SeedFirstReset(seed + i)              # if seed is not None

Symbols: ``Do`` = flattened observation size, ``Da`` = action size, ``Te`` = actions
executed per chunk, ``N`` = ``num_envs``.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import RescaleAction

from robotrl.envs.pixels import PixelObservation
from robotrl.envs.registry import resolve_env
from robotrl.envs.video import VideoRecorder, check_video_format, configure_headless_rendering
from robotrl.envs.wrappers import ActionChunk, FlattenGoalObservation, SeedFirstReset, SuccessInfo, SuccessTermination
from robotrl.errors import ConfigError

_VECTORIZATION = (None, "none", "sync", "async")


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be an int >= 1, got {value!r}")
    return int(value)


def _build_single(
    name: str,
    *,
    seed: int | None,
    flatten_goal: bool,
    rescale_actions: bool,
    action_chunk: int,
    max_episode_steps: int | None,
    record_video_dir: str | os.PathLike | None,
    video_format: str,
    env_kwargs: dict[str, Any] | None,
    pixels: tuple[str, ...] | None = None,
    size: int | tuple[int, int] = 64,
    terminate_on_success: bool = False,
) -> gym.Env:
    """Make and wrap one env (also the thunk body run inside vector sub-processes)."""
    gym_id, kwargs = resolve_env(name)
    kwargs.update(env_kwargs or {})
    if max_episode_steps is not None:
        kwargs["max_episode_steps"] = max_episode_steps
    if record_video_dir is not None or pixels:
        configure_headless_rendering()
    if record_video_dir is not None:
        kwargs.setdefault("render_mode", "rgb_array")
    env: gym.Env = gym.make(gym_id, **kwargs)
    env = SuccessInfo(env)
    if terminate_on_success:
        env = SuccessTermination(env)
    if record_video_dir is not None:
        env = VideoRecorder(env, record_video_dir, video_format=video_format)
    if pixels:
        env = PixelObservation(env, list(pixels), size)
    elif flatten_goal and isinstance(env.observation_space, gym.spaces.Dict):
        env = FlattenGoalObservation(env)
    if rescale_actions:
        space = env.action_space
        ones = np.ones(space.shape, dtype=space.dtype)  # type: ignore[type-var]  # bounds in the space's dtype: no cast warning
        env = RescaleAction(env, min_action=-ones, max_action=ones)
    if action_chunk > 1:
        env = ActionChunk(env, action_chunk)
    if seed is not None:
        env = SeedFirstReset(env, seed)
        env.action_space.seed(seed)
    return env


class _Thunk:
    """Picklable env factory for ``SyncVectorEnv``/``AsyncVectorEnv``."""

    def __init__(self, kwargs: dict[str, Any]):
        self.kwargs = kwargs

    def __call__(self) -> gym.Env:
        return _build_single(**self.kwargs)


def make_env(
    name: str,
    *,
    num_envs: int = 1,
    seed: int | None = None,
    vectorization: str | None = None,
    flatten_goal: bool = True,
    rescale_actions: bool = False,
    action_chunk: int = 1,
    max_episode_steps: int | None = None,
    record_video_dir: str | os.PathLike | None = None,
    video_format: str = "gif",
    env_kwargs: dict[str, Any] | None = None,
    pixels: list[str] | tuple[str, ...] | None = None,
    size: int | tuple[int, int] = 64,
    terminate_on_success: bool = False,
) -> gym.Env | gym.vector.VectorEnv:
    """Make a robotrl task, wrapped, optionally vectorised with gymnasium's vector envs.

    Args:
        name: robotrl name (see :func:`robotrl.envs.env_names`) or gymnasium id.
        num_envs: ``N >= 1`` sub-environments.
        seed: if given, sub-env ``i`` is seeded with ``seed + i`` at its first reset
            (a ``reset()`` without a seed behaves as ``reset(seed=seed + i)``) and its
            action space with ``seed + i``; the vector action space with ``seed``.
        vectorization: ``None`` (default: a plain ``gym.Env`` when ``N == 1``, a
            ``SyncVectorEnv`` when ``N > 1``), ``"none"`` (plain env, needs ``N == 1``),
            ``"sync"`` or ``"async"`` (always a vector env, also for ``N == 1``).
        flatten_goal: flatten a ``Dict`` observation to float32 ``(Do,)``.
        rescale_actions: expose actions in ``[-1, 1]`` (gymnasium ``RescaleAction``);
            default False because robotrl policies output raw env units.
        action_chunk: ``Te >= 1``; for ``Te > 1`` an action is a chunk ``(Te, Da)``
            (see :class:`~robotrl.envs.wrappers.ActionChunk`).
        max_episode_steps: override the registered time limit (env steps, not chunks).
        record_video_dir: record every episode of (sub-)env 0 to this folder; selects
            headless OSMesa rendering if no ``MUJOCO_GL`` is set. Frame size comes from
            ``env_kwargs`` (``width``/``height``) where the task accepts them.
        video_format: ``"gif"`` or ``"mp4"`` (MP4 needs the pip package imageio-ffmpeg).
        env_kwargs: extra ``gymnasium.make`` keyword arguments (override the table's).
        pixels: camera names (:class:`~robotrl.envs.pixels.PixelObservation`: a model camera
            such as Fetch's ``"external_camera_0"``, or the free ``"topdown"``/``"free"``).
            The observation becomes a ``Dict`` with ``"pixels": {camera: uint8 (H, W, 3)}``
            beside the task's keys (``"state"`` for a Box task); ``flatten_goal`` is then
            not applied (the data layer flattens the non-camera part). Selects headless
            rendering (OSMesa) if no ``MUJOCO_GL`` is set.
        size: camera frame size in pixels, ``H = W`` or ``(H, W)``; used with ``pixels``.
        terminate_on_success: end an episode (``terminated``) at the step that succeeds
            (:class:`~robotrl.envs.wrappers.SuccessTermination`; ResiP/ResFiT training envs). For
            training envs only: evaluation keeps the task's own episodes. Tasks that report no
            success (locomotion) never terminate through it.

    Returns:
        a ``gym.Env`` (observation ``(Do,)``, action ``(Da,)`` or ``(Te, Da)``), or a
        ``gymnasium.vector.SyncVectorEnv``/``AsyncVectorEnv`` with a leading ``N`` axis.

    Raises:
        ConfigError: unknown env name (lists the known names) or unknown vectorization.
        ValueError: ``num_envs``/``action_chunk``/``max_episode_steps`` not an int >= 1,
            or ``num_envs > 1`` with ``vectorization="none"``.
        RenderingError: recording or pixels requested but OSMesa (``libosmesa6``) is missing.
    """
    if pixels is not None:
        pixels = [pixels] if isinstance(pixels, str) else [str(c) for c in pixels]
        if not pixels:
            raise ConfigError("pixels=[] names no camera; give at least one (e.g. pixels=['topdown']) or pass None")
        configure_headless_rendering()
    num_envs = _positive_int(num_envs, "num_envs")
    action_chunk = _positive_int(action_chunk, "action_chunk")
    if max_episode_steps is not None:
        max_episode_steps = _positive_int(max_episode_steps, "max_episode_steps")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
        raise ValueError(f"seed must be None or an int >= 0, got {seed!r}")
    if vectorization not in _VECTORIZATION:
        raise ConfigError(f"vectorization must be one of {_VECTORIZATION}, got {vectorization!r}")
    if vectorization == "none" and num_envs > 1:
        raise ValueError(f"num_envs={num_envs} needs vectorization='sync' or 'async', not 'none'")
    resolve_env(name)  # fail fast on an unknown name, before any sub-process starts
    if record_video_dir is not None:
        check_video_format(video_format)
        configure_headless_rendering()  # before sub-processes start, so they inherit it

    def kwargs_for(i: int) -> dict[str, Any]:
        return dict(
            name=name,
            seed=None if seed is None else int(seed) + i,
            flatten_goal=flatten_goal,
            rescale_actions=rescale_actions,
            action_chunk=action_chunk,
            max_episode_steps=max_episode_steps,
            record_video_dir=record_video_dir if i == 0 else None,
            video_format=video_format,
            env_kwargs=dict(env_kwargs or {}),
            pixels=tuple(pixels) if pixels else None,
            size=size,
            terminate_on_success=bool(terminate_on_success),
        )

    if vectorization in (None, "none") and num_envs == 1:
        return _build_single(**kwargs_for(0))
    fns = [_Thunk(kwargs_for(i)) for i in range(num_envs)]
    if vectorization == "async":
        venv: gym.vector.VectorEnv = gym.vector.AsyncVectorEnv(fns)
    else:
        venv = gym.vector.SyncVectorEnv(fns)
    if seed is not None:
        venv.action_space.seed(int(seed))
    return venv


def make_eval_env(name: str, *, seed: int | None = None, **kwargs: Any) -> gym.Env:
    """A single evaluation env: :func:`make_env` with ``num_envs=1``, no vectorisation.

    Accepts the keyword arguments of :func:`make_env` except ``num_envs`` and
    ``vectorization``; typical use ``make_eval_env("fetch-push", seed=100,
    record_video_dir="videos/")``.

    Raises:
        the same errors as :func:`make_env`; ``TypeError`` for ``num_envs``/``vectorization``.
    """
    for bad in ("num_envs", "vectorization"):
        if bad in kwargs:
            raise TypeError(f"make_eval_env makes one plain env; do not pass {bad}")
    return make_env(name, seed=seed, num_envs=1, vectorization=None, **kwargs)


def make_env_from_args(args: dict[str, Any], **kwargs: Any) -> gym.Env | gym.vector.VectorEnv:
    """:func:`make_env` from a run's recorded env arguments (``derived.train_env`` / ``derived.eval_env`` of a
    checkpoint's config): ``{"name", "env_kwargs", "max_episode_steps"}``, for training envs ``"terminate_on_success"``
    and, for camera runs, ``"pixels"`` (camera names) and ``"size"`` (``[H, W]``). ``kwargs``: further :func:`make_env` arguments (``num_envs``,
    ``seed``, ``record_video_dir``, ...).

    Raises:
        the errors of :func:`make_env`.
    """
    pixels = args.get("pixels")
    size = args.get("size") or 64
    return make_env(args["name"], env_kwargs=args.get("env_kwargs") or None, max_episode_steps=args.get("max_episode_steps"),
                    pixels=list(pixels) if pixels else None, size=size if np.isscalar(size) else tuple(size),
                    **{"terminate_on_success": bool(args.get("terminate_on_success", False)), **kwargs})
