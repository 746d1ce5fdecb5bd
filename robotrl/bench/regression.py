"""Regression check of the quick tier against recorded figures (``benchmarks/baselines/quick.json``).

``robotrl bench quick --record`` stores, per learning benchmark and method, the final
score's IQM and 95 % bootstrap CI over seeds, and per throughput row the ratio to its
peer. ``robotrl bench check`` (and ``robotrl bench quick`` when a baseline exists) fails
when, in the latest results:

* a learning method's final-score IQM falls below the recorded CI's lower bound (the IQM
  itself for a single seed) minus a tolerance of ``LEARNING_TOLERANCE`` (10 %) of the
  metric's range: 1.0 for success rates, 100 for normalised scores, and for raw returns
  the spread (max − min) of all scores in the recorded benchmark;
* a throughput ratio falls below ``THROUGHPUT_FACTOR`` (0.5×) of the recorded ratio (rises
  above 2× for latency ratios, where lower is better). Timings on the shared 2-core
  machines move 2–3× between runs; ratios measured side by side in one run move far
  less, and a drop to half is a real slow-down, not noise. Tail-latency rows (bridge p99)
  are not checked: on a shared machine the scheduler sets them.

Results missing now (task not run, peer not installed) are listed as "not measured" and
do not fail the check.

A learning row of robotrl's own whose limit is at or below the metric's floor (0 for success
rates and normalised scores) **cannot fail**: any result passes it, so it guards nothing.
Such rows are listed as "cannot fail" and fail the check (and :func:`record` refuses to
record them): give the task a budget at which the method scores clearly above 0. Peer rows
(a peer library from scratch may score 0 at a quick budget) are exempt.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

from robotrl.bench.machine import environment
from robotrl.bench.runner import read_json, write_json
from robotrl.bench.schema import BenchFormatError, load_results
from robotrl.stats import METRIC_RANGE
from robotrl.bench.suite import BenchError
from robotrl.bench.tables import fmt, learning_stats

LEARNING_TOLERANCE = 0.10
THROUGHPUT_FACTOR = 0.5
#: The lowest score a metric can take (rows whose limit is at or below it cannot fail); raw returns have none.
METRIC_FLOOR = {"success": 0.0, "normalized_score": 0.0}


def results_dir(root: Path, tier: str) -> Path:
    """Where a tier's result JSONs are: ``benchmarks/results/quick`` or ``benchmarks/results``."""
    base = Path(root) / "benchmarks" / "results"
    return base / "quick" if tier == "quick" else base


def baseline_path(root: Path, tier: str) -> Path:
    """``benchmarks/baselines/<tier>.json``."""
    return Path(root) / "benchmarks" / "baselines" / f"{tier}.json"


def load_dir(path: Path) -> list[dict]:
    """Normalised documents of every result JSON in ``path`` (not recursive; manifest and unknown files skipped)."""
    docs = []
    for f in sorted(Path(path).glob("*.json")):
        if f.name == "manifest.json":
            continue
        try:
            docs += load_results(f)
        except BenchFormatError:
            continue
    return docs


def _range(doc: dict) -> float:
    r = METRIC_RANGE.get(doc["metric"])
    if r is not None:
        return r
    vals = [float(v) for run in doc["runs"] for v in [run["offline_score"], *(p[1] for p in run["curve"])]
            if v is not None and math.isfinite(float(v))]
    spread = (max(vals) - min(vals)) if vals else 0.0
    return spread if spread > 0 else 1.0


def make_baseline(docs: list[dict], *, tier: str = "quick", command: str = "robotrl bench quick --record") -> dict:
    """The recorded figures of a set of normalised documents."""
    out = {"tier": tier, "command": command, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "environment": environment(),
           "tolerance": {"learning_fraction_of_range": LEARNING_TOLERANCE, "throughput_factor": THROUGHPUT_FACTOR},
           "learning": {}, "throughput": {}}
    for doc in docs:
        if "rows" in doc:
            out["throughput"][doc["benchmark"]] = {
                r["what"]: {"ratio": r["ratio"], "higher_is_better": r.get("higher_is_better", True)}
                for r in doc["rows"] if r.get("ratio") is not None and r.get("regression_check", True)}
            continue
        st = learning_stats(doc)
        out["learning"][doc["benchmark"]] = {
            "metric": doc["metric"], "range": _range(doc),
            "methods": {m: {"final_iqm": s["final"]["iqm"], "final_lo": s["final"]["lo"], "final_hi": s["final"]["hi"],
                            "n": s["final"]["n"], "peer": s["peer"]} for m, s in st["methods"].items()}}
    return out


