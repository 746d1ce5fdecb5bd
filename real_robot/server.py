"""The robot server: owns the robot and its safety supervisor, serves authenticated commands.

One process per robot (``robotrl robot-server robot=sim``). It binds a ZeroMQ ROUTER
socket (loopback ``tcp://127.0.0.1:<port>`` unless ``allow_remote``), and in one loop:

* receives ``[identity, payload, mac]``; rejects (and counts) malformed, oversized,
  unauthenticated, stale and replayed messages without answering them;
* ``step``: filters the action through the :class:`SafetySupervisor`, applies it, and
  answers with the applied action, the flags and the new observation (one round trip
  per control step: observation→action latency is what the benchmark measures);
* runs the watchdog: when no fresh ``step`` arrives within ``watchdog_s`` (default
  1.5 control periods) the robot goes to safe hold until the next valid command;
* ``estop`` latches the software e-stop (the robot holds) until an explicit ``rearm``.

Requests (``type``: body → answer body): ``hello``: {} → {spec}; ``reset``: {seed} →
{obs}; ``step``: {action (Da,) | None, deadline} → {applied, flags, held, obs};
``observe`` → {obs}; ``heartbeat`` → {status}; ``estop`` / ``rearm`` → {status};
``status`` → {status}. A driver crash is answered with ``{"ok": false, "kind":
"robot_crashed"}`` and ends :meth:`RobotServer.serve` with an error.

Source: SERL's robot servers (one process owns the arm; clients post actions).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

import numpy as np
import zmq

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import Observation, ProtocolError, Robot, RobotConnectionError
from robotrl.real_robot.protocol import Authenticator, Limits
from robotrl.real_robot.safety import SafetySupervisor


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


class RobotServer:
    """Serve one connected robot over ZeroMQ.

    Args:
        robot: a connected :class:`Robot`.
        supervisor: the robot's :class:`SafetySupervisor`.
        key: the shared bridge key (bytes, >= 16).
        endpoint: where to bind; ``tcp://127.0.0.1:0`` picks a free port.
        allow_remote: permit a non-loopback bind address.
        limits: message :class:`Limits`.

    Attributes:
        endpoint: the bound endpoint (with the real port) after :meth:`bind`.
        hold_events: one dict per watchdog hold: ``{"at", "last_command", "latency_s",
            "periods"}`` (periods = latency × control rate).
    """

    def __init__(self, robot: Robot, supervisor: SafetySupervisor, key: bytes, endpoint: str = "tcp://127.0.0.1:0",
                 *, allow_remote: bool = False, limits: Limits = Limits()):
        self.robot, self.supervisor = robot, supervisor
        self.auth = Authenticator(key, peer="robot-server", limits=limits)
        self.endpoint = check_endpoint(endpoint, allow_remote)
        self.spec = robot.spec()
        self.rate_hz = float(supervisor.config.rate_hz)
        self.watchdog_s = float(supervisor.config.watchdog_s)
        self._ctx = zmq.Context.instance()
        self._sock: zmq.Socket | None = None
        self._last_cmd: float | None = None
        self.holding = False
        self.hold_events: list[dict] = []
        self.expired = 0
        self.steps = 0
        self.crashed: str | None = None
        self._obs: Observation | None = None

    def bind(self) -> str:
        """Bind the socket; returns the endpoint with the real port."""
        s = self._ctx.socket(zmq.ROUTER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, 4 * self.auth.limits.max_bytes + 1024)  # transport ceiling; app limit counted below
        s.bind(self.endpoint)
        self.endpoint = s.getsockopt(zmq.LAST_ENDPOINT).decode()
        self._sock = s
        return self.endpoint

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    # ---- status & safety -------------------------------------------------------------
    def status(self) -> dict:
        """Counters and state for monitoring (also the ``status`` answer)."""
        now = time.monotonic()
        return {"held": self.holding, "estopped": self.supervisor.estopped, "steps": self.steps, "expired": self.expired,
                "last_command_age_s": None if self._last_cmd is None else now - self._last_cmd,
                "hold_events": list(self.hold_events[-20:]), "rejected": dict(self.auth.rejected),
                "accepted": self.auth.accepted, "safety": dict(self.supervisor.counters), "crashed": self.crashed,
                "rate_hz": self.rate_hz, "watchdog_s": self.watchdog_s}

    def _enter_hold(self, reason: str) -> None:
        self.robot.hold()
        self.supervisor.hold(reason)
        self.holding = True

    def check_watchdog(self) -> None:
        """Hold the robot if the last command is older than ``watchdog_s``."""
        if self.holding or self._last_cmd is None:
            return
        now = time.monotonic()
        age = now - self._last_cmd
        if age > self.watchdog_s:
            self._enter_hold("watchdog")
            self.hold_events.append({"at": now, "last_command": self._last_cmd, "latency_s": age, "periods": age * self.rate_hz})

    # ---- request handlers ------------------------------------------------------------
    def _observation(self) -> Observation:
        self._obs = self.robot.get_observation()
        return self._obs

    def _step(self, body: dict) -> dict:
        deadline = body.get("deadline")
        if isinstance(deadline, (int, float)) and time.time() > deadline:
            self.expired += 1
            return {"ok": False, "kind": "expired", "error": "command arrived after its deadline; not applied"}
        action = body.get("action")
        if action is None:  # shadow mode / explicit hold
            self._enter_hold("shadow")
            self._last_cmd, applied, flags = time.monotonic(), self.supervisor.last_applied, ["hold"]
        else:
            if not isinstance(action, np.ndarray) or action.shape != (self.supervisor.da,) or action.dtype.kind != "f":
                return {"ok": False, "kind": "bad_request",
                        "error": f"action must be a float array of shape ({self.supervisor.da},), got {getattr(action, 'shape', type(action).__name__)}"}
            state = self._obs.state if self._obs is not None else None
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

    def handle(self, msg: dict) -> dict:
        """Answer body for one authenticated message."""
        t, body = msg["type"], msg["body"]
        if t == "step":
            return self._step(body)
        if t == "hello":
            return {"ok": True, "spec": self.spec.to_dict(), "status": self.status()}
        if t == "reset":
            seed = body.get("seed")
            if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
                return {"ok": False, "kind": "bad_request", "error": f"reset seed must be an int >= 0 or null, got {seed!r}"}
            self._obs = self.robot.reset(seed)
            self.supervisor.hold("reset")
            self._last_cmd, self.holding = None, False  # watchdog re-arms with the episode's first command
            return {"ok": True, "obs": obs_body(self._obs)}
        if t == "observe":
            return {"ok": True, "obs": obs_body(self._observation())}
        if t == "estop":
            self.supervisor.estop()
            self._enter_hold("estop")
            return {"ok": True, "status": self.status()}
        if t == "rearm":
            self.supervisor.rearm()
            return {"ok": True, "status": self.status()}
        if t in ("status", "heartbeat"):
            return {"ok": True, "status": self.status()}
        return {"ok": False, "kind": "bad_request", "error": f"unknown request type {t!r}"}

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
            events = dict(poller.poll(tick_ms))
            if self._sock in events:
                self._serve_one()
            self.check_watchdog()
            if self.crashed:
                raise RobotConnectionError(self.crashed)

    def _serve_one(self) -> None:
        frames = self._sock.recv_multipart(copy=True)
        ident, rest = frames[0], frames[1:]
        try:
            msg = self.auth.open(rest)
        except ProtocolError:
            return  # counted; no answer to a message we cannot trust
        try:
            body = self.handle(msg)
        except RobotConnectionError as exc:
            self.crashed = str(exc)
            body = {"ok": False, "kind": "robot_crashed", "error": str(exc)}
        body["re"] = msg["seq"]
        out, _ = self.auth.seal("reply", body)
        self._sock.send_multipart([ident, *out])
