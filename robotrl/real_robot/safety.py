"""The safety supervisor: the only path from a requested action to the robot.

Configured per robot (``configs/robot/<name>.yaml``, section ``safety``). For every
request ``a`` (``(Da,)``, the robot's action units) it computes the applied action:

1. NaN/inf guard: a non-finite request is refused; the robot holds (and, with
   ``estop_on_nonfinite``, the e-stop latches).
2. Latched e-stop: while latched every request becomes ``hold_action``; only
   :meth:`SafetySupervisor.rearm` clears it (never a new command, never a timeout).
3. Per-dimension admissible interval, the intersection of
   * absolute bounds ``[low, high]``,
   * maximum change per step ``|a_t - a_{t-1}| <= max_delta``,
   * velocity limit ``|a_t - a_{t-1}| / dt <= max_velocity`` (``dt = 1 / rate_hz``, s),
   * workspace box (see :class:`WorkspaceBox`): for an action box, the box; for an
     observation box, beyond (or on) a face only commands that do not push further out
     pass. Where a position limit and the change limit cannot both hold, the position
     limit wins (the command jumps to the nearest admissible point / the hold value).
   These are hard limits; the request is clipped into the interval, in float32 rounded
   inward (also the hold action), so the applied float32 action never leaves them.
4. Acceleration limit ``|v_t - v_{t-1}| / dt <= max_acceleration`` with
   ``v_t = (a_t - a_{t-1}) / dt``: applied inside the hard interval; where the two
   cannot both hold (the previous step was fast toward a bound) the hard interval wins
   and the step is flagged ``accel_infeasible``.

The watchdog (in :class:`~robotrl.real_robot.server.RobotServer`) calls :meth:`hold`
when no fresh command arrives in time. Every decision is kept (requested vs applied,
flags) in a bounded log and summarised in counters.

Sources: SERL's Franka server clips targets to a bounding box and limits the step
size; LeRobot's ``max_relative_target`` caps the change per step.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass, field

import numpy as np

from robotrl.errors import ConfigError


@dataclass
class WorkspaceBox:
    """A Cartesian box the robot must stay in (m).

    Attributes:
        source: ``"action"`` when the action components ``indices`` are Cartesian
            position targets (they are clipped into the box), or ``"observation"`` when
            the position is measured in the observation components ``indices`` and the
            action components ``action_indices`` push along those axes (force/velocity
            commands): while the measured position is at or beyond a face, the
            component may not push further out than the hold value (whatever the
            change-per-step limit allows); a non-finite position allows only the hold value.
            The config is validated at start: finite box with low <= high, distinct
            non-negative indices, and for an action box an overlap with the bounds and the
            hold action inside it (a hold outside would pin the robot at the face).
        indices: action or observation indices of the x, y(, z) coordinates.
        action_indices: for ``source="observation"``, the action component per axis.
        low, high: box corners in m.
    """

    source: str
    indices: list[int]
    low: list[float]
    high: list[float]
    action_indices: list[int] | None = None

    def __post_init__(self):
        if self.source not in ("action", "observation"):
            raise ConfigError(f"safety.workspace.source must be 'action' or 'observation', got {self.source!r}")
        n = len(self.indices)
        if len(self.low) != n or len(self.high) != n:
            raise ConfigError("safety.workspace: low, high and indices must have the same length")
        if self.source == "observation" and (self.action_indices is None or len(self.action_indices) != n):
            raise ConfigError("safety.workspace.source=observation needs action_indices, one per observation index")
        lo, hi = np.asarray(self.low, np.float64), np.asarray(self.high, np.float64)
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(lo > hi):
            raise ConfigError(f"safety.workspace: the box must be finite with low <= high, got low {self.low}, high {self.high}")
        for name in ("indices", "action_indices"):
            idx = getattr(self, name)
            if idx is not None and (any(not isinstance(i, (int, np.integer)) or isinstance(i, bool) or i < 0 for i in idx)
                                    or len(set(idx)) != len(idx)):
                raise ConfigError(f"safety.workspace.{name} must be distinct integers >= 0, got {idx}")


@dataclass
class SafetyConfig:
    """Limits of one robot, in its action units (see :class:`~robotrl.real_robot.interface.RobotSpec`).

    Attributes:
        low, high: absolute bounds ``(Da,)``.
        hold_action: the safe command ``(Da,)`` (e-stop, watchdog, refused requests).
        rate_hz: control rate in Hz; ``dt = 1 / rate_hz`` s for velocity/acceleration.
        max_delta: maximum change per step ``(Da,)`` or scalar; ``None`` = unlimited.
        max_velocity: maximum ``|Δa| / dt`` (units/s); ``None`` = unlimited.
        max_acceleration: maximum ``|Δv| / dt`` (units/s²); ``None`` = unlimited.
        workspace: optional :class:`WorkspaceBox`.
        watchdog_s: the robot holds when no command arrives for this many seconds;
            default 1.5 control periods.
        estop_on_nonfinite: latch the e-stop on a NaN/inf request.
        hold_mode: ``"fixed"`` (hold = ``hold_action``: zero force/velocity robots; the
            jump to it is the stop) or ``"last"`` (hold = the last applied action:
            position-controlled robots stay where they are, no jump).
        log_size: decisions kept in :attr:`SafetySupervisor.log`.
    """

    low: list[float]
    high: list[float]
    hold_action: list[float]
    rate_hz: float
    max_delta: list[float] | float | None = None
    max_velocity: list[float] | float | None = None
    max_acceleration: list[float] | float | None = None
    workspace: WorkspaceBox | None = None
    watchdog_s: float | None = None
    estop_on_nonfinite: bool = True
    log_size: int = 10000
    hold_mode: str = "fixed"

    def __post_init__(self):
        n = len(self.low)
        if len(self.high) != n or len(self.hold_action) != n:
            raise ConfigError(f"safety: low, high and hold_action must all have Da={n} entries")
        lo, hi, hold = (np.asarray(x, np.float64) for x in (self.low, self.high, self.hold_action))
        if not (np.all(np.isfinite(lo)) and np.all(np.isfinite(hi))) or np.any(lo > hi):
            raise ConfigError(f"safety: bounds must be finite with low <= high, got low={self.low} high={self.high}")
        if np.any(hold < lo) or np.any(hold > hi):
            raise ConfigError(f"safety: hold_action {self.hold_action} lies outside [low, high]; fix the robot config")
        if not self.rate_hz or self.rate_hz <= 0:
            raise ConfigError(f"safety.rate_hz must be > 0 Hz, got {self.rate_hz}")
        for name in ("max_delta", "max_velocity", "max_acceleration"):
            v = getattr(self, name)
            if v is not None and np.any(np.asarray(v, np.float64) <= 0):
                raise ConfigError(f"safety.{name} must be > 0 (or null for no limit), got {v}")
        if self.hold_mode not in ("fixed", "last"):
            raise ConfigError(f"safety.hold_mode must be 'fixed' or 'last', got {self.hold_mode!r}")
        if isinstance(self.workspace, dict):
            self.workspace = WorkspaceBox(**self.workspace)
        ws = self.workspace
        if ws is not None:
            idx = ws.indices if ws.source == "action" else ws.action_indices
            if max(idx, default=-1) >= n:
                raise ConfigError(f"safety.workspace: action index {max(idx)} does not exist (Da={n}); "
                                  f"fix workspace.{'indices' if ws.source == 'action' else 'action_indices'}")
            if ws.source == "action":
                wlo, whi = np.asarray(ws.low, np.float64), np.asarray(ws.high, np.float64)
                if np.any(wlo > hi[idx]) or np.any(whi < lo[idx]):
                    raise ConfigError(f"safety.workspace: the box low={ws.low} high={ws.high} does not overlap the action "
                                      f"bounds [low, high] on indices {ws.indices}; no action could be applied")
                h = hold[idx]
                if np.any(h < wlo) or np.any(h > whi):
                    raise ConfigError(f"safety: hold_action {self.hold_action} lies outside the action workspace box "
                                      f"(indices {ws.indices}: low={ws.low}, high={ws.high}); every stop would push the "
                                      "robot out of the box and pin it there. Put the hold action inside the box")
        if self.watchdog_s is None:
            self.watchdog_s = 1.5 / self.rate_hz
        if self.watchdog_s <= 0:
            raise ConfigError(f"safety.watchdog_s must be > 0 s, got {self.watchdog_s}")

    @property
    def dt(self) -> float:
        return 1.0 / float(self.rate_hz)


@dataclass
class Decision:
    """The supervisor's verdict on one request.

    Attributes:
        requested: the request ``(Da,)`` as received (may hold NaN).
        applied: the float32 action ``(Da,)`` to send to the robot.
        flags: reasons the two differ (``"nonfinite"``, ``"estop"``, ``"bounds"``,
            ``"delta"``, ``"velocity"``, ``"acceleration"``, ``"accel_infeasible"``,
            ``"workspace"``, ``"watchdog"``).
    """

    requested: np.ndarray
    applied: np.ndarray
    flags: list[str] = field(default_factory=list)

    @property
    def modified(self) -> bool:
        return bool(self.flags)


def _vec(x, n: int) -> np.ndarray:
    return np.full(n, np.inf) if x is None else np.broadcast_to(np.asarray(x, np.float64), (n,)).copy()


_F32_INF = np.float32(np.inf)


def _clip(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """``np.clip(x, lo, hi)`` (same definition, ``min(max(x, lo), hi)``) without its Python wrapper: per-step hot path."""
    return np.minimum(np.maximum(x, lo), hi)


def _inward(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 bounds inside ``[lo, hi]`` (rounded inward), so a float32 action obeys float64 limits."""
    lo32, hi32 = lo.astype(np.float32), hi.astype(np.float32)
    up, down = lo32.astype(np.float64) < lo, hi32.astype(np.float64) > hi
    if up.any():  # (the common case, a representable bound, skips the nextafter)
        lo32 = np.where(up, np.nextafter(lo32, _F32_INF), lo32)
    if down.any():
        hi32 = np.where(down, np.nextafter(hi32, -_F32_INF), hi32)
    return lo32, np.maximum(hi32, lo32)


