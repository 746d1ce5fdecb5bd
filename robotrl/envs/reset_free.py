"""One scene, reset once: the forward task and its backward (reset) task take turns (RoboFuME's online phase).

RoboFuME (Yang et al. 2024, "Robot Fine-Tuning Made Easy: Pre-Training Rewards and Policies for Autonomous
Real-World Reinforcement Learning", section IV-C) fine-tunes a robot without a person resetting the scene after
every episode: a forward policy attempts the task, then a backward policy undoes it (brings the scene back to the
initial state distribution), then the forward policy tries again from wherever the backward one left the scene, and
so on. Neither phase has a hand-written reward: each is scored by its own learned success classifier, whose success
also ends the phase. A person steps in only when the robot is stuck.

:class:`ResetFreeEnv` is that scene as a gymnasium env:

- the wrapped simulator is reset once (the first :meth:`~ResetFreeEnv.reset`); every later ``reset()`` starts the
  other phase (``forward`` <-> ``backward``) from the scene as it is, without touching the simulator;
- each phase's reward, success and end come from its own reward function (a success classifier:
  :class:`robotrl.real_robot.reward_classifier.ClassifierReward`, or any callable of the same shape, see
  :class:`PhaseReward`); a phase that does not succeed within ``max_episode_steps`` env steps is truncated (a
  timeout);
- a phase that times out ``max_timeouts`` times in a row counts one human reset (:attr:`~ResetFreeEnv.human_resets`);
  with ``intervene=True`` the person really resets the simulator then, and the forward phase starts from the fresh
  start state; with ``intervene=False`` the intervention is only counted and the scene goes on as it is.

The wrapped env's own ``terminated`` / ``truncated`` are ignored: only the phases end episodes (a PointMaze goal
reached ends nothing in the scene, the ball stays where it is). A task whose termination means the simulation
cannot go on (a fallen Hopper) is not a reset-free task.

Goal-conditioned twins (``goal_slices``): the forward phase shows the env's observation; the backward phase shows it
with the desired-goal slice replaced by the achieved goal of the last simulator reset (where the scene started), so
the backward task is the forward task with start and goal swapped: the same MDP a dataset can be recorded for
(``maze_map`` with ``"r"`` and ``"g"`` exchanged), and its classifier and policy read observations of that task.

Symbols: ``Do`` flat observation size, ``Da`` action size, ``T`` the phase's time limit, ``K`` ``max_timeouts``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, SupportsFloat

import gymnasium as gym
import numpy as np

from robotrl.errors import ConfigError

__all__ = ["PHASES", "MazeGoals", "PhaseReward", "ResetFreeEnv"]

#: The two phases, in the order they take turns (the scene starts with the forward task).
PHASES = ("forward", "backward")


class PhaseReward(Protocol):
    """What scores one phase: the shape of :class:`robotrl.real_robot.reward_classifier.RewardFunction`.

    Attributes:
        end_on_success: a success ends the phase (``terminated``).
    """

    end_on_success: bool

    def __call__(self, state: np.ndarray, images: Mapping[str, np.ndarray] | None = None) -> tuple[float, bool, float]:
        """``(reward, success, p)`` for the observation ``(Do,)`` a step led to (``p``: the classifier's
        ``p(success)``, ``nan`` where there is none)."""
        ...

    def reset(self) -> None:
        """A phase starts."""
        ...


class MazeGoals:
    """Each phase's goal drawn afresh from the task's own distributions, without moving the scene (gymnasium-robotics
    mazes: ``PointMaze``, ``AntMaze``).

    The goal of a goal-conditioned twin is the task's instruction, not a state of the scene: the task's reset draws
    it anew for every episode (the goal cell plus uniform noise of +-0.25 cells), so a scene reset once would
    otherwise train the forward policy on one goal for the whole run and evaluate it on others. ``forward(env)``
    draws a goal as the maze's ``reset`` does (``generate_target_goal`` plus ``add_xy_position_noise``) and sets
    it as the env's goal (its observations, reward and ``info["success"]`` follow it); ``backward(env)`` draws a
    start as the maze's ``reset`` draws the ball's (``generate_reset_pos`` plus the same noise), the backward
    phase's goal. Both use the env's own ``np_random``.
    """

    @staticmethod
    def forward(env: gym.Env) -> np.ndarray:
        """Draw and set a new goal ``(2,)`` (m) of ``env``'s maze; returns it."""
        maze = env.unwrapped
        maze.goal = maze.add_xy_position_noise(maze.generate_target_goal())
        maze.update_target_site_pos()
        return np.asarray(maze.goal, np.float32).copy()

    @staticmethod
    def backward(env: gym.Env) -> np.ndarray:
        """A start ``(2,)`` (m) drawn from ``env``'s maze's start distribution (the scene is not touched)."""
        maze = env.unwrapped
        return np.asarray(maze.add_xy_position_noise(maze.generate_reset_pos()), np.float32)


