"""The policy side's link to a robot server: signed requests with deadlines and reconnection.

:class:`RobotClient` uses a ZeroMQ DEALER socket. Every request is signed
(:class:`~robotrl.real_robot.protocol.Authenticator`) and waits at most its deadline
for the answer, whose MAC and ``re`` (the request's ``seq``) are checked; answers to
earlier, timed-out requests are discarded. After a timeout the socket is closed and
reopened (the "lazy pirate" pattern of the ZeroMQ guide); idempotent requests
(``hello``, ``observe``, ``status``, ``heartbeat``) are retried, ``step`` never is (a
late command is worse than a missed one). When the server stays silent for
``link_timeout_s`` the client raises :class:`RobotConnectionError`.
"""

from __future__ import annotations

import time

import numpy as np
import zmq

from robotrl.real_robot.interface import Observation, ProtocolError, RobotConnectionError, RobotSpec
from robotrl.real_robot.protocol import Authenticator, Limits

_IDEMPOTENT = {"hello", "observe", "status", "heartbeat", "estop", "rearm"}


class DeadlineExceeded(RobotConnectionError):
    """One request got no answer before its deadline (the link may still recover)."""


class RobotCommandError(RobotConnectionError):
    """The server answered with an error (``kind``: ``robot_crashed``, ``bad_request``, ``expired``)."""

    def __init__(self, kind: str, text: str):
        super().__init__(f"robot server: {kind}: {text}")
        self.kind = kind


def body_obs(b: dict) -> Observation:
    """Message body → :class:`Observation`."""
    return Observation(np.asarray(b["state"], np.float32), float(b["ts"]), float(b["reward"]), bool(b["terminated"]),
                       bool(b["truncated"]), bool(b["success"]))


class RobotClient:
    """Authenticated request/reply link to a :class:`~robotrl.real_robot.server.RobotServer`.

    Args:
        endpoint: ``tcp://127.0.0.1:<port>``.
        key: the shared bridge key.
        timeout_s: default deadline of one request (s).
        link_timeout_s: total silence after which the server counts as gone (s).
        limits: message :class:`Limits`.

    Attributes:
        timeouts: requests that missed their deadline; ``reconnects``: socket reopenings.
    """

    def __init__(self, endpoint: str, key: bytes, *, timeout_s: float = 0.5, link_timeout_s: float = 2.0,
                 limits: Limits = Limits()):
        self.endpoint, self.timeout_s, self.link_timeout_s = endpoint, float(timeout_s), float(link_timeout_s)
        self.auth = Authenticator(key, limits=limits)
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._last_answer = time.monotonic()
        self.timeouts = 0
        self.reconnects = 0
        self._connect()

    def _connect(self) -> None:
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, 4 * self.auth.limits.max_bytes + 1024)
        self._sock.connect(self.endpoint)

    def reconnect(self) -> None:
        """Close and reopen the socket (drops queued messages)."""
        self.close()
        self._connect()
        self.reconnects += 1

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self) -> RobotClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request(self, type_: str, body: dict | None = None, timeout_s: float | None = None) -> dict:
        """Send one request and return the answer body.

        Raises:
            DeadlineExceeded: no valid answer in time (``step``), or after retries.
            RobotConnectionError: the server was silent for ``link_timeout_s``.
            RobotCommandError: the server answered ``ok: false``.
        """
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        while True:
            frames, seq = self.auth.seal(type_, body)
            self._sock.send_multipart(frames)
            ans = self._await(seq, timeout)
            if ans is not None:
                break
            self.timeouts += 1
            self.reconnect()
            silent = time.monotonic() - self._last_answer
            if silent > self.link_timeout_s:
                raise RobotConnectionError(f"robot server at {self.endpoint} stopped answering ({silent:.2f} s without a reply); "
                                           "is it running? check its log, then restart it")
            if type_ not in _IDEMPOTENT:
                raise DeadlineExceeded(f"no answer to {type_} within {timeout * 1000:.0f} ms")
        if not ans.get("ok", False):
            raise RobotCommandError(str(ans.get("kind", "error")), str(ans.get("error", "")))
        return ans

    def _await(self, seq: int, timeout: float) -> dict | None:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self._sock.poll(max(1, int(left * 1000))):
                return None
            frames = self._sock.recv_multipart()
            try:
                msg = self.auth.open(frames)
            except ProtocolError:
                continue  # counted in self.auth.rejected
            self._last_answer = time.monotonic()
            if msg["body"].get("re") == seq:
                return msg["body"]

    # ---- typed helpers -------------------------------------------------------------------
    def hello(self) -> RobotSpec:
        """The robot's :class:`RobotSpec` (also checks the key: a wrong key gets no answer)."""
        return RobotSpec.from_dict(self.request("hello")["spec"])

    def reset(self, seed: int | None = None, timeout_s: float = 5.0) -> Observation:
        return body_obs(self.request("reset", {"seed": seed}, timeout_s=timeout_s)["obs"])

    def observe(self) -> Observation:
        return body_obs(self.request("observe")["obs"])

    def step(self, action: np.ndarray | None, deadline: float | None = None, timeout_s: float | None = None) -> dict:
        """Send one command (``None`` = hold); answer with ``applied (Da,)``, ``flags``, ``held``, ``obs``."""
        body = {"action": None if action is None else np.asarray(action, np.float32), "deadline": deadline}
        ans = self.request("step", body, timeout_s)
        ans["obs"] = body_obs(ans["obs"])
        return ans

    def status(self) -> dict:
        return self.request("status")["status"]

    def estop(self) -> dict:
        return self.request("estop", timeout_s=2.0)["status"]

    def rearm(self) -> dict:
        return self.request("rearm", timeout_s=2.0)["status"]
