"""Short robotrl environment names, their gymnasium ids, and facts about each task.

robotrl refers to tasks by short names (``"hopper"``, ``"pointmaze-umaze"``,
``"fetch-push"``, ...). :func:`resolve_env` turns a short name into a gymnasium id plus
keyword arguments; raw gymnasium ids (``"Hopper-v5"``) are accepted too. The
gymnasium-robotics tasks (mazes, Fetch, Adroit, Kitchen) are registered lazily the first
time a name is resolved, so importing robotrl stays cheap.

:func:`env_info` makes the environment once (then caches the answer) and reports the
sizes networks need: ``Do`` (flattened observation size), ``Da`` (action size), the
:class:`~robotrl.data.spaces.FlatLayout` of a ``Dict`` observation, the episode limit and
whether the task reports success.

Symbols: ``Do`` = flattened observation size, ``Da`` = action size.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import logging
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.data.spaces import FlatLayout, flat_dim, layout_for_space
from robotrl.errors import ConfigError


@dataclass(frozen=True)
class EnvEntry:
    """One row of the name table.

    Attributes:
        gym_id: the registered gymnasium id, e.g. ``"PointMaze_UMaze-v3"``.
        family: task family (``"locomotion"``, ``"pointmaze"``, ``"antmaze"``,
            ``"fetch"``, ``"adroit"``, ``"kitchen"``).
        kwargs: extra keyword arguments for ``gymnasium.make`` (usually empty).
    """

    gym_id: str
    family: str
    kwargs: dict[str, Any] = field(default_factory=dict)


#: PointMaze as a goal-reaching task: reward 1 and termination at the goal (the recipes' MDP).
_GOAL_REACHING = {"continuing_task": False, "reset_target": False}

_ENTRIES: dict[str, EnvEntry] = {
    "hopper": EnvEntry("Hopper-v5", "locomotion"),
    "halfcheetah": EnvEntry("HalfCheetah-v5", "locomotion"),
    "walker2d": EnvEntry("Walker2d-v5", "locomotion"),
    "ant": EnvEntry("Ant-v5", "locomotion"),
    "pointmaze-umaze": EnvEntry("PointMaze_UMaze-v3", "pointmaze", _GOAL_REACHING),
    "pointmaze-medium": EnvEntry("PointMaze_Medium-v3", "pointmaze", _GOAL_REACHING),
    "pointmaze-large": EnvEntry("PointMaze_Large-v3", "pointmaze", _GOAL_REACHING),
    "antmaze-umaze": EnvEntry("AntMaze_UMaze-v5", "antmaze"),
    "antmaze-medium": EnvEntry("AntMaze_Medium-v5", "antmaze"),
    "antmaze-large": EnvEntry("AntMaze_Large-v5", "antmaze"),
    "fetch-reach": EnvEntry("FetchReach-v4", "fetch"),
    "fetch-push": EnvEntry("FetchPush-v4", "fetch"),
    "fetch-pickandplace": EnvEntry("FetchPickAndPlace-v4", "fetch"),
    "fetch-slide": EnvEntry("FetchSlide-v4", "fetch"),
    "adroit-pen": EnvEntry("AdroitHandPen-v1", "adroit"),
    "adroit-door": EnvEntry("AdroitHandDoor-v1", "adroit"),
    "adroit-hammer": EnvEntry("AdroitHandHammer-v1", "adroit"),
    "adroit-relocate": EnvEntry("AdroitHandRelocate-v1", "adroit"),
    "kitchen": EnvEntry("FrankaKitchen-v1", "kitchen"),
}

_REGISTERED = False


def ensure_registered() -> None:
    """Register the gymnasium-robotics tasks with gymnasium (once per process).

    Idempotent and cheap after the first call. The first call imports
    ``gymnasium_robotics`` (which also imports ``mujoco``).
    """
    global _REGISTERED
    if _REGISTERED:
        return
    # gymnasium-robotics 1.4.x prints a notice about the AdroitHand*Dense-v1 rewards to
    # stderr at import; robotrl uses the sparse-reward Adroit ids, so that notice is
    # dropped and anything else printed is passed on.
    buffer = io.StringIO()
    with contextlib.redirect_stderr(buffer):
        import gymnasium_robotics
    for line in buffer.getvalue().splitlines():
        if "AdroitHand" not in line or "Dense-v1" not in line:
            logging.getLogger(__name__).warning("gymnasium_robotics: %s", line)
    gym.register_envs(gymnasium_robotics)
    _REGISTERED = True


def env_names() -> list[str]:
    """The short robotrl names, in table order (raw gymnasium ids are accepted as well)."""
    return list(_ENTRIES)


def resolve_env(name: str) -> tuple[str, dict[str, Any]]:
    """Turn a robotrl name or a raw gymnasium id into ``(gym_id, make_kwargs)``.

    Args:
        name: a short name from :func:`env_names` (case-insensitive) or any registered
            gymnasium id such as ``"Hopper-v5"``.

    Returns:
        the gymnasium id and a fresh copy of the table's keyword arguments.

    Raises:
        ConfigError: the name is neither a robotrl name nor a registered gymnasium id;
            the message lists the known names.
    """
    if not isinstance(name, str):
        raise ConfigError(f"env name must be a string, got {type(name).__name__} {name!r}")
    key = name.strip().lower()
    entry = _ENTRIES.get(key)
    if entry is not None and entry.family == "locomotion":
        return entry.gym_id, dict(entry.kwargs)  # gymnasium's own: no robotics import needed
    ensure_registered()
    if entry is not None:
        return entry.gym_id, dict(entry.kwargs)
    if name in gym.registry:
        return name, {}
    close = difflib.get_close_matches(key, list(_ENTRIES), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(
        f"unknown environment {name!r}.{hint} Known robotrl names: {', '.join(env_names())}. "
        "A registered gymnasium id (e.g. 'Hopper-v5', 'FetchPush-v4') is accepted too."
    )


def family_of(name: str) -> str | None:
    """The task family of a short name or of a gymnasium id in the table, else ``None``."""
    key = name.strip().lower()
    if key in _ENTRIES:
        return _ENTRIES[key].family
    for entry in _ENTRIES.values():
        if entry.gym_id == name:
            return entry.family
    return None


@dataclass(frozen=True)
class EnvInfo:
    """Facts about one task, measured by making it once.

    Attributes:
        name: the name that was asked for.
        gym_id: the gymnasium id it resolved to.
        family: task family, or ``None`` for a raw id outside the table.
        obs_dim: ``Do``, size of the flat observation (after :class:`FlatLayout` for a
            ``Dict`` space).
        action_dim: ``Da``, size of one action (raw env units).
        layout: the :class:`FlatLayout` of a ``Dict`` observation, ``None`` for a Box.
        max_episode_steps: the registered time limit in env steps (``None`` if none).
        reports_success: whether the task's ``info`` carries a success signal (Fetch
            ``is_success``, maze/Adroit ``success``, Kitchen task completions).
        observation_space: the raw observation space (``Dict`` or ``Box``).
        action_space: the raw action space, ``Box(Da,)``.
        action_low, action_high: bounds of one action, float64 arrays ``(Da,)``.
    """

    name: str
    gym_id: str
    family: str | None
    obs_dim: int
    action_dim: int
    layout: FlatLayout | None
    max_episode_steps: int | None
    reports_success: bool
    observation_space: gym.Space
    action_space: gym.Space
    action_low: np.ndarray
    action_high: np.ndarray


_INFO_CACHE: dict[tuple[str, str], EnvInfo] = {}


def env_info(name: str, env_kwargs: dict[str, Any] | None = None) -> EnvInfo:
    """Make the task once (reset + one neutral step) and report its sizes; cached.

    Args:
        name: robotrl name or gymnasium id.
        env_kwargs: extra ``gymnasium.make`` keyword arguments that change the spaces
            (e.g. Kitchen's ``tasks_to_complete``); part of the cache key.

    Returns:
        an :class:`EnvInfo`.

    Raises:
        ConfigError: unknown name.
        SpaceMismatchError: the observation space is not a Box or Dict of Box.
    """
    from robotrl.envs.wrappers import SuccessInfo  # local: wrappers imports nothing from here

    gym_id, kwargs = resolve_env(name)
    kwargs.update(env_kwargs or {})
    kwargs.pop("render_mode", None)
    key = (gym_id, repr(sorted(kwargs.items())))
    if key in _INFO_CACHE:
        cached = _INFO_CACHE[key]
        return cached if cached.name == name else _replace_name(cached, name)
    env = SuccessInfo(gym.make(gym_id, **kwargs))
    try:
        obs_space, act_space = env.observation_space, env.action_space
        if not isinstance(act_space, gym.spaces.Box) or len(act_space.shape) != 1:
            raise ConfigError(f"{gym_id} has action space {act_space}; robotrl supports 1-D Box actions only")
        env.reset(seed=0)
        low, high = act_space.low.astype(np.float64), act_space.high.astype(np.float64)
        neutral = np.clip(np.zeros(act_space.shape), low, high).astype(act_space.dtype)
        env.step(neutral)
        info = EnvInfo(
            name=name,
            gym_id=gym_id,
            family=family_of(name),
            obs_dim=flat_dim(obs_space),
            action_dim=int(act_space.shape[0]),
            layout=layout_for_space(obs_space),
            max_episode_steps=env.spec.max_episode_steps if env.spec is not None else None,
            reports_success=env.reports_success,
            observation_space=obs_space,
            action_space=act_space,
            action_low=low,
            action_high=high,
        )
    finally:
        env.close()
    _INFO_CACHE[key] = info
    return info


def _replace_name(info: EnvInfo, name: str) -> EnvInfo:
    from dataclasses import replace

    return replace(info, name=name)
