"""Statistics of runs and of the benchmark tables: IQM, bootstrap confidence intervals, regret, onset dip,
time to a score threshold.

In the core (the run report, :mod:`robotrl.report`, and the benchmark suite, :mod:`robotrl.bench`, both use it).

All functions take plain sequences of floats (one value per seed, or one learning curve
``[[env_steps, score], ...]``) and return floats; ``None``/NaN inputs are dropped where
noted. Nothing here depends on torch or on the benchmarks themselves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

#: The best score a metric can reach when it has a fixed scale (None: unbounded, e.g. raw return).
METRIC_MAX = {"success": 1.0, "normalized_score": 100.0, "return": None}
#: The spread of a metric's scale, used by the regression tolerance (None: taken from the data).
METRIC_RANGE = {"success": 1.0, "normalized_score": 100.0, "return": None}


def _clean(x) -> np.ndarray:
    a = np.asarray([v for v in np.ravel(np.asarray(x, dtype=object)) if v is not None], dtype=np.float64)
    return a[np.isfinite(a)]


def iqm(x) -> float:
    """Interquartile mean: the mean of the middle 50 % of the values.

    Same result as ``scipy.stats.trim_mean(x, 0.25)``: the values are sorted and
    ``floor(0.25 * n)`` are cut from each end (so with fewer than 4 values it is the plain
    mean). ``None`` and non-finite values are dropped; returns NaN for no values.
    """
    a = np.sort(_clean(x))
    n = len(a)
    if n == 0:
        return float("nan")
    cut = int(0.25 * n)
    return float(a[cut:n - cut].mean())


def _iqm_rows(a: np.ndarray) -> np.ndarray:
    """IQM of every row of a 2-D array (vectorised :func:`iqm`)."""
    a = np.sort(a, axis=1)
    n = a.shape[1]
    cut = int(0.25 * n)
    return a[:, cut:n - cut].mean(axis=1)


def bootstrap_ci(x, stat: Callable = iqm, n: int = 2000, conf: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of ``stat`` over runs (seeds).

    Resamples the runs with replacement ``n`` times, applies ``stat`` to each resample and
    returns the ``(1 - conf) / 2`` and ``(1 + conf) / 2`` quantiles. Deterministic for a
    given ``seed``. With fewer than 2 finite values there is no interval: ``(nan, nan)``.

    Raises:
        ValueError: ``conf`` outside (0, 1) or ``n`` < 1.
    """
    if not 0.0 < conf < 1.0 or n < 1:
        raise ValueError(f"bootstrap_ci needs 0 < conf < 1 and n >= 1, got conf={conf}, n={n}")
    a = _clean(x)
    k = len(a)
    if k < 2:
        return float("nan"), float("nan")
    idx = np.random.default_rng(seed).integers(0, k, size=(n, k))
    samples = a[idx]
    vals = _iqm_rows(samples) if stat is iqm else np.array([stat(s) for s in samples], dtype=np.float64)
    lo, hi = np.quantile(vals, [(1 - conf) / 2, (1 + conf) / 2])
    return float(lo), float(hi)


def summarize(x) -> dict:
    """``{"iqm", "lo", "hi", "n", "mean"}`` of the finite values of ``x`` (95 % bootstrap CI of the IQM)."""
    a = _clean(x)
    lo, hi = bootstrap_ci(a)
    return {"iqm": iqm(a), "lo": lo, "hi": hi, "n": int(len(a)), "mean": float(a.mean()) if len(a) else float("nan")}


def score_at(curve: Sequence[Sequence[float]], budget: float) -> float | None:
    """Score of a learning curve at ``budget`` online env steps.

    The curve is ``[[env_steps, score], ...]``; the value is that of the last evaluation
    at or before ``budget`` (a step function, so a curve evaluated every 1k steps gives its
    1k value at 1.5k). ``None`` when the curve has no evaluation that late or none at all:
    a run that never reached the budget has no score there.
    """
    pts = sorted((float(s), float(v)) for s, v, *_ in curve)
    if not pts or pts[-1][0] < budget:
        return None
    at = [v for s, v in pts if s <= budget]
    return at[-1] if at else None


def final_score(offline_score: float | None, curve: Sequence[Sequence[float]]) -> float | None:
    """Score at the last evaluation of the curve, or the offline score for a run without online phase."""
    if curve:
        return float(sorted(curve, key=lambda p: p[0])[-1][1])
    return None if offline_score is None else float(offline_score)