def record(root: Path, tier: str = "quick", path: Path | None = None) -> Path:
    """Write the baseline of the tier's current results; returns its path.

    Raises:
        BenchError: the tier has no results to record, or one of robotrl's learning rows would
            have a limit at or below its metric's floor (it could never fail; see the module doc).
    """
    docs = load_dir(results_dir(root, tier))
    if not docs:
        raise BenchError(f"no results in {results_dir(root, tier)} to record; run `robotrl bench {tier}` first")
    base = make_baseline(docs, tier=tier, command=f"robotrl bench {tier} --record")
    inert = [r for r in compare(docs, base) if r["status"] == "cannot fail"]
    if inert:
        names = "; ".join(f"{r['benchmark']}: {r['what']} (recorded {fmt(r['recorded'], r['metric'])}, "
                          f"limit {fmt(r['limit'], r['metric'])})" for r in inert)
        raise BenchError(f"{len(inert)} learning row(s) could never fail, their limit being at or below the metric's "
                         f"floor: {names}. Give those tasks a budget at which the method scores clearly above 0, "
                         "then record again")
    return write_json(path or baseline_path(root, tier), base)


def compare(docs: list[dict], baseline: dict) -> list[dict]:
    """One row per recorded figure: ``benchmark, what, recorded, now, limit, status``.

    ``status`` is ``ok``, ``regressed``, ``not measured`` (no such figure in ``docs``) or
    ``cannot fail`` (one of robotrl's learning rows whose limit is at or below the metric's floor).
    """
    now_learning = {d["benchmark"]: learning_stats(d)["methods"] for d in docs if "runs" in d}
    now_tp = {d["benchmark"]: {r["what"]: r for r in d["rows"]} for d in docs if "rows" in d}
    tol = baseline.get("tolerance", {})
    frac, factor = tol.get("learning_fraction_of_range", LEARNING_TOLERANCE), tol.get("throughput_factor", THROUGHPUT_FACTOR)
    rows = []
    for bench, rec in baseline.get("learning", {}).items():
        for m, r in rec["methods"].items():
            lo = r["final_lo"] if r.get("final_lo") is not None and math.isfinite(r["final_lo"]) else r["final_iqm"]
            if lo is None or not math.isfinite(lo):
                continue
            limit = lo - frac * rec["range"]
            cur = now_learning.get(bench, {}).get(m, {}).get("final", {}).get("iqm")
            floor = METRIC_FLOOR.get(rec["metric"])
            if floor is not None and limit <= floor and not r.get("peer", False):
                status = "cannot fail"
            elif cur is None or not math.isfinite(cur):
                status = "not measured"
            else:
                status = "regressed" if cur < limit else "ok"
            rows.append({"benchmark": bench, "what": f"{m}: final {rec['metric']} (IQM)", "recorded": r["final_iqm"],
                         "now": cur, "limit": limit, "direction": ">=", "status": status, "metric": rec["metric"]})
    for bench, rec in baseline.get("throughput", {}).items():
        for what, r in rec.items():
            higher = r.get("higher_is_better", True)
            limit = r["ratio"] * factor if higher else r["ratio"] / factor
            cur = now_tp.get(bench, {}).get(what, {}).get("ratio")
            bad = cur is not None and (cur < limit if higher else cur > limit)
            rows.append({"benchmark": bench, "what": f"{what}: ratio", "recorded": r["ratio"], "now": cur, "limit": limit,
                         "direction": ">=" if higher else "<=", "status": "not measured" if cur is None else
                         ("regressed" if bad else "ok"), "metric": None})
    return rows


def format_rows(rows: list[dict], only_problems: bool = False) -> str:
    """Markdown table of :func:`compare` rows (with the change in % for regressions)."""
    lines = ["| benchmark | figure | recorded | now | limit | status |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        if only_problems and r["status"] == "ok":
            continue
        status = r["status"]
        if status == "cannot fail":
            status = "**CANNOT FAIL** (limit at or below the metric's floor)"
        elif status == "regressed" and r["recorded"]:
            status = f"**REGRESSED** ({100 * (r['now'] - r['recorded']) / abs(r['recorded']):+.0f} % vs recorded)"
        lines.append(f"| {r['benchmark']} | {r['what']} | {fmt(r['recorded'], r['metric'])} | {fmt(r['now'], r['metric'])} "
                     f"| {r['direction']} {fmt(r['limit'], r['metric'])} | {status} |")
    return "\n".join(lines)


def check(root: Path, tier: str = "quick", *, results: Path | None = None, baseline: Path | None = None) -> tuple[bool, str]:
    """Compare the latest results with the recorded baseline; ``(passed, report text)``.

    Raises:
        BenchError: no baseline file (record one with ``robotrl bench quick --record``).
    """
    bpath = Path(baseline) if baseline else baseline_path(root, tier)
    rec = read_json(bpath)
    if rec is None:
        raise BenchError(f"no baseline at {bpath}; record one with `robotrl bench {tier} --record`")
    rows = compare(load_dir(Path(results) if results else results_dir(root, tier)), rec)
    bad = [r for r in rows if r["status"] in ("regressed", "cannot fail")]
    missing = [r for r in rows if r["status"] == "not measured"]
    inert = sum(r["status"] == "cannot fail" for r in rows)
    head = (f"regression check against {bpath} (recorded {rec.get('recorded', '?')[:10]}): {len(rows)} figures, "
            f"{len(bad) - inert} regressed, {inert} cannot fail (limit at or below the metric's floor), "
            f"{len(missing)} not measured")
    return not bad, head + "\n\n" + format_rows(rows)
