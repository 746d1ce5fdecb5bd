"""Episode resets and episode limits of the online actor, chosen per robot in its config.

Between two episodes the actor runs the robot's **reset routine** (``reset.routine`` in
``configs/robot/*.yaml``):

``robot``     :class:`RobotReset`: the robot's own ``reset(seed)``; for the MuJoCo twin the
              task's reset (a new start and goal drawn from the seed).
``scripted``  :class:`ScriptedReset`: a scripted motion through the safety supervisor: action
              ``waypoints`` commanded in turn (linearly interpolated, ``steps_per_waypoint``
              steps each; position-controlled arms), then optionally a ``home`` feedback
              controller driving observation entries to a target within a tolerance
              (force/velocity-controlled robots); a home not reached raises :class:`ResetFailed`.
``human``     :class:`HumanReset`: the robot holds (or a teleop device drives it, if engaged)
              until a human confirms the scene is reset: Enter on stdin, the teleop device's
              confirm key, or a file appearing (``confirm_file``: remote UIs, tests).

Reset steps are not part of any episode (they are neither recorded nor sent to the learner);
each episode starts from the observation the routine ends on. **Episode limits**
(``episode.max_steps``, ``episode.max_duration_s``) truncate an episode the robot does not end.

A MuJoCo twin under a ``scripted`` or ``human`` routine keeps running one task episode across
the actor's episodes: give it a large ``max_episode_steps`` so the task's own time limit does
not truncate them.

Sources: HIL-SERL / SERL (scripted resets, a human resetting between episodes), LeRobot's
``reset_time_s`` with teleoperated resets.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import Observation, RobotError, RobotSpec

ROUTINES = ("robot", "scripted", "human")
CONFIRMS = ("stdin", "teleop", "file")


class ResetFailed(RobotError):
    """A reset routine could not bring the robot to its start (e.g. the home was not reached)."""


def _fresh(o: Observation) -> Observation:
    """``o`` as an episode start: no reward, not ended (its success flag kept)."""
    return Observation(np.asarray(o.state, np.float32), o.timestamp, 0.0, False, False, bool(o.success))


class ResetRoutine(Protocol):
    """Brings the robot to the start of the next episode; returns the first observation."""

    name: str
    steps: int  # robot steps the routine commanded so far (all episodes)

    def run(self, robot, seed: int | None, *, teleop=None, period_s: float = 0.0) -> Observation: ...


@dataclass
class EpisodeLimits:
    """Limits of one actor episode (``None``: none). ``max_steps``: control steps;
    ``max_duration_s``: wall-clock seconds from the episode's first command."""

    max_steps: int | None = None
    max_duration_s: float | None = None

    def __post_init__(self):
        if self.max_steps is not None and int(self.max_steps) < 1:
            raise ConfigError(f"episode.max_steps must be >= 1 or null, got {self.max_steps}")
        if self.max_duration_s is not None and float(self.max_duration_s) <= 0:
            raise ConfigError(f"episode.max_duration_s must be > 0 s or null, got {self.max_duration_s}")


class _Pacer:
    """Sleeps to keep commands ``period_s`` apart (0: unpaced)."""

    def __init__(self, period_s: float):
        self.period, self.t0, self.k = float(period_s), time.monotonic(), 0

    def wait(self) -> None:
        if self.period > 0:
            left = self.t0 + self.k * self.period - time.monotonic()
            if left > 0:
                time.sleep(left)
            elif left < -self.period:
                self.t0 -= left
        self.k += 1


class RobotReset:
    """The robot's own reset: ``robot.reset(seed)`` (the twin: its task's reset)."""

    name = "robot"

    def __init__(self):
        self.steps = 0

    def run(self, robot, seed: int | None, *, teleop=None, period_s: float = 0.0) -> Observation:
        """Reset the robot with ``seed``; returns its first observation."""
        return robot.reset(seed)


@dataclass
class HomeTarget:
    """A feedback "go home" motion: ``a = hold; a[action_indices] = clip(gain · (target − s[indices])
    − damping · s[velocity_indices])``, until ``|target − s[indices]|_∞ <= tolerance``.

    Attributes:
        indices: observation entries driven to ``target`` (e.g. PointMaze ball x, y: ``[4, 5]``).
        target: the home values, same length (observation units).
        action_indices: the action entries commanding them, same length.
        gain: action units per observation unit of error.
        velocity_indices: observation entries damped (``None``: no damping), same length.
        damping: action units per velocity unit.
        tolerance: reached when every error is within this (observation units).
        max_steps: steps before :class:`ResetFailed`.
    """

    indices: Sequence[int]
    target: Sequence[float]
    action_indices: Sequence[int]
    gain: float = 5.0
    velocity_indices: Sequence[int] | None = None
    damping: float = 0.5
    tolerance: float = 0.05
    max_steps: int = 500

    def __post_init__(self):
        n = len(self.indices)
        if not n or len(self.target) != n or len(self.action_indices) != n or \
                (self.velocity_indices is not None and len(self.velocity_indices) != n):
            raise ConfigError(f"reset.scripted.home: indices {list(self.indices)}, target {list(self.target)}, "
                              f"action_indices {list(self.action_indices)} (and velocity_indices) must have one "
                              "entry each per driven dimension")


