"""The policy side's link to a robot server: signed requests with deadlines, leases and reconnection.

:class:`RobotClient` uses a ZeroMQ DEALER socket. Every request is signed
(:class:`~robotrl.real_robot.protocol.Authenticator`), names the robot (``dst``, learned
from ``hello`` or given as ``robot_id``) and the server instance (``epoch``), and waits
at most its deadline for the answer, whose MAC, direction, addressee and ``re`` (the
request's ``seq``) are checked; answers to earlier, timed-out requests are discarded.

* Handshake: the first request says ``hello`` (learns robot id, epoch, limits). When
  the server answers ``kind: "epoch"`` (it restarted), the client says ``hello`` again,
  re-acquires the lease if it held one, and retries the request once.
* Lease: :meth:`RobotClient.reset` and :meth:`RobotClient.step` acquire the control
  lease when the client does not hold it (never by force); :meth:`RobotClient.acquire`
  with ``force=True`` is the explicit takeover.
* After a timeout the socket is closed and reopened (the "lazy pirate" pattern of the
  ZeroMQ guide); idempotent requests are retried, ``step`` never is (a late command is
  worse than a missed one). When the server stays silent for ``link_timeout_s`` the
  client raises :class:`RobotConnectionError` saying what it knows: nothing listening,
  the server closed the connection (ended/crashed), or the server accepts connections
  but does not answer (most likely a different key).
"""

from __future__ import annotations

import getpass
import socket
import time

import numpy as np
import zmq
from zmq.utils.monitor import recv_monitor_message

from robotrl.real_robot.interface import Observation, ProtocolError, RobotConnectionError, RobotSpec
from robotrl.real_robot.protocol import Authenticator, Limits, camera_limits, check_camera_limits, key_fingerprint

_IDEMPOTENT = {"hello", "observe", "status", "heartbeat", "estop", "rearm", "acquire"}
_WITH_OBS = {"reset", "step", "observe"}  # answers that carry an observation (camera frames included)
_MONITOR_EVENTS = zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CONNECT_RETRIED | zmq.EVENT_CONNECT_DELAYED


class DeadlineExceeded(RobotConnectionError):
    """One request got no answer before its deadline (the link may still recover)."""


class RobotCommandError(RobotConnectionError):
    """The server answered with an error.

    ``kind``: ``bad_request``, ``expired``, ``clock``, ``estopped``, ``no_lease``,
    ``lease_held``, ``epoch``, ``internal``, ``robot_crashed`` (see ``docs/protocol.md``).
    """

    def __init__(self, kind: str, text: str):
        super().__init__(f"robot server: {kind}: {text}")
        self.kind = kind


def body_obs(b: dict) -> Observation:
    """Message body → :class:`Observation`."""
    images = b.get("images")
    return Observation(np.asarray(b["state"], np.float32), float(b["ts"]), float(b["reward"]), bool(b["terminated"]),
                       bool(b["truncated"]), bool(b["success"]),
                       {str(k): np.asarray(v, np.uint8) for k, v in images.items()} if images else None)


