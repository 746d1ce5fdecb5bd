"""End-of-run report: ``report.json``, ``report.md`` and ``learning_curve.png`` in the run directory."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

#: summary key -> evaluation key of the metrics whose onset dip the run report gives
ONSET_METRICS = {"return": "return_mean", "success": "success_rate", "normalized_score": "normalized_score"}
ONSET_DEFINITION = ("onset dip = lowest evaluation within 10 % of the online budget after gradient updates start "
                    "(at least the first one after they start) - the last offline evaluation; n/a without an "
                    "offline evaluation or with no online evaluation before the final one "
                    "(robotrl.bench.stats.onset_dip, as in the bench tables)")


def _fmt(x) -> str:
    if isinstance(x, float):
        return "n/a" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def onset_summary(history: list[dict], *, online_start: int, first_update: int = 0,
                  budget: float | None = None) -> dict:
    """Onset dips of a run from its evaluation history, by the bench suite's definition.

    Calls :func:`robotrl.bench.stats.onset_dip` (the one definition; see
    :data:`ONSET_DEFINITION`) on the online evaluations with env steps counted from the start
    of the online phase.

    Args:
        history: evaluation records (``phase`` "offline"/"online", ``step``, metric keys).
        online_start: the history ``step`` at which the online phase starts (the trainer's
            ``offline_steps``; 0 for on-policy fine-tuning).
        first_update: online env steps before gradient updates begin (a no-update warmup).
        budget: online env steps of the run (``None``: the last evaluation's).

    Returns:
        ``{}`` without offline or online evaluations, else ``onset_dip_<metric>`` for return
        (always), success and normalised score (where the evaluations have them; NaN where
        :func:`onset_dip` is undefined) and ``onset_window_env_steps`` ``[lo, hi]``.
    """
    from robotrl.bench.stats import onset_dip

    offline = [h for h in history if h.get("phase") == "offline"]
    online = [h for h in history if h.get("phase") == "online"]
    if not offline or not online:
        return {}
    out = {}
    for name, key in ONSET_METRICS.items():
        ref = float(offline[-1].get(key, float("nan")))
        if name != "return" and math.isnan(ref):
            continue
        curve = [(h["step"] - online_start, float(h.get(key, float("nan")))) for h in online]
        dip = onset_dip(ref, curve, budget, first_update)
        out[f"onset_dip_{name}"] = float("nan") if dip is None else dip
    b = float(budget) if budget is not None else float(online[-1]["step"] - online_start)
    out["onset_window_env_steps"] = [int(first_update), int(first_update + 0.1 * b)]
    return out


def format_onset(summary: dict) -> str | None:
    """One console line with the onset dips of ``summary`` (``None`` when it has none)."""
    dips = [(k[len("onset_dip_"):], v) for k, v in summary.items() if k.startswith("onset_dip_")]
    if not dips:
        return None
    lo, hi = summary.get("onset_window_env_steps", ("?", "?"))
    return (f"onset dip (lowest online evaluation in env steps ({lo}, {hi}] - offline): "
            + ", ".join(f"{k} {_fmt(v)}" for k, v in dips))


def format_eval(res: dict) -> str:
    """One console line for an evaluation record (``phase``, ``step``, metrics): the return,
    and the normalised score and success rate only where the task has them (never a
    ``success 0.00`` for a task without a success signal)."""
    what = {"offline": "offline" if res.get("step", 0) else "start (pretrained policy)"}.get(res.get("phase"), res.get("phase"))
    if res.get("evaluation") == "validation":  # no env: held-out episodes (robotrl.validation)
        vals = "  ".join(f"{k[4:]} {v:.4g}" for k, v in res.items() if k.startswith("val_") and isinstance(v, float))
        return f"[validation {what} step {res.get('step', 0)}, {res.get('val_episodes')} held-out episodes] {vals}"
    parts = [f"[eval {what} step {res.get('step', 0)}] return {res['return_mean']:.2f}"]
    score, succ = res.get("normalized_score", float("nan")), res.get("success_rate", float("nan"))
    if not math.isnan(score):
        parts.append(f"score {score:.1f}")
    if not math.isnan(succ):
        parts.append(f"success {succ:.2f} ({res.get('success_metric', 'n/a')})")
    return "  ".join(parts)


def drop_missing(summary: dict) -> dict:
    """``summary`` without the success and normalised-score entries a task does not have
    (NaN: no success signal, no reference scores), so reports and the console show only
    what was measured."""
    def missing(k, v):
        if k == "success_metric":
            return v == "n/a"
        return ("success" in k or "normalized_score" in k) and isinstance(v, float) and math.isnan(v)

    return {k: v for k, v in summary.items() if not missing(k, v)}


def online_start_step(history: list[dict]) -> int | None:
    """The step at which the online phase starts: the last offline evaluation's (the warm-start
    evaluation at 0 for a run that starts online), ``None`` without both phases."""
    offline = [h["step"] for h in history if h.get("phase") == "offline"]
    if not offline or not any(h.get("phase") == "online" for h in history):
        return None
    return max(offline)


def success_metric(history: list[dict]) -> str:
    """Which success ``success_rate`` is in these evaluations: "final-step", "any-step" (or "n/a")."""
    return next((h["success_metric"] for h in reversed(history) if h.get("success_metric")), "n/a")


def plotted_metrics(history: list[dict]) -> list[str]:
    """The evaluation metrics a run has (one plot panel each): the return always, the
    normalised score and the success rate only where some evaluation measured them; for a run
    without an env, its held-out validation metrics."""
    if history and history[-1].get("evaluation") == "validation":
        return [k for k, v in history[-1].items() if k.startswith("val_") and isinstance(v, float)]
    return [m for m in ("return_mean", "normalized_score", "success_rate")
            if m == "return_mean" or any(not math.isnan(h.get(m, float("nan"))) for h in history)]


def plot_learning_curve(history: list[dict], path: Path, title: str = "") -> Path | None:
    """PNG of evaluation return (and success / normalised score when known) against step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not history:
        return None
    steps = [h["step"] for h in history]
    metrics = plotted_metrics(history)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    offline_end = online_start_step(history)
    for ax, m in zip(axes[0], metrics):
        ax.plot(steps, [h.get(m, float("nan")) for h in history], marker="o")
        if m == "return_mean":
            lo = [h["return_mean"] - h.get("return_std", 0.0) for h in history]
            hi = [h["return_mean"] + h.get("return_std", 0.0) for h in history]
            ax.fill_between(steps, lo, hi, alpha=0.2)
        if offline_end is not None:
            ax.axvline(offline_end, color="gray", ls="--", lw=1, label="online starts")
            ax.legend(loc="best", fontsize=8)
        label = m
        if m == "success_rate":
            ax.set_ylim(-0.05, 1.05)
            label = f"success rate ({success_metric(history)})"
        ax.set_xlabel("step (offline updates, then online env steps)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(run_dir: Path, *, summary: dict, history: list[dict], config: dict) -> dict[str, Path]:
    """Write the JSON and Markdown report and the learning-curve PNG; returns their paths."""
    run_dir = Path(run_dir)
    paths = {"json": run_dir / "report.json", "markdown": run_dir / "report.md", "plot": run_dir / "learning_curve.png"}
    plot = plot_learning_curve(history, paths["plot"], title=summary.get("title", ""))
    if plot is None:
        paths.pop("plot")
    doc = {"summary": summary, "history": history, "config": config, "files": {k: str(v) for k, v in paths.items()}}
    paths["json"].write_text(json.dumps(doc, indent=2, default=str))
    lines = [f"# robotrl run report: {summary.get('title', '')}", ""]
    lines += ["| quantity | value |", "|---|---|"]
    for k, v in summary.items():
        if k != "title" and not isinstance(v, (dict, list)):
            lines.append(f"| {k} | {_fmt(v)} |")
        elif k == "onset_window_env_steps":
            lines.append(f"| {k} | ({v[0]}, {v[1]}] |")
    if any(k.startswith("onset_dip_") for k in summary):
        lines += ["", f"_{ONSET_DEFINITION}._"]
    metric = success_metric(history)
    shown = plotted_metrics(history)
    if history and history[-1].get("evaluation") == "validation":  # no env: held-out episodes (robotrl.validation)
        cols = ["phase", "step", *shown, "held-out episodes"]
        lines += ["", "## Validation on held-out episodes (no env)", "", "| " + " | ".join(cols) + " |",
                  "|" + "---|" * len(cols)]
        for h in history:
            row = [str(h.get("phase")), str(h["step"]), *(_fmt(h.get(m, float("nan"))) for m in shown)]
            lines.append("| " + " | ".join(row + [str(h.get("val_episodes", ""))]) + " |")
    else:
        score, succ = "normalized_score" in shown, "success_rate" in shown
        both = succ and metric == "final-step"  # the convention is the final step: the any-step rate beside it
        cols = (["phase", "step", "return"] + (["normalized score"] if score else [])
                + ([f"success rate ({metric})"] if succ else []) + (["success rate (any-step)"] if both else [])
                + ["episodes"])
        lines += ["", "## Evaluations", "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        nan = float("nan")
        for h in history:
            row = [str(h.get("phase")), str(h["step"]), f"{_fmt(h['return_mean'])} ± {_fmt(h.get('return_std', nan))}"]
            row += [_fmt(h.get("normalized_score", nan))] if score else []
            row += [_fmt(h.get("success_rate", nan))] if succ else []
            row += [_fmt(h.get("success_any_rate", nan))] if both else []
            lines.append("| " + " | ".join(row + [str(int(h.get("episodes", 0)))]) + " |")
    if metric != "n/a":
        from robotrl.evaluation import SUCCESS_CONVENTION

        lines += ["", f"_Success: {SUCCESS_CONVENTION}._"]
    if "plot" in paths:
        lines += ["", f"![learning curve]({paths['plot'].name})"]
    paths["markdown"].write_text("\n".join(lines) + "\n")
    return paths
