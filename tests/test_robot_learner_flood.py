"""Issue 45, item 4: the learner's end of the online-RL link cannot be flooded.

A learner process (the :class:`~robotrl.real_robot.learner_link.LearnerEndpoint` the learner
uses, answering ``hello`` with ``welcome`` as the learner does) is flooded through real
sockets by a separate process: 32 MiB junk frames on four connections (the issue's attack),
1 MiB junk (under the request limit, over what a stranger may send), and 32 KiB junk (hashed
until its connection is quarantined and cut). Meanwhile a signed ``hello`` must be answered
within its deadline and the learner's memory must stay bounded. CurveZMQ (``zmq.auth``) with
per-client certificates admits only listed actors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import zmq
import zmq.auth

from robotrl.errors import ConfigError
from robotrl.real_robot.learner_link import HELLO_BYTES, ActorLink, LearnerEndpoint, link_limits
from robotrl.real_robot.protocol import Authenticator, write_key_file

from robotrl.bench.tasks.bridge import LEARNER, LEARNER_FLOOD, hello_rtt, rss_mb  # shared with the benchmark




def test_a_flooded_learner_keeps_its_memory_bounded_and_answers_a_signed_hello_in_time(tmp_path):
    keyfile = write_key_file(tmp_path / "online.key")
    key = bytes.fromhex(keyfile.read_text().strip())
    learner = subprocess.Popen([sys.executable, "-c", LEARNER, str(keyfile), "9"], stdout=subprocess.PIPE, text=True)
    flood = None
    try:
        endpoint = learner.stdout.readline().strip()
        auth = Authenticator(key, ident="actor0.probe", limits=link_limits(), role="client")
        d = zmq.Context.instance().socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.connect(endpoint)

        idle = sorted(hello_rtt(d, auth) for _ in range(20))
        base = rss_mb(learner.pid)
        flood = subprocess.Popen([sys.executable, "-c", LEARNER_FLOOD, endpoint, "5"], stdout=subprocess.PIPE, text=True)
        time.sleep(1.0)
        rtts, peak = [], base
        while flood.poll() is None:
            rtts.append(hello_rtt(d, auth))
            peak = max(peak, rss_mb(learner.pid))
            time.sleep(0.05)
        sent = int(flood.communicate(timeout=30)[0])
        st = json.loads(learner.communicate(timeout=60)[0].strip().splitlines()[-1])
    finally:
        for p in (flood, learner):
            if p is not None and p.poll() is None:
                p.kill()
    rtts.sort()
    assert sent > 100 and len(rtts) > 10
    # bounded memory: at most about (max_unauth + 1) x the request limit (8 MiB) of junk in flight at once
    limit_mb = (st["guard"]["max_unauth"] + 1) * 8 + 32
    assert peak - base < limit_mb, (peak, base, limit_mb)
    # a signed hello is answered within its deadline (the actor says hello again after 1 s): every one of them
    assert rtts[-1] < 0.5, (rtts[-5:], idle[len(idle) // 2])
    assert st["rejected"]["oversized"] > 0 and st["quarantined"] + sum(st["guard"]["cut"].values()) > 0, st
    # junk is dropped unhashed above HELLO_BYTES, and hashed at most up to HELLO_BYTES per message below it: the
    # issue's learner hashed 384 frames of 32 MiB (12 GiB); here at most a quarter of that in bytes, and every
    # junk connection is cut (then it reconnects: ZeroMQ's reconnect, every 10 ms)
    assert st["rejected"]["unauthenticated"] * HELLO_BYTES < 3 << 30, st
    assert sum(st["guard"]["cut"].values()) > 20, st


def test_curvezmq_admits_only_listed_actors(tmp_path):
    key = os.urandom(32)
    for d in ("learner", "clients", "actor", "stranger"):
        (tmp_path / d).mkdir()
    zmq.auth.create_certificates(tmp_path / "learner", "learner")
    zmq.auth.create_certificates(tmp_path / "actor", "actor0")
    zmq.auth.create_certificates(tmp_path / "stranger", "actor1")
    (tmp_path / "clients" / "actor0.key").write_bytes((tmp_path / "actor" / "actor0.key").read_bytes())
    with pytest.raises(ConfigError, match="both curve_secret_file"):
        LearnerEndpoint("tcp://127.0.0.1:0", key, curve_secret_file=tmp_path / "learner" / "learner.key_secret")
    ep = LearnerEndpoint("tcp://127.0.0.1:0", key, curve_secret_file=tmp_path / "learner" / "learner.key_secret",
                         curve_clients_dir=tmp_path / "clients")
    spec = {"name": "x"}
    links = {name: ActorLink(ep.endpoint, key, name, spec, tmp_path / f"spill-{name}",
                             curve_cert_file=tmp_path / d / f"{name}.key_secret",
                             curve_server_public_file=tmp_path / "learner" / "learner.key")
             for name, d in (("actor0", "actor"), ("actor1", "stranger"))}
    try:
        heard: set[str] = set()
        end = time.monotonic() + 5
        while time.monotonic() < end and "actor0" not in heard:
            for _, msg in ep.recv(20):
                heard.add(msg["body"]["actor_id"])
        end = time.monotonic() + 1.5  # the stranger keeps saying hello (every second): never heard
        while time.monotonic() < end:
            for _, msg in ep.recv(20):
                heard.add(msg["body"]["actor_id"])
        assert heard == {"actor0"}
    finally:
        for link in links.values():
            link.close()
        ep.close()
