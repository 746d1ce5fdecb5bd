"""Shared helpers of robotrl's benchmarks: threads, interleaved timing, tables, JSON, where results go.

Timings on shared machines are noisy (see ``shared/reference/machine.md``): every
benchmark here times its contenders *side by side in one run*, round-robin (one block
of each contender per repeat), and reports the median over repeats plus ratios.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from robotrl.bench.machine import command_argv, environment  # noqa: F401  (re-exported: the one collector)


def results_dir() -> Path:
    """Where a task's relative ``--out`` goes: ``benchmarks/results`` of the current directory's checkout
    (:func:`robotrl.bench.suite.checkout_root`: the nearest of the current directory and its parents with a
    ``benchmarks/`` folder, else the current directory). The runner starts every task in the suite's root, so the
    task writes where ``robotrl bench`` reads; ``python benchmarks/bench_x.py`` from a clone writes into the clone,
    ``python -m robotrl.bench.tasks.x`` elsewhere into ``./benchmarks/results``; never beside the installed package."""
    from robotrl.bench.suite import checkout_root

    return checkout_root() / "benchmarks" / "results"


def set_threads(n: int = 2) -> None:
    """Pin torch (and the BLAS pools, for processes started later) to ``n`` threads."""
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(var, str(n))
    import torch

    torch.set_num_threads(n)


@dataclass
class Case:
    """One contender: ``fn()`` does one unit of work and returns how many items it produced."""

    name: str
    fn: Callable[[], int]
    calls: int = 1  # calls per timed block (set by calibration)
    rates: list[float] = field(default_factory=list)  # items/s per repeat
    seconds: list[float] = field(default_factory=list)  # seconds per call, per repeat

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def median_seconds(self) -> float:
        return statistics.median(self.seconds)

    def summary(self) -> dict:
        return {
            "calls_per_block": self.calls,
            "repeats": len(self.rates),
            "items_per_s_median": self.median_rate,
            "items_per_s_min": min(self.rates),
            "items_per_s_max": max(self.rates),
            "s_per_call_median": self.median_seconds,
            "s_per_call_min": min(self.seconds),
            "s_per_call_max": max(self.seconds),
        }


def run_interleaved(cases: list[Case], *, repeats: int, warmup: int, block_s: float | None) -> list[Case]:
    """Warm up every case, calibrate calls per block, then time round-robin ``repeats`` times.

    Args:
        repeats: timed blocks per case; the median is reported.
        warmup: untimed calls per case before calibration.
        block_s: target duration of one timed block (calls per block are chosen to
            reach it); ``None`` means one call per block (slow operations such as loads).
    """
    clock = time.perf_counter
    for c in cases:
        for _ in range(warmup):
            c.fn()
        if block_s is None:
            c.calls = 1
            continue
        n, elapsed = 1, 0.0
        while True:  # doubling calibration
            t0 = clock()
            for _ in range(n):
                c.fn()
            elapsed = clock() - t0
            if elapsed >= block_s / 4 or n >= 1 << 20:
                break
            n *= 2
        c.calls = max(1, int(round(n * block_s / max(elapsed, 1e-9))))
    for _ in range(repeats):
        for c in cases:
            items = 0
            t0 = clock()
            for _ in range(c.calls):
                items += c.fn()
            dt = clock() - t0
            c.rates.append(items / dt)
            c.seconds.append(dt / c.calls)
    return cases


def paired_ratio(a: Case, b: Case, *, time_based: bool = False) -> float:
    """Median over repeats of ``a``'s rate / ``b``'s rate measured in the same round.

    Blocks of one round run back to back, so a paired ratio cancels most of the drift of
    a shared machine (other processes starting and stopping) that the two independent
    medians would keep. ``time_based``: ratio of seconds per call ``b / a`` (a speed-up).
    """
    if time_based:
        return statistics.median(tb / ta for ta, tb in zip(a.seconds, b.seconds))
    return statistics.median(ra / rb for ra, rb in zip(a.rates, b.rates))


def format_table(headers: list[str], rows: list[list], aligns: str | None = None) -> str:
    """A GitHub-markdown table (also readable on a terminal)."""
    cells = [[str(h) for h in headers]] + [[str(x) for x in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    aligns = aligns or "l" + "r" * (len(headers) - 1)

    def line(r):
        return "| " + " | ".join(x.ljust(w) if a == "l" else x.rjust(w) for x, w, a in zip(r, widths, aligns)) + " |"

    sep = "|" + "|".join(("-" * (w + 1) + ":") if a == "r" else ("-" * (w + 2)) for w, a in zip(widths, aligns)) + "|"
    return "\n".join([line(cells[0]), sep] + [line(r) for r in cells[1:]])


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def write_json(name: str | Path, payload: dict, results: Path | None = None) -> Path:
    """``payload`` as JSON to ``name`` (relative: under ``results``, default :func:`results_dir`), atomically
    (temporary sibling + rename)."""
    from robotrl.bench.runner import write_json as atomic

    return atomic(Path(name) if Path(name).is_absolute() else (results or results_dir()) / name, payload)


def run_cli(argv: list[str], log: Path) -> None:
    """Run one ``robotrl`` command (``python -m robotrl.cli *argv``), its output in ``log``.

    Raises:
        subprocess.CalledProcessError: the command failed (its output is in ``log``).
    """
    import subprocess

    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        subprocess.run([sys.executable, "-m", "robotrl.cli", *argv], stdout=f, stderr=subprocess.STDOUT, check=True)


def run_cli_all(jobs: list[tuple[list[str], Path]], workers: int) -> None:
    """Run ``(argv, log)`` jobs with :func:`run_cli`, ``workers`` at a time; raises the first failure."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, workers)) as pool:
        list(pool.map(lambda job: run_cli(*job), jobs))


def command_line() -> str:
    """The command that started this benchmark, as typed from the repository root (:func:`command_argv`)."""
    return "python " + " ".join(command_argv())


def learning_result(benchmark: str, task: str, metric: str, budgets: list[int], runs: list[dict], **extra) -> dict:
    """A learning result in the normalised form of ``robotrl.bench.schema`` (plus the script's ``extra`` keys).

    ``runs``: one dict per (method, seed) with ``method``, ``family``, ``peer``, ``seed``,
    ``offline_score`` (before any online step; None from scratch), ``curve``
    (``[[online env steps, score], ...]``), optional ``success_curve`` and ``wall_s``.
    ``metric``: ``"return"``, ``"success"`` or ``"normalized_score"``.
    """
    return {"benchmark": benchmark, "task": task, "metric": metric, "budgets": [int(b) for b in budgets],
            "runs": runs, **extra, "command": command_line(), "argv": command_argv(), "environment": environment()}
