"""Chunked policies fine-tuned on Fetch: DPPO, ReinFlow and Gaussian PPO from policies cloned on noisy demos.

Issue 11 asks that on a Fetch task, from a diffusion policy behaviour-cloned on noisy demonstrations, DPPO
adds >= 0.2 success within 300k env steps with Gaussian PPO beside it; issue 15 asks for ReinFlow vs DPPO from
equally good pretrained policies on a Fetch task at the same env-step budget. This benchmark runs all three
through the real ``robotrl train`` commands a user types, on FetchPush-v4:

1. ``robotrl collect recipe=fetch-push-noisy num_episodes=--demos`` (the scripted expert with Gaussian action
   noise σ 0.3 and 30 % random actions; skipped when the dataset exists);
2. per seed, three pretrainings on those demos with the same number of updates (``--bc-updates``):
   ``experiment=diffusion`` (DPPO's state network: residual MLP 3x512, K = 20), ``experiment=flow`` (the same
   network, K = 4 Euler steps, ReinFlow's Gym setting) and ``experiment=bc`` (the Gaussian PPO actor's MLP);
3. per seed, ``experiment=dppo`` / ``experiment=reinflow`` / ``experiment=ppo`` from them, each for
   ``--env-steps`` env steps (``agent.onpolicy.max_env_steps``), ``--workers`` runs at a time (a killed run
   resumes from its checkpoint, finished ones are kept);
4. the runs' reports as one learning result (:func:`robotrl.bench.sweep.sweep_to_learning`, metric: success at
   the episode's FINAL step, the Fetch convention) with each method's pretrained score as its offline score;
   with DPPO and ReinFlow on the same seeds also issue 15's wall-time comparison
   (:func:`robotrl.bench.sweep.add_reinflow_time_to_dppo_final`: ReinFlow's training seconds until it first reaches DPPO's
   final success vs DPPO's whole fine-tuning time; table ``<out>_time``). Fair timing needs one run per core:
   ``--workers`` at most the machine's cores;
5. each run's last policy evaluated on ``--held-out-episodes`` (50) held-out episodes
   (:func:`robotrl.bench.sweep.add_held_out`: resets from seed 100,000, never those of the runs' own evaluations,
   on which settings such as γ 0.95 were chosen): the headline column, a 50-episode success rate resolving
   differences of ~0.15 (binomial standard error up to 0.07).

Every seed fine-tunes its own pretraining (``pretrain/<experiment>_s<seed>``, made with that seed): the seeds'
spread includes the pretraining's.

Settings (every one recorded in the result's ``setting``): DPPO runs ``configs/tuning/dppo-fetch-push.yaml``
(robomimic-style but γ 0.95 per 4-step chunk (robomimic: 0.999; the tuning file says why), 50 envs × 13 chunk steps per iteration, an episode being 13 chunks
and a reset step,
clip base 0.001, 2 critic warm-up iterations) with its reference trust region (``configs/agent/dppo.yaml``);
ReinFlow runs ``configs/tuning/reinflow-fetch-push.yaml`` (the same collection and discount with ReinFlow's
robomimic settings: σ in [0.08, 0.14] decaying over the run's iterations, target KL 0.01, entropy 0.01,
minibatches of 10,000, 2 critic warm-up iterations); Gaussian PPO gets the same collection (50 envs, one
episode per env and iteration) and discount (0.95^(1/4) per step, as it acts every step). Evaluations: ``--eval-episodes``
episodes every ``--eval-every`` iterations, success at the final step.

Usage (2-core machine; one torch thread per run)::

    python benchmarks/bench_fetch_chunked.py --seeds 0 1 2 --env-steps 300000 --workers 2   # hours on 2 CPU cores
    python benchmarks/bench_fetch_chunked.py --smoke    # 1 seed, tiny budgets: checks every command runs (~5 min)
    # issue 43's FetchPush DPPO row: 3 independent pretrainings, 50 held-out episodes per run (~6 CPU-hours a seed)
    python benchmarks/bench_fetch_chunked.py --methods dppo --seeds 0 1 2 --env-steps 300000 --workers 2 \
        --held-out-episodes 50 --out fetch_dppo_push_indep.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from robotrl.bench.tasks._common import command_argv, results_dir, run_cli, run_cli_all

PRETRAIN = {"dppo": "diffusion", "reinflow": "flow", "ppo": "bc"}  # fine-tuning experiment -> its pretraining
LABELS = {"dppo": "DPPO (diffusion BC)", "reinflow": "ReinFlow (flow BC)", "ppo": "Gaussian PPO (MLP BC)"}
NUM_ENVS, CHUNKS, ACT_STEPS, GAMMA_CHUNK = 50, 13, 4, 0.95
COLLECTION = {  # the same envs, episodes per iteration and discount for every method (DPPO's tuning file's values)
    "dppo": [],  # configs/tuning/dppo-fetch-push.yaml sets them
    "reinflow": [],  # configs/tuning/reinflow-fetch-push.yaml: the same, with ReinFlow's robomimic settings
    "ppo": [f"agent.onpolicy.num_envs={NUM_ENVS}", f"agent.onpolicy.steps_per_iter={CHUNKS * ACT_STEPS}",
            f"agent.gamma={GAMMA_CHUNK ** (1 / ACT_STEPS):.6f}"],
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--methods", nargs="+", default=list(PRETRAIN), choices=list(PRETRAIN))
    ap.add_argument("--demos", type=int, default=50, help="noisy demonstrations (50-step episodes)")
    ap.add_argument("--bc-updates", type=int, default=20_000, help="updates of every pretraining")
    ap.add_argument("--env-steps", type=int, default=300_000, help="online env steps of every fine-tuning")
    ap.add_argument("--eval-every", type=int, default=10, help="iterations between evaluations (2,600 env steps each)")
    ap.add_argument("--eval-episodes", type=int, default=50)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--root", default="runs/bench_fetch_chunked", help="where the runs go (resumable)")
    ap.add_argument("--out", default="full/fetch_reinflow_dppo_push.json", help="under benchmarks/results/")
    ap.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                    help="Hydra overrides of every pretraining and fine-tuning run (recorded in the command), e.g. "
                         "dataset.obs_std_floor=null to match pretrainings made before the Fetch std floor")
    ap.add_argument("--held-out-episodes", type=int, default=50,
                    help="evaluate each run's last policy on this many held-out episodes (0: off)")
    ap.add_argument("--smoke", action="store_true", help="1 seed, 2 demos' worth of tiny budgets, 2 evaluations")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.demos, args.bc_updates, args.env_steps, args.eval_every, args.eval_episodes = \
            [0], 10, 200, 2 * NUM_ENVS * CHUNKS * ACT_STEPS, 1, 10
        args.held_out_episodes = min(args.held_out_episodes, 4)
    root = Path(args.root).resolve()
    os.environ.setdefault("MINARI_DATASETS_PATH", str(root / "minari"))
    dataset_id = f"robotrl/fetch-push/noisy-{args.demos}ep-chunked-v0"
    import minari

    if dataset_id not in minari.list_local_datasets():
        run_cli(["collect", "recipe=fetch-push-noisy", f"num_episodes={args.demos}", f"dataset_id={dataset_id}",
              "+ref_episodes=20"], root / "collect.log")
    common = ["env=fetch-push", "dataset=fetch-push-noisy", f"dataset.id={dataset_id}", "dataset.generate=false",
              "trainer.progress=false", "torch_threads=1", *args.overrides]
    pre = {(m, s): root / "pretrain" / f"{PRETRAIN[m]}_s{s}" for m in args.methods for s in args.seeds}
    run_cli_all([(["train", f"experiment={PRETRAIN[m]}", *common, f"seed={s}", f"trainer.offline_steps={args.bc_updates}",
                f"trainer.eval_every={args.bc_updates}", f"trainer.checkpoint_every={args.bc_updates}",
                f"trainer.eval_episodes={args.eval_episodes}", f"run_dir={d}"], d.with_suffix(".log"))
              for (m, s), d in pre.items() if not (d / "report.json").exists()], args.workers)
    online = root / "online"
    iters = -(-args.env_steps // (NUM_ENVS * CHUNKS * ACT_STEPS))  # iterations of the budget
    schedule = {"reinflow": [f"agent.model.noise_decay_iters={iters}"]}  # learn_decay over the run, as the reference
    run_cli_all([(["train", f"experiment={m}", *common, *COLLECTION[m], *schedule.get(m, []), f"seed={s}",
                   f"trainer.init_from={pre[m, s]}",
                f"agent.onpolicy.max_env_steps={args.env_steps}", "agent.onpolicy.iterations=1000000",
                f"agent.onpolicy.eval_every={args.eval_every}", f"agent.onpolicy.checkpoint_every={args.eval_every}",
                f"agent.onpolicy.eval_episodes={args.eval_episodes}", f"run_dir={online / f'{m}_s{s}'}"],
               online / f"{m}_s{s}.log")
              for m in args.methods for s in args.seeds if not (online / f"{m}_s{s}" / "report.json").exists()],
             args.workers)

    from robotrl.bench.sweep import add_held_out, add_reinflow_time_to_dppo_final, sweep_to_learning

    command = "python benchmarks/bench_fetch_chunked.py " + " ".join(sys.argv[1:])
    doc = sweep_to_learning(online, benchmark="fetch_chunked", argv=command_argv(), command=command, metric="success")
    for run in doc["runs"]:  # named by method (the sweep converter names them by their differing overrides)
        run["pretrained_run"] = str(root / "pretrain" / f"{PRETRAIN[run['family']]}_s{run['seed']}")  # any earlier --methods too
        run["method"] = LABELS[run["family"]]
        hist = json.loads((online / run["sweep_job"] / "report.json").read_text())["history"]
        run["success_any_curve"] = [[int(h["step"]), h.get("success_any_rate")] for h in hist]  # beside final-step
    # common budgets: every method collects at most NUM_ENVS x 52 env steps per iteration, so each run has had its
    # k-th evaluation by k x eval_every x that many steps; the last is the shortest run's end
    per_eval = args.eval_every * NUM_ENVS * CHUNKS * ACT_STEPS
    end = min(r["curve"][-1][0] for r in doc["runs"])
    doc["budgets"] = [*range(per_eval, end, per_eval), end]
    if args.held_out_episodes:
        add_held_out(doc, {r["sweep_job"]: online / r["sweep_job"] for r in doc["runs"]}, root / "held_out",
                     episodes=args.held_out_episodes)
    doc["setting"] = {"dataset": dataset_id, "independent_pretraining_per_seed": True, "demos": args.demos, "overrides": args.overrides, "pretraining_updates": args.bc_updates,
                      "env_steps": args.env_steps, "collection": {m: COLLECTION[m] or f"configs/tuning/{m}-fetch-push.yaml"
                                                                  for m in sorted({r["family"] for r in doc["runs"]})},
                      "pretrained_scores": {r["pretrained_run"]: json.loads((Path(r["pretrained_run"]) / "report.json")
                                                                            .read_text())["summary"].get("final_success_rate")
                                            for r in doc["runs"]}}
    if {"dppo", "reinflow"} <= {r["family"] for r in doc["runs"]}:  # issue 15: ReinFlow's time to DPPO's final score
        add_reinflow_time_to_dppo_final(doc)
        print("ReinFlow / DPPO wall time to DPPO's final success per seed:",
              doc["summary"]["time_to_dppo_final_ratio_per_seed"], flush=True)
    out = results_dir() / args.out
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