class SafetySupervisor:
    """Stands in front of every ``send_action``; see the module doc for the rules.

    Args:
        config: the :class:`SafetyConfig` of the robot.

    Attributes:
        estopped: whether the e-stop is latched.
        counters: number of decisions per flag, plus ``"requests"``.
        log: the last ``log_size`` :class:`Decision` objects.
    """

    def __init__(self, config: SafetyConfig):
        self.config = config
        n = len(config.low)
        self.da = n
        self._lo, self._hi = np.asarray(config.low, np.float64), np.asarray(config.high, np.float64)
        # the hard box (bounds and an action workspace), in float32 rounded inward: the hold
        # action is clipped into it so a hold on an unrepresentable bound never leaves it by an ulp
        blo, bhi = self._lo.copy(), self._hi.copy()
        ws = config.workspace
        if ws is not None and ws.source == "action":
            blo[ws.indices] = np.maximum(blo[ws.indices], ws.low)
            bhi[ws.indices] = np.minimum(bhi[ws.indices], ws.high)
        self._box_lo, self._box_hi = blo, bhi
        blo32, bhi32 = _inward(blo, bhi)
        self._box_lo32, self._box_hi32 = blo32.astype(np.float64), bhi32.astype(np.float64)
        self._hold = np.clip(np.asarray(config.hold_action, np.float32), blo32, bhi32).astype(np.float64)
        self._dmax = np.minimum(_vec(config.max_delta, n), _vec(config.max_velocity, n) * config.dt)
        self._amax = _vec(config.max_acceleration, n)
        self._accel_limited = bool(np.isfinite(self._amax).any())
        if ws is not None and ws.source == "observation":  # per-step constants of the observation workspace
            self._ws_obs_idx = np.asarray(ws.indices, np.intp)
            self._ws_max_index = max(ws.indices)
            self._ws_hold = [float(self._hold[j]) for j in ws.action_indices or ()]
        self.estopped = False
        self.counters: collections.Counter = collections.Counter()
        self.log: collections.deque[Decision] = collections.deque(maxlen=config.log_size)
        self._prev = self._hold.copy()
        self._prev_v = np.zeros(n)

    @property
    def last_applied(self) -> np.ndarray:
        return self._prev.astype(np.float32)

    def _hold_target(self) -> np.ndarray:
        return self._prev.copy() if self.config.hold_mode == "last" else self._hold.copy()

    def estop(self) -> None:
        """Latch the software e-stop: every later request is replaced by the hold action."""
        self.estopped = True
        self.counters["estop_latched"] += 1

    def rearm(self) -> None:
        """Clear a latched e-stop (an explicit operator action). The next step starts from hold."""
        if self.estopped:
            self._prev, self._prev_v = self._hold_target(), np.zeros(self.da)
        self.estopped = False
        self.counters["rearm"] += 1

    def hold(self, reason: str = "watchdog") -> Decision:
        """The hold action as a decision (watchdog, shadow mode); resets the motion history."""
        self._prev, self._prev_v = self._hold_target(), np.zeros(self.da)
        d = Decision(np.full(self.da, np.nan), self._prev.astype(np.float32), [reason])
        self._record(d)
        return d

    def _record(self, d: Decision) -> None:
        self.counters["requests"] += 1
        for f in d.flags:
            self.counters[f] += 1
        self.log.append(d)

    def interval(self, observation: np.ndarray | None = None, flags: list[str] | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The hard admissible interval ``(lo, hi)`` per dimension for the next step.

        The intersection of the bounds, the change limit around the previous action, an
        action workspace, and, for an observation workspace, the rule that outside (or on)
        a face only commands that do not push further out pass. Where the change limit
        and a position limit cannot both hold, the position limit wins: the command jumps
        to the nearest admissible point (for the observation workspace: the hold value),
        like the stop itself.

        Args:
            observation: the latest ``(Do,)`` state (needed by an observation workspace).
            flags: if given, ``"workspace"`` is appended when the observation workspace binds.

        Raises:
            ValueError: an observation workspace and no ``observation``, or one too short.
        """
        lo = np.maximum(self._box_lo, self._prev - self._dmax)
        hi = np.minimum(self._box_hi, self._prev + self._dmax)
        bad = lo > hi  # only when the previous action lies outside a limit: go to the nearest admissible point
        if bad.any():
            mid = np.clip(self._prev, self._box_lo32, self._box_hi32)
            lo[bad] = hi[bad] = mid[bad]
        ws = self.config.workspace
        if ws is not None and ws.source == "observation":
            if observation is None:
                raise ValueError("safety.workspace.source=observation needs the current observation in filter()")
            obs = np.asarray(observation, np.float64).reshape(-1)
            if obs.shape[0] <= self._ws_max_index:
                raise ValueError(f"observation has {obs.shape[0]} entries; safety.workspace.indices {ws.indices} needs more")
            for p, wlo, whi, j, h in zip(obs[self._ws_obs_idx].tolist(), ws.low, ws.high, ws.action_indices, self._ws_hold):
                if not math.isfinite(p) or (p >= whi and hi[j] > h) or (p <= wlo and lo[j] < h):
                    if not math.isfinite(p):  # position unknown: only the stop command passes
                        lo[j] = hi[j] = h
                    elif p >= whi:  # beyond the high face: nothing above the hold value (outward)
                        hi[j] = h
                        lo[j] = min(lo[j], h)
                    else:
                        lo[j] = h
                        hi[j] = max(hi[j], h)
                    if flags is not None and "workspace" not in flags:
                        flags.append("workspace")
        return lo, hi

    def filter(self, requested: np.ndarray, observation: np.ndarray | None = None) -> Decision:
        """Turn a request ``(Da,)`` into the action to apply.

        Args:
            requested: the request in action units.
            observation: the latest ``(Do,)`` state, needed by an ``observation`` workspace.

        Raises:
            ValueError: ``requested`` does not have ``Da`` entries (the message gives both), or an
                observation workspace without a (long enough) ``observation``.
        """
        req = np.asarray(requested, np.float64).reshape(-1)
        if req.shape[0] != self.da:
            raise ValueError(f"action has {req.shape[0]} entries, this robot takes Da={self.da}")
        if not np.isfinite(req).all():
            if self.config.estop_on_nonfinite:
                self.estop()
            self._prev, self._prev_v = self._hold_target(), np.zeros(self.da)
            d = Decision(req, self._prev.astype(np.float32), ["nonfinite"])
            self._record(d)
            return d
        if self.estopped:
            self._prev, self._prev_v = self._hold_target(), np.zeros(self.da)
            d = Decision(req, self._prev.astype(np.float32), ["estop"])
            self._record(d)
            return d
        flags: list[str] = []
        if (req < self._lo).any() or (req > self._hi).any():
            flags.append("bounds")
        if (np.abs(req - self._prev) > self._dmax).any():
            flags.append("delta")
        ws_flags: list[str] = []
        lo, hi = self.interval(observation, ws_flags)
        a = _clip(req, lo, hi)
        if "bounds" not in flags and "delta" not in flags and (a != req).any():
            flags.append("workspace")
        elif ws_flags and "workspace" not in flags and (a != req).any():
            flags.append("workspace")
        dt = self.config.dt
        if self._accel_limited:
            v = (a - self._prev) / dt
            vlo, vhi = self._prev_v - self._amax * dt, self._prev_v + self._amax * dt
            if (v < vlo).any() or (v > vhi).any():
                flags.append("acceleration")
                a_acc = self._prev + _clip(v, vlo, vhi) * dt
                a_new = _clip(a_acc, lo, hi)
                if (a_new != a_acc).any():
                    flags.append("accel_infeasible")
                a = a_new
        lo32, hi32 = _inward(lo, hi)
        out = _clip(a, lo32, hi32).astype(np.float32)  # float32 rounding never leaves the hard interval
        applied = out.astype(np.float64)
        self._prev_v = (applied - self._prev) / dt
        self._prev = applied
        d = Decision(req, out, flags)
        self._record(d)
        return d
