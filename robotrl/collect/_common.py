"""Helpers shared by the dataset recipes: env creation, episode recording, reference scores.

Not public API; the recipes in :mod:`robotrl.collect` are.
"""

from __future__ import annotations

import contextvars

import os
import platform
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.data.spaces import stack_obs
from robotrl.data.writer import Episode, datasets_root

Policy = Callable[[Any], np.ndarray]


def register_robotics() -> None:
    """Register the gymnasium-robotics envs (PointMaze, Fetch) with gymnasium; idempotent."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)


def make_env(spec: str | gym.envs.registration.EnvSpec, **kwargs) -> gym.Env:
    """``gym.make`` after registering the robotics envs."""
    register_robotics()
    return gym.make(spec, **kwargs)


def with_cameras(env: gym.Env, cameras, image_size) -> gym.Env:
    """``env`` with camera frames in its observation (``cameras`` None or empty: ``env`` itself).

    Frames are ``uint8 (H, W, 3)`` under ``obs["pixels"][camera]``; see
    :class:`robotrl.envs.pixels.PixelObservation` (raises ``ConfigError`` on an unknown camera).
    """
    if not cameras:
        return env
    from robotrl.envs.pixels import PixelObservation

    return PixelObservation(env, [cameras] if isinstance(cameras, str) else list(cameras), int(image_size or 64))


def task_spec(env: gym.Env) -> gym.envs.registration.EnvSpec | None:
    """The env spec without the camera wrapper (what reference scores and ``env_spec`` record).

    Cameras are recorded in the dataset's observation space and provenance instead, so
    reference-score episodes run without rendering.
    """
    from robotrl.envs.pixels import PixelObservation

    return env.env.spec if isinstance(env, PixelObservation) else env.spec


def camera_facts(env: gym.Env) -> dict[str, Any]:
    """Provenance of the cameras recorded (empty without cameras)."""
    cams = getattr(env, "cameras", None)
    return {"cameras": list(cams), "image_size": list(env.size)} if cams else {}


class EpisodeRecorder:
    """Accumulates one episode in Minari layout (observations T+1, the rest T).

    ``success`` is recorded per step (``T+1`` entries, the reset info first) when
    ``success_key`` is given; missing keys count as False.
    """

    def __init__(self, obs: Any, info: Mapping, *, seed: int | None = None, success_key: str | None = None):
        self.success_key = success_key
        self.seed = seed
        self.obs = [obs]
        self.actions: list[np.ndarray] = []
        self.rewards: list[float] = []
        self.terms: list[bool] = []
        self.truncs: list[bool] = []
        self.success: list[bool] = [self._succ(info)]

    def _succ(self, info: Mapping) -> bool:
        return bool(info.get(self.success_key, False)) if self.success_key else False

    def add(self, action, obs, reward, terminated, truncated, info) -> None:
        self.actions.append(np.asarray(action))
        self.obs.append(obs)
        self.rewards.append(float(reward))
        self.terms.append(bool(terminated))
        self.truncs.append(bool(truncated))
        self.success.append(self._succ(info))

    def __len__(self) -> int:
        return len(self.rewards)

    def finish(self, *, cut: bool = False) -> Episode:
        """The episode; ``cut=True`` marks the last step truncated (budget ran out mid-episode)."""
        truncs = np.asarray(self.truncs, dtype=bool)
        terms = np.asarray(self.terms, dtype=bool)
        if cut and len(truncs) and not terms[-1]:
            truncs[-1] = True
        infos = {"success": np.asarray(self.success, dtype=bool)} if self.success_key else None
        return Episode(
            observations=stack_obs(self.obs),
            actions=np.stack(self.actions),
            rewards=np.asarray(self.rewards, dtype=np.float64),
            terminations=terms,
            truncations=truncs,
            infos=infos,
            seed=self.seed,
        )


def mean_return(
    env_spec: str | gym.envs.registration.EnvSpec,
    make_policy: Callable[[gym.Env], Policy],
    num_episodes: int,
    *,
    seed: int = 123,
    success_key: str | None = None,
) -> dict[str, float]:
    """Average undiscounted return of a policy over ``num_episodes`` episodes of ``env_spec``.

    Mirrors Minari's ``get_average_reference_score``: one env, first reset seeded
    (here with ``seed + i`` for episode ``i``), episodes end on termination or truncation.
    ``make_policy(env)`` builds the policy for that env (planners need its maze); a
    policy with a ``reset()`` method is reset after every env reset.

    Returns:
        ``{"mean": ..., "std": ..., "success_rate": ... (if success_key), "episodes": n}``.
    """
    env = make_env(env_spec)
    policy = make_policy(env)
    returns, successes = [], []
    try:
        for i in range(num_episodes):
            obs, info = env.reset(seed=seed + i)
            env.action_space.seed(seed + i)
            if hasattr(policy, "reset"):
                policy.reset()
            total, succ = 0.0, False
            while True:
                obs, r, term, trunc, info = env.step(policy(obs))
                total += float(r)
                if success_key:
                    succ = succ or bool(info.get(success_key, False))
                if term or trunc:
                    break
            returns.append(total)
            successes.append(succ)
    finally:
        env.close()
    out = {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "episodes": num_episodes}
    if success_key:
        out["success_rate"] = float(np.mean(successes))
    return out


def random_policy(env: gym.Env) -> Policy:
    """Uniform random actions from ``env.action_space`` (seeded by the caller's reset)."""
    return lambda obs: env.action_space.sample()


def progress_bar(total: int, desc: str, enabled: bool, unit: str = "step"):
    """A tqdm bar on a terminal, progress lines with an ETA otherwise (:func:`robotrl.progress.progress_bar`)."""
    from robotrl.progress import progress_bar as bar

    return bar(total, desc, enabled=enabled, unit=unit)


#: The arguments of the recipe call in progress (set by :meth:`robotrl.collect.registry.Recipe.__call__`),
#: recorded by :func:`base_provenance` as ``recipe_args`` so that a later request can be checked against them.
RECIPE_ARGS: contextvars.ContextVar[dict | None] = contextvars.ContextVar("robotrl_recipe_args", default=None)

#: Recipe arguments that do not change the data (where and how it is written, the display).
NOT_DATA_ARGS = frozenset({"dataset_id", "root", "overwrite", "progress", "data_format"})


def base_provenance(recipe: str, **facts) -> dict[str, Any]:
    """Provenance facts common to every recipe (versions, host, recipe name, and the recipe's
    arguments as called: ``recipe_args``)."""
    import gymnasium_robotics
    import mujoco

    return {
        "recipe": recipe,
        "gymnasium": gym.__version__,
        "gymnasium_robotics": gymnasium_robotics.__version__,
        "mujoco": mujoco.__version__,
        "numpy": np.__version__,
        "host": platform.node(),
        "created_unix": time.time(),
        **({"recipe_args": RECIPE_ARGS.get()} if RECIPE_ARGS.get() is not None else {}),
        **facts,
    }


def dataset_path(dataset_id: str, root: str | os.PathLike | None) -> Path:
    """``<root>/<dataset_id>`` with the writer's default root."""
    return (Path(root) if root is not None else datasets_root()) / dataset_id


def dataset_exists(dataset_id: str, root: str | os.PathLike | None) -> bool:
    """Whether a complete dataset (its ``data/metadata.json``) is present."""
    return (dataset_path(dataset_id, root) / "data" / "metadata.json").exists()


def collect_steps(env: gym.Env, policy: Policy, num_steps: int, seed: int, bar, *, success_key: str | None = None) -> list[Episode]:
    """Run ``policy`` for exactly ``num_steps`` env steps, resetting with ``seed + k`` for
    episode ``k`` after each termination/truncation; the last episode is cut (truncated)
    where the budget ends. A policy with ``reset()`` is reset at every env reset."""
    episodes: list[Episode] = []
    k = 0
    obs, info = env.reset(seed=seed)
    if hasattr(policy, "reset"):
        policy.reset()
    rec = EpisodeRecorder(obs, info, seed=seed, success_key=success_key)
    for _ in range(num_steps):
        action = policy(obs)
        obs, r, term, trunc, info = env.step(action)
        rec.add(action, obs, r, term, trunc, info)
        bar.update(1)
        if term or trunc:
            episodes.append(rec.finish())
            k += 1
            obs, info = env.reset(seed=seed + k)
            if hasattr(policy, "reset"):
                policy.reset()
            rec = EpisodeRecorder(obs, info, seed=seed + k, success_key=success_key)
    if len(rec):
        episodes.append(rec.finish(cut=True))
    return episodes
