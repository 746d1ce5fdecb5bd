"""Benchmark of the online-RL actor→learner link (issue 16) against bare pyzmq, loopback, two processes.

1. Transition throughput (PointMaze sizes: ``Do = 8``, ``Da = 2``): the actor side
   (:class:`~robotrl.real_robot.learner_link.ActorLink`: batches of 64, each written to the
   spill directory with fsync before it is sent, HMAC, one batch in flight, acknowledged)
   streams ``--n`` transitions to a learner-side process (:class:`LearnerEndpoint`,
   batch validation, deduplication, ack); reported: transitions/s from the first submit to
   the last ack. Floor: bare pyzmq DEALER→ROUTER with the same msgpack batch payloads, one
   in flight, no HMAC, no spill, no checks.
2. Weight-push latency: the learner side pushes the weights of a ``256×256`` MLP policy
   (QLPolicy, ~70 k parameters as named float32 arrays) ``--pushes`` times; reported:
   receive time − send time (same machine clock), through the link (HMAC, decode, tensors)
   and as bare pyzmq (the same msgpack bytes, decoded).

Run: ``python benchmarks/bench_online_link.py [--n 20000] [--pushes 50] [--out online_link.json]``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch  # an actor has torch loaded (its policy); the link builds tensors from pushed arrays
import zmq

from robotrl.bench.tasks._common import environment, write_json
from robotrl.bench.tasks._formats import as_result
from robotrl.real_robot.control import latency_stats
from robotrl.real_robot.learner_link import ActorLink, link_limits, stack_transitions
from robotrl.real_robot.protocol import decode, encode, load_key, write_key_file

LEARNER = r"""
import sys, time, numpy as np, torch, zmq
torch.set_num_threads(1)
from robotrl.agents.qlearning.policy import QLPolicy
from robotrl.policy import policy_state
from robotrl.real_robot.learner_link import LearnerEndpoint, Dedup, check_batch, state_to_arrays
from robotrl.real_robot.protocol import load_key, encode
mode, key_file, n_push = sys.argv[1], sys.argv[2], int(sys.argv[3])
ps = policy_state(QLPolicy(8, 2, (256, 256)))
names, arrays = state_to_arrays(ps["state_dict"])
weights = {"version": 0, "target": ps["target"], "kwargs": ps["kwargs"], "names": names, "arrays": arrays}
pushes, last = 0, 0.0
if mode == "link":
    ep = LearnerEndpoint("tcp://127.0.0.1:0", load_key(key_file)); print(ep.endpoint, flush=True)
    d, go = Dedup(), False
    while True:
        for _, msg in ep.recv(2):
            t, b = msg["type"], msg["body"]; a = b["actor_id"]
            if t == "hello":
                ep.reply(a, "welcome", {"have": -1, "version": 0})
            elif t == "batch":
                check_batch(b, 8, 2)
                i = np.flatnonzero(d.new_rows(a, b["episode"], b["step"]))
                if i.size:
                    d.take(a, int(b["episode"][i[-1]]), int(b["step"][i[-1]]), int(b["n"][i[-1]]))
                ep.reply(a, "ack", {"received": d.have(a), "durable": d.have(a)})
            elif t == "ping":
                go = go or b.get("version") == 1000000
                if a in ep.peers: ep.reply(a, "ack", {"received": d.have(a), "durable": d.have(a)})
        if go and pushes < n_push and time.monotonic() - last > 0.1:
            pushes += 1; last = time.monotonic()
            for a in list(ep.peers):
                ep.reply(a, "weights", {**weights, "version": 1000000 + pushes, "sent_at": time.time()})
else:
    s = zmq.Context.instance().socket(zmq.ROUTER); port = s.bind_to_random_port("tcp://127.0.0.1"); print(port, flush=True)
    rid = None
    while True:
        if s.poll(2):
            m = s.recv_multipart(); rid = m[0]
            if m[1] == b"go":
                pushes = 0
                while pushes < n_push:
                    time.sleep(0.1); pushes += 1
                    env = {"v": 2, "type": "weights", "dir": "rep", "src": "l", "dst": "a", "epoch": "", "seq": pushes,
                           "ts": time.time(), "body": {**weights, "version": pushes, "sent_at": time.time()}}
                    s.send_multipart([rid, encode(env)])
            else:
                s.send_multipart([rid, b"ack"])
