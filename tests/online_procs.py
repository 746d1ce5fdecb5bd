"""Helpers of the online-RL tests that start real processes (actor, learner, robot server)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    """``python -m robotrl.real_robot.online_cli <args>`` with stdout+stderr to ``log``."""
    return subprocess.Popen([sys.executable, "-m", "robotrl.real_robot.online_cli", *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env=env)


def wait(pred, what: str, procs: list, timeout: float = 120.0, state=None):
    """Poll ``pred()`` until truthy (returned); fail if a watched process exits or on timeout (the message then has
    the tail of every watched process's log and ``state()``, if given: what a flaky failure needs to be read)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        for p, log in procs:
            if p.poll() is not None:
                raise AssertionError(f"process exited ({p.returncode}) while waiting for {what}: {log.read_text()[-3000:]}")
        time.sleep(0.05)
    tails = "".join(f"\n--- {log.name} (last 3000 characters) ---\n{log.read_text()[-3000:]}" for _, log in procs)
    seen = f"\n--- state ---\n{state()}" if state is not None else ""
    raise AssertionError(f"timed out waiting for {what}{seen}{tails}")


def status(run_dir: Path) -> dict:
    """The learner's ``status.json`` (``{}`` before it exists)."""
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def episode_lines(log: Path) -> list[dict]:
    """The per-episode JSON lines an actor printed."""
    return [json.loads(line)["episode"] for line in log.read_text().splitlines() if line.startswith('{"episode"')]


def stop_all(*procs) -> None:
    """Kill whatever of ``procs`` still runs (test teardown)."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()


#: a small SAC learner for tests (CPU, shared machine)
SMALL_SAC = ["agent=sac", "agent.model.num_critics=2", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
             "trainer.batch_size=16", "trainer.online_warmup_steps=32", "trainer.utd=0.2"]

#: an open 2×2 PointMaze (no inner walls): a straight line joins any two points
OPEN_MAZE = "[[1,1,1,1],[1,0,0,1],[1,0,0,1],[1,1,1,1]]"
