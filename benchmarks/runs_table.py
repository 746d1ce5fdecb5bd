"""A learning result from finished ``robotrl train`` runs made by hand (an ablation), with each run's exact command.

The variants of an investigation are often single ``robotrl train`` commands that differ by a few overrides
(a discount, a regulariser, a batch size), run one at a time as the machine allows. This script turns their run
directories into one learning document (:func:`robotrl.bench.sweep.sweep_to_learning`'s form: offline score,
evaluation curve, wall time per run), names each run's method by ``--labels`` (default: the overrides that differ
between the runs) and records every run's command (``robotrl train`` + its ``.hydra/overrides.yaml``), so the
table that ``robotrl.bench.tables.learning_table`` renders from it can be reproduced run by run.

Usage::

    python benchmarks/runs_table.py RUN_DIR [RUN_DIR ...] --labels NAME [NAME ...] --out NAME.json \\
        [--metric success] [--budgets 50000 100000 ...] [--note TEXT] [--unfinished] [--max-steps N] \\
        [--held-out EPISODES SEED]

``--held-out``: each run's last policy is also evaluated by ``robotrl eval`` on EPISODES episodes reset with SEED + i
(:func:`robotrl.bench.sweep.add_held_out`; logs and results under ``held_out/`` beside the first run, read back when
already there), the table's held-out column.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
from pathlib import Path

from _common import RESULTS_DIR

from robotrl.files import atomic_write


def run_command(run_dir: Path) -> str:
    """``robotrl train`` with the run's recorded overrides (``.hydra/overrides.yaml``).

    Raises:
        FileNotFoundError: the run has no recorded overrides (not a ``robotrl train`` run directory).
    """
    from omegaconf import OmegaConf

    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: {run_dir} is not a robotrl train run directory")
    return "robotrl train " + " ".join(shlex.quote(str(o)) for o in OmegaConf.to_container(OmegaConf.load(path)) or [])


def runs_document(run_dirs: list[Path], labels: list[str] | None, *, metric: str, command: str, argv: list[str],
                  unfinished: bool = False, max_steps: int | None = None) -> dict:
    """The learning document of ``run_dirs`` (each with a ``report.json``), methods named by ``labels``.

    ``unfinished``: a run without a report (stopped, or still going) is read from its last checkpoint and marked
    ``"finished": false`` (:func:`robotrl.bench.sweep.sweep_to_learning`). ``max_steps``: each run is read up to that
    many online env steps (a run resumed past the comparison's budget): its curves end at the last evaluation at or
    before it and its ``wall_s`` is the training wall time there (``"read_to"`` records it).

    Raises:
        ValueError: ``labels`` given but not one per run, or ``max_steps`` on a run without a training-time curve.
        robotrl.bench.suite.BenchError: a run has no report and ``unfinished`` is off, or a run lacks the metric.
    """
    from robotrl.bench.suite import BenchError
    from robotrl.bench.sweep import sweep_to_learning

    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"{len(labels)} labels for {len(run_dirs)} runs: give one label per run directory")
    with tempfile.TemporaryDirectory() as tmp:
        names = {}
        for i, d in enumerate(run_dirs):  # one directory of links, as a sweep's, in the order given
            link = Path(tmp) / f"{i:03d}"
            link.symlink_to(d.resolve(), target_is_directory=True)
            names[link.name] = d
        doc = sweep_to_learning(tmp, benchmark="runs_table", argv=argv, command=command, metric=metric,
                                unfinished=unfinished)
    missing = sorted(str(names[k]) for k in set(names) - {run["sweep_job"] for run in doc["runs"]})
    if missing:
        raise BenchError(f"no report.json in {', '.join(missing)}: the run did not finish; pass --unfinished to read it "
                         "from its last checkpoint, or leave it out")
    for run in doc["runs"]:
        d = names[run["sweep_job"]]
        run["run_dir"], run["command"] = str(d), run_command(d)
        run["sweep_job"] = d.name
        if labels is not None:
            run["method"] = labels[list(names.values()).index(d)]
        if max_steps is not None:
            _read_to(run, max_steps)
    return doc


def _read_to(run: dict, max_steps: int) -> None:
    """Cut ``run``'s curves to online env steps ``<= max_steps`` and set its ``wall_s`` to the training time there.

    Raises:
        ValueError: the run has no ``wall_curve`` (reports before 2026-11-25), so its time at ``max_steps`` is unknown.
    """
    if "wall_curve" not in run:
        raise ValueError(f"{run['run_dir']}: its report has no training-time curve, so --max-steps cannot give its wall "
                         "time at that budget")
    for key in ("curve", "success_curve", "wall_curve"):
        run[key] = [p for p in run[key] if p[0] <= max_steps]
    run["wall_s"] = run["wall_curve"][-1][1] if run["wall_curve"] else 0.0
    run["read_to"] = max_steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+", type=Path, help="finished robotrl train run directories")
    ap.add_argument("--labels", nargs="+", help="one method name per run (runs of one method share it)")
    ap.add_argument("--out", required=True, help="under benchmarks/results/")
    ap.add_argument("--metric", default="success", choices=["success", "return", "normalized_score"])
    ap.add_argument("--budgets", type=int, nargs="*", help="env steps of the table's columns (default: every evaluation)")
    ap.add_argument("--note", default="", help="what the runs test (kept in the result)")
    ap.add_argument("--unfinished", action="store_true", help="read runs without a report from their last checkpoint")
    ap.add_argument("--max-steps", type=int, help="read each run up to this many online env steps (resumed runs)")
    ap.add_argument("--held-out", type=int, nargs=2, metavar=("EPISODES", "SEED"),
                    help="evaluate each run's last policy on EPISODES episodes reset from SEED (robotrl eval)")
    args = ap.parse_args()
    command = "python benchmarks/runs_table.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    doc = runs_document(args.runs, args.labels, metric=args.metric, command=command, argv=sys.argv,
                        unfinished=args.unfinished, max_steps=args.max_steps)
    if args.budgets:
        doc["budgets"] = sorted(args.budgets)
    doc["note"] = args.note
    if args.held_out:
        from robotrl.bench.sweep import add_held_out

        episodes, seed = args.held_out
        add_held_out(doc, {r["sweep_job"]: Path(r["run_dir"]) for r in doc["runs"]}, args.runs[0].parent / "held_out",
                     episodes=episodes, seed=seed)
    out = RESULTS_DIR / args.out
    atomic_write(out, json.dumps(doc, indent=1), mode=0o666)
    from robotrl.bench.tables import learning_table

    print(learning_table(doc))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
