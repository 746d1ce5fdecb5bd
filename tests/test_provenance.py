"""Provenance of a run (robotrl.provenance, issue 43 item 8): one hardware record per segment.

A real ``robotrl train`` process is SIGKILLed after a checkpoint and started again on the same run
directory: the run then holds two segment records (the killed one and the resume) in
``provenance.json``, the checkpoint and ``report.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from robotrl.checkpoint import load_checkpoint
from robotrl.provenance import FILE, ProvenanceLog, cpu_model, read_provenance

TINY = ["agent=bc", "dataset=pointmaze-umaze-planner", "dataset.id=robotrl/pointmaze/umaze-provenance-test-v0",
        "dataset.recipe_args.num_steps=3000", "+dataset.recipe_args.ref_episodes=3", "trainer.eval_episodes=2",
        "trainer.eval_envs=2", "trainer.log_every=50", "trainer.progress=false", "torch_threads=1", "device=cpu",
        "trainer.eval_every=100", "trainer.checkpoint_every=100"]


def test_a_resume_overwrites_the_evaluations_after_its_checkpoint(tmp_path):
    """Evaluations the killed segment made after the checkpoint it is resumed from are named as overwritten
    and leave that segment's list; the killed segment is marked killed (no end time)."""
    first = ProvenanceLog(tmp_path)
    first.begin(resumed=False, step=0, phase="offline", device="cpu")
    for step in (100, 200):
        first.update(step=step, phase="offline", evaluated=True)
    at_checkpoint = json.loads(json.dumps(first.records))  # what a checkpoint at step 200 stores
    first.update(step=300, phase="online", evaluated=True)  # evaluated, then killed before the next checkpoint

    second = ProvenanceLog(tmp_path)  # the resumed process
    rec = second.begin(resumed=True, step=200, phase="offline", checkpoint_records=at_checkpoint, device="cpu")
    assert [r["segment"] for r in second.records] == [0, 1]
    killed = second.records[0]
    assert killed["killed"] is True and killed["ended"] is None and killed["evals"] == [100, 200]
    assert killed["step_end"] == 300 and killed["phase_end"] == "online"  # the file outlived the checkpoint
    assert rec["start"] == "resume" and rec["overwrites_evals"] == [300] and rec["step_start"] == 200
    assert rec["cpu_model"] == cpu_model() and rec["device"] == "cpu"
    assert rec["gpu"] == (torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    second.update(step=400, phase="online", evaluated=True, ended=True)
    on_disk = read_provenance(tmp_path)
    assert on_disk == second.records and on_disk[1]["ended"] is not None and on_disk[1]["evals"] == [400]


def test_unreadable_provenance_reads_as_none(tmp_path):
    (tmp_path / FILE).write_text("{not json")
    assert read_provenance(tmp_path) == []
    assert read_provenance(tmp_path / "missing") == []


@pytest.mark.slow
def test_a_killed_and_resumed_run_has_two_segment_records(minari_module_root, tmp_path, kill_after_checkpoint):
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root), "PYTHONUNBUFFERED": "1"}
    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "robotrl.cli", "train", *TINY, f"run_dir={run_dir}"]
    killed_at = kill_after_checkpoint([*args, "trainer.offline_steps=1000000"], env, run_dir)
    before = read_provenance(run_dir)
    assert len(before) == 1 and before[0]["start"] == "new" and before[0]["ended"] is None
    res = subprocess.run([*args, f"trainer.offline_steps={killed_at + 100}"], env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]

    records = read_provenance(run_dir)
    assert [(r["segment"], r["start"]) for r in records] == [(0, "new"), (1, "resume")]
    killed, resumed = records
    assert killed["killed"] is True and killed["ended"] is None and killed["step_start"] == 0
    assert killed["step_end"] >= killed_at and all(s <= killed_at for s in killed["evals"])
    assert resumed["step_start"] == killed_at and resumed["step_end"] == killed_at + 100
    assert resumed["ended"] is not None and resumed["evals"] == [killed_at + 100]
    assert all(s > killed_at for s in resumed["overwrites_evals"])
    for r in records:  # the machine of each segment
        assert r["cpu_model"] == cpu_model() and r["device"] == "cpu" and r["phase_start"] == "offline"
        assert r["torch"] and r["python"] and r["host"] and r["started"] <= r["last_seen"]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True and summary["provenance"] == records
    stored = load_checkpoint(run_dir / "checkpoints" / "latest.pt")["provenance"]
    assert [r["segment"] for r in stored] == [0, 1] and stored[1]["step_end"] == killed_at + 100


def test_the_qlearning_study_carries_each_runs_segments_into_its_result():
    """bench_qlearning_learning's rows hold the fine-tuning's and the pretraining's records (and none, not an error,
    for units cached before provenance was recorded)."""
    import argparse

    from robotrl.bench.tasks import qlearning_learning as ql

    pre_rec, ft_rec = {"segment": 0, "phase_start": "offline"}, {"segment": 0, "phase_start": "online"}
    curve = [[0, -5.0, 0.2, 0.0], [1000, -3.0, 0.5, 9.0]]
    per_seed = {"robotrl-offline-calql": [{"return_mean": -5.0, "seconds": 1.0, "provenance": [pre_rec]},
                                          {"return_mean": -5.0, "seconds": 1.0}],
                "robotrl-wsrl": [{"curve": curve, "seconds": 2.0, "provenance": [ft_rec]}, {"curve": curve, "seconds": 2.0}]}
    rows = ql.to_runs(per_seed, [0, 1], argparse.Namespace(warmup=500))
    assert rows[0]["provenance"] == {"run": [ft_rec], "pretraining": [pre_rec]}
    assert rows[1]["provenance"] == {"run": [], "pretraining": []}
