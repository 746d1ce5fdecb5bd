"""The ReinFlow benchmark's results: the latency and shortcut rows its script writes (robotrl.bench.tasks._formats), with
the ONNX Runtime latency row, and the "time to DPPO's final return" rows the suite derives from per-seed curves
(robotrl.bench.schema), including a seed that never reaches it."""

from __future__ import annotations


import pytest

from robotrl.bench.schema import normalize

from robotrl.bench.tasks._formats import as_result  # the script's converter, as bench_reinflow.py writes its result


def _written(raw: dict, name: str, kind: str) -> list[dict]:
    """What the suite reads from the file the script writes."""
    return normalize(as_result(raw, name, kind), name)


def _learning_doc(rf_times: list[float | None]) -> dict:
    runs, per_run = [], []
    for seed, t in enumerate(rf_times):
        for method, wall in (("dppo", 20.0), ("reinflow", 30.0)):
            runs.append({"method": method, "family": method, "peer": False, "seed": seed, "offline_score": 9.5,
                         "curve": [[0, 9.5], [1000, 11.0]], "wall_s": wall})
            row = {"method": method, "seed": seed, "finetune_wall_s": wall}
            if method == "reinflow":
                row.update(dppo_final_eval_return=10.5, time_to_dppo_final_s=t,
                           time_to_dppo_final_over_dppo_wall=None if t is None else t / 20.0)
            per_run.append(row)
    ratios = [None if t is None else t / 20.0 for t in rf_times]
    return {"benchmark": "reinflow_learning", "task": "t", "metric": "return", "budgets": [1000], "runs": runs,
            "per_run": per_run, "summary": {"time_to_dppo_final_ratio_iqm": None if None in ratios else
                                            sorted(ratios)[len(ratios) // 2]}}


def test_time_to_dppo_final_rows_per_seed_and_iqm():
    docs = normalize(_learning_doc([4.0, 8.0, 6.0]), "reinflow_learning")
    assert [d["benchmark"] for d in docs] == ["reinflow_learning", "reinflow_learning_time"]
    rows = docs[1]["rows"]
    assert len(rows) == 4
    assert [r["ratio"] for r in rows[:3]] == pytest.approx([0.2, 0.4, 0.3])
    assert all(r["peer"] == 20.0 and r["unit"] == "s" and r["target"] == 0.3 for r in rows[:3])
    assert rows[3]["ours"] == pytest.approx(0.3) and "never" not in rows[3]["what"]


def test_a_seed_that_never_reaches_dppo_final_return_has_no_ratio():
    rows = normalize(_learning_doc([4.0, None, 6.0]), "reinflow_learning")[1]["rows"]
    assert rows[1]["ours"] is None and rows[1]["ratio"] is None and "(never)" in rows[1]["what"]
    assert rows[3]["ours"] is None and "never on some seed" in rows[3]["what"]


def test_learning_results_without_curves_have_no_time_rows():
    doc = _learning_doc([4.0])
    for r in doc["per_run"]:
        r.pop("time_to_dppo_final_s", None)
    assert [d["benchmark"] for d in normalize(doc, "reinflow_learning")] == ["reinflow_learning"]


def _latency(**extra: float) -> dict:
    """A latency result's medians (ms): flow 1/2/4 steps and DDIM-5, eager and traced, plus ``extra``."""
    base = {"flow_1": 1.6, "flow_2": 3.0, "flow_4": 6.0, "ddim_5": 11.0, "flow_1_traced": 1.0, "flow_2_traced": 1.7,
            "flow_4_traced": 3.1, "ddim_5_traced": 5.6}
    return {k: {"ms_median": v} for k, v in {**base, **extra}.items()}


@pytest.mark.parametrize("kind, peer_name", [("onnx", "DDIM-5 (ONNX Runtime)"),
                                             ("deployed", "DDIM-5 (TorchScript as deployed)")])
def test_latency_table_has_the_onnx_and_deployed_rows_when_measured(kind, peer_name):
    doc = {"benchmark": "reinflow_latency", "latency": _latency(), "ratios": {}, "one_step_under_0_5_ms": {}}
    assert not any(r["peer_name"] == peer_name for r in _written(doc, "reinflow_latency", "reinflow_latency")[0]["rows"])
    doc["latency"] = _latency(**{f"flow_1_{kind}": 0.45, f"ddim_5_{kind}": 2.5})
    rows = [r for r in _written(doc, "reinflow_latency", "reinflow_latency")[0]["rows"] if r["peer_name"] == peer_name]
    assert len(rows) == 1 and rows[0]["ours"] == 0.45 and rows[0]["ratio"] == pytest.approx(0.18)
    assert rows[0]["target"] == 0.5 and rows[0]["target_on"] == "ours"


def test_latency_table_has_shortcut_rows_when_measured():
    lat = _latency(shortcut_1=1.8, shortcut_1_traced=1.1)
    rows = _written({"benchmark": "reinflow_latency", "latency": lat, "ratios": {}}, "reinflow_latency", "reinflow_latency")[0]["rows"]
    sc = [r for r in rows if r["what"].startswith("shortcut")]
    assert [r["ours"] for r in sc] == [1.8, 1.1] and sc[0]["ratio"] == pytest.approx(1.8 / 1.6)
    assert sc[1]["peer_name"] == "flow 1-step (traced)"


def test_shortcut_quality_rows_compare_shortcut_and_flow_at_each_k():
    summary = {f"{n}_{k}": {"return": {"mean": r}, "success_rate": {"mean": s}}
               for n, k, r, s in (("flow", 1, 12.0, 0.2), ("flow", 4, 13.0, 0.4), ("shortcut", 1, 12.6, 0.3),
                                  ("shortcut", 4, 12.8, 0.0))}
    doc = {"benchmark": "reinflow_shortcut_quality", "setting": {"steps": [1, 4]}, "summary": summary}
    rows = _written(doc, "reinflow_shortcut_quality", "shortcut_quality")[0]["rows"]
    assert [r["ratio"] for r in rows] == pytest.approx([1.05, 1.5, 12.8 / 13.0, 0.0, 12.6 / 13.0])
    assert rows[-1]["peer_name"] == "flow 4-step" and not any(r["regression_check"] for r in rows)
