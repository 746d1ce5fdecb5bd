"""Does bfloat16 learn as well as float32? Cal-QL (or CQL / IQL) offline pretraining both ways, several seeds.

``bench_qlearning.py`` shows that ``agent.model.matmul_dtype=bfloat16`` (bf16 matmuls with
fp32 accumulation; weights, optimizer state and losses fp32) makes updates 2-4x faster on
CPUs with native bf16 (AVX512-BF16 / AMX) and GPUs. This script checks what it costs in
learning: the same offline pretraining (``experiment=calql`` through robotrl's
trainer, same seed, same data, same updates) in float32 and in bfloat16, evaluated with
the same episodes, with the training wall time of each. The critic is the one the
throughput benchmark times against d3rlpy: 2 heads, 256x256 ReLU, no LayerNorm.

Run from the repository root::

    python benchmarks/bench_qlearning_precision.py                     # 3 seeds, 3000 updates (~15 min on 2 cores)
    python benchmarks/bench_qlearning_precision.py --smoke             # plumbing check, ~1 min

Writes ``benchmarks/results/full/qlearning_precision.json`` in the suite's learning form
(offline-only: ``offline_score`` = success rate after pretraining), with returns, wall
times and updates/s per run.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from robotrl.bench.tasks._common import environment, set_threads, write_json
from robotrl.bench.tasks.qlearning_learning import _compose

DTYPES = ("float32", "bfloat16")


def run(args, seed: int, dtype: str, work: Path) -> dict:
    """One offline pretraining; returns the final evaluation and the training time."""
    from robotrl.experiment import build_trainer

    run_dir = work / f"{dtype}-s{seed}"
    overrides = [f"experiment={args.algo}", f"seed={seed}", f"dataset.id={args.dataset_id}",
                 f"trainer.offline_steps={args.updates}", f"trainer.eval_every={args.updates}",
                 f"trainer.checkpoint_every={args.updates}", f"trainer.eval_episodes={args.eval_episodes}",
                 "trainer.progress=false", f"torch_threads={args.threads}", f"run_dir={run_dir}", "device=cpu",
                 f"agent.model.matmul_dtype={dtype}", f"agent.model.num_critics={args.critics}",
                 f"agent.model.hidden=[{args.hidden},{args.hidden}]",
                 f"agent.model.critic_hidden=[{args.hidden},{args.hidden}]",
                 f"agent.model.critic_layer_norm={args.layer_norm}", *args.extra]
    if args.dataset_steps:
        overrides.append(f"dataset.recipe_args.num_steps={args.dataset_steps}")
    trainer = build_trainer(_compose(overrides), run_dir)
    t = time.time()
    trainer.fit()
    wall = time.time() - t
    last = trainer.history[-1]
    train_s = wall - sum(h.get("eval_seconds", 0.0) for h in trainer.history)
    return {"success": last["success_rate"], "return": last["return_mean"], "wall_s": wall,
            "updates_per_s": args.updates / max(train_s, 1e-9)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--algo", default="calql", choices=["calql", "cql", "iql"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--updates", type=int, default=3000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--critics", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layer-norm", default="false", choices=["true", "false"])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset-id", default="robotrl/pointmaze/umaze-50k-v0")
    ap.add_argument("--dataset-steps", type=int, default=50000)
    ap.add_argument("--extra", nargs="*", default=[], help="extra Hydra overrides for both runs")
    ap.add_argument("--out", default="full/qlearning_precision.json")
    ap.add_argument("--smoke", action="store_true", help="tiny budgets: checks the plumbing")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.updates, args.eval_episodes, args.hidden = [0], 100, 2, 64
    set_threads(args.threads)
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            for dtype in DTYPES:  # alternate: both dtypes see the same machine load
                r = run(args, seed, dtype, Path(tmp))
                print(f"seed {seed} {dtype:8s} success {r['success']:.2f} return {r['return']:7.2f} "
                      f"{r['updates_per_s']:6.1f} updates/s", flush=True)
                runs.append({"method": f"robotrl {args.algo} {dtype}", "family": "qlearning", "peer": False,
                             "seed": seed, "offline_score": r["success"], "curve": [], "offline_return": r["return"],
                             "wall_s": r["wall_s"],
                             "updates_per_s": r["updates_per_s"]})
    env = environment()
    ratio = [b["updates_per_s"] / a["updates_per_s"] for a, b in zip(runs[0::2], runs[1::2])]
    path = write_json(args.out, {
        "environment": env, "args": vars(args), "argv": env["argv"], "command": "python " + " ".join(env["argv"]),
        "benchmark": Path(args.out).stem, "task": f"PointMaze UMaze offline pretraining ({args.dataset_id})",
        "metric": "success", "budgets": [], "runs": runs,
        "bf16_over_fp32_updates_per_s": ratio})
    print(f"bf16/fp32 updates/s per seed: {[round(x, 2) for x in ratio]}\nresults: {path}")


if __name__ == "__main__":
    main()
