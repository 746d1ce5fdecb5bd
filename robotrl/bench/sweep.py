"""Hydra multirun sweeps of ``robotrl train`` as learning results.

``robotrl train -m seed=0,1,2 agent.model.lr=1e-3,3e-4 hydra.sweep.dir=D`` writes one run
per combination under ``D/<n>/`` with ``report.json`` (summary, evaluation history,
resolved config) and ``.hydra/overrides.yaml``. :func:`sweep_to_learning` turns them into
the normalised learning form of :mod:`robotrl.bench.schema`: one method per agent and
combination of swept non-seed overrides, one run per seed.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from robotrl.bench.machine import environment
from robotrl.bench.schema import validate_learning
from robotrl.bench.suite import BenchError

_KEYS = {"normalized_score": "normalized_score", "success": "success_rate", "return": "return_mean"}

#: Held-out evaluation: episode ``i`` resets with ``HELD_OUT_SEED + i`` (``robotrl eval``'s default seed). A run's own
#: evaluations, on which settings are chosen and ``trainer.keep_best`` selects, reset with ``seed + 10000 + i``
#: (:class:`robotrl.runner.Runner`), so for seeds below 89,950 and up to 50 episodes the two sets never meet.
HELD_OUT_SEED = 100_000
#: Episodes of a headline held-out evaluation: a success rate over 50 episodes has a binomial standard error of at
#: most 0.07 (0.5 × (1 − 0.5) / 50, square-rooted): differences below ~0.15 are within its resolution.
HELD_OUT_EPISODES = 50


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def _overrides(run_dir: Path) -> dict[str, str]:
    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.exists():
        return {}
    from omegaconf import OmegaConf

    out = {}
    for item in OmegaConf.to_container(OmegaConf.load(path)) or []:
        key, _, value = str(item).partition("=")
        out[key.lstrip("+~")] = value
    return out


def _metric(histories: list[list[dict]]) -> str:
    for metric in ("normalized_score", "success"):
        if all(h and all(_finite(e.get(_KEYS[metric])) for e in h) for h in histories):
            return metric
    return "return"


def _run_docs(sweep_dir: Path, unfinished: bool) -> list[tuple[Path, dict]]:
    """``(run_dir, report)`` of each run under ``sweep_dir``, in job order; with ``unfinished``, a run
    without ``report.json`` is read from its checkpoint (history, config and wall time so far) and marked
    ``"finished": False``."""
    runs = {p.parent: json.loads(p.read_text()) for p in sweep_dir.glob("*/report.json")}
    if unfinished:
        from robotrl.checkpoint import load_checkpoint

        for ckpt in sweep_dir.glob("*/checkpoints/latest.pt"):
            run_dir = ckpt.parent.parent
            if run_dir not in runs:
                state = load_checkpoint(ckpt)
                runs[run_dir] = {"history": state["history"], "config": state["config"], "finished": False,
                                 "summary": {"wall_time_s": round(float(state.get("wall_time", 0.0)), 1)}}
    return sorted(runs.items(), key=lambda kv: (len(kv[0].name), kv[0].name))


def sweep_to_learning(sweep_dir: str | Path, *, benchmark: str, argv: list[str], command: str,
                      metric: str | None = None, unfinished: bool = False) -> dict:
    """The learning document of every run in a ``robotrl train -m`` sweep directory.

    Per run: ``offline_score`` = the last offline evaluation (None without offline phase),
    ``curve`` = the online evaluations at online env steps (the offline score at step 0
    first), ``wall_s`` = the run's training wall time, ``wall_curve`` = ``[[online env steps,
    training wall seconds], ...]`` at each online evaluation (evaluations excluded; only when
    every evaluation recorded it). The metric is the normalised score
    when every evaluation has one, else the success rate when every evaluation has one,
    else the return; ``metric`` (``"normalized_score"``, ``"success"`` or ``"return"``) picks one instead,
    e.g. ``"success"`` on goal tasks whose datasets also record reference returns (Fetch).
    ``unfinished``: runs still going (or stopped) are included from their last checkpoint, each with
    ``"finished": false`` and ``"stopped_at"`` (its last online evaluation's env step); the document
    gets ``"partial": true`` when any is.

    Raises:
        BenchError: no ``*/report.json`` under ``sweep_dir`` (the sweep failed; with ``unfinished``, no
            checkpoint either), or ``metric`` is not one of the three or some evaluation lacks it.
    """
    sweep_dir = Path(sweep_dir)
    found = _run_docs(sweep_dir, unfinished)
    if not found:
        raise BenchError(f"no */report.json under {sweep_dir}: the sweep wrote no finished run (see its log)")
    run_dirs = [d for d, _ in found]
    docs = [doc for _, doc in found]
    overrides = [_overrides(d) for d in run_dirs]
    varying = sorted(k for k in set().union(*overrides) if k != "seed" and len({o.get(k) for o in overrides}) > 1)
    if metric is None:
        metric = _metric([d["history"] for d in docs])
    elif metric not in _KEYS or not all(_finite(e.get(_KEYS[metric])) for d in docs for e in d["history"]):
        raise BenchError(f"metric {metric!r}: pick one of {sorted(_KEYS)} that every evaluation of the runs under "
                         f"{sweep_dir} reports")
    key = _KEYS[metric]
    runs, budgets, tasks = [], set(), set()
    for doc, ov in zip(docs, overrides):
        cfg, hist = doc.get("config", {}), doc["history"]
        agent = cfg.get("agent", {})
        offset = 0 if agent.get("onpolicy") is not None else int(cfg.get("trainer", {}).get("offline_steps", 0))
        offline = [h for h in hist if h.get("phase") == "offline"]
        online = [h for h in hist if h.get("phase") == "online"]
        off = offline[-1] if offline else None
        curve = [[int(h["step"]) - offset, h.get(key)] for h in online]
        succ = [[int(h["step"]) - offset, h.get("success_rate")] for h in online]
        if off is not None and online and curve[0][0] > 0:
            curve.insert(0, [0, off.get(key)])
            succ.insert(0, [0, off.get("success_rate")])
        budgets.update(s for s, _ in curve if s > 0)
        method = str(agent.get("name", "agent"))
        if varying:
            method += " (" + ", ".join(f"{k}={ov.get(k)}" for k in varying) + ")"
        tasks.add(f"{cfg.get('env', {}).get('name', '?')} / {cfg.get('dataset', {}).get('id', '?')}")
        run = {"method": method, "family": str(agent.get("name", "agent")), "peer": False,
               "seed": int(cfg.get("seed", len(runs))), "offline_score": off.get(key) if off else None,
               "curve": curve, "success_curve": succ, "wall_s": doc.get("summary", {}).get("wall_time_s"),
               "sweep_job": run_dirs[len(runs)].name}
        if doc.get("finished") is False:
            run.update(finished=False, stopped_at=curve[-1][0] if curve else 0)
        summary = doc.get("summary", {})
        run["provenance"] = {"resumed": summary.get("resumed"), "device": cfg.get("device"),
                             "torch_threads": cfg.get("torch_threads")}  # as the run's report records them
        if online and all(_finite(h.get("train_wall_s")) for h in online):  # reports from 2026-11-25 on
            run["wall_curve"] = [[int(h["step"]) - offset, round(float(h["train_wall_s"]), 2)] for h in online]
        runs.append(run)
    kinds = {h.get("success_metric", "any-step") for d in docs for h in d["history"] if _finite(h.get("success_rate"))}
    doc = {"benchmark": benchmark, "task": ", ".join(sorted(tasks)), "metric": metric, "budgets": sorted(budgets),
           "runs": runs, "command": command, "argv": list(argv), "environment": environment()}
    if any(r.get("finished") is False for r in runs):
        doc["partial"] = True
    if kinds:  # reports written before final-step success existed counted any step
        doc["success_metric"] = kinds.pop() if len(kinds) == 1 else "mixed (" + ", ".join(sorted(kinds)) + ")"
    return validate_learning(doc)


def held_out_eval(checkpoint: str | Path, log: Path, *, episodes: int = HELD_OUT_EPISODES, seed: int = HELD_OUT_SEED,
                  num_envs: int = 10) -> dict:
    """``robotrl eval`` of ``checkpoint`` (a run directory or a ``.pt``) on held-out episodes, in its own process.

    Returns:
        The evaluation's metrics (``return_mean``, ``success_rate``, ``normalized_score``, ``episodes``, ...) with
        ``seed`` added.

    Raises:
        BenchError: the command failed (its output is in ``log``).
    """
    import subprocess
    import sys

    log.parent.mkdir(parents=True, exist_ok=True)
    out = log.with_suffix(".json")
    with open(log, "w") as f:
        rc = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={checkpoint}",
                             f"episodes={episodes}", f"seed={seed}", f"num_envs={min(num_envs, episodes)}",
                             f"output={out}"], stdout=f, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        raise BenchError(f"held-out evaluation of {checkpoint} failed (exit {rc}); see {log}")
    return {**json.loads(out.read_text()), "seed": seed}


def add_held_out(doc: dict, run_dirs: dict[str, Path], logs: Path, *, episodes: int = HELD_OUT_EPISODES,
                 seed: int = HELD_OUT_SEED) -> dict:
    """Evaluate every run's last policy (and, where the run kept one, its ``checkpoints/best.pt``) on held-out episodes.

    ``run_dirs`` maps each run's ``sweep_job`` to its directory. Each run gets ``"held_out": {"episodes", "seed",
    "score", "return_mean", "success_rate"}`` in the document's metric (``score``), and ``"held_out_best"`` likewise
    with the step it was kept at; :func:`robotrl.bench.tables.learning_table` shows them as columns. An evaluation
    already written under ``logs`` with the same episodes and seed is read back (a killed study resumes).

    Raises:
        BenchError: a run's evaluation failed.
    """
    key = _KEYS[doc["metric"]]
    for run in doc["runs"]:
        d = run_dirs[run["sweep_job"]]
        for field, ckpt in (("held_out", d), ("held_out_best", d / "checkpoints" / "best.pt")):
            if field == "held_out_best" and not ckpt.exists():
                continue
            log = logs / f"{run['sweep_job']}_{field}_{episodes}x{seed}.log"
            done = log.with_suffix(".json")
            res = {**json.loads(done.read_text()), "seed": seed} if done.exists() else \
                held_out_eval(ckpt, log, episodes=episodes, seed=seed)
            run[field] = {"episodes": int(res["episodes"]), "seed": seed, "score": res.get(key), "step": res.get("step"),
                          "return_mean": res.get("return_mean"), "success_rate": res.get("success_rate")}
    doc["held_out"] = {"episodes": episodes, "seed": seed,
                       "note": f"episodes reset with seeds {seed}.. (never those of the runs' own evaluations, on which "
                               "settings were chosen and keep_best selected)"}
    return doc


def add_reinflow_time_to_dppo_final(doc: dict) -> dict:
    """Add issue 15's wall-time comparison to a learning document of paired ReinFlow and DPPO runs, in place.

    Per seed that has a ``reinflow`` and a ``dppo`` run (families; both with a ``wall_curve``):
    DPPO's final evaluation is the target; ``time_to_dppo_final_s`` is ReinFlow's training wall
    seconds at its first online evaluation at or above it (None: never within the budget, see
    :func:`robotrl.stats.time_to_threshold`), set beside DPPO's whole fine-tuning wall time.
    Written as ``doc["per_run"]`` rows and ``doc["summary"]["time_to_dppo_final_ratio_iqm"]``
    (None when some seed never reaches the target), the form ``bench_reinflow.py learning``
    writes and :mod:`robotrl.bench.schema` renders as the ``<benchmark>_time`` table (ReinFlow
    paper's claim: 82.63 % less wall time than DPPO; issue 15's target ratio <= 0.3).

    Raises:
        BenchError: no seed has both runs with wall curves (nothing to compare).
    """
    from robotrl.stats import iqm, time_to_threshold

    by = {(r["family"], r["seed"]): r for r in doc["runs"]}
    seeds = sorted(s for f, s in by if f == "reinflow" and ("dppo", s) in by
                   and by["reinflow", s].get("wall_curve") and by["dppo", s].get("wall_curve"))
    if not seeds:
        raise BenchError("no seed has both a 'reinflow' and a 'dppo' run with a wall curve: run both methods on the "
                         "same seeds (reports written before per-evaluation wall times cannot be paired)")
    per_run, ratios = [], []
    for s in seeds:
        rf, dppo = by["reinflow", s], by["dppo", s]
        target, dppo_wall = float(dppo["curve"][-1][1]), float(dppo["wall_curve"][-1][1])
        t = time_to_threshold(rf["curve"], rf["wall_curve"], target)
        t = None if t is None or math.isinf(t) else t
        ratios.append(None if t is None else t / dppo_wall)
        per_run += [{"method": "dppo", "seed": s, "finetune_wall_s": dppo_wall},
                    {"method": "reinflow", "seed": s, "finetune_wall_s": float(rf["wall_curve"][-1][1]),
                     "dppo_final_eval_return": target, "time_to_dppo_final_s": t,
                     "time_to_dppo_final_over_dppo_wall": ratios[-1]}]
    doc["per_run"] = per_run
    doc.setdefault("summary", {}).update({"time_to_dppo_final_ratio_per_seed": ratios,
                                          "time_to_dppo_final_ratio_iqm": None if None in ratios else iqm(ratios)})
    return doc
