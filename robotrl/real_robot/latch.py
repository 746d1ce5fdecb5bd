"""The persistent e-stop latch of a robot server (``docs/protocol.md`` §12).

A latched e-stop (an ``estop`` request, ``SIGUSR1`` to the server process, or the
supervisor tripping on a non-finite action) must survive a crash and a restart: it is
written atomically to the robot's latch file (JSON, mode 0600) and read back at start.
Only a ``rearm`` with an operator name clears it, and only once the cleared state is on
disk (the re-arm is refused otherwise, the robot stays held).

The rules that keep an e-stop from being lost:

* **one latch per robot**: each file belongs to one *latch id* (the ``robot_id``, or
  ``<robot name>@<configured endpoint>`` when none is set); by default it is named after
  that id (:func:`default_latch_path`), and a file holding another robot's record makes
  :meth:`EstopLatch.open` refuse to start the server: a record for another robot is never
  read as this robot's state;
* **the file must be writable at start**: :meth:`EstopLatch.open` writes the current state
  (a missing directory, a read-only file system, a typo make the server refuse to start,
  with the path and the way out);
* **a missing file where one was written before is not "unlatched"**: the first start
  also writes a witness beside the file (``.<name>.created``); a later start that finds the
  witness but not the file starts **latched**;
* **an e-stop that cannot be written says so**: :meth:`EstopLatch.persist` returns
  ``False``, the ``estop`` answer carries ``persisted: false`` and a warning, the robot
  holds (latched in memory) and every later request retries the write.

An unreadable latch file starts the server latched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from robotrl.errors import ConfigError
from robotrl.real_robot.safety import SafetySupervisor
from robotrl.files import atomic_write


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (temporary sibling, fsync, ``os.replace``), mode 0600.

    Raises:
        OSError: the directory does not exist or is not writable (the temporary file is removed).
    """
    atomic_write(path, json.dumps(payload, sort_keys=True) + "\n", mode=0o600, make_dirs=False)  # never a typo's folder


def latch_slug(latch_id: str) -> str:
    """A file-name-safe, collision-free name for ``latch_id``: its safe characters (<= 64) + 8 hex of its SHA-256."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", latch_id).strip("._")[:64] or "robot"
    return f"{safe}-{hashlib.sha256(latch_id.encode()).hexdigest()[:8]}"


def state_dir() -> Path:
    """The user's robotrl state directory: ``$XDG_STATE_HOME/robotrl`` (default ``~/.local/state/robotrl``)."""
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "robotrl"


def default_latch_path(latch_id: str, key_file: str | os.PathLike | None) -> Path:
    """Where robot ``latch_id`` keeps its latch by default: ``<key_file>.<slug>.estop`` beside the key file,
    else (environment key) ``$XDG_STATE_HOME/robotrl/estop/<slug>.estop``; one file per robot either way.

    The directory is not created here: :meth:`EstopLatch.open` creates the state directory only.
    """
    slug = latch_slug(latch_id)
    if key_file:
        k = Path(key_file)
        return k.with_name(f"{k.name}.{slug}.estop")
    return state_dir() / "estop" / f"{slug}.estop"


def legacy_latch_paths(key_file: str | os.PathLike | None) -> list[Path]:
    """The shared latch files of robotrl before one-latch-per-robot (``<key_file>.estop``, the state directory's
    ``robot-server.estop``): a latched record there for this robot is adopted at start."""
    return [Path(str(key_file) + ".estop")] if key_file else [state_dir() / "robot-server.estop"]


