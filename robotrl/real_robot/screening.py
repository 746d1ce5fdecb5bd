"""The robot server's front door: where it listens, and which messages reach a request handler.

Cheapest checks first (``docs/protocol.md`` §5 and §13), so junk costs the control path
as little as possible:

1. ZeroMQ itself drops the connection of a peer that sends a frame larger than
   ``4 × max_request_bytes`` (socket option ``MAXMSGSIZE``, :func:`router_socket`),
   before the frame is allocated;
2. a connection that sent :data:`QUARANTINE_AFTER` unauthenticated or malformed
   messages is ignored from then on, without hashing (one dictionary look-up);
3. then :meth:`~robotrl.real_robot.protocol.Authenticator.open`: the frame count, the
   size (``max_request_bytes``), the MAC, and only then decoding and the envelope
   (direction, addressee, time stamp, sequence number).

Rejected messages are counted and never answered. ZeroMQ queues each connection
separately and serves them in turn, so junk on one connection does not queue up
ahead of another's commands.

Connections themselves are bounded by :class:`ConnectionGuard` (issue 45): ZeroMQ accepts
every TCP connection on its own, so a peer that opens many connections and never finishes
a frame (a *slowloris*) would otherwise fill the process's file-descriptor limit and lock
out everyone, the operator's e-stop included. The guard watches the socket's connections
(ZeroMQ socket monitor), marks a connection *authenticated* once a message on it passed
the MAC, and cuts (``shutdown``) unauthenticated connections that are older than
``unauth_timeout_s`` (an unfinished frame times out), beyond ``max_unauth_per_peer`` from
one address, or beyond ``max_unauth`` in total (the oldest first), and quarantined ones at
once. The total stays well below the descriptor limit: that reserve is what lets a new
connection (an operator's e-stop) be accepted and answered during such an attack.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import resource
import socket
import time
from collections.abc import Callable

import zmq
from zmq.utils.monitor import parse_monitor_message

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ProtocolError
from robotrl.real_robot.protocol import Authenticator

QUARANTINE_AFTER = 16  # unauthenticated/malformed messages after which a connection is ignored
_QUARANTINE_REASONS = ("malformed", "oversized", "unauthenticated")


def check_endpoint(endpoint: str, allow_remote: bool = False) -> str:
    """Validate a ``tcp://host:port`` endpoint; only loopback unless ``allow_remote``.

    Raises:
        ConfigError: not ``tcp://host:port``, or a non-loopback host without ``allow_remote``.
    """
    if not endpoint.startswith("tcp://") or ":" not in endpoint[6:]:
        raise ConfigError(f"endpoint must look like tcp://127.0.0.1:5555 (port 0 = any free port), got {endpoint!r}")
    host = endpoint[6:].rsplit(":", 1)[0].strip("[]")
    try:
        loop = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loop = False
    if not loop and not allow_remote:
        raise ConfigError(f"refusing to bind {endpoint}: the robot server binds loopback only unless allow_remote=true "
                          "(then also use a strong key and a trusted network)")
    return endpoint


def router_socket(ctx: zmq.Context, endpoint: str, max_request_bytes: int,
                  before_bind: Callable[[zmq.Socket], None] | None = None) -> zmq.Socket:
    """A ROUTER socket bound to ``endpoint`` that cuts frames above ``4 × max_request_bytes`` (bytes) and ZMTP
    handshakes not finished within 2 s; ``before_bind(socket)`` runs before it binds (a :class:`ConnectionGuard`).

    Raises:
        zmq.ZMQError: the endpoint cannot be bound (in use, bad address).
    """
    s = ctx.socket(zmq.ROUTER)
    s.setsockopt(zmq.LINGER, 0)
    # transport ceiling: ZeroMQ drops the connection of a peer sending a larger frame before allocating it
    s.setsockopt(zmq.MAXMSGSIZE, 4 * max_request_bytes)
    s.setsockopt(zmq.HANDSHAKE_IVL, 2000)  # a ZMTP handshake not finished in 2 s is dropped (default 30 s)
    try:
        if before_bind is not None:
            before_bind(s)
        s.bind(endpoint)
    except zmq.ZMQError:
        s.close(0)
        raise
    return s


class Screen:
    """Per-connection quarantine in front of an :class:`Authenticator`.

    Args:
        auth: the server's :class:`Authenticator` (its ``rejected`` counters count each rejection).
        quarantine_after: bad messages after which a connection is ignored.
        remember: connections whose record is kept (the oldest forgotten first).

    Attributes:
        quarantined: messages dropped unhashed because their connection is quarantined.
    """

    def __init__(self, auth: Authenticator, quarantine_after: int = QUARANTINE_AFTER, remember: int = 4096):
        self.auth, self.quarantine_after, self.remember = auth, quarantine_after, remember
        self.quarantined = 0
        self._bad: collections.OrderedDict[bytes, int] = collections.OrderedDict()

    def strike(self, ident: bytes, reason: str) -> None:
        """Count a bad message of connection ``ident`` found before the :class:`Authenticator` (its reason is
        counted by the caller)."""
        if reason in _QUARANTINE_REASONS:
            self._bad[ident] = self._bad.get(ident, 0) + 1
            self._bad.move_to_end(ident)
            while len(self._bad) > self.remember:
                self._bad.popitem(last=False)

    def is_quarantined(self, ident: bytes) -> bool:
        """Whether connection ``ident`` sent :attr:`quarantine_after` bad messages (it is then ignored)."""
        return self._bad.get(ident, 0) >= self.quarantine_after

    def open(self, frames: list) -> dict | None:
        """The authenticated message of ROUTER frames ``[routing id, payload, mac]``, or ``None``.

        ``None`` (counted in :attr:`quarantined` or ``auth.rejected``, never answered) for
        a quarantined connection or any message the :class:`Authenticator` rejects. Never raises.
        """
        ident = frames[0]
        bad = self._bad.get(ident, 0)
        if bad >= self.quarantine_after:
            self.quarantined += 1
            return None
        try:
            return self.auth.open(frames[1:])
        except ProtocolError as exc:
            if getattr(exc, "reason", "") in _QUARANTINE_REASONS:
                self._bad[ident] = bad + 1
                self._bad.move_to_end(ident)
                while len(self._bad) > self.remember:
                    self._bad.popitem(last=False)
            return None


def unauth_budget(fd_limit: int | None = None) -> tuple[int, int]:
    """Default ``(max_unauth, max_unauth_per_peer)`` for a process whose descriptor limit is ``fd_limit``
    (default: this process's soft ``RLIMIT_NOFILE``): at most half of what is left after 64 descriptors kept for
    the process itself (files, ZeroMQ's own), at most 256; a quarter of that per peer address (at least 4).
    The other half is the reserve for authenticated clients and new connections."""
    if fd_limit is None:
        fd_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        fd_limit = 1 << 20 if fd_limit == resource.RLIM_INFINITY else fd_limit
    total = max(8, min(256, (int(fd_limit) - 64) // 2))
    return total, max(4, total // 4)


class ConnectionGuard:
    """Bounds the connections of a bound ROUTER socket that have not sent an authenticated message.

    Create it before the socket binds (the monitor must see every connection), call :meth:`events` when
    :attr:`monitor` is readable, :meth:`authenticated` with a message's source descriptor (``zmq.SRCFD``) once it
    passed the MAC, :meth:`cut` for a quarantined connection, and :meth:`sweep` every few milliseconds.

    Cutting is ``shutdown(SHUT_RDWR)`` on a duplicate of the connection's descriptor (ZeroMQ then sees the
    connection end and closes it itself); a descriptor is only cut while it is still a TCP socket on the
    listening port.

    Args:
        sock: the ROUTER socket, not yet bound.
        max_unauth: unauthenticated connections kept in total (the oldest beyond are cut); default
            :func:`unauth_budget`.
        max_unauth_per_peer: unauthenticated connections kept per peer IP address (the oldest beyond are cut).
        unauth_timeout_s: an unauthenticated connection older than this (s) is cut (an unfinished frame, a
            silent connection).
        log: where cut connections are reported (rate-limited).

    Attributes:
        cut_count: ``Counter`` of cut connections per reason (``timeout``, ``total``, ``peer``, ``quarantine``).
        live: connections currently tracked; ``unauth``: of those, not authenticated.
    """

    def __init__(self, sock: zmq.Socket, *, max_unauth: int | None = None, max_unauth_per_peer: int | None = None,
                 unauth_timeout_s: float = 2.0, log: Callable[[str], None] | None = None):
        self.max_unauth, self.max_unauth_per_peer, self.unauth_timeout_s = self.check(
            max_unauth, max_unauth_per_peer, unauth_timeout_s)
        self.log = log
        self.monitor = sock.get_monitor_socket(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)
        self.port: int | None = None
        self._conns: collections.OrderedDict[int, list] = collections.OrderedDict()  # fd -> [accepted_at, peer, auth, cut]
        self.cut_count: collections.Counter = collections.Counter()
        self._last_log, self._logged = 0.0, 0
        self._sock = sock

    @staticmethod
    def check(max_unauth: int | None = None, max_unauth_per_peer: int | None = None,
              unauth_timeout_s: float = 2.0) -> tuple[int, int, float]:
        """The effective ``(max_unauth, max_unauth_per_peer, unauth_timeout_s)`` (defaults filled in).

        Raises:
            ConfigError: a limit below 1 or a timeout <= 0.
        """
        total, peer = unauth_budget()
        m = int(max_unauth if max_unauth is not None else total)
        p = int(max_unauth_per_peer if max_unauth_per_peer is not None else min(peer, m))
        if not (m >= 1 and p >= 1 and float(unauth_timeout_s) > 0):
            raise ConfigError(f"connection limits must be >= 1 and the timeout > 0 s, got max_unauth={max_unauth}, "
                              f"max_unauth_per_peer={max_unauth_per_peer}, unauth_timeout_s={unauth_timeout_s}")
        return m, p, float(unauth_timeout_s)

    def bound(self, endpoint: str) -> None:
        """Note the bound endpoint (its port tells the socket's connections apart from anything else)."""
        self.port = int(endpoint.rsplit(":", 1)[1])

    @property
    def live(self) -> int:
        return len(self._conns)

    @property
    def unauth(self) -> int:
        return sum(1 for c in self._conns.values() if not c[2])

    def events(self) -> None:
        """Read every pending monitor event (accepted / disconnected connections). Never raises."""
        while True:
            try:
                ev = parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                return
            except Exception:  # noqa: BLE001 (a malformed event: skip it)
                continue
            fd, kind = int(ev["value"]), ev["event"]
            if kind == zmq.EVENT_ACCEPTED:
                self._conns.pop(fd, None)  # a reused descriptor: the old connection is gone
                self._conns[fd] = [time.monotonic(), self._peer(fd), False, False]
            else:
                self._conns.pop(fd, None)

    def _peer(self, fd: int) -> str:
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                return str(s.getpeername()[0])
        except (OSError, IndexError, TypeError):
            return "?"

    def authenticated(self, fd: int) -> bool:
        """Mark the connection of descriptor ``fd`` as having sent an authenticated message (never cut); returns
        whether it is marked. The monitor reports connections asynchronously, so a connection's first message can
        arrive before its ``ACCEPTED`` event: the pending events are read first then (otherwise the mark would be
        lost and the authenticated connection cut as unauthenticated after ``unauth_timeout_s``)."""
        c = self._conns.get(int(fd))
        if c is None:
            self.events()
            c = self._conns.get(int(fd))
        if c is None:
            return False
        c[2] = True
        return True

    def cut(self, fd: int, reason: str) -> None:
        """Cut connection ``fd`` now (a quarantined connection); an authenticated one is kept."""
        c = self._conns.get(int(fd))
        if c is not None and not c[2] and not c[3]:
            self._cut(int(fd), c, reason)

    def _cut(self, fd: int, c: list, reason: str) -> None:
        c[3] = True
        self.cut_count[reason] += 1
        try:
            s = socket.socket(fileno=os.dup(fd))
        except OSError:
            return
        try:
            if s.type == socket.SOCK_STREAM and (self.port is None or s.getsockname()[1] == self.port):
                s.shutdown(socket.SHUT_RDWR)
        except (OSError, IndexError, TypeError):
            pass
        finally:
            s.close()

    def sweep(self) -> None:
        """Read pending events, then cut unauthenticated connections that are too old, or too many per peer or in
        total (the oldest first). Never raises."""
        self.events()
        now = time.monotonic()
        keep_total = self.max_unauth
        per_peer: collections.Counter = collections.Counter()
        pending = [(fd, c) for fd, c in self._conns.items() if not c[2]]
        total = sum(1 for _, c in pending if not c[3])
        for fd, c in pending:  # oldest first
            if c[3]:
                if now - c[0] > 10 * self.unauth_timeout_s + 10:  # cut long ago and never reported closed: forget
                    self._conns.pop(fd, None)
                continue
            if now - c[0] > self.unauth_timeout_s:
                self._cut(fd, c, "timeout")
            elif total > keep_total:
                self._cut(fd, c, "total")
            else:
                per_peer[c[1]] += 1
                continue
            total -= 1
        if any(n > self.max_unauth_per_peer for n in per_peer.values()):
            over = {p: n - self.max_unauth_per_peer for p, n in per_peer.items() if n > self.max_unauth_per_peer}
            for fd, c in pending:
                if not c[3] and over.get(c[1], 0) > 0:
                    over[c[1]] -= 1
                    self._cut(fd, c, "peer")
        cuts = sum(self.cut_count.values())
        if self.log is not None and cuts > self._logged and now - self._last_log > 10:
            self._last_log, self._logged = now, cuts
            self.log(f"cut unauthenticated connections so far: {dict(self.cut_count)} (live {self.live})")

    def status(self) -> dict:
        """Counters for the server's status: live / unauthenticated connections, cuts per reason, the limits."""
        return {"live": self.live, "unauth": self.unauth, "cut": dict(self.cut_count), "max_unauth": self.max_unauth,
                "max_unauth_per_peer": self.max_unauth_per_peer, "unauth_timeout_s": self.unauth_timeout_s}

    def close(self) -> None:
        """Stop monitoring (call before closing the socket)."""
        try:
            self._sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(0)
