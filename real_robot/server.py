"""The robot server: owns the robot and its safety supervisor, serves authenticated commands.

One process per robot (``robotrl robot-server robot=sim``). It binds a ZeroMQ ROUTER
socket (loopback ``tcp://127.0.0.1:<port>`` unless ``allow_remote``; default port
5555) and serves one request at a time in one loop. The wire protocol (framing, MAC,
every request and reply) is specified in ``docs/protocol.md``; in short:

* cheap checks first: frames larger than ``4 × max_request_bytes`` are cut by ZeroMQ
  itself (the connection is dropped); then the frame count, the connection's record
  (a connection that sent 16 unauthenticated or malformed messages is ignored from then
  on, without hashing), the size (``max_request_bytes``), and only then the MAC. Rejected
  messages are counted and never answered. ZeroMQ queues each connection separately and
  serves them in turn, so junk on one connection does not queue up ahead of another's
  commands;
* every request names the robot (``dst`` = :attr:`RobotServer.robot_id`) and the server
  instance (``epoch``, random per start); a request for another epoch is answered
  ``kind: "epoch"`` (the client says ``hello`` again);
* one client at a time controls the robot: it holds the **lease** (``acquire``; a
  takeover from a live holder needs ``force: true`` and puts the robot in hold first).
  ``step``, ``reset`` and ``rearm`` need the lease; anyone with the key may ``observe``,
  ask ``status`` or ``estop``. The lease lapses after ``lease_timeout_s`` of silence;
* ``step`` must carry a ``deadline`` and runs only if it arrives within
  ``deadline_periods`` control periods of being sent (and before its deadline);
* the watchdog follows the lease holder: when no fresh ``step`` of the holder arrives
  within ``watchdog_s`` the robot holds until the next valid command;
* ``estop`` latches the e-stop; while latched ``step`` answers with the hold action and
  ``reset`` is refused. The latch is persisted (atomically) in ``latch_file`` and
  survives a restart; only ``rearm`` with an ``operator`` name clears it (logged);
* any exception while handling a request becomes an error reply (``kind: "internal"``)
  and a hold; the server keeps serving. Only a driver crash
  (:class:`RobotConnectionError` from the robot) ends :meth:`RobotServer.serve`.

Source: SERL's robot servers (one process owns the arm; clients post actions).
"""

from __future__ import annotations

import collections
import ipaddress
import json
import math
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import zmq

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import Observation, ProtocolError, Robot, RobotConnectionError
from robotrl.real_robot.protocol import VERSION, Authenticator, Limits
from robotrl.real_robot.safety import SafetySupervisor

REQUESTS = ("hello", "acquire", "release", "reset", "step", "observe", "status", "heartbeat", "estop", "rearm")
QUARANTINE_AFTER = 16  # unauthenticated/malformed messages after which a connection is ignored


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


def obs_body(o: Observation) -> dict:
    """An :class:`Observation` as a message body."""
    return {"state": np.asarray(o.state, np.float32), "ts": float(o.timestamp), "reward": float(o.reward),
            "terminated": bool(o.terminated), "truncated": bool(o.truncated), "success": bool(o.success)}


def _err(kind: str, text: str) -> dict:
    return {"ok": False, "kind": kind, "error": text}