class EstopLatch:
    """Keeps ``supervisor.estopped`` and the latch file in step.

    Args:
        supervisor: the robot's :class:`SafetySupervisor` (it holds the live latch).
        path: the latch file; ``None`` keeps the latch in memory only (tests).
        log: where operator-relevant events are written.
        latch_id: the robot the file belongs to (``robot_id``, or ``<robot name>@<configured endpoint>``).
        legacy: older shared latch files (:func:`legacy_latch_paths`) whose latched record for this robot is adopted.

    Attributes:
        info: the latch record while latched (``reason``, ``by``, ``since``, ``since_iso``...), else ``{}``.
        persisted: whether the file holds the live state (``False`` after a failed write until a retry succeeds).
        error: the last write error (text), or ``None``.
    """

    def __init__(self, supervisor: SafetySupervisor, path: str | os.PathLike | None, log: Callable[[str], None],
                 latch_id: str = "robot", legacy: list[Path] | None = None):
        self.supervisor, self._log = supervisor, log
        self.path = Path(path) if path is not None else None
        self.latch_id = str(latch_id)
        self.legacy = list(legacy or [])
        self.info: dict = {}
        self._on_disk = False
        self.persisted = True
        self.error: str | None = None
        self._pending: tuple[str, str, str | None, str] | None = None

    @property
    def witness(self) -> Path | None:
        """The file that records that this latch file was once written (``.<name>.created`` beside it)."""
        return None if self.path is None else self.path.with_name(f".{self.path.name}.created")

    def _latch(self, info: dict, why: str) -> None:
        self.supervisor.estop()
        self.info = info
        self._log(f"e-stop LATCHED {why} (since {info.get('since_iso', '?')}, reason {info.get('reason', '?')!r}); the "
                  "robot holds until an operator re-arms it (rearm request with an operator name, after checking the robot)")

    def _read(self, path: Path) -> tuple[dict, bool]:
        """``(record, latched)`` of an existing file: anything but an explicit ``"estopped": false`` is latched."""
        try:
            info = json.loads(path.read_text())
            if not isinstance(info, dict):
                raise ValueError("not a JSON object")
            return info, info.get("estopped") is not False
        except (OSError, ValueError) as exc:
            return {"reason": f"unreadable latch file ({type(exc).__name__})"}, True

    def open(self) -> None:
        """Read the latch at start and make sure it can be written; latches the supervisor when the file says
        (or cannot say otherwise) that the e-stop is latched.

        Raises:
            ConfigError: the file holds another robot's record, or the latch cannot be written (the message names
                the path and the way out).
        """
        if self.path is None:
            return
        if self.path.exists():
            info, latched = self._read(self.path)
            owner = info.get("latch_id")
            if owner is not None and owner != self.latch_id:
                raise ConfigError(f"e-stop latch file {self.path} belongs to robot {owner!r}, not to this robot "
                                  f"({self.latch_id!r}); robots sharing a key need their own latch: give each its own "
                                  "robot_id (the default latch file is named after it) or its own latch_file")
            if latched:
                self._latch(info, f"from {self.path}")
        elif self.witness is not None and self.witness.exists():
            now = time.time()
            self._latch({"estopped": True, "reason": "latch file missing", "by": "robot-server start", "since": now,
                         "since_iso": _iso(now)},
                        f"because the latch file {self.path} is MISSING although this robot wrote it before "
                        f"({self.witness} exists): a deleted latch is not read as unlatched")
        else:
            for old in self.legacy:
                if old.exists():
                    info, latched = self._read(old)
                    if latched and info.get("robot_id") in (None, self.latch_id):
                        self._latch(info, f"from the older shared latch file {old}")
                        break
        self._write_start()

    def _write_start(self) -> None:
        """Write the state read at start (and the witness); refuse to start when that fails."""
        assert self.path is not None and self.witness is not None
        latched = bool(self.supervisor.estopped)
        now = time.time()
        record = ({**self.info, "estopped": True} if latched else
                  {"estopped": False, "reason": "start", "by": "robot-server start", "started_at": now,
                   "started_at_iso": _iso(now)})
        record["latch_id"] = self.latch_id
        try:
            if self.path.parent == state_dir() / "estop":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.path, record)
            if not self.witness.exists():
                write_json_atomic(self.witness, {"latch_id": self.latch_id, "created": now, "created_iso": _iso(now)})
        except OSError as exc:
            raise ConfigError(f"cannot write the e-stop latch file {self.path} ({exc.strerror or exc}): an e-stop could "
                              "be lost in a crash, so the server does not start. Create the directory and make it "
                              "writable, or set latch_file=<a writable file on persistent storage>") from None
        self.info = record if latched else {}
        self._on_disk, self.persisted, self.error = latched, True, None

    def _record(self, reason: str, by: str, robot_id: str | None, epoch: str, latched: bool) -> dict:
        now = time.time()
        return {"estopped": latched, "latch_id": self.latch_id, "robot_id": robot_id, "reason": reason, "by": by,
                "epoch": epoch, "since" if latched else "rearmed_at": now,
                "since_iso" if latched else "rearmed_at_iso": _iso(now)}

    def _write(self, info: dict) -> bool:
        if self.path is None:
            return True
        try:
            write_json_atomic(self.path, info)
            return True
        except OSError as exc:
            self.error = f"{exc.strerror or exc}"
            return False

    def persist(self, reason: str, by: str, robot_id: str | None, epoch: str) -> bool:
        """Write the latch state after the supervisor latched (estop, NaN trip); returns whether it is on disk.

        A failed write is logged, counted in :attr:`persisted`, and retried by every :meth:`sync`; the robot stays
        latched in memory. Never raises.
        """
        latched = bool(self.supervisor.estopped)
        info = self._record(reason, by, robot_id, epoch, latched)
        self.info = info if latched else {}
        if self._write(info):
            self._on_disk, self.persisted, self.error, self._pending = latched, True, None, None
            return True
        first = self.persisted or self._pending is None
        self.persisted, self._pending = False, (reason, by, robot_id, epoch)
        if first:  # once per failure streak (every request retries)
            self._log(f"could NOT persist the e-stop latch state ({'latched' if latched else 're-armed'}) to {self.path}: "
                      f"{self.error}; the robot holds, latched in memory, and the write is retried with every request. "
                      "Fix the file's directory")
        return False

    def clear(self, by: str, robot_id: str | None, epoch: str) -> bool:
        """Re-arm: write the unlatched state first, then clear the supervisor's latch; returns whether it happened.

        When the write fails nothing is cleared (the robot stays held) and ``False`` is returned. Never raises.
        """
        info = self._record("rearm", by, robot_id, epoch, latched=False)
        if not self._write(info):
            self.persisted = False
            self._log(f"re-arm REFUSED: could not write {self.path} ({self.error}); the e-stop stays latched")
            return False
        self.supervisor.rearm()
        self.info, self._on_disk, self.persisted, self.error, self._pending = {}, False, True, None, None
        return True

    def sync(self, reason: str, by: str, robot_id: str | None, epoch: str) -> None:
        """Persist a latch the file does not hold yet (a NaN trip, or a write that failed before). Never raises."""
        if bool(self.supervisor.estopped) and not self._on_disk:
            fresh = self._pending is None
            if self.persist(*(self._pending or (reason, by, robot_id, epoch))) and fresh:
                self._log(f"e-stop latched ({reason}, by {by})")
            elif fresh:
                self._log(f"e-stop latched ({reason}, by {by}) in memory only")


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
