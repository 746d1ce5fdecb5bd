"""Bridge messages: msgpack only (never pickle), HMAC-SHA256 authenticated, bound to one robot.

The normative description (for writing a client in another language) is
``docs/protocol.md``; this is a summary.

Wire format: a ZeroMQ multipart message ``[payload, mac]`` (the server's ROUTER socket
sees ``[routing id, payload, mac]``) where ``payload`` is a msgpack map ::

    {"v": 2, "type": "step", "dir": "req", "src": "c1a2...", "dst": "sim:pointmaze-umaze@tcp://127.0.0.1:5555",
     "epoch": "9f3e...", "seq": 17, "ts": 1712345678.123, "body": {...}}

and ``mac = HMAC-SHA256(key, payload)`` (32 bytes): the MAC covers every field, so a
message is bound to its sender (``src``), its target robot (``dst``), its direction
(``dir``: ``"req"`` client→server, ``"rep"`` server→client) and the server instance
(``epoch``, a random id per server start). NumPy arrays travel as msgpack extension
type 1: one ASCII dtype code byte (``f`` float32, ``d`` float64, ``q`` int64, ``B``
uint8, ``?`` bool), one ndim byte (0..4), ``ndim`` little-endian uint32 dims, then the
raw little-endian C-order data; nothing else can be decoded into an object.

A receiver (:class:`Authenticator`) checks, cheapest first, and counts each rejection
in :attr:`Authenticator.rejected`:

1. ``malformed``: not exactly two frames;
2. ``oversized``: payload larger than the receive limit (before any hashing/decoding);
3. ``unauthenticated``: wrong MAC (constant-time comparison; nothing is decoded);
4. ``malformed``: msgpack that does not decode within the limits, or fields missing or
   of the wrong type;
5. ``misdirected``: ``dir`` is not the expected direction, or ``dst`` is not this end's
   id (a request may use ``dst = ""`` only for ``hello``);
6. ``stale``: ``|ts - now| > max_skew_s``;
7. ``replayed``: ``seq`` not larger than the last accepted ``seq`` of that sender
   (for replies: of that sender in that epoch); or, from a sender not (or no longer) in the
   table of the ``remember_peers`` most recent senders, ``ts`` not later than the newest
   ``ts`` of any sender dropped from that table (so flushing the table does not reopen
   a replay window).

Decoding accepts no msgpack extension type but 1 (arrays); type −1 (timestamps, which
msgpack-python decodes by itself) is refused as ``malformed``, and so is nesting deeper than
:data:`MAX_DEPTH` containers.

The key is a shared secret of at least 16 bytes, given as hex in ``$ROBOTRL_ROBOT_KEY``
or in a key file (``robotrl robot-server`` creates one with mode 0600 on request).
Sources: ZeroMQ guide (lazy pirate, heartbeats), SERL's robot servers (HTTP, no auth:
the reason this bridge authenticates every command).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import hmac
import math
import os
import secrets
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ProtocolError

VERSION = 2
MAC_BYTES = 32
DEFAULT_PORT = 5555
_EXT_NDARRAY = 1
_DTYPES = {b"f": np.dtype("<f4"), b"d": np.dtype("<f8"), b"q": np.dtype("<i8"), b"B": np.dtype("u1"), b"?": np.dtype("?")}
_CODES = {v: k for k, v in _DTYPES.items()}
REJECT_REASONS = ("malformed", "oversized", "unauthenticated", "misdirected", "stale", "replayed")
KEY_ENV = "ROBOTRL_ROBOT_KEY"
MAX_DEPTH = 32  # deepest nesting of maps/lists in a message (the envelope's map is depth 1)
FIELDS = ("v", "type", "dir", "src", "dst", "epoch", "seq", "ts", "body")


@dataclass(frozen=True)
class Limits:
    """Size and time limits of messages.

    Attributes:
        max_bytes: largest accepted reply payload (bytes); 64 KiB fits state vectors with room.
        max_request_bytes: largest accepted request payload (bytes) at the server. Requests
            carry one action, so 4 KiB is ample; larger junk is dropped before any hashing.
        max_elems: largest array (elements).
        max_len: longest string/bytes/list/map (entries).
        max_skew_s: largest accepted ``|ts - now|`` (s) of any message (steps have a
            much tighter deadline, see :class:`~robotrl.real_robot.server.RobotServer`).
    """

    max_bytes: int = 65536
    max_request_bytes: int = 4096
    max_elems: int = 16384
    max_len: int = 4096
    max_skew_s: float = 2.0

    def __post_init__(self):
        if self.max_bytes < 256 or self.max_request_bytes < 256:
            raise ConfigError(f"message limits must be >= 256 bytes, got max_bytes={self.max_bytes}, "
                              f"max_request_bytes={self.max_request_bytes}")
        if not self.max_skew_s > 0:
            raise ConfigError(f"max_skew_s must be > 0 s, got {self.max_skew_s}")


def camera_limits(cameras, base: Limits | None = None, *, state_dim: int = 1024) -> Limits:
    """Limits raised just enough for observations with camera frames (the deliberate raise).

    The defaults (64 KiB replies, 16 384-element arrays) fit state vectors; one 128x128 RGB
    frame alone is 49 152 bytes and elements. Both sides of a camera robot's bridge use
    these: ``max_bytes`` = all frames + the state (``state_dim`` float32) + 16 KiB of
    envelope, ``max_elems`` = the largest frame (or the base's, if larger). Requests
    (actions) keep their own small limit.

    Args:
        cameras: :class:`~robotrl.real_robot.interface.CameraSpec` items (or ``(H, W, C)`` shapes).
        base: limits to raise (default :class:`Limits`()).
        state_dim: the largest state vector to leave room for.

    Returns:
        a new :class:`Limits` (``base`` unchanged when there is no camera).
    """
    base = base or Limits()
    shapes = [tuple(getattr(c, "shape", c)) for c in cameras]
    if not shapes:
        return base
    frames = [int(math.prod(s)) for s in shapes]
    need = sum(frames) + 4 * int(state_dim) + 16384
    return dataclasses.replace(base, max_bytes=max(base.max_bytes, need), max_elems=max(base.max_elems, max(frames)))


def check_camera_limits(cameras, limits: Limits, where: str) -> None:
    """Refuse limits too small for observations carrying the frames of ``cameras``.

    A reply larger than the receiver's limit is dropped unanswered (section 5 of
    ``docs/protocol.md``), which would look like a silent server; this check turns that
    into an error before anything is sent.

    Args:
        cameras: :class:`~robotrl.real_robot.interface.CameraSpec` items (or ``(H, W, C)`` shapes).
        limits: the limits of this end of the bridge.
        where: who checks (``"robot server"``, ``"client"``), for the message.

    Raises:
        ConfigError: ``limits.max_bytes`` or ``limits.max_elems`` is below what
            :func:`camera_limits` derives; the message names the numbers and the fix.
    """
    need = camera_limits(cameras, limits)
    if need.max_bytes <= limits.max_bytes and need.max_elems <= limits.max_elems:
        return
    names = [str(c.name) if hasattr(c, "name") else str(tuple(c)) for c in cameras]
    frame_bytes = sum(int(math.prod(tuple(getattr(c, "shape", c)))) for c in cameras)
    raise ConfigError(
        f"{where}: the robot's cameras {names} put {frame_bytes} bytes of uint8 frames into every observation, but this "
        f"end's message limits are max_bytes={limits.max_bytes}, max_elems={limits.max_elems} (frames need max_bytes >= "
        f"{need.max_bytes}, max_elems >= {need.max_elems}); such answers would be dropped unanswered. Use "
        "limits=robotrl.real_robot.protocol.camera_limits(spec.cameras) on both ends (RobotClient.use_limits after hello; "
        "robotrl robot-server and robotrl deploy derive them from the robot's spec)")


_SHAPE_HEADS = [struct.Struct(f"<B{n}I") for n in range(5)]  # ndim byte + ndim little-endian uint32 dims
_SHAPES = [struct.Struct(f"<{n}I") for n in range(5)]


def _encode_default(obj):
    if isinstance(obj, np.ndarray):
        arr = obj if obj.ndim else obj.reshape(1)  # a 0-d array travels as shape (1,) (as np.ascontiguousarray made it)
        code = _CODES.get(arr.dtype)  # the common case: a little-endian array of a wire dtype
        if code is None:
            if arr.dtype.newbyteorder("<") in _CODES:
                arr = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
            code = _CODES.get(arr.dtype)
        if code is None:
            raise ProtocolError(f"cannot send arrays of dtype {arr.dtype}; use float32/float64/int64/uint8/bool")
        if arr.ndim > 4:
            raise ProtocolError(f"cannot send a {arr.ndim}-d array; at most 4 dims")
        head = code + _SHAPE_HEADS[arr.ndim].pack(arr.ndim, *arr.shape)
        return msgpack.ExtType(_EXT_NDARRAY, head + arr.tobytes())  # tobytes: C order, whatever the strides
    if isinstance(obj, np.generic):
        return obj.item()
    raise ProtocolError(f"cannot send a {type(obj).__name__}; messages carry numbers, strings, bytes, lists, maps and arrays")


@functools.lru_cache(maxsize=8)
def _make_ext_hook(limits: Limits):
    def hook(code: int, data: bytes):
        if code != _EXT_NDARRAY or len(data) < 2:
            raise ProtocolError(f"unknown msgpack extension type {code}")
        dtype = _DTYPES.get(data[:1])
        if dtype is None:
            raise ProtocolError(f"unknown array dtype code {data[:1]!r}")
        ndim = data[1]
        if ndim > 4 or len(data) < 2 + 4 * ndim:
            raise ProtocolError(f"array header with ndim={ndim} is invalid (at most 4 dims)")
        shape = _SHAPES[ndim].unpack_from(data, 2)
        n = math.prod(shape)  # 1 for ndim 0
        body = data[2 + 4 * ndim:]
        if n > limits.max_elems or len(body) != n * dtype.itemsize:
            raise ProtocolError(f"array of shape {shape} does not match its {len(body)} data bytes or exceeds {limits.max_elems} elements")
        return np.frombuffer(body, dtype=dtype).reshape(shape).copy()

    return hook


def encode(msg: dict) -> bytes:
    """msgpack bytes of ``msg`` (arrays as extension type 1). Raises :class:`ProtocolError` for unsupported values."""
    return msgpack.packb(msg, default=_encode_default, use_bin_type=True)


def decode(payload: bytes, limits: Limits = Limits(), max_bytes: int | None = None) -> dict:
    """Decode one payload into a message dict, enforcing ``limits``.

    Args:
        payload: the msgpack bytes.
        limits: :class:`Limits`.
        max_bytes: size limit (bytes); default ``limits.max_bytes``.

    Raises:
        ProtocolError: oversized, undecodable, not a map, or fields missing/mistyped.
    """
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise ProtocolError(f"payload must be bytes, got {type(payload).__name__}")
    cap = limits.max_bytes if max_bytes is None else max_bytes
    if len(payload) > cap:
        raise ProtocolError(f"message of {len(payload)} bytes exceeds the limit of {cap}")
    try:
        msg = msgpack.unpackb(bytes(payload), raw=False, strict_map_key=True, ext_hook=_make_ext_hook(limits),
                              max_str_len=limits.max_len, max_bin_len=cap, max_array_len=limits.max_len,
                              max_map_len=limits.max_len, max_ext_len=cap, use_list=True)
    except ProtocolError:
        raise
    except Exception as exc:  # msgpack raises many types (ExtraData, StackError, ValueError, UnicodeDecodeError...)
        raise ProtocolError(f"undecodable message ({type(exc).__name__}: {str(exc)[:100]})") from None
    _check_tree(msg)
    _check_fields(msg)
    return msg


def _check_tree(msg) -> None:
    """Refuse nesting deeper than :data:`MAX_DEPTH` and msgpack timestamps (extension type -1, which
    msgpack-python decodes itself, without the ext hook). Iterative: no recursion limit to hit."""
    stack = [(msg, 1)]
    while stack:
        obj, depth = stack.pop()
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, list):
            children = obj
        elif isinstance(obj, msgpack.Timestamp):
            raise ProtocolError("msgpack extension type -1 (timestamp) is not accepted; send times as float seconds")
        else:
            continue
        if depth > MAX_DEPTH:
            raise ProtocolError(f"message nested deeper than {MAX_DEPTH} maps/lists")
        stack.extend((c, depth + 1) for c in children)


_FIELD_TYPES = {"v": int, "type": str, "dir": str, "src": str, "dst": str, "epoch": str, "seq": int, "ts": (float, int),
                "body": dict}


def _check_fields(msg) -> None:
    if not isinstance(msg, dict):
        raise ProtocolError(f"message must be a map, got {type(msg).__name__}")
    for k, t in _FIELD_TYPES.items():
        if k not in msg or not isinstance(msg[k], t) or isinstance(msg[k], bool):
            raise ProtocolError(f"message field {k!r} missing or not a {t}")
    if msg["v"] != VERSION:
        raise ProtocolError(f"protocol version {msg['v']} is not supported (this side speaks {VERSION}); update both ends")
    if msg["dir"] not in ("req", "rep"):
        raise ProtocolError(f"message dir must be 'req' or 'rep', got {msg['dir']!r}")
    if not (0 <= msg["seq"] < 2**63) or not (0 < len(msg["src"]) <= 128) or len(msg["dst"]) > 128 \
            or len(msg["epoch"]) > 64 or not math.isfinite(msg["ts"]):
        raise ProtocolError("message seq, src, dst, epoch or ts out of range")


def mac(key: bytes, payload: bytes) -> bytes:
    """HMAC-SHA256 of ``payload`` under ``key`` (32 bytes)."""
    return hmac.new(key, payload, hashlib.sha256).digest()


class Authenticator:
    """Signs outgoing and checks incoming messages for one end of the bridge.

    Args:
        key: shared secret (>= 16 bytes).
        ident: this end's id, sent as ``src`` and expected as ``dst`` (random if ``None``;
            a server uses its robot id).
        limits: :class:`Limits`.
        role: ``"server"`` (receives requests, size limit ``max_request_bytes``) or
            ``"client"`` (receives replies, size limit ``max_bytes``).
        remember_peers: senders whose last ``seq`` is kept (oldest forgotten first).

    Attributes:
        rejected: ``Counter`` of rejections per reason (see the module doc).
        accepted: number of accepted messages.

    Raises:
        ConfigError: a key shorter than 16 bytes or an unknown role.
    """

    def __init__(self, key: bytes, ident: str | None = None, limits: Limits = Limits(), role: str = "client",
                 remember_peers: int = 1024):
        if not isinstance(key, (bytes, bytearray)) or len(key) < 16:
            raise ConfigError("the bridge key must be at least 16 bytes; create one with robotrl.real_robot.protocol.write_key_file")
        if role not in ("server", "client"):
            raise ConfigError(f"Authenticator role must be 'server' or 'client', got {role!r}")
        self.key, self.limits, self.role = bytes(key), limits, role
        self.ident = ident or secrets.token_hex(8)
        self.expect_dir = "req" if role == "server" else "rep"
        self.send_dir = "rep" if role == "server" else "req"
        self.max_in = limits.max_request_bytes if role == "server" else limits.max_bytes
        self.max_out = limits.max_bytes if role == "server" else limits.max_request_bytes
        self._seq = 0
        self._last_seq: collections.OrderedDict[tuple[str, str], tuple[int, float]] = collections.OrderedDict()
        self._remember = remember_peers
        self._floor_ts = -math.inf  # newest ts of a sender dropped from _last_seq
        self.rejected: collections.Counter = collections.Counter({r: 0 for r in REJECT_REASONS})
        self.accepted = 0

    def set_limits(self, limits: Limits) -> None:
        """Use ``limits`` from now on (sequence numbers and the replay record are kept)."""
        self.limits = limits
        self.max_in = limits.max_request_bytes if self.role == "server" else limits.max_bytes
        self.max_out = limits.max_bytes if self.role == "server" else limits.max_request_bytes

    def next_seq(self) -> int:
        """The next outgoing sequence number (1, 2, ...)."""
        self._seq += 1
        return self._seq

    def seal(self, type_: str, body: dict | None = None, *, dst: str = "", epoch: str = "",
             seq: int | None = None) -> tuple[list[bytes], int]:
        """Frames ``[payload, mac]`` of a new message to ``dst`` and its ``seq``.

        Args:
            type_: message type (``"step"``, ``"reply"``...).
            body: the body map.
            dst: the receiver's id (``""`` only for a ``hello`` request).
            epoch: the server instance: a client gives the epoch it addresses, a server its own.
            seq: explicit sequence number (default: the next one).

        Raises:
            ProtocolError: unsupported values, or larger than the receiver's limit.
        """
        seq = self.next_seq() if seq is None else seq
        payload = encode({"v": VERSION, "type": type_, "dir": self.send_dir, "src": self.ident, "dst": dst,
                          "epoch": epoch, "seq": seq, "ts": time.time(), "body": body or {}})
        if len(payload) > self.max_out:
            raise ProtocolError(f"outgoing {type_} message of {len(payload)} bytes exceeds the limit of {self.max_out}; "
                                "raise the message limits on both ends")
        return [payload, mac(self.key, payload)], seq

    def _reject(self, reason: str, text: str) -> ProtocolError:
        self.rejected[reason] += 1
        err = ProtocolError(f"rejected ({reason}): {text}")
        err.reason = reason
        return err

    def open(self, frames: list) -> dict:
        """Check and decode incoming ``[payload, mac]``; returns the message dict.

        Frames may be ``bytes`` or ``zmq.Frame`` (read without copying until the MAC holds).

        Raises:
            ProtocolError: with ``.reason`` in ``REJECT_REASONS`` (also counted).
        """
        if len(frames) != 2:
            raise self._reject("malformed", f"expected 2 frames [payload, mac], got {len(frames)}")
        payload, tag = (getattr(f, "buffer", f) for f in frames)
        if len(payload) > self.max_in:
            raise self._reject("oversized", f"{len(payload)} bytes > limit {self.max_in}")
        if len(tag) != MAC_BYTES or not hmac.compare_digest(bytes(tag), mac(self.key, payload)):
            raise self._reject("unauthenticated", "bad MAC: the sender does not hold this robot's key")
        try:
            msg = decode(payload, self.limits, self.max_in)
        except ProtocolError as exc:
            raise self._reject("malformed", str(exc)) from None
        if msg["dir"] != self.expect_dir:
            raise self._reject("misdirected", f"a {msg['dir']!r} message where {self.expect_dir!r} was expected")
        if msg["dst"] != self.ident and not (msg["dst"] == "" and msg["type"] == "hello" and self.role == "server"):
            raise self._reject("misdirected", f"message for {msg['dst']!r}, this is {self.ident!r}")
        skew = msg["ts"] - time.time()
        if abs(skew) > self.limits.max_skew_s:
            raise self._reject("stale", f"timestamp off by {skew:+.3f} s (limit {self.limits.max_skew_s} s)")
        sender = (msg["src"], msg["epoch"] if msg["dir"] == "rep" else "")
        known = self._last_seq.get(sender)
        if known is None and msg["ts"] <= self._floor_ts:
            raise self._reject("replayed", f"{msg['src']} is not among the {self._remember} senders remembered and its "
                                           f"message (ts {msg['ts']:.6f}) is not newer than the newest forgotten one")
        last = -1 if known is None else known[0]
        if msg["seq"] <= last:
            raise self._reject("replayed", f"seq {msg['seq']} from {msg['src']} is not after {last}")
        self._last_seq[sender] = (msg["seq"], float(msg["ts"]))
        self._last_seq.move_to_end(sender)
        while len(self._last_seq) > self._remember:
            self._floor_ts = max(self._floor_ts, self._last_seq.popitem(last=False)[1][1])
        self.accepted += 1
        return msg


def write_key_file(path: str | os.PathLike, overwrite: bool = False) -> Path:
    """Create a random 32-byte key as 64 hex characters plus a newline in ``path``, mode 0600; returns the path.

    Raises:
        FileExistsError: the file exists and ``overwrite`` is false.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"key file {path} exists; pass overwrite=True to replace it (all peers need the new key)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def load_key(key_file: str | os.PathLike | None = None) -> bytes:
    """The shared key from ``key_file`` (hex) or, if ``None``, from ``$ROBOTRL_ROBOT_KEY`` (hex).

    Raises:
        ConfigError: no key, not hex, shorter than 16 bytes, or a key file readable by others.
    """
    if key_file:
        p = Path(key_file)
        if not p.is_file():
            raise ConfigError(f"key file {p} does not exist; create it with key_create=true (robot-server) or write_key_file()")
        if p.stat().st_mode & 0o077:
            raise ConfigError(f"key file {p} is readable by other users; run chmod 600 {p}")
        text = p.read_text().strip()
    else:
        text = os.environ.get(KEY_ENV, "").strip()
        if not text:
            raise ConfigError(f"no bridge key: set key_file=<path> or ${KEY_ENV} to a hex key of >= 16 bytes")
    try:
        key = bytes.fromhex(text)
    except ValueError:
        raise ConfigError("the bridge key must be hex (e.g. 64 hex characters)") from None
    if len(key) < 16:
        raise ConfigError(f"the bridge key has {len(key)} bytes; use at least 16 (64 hex characters recommended)")
    return key


def key_fingerprint(key: bytes) -> str:
    """A short public fingerprint of ``key`` (first 8 hex chars of SHA-256 over ``b"robotrl-key" + key``),
    safe to print so two ends can compare keys without revealing them."""
    return hashlib.sha256(b"robotrl-key" + key).hexdigest()[:8]