"""


def _learner(mode: str, key_file: Path, pushes: int) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", LEARNER, mode, str(key_file), str(pushes)], stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def _rows(n: int) -> list[dict]:
    rng = np.random.default_rng(0)
    nan = np.full(2, np.nan, np.float32)
    return [{"n": i, "episode": i // 500, "step": i % 500, "obs": rng.standard_normal(8).astype(np.float32),
             "next_obs": rng.standard_normal(8).astype(np.float32), "action": rng.uniform(-1, 1, 2).astype(np.float32),
             "requested": nan, "policy_action": nan, "reward": 0.0, "terminated": False, "truncated": i % 500 == 499,
             "success": False, "intervention": False, "safety_modified": False, "held": False, "learner_connected": True,
             "weights_version": 0, "time": 0.0, "rtt_s": 0.0, "jitter_s": 0.0} for i in range(n)]


def link_case(n: int, pushes: int, tmp: Path) -> dict:
    key_file = write_key_file(tmp / "k.key")
    proc, endpoint = _learner("link", key_file, pushes)
    spec = {"name": "bench", "observation": {"names": ["o"] * 8, "units": ["1"] * 8, "low": [None] * 8, "high": [None] * 8},
            "action": {"names": ["a", "b"], "units": ["1", "1"], "low": [-1.0, -1.0], "high": [1.0, 1.0]},
            "control_rate_hz": 100.0, "hold_action": [0.0, 0.0], "gym_env_id": None, "episodic": True, "extra": {}}
    link = ActorLink(endpoint, load_key(key_file), "bench", spec, tmp / "spill", batch_size=64, flush_s=0.005)
    try:
        while not link.connected:
            time.sleep(0.01)
        rows = _rows(n)
        t0 = time.perf_counter()
        for r in rows:
            link.submit(r)
        while link.acked < n - 1:
            time.sleep(0.0005)
        dt = time.perf_counter() - t0
        link.set_version(1000000)  # tells the learner side to start pushing
        while len(link.weights_latency_s) < pushes:
            time.sleep(0.01)
        return {"transitions": n, "seconds": dt, "transitions_per_s": n / dt, "batches": link.sent_batches,
                "weights_push": latency_stats(link.weights_latency_s[-pushes:])}
    finally:
        link.close()
        proc.kill()


def bare_case(n: int, pushes: int, tmp: Path) -> dict:
    proc, port = _learner("bare", tmp / "unused", pushes)
    s = zmq.Context.instance().socket(zmq.DEALER)
    s.connect(f"tcp://127.0.0.1:{port}")
    try:
        rows = _rows(n)
        t0 = time.perf_counter()
        for i in range(0, n, 64):
            cols = stack_transitions(rows[i:i + 64])
            cols["count"] = len(rows[i:i + 64])
            s.send(encode(cols))
            s.recv()
        dt = time.perf_counter() - t0
        s.send(b"go")
        lat = []
        lim = link_limits()
        for _ in range(pushes):
            m = s.recv()
            t = time.time()
            w = decode(m, lim)["body"]  # the same msgpack + array decoding, without the HMAC check
            lat.append(t - w["sent_at"])
        return {"transitions": n, "seconds": dt, "transitions_per_s": n / dt, "weights_push": latency_stats(lat),
                "payload_bytes": len(m)}
    finally:
        s.close(linger=0)
        proc.kill()


def main(argv: list[str] | None = None) -> None:
    torch.set_num_threads(1)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=20000)
    p.add_argument("--pushes", type=int, default=50)
    p.add_argument("--out", default="full/online_link.json")
    a = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        link = link_case(a.n, a.pushes, Path(d))
    with tempfile.TemporaryDirectory() as d:
        bare = bare_case(a.n, a.pushes, Path(d))
    out = {"benchmark": "online_link", "environment": environment(), "link": link, "bare_pyzmq": bare,
           "note": "loopback, two processes on a shared 2-core machine; the link fsyncs every batch to its spill "
                   "directory before sending it (nothing lost if the actor dies), bare pyzmq does not"}
    path = write_json(a.out, as_result(out, Path(a.out).stem, "online_link"))
    print(f"throughput: link {link['transitions_per_s']:.0f} transitions/s, bare pyzmq {bare['transitions_per_s']:.0f}/s")
    print(f"weights push p50/p99: link {link['weights_push']['p50_ms']:.2f}/{link['weights_push']['p99_ms']:.2f} ms, "
          f"bare pyzmq {bare['weights_push']['p50_ms']:.2f}/{bare['weights_push']['p99_ms']:.2f} ms")
    print(f"written: {path}")


if __name__ == "__main__":
    main()
