"""The benchmark helpers for the studies in this folder: :mod:`robotrl.bench.tasks._common` (shipped with robotrl),
with results still found beside this file (``benchmarks/results``), as the studies always wrote them."""

from __future__ import annotations

from pathlib import Path

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
