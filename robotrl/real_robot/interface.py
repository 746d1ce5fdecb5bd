"""The robot interface every driver implements, and the errors of the bridge.

Modelled on LeRobot's ``Robot`` class (``lerobot.robots.robot.Robot``: ``connect``,
``disconnect``, ``get_observation``, ``send_action`` returning the action actually sent,
``observation_features``/``action_features`` readable before connecting) and on SERL's
robot servers (a flat state vector, a fixed control rate, a safe "hold" state).

Conventions (documented per dimension in :class:`ArraySpec`):

* SI units: joint positions in rad, Cartesian positions in m, time in s, rates in Hz,
  velocities in rad/s or m/s, forces in N (or a normalised command in ``[-1, 1]``,
  which the spec then states as unit ``"1"``).
* ``Do`` = observation vector size, ``Da`` = action vector size. Observations are
  float32 ``(Do,)``; actions are float32 ``(Da,)``.
* ``send_action(a)`` returns the action actually applied (after the driver's own clipping).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from robotrl.errors import RobotRLError


class RobotError(RobotRLError, RuntimeError):
    """Base of the bridge's runtime errors (driver, link, safety)."""


class RobotConnectionError(RobotError, ConnectionError):
    """The robot (or the robot server) is not connected, crashed, or stopped answering."""


class ProtocolError(RobotError, ValueError):
    """A bridge message that is malformed, unauthenticated, replayed, stale or too large."""


@dataclass(frozen=True)
class ArraySpec:
    """Names, units and bounds of a flat vector.

    Attributes:
        names: one name per dimension, e.g. ``("x", "y")``.
        units: one SI unit per dimension (``"m"``, ``"rad"``, ``"m/s"``, ``"N"``, ``"1"``).
        low, high: bounds per dimension (``-inf``/``inf`` where unbounded).
    """

    names: tuple[str, ...]
    units: tuple[str, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]

    def __post_init__(self):
        n = len(self.names)
        for what in ("units", "low", "high"):
            if len(getattr(self, what)) != n:
                raise ValueError(f"ArraySpec: {what} has {len(getattr(self, what))} entries but names has {n}; give one per dimension")

    @property
    def dim(self) -> int:
        """Vector size (``Do`` or ``Da``)."""
        return len(self.names)

    @property
    def low_array(self) -> np.ndarray:
        return np.asarray(self.low, np.float64)

    @property
    def high_array(self) -> np.ndarray:
        return np.asarray(self.high, np.float64)

    def to_dict(self) -> dict:
        """JSON/msgpack-able form (infinite bounds as ``None``)."""
        fin = lambda v: [None if not np.isfinite(x) else float(x) for x in v]  # noqa: E731
        return {"names": list(self.names), "units": list(self.units), "low": fin(self.low), "high": fin(self.high)}

    @classmethod
    def from_dict(cls, d: dict) -> ArraySpec:
        lo = tuple(-np.inf if x is None else float(x) for x in d["low"])
        hi = tuple(np.inf if x is None else float(x) for x in d["high"])
        return cls(tuple(d["names"]), tuple(d["units"]), lo, hi)

    @classmethod
    def unnamed(cls, prefix: str, dim: int, unit: str = "1", low=-np.inf, high=np.inf) -> ArraySpec:
        """``dim`` dimensions named ``prefix0..`` with one unit and broadcast bounds."""
        lo = np.broadcast_to(np.asarray(low, np.float64), (dim,))
        hi = np.broadcast_to(np.asarray(high, np.float64), (dim,))
        return cls(tuple(f"{prefix}{i}" for i in range(dim)), (unit,) * dim, tuple(map(float, lo)), tuple(map(float, hi)))


@dataclass(frozen=True)
class CameraSpec:
    """One camera of a robot.

    Attributes:
        name: camera key, e.g. ``"wrist"`` or a MuJoCo camera name (``"external_camera_0"``).
        shape: frame shape ``(H, W, C)``, uint8.
        rate_hz: frames per second (the twin renders one frame per control step).
    """

    name: str
    shape: tuple[int, int, int]
    rate_hz: float

    def to_dict(self) -> dict:
        return {"name": self.name, "shape": [int(d) for d in self.shape], "rate_hz": float(self.rate_hz)}

    @classmethod
    def from_dict(cls, d: dict) -> CameraSpec:
        return cls(str(d["name"]), tuple(int(x) for x in d["shape"]), float(d["rate_hz"]))  # type: ignore[arg-type]


