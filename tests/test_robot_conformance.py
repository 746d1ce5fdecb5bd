"""A client written from docs/protocol.md alone drives a real robot-server process.

Deliberately imports nothing of robotrl: only ZeroMQ, msgpack, hmac/hashlib and struct, as
the document prescribes. If this test needs a change, the document (or the server) is wrong.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import msgpack
import pytest
import zmq

DOC = Path(__file__).resolve().parents[1] / "docs" / "protocol.md"


def f32(values) -> msgpack.ExtType:
    """A float32 vector as ext type 1 (section 7): code 'f', ndim 1, uint32 LE dim, LE data."""
    values = list(values)
    return msgpack.ExtType(1, b"f" + bytes([1]) + struct.pack("<I", len(values)) + struct.pack(f"<{len(values)}f", *values))


_CODES = {b"f": ("f", 4), b"d": ("d", 8), b"q": ("q", 8), b"B": ("B", 1), b"?": ("?", 1)}


def ext_hook(code: int, data: bytes):
    assert code == 1, f"only ext type 1 exists, got {code}"
    fmt, size = _CODES[data[:1]]
    ndim = data[1]
    dims = struct.unpack(f"<{ndim}I", data[2:2 + 4 * ndim])
    n = 1
    for d in dims:
        n *= d
    body = data[2 + 4 * ndim:]
    assert len(body) == n * size
    return {"dims": dims, "values": list(struct.unpack(f"<{n}{fmt}", body))}


class DocClient:
    """Sections 2-6 and 8-9 of the document, nothing more."""

    def __init__(self, endpoint: str, key: bytes):
        self.key, self.src, self.seq = key, os.urandom(8).hex(), 0
        self.robot_id, self.epoch = "", ""
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)

    def send(self, type_: str, body: dict, *, key: bytes | None = None, single_float: bool = False, **override) -> int:
        self.seq += 1
        msg = {"v": 2, "type": type_, "dir": "req", "src": self.src, "dst": self.robot_id, "epoch": self.epoch,
               "seq": self.seq, "ts": time.time(), "body": body, **override}
        payload = msgpack.packb(msg, use_bin_type=True, use_single_float=single_float, datetime=False)
        self.sock.send_multipart([payload, hmac.new(key or self.key, payload, hashlib.sha256).digest()])
        return self.seq

    def receive(self, seq: int, wait_ms: int = 5000) -> dict | None:
        if not self.sock.poll(wait_ms):
            return None
        payload, tag = self.sock.recv_multipart()
        assert hmac.compare_digest(tag, hmac.new(self.key, payload, hashlib.sha256).digest())
        msg = msgpack.unpackb(payload, raw=False, ext_hook=ext_hook)
        assert msg["v"] == 2 and msg["type"] == "reply" and msg["dir"] == "rep" and msg["dst"] == self.src
        assert msg["epoch"] == (self.epoch or msg["epoch"]) and msg["src"] == (self.robot_id or msg["src"])
        assert msg["body"]["re"] == seq and isinstance(msg["body"]["ok"], bool)
        return msg["body"]

    def call(self, type_: str, body: dict | None = None, **override) -> dict:
        ans = self.receive(self.send(type_, body or {}, **override))
        assert ans is not None, f"no answer to {type_}"
        if not ans["ok"]:
            assert isinstance(ans["kind"], str) and isinstance(ans["error"], str) and ans["error"]
        return ans

    def hello(self) -> dict:
        ans = self.call("hello", dst="", epoch="")
        self.robot_id, self.epoch = ans["robot_id"], ans["epoch"]
        return ans


def _blocks(section: str) -> list[str]:
    text = DOC.read_text()
    part = text[text.index(section):]
    return [b.strip() for b in re.findall(r"```text\n(.*?)```", part, re.S)]


def test_the_worked_example_bytes_in_the_document_are_right():
    key, req, req_mac, rep, rep_mac = _blocks("## 15. Worked example")[:5]
    key = bytes.fromhex(key)
    for payload, tag in ((req, req_mac), (rep, rep_mac)):
        assert hmac.new(key, bytes.fromhex(payload), hashlib.sha256).hexdigest() == tag
    msg = msgpack.unpackb(bytes.fromhex(req), raw=False, ext_hook=ext_hook)
    assert msg == {"v": 2, "type": "step", "dir": "req", "src": "c0ffee00c0ffee00",
                   "dst": "sim:pointmaze-umaze@tcp://127.0.0.1:5555", "epoch": "9f3e0a1b2c3d4e5f", "seq": 3,
                   "ts": 1700000000.25, "body": {"action": {"dims": (2,), "values": [0.25, -0.5]},
                                                 "deadline": 1700000000.27}}
    assert len(bytes.fromhex(req)) == 177 and "c70e01" + "660102000000" + "0000803e000000bf" in req
    reply = msgpack.unpackb(bytes.fromhex(rep), raw=False)
    assert reply["dir"] == "rep" and reply["body"] == {"ok": False, "kind": "expired", "error": "too late", "re": 3}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("conformance")
    key_file = d / "robot.key"
    key_file.write_text(os.urandom(32).hex() + "\n")  # section 4: hex, newline, mode 0600
    key_file.chmod(0o600)
    ready = d / "ready.json"
    log = open(d / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "robotrl.real_robot.cli", "robot-server", "endpoint=tcp://127.0.0.1:0",
                             f"key_file={key_file}", f"ready_file={ready}", "robot.safety.rate_hz=20"],
                            stdout=log, stderr=subprocess.STDOUT)
    end = time.monotonic() + 90
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < end, (d / "server.log").read_text()
        time.sleep(0.05)
    info = json.loads(ready.read_text())
    yield info["endpoint"], bytes.fromhex(key_file.read_text().strip()), d / "server.log", proc.pid, key_file
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


def test_a_client_built_from_the_document_runs_a_session(server):
    endpoint, key, log, _, _ = server
    c = DocClient(endpoint, key)
    h = c.hello()
    assert h["protocol"] == 2 and len(h["epoch"]) == 16 and h["robot_id"].startswith("sim:pointmaze-umaze@")
    da, do = len(h["spec"]["action"]["names"]), len(h["spec"]["observation"]["names"])
    assert (da, do) == (2, 8) and h["limits"]["deadline_s"] == pytest.approx(2 / 20)
    assert h["limits"]["max_request_bytes"] == 4096 and h["spec"]["hold_action"] == [0.0, 0.0]
    assert c.call("acquire", {"force": False})["lease"]["holder"] == c.src
    obs = c.call("reset", {"seed": 0})["obs"]
    assert obs["state"]["dims"] == (8,) and isinstance(obs["terminated"], bool)
    ans = c.call("step", {"action": f32([0.25, -0.5]), "deadline": time.time() + 0.05})
    assert ans["ok"] and ans["applied"]["values"] == [0.25, -0.5] and ans["flags"] == [] and ans["held"] is False
    assert ans["obs"]["state"]["dims"] == (8,)
    assert c.call("step", {"action": None, "deadline": time.time() + 0.05})["flags"] == ["hold"]

    # section 9: error answers
    assert c.call("step", {"action": f32([0.1, 0.1])})["kind"] == "bad_request"  # no deadline
    assert c.call("step", {"action": f32([0.1, 0.1]), "deadline": time.time() + 1},
                  ts=time.time() - 0.5)["kind"] == "expired"  # sent 10 periods ago
    assert c.call("step", {"action": f32([0.1, 0.1, 0.1]), "deadline": time.time() + 1})["kind"] == "bad_request"
    assert c.call("status", epoch="0" * 16)["kind"] == "epoch"
    assert c.call("dance")["kind"] == "bad_request"

    # section 5: rejected messages get no answer
    assert c.receive(c.send("status", {}, key=os.urandom(32)), wait_ms=300) is None  # wrong key
    assert c.receive(c.send("status", {}, dst="another-robot"), wait_ms=300) is None  # misdirected
    assert c.receive(c.send("status", {}, dir="rep"), wait_ms=300) is None  # a reply is not a request
    assert c.receive(c.send("status", {}, ts=time.time() - 10), wait_ms=300) is None  # stale
    st = c.call("status")["status"]
    assert st["rejected"]["unauthenticated"] >= 1 and st["rejected"]["misdirected"] >= 2 and st["rejected"]["stale"] >= 1

    # section 10: a second client observes, may not step, may take over explicitly
    o = DocClient(endpoint, key)
    o.hello()
    assert o.call("observe")["obs"]["state"]["dims"] == (8,)
    assert o.call("step", {"action": f32([0.1, 0.1]), "deadline": time.time() + 0.05})["kind"] == "no_lease"
    assert o.call("acquire", {})["kind"] == "lease_held"
    assert o.call("acquire", {"force": True})["ok"]
    assert c.call("step", {"action": f32([0.1, 0.1]), "deadline": time.time() + 0.05})["kind"] == "no_lease"
    assert c.call("acquire", {"force": True})["ok"]

    # sections 8 and 12: e-stop latch, refused reset, named re-arm
    assert c.call("estop", {"reason": "conformance"})["status"]["estopped"] is True
    held = c.call("step", {"action": f32([0.3, 0.3]), "deadline": time.time() + 0.05})
    assert held["flags"] == ["estop"] and held["applied"]["values"] == [0.0, 0.0] and held["held"] is True
    assert c.call("reset", {"seed": 1})["kind"] == "estopped"
    assert c.call("rearm", {})["kind"] == "bad_request"
    assert c.call("rearm", {"operator": "conformance test"})["status"]["estopped"] is False
    assert "RE-ARMED by operator 'conformance test'" in log.read_text()
    assert c.call("release")["ok"] and c.call("status")["status"]["lease"] is None


def test_the_rules_of_issue_45_hold_as_the_document_states(server):
    """Sections 3, 5, 5.2, 6, 8, 12 and 17: the answers to the places where a client author had to guess."""
    endpoint, key, log, pid, key_file = server
    c = DocClient(endpoint, key)
    c.hello()
    lim = c.call("hello", dst=c.robot_id)["limits"]  # an addressed hello is answered...
    assert lim["max_bytes"] == 65536 and lim["max_request_bytes"] == 4096
    assert c.receive(c.send("hello", {}, dst="another-robot", epoch=""), wait_ms=300) is None  # ...another's is not
    rejected = c.call("status")["status"]["rejected"]

    # section 3: ext -1 (timestamps), nesting beyond 32, float32 ts, lengths in characters
    assert c.receive(c.send("status", {"t": msgpack.Timestamp(1, 0)}), wait_ms=300) is None
    deep: list = []
    for _ in range(30):  # 31 nested lists (the innermost one empty)
        deep = [deep]
    assert c.receive(c.send("status", {"x": deep}), wait_ms=300) is None  # payload 1 + body 2 + 31 lists: 33 deep
    assert c.call("status", {"x": deep[0]})["ok"]  # 32 deep is fine
    assert c.receive(c.send("status", {}, single_float=True), wait_ms=300) is None  # float32 ts: 128 s off, stale
    after = c.call("status")["status"]["rejected"]
    assert after["malformed"] == rejected["malformed"] + 2 and after["stale"] == rejected["stale"] + 1
    wide = DocClient(endpoint, key)
    wide.src = "\u00e9" * 128  # 128 characters, 256 UTF-8 bytes: accepted
    assert wide.hello()["ok"]
    wide.src += "x"
    assert wide.receive(wide.send("status", {}), wait_ms=300) is None

    # section 8: an infinite deadline is refused; an estop is never refused for its reason
    assert c.call("acquire", {"force": True})["ok"]
    assert c.call("step", {"action": f32([0.1, 0.1]), "deadline": float("inf")})["kind"] == "bad_request"
    ans = c.call("estop", {"reason": 42})
    assert ans["persisted"] is True and "warning" not in ans and ans["status"]["estopped"] is True
    st = ans["status"]
    # section 12: one latch per robot beside the key file, its record names the robot
    latch = Path(st["latch_file"])
    assert latch.parent == key_file.parent and latch.name.startswith(key_file.name + ".sim_pointmaze-umaze")
    assert re.fullmatch(r"robot\.key\.[A-Za-z0-9._-]+-[0-9a-f]{8}\.estop", latch.name)
    rec = json.loads(latch.read_text())
    assert rec["estopped"] is True and rec["reason"] == "estop request" and rec["latch_id"].startswith("sim:pointmaze")
    assert (latch.parent / f".{latch.name}.created").exists() and st["latch_persisted"] is True
    assert c.call("rearm", {"operator": "conformance"})["status"]["estopped"] is False
    # section 9.3: hold_events.at is the monotonic clock, not Unix time
    for e in st["hold_events"]:
        assert e["at"] < 1e9 and e["at"] >= e["last_command"]
    # section 5.2: SIGUSR1 latches the e-stop without the socket
    os.kill(pid, signal.SIGUSR1)
    end = time.monotonic() + 2
    while not json.loads(latch.read_text())["estopped"]:
        assert time.monotonic() < end
        time.sleep(0.01)
    st = c.call("status")["status"]
    assert st["estopped"] is True and st["estop_latch"]["by"] == "SIGUSR1 (no socket)"
    assert c.call("rearm", {"operator": "conformance"})["status"]["estopped"] is False
    assert st["connections"]["live"] >= 2 and st["connections"]["max_unauth"] >= 1
