"""Adapter: any LeRobot ``Robot`` behind robotrl's :class:`~robotrl.real_robot.interface.Robot` interface.

LeRobot's API (``lerobot.robots.robot.Robot``): ``observation_features`` /
``action_features`` (dicts name → ``float`` for motors, ``(h, w, c)`` for cameras),
``connect()``, ``disconnect()``, ``is_connected``, ``get_observation() -> dict``,
``send_action(dict) -> dict`` (the action actually sent, after its own
``max_relative_target`` clipping). Motor positions are reported in degrees (``.pos``
features of arms; grippers in percent 0..100).

The adapter flattens the float features, in LeRobot's order, into ``(Do,)`` / ``(Da,)``
vectors and converts joint angles to rad (``joint_units: rad``; grippers stay in the
robot's unit, stated as ``"%"``). Camera features (``(h, w, c)`` tuples; LeRobot's cameras
deliver ``uint8 (h, w, c)`` RGB arrays in ``get_observation()``) are not part of the state
vector: they become :attr:`RobotSpec.cameras` (rate: the camera config's ``fps`` where the
robot's config names it, else the control rate) and each observation carries their frames
in :attr:`Observation.images` (``cameras`` picks a subset). ``hold()`` commands the last
measured joint positions (a position-controlled arm stays where it is); use
``safety.hold_mode: last``. Install with ``pip install robotrl[lerobot]``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ArraySpec, CameraSpec, Observation, RobotConnectionError, RobotError, RobotSpec


def _is_angle(name: str) -> bool:
    return name.endswith(".pos") and "gripper" not in name


class LeRobotAdapter:
    """Wrap a LeRobot robot instance.

    Args:
        robot: an object with LeRobot's ``Robot`` API.
        control_rate_hz: the control rate to run it at (Hz).
        joint_units: ``"rad"`` (convert LeRobot's degrees) or ``"deg"`` (pass through).
        bounds: optional ``{action name: [low, high]}`` in robotrl units (rad); default
            ``±pi`` rad for joints and ``[0, 100]`` for grippers.
        name: the spec's name (default ``lerobot:<robot name>``).
        cameras: the camera features to pass on (``None``: all of them, in LeRobot's order;
            ``[]``: none). Their frames travel in every observation, so the bridge needs
            :func:`~robotrl.real_robot.protocol.camera_limits` (``robotrl robot-server``
            derives them).

    Raises:
        ConfigError: the robot exposes no float action features, bad ``joint_units``, or a
            name in ``cameras`` that is not a camera feature of the robot (the message lists them).
    """

    def __init__(self, robot, control_rate_hz: float = 30.0, joint_units: str = "rad", bounds: Mapping | None = None,
                 name: str | None = None, cameras: list[str] | tuple[str, ...] | None = None):
        if joint_units not in ("rad", "deg"):
            raise ConfigError(f"joint_units must be 'rad' or 'deg', got {joint_units!r}")
        self.robot, self.rate, self.joint_units = robot, float(control_rate_hz), joint_units
        self._obs_names = [k for k, v in robot.observation_features.items() if v is float]
        self._act_names = [k for k, v in robot.action_features.items() if v is float]
        shapes = {k: tuple(int(d) for d in v) for k, v in robot.observation_features.items()
                  if isinstance(v, tuple) and len(v) == 3}  # LeRobot: cameras are (h, w, c) features
        if cameras is None:
            cameras = list(shapes)
        unknown = [c for c in cameras if c not in shapes]
        if unknown:
            raise ConfigError(f"cameras {unknown} are not camera features of this LeRobot robot; it has {list(shapes) or 'none'}")
        fps = getattr(getattr(robot, "config", None), "cameras", None)  # LeRobot: {name: CameraConfig(fps=...)}
        fps = fps if isinstance(fps, Mapping) else {}
        self._cameras = tuple(CameraSpec(c, shapes[c], float(getattr(fps.get(c), "fps", None) or control_rate_hz))  # type: ignore[arg-type]
                              for c in cameras)
        if not self._act_names:
            raise ConfigError("this LeRobot robot has no float action features; the bridge drives motor positions")
        self._bounds = dict(bounds or {})
        self._name = name or f"lerobot:{getattr(robot, 'name', type(robot).__name__)}"
        self._last_state: np.ndarray | None = None

    @classmethod
    def from_robot_type(cls, robot_type: str, *, robot_kwargs: Mapping | None = None, control_rate_hz: float = 30.0,
                        joint_units: str = "rad", bounds: Mapping | None = None, name: str | None = None,
                        cameras: list[str] | tuple[str, ...] | None = None) -> LeRobotAdapter:
        """Build the LeRobot robot named by ``robot_type`` (its ``RobotConfig`` choice name, e.g.
        ``so100_follower``) with ``robot_kwargs``; the driver ``_target_`` of ``configs/robot/lerobot.yaml``.
        The other arguments are the constructor's.

        Raises:
            ImportError: LeRobot is not installed (the message says ``pip install 'robotrl[lerobot]'``).
            ConfigError: as the constructor.
        """
        try:
            from lerobot.robots import RobotConfig, make_robot_from_config
        except ImportError as exc:
            raise ImportError("the LeRobot driver needs LeRobot: pip install 'robotrl[lerobot]'") from exc
        config = RobotConfig.get_choice_class(robot_type)(**dict(robot_kwargs or {}))
        return cls(make_robot_from_config(config), float(control_rate_hz), joint_units, bounds, name,
                   None if cameras is None else list(cameras))

    # ---- units ------------------------------------------------------------------------
    def _scale(self, names) -> np.ndarray:
        f = np.pi / 180.0 if self.joint_units == "rad" else 1.0
        return np.array([f if _is_angle(n) else 1.0 for n in names])

    def _unit(self, n: str) -> str:
        return (self.joint_units if _is_angle(n) else ("%" if "gripper" in n else "1"))

    def spec(self) -> RobotSpec:
        """Spec from LeRobot's feature dicts (readable before connecting, as in LeRobot)."""
        obs = ArraySpec(tuple(self._obs_names), tuple(self._unit(n) for n in self._obs_names),
                        (-np.inf,) * len(self._obs_names), (np.inf,) * len(self._obs_names))
        lim = np.pi if self.joint_units == "rad" else 180.0
        lo, hi = [], []
        for n in self._act_names:
            b = self._bounds.get(n) or ([-lim, lim] if _is_angle(n) else [0.0, 100.0])
            lo.append(float(b[0]))
            hi.append(float(b[1]))
        act = ArraySpec(tuple(self._act_names), tuple(self._unit(n) for n in self._act_names), tuple(lo), tuple(hi))
        hold = tuple(float(np.clip(0.0, a, b)) for a, b in zip(lo, hi))
        return RobotSpec(self._name, obs, act, self.rate, hold, None, False, {"lerobot": True}, self._cameras)

    # ---- connection -------------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        return bool(self.robot.is_connected)

    def connect(self) -> None:
        if not self.robot.is_connected:
            self.robot.connect()

    def disconnect(self) -> None:
        """Hold at the current position, then disconnect (LeRobot may disable torque)."""
        if self.robot.is_connected:
            try:
                self.hold()
            finally:
                self.robot.disconnect()

    def __enter__(self) -> LeRobotAdapter:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()

    # ---- I/O --------------------------------------------------------------------------
    def _check(self) -> None:
        if not self.robot.is_connected:
            raise RobotConnectionError(f"{self._name} is not connected; call connect() or use it as a context manager")

    def _read(self) -> dict:
        """LeRobot's raw observation dict; updates the last measured state ``(Do,)``."""
        self._check()
        try:
            raw = self.robot.get_observation()
        except (ConnectionError, OSError) as exc:
            raise RobotConnectionError(f"{self._name}: {exc}") from exc
        state = np.array([raw[n] for n in self._obs_names], np.float64) * self._scale(self._obs_names)
        self._last_state = state.astype(np.float32)
        return raw

    def get_observation(self) -> Observation:
        """Float features as ``(Do,)`` float32 in SI units (rad for joints); the cameras' frames as
        ``images`` ``{name: uint8 (h, w, c)}`` (``None`` without cameras).

        Raises:
            RobotConnectionError: not connected, or the robot's link failed.
            RobotError: a camera frame that is missing or not ``uint8`` of its feature's shape.
        """
        raw = self._read()
        images = None
        if self._cameras:
            images = {}
            for cam in self._cameras:
                frame = np.asarray(raw.get(cam.name))
                if frame.dtype != np.uint8 or frame.shape != cam.shape:
                    raise RobotError(f"{self._name}: camera {cam.name!r} delivered {frame.dtype} {frame.shape}, its feature "
                                     f"says uint8 {cam.shape}; check the camera's configured width, height and color mode")
                images[cam.name] = np.ascontiguousarray(frame)
        return Observation(self._last_state, time.time(), images=images)

    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Send ``(Da,)`` (rad for joints); returns what LeRobot actually sent, converted back."""
        self._check()
        a = np.asarray(action, np.float64).reshape(-1)
        if a.shape[0] != len(self._act_names):
            raise ValueError(f"action has {a.shape[0]} entries, {self._name} takes Da={len(self._act_names)} ({self._act_names})")
        scale = self._scale(self._act_names)
        sent = self.robot.send_action({n: float(v) for n, v in zip(self._act_names, a / scale)})
        return (np.array([sent[n] for n in self._act_names], np.float64) * scale).astype(np.float32)

    def hold(self) -> np.ndarray:
        """Command the last measured positions of the action's motors (stay in place; a failing camera does not stop it)."""
        self._read()
        obs = self._last_state
        idx = {n: i for i, n in enumerate(self._obs_names)}
        target = np.array([obs[idx[n]] if n in idx else 0.0 for n in self._act_names], np.float32)
        return self.send_action(target)

    def reset(self, seed: int | None = None) -> Observation:
        """Hardware cannot reset itself: hold and return the current observation (an operator resets the scene)."""
        self.hold()
        return self.get_observation()
