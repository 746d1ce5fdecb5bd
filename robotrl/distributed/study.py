"""The study summary of a ``robotrl train -m`` sweep: IQM and 95 % bootstrap CI per configuration.

Written at the end of every multirun by the Hydra callback :class:`StudySummary`
(``configs/train.yaml``, ``hydra.callbacks``), whichever launcher ran the jobs (basic, joblib,
Ray): ``<sweep dir>/study.json`` and ``study.md``. It reuses the benchmark code: the runs are
read by :func:`robotrl.bench.sweep.sweep_to_learning` (one configuration per combination of
swept non-seed overrides, one run per seed) and summarised by
:func:`robotrl.bench.tables.learning_stats` (:func:`robotrl.stats.summarize`: IQM, the
percentile bootstrap 95 % CI of the IQM over seeds, ``n``). The score is the final evaluation's
normalised score when every evaluation has one, else its success rate, else its return.
"""

from __future__ import annotations

import json
from pathlib import Path

from hydra.experimental.callback import Callback

from robotrl.files import atomic_write
from robotrl.progress import emit


def study_summary(sweep_dir: str | Path) -> dict:
    """Summarise the finished runs under ``sweep_dir`` (``*/report.json``).

    Returns:
        ``{"sweep_dir", "metric", "task", "configurations": [{"name", "runs", "seeds", "final":
        {"iqm", "lo", "hi", "n", "mean"}, "offline": {...}, "wall_s": {...}, "per_run": [{"seed",
        "dir", "final"}]}]}``.

    Raises:
        BenchError: no finished run under ``sweep_dir``.
    """
    from robotrl.stats import final_score
    from robotrl.bench.sweep import sweep_to_learning
    from robotrl.bench.tables import learning_stats

    sweep_dir = Path(sweep_dir)
    doc = sweep_to_learning(sweep_dir, benchmark="study", argv=[], command=f"robotrl train -m (sweep {sweep_dir})")
    stats = learning_stats(doc)["methods"]
    configs = []
    for name, s in stats.items():
        runs = [r for r in doc["runs"] if r["method"] == name]
        configs.append({"name": name, "runs": len(runs), "seeds": [r["seed"] for r in runs], "final": s["final"],
                        "offline": s["offline"], "wall_s": s["wall"],
                        "per_run": [{"seed": r["seed"], "dir": r["sweep_job"], "final": final_score(r["offline_score"], r["curve"])}
                                    for r in runs]})
    return {"sweep_dir": str(sweep_dir), "metric": doc["metric"], "task": doc["task"], "configurations": configs}


def study_markdown(study: dict) -> str:
    """The study as a Markdown table: configuration, runs, final score IQM [95 % CI]."""
    from robotrl.bench.tables import cell

    metric = study["metric"]
    lines = [f"# Study: {study['sweep_dir']}", "", f"Task: {study['task']}. Score: final {metric} (IQM [95 % bootstrap CI] "
             "over seeds; no interval with one seed).", "",
             "| configuration | runs | final score | offline score | wall s |", "|---|---|---|---|---|"]
    for c in study["configurations"]:
        lines.append(f"| {c['name']} | {c['runs']} | {cell(c['final'], metric)} | {cell(c['offline'], metric)} "
                     f"| {cell(c['wall_s'])} |")
    return "\n".join(lines) + "\n"


def write_study(sweep_dir: str | Path) -> Path:
    """Write ``study.json`` and ``study.md`` in ``sweep_dir`` (atomically); returns the JSON path.

    Raises:
        BenchError: no finished run under ``sweep_dir``.
    """
    sweep_dir = Path(sweep_dir)
    study = study_summary(sweep_dir)
    out = atomic_write(sweep_dir / "study.json", lambda f: f.write(json.dumps(study, indent=2, default=float).encode()))
    atomic_write(sweep_dir / "study.md", lambda f: f.write(study_markdown(study).encode()))
    return out


class StudySummary(Callback):
    """Hydra callback: after a multirun, :func:`write_study` of its sweep directory (and print the table)."""

    def on_multirun_end(self, config, **kwargs) -> None:
        """Summarise ``config.hydra.sweep.dir``; a sweep without a finished run (or with reports this
        version cannot read) says so instead: the runs are done, the summary never fails the sweep."""
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            path = write_study(sweep_dir)
        except Exception as exc:  # noqa: BLE001 - reported, never raised: see docstring
            emit(f"study summary: none written ({type(exc).__name__}: {exc}); "
                 f"python -c \"from robotrl.distributed.study import write_study; write_study('{sweep_dir}')\" retries it")
            return
        emit((sweep_dir / "study.md").read_text().rstrip("\n"))
        emit(f"study summary: {path}")