class ScriptedReset:
    """A scripted reset motion (see the module doc).

    Args:
        spec: the robot's spec (action bounds, hold action, dimensions).
        waypoints: actions ``(Da,)`` in robot units, commanded in turn.
        steps_per_waypoint: steps per waypoint; the command moves linearly from the previous
            waypoint (the first: commanded at once; the safety supervisor limits the jump).
        home: optional :class:`HomeTarget` run after the waypoints.

    Raises:
        ConfigError: neither waypoints nor home, a waypoint of the wrong size or out of bounds,
            or an index outside the observation/action.
    """

    name = "scripted"

    def __init__(self, spec: RobotSpec, waypoints: Sequence[Sequence[float]] = (), steps_per_waypoint: int = 20,
                 home: HomeTarget | None = None):
        da, do = spec.action.dim, spec.observation.dim
        self.waypoints = [np.asarray(w, np.float32).reshape(-1) for w in waypoints]
        lo, hi = spec.action.low_array, spec.action.high_array
        for i, w in enumerate(self.waypoints):
            if w.shape != (da,) or not np.all(np.isfinite(w)) or np.any(w < lo) or np.any(w > hi):
                raise ConfigError(f"reset.scripted.waypoints[{i}] = {w.tolist()} must be {da} finite actions within "
                                  f"the robot's bounds {lo.tolist()}..{hi.tolist()}")
        if not self.waypoints and home is None:
            raise ConfigError("reset.routine=scripted needs reset.scripted.waypoints and/or reset.scripted.home")
        if steps_per_waypoint < 1:
            raise ConfigError(f"reset.scripted.steps_per_waypoint must be >= 1, got {steps_per_waypoint}")
        if home is not None:
            obs_idx = list(home.indices) + list(home.velocity_indices or [])
            if any(not 0 <= i < do for i in obs_idx) or any(not 0 <= i < da for i in home.action_indices):
                raise ConfigError(f"reset.scripted.home indices must lie in the observation (0..{do - 1}) and "
                                  f"action_indices in the action (0..{da - 1})")
        self.steps_per_waypoint, self.home = int(steps_per_waypoint), home
        self.hold, self.lo, self.hi = np.asarray(spec.hold_action, np.float32), lo, hi
        self.steps = 0

    def home_action(self, state: np.ndarray) -> tuple[np.ndarray, bool]:
        """``(action (Da,), reached)`` of the home controller at ``state (Do,)``."""
        h = self.home
        s = np.asarray(state, np.float64)
        err = np.asarray(h.target, np.float64) - s[list(h.indices)]
        u = h.gain * err
        if h.velocity_indices is not None:
            u = u - h.damping * s[list(h.velocity_indices)]
        a = self.hold.astype(np.float64).copy()
        a[list(h.action_indices)] = u
        return np.clip(a, self.lo, self.hi).astype(np.float32), bool(np.max(np.abs(err)) <= h.tolerance)

    def run(self, robot, seed: int | None, *, teleop=None, period_s: float = 0.0) -> Observation:
        """Play the waypoints, then drive home; returns the observation the motion ends on.

        Raises:
            ResetFailed: the home target was not reached within ``home.max_steps``.
        """
        robot.acquire_control()
        pace = _Pacer(period_s)
        prev = None
        obs = robot.observe()
        for w in self.waypoints:
            for k in range(self.steps_per_waypoint):
                a = w if prev is None else prev + (w - prev) * (k + 1) / self.steps_per_waypoint
                pace.wait()
                _, _, obs = robot.step(a)
                self.steps += 1
            prev = w
        if self.home is not None:
            for _ in range(self.home.max_steps + 1):
                a, reached = self.home_action(obs.state)
                if reached:
                    break
                pace.wait()
                _, _, obs = robot.step(a)
                self.steps += 1
            else:
                err = np.asarray(self.home.target) - np.asarray(obs.state)[list(self.home.indices)]
                raise ResetFailed(f"scripted reset: home {list(self.home.target)} not reached within "
                                  f"{self.home.max_steps} steps (error {np.round(err, 3).tolist()}); clear the way or "
                                  "raise reset.scripted.home.max_steps / tolerance")
        return _fresh(obs)


