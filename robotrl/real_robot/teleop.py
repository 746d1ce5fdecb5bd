"""Human takeover: the teleop device interface and the built-in keyboard device.

A :class:`TeleopDevice` is polled once per control step and returns a
:class:`TeleopCommand`. While ``engaged`` is true the control loop sends the device's
action instead of the policy's and flags the step as an intervention (recorded as
``infos["intervention"]``, the signal HIL-SERL-style fine-tuning uses).

:class:`KeyboardTeleop` reads single characters from a text stream (a terminal in
cbreak mode, or any pipe) on a background thread:

====================  ==========================================================
``t``                 toggle takeover (engaged / released)
``d``/``a``           +/- ``step`` on action dimension 0
``w``/``s``           +/- ``step`` on action dimension 1
``e``/``q``           +/- ``step`` on action dimension 2
``x``                 zero the teleop action (back to the hold action)
space                 software e-stop (latched on the robot server)
``r``                 re-arm after an e-stop
Enter                 confirm (a human reset is done)
``y`` / ``n``         mark the current step a success / a failure (the label the
                      success classifier trains on; a success ends the episode,
                      a failure cuts it)
====================  ==========================================================

:class:`SpaceMouseTeleop` maps a 6-axis device (a 3Dconnexion SpaceMouse, a gamepad)
read through any ``read() -> (axes (6,) in [-1, 1], buttons)`` function: while a
"deadman" button is held the human drives, ``action = hold + gain · axes[axis_map]``.
:class:`ScriptedTeleop` is a scripted "human" for tests and benchmarks: it takes over
when ``engage(episode, step)`` says so (a schedule) or, with ``takeover=OnFailureTakeover(...)``,
when the policy fails (HIL-SERL's operator: it watches the policy, takes over when it is stuck or
heading back, drives for a bounded number of steps, then hands back), and acts with
``controller(obs)``. Devices that want the current observation define ``observe(obs)``, which the
online actor calls before each :meth:`~TeleopDevice.poll`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Protocol, runtime_checkable

import numpy as np

_AXES = {"d": (0, 1.0), "a": (0, -1.0), "w": (1, 1.0), "s": (1, -1.0), "e": (2, 1.0), "q": (2, -1.0)}


@dataclass
class TeleopCommand:
    """One poll of a teleop device.

    Attributes:
        engaged: the human has taken over; ``action`` replaces the policy's.
        action: ``(Da,)`` command in the robot's action units (``None`` if not engaged).
        estop: request the software e-stop (latched until ``rearm``).
        rearm: request a re-arm of the e-stop.
        confirm: the human confirms (a human reset is done: :mod:`robotrl.real_robot.resets`).
        label: the operator's mark of this step: ``True`` success, ``False`` failure, ``None`` none.
            Recorded as the step's ``infos["success"]`` (the success classifier's label,
            :mod:`robotrl.real_robot.reward_classifier`); the online actor ends the episode on it
            (success: ``terminated``; failure: ``truncated``).
    """

    engaged: bool = False
    action: np.ndarray | None = None
    estop: bool = False
    rearm: bool = False
    confirm: bool = False
    label: bool | None = None


@runtime_checkable
class TeleopDevice(Protocol):
    """Anything that can be polled for a :class:`TeleopCommand` once per control step."""

    def poll(self) -> TeleopCommand: ...

    def close(self) -> None: ...


class KeyboardTeleop:
    """Keyboard takeover device (see the module doc for the keys).

    Args:
        stream: text stream to read characters from (``sys.stdin`` in a terminal).
        hold_action: ``(Da,)`` action the teleop command starts from.
        low, high: bounds ``(Da,)`` the teleop action is clipped to.
        step: change per key press, in action units.
    """

    def __init__(self, stream: IO[str], hold_action, low, high, step: float = 0.25):
        self._hold = np.asarray(hold_action, np.float32)
        self._lo, self._hi = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self._step = float(step)
        self._action = self._hold.copy()
        self._engaged = False
        self._estop = self._rearm = self._confirm = False
        self._label: bool | None = None
        self._lock = threading.Lock()
        self._stream = stream
        self._thread = threading.Thread(target=self._read, name="keyboard-teleop", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while True:
            ch = self._stream.read(1)
            if not ch:
                return
            self.press(ch)

    def press(self, ch: str) -> None:
        """Handle one key (also usable programmatically)."""
        with self._lock:
            if ch == "t":
                self._engaged = not self._engaged
            elif ch == " ":
                self._estop = True
            elif ch == "r":
                self._rearm = True
            elif ch in "\r\n":
                self._confirm = True
            elif ch in ("y", "n"):
                self._label = ch == "y"
            elif ch == "x":
                self._action = self._hold.copy()
            elif ch in _AXES:
                i, sign = _AXES[ch]
                if i < self._action.shape[0]:
                    self._action[i] = np.clip(self._action[i] + sign * self._step, self._lo[i], self._hi[i])

    def poll(self) -> TeleopCommand:
        """The current command; e-stop, re-arm, confirm requests and a label are reported once."""
        with self._lock:
            cmd = TeleopCommand(self._engaged, self._action.copy() if self._engaged else None, self._estop, self._rearm,
                                self._confirm, self._label)
            self._estop = self._rearm = self._confirm = False
            self._label = None
        return cmd

    def close(self) -> None:
        """Stop reading (the thread ends at the stream's end; daemon otherwise)."""


class SpaceMouseTeleop:
    """A 6-axis takeover device: the human drives while the deadman button is held.

    Args:
        read: returns ``(axes, buttons)``: ``axes`` 6 floats in ``[-1, 1]`` (x, y, z, roll,
            pitch, yaw of a SpaceMouse), ``buttons`` a sequence of bools. For a real
            SpaceMouse wrap e.g. ``pyspacemouse.read()``; the device is never opened here.
        hold_action, low, high: ``(Da,)`` start point and bounds of the teleop action.
        axis_map: which axis drives each action dimension (``-1``: none), length ``Da``.
        gain: action units per full deflection.
        deadman: index of the button that engages the takeover.
        estop_button: index of a button that requests the software e-stop (``None``: none).
        confirm_button: index of a button that confirms a human reset (``None``: none).

    Raises:
        ValueError: ``axis_map`` does not have ``Da`` entries or names an axis outside 0..5.
    """

    def __init__(self, read: Callable[[], tuple[Sequence[float], Sequence[bool]]], hold_action, low, high,
                 axis_map: Sequence[int] = (0, 1, 2), gain: float = 1.0, deadman: int = 0,
                 estop_button: int | None = None, confirm_button: int | None = None):
        self._read = read
        self._hold = np.asarray(hold_action, np.float32)
        self._lo, self._hi = np.asarray(low, np.float32), np.asarray(high, np.float32)
        da = self._hold.shape[0]
        amap = list(axis_map)[:da] + [-1] * max(0, da - len(axis_map))
        if any(not -1 <= a <= 5 for a in amap):
            raise ValueError(f"axis_map {list(axis_map)} names an axis outside 0..5 (or -1 for none)")
        self._map, self._gain = np.asarray(amap), float(gain)
        self._deadman, self._estop, self._confirm = int(deadman), estop_button, confirm_button

    def poll(self) -> TeleopCommand:
        """Read the device once; engaged while the deadman button is held."""
        axes, buttons = self._read()
        axes = np.clip(np.nan_to_num(np.asarray(axes, np.float32).reshape(-1)[:6]), -1, 1)
        buttons = list(buttons)
        pressed = lambda i: i is not None and i < len(buttons) and bool(buttons[i])  # noqa: E731
        estop, confirm = pressed(self._estop), pressed(self._confirm)
        if not pressed(self._deadman):
            return TeleopCommand(estop=estop, confirm=confirm)
        a = self._hold.copy()
        use = self._map >= 0
        a[use] = a[use] + self._gain * axes[self._map[use]]
        return TeleopCommand(True, np.clip(a, self._lo, self._hi).astype(np.float32), estop=estop, confirm=confirm)

    def close(self) -> None:
        """Nothing to release (the caller owns the device)."""


class ScriptedTeleop:
    """A scripted "human" (tests, benchmarks): takes over at chosen steps with a controller.

    Args:
        controller: ``obs (Do,) -> action (Da,)`` in robot units (e.g. a P-controller to the goal).
        engage: ``(episode, step) -> bool``, whether the human drives this step.
        low, high: bounds ``(Da,)`` the action is clipped to.
        label: ``(episode, step, obs (Do,)) -> True / False / None``, the scripted operator's mark of the step
            (:attr:`TeleopCommand.label`; ``None``: never marks).
        takeover: instead of ``engage`` (pass ``engage=None``): an :class:`OnFailureTakeover` that watches each
            observation and takes over when the policy fails.

    Raises:
        ValueError: both or neither of ``engage`` and ``takeover``.

    Attributes:
        episode, step: the position the next :meth:`poll` answers for; the actor calls
            :meth:`new_episode` at each reset and :meth:`observe` before each poll.
        engaged_steps: polls that returned a takeover.
    """

    def __init__(self, controller: Callable[[np.ndarray], np.ndarray], engage: Callable[[int, int], bool] | None, low,
                 high, label: Callable[[int, int, np.ndarray], bool | None] | None = None,
                 takeover: OnFailureTakeover | None = None):
        if (engage is None) == (takeover is None):
            raise ValueError("ScriptedTeleop takes over by a schedule (engage) or when the policy fails (takeover): "
                             "give exactly one")
        self.controller, self.engage, self.label, self.takeover = controller, engage, label, takeover
        self._lo, self._hi = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.episode, self.step = -1, 0
        self._obs: np.ndarray | None = None
        self.engaged_steps = 0

    def new_episode(self, episode: int) -> None:
        """A new episode starts (its step counter restarts at 0)."""
        self.episode, self.step = int(episode), 0

    def observe(self, obs: np.ndarray) -> None:
        """The observation the next poll's action answers."""
        self._obs = np.asarray(obs, np.float32)

    def poll(self) -> TeleopCommand:
        """Takeover with ``controller(obs)`` when ``engage(episode, step)`` (or the ``takeover`` rule) says so;
        advances the step counter."""
        step = self.step
        self.step += 1
        mark = None if self.label is None or self._obs is None else self.label(self.episode, step, self._obs)
        if self._obs is None:
            return TeleopCommand(label=mark)
        if self.takeover is not None:
            engaged = self.takeover.engage(self.episode, step, self._obs)
        else:
            assert self.engage is not None  # __init__: exactly one of them
            engaged = self.engage(self.episode, step)
        if not engaged:
            return TeleopCommand(label=mark)
        self.engaged_steps += 1
        a = np.clip(np.asarray(self.controller(self._obs), np.float32).reshape(-1), self._lo, self._hi)
        return TeleopCommand(True, a.astype(np.float32), label=mark)

    def close(self) -> None:
        """Nothing to release."""


class OnFailureTakeover:
    """HIL-SERL's operator as a rule: watch the policy, take over when it fails, drive a while, hand back.

    Each step it reads ``progress(obs)`` (metres along the task's path, larger is nearer the goal, e.g.
    :func:`maze_path_progress`). It takes over when the best progress of the current watch has not grown by
    ``min_gain`` for ``patience`` steps (stuck: against a wall, hovering, wandering) or the policy has fallen
    ``max_regress`` behind that best (heading back the way it came); then it drives ``length`` steps (the teleop's
    controller acts) and hands back, and a new watch starts from where it left the robot. At most
    ``max_takeovers`` takeovers per episode (``None``: no limit). A policy that keeps making progress is never taken
    over, so the intervention rate falls as the policy learns.

    Args:
        progress: ``obs (Do,) -> float`` progress towards the goal (m).
        patience: steps without ``min_gain`` of new progress before taking over.
        min_gain: progress (m) that counts as new.
        max_regress: fall behind the best progress (m) that counts as heading wrong.
        length: steps driven per takeover (≥ 1).
        max_takeovers: takeovers per episode (``None``: unlimited).

    Attributes:
        takeovers: takeovers so far in the current episode; ``total_takeovers`` over all episodes.

    Raises:
        ValueError: ``patience`` or ``length`` below 1, or a negative ``min_gain`` / ``max_regress``.
    """

    def __init__(self, progress: Callable[[np.ndarray], float], *, patience: int = 10, min_gain: float = 0.1,
                 max_regress: float = 0.5, length: int = 50, max_takeovers: int | None = None):
        if patience < 1 or length < 1 or min_gain < 0 or max_regress < 0:
            raise ValueError(f"OnFailureTakeover needs patience >= 1, length >= 1, min_gain >= 0, max_regress >= 0; got "
                             f"patience={patience}, length={length}, min_gain={min_gain}, max_regress={max_regress}")
        self.progress = progress
        self.patience, self.min_gain, self.max_regress = int(patience), float(min_gain), float(max_regress)
        self.length, self.max_takeovers = int(length), max_takeovers
        self.total_takeovers = 0
        self._episode: int | None = None
        self._start_episode(None)

    def _start_episode(self, episode: int | None) -> None:
        self._episode, self.takeovers, self._driving = episode, 0, 0
        self._best, self._since = -np.inf, 0

    def engage(self, episode: int, step: int, obs: np.ndarray) -> bool:
        """Whether the operator drives this step of ``episode`` (a new episode number starts a new watch)."""
        if episode != self._episode:
            self._start_episode(episode)
        p = float(self.progress(obs))
        if self._driving > 0:
            self._driving -= 1
            if self._driving == 0:  # handing back after this step: the next watch starts here
                self._best, self._since = -np.inf, 0
            return True
        if p >= self._best + self.min_gain or not np.isfinite(self._best):
            self._best, self._since = max(p, self._best), 0
            return False
        self._since += 1
        failing = self._since >= self.patience or p < self._best - self.max_regress
        if failing and (self.max_takeovers is None or self.takeovers < self.max_takeovers):
            self.takeovers += 1
            self.total_takeovers += 1
            self._driving = self.length - 1
            if self._driving == 0:
                self._best, self._since = -np.inf, 0
            return True
        return False


def cell_centre(maze_map: Sequence[Sequence], cell: tuple[int, int], scale: float = 1.0) -> np.ndarray:
    """The centre ``(2,)`` (m) of a PointMaze map's ``(row, col)`` cell in gymnasium-robotics' frame:
    ``x = (col + 0.5) · scale − W · scale / 2``, ``y = H · scale / 2 − (row + 0.5) · scale``."""
    h, w = len(maze_map), len(maze_map[0])
    return np.array([(cell[1] + 0.5) * scale - w * scale / 2, h * scale / 2 - (cell[0] + 0.5) * scale])


def maze_cell(maze_map: Sequence[Sequence], xy, scale: float = 1.0) -> tuple[int, int]:
    """The ``(row, col)`` of a PointMaze map's cell holding the position ``xy`` (m, gymnasium-robotics' frame; the
    inverse of :func:`cell_centre`)."""
    h, w = len(maze_map), len(maze_map[0])
    return int(np.floor(h / 2 - xy[1] / scale)), int(np.floor(xy[0] / scale + w / 2))


def maze_path(maze_map: Sequence[Sequence], scale: float = 1.0) -> np.ndarray | None:
    """The shortest path of free cells from a PointMaze map's start cell ``"r"`` to its goal cell ``"g"``
    (breadth-first; anything but ``1`` is free), as the ``(n, 2)`` centres (m) of its cells in gymnasium-robotics'
    frame: ``x = (col + 0.5) · scale − W · scale / 2``, ``y = H · scale / 2 − (row + 0.5) · scale``; ``None`` when the
    map has no ``r`` or no ``g`` cell (random starts and goals).

    Raises:
        ValueError: the map's ``g`` cannot be reached from ``r``.
    """
    grid = [list(row) for row in maze_map]
    cells = {(i, j): v for i, row in enumerate(grid) for j, v in enumerate(row)}
    start = next((c for c, v in cells.items() if v == "r"), None)
    goal = next((c for c, v in cells.items() if v == "g"), None)
    if start is None or goal is None:
        return None
    prev: dict = {start: None}
    queue = [start]
    for c in queue:  # breadth-first over free cells (anything but a wall, 1)
        for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            n = (c[0] + d[0], c[1] + d[1])
            if n in cells and cells[n] != 1 and n not in prev:
                prev[n] = c
                queue.append(n)
    if goal not in prev:
        raise ValueError(f"the maze's goal cell {goal} cannot be reached from its start cell {start}")
    path, c = [], goal
    while c is not None:
        path.append(c)
        c = prev[c]
    return np.array([cell_centre(grid, c, scale) for c in path[::-1]])


def _routes_back(maze_map: Sequence[Sequence], scale: float = 1.0) -> dict[tuple[int, int], np.ndarray]:
    """For each free cell of a PointMaze map that is not on :func:`maze_path`'s ``r`` → ``g`` path but reaches ``g``:
    the centre ``(2,)`` (m, gymnasium-robotics' frame) of its next cell on the shortest cell route to ``g``
    (breadth-first from ``g``); ``{}`` on a map without ``r`` and ``g`` cells or whose free cells are all on the path."""
    grid = [list(row) for row in maze_map]
    cells = {(i, j): v for i, row in enumerate(grid) for j, v in enumerate(row)}
    goal = next((c for c, v in cells.items() if v == "g"), None)
    if goal is None or not any(v == "r" for v in cells.values()):
        return {}
    on_path = {maze_cell(grid, xy, scale) for xy in maze_path(maze_map, scale)}
    nxt: dict = {goal: None}
    queue = [goal]
    for c in queue:  # breadth-first from the goal over free cells
        for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            n = (c[0] + d[0], c[1] + d[1])
            if n in cells and cells[n] != 1 and n not in nxt:
                nxt[n] = c
                queue.append(n)
    return {c: cell_centre(grid, n, scale) for c, n in nxt.items() if n is not None and c not in on_path}


def maze_path_progress(maze_map: Sequence[Sequence] | None, scale: float = 1.0) -> Callable[[np.ndarray], float]:
    """Progress along a PointMaze map's path for the flat observation (``achieved x, y, goal x, y, x, y, vx, vy``).

    A map with a start cell ``"r"`` and a goal cell ``"g"`` (e.g. :data:`robotrl.real_robot.sim.LCORRIDOR_MAP`): the
    shortest path of free cells from ``r`` to ``g`` (breadth-first), as the polyline of their centres
    (gymnasium-robotics' cell centres: ``x = (col + 0.5) · scale − W · scale / 2``, ``y = H · scale / 2 − (row + 0.5) ·
    scale``); progress is the arc length (m) of the position's nearest point on it (extended behind the start and past
    the goal, so a start behind the start cell's centre is negative progress). Without such a map (``None``, or
    random starts and goals): minus the straight distance to the observation's goal.

    Raises:
        ValueError: the map's ``g`` cannot be reached from ``r``.
    """
    if maze_map is None:
        return lambda obs: -float(np.linalg.norm(np.asarray(obs, np.float64)[2:4] - np.asarray(obs, np.float64)[4:6]))
    pts = maze_path(maze_map, scale)
    if pts is None:
        return maze_path_progress(None)
    seg = np.diff(pts, axis=0)
    seg_len = np.linalg.norm(seg, axis=1)
    cum = np.concatenate([[0.0], np.cumsum(seg_len)])
    lo, hi = np.zeros(len(seg)), np.ones(len(seg))
    lo[0], hi[-1] = -np.inf, np.inf  # behind the start cell's centre (the reset's noise) and past the goal's: it goes on

    def progress(obs: np.ndarray) -> float:
        pos = np.asarray(obs, np.float64)[4:6]
        t = np.clip(np.einsum("ij,ij->i", pos - pts[:-1], seg) / np.maximum(seg_len ** 2, 1e-12), lo, hi)
        near = pts[:-1] + t[:, None] * seg
        k = int(np.argmin(np.linalg.norm(near - pos, axis=1)))
        return float(cum[k] + t[k] * seg_len[k])

    return progress


def pointmaze_controller(gain: float = 5.0, damping: float = 0.5) -> Callable[[np.ndarray], np.ndarray]:
    """A P-D controller towards the goal for the PointMaze twin's flat observation
    (``achieved x, y, goal x, y, x, y, vx, vy``): ``clip(gain · (goal − pos) − damping · v, −1, 1)``.
    Straight to the goal: good in open mazes and near the goal, a "human" that knows where to go."""

    def ctrl(obs: np.ndarray) -> np.ndarray:
        o = np.asarray(obs, np.float32)
        return np.clip(gain * (o[2:4] - o[4:6]) - damping * o[6:8], -1, 1).astype(np.float32)

    return ctrl


def maze_controller(maze_map: Sequence[Sequence] | None, gain: float = 5.0, damping: float = 0.5,
                    lookahead: float = 1.0, scale: float = 1.0) -> Callable[[np.ndarray], np.ndarray]:
    """A P-D controller along a PointMaze map's path, for the flat observation (``achieved x, y, goal x, y, x, y, vx,
    vy``): on a map with a start cell ``"r"`` and a goal cell ``"g"`` it steers to the point ``lookahead`` m further
    along the path of :func:`maze_path` than the position's nearest point (:func:`maze_path_progress`'s arc length), and
    to the observation's goal once that point would pass the goal cell's centre: ``clip(gain · (target − pos) −
    damping · v, −1, 1)`` ``(2,)``. In a free cell off that path (a dead-end branch, e.g. of
    :data:`robotrl.real_robot.sim.DEADEND_MAP`) it steers to the centre of the next cell of the shortest cell route from
    there to ``g`` instead, back to the path (on maps whose free cells are all on the path, e.g. the corridors, this
    never happens). Without such a map (``None``, random starts and goals) it is :func:`pointmaze_controller`,
    straight to the goal. A "human" that knows the way: it turns the corners a straight-to-goal controller is stuck at
    (e.g. :data:`robotrl.real_robot.sim.ZCORRIDOR_MAP`, where the goal is behind a wall).

    Raises:
        ValueError: the map's ``g`` cannot be reached from ``r``; ``lookahead`` not positive.
    """
    if lookahead <= 0:
        raise ValueError(f"maze_controller needs lookahead > 0 (m), got {lookahead}")
    pts = None if maze_map is None else maze_path(maze_map, scale)
    if pts is None or len(pts) < 2:
        return pointmaze_controller(gain, damping)
    progress = maze_path_progress(maze_map, scale)
    seg_len = np.linalg.norm(np.diff(pts, axis=0), axis=1)
    cum = np.concatenate([[0.0], np.cumsum(seg_len)])
    back = _routes_back(maze_map, scale)  # off-path cell (row, col) -> centre (m) of its next cell towards g

    def ctrl(obs: np.ndarray) -> np.ndarray:
        o = np.asarray(obs, np.float64)
        cell = maze_cell(maze_map, o[4:6], scale)
        if cell in back:  # in a dead end: back towards the path, cell by cell
            return np.clip(gain * (back[cell] - o[4:6]) - damping * o[6:8], -1, 1).astype(np.float32)
        s = max(progress(o), 0.0) + lookahead
        if s >= cum[-1]:
            target = o[2:4]
        else:
            k = int(np.searchsorted(cum, s, side="right")) - 1
            target = pts[k] + (s - cum[k]) / seg_len[k] * (pts[k + 1] - pts[k])
        return np.clip(gain * (target - o[4:6]) - damping * o[6:8], -1, 1).astype(np.float32)

    return ctrl