class ResetFreeEnv(gym.Wrapper):
    """The forward and backward phases on one scene that is reset once (module doc).

    Args:
        env: the task env, flat observations ``Box(Do,)`` (robotrl's :func:`~robotrl.envs.make_env`), single-step
            actions ``(Da,)``. Its own time limit and terminations are ignored.
        rewards: ``{"forward": PhaseReward, "backward": PhaseReward}``.
        max_episode_steps: ``T``, env steps of one phase before it is truncated (a timeout).
        max_timeouts: ``K >= 1``: a phase that times out ``K`` times in a row counts one human reset.
        intervene: at a human reset, really reset the simulator (the forward phase starts from the fresh start
            state); ``False``: only count it.
        goal_slices: ``(achieved, desired)`` slices of the flat observation (:class:`~robotrl.data.spaces.FlatLayout`
            ``slices``) of a goal-conditioned task: the backward phase shows the start as its desired goal.
            ``None``: both phases show the env's observation.
        goals: draws each phase's goal afresh at its start (:class:`MazeGoals`; needs ``goal_slices``): the forward
            phase's is set as the env's goal, the backward phase's replaces the start it shows. ``None``: the goals of
            the last simulator reset, for the whole scene.

    Attributes:
        phase: ``"forward"`` or ``"backward"``, the phase running now.
        sim_resets: resets of the wrapped simulator (the first, the interventions, the resumes).
        human_resets: interventions counted (``K`` timeouts in a row of one phase).
        resume_resets: simulator resets after :meth:`load_state_dict` (a resumed process lost the simulated scene).
        episodes, successes, timeouts, env_steps: per phase ``{phase: int}``.
        forward_task_successes: forward phases ended by their reward's success at a step where the wrapped env's own
            ``info["success"]`` was true too: the audit of the forward classifier's verdicts in a simulator (a robot
            has no such flag; the backward task has none either, its goal is not the env's).

    Raises:
        ConfigError: a missing phase reward, ``max_episode_steps < 1``, ``max_timeouts < 1``, or observations that
            are not flat (one line naming the fix).
    """

    def __init__(self, env: gym.Env, rewards: Mapping[str, PhaseReward], *, max_episode_steps: int,
                 max_timeouts: int = 3, intervene: bool = True, goal_slices: tuple[slice, slice] | None = None,
                 goals: MazeGoals | None = None):
        super().__init__(env)
        missing = [p for p in PHASES if p not in rewards]
        if missing:
            raise ConfigError(f"a reset-free scene needs a reward for each phase {PHASES}; missing {missing}: set "
                              "reset_free.forward_classifier and reset_free.backward_classifier")
        if int(max_episode_steps) < 1:
            raise ConfigError(f"reset_free.max_episode_steps={max_episode_steps}: a phase needs at least one env step "
                              "(set a positive number, or null for the task's time limit)")
        if int(max_timeouts) < 1:
            raise ConfigError(f"reset_free.max_timeouts={max_timeouts}: a human reset is counted after K >= 1 timeouts "
                              "in a row of one phase; set reset_free.max_timeouts=3 (or another K >= 1)")
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ConfigError(f"a reset-free scene reads flat state observations (Box(Do,)), this env observes {space}: "
                              "train reset-free on states (obs=state)")
        self.rewards = dict(rewards)
        self.max_episode_steps, self.max_timeouts, self.intervene = int(max_episode_steps), int(max_timeouts), bool(intervene)
        if goals is not None and goal_slices is None:
            raise ConfigError("reset_free.goals redraws the goals of a goal-conditioned task, and this task's observation "
                              "has no achieved_goal / desired_goal: set reset_free.goals=scene")
        self.goal_slices, self.goals = goal_slices, goals
        self.phase = PHASES[0]
        self.sim_resets = self.human_resets = self.resume_resets = 0
        self.episodes = dict.fromkeys(PHASES, 0)
        self.successes = dict.fromkeys(PHASES, 0)
        self.timeouts = dict.fromkeys(PHASES, 0)
        self.env_steps = dict.fromkeys(PHASES, 0)
        self.forward_task_successes = 0
        self._streak = dict.fromkeys(PHASES, 0)  # timeouts in a row, per phase
        self._obs: np.ndarray | None = None  # the scene's latest raw observation (None: the simulator needs a reset)
        self._start_goal: np.ndarray | None = None  # achieved goal at the last simulator reset
        self._resumed = False
        self._phase_steps = 0

    # ------------------------------------------------------------------ gymnasium
    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """The first call (and after an intervention or a resume) resets the simulator and starts the forward phase;
        every other call starts the other phase from the scene as it is (``seed`` and ``options`` are then unused).

        Returns:
            ``(observation (Do,), info)``; ``info`` has ``phase``, ``sim_reset`` (whether the simulator was reset)
            and the counters.
        """
        sim_reset = self._obs is None
        if sim_reset:
            obs, info = self.env.reset(seed=seed, options=options)
            self._obs = np.asarray(obs, np.float32)
            if self.goal_slices is not None:
                self._start_goal = self._obs[self.goal_slices[0]].copy()
            self.sim_resets += 1
            if self._resumed:
                self.resume_resets += 1
                self._resumed = False
            self.phase = PHASES[0]
            info = dict(info)
        else:
            self.phase = PHASES[1 - PHASES.index(self.phase)]
            info = {}
            if self.goals is not None:  # the phase's goal is drawn afresh; the scene stays as it is
                if self.phase == PHASES[0]:
                    self._obs[self.goal_slices[1]] = self.goals.forward(self.env)  # also the env's own goal now
                else:
                    self._start_goal = self.goals.backward(self.env)
        self._phase_steps = 0
        self.rewards[self.phase].reset()
        info.update(phase=self.phase, sim_reset=sim_reset, **self.counters())
        return self._shown(self._obs), info

    def step(self, action) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """One env step scored by the phase's reward function.

        Returns:
            ``(observation (Do,), reward, terminated, truncated, info)``: ``terminated`` when the phase succeeded (and
            its reward ends on success), ``truncated`` when it reached ``T`` steps without; ``info`` keeps the env's
            own (its ``success`` is the task's) and gains ``phase``, ``phase_success``, ``phase_p`` and the counters.

        Raises:
            RuntimeError: before the first :meth:`reset`.
        """
        if self._obs is None:
            raise RuntimeError("ResetFreeEnv.step before reset(): reset the scene once first")
        obs, _, _, _, info = self.env.step(action)  # the env's own end is not the phase's
        self._obs = np.asarray(obs, np.float32)
        shown = self._shown(self._obs)
        fn = self.rewards[self.phase]
        reward, success, p = fn(shown)
        self._phase_steps += 1
        self.env_steps[self.phase] += 1
        terminated = bool(success) and bool(fn.end_on_success)
        truncated = not terminated and self._phase_steps >= self.max_episode_steps
        if terminated or truncated:
            self._phase_ended(bool(success), truncated, task_success=bool(info.get("success", False)))
        info = dict(info)
        info.update(phase=self.phase, phase_success=bool(success), phase_p=float(p), **self.counters())
        return shown, float(reward), terminated, truncated, info

    def _phase_ended(self, success: bool, timed_out: bool, task_success: bool) -> None:
        ph = self.phase
        self.episodes[ph] += 1
        self.successes[ph] += int(success)
        self.forward_task_successes += int(success and task_success and ph == PHASES[0])
        if not timed_out:
            self._streak[ph] = 0
            return
        self.timeouts[ph] += 1
        self._streak[ph] += 1
        if self._streak[ph] >= self.max_timeouts:  # stuck: a person steps in
            self.human_resets += 1
            self._streak = dict.fromkeys(PHASES, 0)
            if self.intervene:
                self._obs = None  # the next reset() resets the simulator and starts the forward phase

    def _shown(self, obs: np.ndarray) -> np.ndarray:
        """The observation as the current phase sees it (module doc: the backward goal)."""
        if self.phase == PHASES[0] or self.goal_slices is None or self._start_goal is None:
            return obs.copy()
        out = obs.copy()
        out[self.goal_slices[1]] = self._start_goal
        return out

    # ------------------------------------------------------------------ counters and checkpoints
    def counters(self) -> dict[str, int]:
        """``sim_resets``, ``human_resets``, ``resume_resets`` and per phase ``<phase>_episodes``, ``_successes``,
        ``_timeouts``, ``_env_steps``, and ``forward_task_successes``."""
        out = {"sim_resets": self.sim_resets, "human_resets": self.human_resets, "resume_resets": self.resume_resets,
               "forward_task_successes": self.forward_task_successes}
        for ph in PHASES:
            out.update({f"{ph}_episodes": self.episodes[ph], f"{ph}_successes": self.successes[ph],
                        f"{ph}_timeouts": self.timeouts[ph], f"{ph}_env_steps": self.env_steps[ph]})
        return out

    def state_dict(self) -> dict:
        """The counters and the timeout streaks (the simulated scene itself is not saved)."""
        return {"counters": self.counters(), "streak": dict(self._streak), "phase": self.phase}

    def load_state_dict(self, state: dict) -> None:
        """Counters and streaks of :meth:`state_dict`; the next :meth:`reset` resets the simulator (counted in
        ``resume_resets`` and ``sim_resets``: a resumed process has lost the simulated scene) and starts forward.

        Raises:
            KeyError: ``state`` is not a :meth:`state_dict`.
        """
        c = state["counters"]
        self.sim_resets, self.human_resets, self.resume_resets = (int(c["sim_resets"]), int(c["human_resets"]),
                                                                  int(c["resume_resets"]))
        for ph in PHASES:
            self.episodes[ph], self.successes[ph] = int(c[f"{ph}_episodes"]), int(c[f"{ph}_successes"])
            self.timeouts[ph], self.env_steps[ph] = int(c[f"{ph}_timeouts"]), int(c[f"{ph}_env_steps"])
        self.forward_task_successes = int(c.get("forward_task_successes", 0))  # absent from checkpoints before it
        self._streak = {ph: int(state["streak"][ph]) for ph in PHASES}
        self.phase = str(state["phase"])
        self._obs, self._resumed = None, True
