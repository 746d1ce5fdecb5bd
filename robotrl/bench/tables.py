"""CORL-style markdown tables of learning results and ratio tables of throughput results.

Learning table: one row per method (peers marked), columns offline score, score at fixed
online budgets, the last evaluation, the ending (the mean of each run's last
:data:`~robotrl.stats.ENDING_EVALS` = 5 evaluations: the level a run holds, where the last
point is one noisy draw), regret, onset dip and wall time, each the interquartile mean over
seeds with its 95 % bootstrap confidence interval, ``IQM [lo, hi]``, and ``n`` the number of seeds. Throughput table: robotrl's figure, the peer's figure measured in the
same run, their ratio and the target where the issue sets one.
"""

from __future__ import annotations

import math

from robotrl.stats import (
    ENDING_EVALS,
    METRIC_MAX,
    ending_evals,
    ending_score,
    final_score,
    iqm,
    onset_dip,
    regret,
    score_at,
    summarize,
    time_to_threshold,
)

METRIC_NAMES = {"return": "return", "success": "success rate", "normalized_score": "normalised score"}


def success_metric(doc: dict) -> str:
    """Which success a learning document's success rates are: ``"final-step"`` or ``"any-step"``.

    The document's own ``success_metric`` when it has one (sweeps of ``robotrl train`` runs
    record it); else, for results measured under :data:`robotrl.evaluation.SUCCESS_CONVENTION`
    (their ``environment`` records it), final-step for Fetch tasks and any-step for the others;
    results recorded before that counted a success at any step for every task.
    """
    if doc.get("success_metric"):
        return str(doc["success_metric"])
    if (doc.get("environment") or {}).get("success_convention"):
        return "final-step" if "fetch" in str(doc.get("task", "")).lower() else "any-step"
    return "any-step"


def metric_name(doc: dict, metric: str | None = None) -> str:
    """The metric's name for a table, success rates with the step that counts: "success rate (final-step)"."""
    metric = metric or doc["metric"]
    return f"success rate ({success_metric(doc)})" if metric == "success" else METRIC_NAMES[metric]


