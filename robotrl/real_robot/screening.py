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
"""

from __future__ import annotations

import collections
import ipaddress

import zmq

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


def router_socket(ctx: zmq.Context, endpoint: str, max_request_bytes: int) -> zmq.Socket:
    """A ROUTER socket bound to ``endpoint`` that cuts frames above ``4 × max_request_bytes`` (bytes).

    Raises:
        zmq.ZMQError: the endpoint cannot be bound (in use, bad address).
    """
    s = ctx.socket(zmq.ROUTER)
    s.setsockopt(zmq.LINGER, 0)
    # transport ceiling: ZeroMQ drops the connection of a peer sending a larger frame before allocating it
    s.setsockopt(zmq.MAXMSGSIZE, 4 * max_request_bytes)
    try:
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
