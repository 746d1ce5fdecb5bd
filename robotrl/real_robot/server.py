"""The robot server: owns the robot and its safety supervisor, serves authenticated commands.

One process per robot (``robotrl robot-server robot=sim``). It binds a ZeroMQ ROUTER
socket (loopback ``tcp://127.0.0.1:<port>`` unless ``allow_remote``; default port
5555) and serves one request at a time in one loop. The wire protocol (framing, MAC,
every request and reply) is specified in ``docs/protocol.md``; in short:

* cheap checks first (:mod:`~robotrl.real_robot.screening`): frames larger than
  ``4 × max_request_bytes`` are cut by ZeroMQ itself (the connection is dropped); then
  the connection's record (a connection that sent 16 unauthenticated or malformed
  messages is ignored from then on, without hashing), the frame count, the size
  (``max_request_bytes``), and only then the MAC. Rejected messages are counted and
  never answered. ZeroMQ queues each connection separately and serves them in turn,
  so junk on one connection does not queue up ahead of another's commands;
* connections that have not delivered an authenticated message are bounded per peer
  address and in total and cut after ``unauth_timeout_s``
  (:class:`~robotrl.real_robot.screening.ConnectionGuard`), so a slowloris cannot
  exhaust the descriptor limit: a new connection's e-stop is always answered;
* every request names the robot (``dst`` = :attr:`RobotServer.robot_id`) and the server
  instance (``epoch``, random per start); a request for another epoch is answered
  ``kind: "epoch"`` (the client says ``hello`` again);
* one client at a time controls the robot (:mod:`~robotrl.real_robot.lease`): it holds
  the **lease** (``acquire``; a takeover from a live holder needs ``force: true`` and
  puts the robot in hold first). ``step``, ``reset`` and ``rearm`` need the lease;
  anyone with the key may ``observe``, ask ``status`` or ``estop``. The lease lapses
  after ``lease_timeout_s`` of silence;
* ``step`` must carry a ``deadline`` and runs only if it arrives within
  ``deadline_periods`` control periods of being sent (and before its deadline); what
  each request does is in :mod:`~robotrl.real_robot.handlers`;
* the watchdog follows the lease holder: when no fresh ``step`` of the holder arrives
  within ``watchdog_s`` the robot holds until the next valid command;
* ``estop`` (or :meth:`RobotServer.request_estop`, which ``robotrl robot-server`` calls on
  ``SIGUSR1``: an e-stop without the socket) latches the e-stop; while latched ``step``
  answers with the hold action and ``reset`` is refused. The latch is persisted
  (atomically) in the robot's own ``latch_file`` and survives a crash and a restart; the
  server does not start when it cannot write it (:mod:`~robotrl.real_robot.latch`); only
  ``rearm`` with an ``operator`` name clears it (logged, and only once written);
* any exception while handling a request becomes an error reply (``kind: "internal"``)
  and a hold; the server keeps serving. Only a driver crash
  (:class:`RobotConnectionError` from the robot) ends :meth:`RobotServer.serve`.

Source: SERL's robot servers (one process owns the arm; clients post actions).
"""

from __future__ import annotations

import collections
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable

import zmq

from robotrl.errors import ConfigError
from robotrl.real_robot import handlers
from robotrl.real_robot.handlers import REQUESTS, obs_body
from robotrl.real_robot.interface import Observation, ProtocolError, Robot, RobotConnectionError
from robotrl.real_robot.latch import EstopLatch, write_json_atomic
from robotrl.real_robot.lease import Lease, error
from robotrl.real_robot.protocol import Authenticator, Limits, check_camera_limits
from robotrl.real_robot.safety import SafetySupervisor
from robotrl.real_robot.screening import QUARANTINE_AFTER, ConnectionGuard, Screen, check_endpoint, router_socket

__all__ = ["QUARANTINE_AFTER", "REQUESTS", "RobotServer", "check_endpoint", "obs_body", "write_json_atomic"]


