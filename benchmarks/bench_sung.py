"""SUNG vs plain WSRL from the same Cal-QL pretrainings (issue 46 item 2; docs/algorithms/sung.md).

Per seed (each with its own Cal-QL pretraining, as ``benchmarks/bench_retention.py`` builds it, whose network,
composition and curve helpers this reuses): ``experiment=calql`` offline, then from that checkpoint
``experiment=wsrl`` (plain WSRL: SAC, online data only, a warmup with the pretrained policy) and
``experiment=sung`` (SAC + SUNG's VAE, optimistic exploration, CQL on the uncertain rows, 10 % offline replay,
no warmup), the same online budget, UTD 1 and batches of 256 for both, the same evaluation seeds. CPU-sized
network (``bench_retention._net``) on a generated PointMaze UMaze dataset (the slow demonstrator)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python3 benchmarks/bench_sung.py --seeds 0 1 2 --offline-steps 2000 \\
        --online-steps 4000 --warmup 500 --eval-every 500 --eval-episodes 10

Writes ``--out`` (per seed and contender: the evaluation curve ``[(online env steps, normalised score, success
rate)]``, offline score, best, ending = mean of the last ``ENDING_EVALS`` evaluations, ending minus offline score,
wall seconds) and prints one table with IQMs and bootstrap CIs over seeds.
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
from bench_retention import _compose, _curve, pretrain_seed  # noqa: E402

#: contender -> (experiment, extra overrides)
CONTENDERS = {"wsrl": ("wsrl", []), "sung": ("sung", [])}


def run_seed(seed: int, args, root: Path) -> dict:
    from robotrl.experiment import build_trainer
    from robotrl.stats import ENDING_EVALS

    common, pre, out = pretrain_seed(seed, args, root)
    for name, (experiment, extra) in CONTENDERS.items():
        run = root / f"{name}-seed{seed}"
        warmup = args.warmup if experiment == "wsrl" else 0  # SUNG's reference explores and updates from step 1
        sung = [f"agent.model.sung.vae_pretrain_steps={args.vae_pretrain_steps}"] if experiment == "sung" else []
        t0 = time.perf_counter()
        tr = build_trainer(_compose([f"experiment={experiment}", *extra, *sung, *common, f"trainer.init_from={pre}",
                                     f"trainer.online_steps={args.online_steps}", f"trainer.online_warmup_steps={warmup}",
                                     "trainer.utd=1", "trainer.batch_size=256", f"trainer.eval_every={args.eval_every}",
                                     f"trainer.checkpoint_every={args.online_steps}", f"run_dir={run}"]), run)
        tr.fit()
        wall = time.perf_counter() - t0
        curve = _curve(tr.history, 0)
        scores = [c[1] for c in curve]
        ending = float(np.mean(scores[-ENDING_EVALS:]))
        out[name] = {"curve": curve, "best": max(scores), "ending": ending,
                     "ending_minus_offline": ending - out["offline_score"],
                     "ending_success": float(np.mean([c[2] for c in curve[-ENDING_EVALS:]])), "wall_s": wall}
        print(f"seed {seed} {name}: offline {out['offline_score']:.1f} best {max(scores):.1f} ending {ending:.1f} "
              f"({wall:.0f} s)", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--offline-steps", type=int, default=2000)
    p.add_argument("--online-steps", type=int, default=4000)
    p.add_argument("--warmup", type=int, default=500, help="WSRL's online warmup (env steps, no updates)")
    p.add_argument("--vae-pretrain-steps", type=int, default=5000)
    p.add_argument("--eval-every", type=int, default=500)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--dataset-id", default="robotrl/pointmaze/umaze-slow-bench-v0")
    p.add_argument("--dataset-steps", type=int, default=20000)
    p.add_argument("--width", type=int, default=64, help="hidden width of actor and critic (2 layers)")
    p.add_argument("--critic-init", default="data", help="Cal-QL pretraining's agent.model.critic_init (the quick tier's)")
    p.add_argument("--root", default="/tmp/bench_sung")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "studies" / "sung" / "pointmaze_cpu.json"))
    p.add_argument("--merge", nargs="+", default=None, help="only build the table from these result files (one per seed)")
    args = p.parse_args()
    set_threads(1)
    os.environ.setdefault("MINARI_DATASETS_PATH", str(Path(args.root) / "minari"))
    per_seed, commands = seed_study(args, run_seed)
    seeds = sorted(per_seed)
    table = seed_table(per_seed, CONTENDERS, ("ending", "best", "ending_minus_offline", "ending_success"))
    offline = [per_seed[s]["offline_score"] for s in seeds]
    print(f"\noffline (Cal-QL) normalised score per seed: {[round(v, 1) for v in offline]}")
    print(f"{'contender':<10}{'ending':>22}{'best':>22}{'ending-offline':>22}{'below offline':>15}")
    for name, row in table.items():
        cells = "".join(f"{row[k]['iqm']:>9.1f} [{row[k]['ci95'][0]:.1f},{row[k]['ci95'][1]:.1f}]".rjust(22)
                        for k in ("ending", "best", "ending_minus_offline"))
        print(f"{name:<10}{cells}{row['seeds_below_offline']:>12}/{len(seeds)}")
    write_json(Path(args.out), {"command": " ".join(sys.argv), "commands": commands, "partial": False,
                                "args": vars(args), "environment": environment(), "offline_scores": offline,
                                "per_seed": {str(k): v for k, v in per_seed.items()}, "table": table})


if __name__ == "__main__":
    main()
