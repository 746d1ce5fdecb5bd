"""Bridge messages: msgpack round trip, HMAC, replay/stale/size checks, and a fuzz test of the decoder."""

from __future__ import annotations

import os
import time

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import ProtocolError
from robotrl.real_robot.protocol import Authenticator, Limits, decode, encode, load_key, mac, write_key_file

KEY = bytes(range(32))


def test_round_trip_keeps_arrays_exact_and_never_pickles():
    a, b = Authenticator(KEY, ident="client"), Authenticator(KEY, ident="server", role="server")
    x = np.array([1.5, -2.25, np.float32(1e-7)], np.float32)
    frames, seq = a.seal("step", {"action": x, "deadline": 1.5, "n": np.int64(3)}, dst="server", epoch="e1")
    assert b"pickle" not in frames[0] and b"\x80\x04" not in frames[0][:2]
    msg = b.open(frames)
    assert msg["type"] == "step" and msg["seq"] == seq and msg["src"] == "client" and msg["dir"] == "req"
    assert msg["dst"] == "server" and msg["epoch"] == "e1"
    assert msg["body"]["action"].dtype == np.float32 and np.array_equal(msg["body"]["action"], x)
    with pytest.raises(ProtocolError, match="cannot send"):
        encode({"obj": object()})
    with pytest.raises(ProtocolError, match="dtype"):
        encode({"x": np.array(["a"])})


def test_rejections_are_classified_and_counted():
    a = Authenticator(KEY, ident="c")
    b = Authenticator(KEY, ident="s", role="server", limits=Limits(max_request_bytes=512, max_skew_s=1.0))
    frames, _ = a.seal("status", dst="s")
    b.open(frames)
    with pytest.raises(ProtocolError, match="replayed"):
        b.open(frames)  # the same message again
    with pytest.raises(ProtocolError, match="unauthenticated"):
        b.open(Authenticator(os.urandom(32), ident="c").seal("status", dst="s")[0])  # another key
    forged = [frames[0][:-1] + b"\x01", frames[1]]
    with pytest.raises(ProtocolError, match="unauthenticated"):
        b.open(forged)
    with pytest.raises(ProtocolError, match="oversized"):
        b.open(Authenticator(KEY, ident="c", limits=Limits(max_request_bytes=10**6)).seal("step", {"x": np.zeros(500)}, dst="s")[0])
    with pytest.raises(ProtocolError, match="malformed"):
        b.open([frames[0]])
    junk = b"\xc1\xc1"
    with pytest.raises(ProtocolError, match="malformed"):
        b.open([junk, mac(KEY, junk)])
    old = encode({"v": 2, "type": "step", "dir": "req", "src": "c", "dst": "s", "epoch": "", "seq": 99,
                  "ts": time.time() - 60, "body": {}})
    with pytest.raises(ProtocolError, match="stale"):
        b.open([old, mac(KEY, old)])
    with pytest.raises(ProtocolError, match="misdirected"):  # signed for robot "other"
        b.open(a.seal("status", dst="other")[0])
    with pytest.raises(ProtocolError, match="misdirected"):  # only hello may leave dst empty
        b.open(a.seal("step", dst="")[0])
    reply, _ = Authenticator(KEY, ident="s", role="server").seal("reply", {}, dst="s")
    with pytest.raises(ProtocolError, match="misdirected"):  # a server's own reply, reflected back to it
        b.open(reply)
    assert b.open(a.seal("hello", dst="")[0])["type"] == "hello"
    assert dict(b.rejected) == {"replayed": 1, "unauthenticated": 2, "oversized": 1, "malformed": 2, "stale": 1,
                                "misdirected": 3}
    assert b.accepted == 2