class RobotClient:
    """Authenticated request/reply link to a :class:`~robotrl.real_robot.server.RobotServer`.

    Args:
        endpoint: ``tcp://127.0.0.1:<port>``.
        key: the shared bridge key.
        timeout_s: default deadline of one request (s).
        link_timeout_s: total silence after which the server counts as gone (s).
        limits: message :class:`Limits`. A robot with cameras sends its frames in every
            observation: raise them with :meth:`use_limits` and
            :func:`~robotrl.real_robot.protocol.camera_limits` of ``spec.cameras`` after
            :meth:`hello` (otherwise ``reset``/``step``/``observe`` raise ``ConfigError``
            naming ``camera_limits`` before sending anything).
        robot_id: the robot this client must talk to; ``hello`` fails when the endpoint
            serves another one (``None``: accept the id the server announces).

    Attributes:
        robot_id: the server's robot id (after the handshake); ``epoch``: its instance id.
        lease_held: whether this client holds the control lease (as far as it knows).
        timeouts: requests that missed their deadline; ``reconnects``: socket reopenings;
        handshakes: ``hello`` exchanges (one more per detected server restart).
    """

    def __init__(self, endpoint: str, key: bytes, *, timeout_s: float = 0.5, link_timeout_s: float = 2.0,
                 limits: Limits = Limits(), robot_id: str | None = None):
        self.endpoint, self.timeout_s, self.link_timeout_s = endpoint, float(timeout_s), float(link_timeout_s)
        self.auth = Authenticator(key, limits=limits, role="client")
        self._expected_id = robot_id
        self.robot_id: str | None = None
        self.epoch: str | None = None
        self.spec: RobotSpec | None = None
        self.server_limits: dict = {}
        self.lease_held = False
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._mon: zmq.Socket | None = None
        self._connected = False
        self._ever_connected = False
        self._disconnected_at: float | None = None
        self._waiting_since: float | None = None
        self.timeouts = 0
        self.reconnects = 0
        self.handshakes = 0
        self._connect()

    # ---- socket ----------------------------------------------------------------------------
    def _connect(self) -> None:
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, 4 * self.auth.limits.max_bytes + 1024)
        self._mon = self._sock.get_monitor_socket(_MONITOR_EVENTS)
        self._poller = zmq.Poller()  # one per socket: Socket.poll() builds a new Poller on every call
        self._poller.register(self._sock, zmq.POLLIN)
        self._connected = False
        self._sock.connect(self.endpoint)

    def _drain_monitor(self) -> None:
        while self._mon is not None and self._mon.poll(0):
            try:
                ev = recv_monitor_message(self._mon, zmq.NOBLOCK)["event"]
            except zmq.ZMQError:
                return
            if ev == zmq.EVENT_CONNECTED:
                self._connected = self._ever_connected = True
            elif ev == zmq.EVENT_DISCONNECTED:
                self._connected, self._disconnected_at = False, time.monotonic()

    def use_limits(self, limits: Limits) -> None:
        """Receive (and send) under ``limits`` from now on, e.g. ``camera_limits(spec.cameras)`` for a robot
        with cameras; the socket is reopened with the new size cap (sequence numbers and the handshake are kept)."""
        self.auth.set_limits(limits)
        self._drain_monitor()
        self._close_socket()
        self._connect()

    def use_camera_limits(self) -> None:
        """After :meth:`hello`: receive the robot's camera frames, i.e. :meth:`use_limits` with
        :func:`~robotrl.real_robot.protocol.camera_limits` of ``spec.cameras`` (room for a state of
        ``max(1024, Do)`` floats); nothing for a robot without cameras."""
        if self.spec is not None and self.spec.cameras:
            self.use_limits(camera_limits(self.spec.cameras, self.auth.limits, state_dim=max(1024, self.spec.observation.dim)))

    def reconnect(self) -> None:
        """Close and reopen the socket (drops queued messages)."""
        self._drain_monitor()
        self._close_socket()
        self._connect()
        self.reconnects += 1

    def _close_socket(self) -> None:
        if self._sock is not None:
            try:
                self._sock.disable_monitor()
            except zmq.ZMQError:
                pass
            self._sock.close(0)
            self._sock = None
        if self._mon is not None:
            self._mon.close(0)
            self._mon = None

    def close(self) -> None:
        """Release the lease if held (one short try) and close the socket."""
        if self._sock is not None and self.lease_held and self.epoch is not None:
            try:
                frames, _ = self.auth.seal("release", {}, dst=self.robot_id or "", epoch=self.epoch)
                self._sock.send_multipart(frames, zmq.NOBLOCK)
                self._sock.poll(200)
            except zmq.ZMQError:
                pass
            self.lease_held = False
        self._close_socket()

    def __enter__(self) -> RobotClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- requests ------------------------------------------------------------------------------
    def link_diagnosis(self) -> str:
        """What is known about a server that stopped answering: it closed the connection (its process
        most likely ended), it still accepts connections but answers nothing valid (keys, clock,
        robot id, or hung), or nothing accepts connections. Same text as the error a request raises
        after ``link_timeout_s`` of silence."""
        since = self._waiting_since
        return str(self._silence_error(0.0 if since is None else time.monotonic() - since))

    def _silence_error(self, silent: float) -> RobotConnectionError:
        self._drain_monitor()
        where = f"robot server at {self.endpoint}"
        if self._connected:
            text = (f"the {where} accepts connections but sent no valid answer in {silent:.2f} s. Most likely the keys "
                    f"differ (this client's key fingerprint is {key_fingerprint(self.auth.key)}; the server prints its "
                    "fingerprint at start), the clocks differ by more than max_skew_s, or the robot_id does not match; "
                    "otherwise the server is hung or overloaded: check its log and its status counters (rejected)")
        elif self._ever_connected:
            ago = "" if self._disconnected_at is None else f" {time.monotonic() - self._disconnected_at:.2f} s ago"
            text = (f"the {where} closed the connection{ago} and accepts no new one ({silent:.2f} s without an answer): its "
                    "process has most likely ended or crashed. Check its log and restart it. The bridge's watchdog runs "
                    "inside that server, so without it the robot is held only by its own controller: check the robot")
        else:
            text = (f"nothing accepts connections at {self.endpoint} ({silent:.2f} s without an answer): is the robot "
                    "server running, and is the endpoint (host, port) right?")
        return RobotConnectionError(text)

    def request(self, type_: str, body: dict | None = None, timeout_s: float | None = None) -> dict:
        """Send one request and return the answer body (handshaking first when needed).

        Raises:
            DeadlineExceeded: no valid answer in time (``step``), or after retries.
            RobotConnectionError: the server was silent for ``link_timeout_s`` (the message
                says what is known: nothing listening, closed, or silent with a connection).
            RobotCommandError: the server answered ``ok: false``.
            robotrl.errors.ConfigError: an observation request (``reset``, ``step``, ``observe``) to a robot with
                cameras while this client's limits are too small for its frames (raised before
                sending; the message names ``camera_limits``).
        """
        if type_ != "hello" and self.epoch is None:
            self._handshake()
        if type_ in _WITH_OBS:
            self._check_frames_fit()
        ans = self._exchange(type_, body, timeout_s)
        if not ans.get("ok", False) and ans.get("kind") == "epoch" and type_ != "hello":
            self._handshake()  # the server restarted: new epoch; re-acquire what we held, retry once
            ans = self._exchange(type_, body, timeout_s)
        if not ans.get("ok", False):
            kind = str(ans.get("kind", "error"))
            if kind in ("no_lease", "lease_held") and type_ != "acquire":
                self.lease_held = False
            raise RobotCommandError(kind, str(ans.get("error", "")))
        return ans

    def _exchange(self, type_: str, body: dict | None, timeout_s: float | None) -> dict:
        timeout = self.timeout_s if timeout_s is None else float(timeout_s)
        # hello is unaddressed: its answer names the robot, which is then checked against robot_id (a clear
        # wrong_robot error; an addressed hello to another robot would get silence). docs/protocol.md section 8
        dst = "" if type_ == "hello" else (self.robot_id or "")
        while True:
            frames, seq = self.auth.seal(type_, body, dst=dst, epoch=self.epoch or "")
            self._sock.send_multipart(frames)
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
            ans = self._await(seq, timeout, type_)
            if ans is not None:
                return ans
            self.timeouts += 1
            silent = time.monotonic() - self._waiting_since
            if silent > self.link_timeout_s:
                err = self._silence_error(silent)
                self.reconnect()
                raise err
            self.reconnect()
            if type_ not in _IDEMPOTENT:
                raise DeadlineExceeded(f"no answer to {type_} within {timeout * 1000:.0f} ms")

    def _await(self, seq: int, timeout: float, type_: str) -> dict | None:
        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            if left <= 0 or not self._poller.poll(max(1, int(left * 1000))):
                return None
            frames = self._sock.recv_multipart()
            try:
                msg = self.auth.open(frames)
            except ProtocolError:
                continue  # counted in self.auth.rejected
            if type_ != "hello" and self.robot_id is not None and msg["src"] != self.robot_id:
                continue  # another robot's answer (cannot happen on one connection; belt and braces)
            self._waiting_since = None  # the server answers (silence counts from the first unanswered request)
            if msg["body"].get("re") == seq:
                return msg["body"]

    def _check_frames_fit(self) -> None:
        """Raise ``ConfigError`` (naming ``camera_limits``) when this client's limits cannot receive the robot's
        camera frames: such answers would be dropped as oversized and look like a silent server."""
        if self.epoch is None:
            self._handshake()
        if self.spec is not None and self.spec.cameras:
            check_camera_limits(self.spec.cameras, self.auth.limits, f"client of robot {self.robot_id}")

    def _handshake(self) -> None:
        was_holding = self.lease_held
        self.lease_held = False
        self.hello()
        if was_holding:
            self.acquire()

    # ---- typed helpers -------------------------------------------------------------------
    def hello(self) -> RobotSpec:
        """Handshake: the robot's :class:`RobotSpec`; learns its id, epoch and limits.

        Raises:
            RobotConnectionError: no answer (a wrong key gets none; the message says what to check).
            RobotCommandError: the endpoint serves another robot than ``robot_id``.
        """
        ans = self.request("hello")
        rid = str(ans["robot_id"])
        if self._expected_id is not None and rid != self._expected_id:
            raise RobotCommandError("wrong_robot", f"{self.endpoint} serves robot {rid!r}, not {self._expected_id!r}; "
                                                   "check the endpoint")
        if self.epoch is not None and ans["epoch"] != self.epoch:
            self.lease_held = False
        self.robot_id, self.epoch = rid, str(ans["epoch"])
        self.server_limits = dict(ans.get("limits") or {})
        self.spec = RobotSpec.from_dict(ans["spec"])
        self.handshakes += 1
        return self.spec

    def acquire(self, force: bool = False) -> dict:
        """Take the control lease (``force=True``: take it over from a live holder; the robot holds first).

        Raises:
            RobotCommandError: ``lease_held`` when another client holds it and ``force`` is false.
        """
        ans = self.request("acquire", {"force": bool(force)})
        self.lease_held = True
        return ans["lease"]

    def release(self) -> None:
        """Give the control lease back (the robot holds)."""
        self.request("release")
        self.lease_held = False

    def reset(self, seed: int | None = None, timeout_s: float = 5.0) -> Observation:
        """Start an episode (acquires the lease if needed). Raises :class:`RobotCommandError` (``estopped``...),
        ``ConfigError`` (limits too small for the robot's camera frames, see :meth:`use_limits`)."""
        self._check_frames_fit()  # before taking the lease
        if not self.lease_held:
            self.acquire()
        return body_obs(self.request("reset", {"seed": seed}, timeout_s=timeout_s)["obs"])

    def observe(self) -> Observation:
        """The latest :class:`Observation` (no lease needed; camera frames in ``images``).
        Raises ``ConfigError`` when the limits are too small for the robot's frames (see :meth:`use_limits`)."""
        return body_obs(self.request("observe")["obs"])

    def step(self, action: np.ndarray | None, deadline: float | None = None, timeout_s: float | None = None) -> dict:
        """Send one command (``None`` = hold); answer with ``applied (Da,)``, ``flags``, ``held``, ``obs``.

        Args:
            action: ``(Da,)`` in robot units, or ``None`` to hold.
            deadline: wall-clock time (``time.time()`` s) after which the robot must not run
                it; default now + the server's step horizon (``deadline_periods`` periods).
            timeout_s: how long to wait for the answer (s).

        Raises:
            RobotCommandError: ``expired`` (too late, not applied), ``no_lease``, ``bad_request``...
            DeadlineExceeded: no answer in time (the robot's watchdog holds if none follows).
            robotrl.errors.ConfigError: limits too small for the robot's camera frames (see :meth:`use_limits`).
        """
        self._check_frames_fit()  # before taking the lease
        if not self.lease_held:
            self.acquire()
        if deadline is None:
            deadline = time.time() + float(self.server_limits.get("deadline_s", 0.02))
        body = {"action": None if action is None else np.asarray(action, np.float32), "deadline": float(deadline)}
        ans = self.request("step", body, timeout_s)
        ans["obs"] = body_obs(ans["obs"])
        return ans

    def status(self) -> dict:
        """The server's status counters (no lease needed)."""
        return self.request("status")["status"]

    def estop(self, reason: str | None = None) -> dict:
        """Latch the e-stop (any client may); returns the status."""
        return self.request("estop", {"reason": reason} if reason else {}, timeout_s=2.0)["status"]

    def rearm(self, operator: str | None = None) -> dict:
        """Clear a latched e-stop: a deliberate, logged operator act (needs the lease).

        Args:
            operator: who re-arms (default ``user@host``); written to the server log and latch file.
        """
        if not self.lease_held:
            self.acquire()
        op = operator or f"{getpass.getuser()}@{socket.gethostname()}"
        return self.request("rearm", {"operator": op[:64]}, timeout_s=2.0)["status"]
