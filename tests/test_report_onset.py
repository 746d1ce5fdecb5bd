"""The run report's onset dip (issue 11 item 9): the lowest evaluation in the early online window
after gradient updates start, by the bench suite's definition, for both trainers."""

import json
import math

import pytest

from robotrl.agent import OffPolicyAgentBase
from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer
from robotrl.report import onset_summary, write_report
from robotrl.stats import onset_dip
from robotrl.trainer import Trainer, TrainerConfig


def _ev(phase, step, ret, success=float("nan")):
    return {"phase": phase, "step": step, "return_mean": float(ret), "return_std": 0.0, "normalized_score": float("nan"),
            "success_rate": float(success), "episodes": 10.0}


# the WSRL run: 446 offline, then 1022 -> 916 -> 1 early online, recovering later
OFFLINE_STEPS, WARMUP, BUDGET = 10_000, 2_000, 100_000
HISTORY = [_ev("offline", 5_000, 300, 0.2), _ev("offline", OFFLINE_STEPS, 446, 0.5),
           _ev("online", OFFLINE_STEPS + 2_000, 1022, 0.6),   # end of the no-update warmup: no update yet
           _ev("online", OFFLINE_STEPS + 5_000, 916, 0.4), _ev("online", OFFLINE_STEPS + 10_000, 1, 0.0),
           _ev("online", OFFLINE_STEPS + 50_000, 2000, 0.9), _ev("online", OFFLINE_STEPS + BUDGET, 2500, 1.0)]


def test_onset_summary_is_the_bench_definition():
    out = onset_summary(HISTORY, online_start=OFFLINE_STEPS, first_update=WARMUP, budget=BUDGET)
    assert out["onset_dip_return"] == pytest.approx(1 - 446)   # not 1022 - 446 = +576
    assert out["onset_dip_success"] == pytest.approx(0.0 - 0.5)
    assert "onset_dip_normalized_score" not in out             # no normalised score in this task
    assert out["onset_window_env_steps"] == [WARMUP, WARMUP + BUDGET // 10]
    curve = [(h["step"] - OFFLINE_STEPS, h["return_mean"]) for h in HISTORY if h["phase"] == "online"]
    assert out["onset_dip_return"] == onset_dip(446, curve, BUDGET, WARMUP)
    # undefined where the bench says so: only the final evaluation after updates start
    only_final = onset_summary(HISTORY[:2] + HISTORY[-1:], online_start=OFFLINE_STEPS, first_update=WARMUP,
                               budget=BUDGET)
    assert math.isnan(only_final["onset_dip_return"])
    assert onset_summary(HISTORY[:2], online_start=OFFLINE_STEPS) == {}


def test_trainer_summary_report_and_tensorboard(tmp_path, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = TrainerConfig(offline_steps=OFFLINE_STEPS, online_steps=BUDGET, online_warmup_steps=WARMUP, progress=True)
    # an agent with only the hooks' defaults (OffPolicyAgentBase): the loop is built, never stepped
    tr = Trainer(agent=OffPolicyAgentBase(), run_dir=tmp_path, config=cfg, offline_buffer=object(), make_eval_env=lambda: None,
                 make_train_envs=lambda: None, title="wsrl")
    tr.history, tr.step = list(HISTORY), OFFLINE_STEPS + BUDGET
    summary = tr._summary(resumed=False)
    assert summary["onset_dip_return"] == pytest.approx(-445) and summary["onset_dip_success"] == pytest.approx(-0.5)
    out = capsys.readouterr().out
    assert "onset dip" in out and "return -445.000" in out
    write_report(tmp_path, summary=summary, history=tr.history, config={})
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["summary"]["onset_dip_return"] == pytest.approx(-445)
    md = (tmp_path / "report.md").read_text()
    assert "| onset_dip_return | -445.000 |" in md and "lowest evaluation within 10 %" in md
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    assert [e.value for e in acc.Scalars("summary/onset_dip_return")] == [pytest.approx(-445)]


def test_onpolicy_summary_uses_the_same_function(tmp_path):
    tr = OnPolicyTrainer(agent=None, run_dir=tmp_path, config=OnPolicyConfig(progress=False),
                         make_train_envs=lambda: None, make_eval_env=lambda: None)
    hist = [_ev("offline", 0, 446, 0.5), _ev("online", 5_000, 1022, 0.6), _ev("online", 8_000, 1, 0.0),
            _ev("online", 100_000, 2500, 1.0)]
    tr.history, tr.step = hist, 100_000
    s = tr._summary(resumed=False)
    assert s["onset_dip_return"] == pytest.approx(-445) and s["onset_dip_success"] == pytest.approx(-0.5)
    assert s["onset_dip_return"] == onset_summary(hist, online_start=0, budget=100_000)["onset_dip_return"]