#: Evaluations averaged into a run's ending: the level a run holds at the end of its budget, not its last point.
ENDING_EVALS = 5


def ending_score(offline_score: float | None, curve: Sequence[Sequence[float]], k: int = ENDING_EVALS) -> float | None:
    """A run's ending: the mean of the last ``k`` online evaluations of its curve (env_steps > 0; all of them when it
    has fewer), or :func:`final_score` for a curve without online evaluations (an offline-only run).

    One evaluation point is one noisy draw (a 50-episode success rate moves by ~0.2 between evaluations of the
    same policy); the mean of the last few says which level the run ended at. Tables show it beside the last point.

    Raises:
        ValueError: ``k < 1``.
    """
    if k < 1:
        raise ValueError(f"an ending averages at least one evaluation, got k={k}")
    online = [float(v) for s, v, *_ in sorted(curve, key=lambda p: float(p[0])) if float(s) > 0]
    if not online:
        return final_score(offline_score, curve)
    return float(np.mean(online[-k:]))


def ending_evals(curve: Sequence[Sequence[float]], k: int = ENDING_EVALS) -> int:
    """How many evaluations :func:`ending_score` averaged for ``curve`` (0: none online)."""
    return min(k, sum(1 for s, *_ in curve if float(s) > 0))


def regret(curve: Sequence[Sequence[float]], best: float) -> float | None:
    """Mean shortfall from ``best`` over the online evaluations of a learning curve.

    ``regret = mean over the evaluations with env_steps > 0 of (best - score)``, in the
    metric's units (CORL's regret is this with scores normalised to [0, 1] and best = 1).
    ``best`` is the task's maximum when the metric has one (success 1.0, normalised score
    100; :data:`METRIC_MAX`); for raw returns the tables pass the best final score of any
    method in that table, which makes regret the mean gap between a curve and the best
    final result (it can then be negative for a curve that peaks above it). Lower is
    better. ``None`` for a curve without online evaluations.
    """
    vals = [float(v) for s, v, *_ in curve if float(s) > 0]
    if not vals or best is None or not math.isfinite(best):
        return None
    return float(np.mean([best - v for v in vals]))


def onset_dip(offline_score: float | None, curve: Sequence[Sequence[float]], budget: float | None = None,
              start: float = 0.0) -> float | None:
    """How far the score falls when online fine-tuning starts (negative = a dip).

    ``min(score over the online evaluations within 10 % of the budget after updates start)
    - offline_score``: the evaluations with env_steps in ``(start, start + 0.1·budget]``,
    and at least the first one after ``start`` (so a curve evaluated every 20 % still has a
    dip). ``start`` is the env step at which gradient updates begin (a no-update warmup,
    e.g. WSRL's, would otherwise hide the dip: nothing changes before it). ``budget``
    defaults to the last evaluation's env steps. ``None`` when there is no offline score
    (training from scratch), or no evaluation after ``start`` before the final one (a curve
    measured only before and after fine-tuning says nothing about the start of it).
    """
    if offline_score is None or not math.isfinite(float(offline_score)):
        return None
    pts = sorted((float(s), float(v)) for s, v, *_ in curve if float(s) > start)
    if len(pts) < 2:
        return None
    budget = pts[-1][0] if budget is None else float(budget)
    early = [v for s, v in pts if s <= start + 0.1 * budget] or [pts[0][1]]
    return float(min(early) - float(offline_score))


def time_to_threshold(curve: Sequence[Sequence[float]], wall_curve: Sequence[Sequence[float]] | None,
                      threshold: float) -> float | None:
    """Wall seconds until a learning curve first reaches ``threshold`` (``inf``: never).

    ``curve`` is ``[[env_steps, score], ...]`` and ``wall_curve`` ``[[env_steps, seconds], ...]``:
    the wall time of the online phase at each evaluation (training time, evaluations excluded).
    The result is the seconds at the first online evaluation (env_steps > 0) whose score is
    ``>= threshold``; ``math.inf`` when no evaluation reaches it ("never" in a table);
    ``None`` when the run recorded no wall curve (nothing to say).
    """
    if not wall_curve:
        return None
    wall = {float(s): float(t) for s, t, *_ in wall_curve}
    for s, v, *_ in sorted(curve, key=lambda p: float(p[0])):
        if float(s) > 0 and float(v) >= threshold and float(s) in wall:
            return wall[float(s)]
    return math.inf