@dataclass(frozen=True)
class RobotSpec:
    """What a robot offers, readable before :meth:`Robot.connect`.

    Attributes:
        name: driver/robot name, e.g. ``"sim:pointmaze-umaze"``.
        observation: :class:`ArraySpec` of the ``(Do,)`` state vector.
        action: :class:`ArraySpec` of the ``(Da,)`` command.
        control_rate_hz: nominal control rate in Hz (the twin: ``1 / env dt``).
        hold_action: the command that holds the robot safely (``(Da,)``), used by the
            e-stop and the watchdog (zero force/velocity, or the current position).
        gym_env_id: the gymnasium id of a simulated twin's task (``None`` on hardware);
            recorded into datasets so ``robotrl train`` can evaluate on it.
        episodic: whether :meth:`Robot.reset` can start a new episode by itself.
        cameras: the robot's cameras (:class:`CameraSpec`); their frames arrive in
            :attr:`Observation.images`. Empty for a state-only robot.
    """

    name: str
    observation: ArraySpec
    action: ArraySpec
    control_rate_hz: float
    hold_action: tuple[float, ...]
    gym_env_id: str | None = None
    episodic: bool = False
    extra: dict = field(default_factory=dict)
    cameras: tuple[CameraSpec, ...] = ()

    def to_dict(self) -> dict:
        out = {"name": self.name, "observation": self.observation.to_dict(), "action": self.action.to_dict(),
               "control_rate_hz": float(self.control_rate_hz), "hold_action": [float(x) for x in self.hold_action],
               "gym_env_id": self.gym_env_id, "episodic": bool(self.episodic), "extra": dict(self.extra)}
        if self.cameras:
            out["cameras"] = [c.to_dict() for c in self.cameras]
        return out

    @classmethod
    def from_dict(cls, d: dict) -> RobotSpec:
        return cls(str(d["name"]), ArraySpec.from_dict(d["observation"]), ArraySpec.from_dict(d["action"]),
                   float(d["control_rate_hz"]), tuple(float(x) for x in d["hold_action"]), d.get("gym_env_id"),
                   bool(d.get("episodic", False)), dict(d.get("extra") or {}),
                   tuple(CameraSpec.from_dict(c) for c in d.get("cameras") or ()))


@dataclass
class Observation:
    """One observation of the robot.

    Attributes:
        state: float32 ``(Do,)`` in the units of :attr:`RobotSpec.observation`.
        timestamp: time of measurement, ``time.time()`` seconds (wall clock, s).
        reward: task reward for the last step (0 on hardware without a reward model).
        terminated, truncated: episode end flags (the twin's task; ``False`` on hardware
            unless an operator or a success detector ends the episode).
        success: task success flag (the twin's ``info["success"]``), ``False`` if unknown.
        images: camera frames ``{name: uint8 (H, W, C)}`` of :attr:`RobotSpec.cameras`
            taken with this state (``None`` for a robot without cameras).
    """

    state: np.ndarray
    timestamp: float
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    images: dict[str, np.ndarray] | None = None


@runtime_checkable
class Robot(Protocol):
    """A robot driver. Use as a context manager: ``with robot: ...`` connects and disconnects.

    Methods:
        spec: the :class:`RobotSpec` (no connection needed).
        connect / disconnect: open and close the link; ``disconnect`` must leave the
            robot holding (never mid-motion).
        get_observation: latest :class:`Observation`. Raises
            :class:`RobotConnectionError` when not connected or the link is lost.
        send_action(a (Da,)): command the robot; returns the float32 ``(Da,)`` action
            actually applied. Raises :class:`RobotConnectionError` as above.
        hold: command :attr:`RobotSpec.hold_action` (safe hold); returns it.
        reset(seed): start a new episode where the driver can (the twin resets its
            task); hardware drivers move to a home pose or simply return the current
            observation.
    """

    def spec(self) -> RobotSpec: ...

    def connect(self) -> None: ...

    def disconnect(self) -> None: ...

    @property
    def is_connected(self) -> bool: ...

    def get_observation(self) -> Observation: ...

    def send_action(self, action: np.ndarray) -> np.ndarray: ...

    def hold(self) -> np.ndarray: ...

    def reset(self, seed: int | None = None) -> Observation: ...

    def __enter__(self) -> Robot: ...

    def __exit__(self, *exc) -> None: ...