def test_flushing_the_sequence_table_does_not_reopen_a_replay_window():
    """Issue 45, item 5: a key holder who sends from more ids than the server remembers pushes a client out of the
    sequence table; a replay of that client's message must still be refused (the forgotten senders' newest ts is a
    floor for unknown senders), while a fresh message of a new sender is accepted."""
    server = Authenticator(KEY, ident="robot", role="server", remember_peers=4)
    victim = Authenticator(KEY, ident="victim")
    captured, _ = victim.seal("step", {"action": None}, dst="robot")
    assert server.open(captured)["src"] == "victim"
    for i in range(4):  # four other ids: the victim is forgotten
        server.open(Authenticator(KEY, ident=f"flood{i}").seal("status", dst="robot")[0])
    with pytest.raises(ProtocolError, match="replayed.*not newer than the newest forgotten"):
        server.open(captured)
    time.sleep(0.01)
    assert server.open(Authenticator(KEY, ident="newcomer").seal("status", dst="robot")[0])["src"] == "newcomer"
    assert server.rejected["replayed"] == 1


def test_reply_replay_tracking_is_per_server_epoch():
    """A restarted server (new epoch) starts its seq at 1 again; its replies are accepted, replays within an epoch are not."""
    c = Authenticator(KEY, ident="c")
    for epoch in ("e1", "e2"):
        srv = Authenticator(KEY, ident="robot", role="server")
        frames, seq = srv.seal("reply", {"re": 1}, dst="c", epoch=epoch)
        assert seq == 1 and c.open(frames)["epoch"] == epoch
        with pytest.raises(ProtocolError, match="replayed"):
            c.open(frames)


def test_key_loading_explains_problems(tmp_path, monkeypatch):
    p = write_key_file(tmp_path / "robot.key")
    assert oct(p.stat().st_mode & 0o777) == "0o600" and len(load_key(p)) == 32
    with pytest.raises(FileExistsError):
        write_key_file(p)
    p.chmod(0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        load_key(p)
    monkeypatch.setenv("ROBOTRL_ROBOT_KEY", "abcd")
    with pytest.raises(ConfigError, match="at least 16"):
        load_key(None)
    monkeypatch.delenv("ROBOTRL_ROBOT_KEY")
    with pytest.raises(ConfigError, match="no bridge key"):
        load_key(None)
    with pytest.raises(ConfigError, match="16 bytes"):
        Authenticator(b"short")


# ---- fuzzing ---------------------------------------------------------------------------
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=20),
                  st.binary(max_size=40))
_tree = st.recursive(_leaf, lambda c: st.one_of(st.lists(c, max_size=5), st.dictionaries(st.text(max_size=8), c, max_size=5)),
                     max_leaves=30)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes_only_ever_raise_protocol_error(data):
    try:
        msg = decode(data)
    except ProtocolError:
        return
    assert isinstance(msg, dict) and set(msg) >= {"v", "type", "dir", "src", "dst", "epoch", "seq", "ts", "body"}


@settings(max_examples=300, deadline=None)
@given(_tree, st.binary(max_size=60), st.integers(0, 255))
def test_fuzz_authenticated_structures_and_arrays(tree, ext_data, code):
    """Even with a valid MAC, arbitrary msgpack (and arbitrary extension payloads) is rejected cleanly."""
    b = Authenticator(KEY, ident="s", role="server")
    head = {"v": 2, "type": "step", "dir": "req", "src": "p", "dst": "s", "epoch": ""}
    for obj in (tree, {**head, "seq": 1, "ts": time.time(), "body": tree},
                {**head, "seq": 2, "ts": time.time(), "body": {"action": msgpack.ExtType(code % 128, ext_data)}}):
        try:
            payload = msgpack.packb(obj, use_bin_type=True)
        except (OverflowError, ValueError):
            continue
        try:
            msg = b.open([payload, mac(KEY, payload)])
        except ProtocolError as exc:
            assert exc.reason in ("malformed", "oversized")
            continue
        assert isinstance(msg["body"], dict)
        action = msg["body"].get("action")
        assert action is None or isinstance(action, (np.ndarray, dict, list, str, bytes, int, float, bool))