def write_json_atomic(path: Path, payload: dict) -> None:
    """Write ``payload`` as JSON to ``path`` atomically (temporary sibling, fsync, ``os.replace``), mode 0600."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(json.dumps(payload, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class RobotServer:
    """Serve one connected robot over ZeroMQ.

    Args:
        robot: a connected :class:`Robot`.
        supervisor: the robot's :class:`SafetySupervisor`.
        key: the shared bridge key (bytes, >= 16).
        endpoint: where to bind; ``tcp://127.0.0.1:0`` picks a free port.
        allow_remote: permit a non-loopback bind address.
        limits: message :class:`Limits`.
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
        hold_events: one dict per watchdog hold: ``{"at", "last_command", "latency_s",
            "periods"}`` (periods = latency × control rate).

    Raises:
        ConfigError: a bad ``robot_id``, ``deadline_periods`` or ``lease_timeout_s``; an
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
        self.auth = Authenticator(key, ident=self.robot_id or "unbound", limits=limits, role="server")
        self.epoch = secrets.token_hex(8)
        self.rate_hz = float(supervisor.config.rate_hz)
        self.watchdog_s = float(supervisor.config.watchdog_s)
        if not (0 < float(deadline_periods) <= 10):
            raise ConfigError(f"deadline_periods must be in (0, 10] control periods, got {deadline_periods}")
        self.deadline_periods = float(deadline_periods)
        self.horizon_s = self.deadline_periods / self.rate_hz
        self.lease_timeout_s = float(lease_timeout_s) if lease_timeout_s is not None else max(1.0, 10 * self.watchdog_s)
        if not self.lease_timeout_s > 0:
            raise ConfigError(f"lease_timeout_s must be > 0 s, got {lease_timeout_s}")
        ws = supervisor.config.workspace
        if ws is not None and ws.source == "observation" and max(ws.indices) >= self.spec.observation.dim:
            raise ConfigError(f"safety.workspace.indices {ws.indices} name observation entries robot {self.spec.name} "
                              f"lacks (Do={self.spec.observation.dim})")
        self._log = log or (lambda m: print(f"robot-server: {m}", file=sys.stderr, flush=True))
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._last_cmd: float | None = None
        self.holding = False
        self.hold_events: list[dict] = []
        self.expired = 0
        self.steps = 0
        self.internal_errors = 0
        self.quarantined = 0
        self.crashed: str | None = None
        self._obs: Observation | None = None
        self.lease: dict | None = None
        self._bad: collections.OrderedDict[bytes, int] = collections.OrderedDict()
        self.latch_file = Path(latch_file) if latch_file is not None else None
        self._latch_info: dict = {}
        self._latched_on_disk = False
        self._load_latch()

    # ---- e-stop latch (persistent) -------------------------------------------------------
    def _load_latch(self) -> None:
        if self.latch_file is None or not self.latch_file.exists():
            return
        try:
            info = json.loads(self.latch_file.read_text())
            latched = info.get("estopped") is not False  # anything but an explicit false keeps it latched
        except (OSError, ValueError, AttributeError) as exc:
            info, latched = {"reason": f"unreadable latch file ({type(exc).__name__})"}, True
        if latched:
            self.supervisor.estop()
            self._latched_on_disk = True
            self._latch_info = info if isinstance(info, dict) else {}
            self._log(f"e-stop LATCHED from {self.latch_file} (since {self._latch_info.get('since_iso', '?')}, "
                      f"reason {self._latch_info.get('reason', '?')!r}); the robot holds until an operator re-arms it "
                      "(rearm request with an operator name, after checking the robot)")

    def _persist_latch(self, reason: str, by: str) -> None:
        """Write the latch state after it changed (estop, NaN trip, re-arm)."""
        latched = bool(self.supervisor.estopped)
        now = time.time()
        info = {"estopped": latched, "robot_id": self.robot_id, "reason": reason, "by": by, "epoch": self.epoch,
                "since" if latched else "rearmed_at": now,
                "since_iso" if latched else "rearmed_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}
        self._latch_info = info if latched else {}
        self._latched_on_disk = latched
        if self.latch_file is not None:
            try:
                write_json_atomic(self.latch_file, info)
            except OSError as exc:
                self._log(f"could NOT persist the e-stop latch state ({'latched' if latched else 're-armed'}) to "
                          f"{self.latch_file}: {exc}; it holds in memory until this server stops. Fix the file's directory")

    def _sync_latch(self, reason: str, by: str) -> None:
        if bool(self.supervisor.estopped) != self._latched_on_disk:
            self._persist_latch(reason, by)
            if self.supervisor.estopped:
                self._log(f"e-stop latched ({reason}, by {by})")

    # ---- socket ------------------------------------------------------------------------
    def bind(self) -> str:
        """Bind the socket; returns the endpoint with the real port (and fixes the default robot id)."""
        s = self._ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        # transport ceiling: ZeroMQ drops the connection of a peer sending a larger frame before allocating it
        s.setsockopt(zmq.MAXMSGSIZE, 4 * self.auth.limits.max_request_bytes)
        s.bind(self.endpoint)
        self.endpoint = s.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._sock = s
        if self.robot_id is None:
            self.robot_id = f"{self.spec.name}@{self.endpoint}"[:128]
        self.auth.ident = self.robot_id
        return self.endpoint

    def close(self) -> None:
        """Close the socket (the robot itself is closed by its owner)."""
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    # ---- status & safety -------------------------------------------------------------
    def _lease_view(self) -> dict | None:
        if self.lease is None:
            return None
        now = time.monotonic()
        return {"holder": self.lease["holder"], "held_s": now - self.lease["since"], "idle_s": now - self.lease["seen"],
                "timeout_s": self.lease_timeout_s}

    def status(self) -> dict:
        """Counters and state for monitoring (also the ``status`` answer)."""
        now = time.monotonic()
        return {"robot_id": self.robot_id, "epoch": self.epoch, "held": self.holding, "estopped": self.supervisor.estopped,
                "estop_latch": dict(self._latch_info) if self.supervisor.estopped else None,
                "latch_file": None if self.latch_file is None else str(self.latch_file),
                "lease": self._lease_view(), "steps": self.steps, "expired": self.expired,
                "last_command_age_s": None if self._last_cmd is None else now - self._last_cmd,
                "hold_events": list(self.hold_events[-20:]), "rejected": dict(self.auth.rejected),
                "quarantined": self.quarantined, "internal_errors": self.internal_errors,
                "accepted": self.auth.accepted, "safety": dict(self.supervisor.counters), "crashed": self.crashed,
                "rate_hz": self.rate_hz, "watchdog_s": self.watchdog_s, "deadline_s": self.horizon_s}

    def _enter_hold(self, reason: str) -> None:
        self.holding = True  # first: even if the driver fails below, the server counts the robot as to be held
        self.supervisor.hold(reason)
        self.robot.hold()

    def check_watchdog(self) -> None:
        """Hold the robot if the lease holder's last command is older than ``watchdog_s``."""
        if self.holding or self._last_cmd is None:
            return
        now = time.monotonic()
        age = now - self._last_cmd
        if age > self.watchdog_s:
            self._enter_hold("watchdog")
            self.hold_events.append({"at": now, "last_command": self._last_cmd, "latency_s": age, "periods": age * self.rate_hz,
                                     "holder": None if self.lease is None else self.lease["holder"]})

    # ---- lease -----------------------------------------------------------------------------
    def _lease_free(self) -> bool:
        return self.lease is None or time.monotonic() - self.lease["seen"] > self.lease_timeout_s

    def _holds_lease(self, src: str) -> bool:
        return self.lease is not None and self.lease["holder"] == src

    def _no_lease(self, what: str) -> dict:
        if self.lease is None or self._lease_free():
            return _err("no_lease", f"{what} needs the control lease and you do not hold it; send acquire first")
        v = self._lease_view()
        return _err("no_lease", f"{what} needs the control lease, held by client {v['holder']} for {v['held_s']:.1f} s; "
                                "observe only, or take over deliberately with acquire force=true (the robot holds first)")

    def _acquire(self, src: str, body: dict) -> dict:
        force = body.get("force", False)
        if not isinstance(force, bool):
            return _err("bad_request", f"acquire force must be true or false, got {force!r}")
        now = time.monotonic()
        if self._holds_lease(src):
            self.lease["seen"] = now
            return {"ok": True, "lease": self._lease_view()}
        if not self._lease_free():
            if not force:
                v = self._lease_view()
                return _err("lease_held", f"client {v['holder']} holds the control lease (active {v['idle_s']:.2f} s ago); "
                                          "observe only, or take over with acquire force=true")
            self._log(f"lease taken over by {src} from {self.lease['holder']} (forced); the robot holds")
        if self.lease is not None:  # the robot never continues a previous holder's motion
            self._enter_hold("takeover")
        self.lease = {"holder": src, "since": now, "seen": now}
        self._last_cmd = None  # the watchdog re-arms with the new holder's first command
        return {"ok": True, "lease": self._lease_view()}

    def _release(self, src: str) -> dict:
        if not self._holds_lease(src):
            return self._no_lease("release")
        self.lease, self._last_cmd = None, None
        self._enter_hold("released")
        return {"ok": True}

    # ---- request handlers ------------------------------------------------------------
    def _observation(self) -> Observation:
        self._obs = self.robot.get_observation()
        return self._obs

    def _step(self, msg: dict) -> dict:
        body, now = msg["body"], time.time()
        deadline = body.get("deadline")
        if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or not math.isfinite(deadline):
            return _err("bad_request", "step needs a deadline: the wall-clock time (s since the Unix epoch, a number) after "
                                       f"which it must not run, e.g. ts + 1/rate; got {deadline!r}")
        age = now - msg["ts"]
        if age < -self.horizon_s:
            return _err("clock", f"the step is stamped {-age * 1000:.1f} ms in the robot's future: the sender's clock runs "
                                 f"ahead; synchronise both clocks (NTP/PTP) to well within {self.horizon_s * 1000:.1f} ms")
        if age > self.horizon_s or now > deadline:
            self.expired += 1
            why = (f"it was sent {age * 1000:.1f} ms ago (limit {self.deadline_periods:g} periods = "
                   f"{self.horizon_s * 1000:.1f} ms)" if age > self.horizon_s else f"its deadline passed {(now - deadline) * 1000:.1f} ms ago")
            return _err("expired", f"step not applied: {why}; send a fresh command")
        if "action" not in body:
            return _err("bad_request", f"step body needs 'action': a float array of shape ({self.supervisor.da},) or null (hold)")
        action = body["action"]
        if action is None:  # shadow mode / explicit hold
            self._enter_hold("shadow")
            self._last_cmd, applied, flags = time.monotonic(), self.supervisor.last_applied, ["hold"]
        else:
            if not isinstance(action, np.ndarray) or action.shape != (self.supervisor.da,) or action.dtype.kind != "f":
                got = f"{action.dtype} array of shape {action.shape}" if isinstance(action, np.ndarray) else repr(action)[:60]
                return _err("bad_request", f"step action must be a float32/float64 array of shape ({self.supervisor.da},) "
                                           f"or null (hold), got {got}")
            state = (self._obs if self._obs is not None else self._observation()).state
            d = self.supervisor.filter(action, state)
            if "estop" in d.flags or "nonfinite" in d.flags:
                self._enter_hold("estop" if "estop" in d.flags else "nonfinite")
                applied = d.applied
            else:
                applied = self.robot.send_action(d.applied)
                self.holding = False
            self._last_cmd, flags = time.monotonic(), d.flags
            self.steps += 1
        return {"ok": True, "applied": np.asarray(applied, np.float32), "flags": list(flags), "held": self.holding,
                "obs": obs_body(self._observation())}

    def _reset(self, body: dict) -> dict:
        seed = body.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32):
            return _err("bad_request", f"reset seed must be an int in [0, 2**32) or null, got {seed!r}")
        if self.supervisor.estopped:
            return _err("estopped", "the e-stop is latched; reset could move the robot and is refused. Check the robot, "
                                    "then re-arm (rearm with an operator name) and reset again")
        self._obs = self.robot.reset(seed)
        self.supervisor.hold("reset")
        self._last_cmd, self.holding = None, False  # watchdog re-arms with the episode's first command
        return {"ok": True, "obs": obs_body(self._obs)}

    def _rearm(self, src: str, body: dict) -> dict:
        operator = body.get("operator")
        if not isinstance(operator, str) or not 0 < len(operator.strip()) <= 64:
            return _err("bad_request", "rearm is a deliberate operator act: give body.operator (who re-arms, 1..64 "
                                       f"characters) after checking the robot; got {operator!r}")
        if not self.supervisor.estopped:
            return {"ok": True, "status": self.status()}
        since = self._latch_info.get("since_iso", "?")
        self.supervisor.rearm()
        self._persist_latch("rearm", f"{operator.strip()} (client {src})")
        self._log(f"e-stop RE-ARMED by operator {operator.strip()!r} (client {src}); it was latched since {since}")
        return {"ok": True, "status": self.status()}

    def handle(self, msg: dict) -> dict:
        """Answer body for one authenticated request (before the server adds ``re``).

        Raises:
            RobotConnectionError: the driver failed (the server then stops).
            Exception: anything else is a server bug; :meth:`serve` turns it into a
                ``kind: "internal"`` answer and a hold.
        """
        t, body, src = msg["type"], msg["body"], msg["src"]
        if t == "hello":
            return {"ok": True, "protocol": VERSION, "robot_id": self.robot_id, "epoch": self.epoch,
                    "spec": self.spec.to_dict(), "status": self.status(),
                    "limits": {"max_request_bytes": self.auth.limits.max_request_bytes, "max_bytes": self.auth.limits.max_bytes,
                               "max_skew_s": self.auth.limits.max_skew_s, "deadline_s": self.horizon_s,
                               "deadline_periods": self.deadline_periods, "lease_timeout_s": self.lease_timeout_s}}
        if msg["epoch"] != self.epoch:
            return _err("epoch", f"this server instance is epoch {self.epoch}, the request names {msg['epoch']!r} (the server "
                                 "restarted); say hello again and re-acquire the lease")
        if self._holds_lease(src):
            self.lease["seen"] = time.monotonic()
        if t in ("step", "reset", "rearm") and not self._holds_lease(src):
            return self._no_lease(t)
        if t == "step":
            return self._step(msg)
        if t == "reset":
            return self._reset(body)
        if t == "rearm":
            return self._rearm(src, body)
        if t == "acquire":
            return self._acquire(src, body)
        if t == "release":
            return self._release(src)
        if t == "observe":
            return {"ok": True, "obs": obs_body(self._observation())}
        if t == "estop":
            self.supervisor.estop()
            reason = body.get("reason")
            self._persist_latch(reason if isinstance(reason, str) else "estop request", f"client {src}")
            self._log(f"e-stop latched by client {src}")
            self._enter_hold("estop")
            return {"ok": True, "status": self.status()}
        if t in ("status", "heartbeat"):
            return {"ok": True, "status": self.status()}
        return _err("bad_request", f"unknown request type {t[:40]!r}; known: {', '.join(REQUESTS)}")

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
        self._enter_hold("startup")
        while not should_stop():
            if poller.poll(tick_ms):
                for _ in range(64):  # drain what is queued, checking the watchdog between messages
                    try:
                        frames = self._sock.recv_multipart(zmq.NOBLOCK)  # copying small frames is cheaper than Frame objects
                    except zmq.Again:
                        break
                    self._serve_guarded(frames)
                    self._watchdog_guarded()
                    if self.crashed:
                        break
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
            self._log(f"internal error in the watchdog hold:\n{traceback.format_exc()}")

    def _serve_guarded(self, frames: list) -> None:
        try:
            self._serve_one(frames)
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:  # last resort outside a request (sending, bookkeeping): log, hold, keep serving
            self.internal_errors += 1
            self._log(f"internal error outside a request:\n{traceback.format_exc()}")
            self._try_hold("internal_error")

    def _try_hold(self, reason: str) -> None:
        try:
            self._enter_hold(reason)
        except RobotConnectionError as exc:
            self.crashed = self.crashed or str(exc)
        except Exception:
            self._log(f"hold after an internal error failed too:\n{traceback.format_exc()}")

    def _screen(self, frames: list) -> dict | None:
        """Cheap checks first, then the MAC: the message, or ``None`` (counted, unanswered)."""
        ident = frames[0]
        if self._bad.get(ident, 0) >= QUARANTINE_AFTER:
            self.quarantined += 1
            return None
        try:
            return self.auth.open(frames[1:])
        except ProtocolError as exc:
            if getattr(exc, "reason", "") in ("malformed", "oversized", "unauthenticated"):
                self._bad[ident] = self._bad.get(ident, 0) + 1
                self._bad.move_to_end(ident)
                while len(self._bad) > 4096:
                    self._bad.popitem(last=False)
            return None

    def _serve_one(self, frames: list) -> None:
        msg = self._screen(frames)
        if msg is None:
            return
        ident = frames[0]
        try:
            body = self.handle(msg)
        except RobotConnectionError as exc:
            self.crashed = str(exc)
            body = _err("robot_crashed", f"the robot driver failed: {exc}; the server stops (restart it after checking the robot)")
        except Exception as exc:  # last resort: no request may end the server
            self.internal_errors += 1
            self._log(f"internal error on a {msg['type'][:40]!r} request from {msg['src']}:\n{traceback.format_exc()}")
            self._try_hold("internal_error")
            body = _err("internal", f"the server failed on this {msg['type'][:40]!r} request ({type(exc).__name__}: "
                                    f"{str(exc)[:200]}); the robot holds and the server keeps serving. Report it with the "
                                    "server log")
        self._sync_latch("nonfinite action" if self.supervisor.estopped else "rearm", f"client {msg['src']}")
        body["re"] = msg["seq"]
        try:
            out, _ = self.auth.seal("reply", body, dst=msg["src"], epoch=self.epoch)
        except ProtocolError as exc:
            out, _ = self.auth.seal("reply", {**_err("internal", f"the answer could not be sent: {exc}"), "re": msg["seq"]},
                                    dst=msg["src"], epoch=self.epoch)
        self._sock.send_multipart([ident, *out])
