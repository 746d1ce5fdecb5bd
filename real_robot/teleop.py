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
====================  ==========================================================
"""

from __future__ import annotations

import threading
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
    """

    engaged: bool = False
    action: np.ndarray | None = None
    estop: bool = False
    rearm: bool = False


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
        self._estop = self._rearm = False
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
            elif ch == "x":
                self._action = self._hold.copy()
            elif ch in _AXES:
                i, sign = _AXES[ch]
                if i < self._action.shape[0]:
                    self._action[i] = np.clip(self._action[i] + sign * self._step, self._lo[i], self._hi[i])

    def poll(self) -> TeleopCommand:
        """The current command; e-stop and re-arm requests are reported once."""
        with self._lock:
            cmd = TeleopCommand(self._engaged, self._action.copy() if self._engaged else None, self._estop, self._rearm)
            self._estop = self._rearm = False
        return cmd

    def close(self) -> None:
        """Stop reading (the thread ends at the stream's end; daemon otherwise)."""
