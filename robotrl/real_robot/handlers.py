"""What each authenticated request does (``docs/protocol.md`` §8–§10).

:func:`dispatch` is the gate every request passes after screening: ``hello`` is
answered in any epoch; any other request naming another server instance is answered
``kind: "epoch"``; ``step``, ``reset`` and ``rearm`` need the lease. Each handler
returns the answer body (before the server adds ``re``) and raises only what its
driver raises (:class:`~robotrl.real_robot.interface.RobotConnectionError`) or, for a
server bug, anything, which :class:`~robotrl.real_robot.server.RobotServer` turns into
a ``kind: "internal"`` answer and a hold.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from robotrl.real_robot.interface import Observation
from robotrl.real_robot.lease import LEASED, error
from robotrl.real_robot.protocol import VERSION

if TYPE_CHECKING:
    from robotrl.real_robot.server import RobotServer

REQUESTS = ("hello", "acquire", "release", "reset", "step", "observe", "status", "heartbeat", "estop", "rearm")


def obs_body(o: Observation) -> dict:
    """An :class:`Observation` as a message body."""
    body = {"state": np.asarray(o.state, np.float32), "ts": float(o.timestamp), "reward": float(o.reward),
            "terminated": bool(o.terminated), "truncated": bool(o.truncated), "success": bool(o.success)}
    if o.images:  # camera frames, uint8 (H, W, C) each: both sides need protocol.camera_limits
        body["images"] = {str(k): np.ascontiguousarray(v, np.uint8) for k, v in o.images.items()}
    return body


def dispatch(srv: RobotServer, msg: dict) -> dict:
    """Answer body for one authenticated request (see :meth:`RobotServer.handle`)."""
    t, src = msg["type"], msg["src"]
    if t == "hello":
        return hello(srv, msg)
    if msg["epoch"] != srv.epoch:
        return error("epoch", f"this server instance is epoch {srv.epoch}, the request names {msg['epoch']!r} (the server "
                              "restarted); say hello again and re-acquire the lease")
    srv.lease.touch(src)
    if t in LEASED and not srv.lease.holds(src):
        return srv.lease.refusal(t)
    handler = HANDLERS.get(t)
    if handler is None:
        return error("bad_request", f"unknown request type {t[:40]!r}; known: {', '.join(REQUESTS)}")
    return handler(srv, msg)


def hello(srv: RobotServer, msg: dict) -> dict:
    """Who this robot is: protocol version, robot id, epoch, spec, status and limits."""
    lim = srv.auth.limits
    return {"ok": True, "protocol": VERSION, "robot_id": srv.robot_id, "epoch": srv.epoch,
            "spec": srv.spec.to_dict(), "status": srv.status(),
            "limits": {"max_request_bytes": lim.max_request_bytes, "max_bytes": lim.max_bytes,
                       "max_skew_s": lim.max_skew_s, "deadline_s": srv.horizon_s,
                       "deadline_periods": srv.deadline_periods, "lease_timeout_s": srv.lease.timeout_s}}


def step(srv: RobotServer, msg: dict) -> dict:
    """One command: refused unless fresh (deadline, ``deadline_periods``); filtered by the supervisor; applied.

    ``action: null`` holds (shadow mode). While the e-stop is latched or on a non-finite
    action the robot holds and the answer carries the hold action.
    """
    body, now = msg["body"], time.time()
    deadline = body.get("deadline")
    if not isinstance(deadline, (int, float)) or isinstance(deadline, bool) or not math.isfinite(deadline):
        return error("bad_request", "step needs a deadline: the wall-clock time (s since the Unix epoch, a number) after "
                                    f"which it must not run, e.g. ts + 1/rate; got {deadline!r}")
    age = now - msg["ts"]
    if age < -srv.horizon_s:
        return error("clock", f"the step is stamped {-age * 1000:.1f} ms in the robot's future: the sender's clock runs "
                              f"ahead; synchronise both clocks (NTP/PTP) to well within {srv.horizon_s * 1000:.1f} ms")
    if age > srv.horizon_s or now > deadline:
        srv.expired += 1
        why = (f"it was sent {age * 1000:.1f} ms ago (limit {srv.deadline_periods:g} periods = "
               f"{srv.horizon_s * 1000:.1f} ms)" if age > srv.horizon_s else f"its deadline passed {(now - deadline) * 1000:.1f} ms ago")
        return error("expired", f"step not applied: {why}; send a fresh command")
    sup = srv.supervisor
    if "action" not in body:
        return error("bad_request", f"step body needs 'action': a float array of shape ({sup.da},) or null (hold)")
    action = body["action"]
    if action is None:  # shadow mode / explicit hold
        srv.enter_hold("shadow")
        srv.last_command, applied, flags = time.monotonic(), sup.last_applied, ["hold"]
    else:
        if not isinstance(action, np.ndarray) or action.shape != (sup.da,) or action.dtype.kind != "f":
            got = f"{action.dtype} array of shape {action.shape}" if isinstance(action, np.ndarray) else repr(action)[:60]
            return error("bad_request", f"step action must be a float32/float64 array of shape ({sup.da},) "
                                        f"or null (hold), got {got}")
        d = sup.filter(action, srv.cached_observation().state)
        if "estop" in d.flags or "nonfinite" in d.flags:
            srv.enter_hold("estop" if "estop" in d.flags else "nonfinite")
            applied = d.applied
        else:
            applied = srv.robot.send_action(d.applied)
            srv.holding = False
        srv.last_command, flags = time.monotonic(), d.flags
        srv.steps += 1
    return {"ok": True, "applied": np.asarray(applied, np.float32), "flags": list(flags), "held": srv.holding,
            "obs": obs_body(srv.observation())}


def reset(srv: RobotServer, msg: dict) -> dict:
    """Start an episode (refused while the e-stop is latched: the driver may move the robot home)."""
    seed = msg["body"].get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32):
        return error("bad_request", f"reset seed must be an int in [0, 2**32) or null, got {seed!r}")
    if srv.supervisor.estopped:
        return error("estopped", "the e-stop is latched; reset could move the robot and is refused. Check the robot, "
                                 "then re-arm (rearm with an operator name) and reset again")
    obs = srv.reset_robot(seed)
    return {"ok": True, "obs": obs_body(obs)}


def rearm(srv: RobotServer, msg: dict) -> dict:
    """Clear a latched e-stop: a deliberate operator act (``body.operator``), persisted and logged."""
    src, operator = msg["src"], msg["body"].get("operator")
    if not isinstance(operator, str) or not 0 < len(operator.strip()) <= 64:
        return error("bad_request", "rearm is a deliberate operator act: give body.operator (who re-arms, 1..64 "
                                    f"characters) after checking the robot; got {operator!r}")
    if not srv.supervisor.estopped:
        return {"ok": True, "status": srv.status()}
    since = srv.latch.info.get("since_iso", "?")
    if not srv.latch.clear(f"{operator.strip()} (client {src})", srv.robot_id, srv.epoch):
        return error("not_persisted", f"re-arm refused: the cleared latch could not be written to {srv.latch.path} "
                                      f"({srv.latch.error}); the e-stop stays latched and the robot holds. Make the latch "
                                      "file's directory writable, then re-arm again")
    srv.log(f"e-stop RE-ARMED by operator {operator.strip()!r} (client {src}); it was latched since {since}")
    return {"ok": True, "status": srv.status()}


def acquire(srv: RobotServer, msg: dict) -> dict:
    """Take the lease; from a live holder only with ``force: true`` (the robot holds first)."""
    src, force, lease = msg["src"], msg["body"].get("force", False), srv.lease
    if not isinstance(force, bool):
        return error("bad_request", f"acquire force must be true or false, got {force!r}")
    if lease.holds(src):
        lease.touch(src)
        return {"ok": True, "lease": lease.view()}
    if not lease.free():
        if not force:
            return lease.busy()
        srv.log(f"lease taken over by {src} from {lease.holder} (forced); the robot holds")
    if lease.holder is not None:  # the robot never continues a previous holder's motion
        srv.enter_hold("takeover")
    lease.take(src)
    srv.last_command = None  # the watchdog re-arms with the new holder's first command
    return {"ok": True, "lease": lease.view()}


def release(srv: RobotServer, msg: dict) -> dict:
    """Give the lease back; the robot holds."""
    if not srv.lease.holds(msg["src"]):
        return srv.lease.refusal("release")
    srv.lease.drop()
    srv.last_command = None
    srv.enter_hold("released")
    return {"ok": True}


def observe(srv: RobotServer, msg: dict) -> dict:
    """The robot's latest observation (no lease needed)."""
    return {"ok": True, "obs": obs_body(srv.observation())}


