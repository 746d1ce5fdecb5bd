"""gymnasium wrappers that robotrl puts around every task.

Symbols: ``Do`` = flattened observation size, ``Da`` = action size, ``Te`` = number of
actions executed per chunk. Actions are in raw env units unless
``gymnasium.wrappers.RescaleAction`` (re-exported here) is applied.

* :class:`FlattenGoalObservation` - ``Dict`` observation -> float32 ``Box(Do,)`` through
  the project's one flattening rule (:class:`robotrl.data.spaces.FlatLayout`).
* :class:`ActionChunk` - one ``step`` executes an action chunk ``(Te, Da)``.
* :class:`SuccessInfo` - a bool ``info["success"]`` and ``info["episode_success"]`` for
  every task family.
* :class:`SuccessTermination` - success ends the episode (``terminated``), for training envs.
* :class:`SeedFirstReset` - the first ``reset()`` without a seed uses a given seed.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium.wrappers import RescaleAction

from robotrl.data.spaces import FlatLayout, flat_observation_space, layout_for_space
from robotrl.errors import SpaceMismatchError

__all__ = ["FlattenGoalObservation", "ActionChunk", "SuccessInfo", "SuccessTermination", "SeedFirstReset", "RescaleAction"]


class FlattenGoalObservation(gym.ObservationWrapper):
    """Flatten a (goal-conditioned, possibly nested) ``Dict`` observation to ``Box(Do,)``.

    The order is :func:`robotrl.data.spaces.layout_for_space` of the env's space (the
    space's own key order, alphabetical for gymnasium-robotics tasks, e.g.
    ``achieved_goal | desired_goal | observation``); it is exposed as :attr:`layout` so
    the flat vector can be split back with ``layout.unflatten``.

    Args:
        env: an env whose observation space is a ``Dict`` of ``Box`` (nested allowed).

    Raises:
        SpaceMismatchError: the observation space is not a ``Dict`` of ``Box``.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        layout = layout_for_space(env.observation_space)
        if layout is None:
            raise SpaceMismatchError(
                f"FlattenGoalObservation needs a Dict observation space, got {env.observation_space}; "
                "Box observations are already flat"
            )
        self.layout: FlatLayout = layout
        self.observation_space = flat_observation_space(env.observation_space)

    def observation(self, observation: dict) -> np.ndarray:
        """Dict observation -> float32 array ``(Do,)``."""
        return self.layout.flatten(observation)