class RobotServer:
    """Serve one connected robot over ZeroMQ.

    Args:
        robot: a connected :class:`Robot`.
        supervisor: the robot's :class:`SafetySupervisor`.
        key: the shared bridge key (bytes, >= 16).
        endpoint: where to bind; ``tcp://127.0.0.1:0`` picks a free port.
        allow_remote: permit a non-loopback bind address.
        limits: message :class:`Limits`; a robot with cameras needs them raised for its frames
            (:func:`~robotrl.real_robot.protocol.camera_limits` of its ``spec().cameras``).
        robot_id: this robot's id, which every request must name (``dst``); default
            ``"<spec name>@<bound endpoint>"``. Give robots that share a key distinct ids.
        latch_file: where the e-stop latch is persisted (JSON, written atomically); it must be writable
            (else ``ConfigError``); ``None`` keeps it in memory only (tests; ``robotrl robot-server`` always sets one).
        latch_id: whose latch the file is (default: ``robot_id``, else ``<spec name>@<endpoint as given>``); a
            file holding another id's record is refused (:mod:`~robotrl.real_robot.latch`).
        legacy_latch_files: older shared latch files whose latched record for this robot is adopted.
        max_unauth, max_unauth_per_peer, unauth_timeout_s: bounds of connections that have not sent an
            authenticated message (:class:`~robotrl.real_robot.screening.ConnectionGuard`; defaults from the
            descriptor limit, 2 s).
        deadline_periods: a ``step`` runs only within this many control periods of being
            sent (default 2; > 0).
        lease_timeout_s: the lease lapses after this much silence of its holder (s);
            default ``max(1 s, 10 watchdog periods)``.
        log: where operator-relevant events are written (default: stderr).

    Attributes:
        endpoint: the bound endpoint (with the real port) after :meth:`bind`.
        epoch: random id of this server instance (hex, 16 chars).
        lease: the control :class:`~robotrl.real_robot.lease.Lease`.
        latch: the persistent :class:`~robotrl.real_robot.latch.EstopLatch`.
        holding: whether the robot is (to be) held.
        last_command: ``time.monotonic()`` of the lease holder's last command, or ``None``
            (the watchdog is disarmed until the next one).
        hold_events: one dict per watchdog hold: ``{"at", "last_command", "latency_s",
            "periods"}`` (periods = latency × control rate).

    Raises:
        ConfigError: limits too small for the robot's camera frames (the message names
            ``camera_limits``); a bad ``robot_id``, ``deadline_periods`` or ``lease_timeout_s``; an
            observation workspace that names observation entries the robot lacks; a latch file
            that cannot be written or holds another robot's record.
    """

    def __init__(self, robot: Robot, supervisor: SafetySupervisor, key: bytes, endpoint: str = "tcp://127.0.0.1:0",
                 *, allow_remote: bool = False, limits: Limits = Limits(), robot_id: str | None = None,
                 latch_file: str | os.PathLike | None = None, deadline_periods: float = 2.0,
                 lease_timeout_s: float | None = None, log: Callable[[str], None] | None = None,
                 latch_id: str | None = None, legacy_latch_files: list | None = None, max_unauth: int | None = None,
                 max_unauth_per_peer: int | None = None, unauth_timeout_s: float = 2.0):
        self.robot, self.supervisor = robot, supervisor
        self.endpoint = check_endpoint(endpoint, allow_remote)
        self.spec = robot.spec()
        if robot_id is not None and not (0 < len(str(robot_id)) <= 128):
            raise ConfigError(f"robot_id must have 1..128 characters, got {robot_id!r}")
        self.robot_id = None if robot_id is None else str(robot_id)
        check_camera_limits(self.spec.cameras, limits, f"robot server of {self.spec.name}")
        self.auth = Authenticator(key, ident=self.robot_id or "unbound", limits=limits, role="server")
        self.screen = Screen(self.auth)
        self.epoch = secrets.token_hex(8)
        self.rate_hz = float(supervisor.config.rate_hz)
        self.watchdog_s = float(supervisor.config.watchdog_s)
        if not (0 < float(deadline_periods) <= 10):
            raise ConfigError(f"deadline_periods must be in (0, 10] control periods, got {deadline_periods}")
        self.deadline_periods = float(deadline_periods)
        self.horizon_s = self.deadline_periods / self.rate_hz
        lease_s = float(lease_timeout_s) if lease_timeout_s is not None else max(1.0, 10 * self.watchdog_s)
        if not lease_s > 0:
            raise ConfigError(f"lease_timeout_s must be > 0 s, got {lease_timeout_s}")
        self.lease = Lease(lease_s)
        ws = supervisor.config.workspace
        if ws is not None and ws.source == "observation" and max(ws.indices) >= self.spec.observation.dim:
            raise ConfigError(f"safety.workspace.indices {ws.indices} name observation entries robot {self.spec.name} "
                              f"lacks (Do={self.spec.observation.dim})")
        self.log = log or (lambda m: print(f"robot-server: {m}", file=sys.stderr, flush=True))
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self.last_command: float | None = None
        self.holding = False
        self.hold_events: list[dict] = []
        self.expired = 0
        self.steps = 0
        self.internal_errors = 0
        self.crashed: str | None = None
        self._obs: Observation | None = None
        self.latch_id = str(latch_id or self.robot_id or f"{self.spec.name}@{self.endpoint}")
        self.latch = EstopLatch(supervisor, latch_file, self.log, latch_id=self.latch_id, legacy=legacy_latch_files)
        self.latch.open()
        self._guard_kw = {"max_unauth": max_unauth, "max_unauth_per_peer": max_unauth_per_peer,
                          "unauth_timeout_s": float(unauth_timeout_s)}
        ConnectionGuard.check(**self._guard_kw)
        self.guard: ConnectionGuard | None = None
        self._auth_ids: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._estop_request: str | None = None

    @property
    def lease_timeout_s(self) -> float:
        """Silence of the lease holder after which the lease lapses (s)."""
        return self.lease.timeout_s

    @property
    def latch_file(self):
        """Where the e-stop latch persists (a ``Path``), or ``None`` (memory only)."""
        return self.latch.path

    # ---- socket ------------------------------------------------------------------------
    def bind(self) -> str:
        """Bind the socket; returns the endpoint with the real port (and fixes the default robot id).

        Raises:
            zmq.ZMQError: the endpoint cannot be bound.
        """
        def guard(sock: zmq.Socket) -> None:
            self.guard = ConnectionGuard(sock, log=self.log, **self._guard_kw)

        self._sock = router_socket(self._ctx, self.endpoint, self.auth.limits.max_request_bytes, before_bind=guard)
        self.endpoint = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        assert self.guard is not None
        self.guard.bound(self.endpoint)
        if self.robot_id is None:
            self.robot_id = f"{self.spec.name}@{self.endpoint}"[:128]
        self.auth.ident = self.robot_id
        return self.endpoint

    def close(self) -> None:
        """Close the socket (the robot itself is closed by its owner)."""
        if self._sock is not None:
            if self.guard is not None:
                self.guard.close()
            self._sock.close(0)
            self._sock = None

    # ---- robot, hold and watchdog ------------------------------------------------------------
    def status(self) -> dict:
        """Counters and state for monitoring (also the ``status`` answer)."""
        now = time.monotonic()
        estopped = self.supervisor.estopped
        return {"robot_id": self.robot_id, "epoch": self.epoch, "held": self.holding, "estopped": estopped,
                "estop_latch": dict(self.latch.info) if estopped else None,
                "latch_file": None if self.latch.path is None else str(self.latch.path),
                "latch_persisted": self.latch.persisted, "latch_error": self.latch.error,
                "connections": None if self.guard is None else self.guard.status(),
                "lease": self.lease.view(), "steps": self.steps, "expired": self.expired,
                "last_command_age_s": None if self.last_command is None else now - self.last_command,
                "hold_events": list(self.hold_events[-20:]), "rejected": dict(self.auth.rejected),
                "quarantined": self.screen.quarantined, "internal_errors": self.internal_errors,
                "accepted": self.auth.accepted, "safety": dict(self.supervisor.counters), "crashed": self.crashed,
                "rate_hz": self.rate_hz, "watchdog_s": self.watchdog_s, "deadline_s": self.horizon_s}

    def observation(self) -> Observation:
        """Fetch (and cache) the robot's latest observation. Raises what the driver raises."""
        self._obs = self.robot.get_observation()
        return self._obs

    def cached_observation(self) -> Observation:
        """The last observation fetched (fetching one if there is none yet, e.g. a step before any reset)."""
        return self._obs if self._obs is not None else self.observation()

    def reset_robot(self, seed: int | None) -> Observation:
        """Reset the robot (episode start): the supervisor's history restarts from hold, the watchdog disarms."""
        self._obs = self.robot.reset(seed)
        self.supervisor.hold("reset")
        self.last_command, self.holding = None, False  # watchdog re-arms with the episode's first command
        return self._obs

    def enter_hold(self, reason: str) -> None:
        """Put the robot in hold (supervisor and driver). Raises what the driver's ``hold`` raises."""
        self.holding = True  # first: even if the driver fails below, the server counts the robot as to be held
        self.supervisor.hold(reason)
        self.robot.hold()

    def check_watchdog(self) -> None:
        """Hold the robot if the lease holder's last command is older than ``watchdog_s``."""
        if self.holding or self.last_command is None:
            return
        now = time.monotonic()
        age = now - self.last_command
        if age > self.watchdog_s:
            self.enter_hold("watchdog")
            self.hold_events.append({"at": now, "last_command": self.last_command, "latency_s": age,
                                     "periods": age * self.rate_hz, "holder": self.lease.holder})

    def request_estop(self, source: str) -> None:
        """Ask the serving loop to latch the e-stop within one tick (<= 10 ms): safe to call from a signal
        handler (``SIGUSR1`` in ``robotrl robot-server``) or another thread; needs no socket, no key."""
        self._estop_request = source

    def estop_now(self, reason: str, by: str) -> bool:
        """Latch the e-stop, persist it and hold the robot; returns whether the latch reached the file.

        Raises what the driver's ``hold`` raises (the latch is set before).
        """
        self.supervisor.estop()
        ok = self.latch.persist(reason, by, self.robot_id, self.epoch)
        self.log(f"e-stop latched by {by}" + ("" if ok else " (in memory only: the latch file could not be written)"))
        self.enter_hold("estop")
        return ok

    def _signal_estop(self) -> None:
        source, self._estop_request = self._estop_request, None
        try:
            self.estop_now(f"{source}", f"{source} (no socket)")
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:  # the latch is set and persisted before hold(): log, keep serving
            self.internal_errors += 1
            self.log(f"internal error in the {source} e-stop hold:\n{traceback.format_exc()}")

    # ---- requests -------------------------------------------------------------------------
    def handle(self, msg: dict) -> dict:
        """Answer body for one authenticated request (before the server adds ``re``).

        Raises:
            RobotConnectionError: the driver failed (the server then stops).
            Exception: anything else is a server bug; :meth:`serve` turns it into a
                ``kind: "internal"`` answer and a hold.
        """
        return handlers.dispatch(self, msg)

    # ---- loop --------------------------------------------------------------------------
    def serve(self, should_stop: Callable[[], bool] = lambda: False) -> None:
        """Serve until ``should_stop()`` or a driver crash.

        Raises:
            RobotConnectionError: the driver crashed (after answering the request).
        """
        if self._sock is None:
            self.bind()
        guard = self.guard
        assert guard is not None
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(guard.monitor, zmq.POLLIN)
        tick_ms = max(1, int(1000 * min(self.watchdog_s / 8, 0.01)))
        self.enter_hold("startup")
        swept = time.monotonic()
        while not should_stop():
            if self._estop_request is not None:
                self._signal_estop()
            ready = dict(poller.poll(tick_ms))
            if ready.get(self._sock):
                for _ in range(64):  # drain what is queued, checking the watchdog between messages
                    try:
                        ident = self._sock.recv(zmq.NOBLOCK, copy=False)  # a Frame: it knows its connection (SRCFD)
                    except zmq.Again:
                        break
                    frames = [ident.bytes, *(self._sock.recv_multipart(zmq.NOBLOCK) if ident.more else [])]
                    self._serve_guarded(frames, ident)
                    self._watchdog_guarded()
                    if self.crashed or self._estop_request is not None \
                            or not self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                        break  # (asking EVENTS is cheaper than a recv that raises zmq.Again)
            now = time.monotonic()
            if ready.get(guard.monitor) or now - swept > 0.05:
                guard.sweep()
                swept = now
            self._watchdog_guarded()
            if self.crashed:
                raise RobotConnectionError(self.crashed)

    def _watchdog_guarded(self) -> None:
        try:
            self.check_watchdog()
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:  # a driver bug in hold(): log it, keep serving (counted in status.internal_errors)
            self.internal_errors += 1
            self.log(f"internal error in the watchdog hold:\n{traceback.format_exc()}")

    def _serve_guarded(self, frames: list, ident: zmq.Frame | None = None) -> None:
        try:
            self._serve_one(frames, ident)
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:  # last resort outside a request (sending, bookkeeping): log, hold, keep serving
            self.internal_errors += 1
            self.log(f"internal error outside a request:\n{traceback.format_exc()}")
            self._try_hold("internal_error")

    def _try_hold(self, reason: str) -> None:
        try:
            self.enter_hold(reason)
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:
            self.log(f"hold after an internal error failed too:\n{traceback.format_exc()}")

    def _serve_one(self, frames: list, frame: zmq.Frame | None = None) -> None:
        ident = frames[0]
        msg = self.screen.open(frames)
        if msg is None:
            if frame is not None and self.guard is not None and self.screen.is_quarantined(ident):
                self.guard.cut(frame.get(zmq.SRCFD), "quarantine")
            return
        if frame is not None and self.guard is not None and ident not in self._auth_ids:
            if self.guard.authenticated(frame.get(zmq.SRCFD)):  # not yet known to the guard: marked on a later message
                self._auth_ids[ident] = None
            while len(self._auth_ids) > 4096:
                self._auth_ids.popitem(last=False)
        if not self.latch.persisted:  # a latch write owed from before (its directory was gone): retry first
            self.latch.sync("estop", "retry", self.robot_id, self.epoch)
        try:
            body = self.handle(msg)
        except RobotConnectionError as exc:
            self.crashed = str(exc)
            body = error("robot_crashed", f"the robot driver failed: {exc}; the server stops (restart it after checking the robot)")
        except Exception as exc:  # last resort: no request may end the server
            self.internal_errors += 1
            self.log(f"internal error on a {msg['type'][:40]!r} request from {msg['src']}:\n{traceback.format_exc()}")
            self._try_hold("internal_error")
            body = error("internal", f"the server failed on this {msg['type'][:40]!r} request ({type(exc).__name__}: "
                                     f"{str(exc)[:200]}); the robot holds and the server keeps serving. Report it with the "
                                     "server log")
        self.latch.sync("nonfinite action" if self.supervisor.estopped else "rearm", f"client {msg['src']}",
                        self.robot_id, self.epoch)
        body["re"] = msg["seq"]
        try:
            out, _ = self.auth.seal("reply", body, dst=msg["src"], epoch=self.epoch)
        except ProtocolError as exc:
            out, _ = self.auth.seal("reply", {**error("internal", f"the answer could not be sent: {exc}"), "re": msg["seq"]},
                                    dst=msg["src"], epoch=self.epoch)
        self._sock.send_multipart([ident, *out])