def estop(srv: RobotServer, msg: dict) -> dict:
    """Latch the e-stop (anyone with the key), persist the latch, hold.

    Never refused for its body: a ``reason`` that is not a string is replaced by ``"estop request"`` (strings are cut
    to 200 characters). The answer says whether the latch reached the latch file (``persisted``); when it did not,
    ``warning`` says why, the robot holds (latched in memory) and the server retries the write with every request.
    """
    src = msg["src"]
    reason = msg["body"].get("reason")
    ok = srv.estop_now(reason[:200] if isinstance(reason, str) else "estop request", f"client {src}")
    body = {"ok": True, "persisted": ok, "status": srv.status()}
    if not ok:
        body["warning"] = (f"the e-stop is latched in memory and the robot holds, but it could NOT be written to the "
                           f"latch file {srv.latch.path} ({srv.latch.error}): a crash of the server would lose it. Fix "
                           "the latch file's directory (the server retries the write with every request), or keep the "
                           "robot stopped by its own means")
    return body


def status(srv: RobotServer, msg: dict) -> dict:
    """The server's status (``status`` and ``heartbeat``)."""
    return {"ok": True, "status": srv.status()}


HANDLERS: dict[str, Callable[[RobotServer, dict], dict]] = {
    "step": step, "reset": reset, "rearm": rearm, "acquire": acquire, "release": release,
    "observe": observe, "estop": estop, "status": status, "heartbeat": status}
