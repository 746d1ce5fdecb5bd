"""The actor ↔ learner link of online RL on a robot: authenticated msgpack over ZeroMQ.

The same wire format and security rules as the robot bridge (:mod:`robotrl.real_robot.protocol`:
``[payload, mac]`` frames, HMAC-SHA256 over every field, no pickle, arrays as msgpack
extension type 1, bounded sizes, per-sender sequence numbers, a timestamp window), with
larger limits (:func:`link_limits`): transition batches and weight arrays are bigger than
one robot command. The learner binds a ROUTER socket (role ``"server"``, ident
``learner_id``); each actor connects a DEALER (role ``"client"``).

Messages (``type``; every body also carries ``actor_id`` on requests):

==============  =====  ===================================================================
``hello``       req    ``actor_id, spec (RobotSpec dict), version`` → ``welcome``
``welcome``     rep    ``have (int, -1 none)``: the highest transition index of this actor
                       the learner holds durably; ``version``: its latest weights version;
                       ``frames`` (bool): the learner trains on the robot's camera frames (send them)
``batch``       req    ``actor_id, first, n, arrays...`` (:data:`TRANSITION_FIELDS`; to a learner that
                       asked for ``frames``, also ``frames/<camera>``, ``next_frames/<camera>``
                       uint8 ``(n, H, W, C)``) → ``ack``
``ack``         rep    ``received``: highest index of the actor held (in memory);
                       ``durable``: highest index held in the learner's last checkpoint
``sync``        req    ask for a checkpoint now (end of a run) → ``ack`` once it is written
``ping``        req    heartbeat with the actor's weights ``version`` → ``ack``
``weights``     rep    ``version, target, kwargs, names, arrays, sent_at`` (unsolicited push)
``error``       rep    ``code, text``: the request was refused (``spec_mismatch``, ``too_many_actors``,
                       ``bad_batch``, ``hello_first``: a restarted learner that has not been greeted)
==============  =====  ===================================================================

Delivery: every transition has an actor-wide index ``n`` (0, 1, 2, ...) besides its
``(episode, step)``; both only grow. The actor writes each batch to its spill directory
(:class:`SpillQueue`, one atomically written file per batch) before sending it, resends a
batch whose ack does not come, and deletes spilled batches only once they are **durable**
(in a learner checkpoint). The learner takes a transition only if its ``(episode, step)``
is after the last one it holds of that actor (:class:`Dedup`), so a resend is acknowledged
but never counted twice, and a learner restarted from its checkpoint tells the actor in
``welcome`` where to resume: nothing recorded is lost, nothing is counted twice.

Sources: SERL's actor/learner over ZeroMQ (agentlace), LeRobot HIL-SERL's gRPC services
(``SendTransitions``, ``StreamParameters``; weights pushed every few seconds).
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import zmq

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ProtocolError
from robotrl.real_robot.link_codec import (  # noqa: F401  (re-exported: the link's public names)
    TRANSITION_FIELDS,
    Dedup,
    SpillQueue,
    arrays_to_state,
    atomic_write_bytes,
    batch_rows,
    camera_link_limits,
    check_batch,
    frame_fields,
    frame_rows,
    link_limits,
    stack_transitions,
    state_to_arrays,
    with_next_frames,
    without_frames,
)
from robotrl.real_robot.protocol import Authenticator, Limits
from robotrl.real_robot.screening import ConnectionGuard, Screen

#: Largest message a connection may send before one of its messages passed the MAC (a ``hello``; bytes). Larger
#: messages from such a connection are dropped before hashing and count towards its quarantine.
HELLO_BYTES = 65536

__all__ = ["HELLO_BYTES", "TRANSITION_FIELDS", "ActorLink", "curve_client", "curve_server", "Dedup", "LearnerEndpoint", "SpillQueue", "Weights", "arrays_to_state",
           "atomic_write_bytes", "camera_link_limits", "check_batch", "frame_fields", "frame_rows", "link_limits",
           "load_weights", "save_weights", "stack_transitions", "state_to_arrays", "with_next_frames", "without_frames"]


# ----------------------------------------------------------------------------- actor side
@dataclass
class Weights:
    """One weights push: ``version`` (learner's count), policy class ``target`` and ``kwargs``,
    ``state`` (``{name: tensor}``), ``sent_at`` (learner wall clock, s) and ``received_at`` (actor's)."""

    version: int
    target: str
    kwargs: dict
    state: dict
    sent_at: float
    received_at: float


def save_weights(path: str | os.PathLike, w: Weights) -> Path:
    """Keep ``w`` on disk (atomic ``.npz`` of named arrays plus a JSON ``__meta__`` entry; no pickle),
    so that a restarted actor acts with its last weights before (or without) a learner."""
    import json

    import numpy as np

    from robotrl.checkpoint import save_arrays

    names, arrays = state_to_arrays(w.state)
    meta = json.dumps({"version": w.version, "target": w.target, "kwargs": w.kwargs, "names": names}, default=str)
    return save_arrays(path, {"__meta__": np.frombuffer(meta.encode(), np.uint8),
                              **{f"w{i}": a for i, a in enumerate(arrays)}})


def load_weights(path: str | os.PathLike) -> Weights | None:
    """The weights :func:`save_weights` kept at ``path`` (``None``: no such file).

    Raises:
        CheckpointError: the file is damaged (delete it to wait for the learner's weights instead).
    """
    import json

    from robotrl.checkpoint import load_arrays
    from robotrl.errors import CheckpointError

    if not Path(path).exists():
        return None
    try:
        z = load_arrays(path)
        meta = json.loads(bytes(z["__meta__"]).decode())
        state = arrays_to_state(meta["names"], [z[f"w{i}"] for i in range(len(meta["names"]))])
        return Weights(int(meta["version"]), str(meta["target"]), dict(meta["kwargs"]), state, 0.0, time.time())
    except (CheckpointError, KeyError, ValueError, TypeError, ProtocolError) as exc:
        raise CheckpointError(f"actor weights file {path} is damaged ({exc}); delete it to start from the "
                              "learner's next push") from None


class ActorLink:
    """The actor's end: a background thread that streams transitions and receives weights.

    The control loop calls :meth:`submit` per transition and reads :meth:`latest_weights`;
    nothing it calls blocks on the network. The thread batches transitions (up to
    ``batch_size`` or every ``flush_s``), spills each batch (:class:`SpillQueue`) before
    sending it, sends one batch at a time and moves on at its ack, resends after
    ``ack_timeout_s``, and after ``link_timeout_s`` of silence reopens the socket and says
    ``hello`` again; the learner's ``welcome`` says from which index to resend.

    Args:
        endpoint: the learner's ``tcp://host:port``.
        key: shared key (>= 16 bytes; the robot bridge's or its own).
        actor_id: stable id of this actor (the learner deduplicates per actor id).
        spec: the robot's :class:`~robotrl.real_robot.interface.RobotSpec` as a dict.
        spill_dir: where unacknowledged batches are kept.
        learner_id: the learner's id (bound into every message's MAC).
        batch_size, flush_s: batching (transitions, s); a camera robot's batches hold at most
            :func:`frame_rows` transitions (their frames fit one message).
        ack_timeout_s, link_timeout_s, heartbeat_s: resend, loss and ping periods (s).
        limits: :func:`link_limits`; raised here for the frames of ``spec``'s cameras (:func:`camera_link_limits`).

    A camera robot's transitions carry their frames (``images`` / ``next_images`` in the rows): they are spilled
    with them and sent to a learner whose ``welcome`` asks for ``frames``; a learner of states gets the batches
    without them.
        weights_file: keep the newest weights here (:func:`save_weights`; ``None``: not kept).
        curve_cert_file, curve_server_public_file: CurveZMQ (:func:`curve_client`): this actor's secret
            certificate and the learner's public one (both or neither; the learner lists the actor's public
            certificate in its ``curve_clients_dir``).

    Attributes:
        connected: a learner answered within ``link_timeout_s``.
        acked / durable: highest index the learner holds in memory / in its checkpoint.
        sent_batches, resent_batches, reconnects, welcomes: counters.
        weights_latency_s: ``received_at - sent_at`` of each weights push (s).
        error: the learner's last ``error`` message (e.g. a wrong robot spec), if any.
    """

    def __init__(self, endpoint: str, key: bytes, actor_id: str, spec: dict, spill_dir: str | os.PathLike, *,
                 learner_id: str = "learner", batch_size: int = 64, flush_s: float = 0.05,
                 ack_timeout_s: float = 1.0, link_timeout_s: float = 3.0, heartbeat_s: float = 0.5,
                 limits: Limits | None = None, weights_file: str | os.PathLike | None = None,
                 curve_cert_file: str | os.PathLike | None = None, curve_server_public_file: str | os.PathLike | None = None):
        if (curve_cert_file is None) != (curve_server_public_file is None):
            raise ConfigError("CurveZMQ needs both curve_cert_file (this actor's secret certificate) and "
                              "curve_server_public_file (the learner's public certificate), or neither")
        self._curve = (curve_cert_file, curve_server_public_file) if curve_cert_file is not None else None
        if not actor_id or len(actor_id) > 64:
            raise ConfigError(f"actor_id must be 1..64 characters, got {actor_id!r}")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        from robotrl.real_robot.interface import RobotSpec

        try:
            rspec = RobotSpec.from_dict(spec) if isinstance(spec, dict) else None
        except (KeyError, TypeError, ValueError):  # a partial spec (tests): the learner refuses it at hello
            rspec = None
        cameras = rspec.cameras if rspec is not None else ()
        self.limits = camera_link_limits(cameras, limits or link_limits())  # the deliberate raise for frames
        if rspec is not None:  # every batch fits the learner's request limit (issue 45: larger ones are cut)
            batch_size = min(int(batch_size), batch_rows(rspec.observation.dim, rspec.action.dim, cameras, self.limits))
        self.endpoint, self.actor_id, self.spec, self.learner_id = endpoint, actor_id, spec, learner_id
        self.auth = Authenticator(key, ident=f"{actor_id}.{secrets.token_hex(4)}", limits=self.limits, role="client")
        self.batch_size, self.flush_s = int(batch_size), float(flush_s)
        self.ack_timeout_s, self.link_timeout_s, self.heartbeat_s = float(ack_timeout_s), float(link_timeout_s), float(heartbeat_s)
        self.spill = SpillQueue(spill_dir, self.limits)
        self.weights_file = Path(weights_file) if weights_file is not None else None
        self._in: queue.SimpleQueue[dict] = queue.SimpleQueue()
        self._pending_rows: list[dict] = []
        self._first_pending_at: float | None = None
        self._weights: Weights | None = None
        self._wlock = threading.Lock()
        self.version = -1
        self.connected = False
        self.acked = self.durable = -1
        self._cursor = -1  # highest index sent in the current learner session (resends restart below)
        self._inflight: tuple[int, float] | None = None  # (last index of the batch in flight, sent at)
        self._welcomed = False
        self.learner_wants_frames = False  # the learner's welcome says whether it trains on the frames
        self._epoch = ""
        self._last_heard = 0.0
        self._last_hello = 0.0
        self._last_ping = 0.0
        self._last_sync = 0.0
        self._sync_wanted = threading.Event()
        self._spill_wanted = threading.Event()
        self._submitted = self._spilled = 0  # rows queued by the control loop / written to the spill queue
        self._sync_done_through = -1
        self.sent_batches = self.resent_batches = self.reconnects = self.welcomes = 0
        self.weights_latency_s: list[float] = []
        self.error: str | None = None
        self._stop = threading.Event()
        # its own context (one I/O thread), not the process-wide instance: nothing else in the process (a robot
        # client, another link, a library) can leave the link's connection without an I/O thread or descriptors
        self._ctx = zmq.Context()
        self._sock: zmq.Socket | None = None
        self._open()
        self._thread = threading.Thread(target=self._run, name="actor-link", daemon=True)
        self._thread.start()

    # ---- control-loop side ---------------------------------------------------------------
    def submit(self, row: dict) -> None:
        """Queue one transition (keys :data:`TRANSITION_FIELDS`) for sending (never blocks)."""
        self._submitted += 1
        self._in.put(row)

    def spill_now(self, timeout_s: float = 5.0) -> bool:
        """Block until every submitted transition is in the on-disk spill queue (the link thread
        writes it), up to ``timeout_s`` seconds; returns whether it got there.

        The actor calls it before it records an episode as finished and drops its journal: a
        transition in a finished episode is then never only in memory, so a kill -9 right after
        the episode ends cannot leave it recorded but never sent to the learner.
        """
        self._spill_wanted.set()
        end = time.monotonic() + timeout_s
        try:
            while self._spilled < self._submitted:
                if time.monotonic() >= end or not self._thread.is_alive():
                    return False
                time.sleep(0.001)
            return True
        finally:
            self._spill_wanted.clear()

    @property
    def alive(self) -> bool:
        """Whether the link's thread runs (``False`` after :meth:`close`, or when it stopped on an error: then
        ``error`` says why and nothing more is sent)."""
        return self._thread.is_alive()

    def latest_weights(self) -> Weights | None:
        """The newest weights received (``None`` before the first push)."""
        with self._wlock:
            return self._weights

    def set_version(self, version: int) -> None:
        """The weights version the actor acts with (reported in pings)."""
        self.version = int(version)

    def flush_and_sync(self, timeout_s: float) -> bool:
        """Send everything queued, ask the learner to checkpoint, and wait until every spilled
        transition is durable; returns whether that happened within ``timeout_s`` (s)."""
        self._sync_wanted.set()
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self._in.empty() and not self._pending_rows and not self.spill.batches:
                return True
            time.sleep(0.02)
        return False

    def close(self) -> None:
        """Stop the thread, close the socket and its context (spilled batches stay on disk)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if self._sock is not None:
            self._sock.close(linger=0)
            self._sock = None
        if not self.alive:  # a thread still running keeps using the context
            self._ctx.term()

    # ---- thread ------------------------------------------------------------------------------
    def _open(self) -> None:
        if self._sock is not None:
            self._sock.close(linger=0)  # drop queued stale messages: they would arrive late and be rejected
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, self.limits.max_bytes + 1024)
        self._sock.setsockopt(zmq.SNDHWM, 64)
        if self._curve is not None:
            curve_client(self._sock, *self._curve)
        self._sock.connect(self.endpoint)
        self._welcomed = False
        self._inflight = None

    def _send(self, type_: str, body: dict) -> bool:
        frames, _ = self.auth.seal(type_, {"actor_id": self.actor_id, **body}, dst=self.learner_id)
        try:
            self._sock.send_multipart(frames, flags=zmq.NOBLOCK, copy=False)
            return True
        except zmq.Again:
            return False

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as exc:  # the thread ends: say why (status()["error"], "alive": false), never silently
            self.error = f"link thread stopped: {type(exc).__name__}: {exc}"
            logging.getLogger(__name__).exception(self.error)

    def _loop(self) -> None:
        poller = zmq.Poller()
        while not self._stop.is_set():
            now = time.monotonic()
            self._collect(now)
            if self._welcomed and now - self._last_heard > self.link_timeout_s:
                self.connected = False
                self.reconnects += 1
                self._open()
            if not self._welcomed and now - self._last_hello > min(1.0, self.ack_timeout_s):
                self._last_hello = now
                self._send("hello", {"spec": self.spec, "version": self.version})
            if self._welcomed:
                self._pump(now)
            poller.register(self._sock, zmq.POLLIN)
            events = dict(poller.poll(10))
            poller.unregister(self._sock)
            if events:
                while True:
                    try:
                        frames = self._sock.recv_multipart(flags=zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    try:
                        msg = self.auth.open(frames)
                    except ProtocolError:
                        continue  # counted in auth.rejected
                    self._handle(msg)

    def _collect(self, now: float) -> None:
        """Move queued rows into batches; spill a batch when full or ``flush_s`` old."""
        while True:
            try:
                row = self._in.get_nowait()
            except queue.Empty:
                break
            if not self._pending_rows:
                self._first_pending_at = now
            self._pending_rows.append(row)
            if len(self._pending_rows) >= self.batch_size:
                self._spill_pending()
        if self._pending_rows and (now - (self._first_pending_at or now) >= self.flush_s or self._sync_wanted.is_set()
                                   or self._spill_wanted.is_set()):
            self._spill_pending()

    def _spill_pending(self) -> None:
        cols: dict = stack_transitions(self._pending_rows)
        cols["count"] = len(self._pending_rows)
        self.spill.put(cols)
        self._spilled += len(self._pending_rows)
        self._pending_rows = []
        self._first_pending_at = None

    def _pump(self, now: float) -> None:
        """Send the next batch, resend one unacknowledged too long, ping when idle, ask for a sync."""
        if self._inflight is not None:
            last, sent_at = self._inflight
            if self.acked >= last:
                self._inflight = None
            elif now - sent_at > self.ack_timeout_s:
                self._inflight = None
                self._cursor = self.acked  # resend from the first index not acknowledged
                self.resent_batches += 1
        if self._inflight is None:
            cols = self.spill.first_after(max(self._cursor, self.acked))
            if cols is not None:
                if not self.learner_wants_frames:
                    cols = without_frames(cols)
                if self._send("batch", cols):
                    last = int(cols["n"][-1])
                    self._inflight = (last, now)
                    self._cursor = last
                    self.sent_batches += 1
                    return
        if self._sync_wanted.is_set() and self._inflight is None and not self._pending_rows and self.spill.batches \
                and now - self._last_sync > self.ack_timeout_s:
            self._last_sync = self._last_ping = now
            self._send("sync", {"version": self.version})
        elif now - self._last_ping > self.heartbeat_s:
            self._last_ping = now
            self._send("ping", {"version": self.version})

    def _handle(self, msg: dict) -> None:
        t, b = msg["type"], msg["body"]
        self._last_heard = time.monotonic()
        if t == "welcome":
            if self._welcomed and msg["epoch"] == self._epoch:
                return  # an answer to an earlier hello of this session: nothing new
            self._epoch = msg["epoch"]
            have = int(b.get("have", -1))
            self.welcomes += 1
            self._welcomed = self.connected = True
            self.learner_wants_frames = bool(b.get("frames", False))
            self.error = None
            # the learner holds everything through `have` durably (its checkpoint): resend after it
            self.acked = self.durable = have
            self._cursor = have
            self._inflight = None
            self.spill.drop_through(have)
        elif t == "ack":
            self.connected = True
            self.acked = max(self.acked, int(b.get("received", -1)))
            durable = int(b.get("durable", -1))
            if durable > self.durable:
                self.durable = durable
                self.spill.drop_through(durable)
        elif t == "weights":
            try:
                state = arrays_to_state(list(b["names"]), list(b["arrays"]))
                w = Weights(int(b["version"]), str(b["target"]), dict(b["kwargs"]), state, float(b["sent_at"]), time.time())
            except (KeyError, TypeError, ValueError, ProtocolError) as exc:
                self.error = f"bad weights message: {exc}"
                return
            with self._wlock:
                newer = self._weights is None or w.version > self._weights.version
                if newer:
                    self._weights = w
                    self.weights_latency_s.append(w.received_at - w.sent_at)
            if newer and self.weights_file is not None:  # on this thread: the control loop never waits on disk
                save_weights(self.weights_file, w)
        elif t == "error":
            self.error = f"learner refused: {b.get('code')}: {b.get('text')}"
            if b.get("code") in ("spec_mismatch", "hello_first", "too_many_actors"):
                self._welcomed = False  # say hello (again): a restarted learner, or wait for the problem to be fixed
                self._inflight = None
            if b.get("code") == "hello_first":
                self.error = None

    def status(self) -> dict:
        """Counters of the link (JSON-able)."""
        return {"connected": self.connected, "acked": self.acked, "durable": self.durable,
                "spilled": len(self.spill), "sent_batches": self.sent_batches, "resent_batches": self.resent_batches,
                "reconnects": self.reconnects, "welcomes": self.welcomes, "rejected": dict(self.auth.rejected),
                "error": self.error, "alive": self.alive}


# ----------------------------------------------------------------------------- learner side
class LearnerEndpoint:
    """The learner's end: a ROUTER socket polled from the learner's own loop (no thread).

    Flood defences (issue 45; the robot server's, :mod:`~robotrl.real_robot.screening`): ZeroMQ drops the
    connection of a frame above ``limits.max_request_bytes`` (the largest batch an actor sends, :func:`batch_rows`)
    before allocating it, and queues at most ``RCVHWM`` (8) messages per connection; a connection that has not yet
    sent an authenticated message may send at most :data:`HELLO_BYTES` per message (larger ones are dropped
    unhashed); a connection that sent :data:`~robotrl.real_robot.screening.QUARANTINE_AFTER` bad messages is
    ignored and cut; unauthenticated connections are bounded per peer address and in total and cut after
    ``unauth_timeout_s`` (:class:`~robotrl.real_robot.screening.ConnectionGuard`). Memory held for junk is thus
    at most about ``(max_unauth + 1) × max_request_bytes``.

    Links that leave the host may add CurveZMQ (``zmq.auth``): ``curve_secret_file`` is the learner's secret
    certificate (``zmq.auth.create_certificates``) and ``curve_clients_dir`` holds the public certificate of
    every actor allowed to connect (one per client); an actor without an allowed key cannot even connect
    (its handshake is refused), and everything on the wire is encrypted. The HMAC key is still checked.

    Args:
        endpoint: where to bind (``tcp://127.0.0.1:0`` = a free loopback port).
        key: shared key.
        learner_id: this learner's id (actors address it).
        limits: :func:`link_limits`.
        max_unauth, max_unauth_per_peer, unauth_timeout_s: connection bounds (defaults 8, 4, 5 s).
        curve_secret_file, curve_clients_dir: CurveZMQ (both or neither).

    Attributes:
        endpoint: the bound endpoint; epoch: random id of this learner instance.
        peers: ``{actor_id: routing id}`` of the actors heard from.
        guard: the :class:`~robotrl.real_robot.screening.ConnectionGuard`; ``screen``: the per-connection quarantine.

    Raises:
        ConfigError: only one of the CurveZMQ settings, an unreadable certificate, bad connection bounds.
    """

    def __init__(self, endpoint: str, key: bytes, *, learner_id: str = "learner", limits: Limits | None = None,
                 max_unauth: int = 8, max_unauth_per_peer: int = 4, unauth_timeout_s: float = 5.0,
                 curve_secret_file: str | os.PathLike | None = None, curve_clients_dir: str | os.PathLike | None = None):
        self.limits = limits or link_limits()
        self.auth = Authenticator(key, ident=learner_id, limits=self.limits, role="server")
        self.epoch = secrets.token_hex(8)
        self._ctx = zmq.Context.instance()
        self.sock = self._ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, self.limits.max_request_bytes + 1024)
        self.sock.setsockopt(zmq.RCVHWM, 8)
        self.sock.setsockopt(zmq.HANDSHAKE_IVL, 2000)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._zap = None
        try:
            if (curve_secret_file is None) != (curve_clients_dir is None):
                raise ConfigError("CurveZMQ needs both curve_secret_file (the learner's secret certificate) and "
                                  "curve_clients_dir (the allowed actors' public certificates), or neither")
            if curve_secret_file is not None:
                self._zap = curve_server(self._ctx, self.sock, curve_secret_file, curve_clients_dir)
            self.guard = ConnectionGuard(self.sock, max_unauth=max_unauth, max_unauth_per_peer=max_unauth_per_peer,
                                         unauth_timeout_s=unauth_timeout_s)
            self.sock.bind(endpoint)
        except BaseException:
            self.close()
            raise
        self.endpoint = self.sock.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.guard.bound(self.endpoint)
        self.screen = Screen(self.auth)
        self._known: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._swept = 0.0
        self.peers: dict[str, bytes] = {}
        self.peer_src: dict[str, str] = {}

    def _bad(self, ident: zmq.Frame, rid: bytes, reason: str) -> None:
        self.screen.strike(rid, reason)
        if self.screen.is_quarantined(rid):
            self.guard.cut(ident.get(zmq.SRCFD), "quarantine")

    def recv(self, timeout_ms: int) -> list[tuple[bytes, dict]]:
        """Every authenticated request waiting (after up to ``timeout_ms``): ``[(routing id, msg)]``.

        Rejected messages are dropped and counted in ``auth.rejected`` (``screen.quarantined``: dropped unhashed).
        """
        out: list[tuple[bytes, dict]] = []
        now = time.monotonic()
        if now - self._swept > 0.05 or self.guard.monitor.poll(0):
            self.guard.sweep()
            self._swept = now
        if not self.sock.poll(timeout_ms, zmq.POLLIN):
            return out
        for _ in range(256):  # then back to the caller (its training step), the rest stays queued
            try:
                ident = self.sock.recv(flags=zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return out
            rest = self.sock.recv_multipart(flags=zmq.NOBLOCK, copy=False) if ident.more else []
            rid = bytes(ident.bytes)
            if self.screen.is_quarantined(rid):
                self.screen.quarantined += 1
                continue
            if len(rest) != 2:
                self.auth.rejected["malformed"] += 1
                self._bad(ident, rid, "malformed")
                continue
            if rid not in self._known and len(rest[0]) > HELLO_BYTES:  # a stranger's large message: not even hashed
                self.auth.rejected["oversized"] += 1
                self._bad(ident, rid, "oversized")
                continue
            msg = self.screen.open([rid, *rest])
            if msg is None:
                if self.screen.is_quarantined(rid):
                    self.guard.cut(ident.get(zmq.SRCFD), "quarantine")
                continue
            actor = msg["body"].get("actor_id")
            if not isinstance(actor, str) or not 0 < len(actor) <= 64:
                self.auth.rejected["malformed"] += 1
                continue
            if rid not in self._known:
                self.guard.authenticated(ident.get(zmq.SRCFD))
                self._known[rid] = None
                while len(self._known) > 4096:
                    self._known.popitem(last=False)
            self.peers[actor] = rid
            self.peer_src[actor] = msg["src"]
            out.append((rid, msg))
        return out

    def reply(self, actor_id: str, type_: str, body: dict) -> bool:
        """Send ``type_`` to ``actor_id``; ``False`` if that actor is gone (its socket closed)."""
        rid = self.peers.get(actor_id)
        if rid is None:
            return False
        frames, _ = self.auth.seal(type_, body, dst=self.peer_src[actor_id], epoch=self.epoch)
        try:
            self.sock.send_multipart([rid, *frames], flags=zmq.NOBLOCK, copy=False)
            return True
        except (zmq.Again, zmq.ZMQError):
            return False

    def close(self) -> None:
        """Close the socket (and the CurveZMQ authenticator, if any)."""
        guard = getattr(self, "guard", None)
        if guard is not None:
            guard.close()
        self.sock.close(linger=0)
        if self._zap is not None:
            self._zap.stop()
            self._zap = None


def curve_server(ctx: zmq.Context, sock: zmq.Socket, secret_file: str | os.PathLike, clients_dir: str | os.PathLike):
    """Make ``sock`` (not yet bound) a CurveZMQ server with the secret certificate ``secret_file`` that admits only
    the clients whose public certificates are in ``clients_dir``; returns the running
    ``zmq.auth.thread.ThreadAuthenticator`` (stop it after closing the socket).

    Raises:
        ConfigError: a certificate that cannot be read, or no client certificate at all.
    """
    import zmq.auth
    from zmq.auth.thread import ThreadAuthenticator

    try:
        public, secret = zmq.auth.load_certificate(str(secret_file))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read the learner's CurveZMQ certificate {secret_file} ({exc}); create one with "
                          "zmq.auth.create_certificates(dir, 'learner')") from None
    if secret is None:
        raise ConfigError(f"{secret_file} is a public certificate; the learner needs its .key_secret file")
    if not Path(clients_dir).is_dir() or not list(Path(clients_dir).glob("*.key")):
        raise ConfigError(f"no client certificates (*.key) in {clients_dir}: copy each actor's public certificate there")
    zap = ThreadAuthenticator(ctx)
    zap.start()
    zap.configure_curve(domain="*", location=str(clients_dir))
    sock.curve_secretkey, sock.curve_publickey, sock.curve_server = secret, public, True
    return zap


def curve_client(sock: zmq.Socket, cert_file: str | os.PathLike, server_public_file: str | os.PathLike) -> None:
    """Make ``sock`` (not yet connected) a CurveZMQ client with its secret certificate ``cert_file`` that talks
    only to the server whose public certificate is ``server_public_file``.

    Raises:
        ConfigError: a certificate that cannot be read.
    """
    import zmq.auth

    try:
        public, secret = zmq.auth.load_certificate(str(cert_file))
        server_public, _ = zmq.auth.load_certificate(str(server_public_file))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read a CurveZMQ certificate ({exc}); create them with zmq.auth.create_certificates") from None
    if secret is None:
        raise ConfigError(f"{cert_file} is a public certificate; the actor needs its .key_secret file")
    sock.curve_secretkey, sock.curve_publickey, sock.curve_serverkey = secret, public, server_public
