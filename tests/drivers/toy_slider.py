"""An out-of-tree robot driver, as a user would write one in their own package (issue 42, item 6).

Nothing in robotrl names it: a robot config selects it by ``_target_: toy_slider.ToySlider`` and
``tests/test_robot_driver_target.py`` serves it through ``robotrl robot-server``. A 1-D slider: the state is
``[position m, velocity m/s]``, the command a velocity in m/s clipped to ``±max_speed``, integrated at ``rate_hz``.
"""

from __future__ import annotations

import time

import numpy as np

from robotrl.real_robot.interface import ArraySpec, Observation, RobotConnectionError, RobotSpec


class ToySlider:
    """A simulated 1-D slider (velocity-controlled).

    Args:
        rate_hz: control rate (Hz); each command moves ``velocity / rate_hz`` m.
        max_speed: the firmware's velocity limit (m/s).
        start: initial position (m).
    """

    def __init__(self, rate_hz: float = 50.0, max_speed: float = 0.5, start: float = 0.0):
        self.rate_hz, self.max_speed, self.start = float(rate_hz), float(max_speed), float(start)
        self.pos, self.vel, self._connected = self.start, 0.0, False

    def spec(self) -> RobotSpec:
        return RobotSpec("toy-slider", ArraySpec(("pos", "vel"), ("m", "m/s"), (-1.0, -self.max_speed), (1.0, self.max_speed)),
                         ArraySpec(("vel_cmd",), ("m/s",), (-self.max_speed,), (self.max_speed,)), self.rate_hz, (0.0,),
                         episodic=True)

    @property
    def is_connected(self) -> bool:
        return self._connected

    def connect(self) -> None:
        self._connected = True

    def disconnect(self) -> None:
        self.hold()
        self._connected = False

    def get_observation(self) -> Observation:
        if not self._connected:
            raise RobotConnectionError("toy slider not connected")
        return Observation(np.array([self.pos, self.vel], np.float32), time.time())

    def send_action(self, action: np.ndarray) -> np.ndarray:
        a = np.asarray(action, np.float32).reshape(-1)
        if a.shape != (1,):
            raise ValueError(f"toy slider takes 1 command, got {a.shape}")
        self.vel = float(np.clip(a[0], -self.max_speed, self.max_speed))
        self.pos += self.vel / self.rate_hz
        return np.array([self.vel], np.float32)

    def hold(self) -> np.ndarray:
        self.vel = 0.0
        return np.zeros(1, np.float32)

    def reset(self, seed: int | None = None) -> Observation:
        self.pos, self.vel = self.start, 0.0
        return self.get_observation()

    def __enter__(self) -> ToySlider:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()
