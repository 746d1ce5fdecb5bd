"""The control lease: which one client may move the robot (``docs/protocol.md`` §10).

One client at a time holds the lease (``acquire``). ``step``, ``reset`` and ``rearm``
need it; anyone with the key may ``observe``, ask ``status`` or ``estop``. Any
authenticated request of the holder keeps it alive; it lapses after ``timeout_s`` of
its holder's silence, and then anyone may take it. Taking it from a live holder needs
``force: true`` (the server puts the robot in hold first). All times are
``time.monotonic()`` seconds.
"""

from __future__ import annotations

import time

LEASED = ("step", "reset", "rearm")  # the requests that need the lease


def error(kind: str, text: str) -> dict:
    """An error answer body (``ok: false``, ``kind``, ``error``; ``docs/protocol.md`` §9)."""
    return {"ok": False, "kind": kind, "error": text}


class Lease:
    """The lease state of one robot server.

    Args:
        timeout_s: silence of the holder after which the lease lapses (s, > 0).

    Attributes:
        holder: the holding client's ``src`` id, or ``None``.
        since: when it was taken; ``seen``: the holder's last authenticated request.
    """

    def __init__(self, timeout_s: float):
        self.timeout_s = float(timeout_s)
        self.holder: str | None = None
        self.since = self.seen = 0.0

    def holds(self, src: str) -> bool:
        """Whether ``src`` holds the lease (a lapsed lease is still its holder's until someone takes it)."""
        return self.holder is not None and self.holder == src

    def free(self) -> bool:
        """Whether anyone may take the lease without ``force`` (no holder, or it lapsed)."""
        return self.holder is None or time.monotonic() - self.seen > self.timeout_s

    def touch(self, src: str) -> None:
        """Note a request of ``src`` (keeps the lease alive if ``src`` holds it)."""
        if self.holds(src):
            self.seen = time.monotonic()

    def take(self, src: str) -> None:
        """Give the lease to ``src`` (the caller has put the robot in hold if it was held by another)."""
        self.holder, self.since = src, time.monotonic()
        self.seen = self.since

    def drop(self) -> None:
        """No one holds the lease."""
        self.holder = None

    def view(self) -> dict | None:
        """The lease as reported in ``status`` and ``acquire`` answers (s), or ``None``."""
        if self.holder is None:
            return None
        now = time.monotonic()
        return {"holder": self.holder, "held_s": now - self.since, "idle_s": now - self.seen, "timeout_s": self.timeout_s}

    def refusal(self, what: str) -> dict:
        """The ``no_lease`` answer to a ``what`` request of a client that does not hold the lease."""
        if self.free():
            return error("no_lease", f"{what} needs the control lease and you do not hold it; send acquire first")
        v = self.view() or {}
        return error("no_lease", f"{what} needs the control lease, held by client {v['holder']} for {v['held_s']:.1f} s; "
                                 "observe only, or take over deliberately with acquire force=true (the robot holds first)")

    def busy(self) -> dict:
        """The ``lease_held`` answer to an ``acquire`` without ``force`` while another client holds it."""
        v = self.view() or {}
        return error("lease_held", f"client {v['holder']} holds the control lease (active {v['idle_s']:.2f} s ago); "
                                   "observe only, or take over with acquire force=true")
