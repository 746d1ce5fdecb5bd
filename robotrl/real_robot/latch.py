"""The persistent e-stop latch of a robot server.

A latched e-stop (an ``estop`` request, or the supervisor tripping on a non-finite
action) must survive a server restart: it is written atomically to the latch file
(JSON, mode 0600, ``docs/protocol.md`` §12) and read back at start. Only a ``rearm``
with an operator name clears it, and that is logged and written too. An unreadable
latch file starts the server latched.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from robotrl.real_robot.safety import SafetySupervisor
from robotrl.files import atomic_write


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (temporary sibling, fsync, ``os.replace``), mode 0600.

    Raises:
        OSError: the directory is not writable (the temporary file is removed).
    """
    atomic_write(path, json.dumps(payload, sort_keys=True) + "\n", mode=0o600)


class EstopLatch:
    """Keeps ``supervisor.estopped`` and the latch file in step.

    Args:
        supervisor: the robot's :class:`SafetySupervisor` (it holds the live latch).
        path: the latch file; ``None`` keeps the latch in memory only (tests).
        log: where operator-relevant events are written.

    Attributes:
        info: the latch record while latched (``reason``, ``by``, ``since``, ``since_iso``...), else ``{}``.
    """

    def __init__(self, supervisor: SafetySupervisor, path: str | os.PathLike | None, log: Callable[[str], None]):
        self.supervisor, self._log = supervisor, log
        self.path = Path(path) if path is not None else None
        self.info: dict = {}
        self._on_disk = False

    def load(self) -> None:
        """Latch the supervisor when the file says (or cannot say otherwise) that the e-stop is latched. Never raises."""
        if self.path is None or not self.path.exists():
            return
        try:
            info = json.loads(self.path.read_text())
            latched = info.get("estopped") is not False  # anything but an explicit false keeps it latched
        except (OSError, ValueError, AttributeError) as exc:
            info, latched = {"reason": f"unreadable latch file ({type(exc).__name__})"}, True
        if latched:
            self.supervisor.estop()
            self._on_disk = True
            self.info = info if isinstance(info, dict) else {}
            self._log(f"e-stop LATCHED from {self.path} (since {self.info.get('since_iso', '?')}, "
                      f"reason {self.info.get('reason', '?')!r}); the robot holds until an operator re-arms it "
                      "(rearm request with an operator name, after checking the robot)")

    def persist(self, reason: str, by: str, robot_id: str | None, epoch: str) -> None:
        """Write the latch state after it changed (estop, NaN trip, re-arm).

        A failed write is logged (the latch then holds in memory until the server stops); never raises.
        """
        latched = bool(self.supervisor.estopped)
        now = time.time()
        info = {"estopped": latched, "robot_id": robot_id, "reason": reason, "by": by, "epoch": epoch,
                "since" if latched else "rearmed_at": now,
                "since_iso" if latched else "rearmed_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
        self.info = info if latched else {}
        self._on_disk = latched
        if self.path is not None:
            try:
                write_json_atomic(self.path, info)
            except OSError as exc:
                self._log(f"could NOT persist the e-stop latch state ({'latched' if latched else 're-armed'}) to "
                          f"{self.path}: {exc}; it holds in memory until this server stops. Fix the file's directory")

    def sync(self, reason: str, by: str, robot_id: str | None, epoch: str) -> None:
        """Persist (and log a new latch) when the supervisor's latch differs from the file's. Never raises."""
        if bool(self.supervisor.estopped) != self._on_disk:
            self.persist(reason, by, robot_id, epoch)
            if self.supervisor.estopped:
                self._log(f"e-stop latched ({reason}, by {by})")
