"""Benchmark of the real-robot bridge on this machine (loopback, separate processes).

1. Floor: bare pyzmq REQ/REP round trip with a payload of the same size, server in a
   child process.
2. Bridge: observation→action round trip (``step``: msgpack + HMAC both ways, safety
   supervisor, one MuJoCo step of the twin with real-time pacing off) against a
   ``robotrl robot-server`` process.
3. Control-loop jitter (lateness of each tick's start, s) at 50 Hz and 100 Hz over the
   bridge with an MLP-sized policy.

Run: ``python benchmarks/bench_bridge.py [--n 3000] [--seconds 5] [--out bench.json]``.
Targets (issue 6): bridge p99 < 2 ms for state observations; jitter p99 < 1 ms.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, write_json  # noqa: E402
from robotrl.real_robot.client import RobotClient
from robotrl.real_robot.control import ChunkScheduler, ControlLoop, latency_stats
from robotrl.real_robot.launch import ServerProcess
from robotrl.real_robot.protocol import load_key, write_key_file

ECHO = """
import sys, zmq
s = zmq.Context().socket(zmq.REP); port = s.bind_to_random_port("tcp://127.0.0.1"); print(port, flush=True)
while True:
    m = s.recv_multipart()
    if m[0] == b"quit": s.send(b""); break
    s.send_multipart(m)
"""


def bare_zmq(n: int, size: int) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", ECHO], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        s = zmq.Context.instance().socket(zmq.REQ)
        s.connect(f"tcp://127.0.0.1:{port}")
        payload, out = [b"x" * size, b"m" * 32], []
        for i in range(n + 100):
            t = time.perf_counter()
            s.send_multipart(payload)
            s.recv_multipart()
            if i >= 100:
                out.append(time.perf_counter() - t)
        s.send(b"quit")
        s.recv()
        s.close(0)
        return latency_stats(out)
    finally:
        proc.kill()
        proc.wait()


def bridge(client: RobotClient, n: int) -> tuple[dict, int]:
    client.reset(0)
    a, out, size = np.zeros(2, np.float32), [], 0
    for i in range(n + 100):
        if i % 250 == 0:
            client.reset(i)
        t = time.perf_counter()
        client.step(a)
        if i >= 100:
            out.append(time.perf_counter() - t)
    size = len(client.auth.seal("step", {"action": a, "deadline": time.time()})[0][0])
    return latency_stats(out), size


def jitter(client: RobotClient, rate: float, seconds: float) -> dict:
    spec = client.hello()
    w = np.random.default_rng(0).normal(size=(8, 256)).astype(np.float32)
    w2 = np.random.default_rng(1).normal(size=(256, 2)).astype(np.float32)
    policy = lambda o: np.tanh(np.maximum(o @ w, 0) @ w2)[None]  # noqa: E731  MLP-sized work
    sched = ChunkScheduler(policy)
    sched.warmup(np.zeros(8, np.float32))
    loop = ControlLoop(client, sched, rate_hz=rate, hold_action=spec.hold_action, deadline_frac=0.5)
    steps = []
    while len(steps) < rate * seconds:
        steps += loop.run_episode(seed=len(steps), max_steps=int(rate * seconds) - len(steps)).steps
    sched.close()
    return {"rate_hz": rate, "jitter": latency_stats(abs(s.jitter_s) for s in steps), "rtt": latency_stats(s.rtt_s for s in steps),
            "late_inference": sched.late, "missed": loop.missed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    key = write_key_file(Path(tempfile.mkdtemp()) / "robot.key")
    res = {}
    with ServerProcess(key, ["robot.realtime=false", "robot.safety.watchdog_s=1.0"]) as srv:
        with RobotClient(srv.endpoint, load_key(key), link_timeout_s=5.0) as c:
            c.hello()
            res["bridge_step"], size = bridge(c, args.n)
            res["message_bytes"] = size
            res["bare_zmq_req_rep"] = bare_zmq(args.n, size)
            res["ratio_p50"] = res["bridge_step"]["p50_ms"] / res["bare_zmq_req_rep"]["p50_ms"]
            for rate in (50.0, 100.0):
                res[f"loop_{int(rate)}hz"] = jitter(c, rate, args.seconds)
    res["environment"] = environment()  # versions, machine and the argv (the suite's resume key)
    print(json.dumps(res, indent=2))
    if args.out:
        write_json(Path(args.out).resolve(), res)


if __name__ == "__main__":
    main()