class FileConfirm:
    """Confirmation by a file appearing at ``path`` (it is deleted when taken)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __call__(self, cmd=None) -> bool:
        if self.path.exists():
            self.path.unlink(missing_ok=True)
            return True
        return False


class StdinConfirm:
    """Confirmation by a line (Enter) on a text stream, read on a background thread."""

    def __init__(self, stream=None):
        self._stream = stream if stream is not None else sys.stdin
        self._lines = 0
        self._taken = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._read, name="reset-confirm", daemon=True).start()

    def _read(self) -> None:
        for _ in iter(self._stream.readline, ""):
            with self._lock:
                self._lines += 1

    def __call__(self, cmd=None) -> bool:
        with self._lock:
            if self._lines > self._taken:
                self._taken = self._lines  # lines typed while no reset waited are not carried over
                return True
        return False


def teleop_confirm(cmd=None) -> bool:
    """Confirmation by the teleop device's confirm key (``TeleopCommand.confirm``)."""
    return bool(getattr(cmd, "confirm", False))


class HumanReset:
    """A human resets the scene and confirms (see the module doc).

    While it waits the robot is commanded to hold every ``period_s`` (the watchdog stays
    fed); an engaged teleop device drives it instead (a teleoperated reset; not recorded).

    Args:
        confirm: ``(teleop command or None) -> bool``: the human says the scene is ready.
        prompt: printed once per reset.
        timeout_s: how long to wait (s; ``None``: as long as it takes).
        out: where the prompt goes (default stdout).

    Attributes:
        waits_s: how long each reset waited (s).
    """

    name = "human"

    def __init__(self, confirm: Callable[[object], bool], prompt: str = "reset the scene, then confirm",
                 timeout_s: float | None = None, out=None):
        self.confirm, self.prompt, self.timeout_s = confirm, prompt, timeout_s
        self.out = out
        self.steps = 0
        self.waits_s: list[float] = []

    def run(self, robot, seed: int | None, *, teleop=None, period_s: float = 0.0) -> Observation:
        """Hold (or follow the teleop device) until confirmed; returns the observation then.

        Raises:
            ResetFailed: no confirmation within ``timeout_s``.
        """
        robot.acquire_control()
        print(f"reset: {self.prompt}", file=self.out or sys.stdout, flush=True)
        t0 = time.monotonic()
        pace = _Pacer(period_s if period_s > 0 else 0.02)
        obs = robot.observe()
        while True:
            cmd = None
            if teleop is not None:
                if hasattr(teleop, "observe"):
                    teleop.observe(obs.state)
                cmd = teleop.poll()
            if self.confirm(cmd):
                break
            if self.timeout_s is not None and time.monotonic() - t0 > self.timeout_s:
                raise ResetFailed(f"human reset: no confirmation within {self.timeout_s:g} s")
            pace.wait()
            engaged = cmd is not None and cmd.engaged and cmd.action is not None
            _, _, obs = robot.step(cmd.action if engaged else None)
            self.steps += 1
        self.waits_s.append(time.monotonic() - t0)
        return _fresh(robot.observe())


def make_reset(cfg: Mapping | None, spec: RobotSpec, teleop=None) -> ResetRoutine:
    """The reset routine of a robot config's ``reset`` section (``None``: the robot's own reset).

    Raises:
        ConfigError: unknown routine or confirmation, or bad scripted-reset settings.
    """
    c = dict(cfg or {})
    routine = c.get("routine", "robot")
    if routine == "robot":
        return RobotReset()
    if routine == "scripted":
        s = dict(c.get("scripted") or {})
        home = s.get("home")
        return ScriptedReset(spec, list(s.get("waypoints") or []), int(s.get("steps_per_waypoint", 20)),
                             HomeTarget(**dict(home)) if home else None)
    if routine == "human":
        h = dict(c.get("human") or {})
        how = h.get("confirm", "stdin")
        if how == "stdin" and type(teleop).__name__ == "KeyboardTeleop":
            how = "teleop"  # the keyboard device reads stdin: Enter reaches it as its confirm key
        if how == "file":
            if not h.get("confirm_file"):
                raise ConfigError("reset.human.confirm=file needs reset.human.confirm_file=<path to touch>")
            confirm: Callable = FileConfirm(h["confirm_file"])
            prompt = f"reset the scene, then touch {h['confirm_file']}"
        elif how == "stdin":
            confirm, prompt = StdinConfirm(), "reset the scene, then press Enter"
        elif how == "teleop":
            if teleop is None:
                raise ConfigError("reset.human.confirm=teleop needs a teleop device (teleop=keyboard: Enter)")
            confirm, prompt = teleop_confirm, "reset the scene, then press the teleop device's confirm key"
        else:
            raise ConfigError(f"reset.human.confirm must be one of {CONFIRMS}, got {how!r}")
        t = h.get("timeout_s")
        return HumanReset(confirm, prompt, None if t is None else float(t))
    raise ConfigError(f"reset.routine must be one of {ROUTINES}, got {routine!r}")


def make_limits(cfg: Mapping | None) -> EpisodeLimits:
    """:class:`EpisodeLimits` of a robot config's ``episode`` section."""
    c = dict(cfg or {})
    ms, md = c.get("max_steps"), c.get("max_duration_s")
    return EpisodeLimits(None if ms is None else int(ms), None if md is None else float(md))
