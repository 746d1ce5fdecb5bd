"""The one form of benchmark results that the suite reads (tables, plots, regression check).

Every suite script writes this form, with its own raw figures under ``details`` (the scripts' converters are in
:mod:`robotrl.bench.tasks._formats`, beside the task modules; ``python benchmarks/_formats.py FILE`` converts a
file an older script wrote).

Learning results (one benchmark = one table and one plot)::

    {"benchmark": str, "task": str, "metric": "return" | "success" | "normalized_score",
     "budgets": [online env steps at which the table reports scores],
     "runs": [{"method": str, "family": str, "peer": bool, "seed": int,
               "offline_score": float | None,        # before any online step (None: from scratch)
               "curve": [[env_steps, score], ...],   # online evaluations (env_steps 0 = before updates)
               "success_curve": [[env_steps, success], ...],   # optional
               "wall_curve": [[env_steps, seconds], ...],      # optional: online wall time at each evaluation
               "wall_s": float | None}],
     "threshold": float,                        # optional: the table gets a time-to-threshold column
     "command": str, "argv": [...], "environment": {...},
     "throughput": {...}}                       # optional: a throughput document measured in the same run

An offline-only benchmark has ``budgets`` ``[]`` and runs with ``curve`` ``[]``: its
``offline_score`` is the final score (runs may add ``offline_success``, the success rate of
that policy). A learning document's optional ``throughput`` key holds a throughput document
(below) measured by the same run; :func:`normalize` returns it as a second document.

Throughput results::

    {"benchmark": str, "rows": [{"what", "ours", "peer_name", "peer", "unit", "ratio",
                                 "target" (optional), "target_on": "ratio" | "ours",
                                 "higher_is_better": bool, "regression_check": bool}],
     "command": str, "environment": {...}}

``ratio`` is ours / peer of the quantity in ``unit`` (for latencies, lower is better, so
``higher_is_better`` is False); ``regression_check`` False leaves a row out of the
regression check (tail latencies, which the OS scheduler sets on a shared machine).

:func:`load_results` reads one result file and returns the documents it holds (a learning document's
``throughput`` as a second one, and the time-to-DPPO's-final table of a ReinFlow comparison as another).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from robotrl.bench.tables import METRIC_NAMES
from robotrl.errors import RobotRLError

METRICS = ("return", "success", "normalized_score")


class BenchFormatError(RobotRLError, ValueError):
    """A benchmark result file that is not in any known format."""


def is_learning(doc: dict) -> bool:
    """True for a document in the normalised learning form."""
    return isinstance(doc.get("runs"), list) and "budgets" in doc and "metric" in doc


def is_throughput(doc: dict) -> bool:
    """True for a document in the normalised throughput form."""
    return isinstance(doc.get("rows"), list) and "benchmark" in doc


def validate_learning(doc: dict) -> dict:
    """Check the keys and types of a learning document; returns it. Raises :class:`BenchFormatError`."""
    for key in ("benchmark", "task", "metric", "budgets", "runs"):
        if key not in doc:
            raise BenchFormatError(f"learning result {doc.get('benchmark', '?')!r} lacks {key!r}")
    if doc["metric"] not in METRICS:
        raise BenchFormatError(f"learning result {doc['benchmark']!r}: metric {doc['metric']!r} not in {METRICS}")
    for r in doc["runs"]:
        missing = {"method", "seed", "offline_score", "curve"} - set(r)
        if missing:
            raise BenchFormatError(f"learning result {doc['benchmark']!r}: a run lacks {sorted(missing)}")
        r.setdefault("family", r["method"])
        r.setdefault("peer", False)
        r.setdefault("wall_s", None)
    return doc


def validate_throughput(doc: dict) -> dict:
    """Check the rows of a throughput document; returns it. Raises :class:`BenchFormatError`."""
    for r in doc["rows"]:
        if "what" not in r or "ours" not in r:
            raise BenchFormatError(f"throughput result {doc.get('benchmark')!r}: a row lacks 'what' or 'ours'")
        r.setdefault("peer_name", None)
        r.setdefault("peer", None)
        r.setdefault("unit", "")
        r.setdefault("ratio", None)
        r.setdefault("higher_is_better", True)
        r.setdefault("target_on", "ratio")
        r.setdefault("regression_check", True)
    return doc


def command_of(doc: dict) -> str | None:
    """The command line a result file records (``command``, or ``environment.argv``), if any."""
    if doc.get("command"):
        return str(doc["command"])
    argv = doc.get("argv") or (doc.get("environment") or {}).get("argv")
    if argv:
        return "python " + " ".join(str(a) for a in argv)
    return None


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _row(what, ours, peer_name, peer, unit, ratio, target=None, higher=True, target_on="ratio", check=True) -> dict:
    return {"what": what, "ours": _num(ours), "peer_name": peer_name, "peer": _num(peer), "unit": unit,
            "ratio": _num(ratio), "target": target, "target_on": target_on, "higher_is_better": higher,
            "regression_check": check}


def _reinflow_learning_time(doc: dict) -> dict | None:
    """``bench_reinflow.py learning`` with per-iteration curves, or ``bench_fetch_chunked.py`` with both methods
    (:func:`robotrl.bench.sweep.add_reinflow_time_to_dppo_final`): per seed, ReinFlow's training wall seconds until its
    eval score (the document's metric) first reaches DPPO's final one vs DPPO's whole fine-tuning wall time (target
    ratio <= 0.3; "never": not reached within the budget), and the IQM of the ratios over seeds (None if a seed never
    reaches it)."""
    per = [r for r in doc.get("per_run", []) if r.get("method") == "reinflow" and "time_to_dppo_final_s" in r]
    if not per:
        return None
    dppo = {r["seed"]: r for r in doc["per_run"] if r.get("method") == "dppo"}
    metric = METRIC_NAMES.get(doc.get("metric", "return"), "score")
    rows = []
    for r in per:
        t, wall = r["time_to_dppo_final_s"], dppo[r["seed"]]["finetune_wall_s"]
        rows.append({**_row(f"seed {r['seed']}: ReinFlow time to DPPO's final {metric} {r['dppo_final_eval_return']:.2f}"
                            f"{' (never)' if t is None else ''} vs DPPO wall", t, "DPPO", wall, "s",
                            None if t is None else t / wall, target=0.3, higher=False, check=False),
                     "never": t is None})  # not reached within the budget: the target is missed, not unmeasured
    iqm = doc.get("summary", {}).get("time_to_dppo_final_ratio_iqm")
    rows.append({**_row(f"ReinFlow / DPPO wall time to DPPO's final {metric}, IQM over seeds"
                        f"{' (never on some seed)' if iqm is None else ''}", iqm, None, None, "x", iqm, target=0.3,
                        higher=False, target_on="ours", check=False),
                 "never": iqm is None and any(r["time_to_dppo_final_s"] is None for r in per)})
    return {"benchmark": f"{doc.get('benchmark', 'reinflow_learning')}_time", "command": command_of(doc),
            "environment": doc.get("environment", {}), "rows": rows}


def _detect(doc: dict) -> str | None:
    if is_learning(doc) and (not doc["runs"] or (isinstance(doc["runs"][0], dict) and "curve" in doc["runs"][0])):
        return "learning"
    if is_throughput(doc):
        return "throughput"
    return None


def normalize(doc: dict, name: str) -> list[dict]:
    """The normalised documents (learning and/or throughput) in one result document.

    ``name`` (the file's stem) becomes the benchmark name when the document has none.
    Raises :class:`BenchFormatError` for an unknown format.
    """
    kind = _detect(doc)
    if kind is None:
        raise BenchFormatError(f"benchmark result {name!r} is not in the suite's form (keys: {sorted(doc)[:8]}); a file "
                               "from an older script converts with `python -m robotrl.bench.tasks._formats FILE`, or rerun it")
    if kind == "learning":
        out = {**doc, "benchmark": doc.get("benchmark") or name}
        out.setdefault("command", command_of(doc))
        docs = [validate_learning(out)]
        tp = doc.get("throughput")
        if isinstance(tp, dict) and is_throughput(tp):  # a learning benchmark that also times its contenders
            docs.append(validate_throughput({"command": out["command"], "environment": doc.get("environment", {}),
                                             **tp}))
        rt = _reinflow_learning_time(out)
        if rt is not None:
            docs.append(validate_throughput(rt))
        return docs
    out = {**doc}  # throughput
    out.setdefault("command", command_of(doc))
    return [validate_throughput(out)]


def load_results(path: str | Path) -> list[dict]:
    """Read one result JSON (any known format) and return its normalised documents.

    Raises:
        BenchFormatError: the file is not valid JSON or in no known format.
        FileNotFoundError: the file does not exist.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BenchFormatError(f"{path}: not valid JSON ({exc}); rerun the benchmark that writes it") from exc
    return normalize(doc, path.stem)
