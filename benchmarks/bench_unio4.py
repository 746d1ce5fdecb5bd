"""Uni-O4 vs the main job (BC then PPO) on the main job's PointMaze UMaze data (issue 46 item 3;
docs/algorithms/unio4.md).

Per seed, two independent runs on the same dataset (``robotrl train``'s default, ``robotrl/pointmaze/umaze-slow-v1``,
sparse reward), each pretraining itself in the run: ``agent=bc-ppo`` (the main job: 5000 BC updates, then PPO)
and ``experiment=unio4`` (its offline phase: ensemble BC, V/Q, BPPO steps checked by OPE, then PPO from the best
member and V), the same online schedule (``--iterations`` of 40 envs × 500 steps), the same evaluation episodes
(``--eval-episodes`` after pretraining and after every iteration, the same reset seeds)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python3 benchmarks/bench_unio4.py --seeds 0 1 2

Writes ``--out`` after every seed (per seed and contender: the curve ``[(env steps, normalised score, success)]``,
offline success, best, ending = mean of the last ``ENDING_EVALS`` evaluations, ending minus offline, wall seconds;
Uni-O4's chosen member, accepted OPE checks and OPE scores) and prints one table with IQMs and bootstrap CIs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, seed_study, seed_table, set_threads, write_json  # noqa: E402

#: contender -> overrides selecting it
CONTENDERS = {"bc-ppo": ["agent=bc-ppo"], "unio4": ["experiment=unio4"]}


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def run_seed(seed: int, args, root: Path) -> dict:
    """Both contenders of ``seed``; returns ``{contender: results}``."""
    from robotrl.experiment import build_trainer
    from robotrl.stats import ENDING_EVALS

    common = [f"seed={seed}", f"agent.onpolicy.iterations={args.iterations}",
              f"agent.onpolicy.eval_episodes={args.eval_episodes}", "agent.onpolicy.progress=false",
              f"agent.onpolicy.checkpoint_every={args.iterations}", "torch_threads=1", "device=cpu"]
    out: dict = {}
    for name, select in CONTENDERS.items():
        run = root / f"{name}-seed{seed}"
        t0 = time.perf_counter()
        tr = build_trainer(_compose([*select, *common, f"run_dir={run}"]), run)
        tr.fit()
        wall = time.perf_counter() - t0
        hist = [h for h in tr.history if "success_rate" in h]
        curve = [[h["step"], h.get("normalized_score"), h["success_rate"]] for h in hist]
        offline = hist[0]["success_rate"]
        online = [c[2] for c in curve[1:]]
        ending = float(np.mean(online[-ENDING_EVALS:]))
        res = {"curve": curve, "offline_success": offline, "best_success": max(online), "ending_success": ending,
               "last_success": online[-1], "ending_minus_offline": ending - offline, "wall_s": wall}
        if name == "unio4":
            a = tr.agent
            res.update(chosen=a.chosen, accepted=a.accepted.tolist(), best_ope=a.best_ope.tolist())
        out[name] = res
        print(f"seed {seed} {name}: offline {offline:.2f} best {max(online):.2f} ending {ending:.2f} "
              f"last {online[-1]:.2f} ({wall:.0f} s)", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--iterations", type=int, default=10, help="online PPO iterations (40 envs x 500 steps each)")
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--root", default="/tmp/bench_unio4")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "studies" / "unio4" / "pointmaze_cpu.json"))
    p.add_argument("--merge", nargs="+", default=None, help="only build the table from these result files")
    args = p.parse_args()
    set_threads(1)
    per_seed, commands = seed_study(args, run_seed)
    seeds = sorted(per_seed)
    table = seed_table(per_seed, CONTENDERS, ("offline_success", "ending_success", "last_success", "best_success",
                                              "ending_minus_offline"))
    keys = ("offline_success", "ending_success", "last_success", "ending_minus_offline")
    print(f"{'contender':<10}" + "".join(f"{k:>24}" for k in keys) + f"{'below offline':>15}")
    for name, row in table.items():
        cells = "".join(f"{row[k]['iqm']:>9.2f} [{row[k]['ci95'][0]:.2f},{row[k]['ci95'][1]:.2f}]".rjust(24) for k in keys)
        print(f"{name:<10}{cells}{row['seeds_below_offline']:>12}/{len(seeds)}")
    write_json(Path(args.out), {"command": " ".join(sys.argv), "commands": commands, "partial": False,
                                "args": vars(args), "environment": environment(),
                                "per_seed": {str(k): v for k, v in per_seed.items()}, "table": table})


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
