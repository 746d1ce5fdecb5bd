"""``robotrl online-demo``: one command starts robot server, learner and actor (issue 16)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from online_procs import free_port, status


@pytest.mark.slow
def test_online_demo_runs_all_three_processes(tmp_path):
    work = tmp_path / "demo"
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "robotrl.cli", "online-demo", f"work_dir={work}", "realtime=false", "episodes=3",
           "max_steps=40", "learner_agent=sac", "warmup=32", "batch_size=16", "utd=0.1",
           f"learner_port={free_port()}", f"robot_port={free_port()}"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for name in ("robot-server", "learner"):
        assert f"started {name}" in out.stdout and (work / f"{name}.log").exists()
    summary = json.loads((work / "actor" / "summary.json").read_text())
    assert summary["episodes"] == 3 and summary["drained"] and sum(summary["interventions_per_episode"]) > 0
    assert status(work / "learner")["ingested"] == summary["steps"]  # the learner held every step at the end
    assert (work / "learner" / "checkpoints" / "latest.pt").exists()
