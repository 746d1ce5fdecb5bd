"""Message codecs and on-disk queues of the actor ↔ learner link (:mod:`~robotrl.real_robot.learner_link`).

What travels and how it is checked, independent of the sockets: the transition columns of a
``batch`` message (:data:`TRANSITION_FIELDS`, :func:`stack_transitions`, :func:`check_batch`; a camera robot's frames as
``frames/<camera>`` uint8 ``(n, H, W, C)`` beside them, each next observation's frame only where it is not the next
row's frame, :func:`frame_fields`, :func:`with_next_frames`),
weights as named arrays (:func:`state_to_arrays`, :func:`arrays_to_state`; never pickles),
the link's size limits (:func:`link_limits`, raised deliberately for frames by :func:`camera_link_limits`),
the learner's per-actor de-duplication (:class:`Dedup`) and the actor's spill directory of
unacknowledged batches (:class:`SpillQueue`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import time
from pathlib import Path

import numpy as np

from robotrl.files import atomic_write
from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ProtocolError
from robotrl.real_robot.protocol import Limits, decode, encode

#: Per-transition arrays of a ``batch`` message: name → (dtype, per-row shape kind).
#: ``"o"``: ``(Do,)``, ``"a"``: ``(Da,)``, ``""``: scalar.
TRANSITION_FIELDS: dict[str, tuple[str, str]] = {
    "n": ("<i8", ""), "episode": ("<i8", ""), "step": ("<i8", ""),
    "obs": ("<f4", "o"), "next_obs": ("<f4", "o"),
    "action": ("<f4", "a"),            # applied (executed) action: what the buffers learn from
    "requested": ("<f4", "a"),         # what the loop sent before the safety supervisor (NaN: hold)
    "policy_action": ("<f4", "a"),     # the policy's proposal (NaN: none)
    "base_action": ("<f4", "a"),       # a residual policy's base action executed this step (a chunked base's queued
                                       # action; NaN: none): the learner stores it where the agent declares it
    "reward": ("<f8", ""), "terminated": ("?", ""), "truncated": ("?", ""), "success": ("?", ""),
    "intervention": ("?", ""), "safety_modified": ("?", ""), "held": ("?", ""),
    "learner_connected": ("?", ""), "weights_version": ("<i8", ""),
    "time": ("<f8", ""), "rtt_s": ("<f8", ""), "jitter_s": ("<f8", ""),
}


#: Default cap of a request to the learner (a transition batch; bytes). The actor cuts its batches to fit it
#: (:func:`batch_rows`), so nothing legitimate is larger, and a learner never holds more than this per message
#: of a connection (ZeroMQ drops the connection of a larger frame before allocating it). Issue 45.
REQUEST_BYTES = 8 << 20


def link_limits(max_message_bytes: int = 64 << 20, max_elems: int = 1 << 24, max_skew_s: float = 5.0,
                max_request_bytes: int | None = None) -> Limits:
    """Message :class:`Limits` of the learner link.

    Args:
        max_message_bytes: largest reply (weights push, learner → actor; bytes); weights of a 3×1024 MLP are ~13 MB.
        max_elems: largest array (elements).
        max_skew_s: accepted clock difference between actor and learner (s).
        max_request_bytes: largest request (transition batch, actor → learner; bytes); default
            ``min(max_message_bytes, REQUEST_BYTES)`` (8 MiB). The actor fits its batches to it; a camera robot's
            limits are raised for its frames (:func:`camera_link_limits`).
    """
    req = min(int(max_message_bytes), REQUEST_BYTES) if max_request_bytes is None else int(max_request_bytes)
    return Limits(max_bytes=int(max_message_bytes), max_request_bytes=req,
                  max_elems=int(max_elems), max_len=4096, max_skew_s=float(max_skew_s))


def row_bytes(obs_dim: int, action_dim: int, cameras=()) -> int:
    """Bytes of one transition in a ``batch`` message at most (:data:`TRANSITION_FIELDS`, plus its observation's
    and next observation's frame of every camera)."""
    per = {"o": int(obs_dim), "a": int(action_dim), "": 1}
    cols = sum(np.dtype(dt).itemsize * per[kind] for dt, kind in TRANSITION_FIELDS.values())
    return cols + 2 * sum(math.prod(s) for s in _frame_shapes(cameras)) + 1  # + next_follows


def batch_rows(obs_dim: int, action_dim: int, cameras, limits: Limits) -> int:
    """Transitions that fit one ``batch`` request under ``limits``: half of ``max_request_bytes`` (the rest: the
    msgpack framing of the arrays and the envelope) over :func:`row_bytes`. At least 1.

    The actor cuts its batches to this; :func:`camera_link_limits` makes sure that at least a few rows fit.
    """
    return max(1, (limits.max_request_bytes // 2) // row_bytes(obs_dim, action_dim, cameras))


def _frame_shapes(cameras) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in getattr(c, "shape", c)) for c in cameras]


def frame_rows(cameras, limits: Limits) -> int:
    """Transitions with frames that fit one ``batch`` request under ``limits``: each row carries at most its
    observation's and its next observation's frame of every camera (the worst case: every row ends an episode),
    and a batch may fill half of ``max_request_bytes`` with them (the rest: the state columns and the envelope).
    At least 1.

    Args:
        cameras: :class:`~robotrl.real_robot.interface.CameraSpec` items (or ``(H, W, C)`` shapes).
        limits: the link's :class:`Limits` (:func:`link_limits`).
    """
    per_row = 2 * sum(math.prod(s) for s in _frame_shapes(cameras))
    return max(1, (limits.max_request_bytes // 2) // per_row) if per_row else 65536


#: Camera transitions a batch request is sized for: the actor's default ``batch_size`` (:func:`camera_link_limits`
#: raises the request limit for their frames, up to ``max_bytes``).
FRAME_BATCH_ROWS = 64


def camera_link_limits(cameras, base: Limits) -> Limits:
    """The link's limits raised deliberately for a camera robot's frames (as
    :func:`~robotrl.real_robot.protocol.camera_limits` raises the bridge's): ``max_request_bytes`` to hold the frames
    of :data:`FRAME_BATCH_ROWS` transitions (never above ``max_bytes``), ``max_elems`` to hold the frames of
    :func:`frame_rows` transitions of the largest camera in one array ``(n, H, W, C)``. ``max_bytes`` stays the
    configured bound (``max_message_bytes``); the actor cuts its batches to :func:`frame_rows` rows, so a batch of
    frames always fits. Actor and learner compute the same limits from the same cameras and ``max_message_bytes``.

    Returns:
        a new :class:`Limits` (``base`` itself when there is no camera).
    """
    shapes = _frame_shapes(cameras)
    if not shapes:
        return base
    per_row = 2 * sum(math.prod(s) for s in shapes)
    req = min(base.max_bytes, max(base.max_request_bytes, 2 * FRAME_BATCH_ROWS * per_row + 65536))
    base = dataclasses.replace(base, max_request_bytes=req)
    need = frame_rows(shapes, base) * max(math.prod(s) for s in shapes)
    return dataclasses.replace(base, max_elems=max(base.max_elems, need))


def frame_fields(cameras) -> dict[str, tuple[int, ...]]:
    """The camera columns of a ``batch`` message, ``{"frames/<camera>": (H, W, C)}``: uint8 ``(n, H, W, C)``, each
    transition's observation frame. Next observations' frames travel compactly (:func:`stack_transitions`):
    ``next_follows`` bool ``(n,)`` marks the rows whose next frame is the following row's frame (the same step of an
    episode going on), and ``next_frames/<camera>`` uint8 ``(m, H, W, C)`` holds the others' (episode ends, the
    batch's last row), in row order; :func:`with_next_frames` rebuilds the ``(n, H, W, C)`` next frames."""
    return {f"frames/{c.name}": tuple(int(d) for d in c.shape) for c in cameras}


def with_next_frames(body: dict, cameras) -> dict:
    """``body`` (checked by :func:`check_batch`) with every camera's ``next_frames/<camera>`` rebuilt as uint8
    ``(n, H, W, C)``: the following row's frame where ``next_follows``, the sent one elsewhere. A new dict; the
    other arrays are not copied."""
    follows = body["next_follows"]
    out = dict(body)
    for c in cameras:
        frames, sent = body[f"frames/{c.name}"], body[f"next_frames/{c.name}"]
        nxt = np.empty_like(frames)
        nxt[:-1][follows[:-1]] = frames[1:][follows[:-1]]
        nxt[~follows] = sent
        out[f"next_frames/{c.name}"] = nxt
    return out


# ----------------------------------------------------------------------------- weights
def state_to_arrays(state_dict) -> tuple[list[str], list[np.ndarray]]:
    """A module's ``state_dict`` as names and float32/int64/bool NumPy arrays (never pickled).

    Raises:
        ProtocolError: a tensor of more than 4 dimensions (the wire format's limit).
    """
    names, arrays = [], []
    for k, v in state_dict.items():
        a = v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)
        if a.dtype.kind == "f":
            a = a.astype(np.float32)
        elif a.dtype.kind in "iu":
            a = a.astype(np.int64)
        if a.ndim > 4:
            raise ProtocolError(f"weight {k!r} has {a.ndim} dims; the link carries at most 4")
        names.append(str(k))
        arrays.append(np.ascontiguousarray(a))
    return names, arrays


def arrays_to_state(names: list[str], arrays: list[np.ndarray]) -> dict:
    """Inverse of :func:`state_to_arrays`: ``{name: torch.Tensor}``.

    Raises:
        ProtocolError: names and arrays differ in number, or an entry is not an array.
    """
    import torch

    if len(names) != len(arrays) or not all(isinstance(a, np.ndarray) for a in arrays):
        raise ProtocolError(f"weights message has {len(names)} names and {len(arrays)} arrays; they must pair up")
    return {str(k): torch.from_numpy(np.array(a)) for k, a in zip(names, arrays)}


# ----------------------------------------------------------------------------- transitions
def check_batch(body: dict, obs_dim: int, action_dim: int, cameras=()) -> int:
    """Validate a ``batch`` body's arrays; returns its number of rows ``n``.

    Args:
        body: the message body.
        obs_dim, action_dim: ``Do``, ``Da``.
        cameras: the :class:`~robotrl.real_robot.interface.CameraSpec` items whose frames the batch must carry
            (:func:`frame_fields`; empty: frames are not checked, a learner of states ignores them).

    Raises:
        ProtocolError: a field missing, of the wrong dtype or shape, or indices not increasing.
    """
    n = body.get("count")
    if not isinstance(n, int) or not 0 < n <= 65536:
        raise ProtocolError(f"batch count must be an int in [1, 65536], got {n!r}")
    for name, (dtype, kind) in TRANSITION_FIELDS.items():
        a = body.get(name)
        shape = (n,) + ((obs_dim,) if kind == "o" else (action_dim,) if kind == "a" else ())
        if not isinstance(a, np.ndarray) or a.dtype != np.dtype(dtype) or a.shape != shape:
            got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
            raise ProtocolError(f"batch field {name!r} must be {np.dtype(dtype)} {shape}, got {got}; "
                                "actor and learner must run the same robotrl version and robot spec")
    if cameras:
        follows = body.get("next_follows")
        if not isinstance(follows, np.ndarray) or follows.dtype != np.bool_ or follows.shape != (n,) or follows[-1]:
            raise ProtocolError(f"batch field 'next_follows' must be bool ({n},) with its last row False; actor and "
                                "learner must run the same robotrl version")
        m = n - int(follows.sum())
        for name, shape in frame_fields(cameras).items():
            for field, rows in ((name, n), ("next_" + name, m)):
                a = body.get(field)
                if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.shape != (rows, *shape):
                    got = f"{a.dtype}{a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                    raise ProtocolError(f"batch field {field!r} must be uint8 {(rows, *shape)}, got {got}; the actor's "
                                        "robot must send the cameras this learner trains on, at the same frame size")
    if n > 1 and not np.all(np.diff(body["n"]) > 0):
        raise ProtocolError("batch transition indices n must increase")
    return n


#: Fields a row may leave out (NaN then, the size of its ``action``): an actor's rows without a residual policy
OPTIONAL_FIELDS = ("base_action",)


def _missing(name: str, row: dict) -> np.ndarray:
    if name not in OPTIONAL_FIELDS:
        raise KeyError(f"transition row lacks {name!r} (TRANSITION_FIELDS)")
    return np.full(np.shape(row["action"]), np.nan, np.float32)


def stack_transitions(rows: list[dict]) -> dict[str, np.ndarray]:
    """Rows (one dict per transition, keys :data:`TRANSITION_FIELDS`; those of :data:`OPTIONAL_FIELDS` may be left
    out: NaN) → column arrays ``(n, ...)``.

    Rows of a camera robot also carry ``images`` and ``next_images`` ``{camera: uint8 (H, W, C)}`` (the frames taken
    with ``obs`` and ``next_obs``), when every row has both: ``frames/<camera>`` uint8 ``(n, H, W, C)``, and each
    next frame once, as :func:`frame_fields` says: ``next_follows[i]`` where row ``i``'s next frames equal row
    ``i + 1``'s frames (compared, not assumed), ``next_frames/<camera>`` ``(m, H, W, C)`` for the other rows. Within an
    episode that halves the frames on the wire.
    """
    out = {name: np.asarray(np.stack([np.asarray(r[name] if name in r else _missing(name, r)) for r in rows]),
                            np.dtype(dtype))
           for name, (dtype, _) in TRANSITION_FIELDS.items()}
    if all(r.get("images") is not None and r.get("next_images") is not None for r in rows):
        cams = list(rows[0]["images"])
        follows = np.array([i + 1 < len(rows) and all(np.array_equal(rows[i]["next_images"][c], rows[i + 1]["images"][c])
                                                      for c in cams) for i in range(len(rows))], dtype=bool)
        out["next_follows"] = follows
        for cam in cams:
            out[f"frames/{cam}"] = np.stack([np.asarray(r["images"][cam], np.uint8) for r in rows])
            out[f"next_frames/{cam}"] = np.stack([np.asarray(r["next_images"][cam], np.uint8)
                                                  for r, f in zip(rows, follows) if not f])
    return out


def without_frames(cols: dict) -> dict:
    """A batch's columns less its camera frames (for a learner that trains on states)."""
    return {k: v for k, v in cols.items()
            if not (k.startswith("frames/") or k.startswith("next_frames/") or k == "next_follows")}


class Dedup:
    """Which transitions of each actor the learner already holds: the last ``(episode, step)``.

    Indices, episodes and steps only grow on an actor, so a transition is new iff its
    ``(episode, step)`` is after the last one taken (lexicographically).

    Attributes:
        last: ``{actor_id: (episode, step, n)}`` of the last transition taken.
        duplicates: transitions refused as already held.
    """

    def __init__(self, last: dict | None = None):
        self.last: dict[str, tuple[int, int, int]] = {k: tuple(int(x) for x in v) for k, v in (last or {}).items()}
        self.duplicates = 0

    def new_rows(self, actor_id: str, episode: np.ndarray, step: np.ndarray) -> np.ndarray:
        """Boolean mask ``(n,)`` of the rows not yet held (rows in increasing order)."""
        le, ls, _ = self.last.get(actor_id, (-1, -1, -1))
        keep = (episode > le) | ((episode == le) & (step > ls))
        self.duplicates += int((~keep).sum())
        return keep

    def take(self, actor_id: str, episode: int, step: int, n: int) -> None:
        """Record that the transition ``(episode, step)`` with index ``n`` is now held."""
        self.last[actor_id] = (int(episode), int(step), int(n))

    def have(self, actor_id: str) -> int:
        """Highest index ``n`` held of ``actor_id`` (-1: none)."""
        return self.last.get(actor_id, (-1, -1, -1))[2]

    def state(self) -> dict:
        """``{actor_id: [episode, step, n]}`` (checkpointable)."""
        return {k: list(v) for k, v in self.last.items()}


# ----------------------------------------------------------------------------- spill
def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file, fsync and rename (never half a file)."""
    atomic_write(path, lambda f: f.write(data))


class SpillQueue:
    """The actor's unacknowledged transitions on disk: one file per batch, ``<first n>.msgpack``.

    Each file holds the batch's column arrays in the link's own msgpack encoding (no
    pickle), written atomically. Files are deleted once the learner reports them durable.

    Args:
        directory: the spill directory (created).
        limits: decoding limits (:func:`link_limits`).

    Attributes:
        batches: ``OrderedDict`` first index → (last index, column arrays), oldest first.
    """

    def __init__(self, directory: str | os.PathLike, limits: Limits):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.limits = limits
        self.batches: collections.OrderedDict[int, tuple[int, dict]] = collections.OrderedDict()
        for p in sorted(self.dir.glob("*.msgpack"), key=lambda p: int(p.stem)):
            try:
                body = decode(p.read_bytes(), limits)["body"]  # the link's envelope, so decode() checks it
            except ProtocolError as exc:
                raise ProtocolError(f"spill file {p} is unreadable ({exc}); move it away to start without it "
                                    "(its transitions are then lost to the learner)") from None
            self.batches[int(body["n"][0])] = (int(body["n"][-1]), body)
        self.counters = self._read_counters()

    def _read_counters(self) -> dict:
        """``{"next_n", "next_episode"}`` after everything ever spilled here (survives deletions)."""
        c = {"next_n": 0, "next_episode": 0}
        f = self.dir / "counters.json"
        if f.exists():
            try:
                c.update({k: int(v) for k, v in json.loads(f.read_text()).items() if k in c})
            except (ValueError, TypeError, AttributeError):
                raise ConfigError(f"{f} is damaged; delete the spill directory {self.dir} to start a new actor id") from None
        if self.batches:
            body = next(reversed(self.batches.values()))[1]
            c["next_n"] = max(c["next_n"], int(body["n"][-1]) + 1)
            c["next_episode"] = max(c["next_episode"], int(body["episode"][-1]) + 1)
        return c

    def __len__(self) -> int:
        return sum(int(b["count"]) for _, b in self.batches.values())

    @property
    def last_n(self) -> int:
        """Highest spilled index (-1: none)."""
        return max((last for last, _ in self.batches.values()), default=-1)

    @property
    def last_episode_step(self) -> tuple[int, int]:
        """``(episode, step)`` of the highest spilled transition (``(-1, -1)``: none)."""
        if not self.batches:
            return -1, -1
        body = next(reversed(self.batches.values()))[1]
        return int(body["episode"][-1]), int(body["step"][-1])

    def put(self, cols: dict) -> None:
        """Spill one batch (column arrays with ``count``) atomically."""
        first, last = int(cols["n"][0]), int(cols["n"][-1])
        env = {"v": 2, "type": "spill", "dir": "req", "src": "spill", "dst": "", "epoch": "", "seq": 0,
               "ts": time.time(), "body": cols}
        atomic_write_bytes(self.dir / f"{first:015d}.msgpack", encode(env))
        self.batches[first] = (last, cols)
        self.counters = {"next_n": max(self.counters["next_n"], last + 1),
                         "next_episode": max(self.counters["next_episode"], int(cols["episode"][-1]) + 1)}
        atomic_write_bytes(self.dir / "counters.json", json.dumps(self.counters).encode())

    def drop_through(self, n: int) -> int:
        """Delete every batch whose last index is ``<= n``; returns how many transitions went."""
        gone = 0
        for first in list(self.batches):
            last, cols = self.batches[first]
            if last <= n:
                (self.dir / f"{first:015d}.msgpack").unlink(missing_ok=True)
                del self.batches[first]
                gone += int(cols["count"])
        return gone

    def first_after(self, n: int) -> dict | None:
        """The oldest batch holding indices ``> n``, rows ``<= n`` cut off (``None``: none)."""
        for _, (last, cols) in self.batches.items():
            if last <= n:
                continue
            keep = cols["n"] > n
            if keep.all():
                return cols
            sub = {k: (v[keep] if isinstance(v, np.ndarray) else v) for k, v in cols.items()}
            sub["count"] = int(keep.sum())
            return sub
        return None