def fmt(v, metric: str | None = None) -> str:
    """A number for a table: 2 decimals for success rates and small values, fewer for large ones; "—" for none."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "—"
    v = float(v) + 0.0
    if metric == "success":
        return f"{v:.2f}".replace("-0.00", "0.00")
    a = abs(v)
    if a < 1e-6:
        return "0"
    s = f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 0.1 else f"{v:.3g}"
    return "0.00" if s == "-0.00" else s


def cell(s: dict, metric: str | None = None) -> str:
    """``IQM [lo, hi]`` of a :func:`~robotrl.stats.summarize` dict (no interval for one seed)."""
    if not s or s["n"] == 0:
        return "—"
    if not math.isfinite(s["lo"]):
        return fmt(s["iqm"], metric)
    return f"{fmt(s['iqm'], metric)} [{fmt(s['lo'], metric)}, {fmt(s['hi'], metric)}]"


def shown_budgets(budgets: list[int], k: int = 3) -> list[int]:
    """Up to ``k`` online budgets before the last one (the final score covers the last): the first
    online evaluation (where a dip shows), then those nearest to 1/4 and 1/2 of the last budget."""
    inner = [b for b in sorted(budgets)[:-1] if b > 0]
    if len(inner) <= k:
        return inner
    last = sorted(budgets)[-1]
    picks = [inner[0]] + [min(inner, key=lambda b: abs(b - f * last)) for f in (0.25, 0.5)]
    return sorted(set(picks))[:k]


def learning_stats(doc: dict) -> dict:
    """Per method (in order: robotrl's first, then peers): the summaries behind a learning table.

    Returns ``{"best": float | None, "methods": {method: {"peer", "family", "n", "offline",
    "budgets": {b: summary}, "final", "ending", "ending_evals", "regret", "dip", "wall"}}}`` ("final": the
    last evaluation; "ending": the mean of the last :data:`ENDING_EVALS` evaluations per run, "ending_evals" the
    fewest any run of the method had for it); regret uses the metric's
    maximum when it has one, else the best final IQM of any method (see
    :func:`robotrl.stats.regret`).
    """
    metric, budgets = doc["metric"], sorted(doc["budgets"])
    total = budgets[-1] if budgets else None
    methods: dict[str, list[dict]] = {}
    for r in doc["runs"]:
        methods.setdefault(r["method"], []).append(r)
    order = sorted(methods, key=lambda m: (bool(methods[m][0].get("peer")), list(methods).index(m)))
    finals = {m: [final_score(r["offline_score"], r["curve"]) for r in methods[m]] for m in order}
    best = METRIC_MAX.get(metric)
    if best is None:
        vals = [iqm(v) for v in finals.values()]
        vals = [v for v in vals if math.isfinite(v)]
        best = max(vals) if vals else None
    out = {}
    for m in order:
        rs = methods[m]
        out[m] = {"peer": bool(rs[0].get("peer")), "family": rs[0].get("family", m), "n": len(rs),
                  "offline": summarize([r["offline_score"] for r in rs]),
                  "budgets": {b: summarize([score_at(r["curve"], b) for r in rs]) for b in budgets},
                  "final": summarize(finals[m]),
                  "ending": summarize([ending_score(r["offline_score"], r["curve"]) for r in rs]),
                  "ending_evals": min(ending_evals(r["curve"]) for r in rs),
                  "held_out": summarize([(r.get("held_out") or {}).get("score") for r in rs]),
                  "held_out_best": summarize([(r.get("held_out_best") or {}).get("score") for r in rs]),
                  "regret": summarize([regret(r["curve"], best) for r in rs]),
                  "dip": summarize([onset_dip(r["offline_score"], r["curve"], total, r.get("first_update_step") or 0)
                                    for r in rs]),
                  "wall": summarize([r.get("wall_s") for r in rs])}
        if doc.get("threshold") is not None:
            out[m]["time_to"] = [time_to_threshold(r["curve"], r.get("wall_curve"), float(doc["threshold"]))
                                 for r in rs]
    return {"best": best, "methods": out}


def time_cell(times: list[float | None]) -> str:
    """A time-to-threshold cell: ``IQM [lo, hi]`` seconds when every seed got there, "never" when
    none did, else the IQM of those that did with how many (``"420 (2/4)"``); "—" without wall curves."""
    known = [t for t in times if t is not None]
    if not known:
        return "—"
    reached = [t for t in known if math.isfinite(t)]
    if not reached:
        return "never"
    s = cell(summarize(reached))
    return s if len(reached) == len(known) else f"{fmt(iqm(reached))} ({len(reached)}/{len(known)})"


def _steps(b: int) -> str:
    return f"{b // 1000}k" if b >= 1000 and b % 1000 == 0 else f"{b:,}"


def _held_out_episodes(doc: dict) -> int | None:
    for f in ("held_out", "held_out_best"):
        for r in doc["runs"]:
            if r.get(f):
                return int(r[f]["episodes"])
    return None


def _held_out_columns(doc: dict) -> tuple[list[str], list[str]]:
    """The held-out fields the runs have (:func:`robotrl.bench.sweep.add_held_out`) and their column names."""
    held = [f for f in ("held_out", "held_out_best") if any(r.get(f) for r in doc["runs"])]
    eps = _held_out_episodes(doc)
    names = {"held_out": f"held-out last ({eps} ep.)", "held_out_best": f"held-out best kept ({eps} ep.)"}
    return held, [names[f] for f in held]


def _held_out_note(doc: dict) -> str:
    eps = _held_out_episodes(doc)
    if eps is None:
        return ""
    return (f" Held-out: the last policy (and the best one trainer.keep_best kept, selected on the run's own "
            f"evaluations) evaluated on {eps} episodes whose resets no run evaluation or tuning used.")


def is_offline_only(doc: dict) -> bool:
    """No online budget and no run with an online curve: every score is an offline one."""
    return not doc["budgets"] and not any(r["curve"] for r in doc["runs"])


def offline_table(doc: dict) -> str:
    """The table of an offline-only learning document: score (and success rate) after training, wall time."""
    metric = doc["metric"]
    st = learning_stats(doc)
    methods: dict[str, list[dict]] = {}
    for r in doc["runs"]:
        methods.setdefault(r["method"], []).append(r)
    success = metric != "success" and any(r.get("offline_success") is not None for r in doc["runs"])
    held, held_head = _held_out_columns(doc)
    head = ["method", "n", metric_name(doc)] + ([metric_name(doc, "success")] if success else []) + held_head + ["wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    for m, s in st["methods"].items():
        name = f"{m} (peer)" if s["peer"] else m
        row = [name, str(s["n"]), cell(s["offline"], metric)]
        if success:
            row.append(cell(summarize([r.get("offline_success") for r in methods[m]]), "success"))
        row += [cell(s[f], metric) for f in held]
        lines.append("| " + " | ".join(row + [cell(s["wall"])]) + " |")
    lines += ["", f"Offline only (no online phase): {metric_name(doc)} of the trained policy; cells: IQM over "
              "seeds [95 % bootstrap CI]; wall s: the run's wall time as the benchmark records it." + _held_out_note(doc)]
    return "\n".join(lines)


def learning_table(doc: dict) -> str:
    """The CORL-style markdown table of one learning document (:func:`offline_table` for an offline-only one).

    A method with runs that stopped before the budget (``"finished": false``) shows its final cell as
    ``… (to N)``, N the earliest of those runs' last evaluations."""
    if is_offline_only(doc):
        return offline_table(doc)
    metric = doc["metric"]
    st = learning_stats(doc)
    cols = shown_budgets(doc["budgets"])
    thr = doc.get("threshold")
    held, held_head = _held_out_columns(doc)
    head = ["method", "n", "offline"] + [f"@{_steps(b)}" for b in cols] + \
        [f"last{' @' + _steps(max(doc['budgets'])) if doc['budgets'] else ''}", f"ending (last {ENDING_EVALS})"] + \
        held_head + ["regret", "onset dip"] + \
        ([f"time to {fmt(thr, metric)} s"] if thr is not None else []) + ["wall s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|"]
    stopped: dict[str, int] = {}  # method -> earliest last evaluation of its unfinished runs
    for r in doc["runs"]:
        if r.get("finished") is False:
            stopped[r["method"]] = min(stopped.get(r["method"], r["stopped_at"]), r["stopped_at"])
    for m, s in st["methods"].items():
        name = f"{m} (peer)" if s["peer"] else m
        final = cell(s["final"], metric) + (f" (to {_steps(stopped[m])})" if m in stopped else "")
        few = s["ending_evals"]
        ending = cell(s["ending"], metric) + (f" (last {few})" if 0 < few < ENDING_EVALS else "")
        row = [name, str(s["n"]), cell(s["offline"], metric)] + [cell(s["budgets"][b], metric) for b in cols] + \
            [final, ending] + [cell(s[f], metric) for f in held] + [cell(s["regret"], metric), cell(s["dip"], metric)] + \
            ([time_cell(s["time_to"])] if thr is not None else []) + [cell(s["wall"])]
        lines.append("| " + " | ".join(row) + " |")
    best = st["best"]
    ref = ("the metric's maximum" if METRIC_MAX.get(metric) is not None else "the best final IQM in the table")
    lines.append("")
    lines.append(f"Metric: {metric_name(doc)}; cells: IQM over seeds [95 % bootstrap CI]; budgets in online env "
                 f"steps; last = the last evaluation; ending = the mean of each run's last {ENDING_EVALS} online "
                 f"evaluations (\"(last k)\" where a run had only k), the level the run holds rather than one noisy "
                 f"point; regret = mean over online evaluations of ({fmt(best, metric)} − score), {fmt(best, metric)} "
                 f"being {ref}; onset dip = lowest score within 10 % of the budget after gradient updates start (after a no-update warmup, if any) − offline score."
                 + _held_out_note(doc)
                 + (f" Time to {fmt(thr, metric)}: online wall seconds (evaluations excluded) until the first "
                    "evaluation at or above it; \"never\" where no seed reached it, (k/n) where k of n seeds did."
                    if thr is not None else ""))
    return "\n".join(lines)


def _ratio(r: dict) -> str:
    return "—" if r.get("ratio") is None else f"{r['ratio']:.2f}×"


def _target(r: dict) -> str:
    t = r.get("target")
    if t is None:
        return ""
    on_ratio = r.get("target_on", "ratio") == "ratio"
    v = r.get("ratio") if on_ratio else r.get("ours")
    # a ratio target is a minimum speed-up, unless the row is a cost (time to a score over the peer's): then a maximum
    higher = r.get("higher_is_better", True)
    unit = "×" if on_ratio else f" {r.get('unit', '')}"
    want = f"{'≥' if higher else '<'} {t:g}{unit}"
    if v is None:
        return f"{want}: not met (never reached)" if r.get("never") else f"{want}: not measured"
    met = v >= t if higher else v < t
    return f"{want}: {'met' if met else 'not met'}"


def throughput_table(doc: dict) -> str:
    """The markdown table of one throughput document (ours, peer, ratio, target)."""
    lines = ["| measurement | unit | robotrl | peer | peer figure | ratio | target |",
             "|---|---|---:|---|---:|---:|---|"]
    for r in doc["rows"]:
        lines.append(f"| {r['what']} | {r.get('unit', '')} | {fmt(r.get('ours'))} | {r.get('peer_name') or '—'} | "
                     f"{fmt(r.get('peer'))} | {_ratio(r)} | {_target(r)} |")
    lower = [r for r in doc["rows"] if r.get("ratio") is not None and not r.get("higher_is_better", True)]
    note = "Ratio = robotrl / peer, measured side by side in one run"
    note += "; for latencies (ms) lower is better, so there the ratio is robotrl's cost over the peer's." if lower else "."
    return "\n".join(lines + ["", note])
