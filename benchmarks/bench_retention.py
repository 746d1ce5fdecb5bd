"""Knowledge retention vs plain WSRL, with the forgetting metric (issue 46, Wołczyk et al. 2024).

Per seed (each with its own Cal-QL pretraining): ``experiment=calql`` offline, then from that checkpoint
``experiment=wsrl`` (plain WSRL) and ``experiment=wsrl agent=wsrl-retain`` (WSRL + KL toward the frozen
pretrained policy on dataset states), same online budget, same evaluation seeds. After each online run the
forgetting metric (:func:`robotrl.evaluation.forgetting_report`: pretrained vs fine-tuned score on the held-out
resets whose first observation lies farthest from the run's online data) is computed with the run's online
buffer. CPU-sized network (2 LayerNorm critics and an actor of ``--width`` × 2 layers, min over both heads,
UTD 1, Cal-QL with ``critic_init=data``: the quick tier's ``qlearning_learning`` deviations) on a generated
PointMaze UMaze dataset (the main job's sub-optimal demonstrator recipe)::

    PYTHONPATH=$PWD python3 benchmarks/bench_retention.py --seeds 0 1 2 --offline-steps 3000 \\
        --online-steps 6000 --warmup 1000 --eval-every 1000

Writes ``benchmarks/results/retention.json`` (per seed and contender: the evaluation curve
``[(online env steps, normalised score, success rate)]``, offline score, best, ending = mean of the last
``ENDING_EVALS`` evaluations, the best-to-ending gap, wall seconds, the forgetting report) and prints one table
with IQMs and bootstrap CIs over seeds.
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

CONTENDERS = {"wsrl": [], "wsrl-retain": ["agent=wsrl-retain"]}


def _net(width: int) -> list[str]:
    """The CPU-sized network: 2 LayerNorm critic heads and an actor of two ``width`` layers, min over both heads."""
    return [f"agent.model.hidden=[{width},{width}]", f"agent.model.critic_hidden=[{width},{width}]",
            "agent.model.num_critics=2", "agent.model.target_subset=null", "agent.model.critic_layer_norm=true"]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _curve(history: list[dict], offline_steps: int) -> list[list[float]]:
    return [[h["step"] - offline_steps, h["normalized_score"], h["success_rate"]] for h in history
            if h["phase"] == "online" and "normalized_score" in h]


def pretrain_seed(seed: int, args, root: Path) -> tuple[list[str], Path, dict]:
    """Seed ``seed``'s own Cal-QL pretraining (an independent one per seed): ``(the overrides every run of the seed
    shares, the pretraining's run dir, {"pretrain_wall_s", "offline_score"})``; the studies that compare online
    rules from the same pretrainings (this one, ``bench_sung.py``) share it."""
    from robotrl.experiment import build_trainer

    common = [f"seed={seed}", f"dataset.id={args.dataset_id}", f"dataset.recipe_args.num_steps={args.dataset_steps}",
              "trainer.progress=false", f"trainer.eval_episodes={args.eval_episodes}", "trainer.eval_envs=5",
              "torch_threads=1", "device=cpu", *_net(args.width)]
    pre = root / f"pre-seed{seed}"
    t0 = time.perf_counter()
    pt = build_trainer(_compose(["experiment=calql", *common, f"agent.model.critic_init={args.critic_init}",
                                 f"trainer.offline_steps={args.offline_steps}",
                                 f"trainer.eval_every={args.offline_steps}", f"trainer.checkpoint_every={args.offline_steps}",
                                 f"run_dir={pre}"]), pre)
    summary = pt.fit()
    out: dict = {"pretrain_wall_s": time.perf_counter() - t0, "offline_score": summary.get("offline_normalized_score",
                                                                                         pt.history[-1]["normalized_score"])}
    return common, pre, out


def run_seed(seed: int, args, root: Path) -> dict:
    from robotrl.evaluation import forgetting_report
    from robotrl.experiment import build_trainer
    from robotrl.policy import act, load_policy
    from robotrl.stats import ENDING_EVALS

    common, pre, out = pretrain_seed(seed, args, root)
    pretrained = load_policy(str(pre))
    for name, extra in CONTENDERS.items():
        run = root / f"{name}-seed{seed}"
        t0 = time.perf_counter()
        tr = build_trainer(_compose(["experiment=wsrl", *extra, *common, f"trainer.init_from={pre}",
                                     f"trainer.online_steps={args.online_steps}", f"trainer.online_warmup_steps={args.warmup}",
                                     "trainer.utd=1", "trainer.batch_size=256", f"trainer.eval_every={args.eval_every}",
                                     f"trainer.checkpoint_every={args.online_steps}", f"run_dir={run}"]), run)
        tr.fit()
        wall = time.perf_counter() - t0
        curve = _curve(tr.history, 0)
        scores = [c[1] for c in curve]
        ending = float(np.mean(scores[-ENDING_EVALS:]))
        visited = tr.online.observations[: tr.online.size]
        rep = forgetting_report(lambda o: act(pretrained, o), lambda o, f=tr.agent.policy: act(f, o), tr.make_eval_env, visited,
                                num_starts=args.starts, far_fraction=0.25, ref_scores=tr.ref_scores, num_envs=5)
        out[name] = {"curve": curve, "best": max(scores), "ending": ending, "best_minus_ending": max(scores) - ending,
                     "wall_s": wall, "forgetting": rep["forgetting"], "forgetting_near": rep["forgetting_near"],
                     "forgetting_success": rep["forgetting_success"],
                     "far": {k: {m: v[m] for m in ("normalized_score", "success_rate")} for k, v in rep["far"].items()},
                     "near": {k: {m: v[m] for m in ("normalized_score", "success_rate")} for k, v in rep["near"].items()}}
        print(f"seed {seed} {name}: offline {out['offline_score']:.1f} best {max(scores):.1f} ending {ending:.1f} "
              f"forgetting far {rep['forgetting']:+.1f} near {rep['forgetting_near']:+.1f} ({wall:.0f} s)", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--offline-steps", type=int, default=3000)
    p.add_argument("--online-steps", type=int, default=6000)
    p.add_argument("--warmup", type=int, default=1000)
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--starts", type=int, default=60, help="held-out resets of the forgetting metric")
    p.add_argument("--dataset-id", default="robotrl/pointmaze/umaze-slow-bench-v0")
    p.add_argument("--dataset-steps", type=int, default=20000)
    p.add_argument("--width", type=int, default=64, help="hidden width of actor and critic (2 layers)")
    p.add_argument("--critic-init", default="data", help="Cal-QL pretraining's agent.model.critic_init (the quick tier's)")
    p.add_argument("--root", default="/tmp/bench_retention")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "retention.json"))
    p.add_argument("--merge", nargs="+", default=None,
                   help="only build the table from these result files (one per seed, e.g. runs of --seeds 0, 1, 2)")
    args = p.parse_args()
    set_threads(1)
    os.environ.setdefault("MINARI_DATASETS_PATH", str(Path(args.root) / "minari"))
    per_seed, commands = seed_study(args, run_seed)
    table = seed_table(per_seed, CONTENDERS, ("ending", "best", "best_minus_ending", "forgetting", "forgetting_near"))
    offline = [per_seed[s]["offline_score"] for s in args.seeds]
    print(f"\noffline (Cal-QL) normalised score per seed: {[round(v, 1) for v in offline]}")
    print(f"{'contender':<14}{'ending':>20}{'best':>20}{'best-ending':>20}{'forgetting FAR':>22}{'forgetting NEAR':>22}")
    for name, row in table.items():
        cells = "".join(f"{row[k]['iqm']:>9.1f} [{row[k]['ci95'][0]:.1f},{row[k]['ci95'][1]:.1f}]".rjust(w)
                        for k, w in (("ending", 20), ("best", 20), ("best_minus_ending", 20), ("forgetting", 22),
                                     ("forgetting_near", 22)))
        print(f"{name:<14}{cells}")
    write_json(Path(args.out), {"command": " ".join(sys.argv), "commands": commands, "args": vars(args),
                                "environment": environment(),
                                "offline_scores": offline, "per_seed": {str(k): v for k, v in per_seed.items()},
                                "table": table})


if __name__ == "__main__":
    main()
