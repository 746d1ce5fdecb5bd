"""Learning-curve PNGs: per method the IQM over seeds and its 95 % bootstrap band against online env steps."""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("MPLBACKEND", "Agg")

from robotrl.stats import iqm, summarize  # noqa: E402
from robotrl.bench.tables import metric_name  # noqa: E402


def _points(run: dict) -> dict[float, float]:
    pts = {float(s): float(v) for s, v, *_ in run["curve"] if v is not None}
    if run.get("offline_score") is not None and 0.0 not in pts:
        pts[0.0] = float(run["offline_score"])
    return pts


def learning_plot(doc: dict, path: str | Path) -> Path | None:
    """Write the learning-curve PNG of one learning document; returns its path.

    Methods with an online curve get a line (IQM over the seeds evaluated at that step)
    and a band (95 % bootstrap CI; none for a single seed); peers are dashed. Methods
    without online phase (offline only, frozen bases) are a dotted horizontal line at
    their IQM offline score. Returns None when no method has an online curve.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods: dict[str, list[dict]] = {}
    for r in doc["runs"]:
        methods.setdefault(r["method"], []).append(r)
    if not any(r["curve"] for r in doc["runs"]):
        return None
    xmax = max(float(s) for r in doc["runs"] for s, *_ in r["curve"]) if doc["runs"] else 1.0
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for i, (m, rs) in enumerate(methods.items()):
        color = f"C{i % 10}"
        peer = bool(rs[0].get("peer"))
        label = f"{m} (peer)" if peer else m
        if not any(r["curve"] for r in rs):
            y = iqm([r["offline_score"] for r in rs])
            ax.plot([0, xmax], [y, y], ls=":", color=color, label=label)
            continue
        pts = [_points(r) for r in rs]
        steps = sorted(set().union(*pts))
        stats = [summarize([p[s] for p in pts if s in p]) for s in steps]
        ax.plot(steps, [s["iqm"] for s in stats], marker="o", ms=3, ls="--" if peer else "-", color=color, label=label)
        if len(rs) > 1:
            ax.fill_between(steps, [s["lo"] for s in stats], [s["hi"] for s in stats], color=color, alpha=0.15)
    ax.set_xlabel("online env steps")
    ax.set_ylabel(f"{metric_name(doc)} (IQM over seeds, 95 % CI)")
    ax.set_title(f"{doc['benchmark']}: {doc.get('task', '')}"[:90], fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
