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
* ``estop`` latches the e-stop; while latched ``step`` answers with the hold action and
  ``reset`` is refused. The latch is persisted (atomically) in ``latch_file`` and
  survives a restart (:mod:`~robotrl.real_robot.latch`); only ``rearm`` with an
  ``operator`` name clears it (logged);
* any exception while handling a request becomes an error reply (``kind: "internal"``)
  and a hold; the server keeps serving. Only a driver crash
  (:class:`RobotConnectionError` from the robot) ends :meth:`RobotServer.serve`.

Source: SERL's robot servers (one process owns the arm; clients post actions).
"""

from __future__ import annotations

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
from robotrl.real_robot.screening import QUARANTINE_AFTER, Screen, check_endpoint, router_socket

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
        latch_file: where the e-stop latch is persisted (JSON, written atomically);
            ``None`` keeps it in memory only (tests; ``robotrl robot-server`` always sets one).
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
            observation workspace that names observation entries the robot lacks; an
            unreadable latch file location.
    """

    def __init__(self, robot: Robot, supervisor: SafetySupervisor, key: bytes, endpoint: str = "tcp://127.0.0.1:0",
                 *, allow_remote: bool = False, limits: Limits = Limits(), robot_id: str | None = None,
                 latch_file: str | os.PathLike | None = None, deadline_periods: float = 2.0,
                 lease_timeout_s: float | None = None, log: Callable[[str], None] | None = None):
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
        self.latch = EstopLatch(supervisor, latch_file, self.log)
        self.latch.load()

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
        self._sock = router_socket(self._ctx, self.endpoint, self.auth.limits.max_request_bytes)
        self.endpoint = self._sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        if self.robot_id is None:
            self.robot_id = f"{self.spec.name}@{self.endpoint}"[:128]
        self.auth.ident = self.robot_id
        return self.endpoint

    def close(self) -> None:
        """Close the socket (the robot itself is closed by its owner)."""
        if self._sock is not None:
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
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        tick_ms = max(1, int(1000 * min(self.watchdog_s / 8, 0.01)))
        self.enter_hold("startup")
        while not should_stop():
            if poller.poll(tick_ms):
                for _ in range(64):  # drain what is queued, checking the watchdog between messages
                    try:
                        frames = self._sock.recv_multipart(zmq.NOBLOCK)  # copying small frames is cheaper than Frame objects
                    except zmq.Again:
                        break
                    self._serve_guarded(frames)
                    self._watchdog_guarded()
                    if self.crashed or not self._sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                        break  # (asking EVENTS is cheaper than a recv that raises zmq.Again)
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

    def _serve_guarded(self, frames: list) -> None:
        try:
            self._serve_one(frames)
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

    def _serve_one(self, frames: list) -> None:
        msg = self.screen.open(frames)
        if msg is None:
            return
        ident = frames[0]
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
