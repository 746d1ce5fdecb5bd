"""The study summary of a multirun (robotrl.distributed.study): per configuration, IQM and 95 % bootstrap CI
of the final scores over seeds, from the runs' report.json files (no Ray needed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf
from scipy import stats

from robotrl.distributed.study import StudySummary, study_summary, write_study


def _sweep(tmp_path, finals: dict[str, list[float]]):
    job = 0
    for clip, values in finals.items():
        for seed, final in enumerate(values):
            d = tmp_path / str(job)
            (d / ".hydra").mkdir(parents=True)
            (d / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n- agent.model.clip={clip}\n")
            hist = [{"phase": "offline", "step": 0, "return_mean": 1.0},
                    {"phase": "online", "step": 100, "return_mean": final / 2}, {"phase": "online", "step": 200, "return_mean": final}]
            (d / "report.json").write_text(json.dumps({
                "config": {"agent": {"name": "ppo", "onpolicy": {}}, "seed": seed, "env": {"name": "hopper"},
                           "dataset": {"id": "hopper-medium"}}, "history": hist, "summary": {"wall_time_s": 3.0}}))
            job += 1


def test_study_gives_iqm_and_bootstrap_ci_per_configuration(tmp_path):
    finals = {"0.1": [1.0, 5.0, 2.0, 9.0, 3.0, 100.0, 4.0, 6.0], "0.2": [10.0, 12.0, 11.0, 13.0]}
    _sweep(tmp_path, finals)
    study = study_summary(tmp_path)
    assert study["metric"] == "return"
    by_name = {c["name"]: c for c in study["configurations"]}
    assert set(by_name) == {"ppo (agent.model.clip=0.1)", "ppo (agent.model.clip=0.2)"}
    for clip, values in finals.items():
        c = by_name[f"ppo (agent.model.clip={clip})"]
        assert c["runs"] == len(values) and sorted(c["seeds"]) == list(range(len(values)))
        assert sorted(r["final"] for r in c["per_run"]) == sorted(values)
        assert c["final"]["iqm"] == pytest.approx(stats.trim_mean(values, 0.25))  # the outlier 100 is trimmed
        assert c["final"]["lo"] < c["final"]["iqm"] < c["final"]["hi"]
        assert min(values) <= c["final"]["lo"] and c["final"]["hi"] <= max(values)
    assert by_name["ppo (agent.model.clip=0.1)"]["final"]["iqm"] < np.mean(finals["0.1"])


def test_written_at_the_end_of_a_multirun_and_never_fails_it(tmp_path, capsys):
    _sweep(tmp_path, {"0.1": [1.0, 2.0]})
    StudySummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert json.loads((tmp_path / "study.json").read_text())["configurations"][0]["runs"] == 2
    md = (tmp_path / "study.md").read_text()
    assert md.startswith("# Study") and "| ppo |" in md
    empty = tmp_path / "empty"
    empty.mkdir()
    StudySummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(empty)}}}))
    assert "none written" in capsys.readouterr().out and not (empty / "study.json").exists()
    assert write_study(tmp_path).name == "study.json"