class ActionChunk(gym.Wrapper):
    """Execute a chunk of ``Te`` actions per ``step``.

    The action space becomes ``Box((Te, Da))`` with the inner bounds repeated per row.
    ``step(chunk)`` executes ``chunk[0], chunk[1], ...`` in order and stops early when
    the inner env reports ``terminated`` or ``truncated``. It returns the last
    observation, the sum of the executed rewards (Python float, summed in order), the
    last ``terminated``/``truncated`` flags and the last step's ``info`` plus

    * ``info["executed_steps"]``: int, number of actions executed (``1..Te``);
    * ``info["step_rewards"]``: float64 array ``(Te,)``, the per-step rewards; entries
      at index ``>= executed_steps`` are 0 (fixed shape so vector envs can stack it).

    Time limits count env steps, not chunks.

    Args:
        env: an env with a 1-D ``Box(Da,)`` action space.
        chunk_size: ``Te >= 1``.

    Raises:
        ValueError: ``chunk_size`` is not a positive int, or the action space is not a
            1-D Box; at ``step``, an action whose shape is not ``(Te, Da)``.
    """

    def __init__(self, env: gym.Env, chunk_size: int):
        super().__init__(env)
        if isinstance(chunk_size, bool) or not isinstance(chunk_size, (int, np.integer)) or chunk_size < 1:
            raise ValueError(f"action chunk size Te must be an int >= 1, got {chunk_size!r}")
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"ActionChunk needs a 1-D Box action space (Da,), got {space}")
        self.chunk_size = int(chunk_size)
        te, da = self.chunk_size, space.shape[0]
        self.action_space = gym.spaces.Box(
            low=np.broadcast_to(space.low, (te, da)).copy(),
            high=np.broadcast_to(space.high, (te, da)).copy(),
            dtype=space.dtype,
        )

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Execute the chunk ``(Te, Da)``; see the class docstring for the returns."""
        chunk = np.asarray(action)
        if chunk.shape != self.action_space.shape:
            raise ValueError(
                f"ActionChunk expects an action chunk of shape (Te, Da) = {self.action_space.shape}, "
                f"got {chunk.shape}"
            )
        rewards = np.zeros(self.chunk_size, dtype=np.float64)
        total = 0.0
        for k in range(self.chunk_size):
            obs, reward, terminated, truncated, info = self.env.step(chunk[k])
            rewards[k] = float(reward)
            total += float(reward)
            if terminated or truncated:
                break
        info = dict(info)
        info["executed_steps"] = k + 1
        info["step_rewards"] = rewards
        return obs, total, terminated, truncated, info


class SuccessInfo(gym.Wrapper):
    """Put a bool ``info["success"]`` and ``info["episode_success"]`` on every step.

    Success is read from what each family reports:

    * Fetch: ``info["is_success"]`` (float 0/1; absent from the reset info -> False);
    * PointMaze / AntMaze / Adroit: ``info["success"]``;
    * FrankaKitchen: every task of the episode's goal (``unwrapped.goal`` keys, i.e. the
      ``tasks_to_complete`` at reset) is in ``info["episode_task_completions"]``;
    * anything else (locomotion): always False and :attr:`reports_success` stays False.

    ``episode_success`` is True once ``success`` was True at any step of the current
    episode (the reset included). Kitchen's task lists, which the env mutates in place,
    are copied into the info.

    Which step counts for an episode's success (:attr:`success_convention`): ``"final"``
    for tasks that report ``info["is_success"]`` (gymnasium-robotics goal envs: Fetch, Shadow
    hand), whose convention (HER, Plappert et al. 2018) is success at the episode's final
    step; ``"any"`` for the others (mazes, Adroit, Kitchen: D4RL counts a goal reached at
    any step). :func:`robotrl.evaluation.evaluate` reports both and names the convention's
    one ``success_rate``.

    Args:
        env: the env to wrap.
        convention: ``"final"`` or ``"any"`` to override the family's convention.

    Attributes:
        reports_success: True once the inner env has reported a success signal.
        success_convention: ``"final"``/``"any"`` once known (the first success signal), else ``None``.
    """

    def __init__(self, env: gym.Env, convention: str | None = None):
        super().__init__(env)
        if convention not in (None, "final", "any"):
            raise ValueError(f"success convention must be 'final', 'any' or None, got {convention!r}")
        self._convention = convention
        self.success_convention: str | None = convention
        self.reports_success = False
        self._episode_success = False
        self._kitchen_tasks: list[str] = []

    def _reports(self, family_convention: str) -> None:
        self.reports_success = True
        if self.success_convention is None:
            self.success_convention = self._convention or family_convention

    def _success(self, info: dict) -> bool:
        if "is_success" in info:
            self._reports("final")
            return bool(np.asarray(info["is_success"]).item())
        if "success" in info:
            self._reports("any")
            return bool(np.asarray(info["success"]).item())
        if "episode_task_completions" in info:
            self._reports("any")
            for key in ("episode_task_completions", "tasks_to_complete", "step_task_completions"):
                if key in info:
                    info[key] = list(info[key])
            done = set(info["episode_task_completions"])
            return bool(self._kitchen_tasks) and set(self._kitchen_tasks) <= done
        return False

    def reset(self, **kwargs) -> tuple[Any, dict[str, Any]]:
        """Reset; ``info`` gains ``success`` and ``episode_success`` (bool)."""
        obs, info = self.env.reset(**kwargs)
        info = dict(info)
        goal = getattr(self.env.unwrapped, "goal", None)
        if isinstance(goal, dict):
            self._kitchen_tasks = list(goal)
        elif "tasks_to_complete" in info:
            self._kitchen_tasks = list(info["tasks_to_complete"])
        success = self._success(info)
        self._episode_success = success
        info["success"] = success
        info["episode_success"] = success
        return obs, info

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; ``info`` gains ``success`` (this step) and ``episode_success`` (so far)."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info)
        success = self._success(info)
        self._episode_success = self._episode_success or success
        info["success"] = success
        info["episode_success"] = self._episode_success
        return obs, reward, terminated, truncated, info


class SuccessTermination(gym.Wrapper):
    """``terminated = terminated or info["success"]``: success ends the episode.

    ResiP (ankile/robust-rearrangement, ``reset_on_success``) and ResFiT
    (amazon-science/residual-offpolicy-rl) train on tasks whose episodes end at success: the
    0/1 success reward is paid once and not bootstrapped past. Gymnasium-robotics goal envs
    (Fetch) never terminate and run to their time limit. :func:`robotrl.envs.make_env` puts this
    wrapper right above :class:`SuccessInfo` when ``terminate_on_success=True`` (so an
    :class:`ActionChunk` stops its chunk at the success); ``robotrl train`` sets it for TRAINING
    envs with ``env.train_terminate_on_success`` — evaluation keeps the task's own episodes, so
    the final-step success convention also asks that the task stays solved.

    Raises:
        KeyError: at ``step``, an env without the bool ``info["success"]`` of :class:`SuccessInfo`.
    """

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step; ``terminated`` is also True when this step succeeded."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, bool(terminated or info["success"]), truncated, info


class SeedFirstReset(gym.Wrapper):
    """Use ``seed`` for the first ``reset()`` that is called without a seed.

    Later resets without a seed continue the env's random generator, so a run is
    reproducible from ``seed`` alone: ``SeedFirstReset(env, s).reset()`` equals
    ``env.reset(seed=s)``. An explicit ``reset(seed=...)`` always wins. ``seed=None``
    makes the wrapper a no-op.
    """

    def __init__(self, env: gym.Env, seed: int | None):
        super().__init__(env)
        self._pending_seed = None if seed is None else int(seed)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict[str, Any]]:
        """Reset, injecting the stored seed on the first call without one."""
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        return self.env.reset(seed=seed, options=options)
