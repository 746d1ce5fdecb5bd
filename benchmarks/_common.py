"""The benchmark helpers for the studies in this folder: :mod:`robotrl.bench.tasks._common` (shipped with robotrl),
with results still found beside this file (``benchmarks/results``), as the studies always wrote them."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robotrl.bench.tasks._common import (  # noqa: F401  (re-exported for the studies)
    Case,
    command_argv,
    command_line,
    environment,
    fmt_rate,
    format_table,
    learning_result,
    paired_ratio,
    run_cli,
    run_cli_all,
    run_interleaved,
    set_threads,
)
from robotrl.bench.tasks._common import write_json as _write_json

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def write_json(name: str | Path, payload: dict) -> Path:
    """``payload`` as JSON to ``name`` (relative: under this folder's ``results/``), atomically."""
    return _write_json(name, payload, results=RESULTS_DIR)


def seed_study(args, run_seed: Callable[[int, Any, Path], dict]) -> tuple[dict[int, dict], list[str]]:
    """The runs of a per-seed study (``bench_sung``, ``bench_unio4``, ``bench_retention``, ``bench_reset_free``).

    With ``args.merge`` (result files, e.g. one per seed run side by side): their per-seed results and commands.
    Otherwise ``run_seed(seed, args, Path(args.root))`` for each of ``args.seeds``, the study written to
    ``args.out`` after every seed (``partial`` until the last), so a cut-off study keeps the seeds it finished.
    ``args.seeds`` is set to the seeds held.

    Returns:
        ``({seed: that seed's result}, [command, ...])``.
    """
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        per_seed = {int(k): v for part in parts for k, v in part["per_seed"].items()}
        args.seeds = sorted(per_seed)
        return per_seed, [part["command"] for part in parts]
    per_seed = {}
    for s in args.seeds:
        per_seed[s] = run_seed(s, args, Path(args.root))
        write_json(Path(args.out), {"command": " ".join(sys.argv), "partial": len(per_seed) < len(args.seeds),
                                    "args": vars(args), "environment": environment(),
                                    "per_seed": {str(k): v for k, v in per_seed.items()}})
    return per_seed, [" ".join(sys.argv)]


def seed_table(per_seed: dict[int, dict], contenders, keys) -> dict:
    """Per contender, each of ``keys`` over the seeds: ``{"iqm", "ci95", "per_seed"}`` (:func:`robotrl.stats.iqm`,
    95 % bootstrap CI); ``wall_s_mean`` when the seeds record ``wall_s``, ``seeds_below_offline`` when they record
    ``ending_minus_offline``."""
    import numpy as np

    from robotrl.stats import bootstrap_ci, iqm

    seeds = sorted(per_seed)
    table = {}
    for name in contenders:
        rows = [per_seed[s][name] for s in seeds]
        entry: dict = {}
        for key in keys:
            vals = [r[key] for r in rows]
            entry[key] = {"iqm": iqm(vals), "ci95": list(bootstrap_ci(vals)), "per_seed": vals}
        if all("wall_s" in r for r in rows):
            entry["wall_s_mean"] = float(np.mean([r["wall_s"] for r in rows]))
        if all("ending_minus_offline" in r for r in rows):
            entry["seeds_below_offline"] = int(sum(r["ending_minus_offline"] < 0 for r in rows))
        table[name] = entry
    return table
