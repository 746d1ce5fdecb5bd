"""WSRL's warm start on locomotion: what holds it — optimizer state and network (LayerNorm).

Issue 11 saw WSRL on Walker2d medium fall from its CQL policy's score to near zero within
the first few hundred updates after its warmup, and named suspects. This benchmark measures
them on Hopper medium through the real ``robotrl train`` commands, one arm per suspect
(``--arms``, indices of ``ARMS``):

- 0 / 1: the optimizer state. WSRL's reference (zhouzypaul/wsrl ``finetune.py``) restores the
  whole pretrained train state (``flax.training.checkpoints.restore_checkpoint(target=agent)``),
  Adam moments included: ``init_parts=[policy, critic, temperature, optimizers]`` (arm 0, the
  default) vs a fresh Adam (arm 1). Both on 2 critic heads without LayerNorm.
- 0 / 2 / 3: the network. No LayerNorm (arm 0), LayerNorm in the critic heads and the actor
  (arm 2: WSRL's network, ``add_redq_config`` / ``locomotion_wsrl``), in the critic heads only
  (arm 3: robotrl's ``configs/agent/sac.yaml``). Each network and seed gets its own CQL pretraining
  (seed ``s`` fine-tunes the pretraining made with seed ``s``), so the seeds' spread includes the
  pretraining's (``--shared-pretraining``: one per network for every seed, as results before issue 43).

Steps:
1. ``robotrl collect recipe=hopper-medium`` (``--dataset-steps`` steps, skipped when present);
2. per network and seed, ``robotrl train experiment=cql env=hopper`` (``--cql-steps`` updates; skipped when done);
3. per seed and arm, ``robotrl train experiment=wsrl`` from that network's and seed's checkpoint,
   ``--workers`` runs at a time (finished runs are kept, a killed one resumes from its checkpoint); with
   ``--keep-best`` each run also keeps ``checkpoints/best.pt`` (``trainer.keep_best``: the policy of its best
   evaluation, selected on its own evaluation episodes);
4. the runs' reports as one learning result (:func:`robotrl.bench.sweep.sweep_to_learning`), each run's last
   policy (and kept best one) evaluated on ``--held-out-episodes`` held-out episodes
   (:func:`robotrl.bench.sweep.add_held_out`: resets never used by the runs' own evaluations).

CPU-sized, said so in the result (``setup.network`` is built from the overrides the runs got):
2 critic heads by default (WSRL: 10, min over 2 random, ``--overrides agent.model.num_critics=10
agent.model.target_subset=2``; the issue's Walker2d run had 2), ``critic_init=data`` (the critic starts at the data's Monte-Carlo return
scale: 10k CQL updates cannot propagate a ~160-return horizon from a zero start, see
``QLAgent.init_from_data``), 10k CQL updates (reference 250k-1M), 200k-step dataset,
``--matmul-dtype bfloat16`` where the CPU has native bf16 (same learning, ``qlearning_precision``).

Commands (this machine, 2 cores):
    python benchmarks/bench_wsrl_warmstart.py --seeds 0 1 2 --workers 2 --out studies/wsrl-hopper/adam_state.json   # ~1 h
    python benchmarks/bench_wsrl_warmstart.py --seeds 0 1 2 --workers 2 --arms 0 2 3 --matmul-dtype bfloat16 \
        --online-steps 25000 --out studies/wsrl-hopper/layernorm_25k.json                                                # ~1.5 h
    # issue 43: WSRL's 10-head network on Hopper, an independent CQL pretraining per seed, best policy kept,
    # 50 held-out episodes (GPU-sized: ~3 GPU-hours or ~20 CPU-hours for the three seeds)
    python benchmarks/bench_wsrl_warmstart.py --seeds 0 1 2 --workers 2 --arms 2 --online-steps 105000 \
        --overrides agent.model.num_critics=10 agent.model.target_subset=2 --keep-best \
        --root runs/bench_wsrl_ensemble10_indep --out wsrl_ensemble10_hopper_indep.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from _common import RESULTS_DIR, run_cli, run_cli_all

ARMS = {  # method name -> (trainer.init_parts, network: a key of NETS)
    "WSRL, no LayerNorm, pretrained Adam (reference restore)": ("[policy,critic,temperature,optimizers]", "plain"),
    "WSRL, no LayerNorm, fresh Adam": ("[policy,critic,temperature]", "plain"),
    "WSRL, LayerNorm critic and actor (reference network)": ("[policy,critic,temperature,optimizers]", "layernorm"),
    "WSRL, LayerNorm critic only": ("[policy,critic,temperature,optimizers]", "critic_ln"),
}
_CPU = ["agent.model.critic_init=data", "agent.model.num_critics=2", "agent.model.target_subset=null"]
NETS = {  # network -> overrides of pretraining and fine-tuning; each network gets its own CQL pretraining
    "plain": [*_CPU, "agent.model.critic_layer_norm=false"],
    # WSRL's reference network: LayerNorm in every critic head (critic_network_kwargs.use_layer_norm) and in
    # the policy (policy_network_kwargs.use_layer_norm=True in wsrl_config / add_redq_config)
    "layernorm": [*_CPU, "agent.model.critic_layer_norm=true", "agent.model.actor_layer_norm=true"],
    "critic_ln": [*_CPU, "agent.model.critic_layer_norm=true", "agent.model.actor_layer_norm=false"],
}


def network_doc(overrides: list[str]) -> str:
    """What the runs' network is: read from ``experiment=wsrl env=hopper`` composed with the overrides they got."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        m = compose(config_name="train", overrides=["experiment=wsrl", "env=hopper", *overrides]).agent.model
    ln = {True: "with", False: "without"}
    target = (f"min over {m.target_subset} random heads" if m.target_subset else "min over all heads")
    return (f"{m.num_critics} critic heads {'x'.join(map(str, m.critic_hidden))} {ln[bool(m.critic_layer_norm)]} "
            f"LayerNorm (target: {target}), actor {'x'.join(map(str, m.hidden))} {ln[bool(m.actor_layer_norm)]} "
            f"LayerNorm, critic_init={m.critic_init}")


def _dataset(dataset_id: str, steps: int, root: Path) -> None:
    import minari

    if dataset_id not in minari.list_local_datasets():
        run_cli(["collect", "recipe=hopper-medium", f"num_steps={steps}", f"dataset_id={dataset_id}"], root / "collect.log")


def pretrain_dirs(root: Path, nets: list[str], seeds: list[int], shared: bool) -> dict[tuple[str, int], Path]:
    """The CQL pretraining each (network, seed) fine-tunes: its own per seed, or with ``shared`` one per network
    (made with seed 0) for every seed."""
    return {(net, s): root / (f"pretrain_{net}" if shared else f"pretrain_{net}_s{s}") for net in nets for s in seeds}


def _run(args, root: Path, arms: list, pretrain: dict[tuple[str, int], Path], common: list[str]) -> None:
    """The CQL pretrainings (a killed one resumes), then every arm and seed's WSRL run from its seed's pretraining."""
    todo = {d: (net, 0 if args.shared_pretraining else s) for (net, s), d in pretrain.items()}
    run_cli_all([(["train", "experiment=cql", *common, *NETS[net], *args.overrides, f"seed={s}",
                   f"trainer.offline_steps={args.cql_steps}", "trainer.eval_every=2000", "trainer.checkpoint_every=2000",
                   f"run_dir={d}"], d.with_suffix(".log"))
                 for d, (net, s) in todo.items() if not (d / "report.json").exists()], args.workers)
    keep = ["trainer.keep_best=true"] if args.keep_best else []
    jobs = []
    for seed in args.seeds:
        for i, _name, parts, net in arms:
            run_dir = root / "online" / f"arm{i}_s{seed}"
            if not (run_dir / "report.json").exists():
                jobs.append((["train", "experiment=wsrl", *common, *NETS[net], *args.overrides,
                              f"trainer.init_from={pretrain[net, seed]}", f"seed={seed}", f"trainer.init_parts={parts}",
                              f"trainer.online_steps={args.online_steps}", f"trainer.online_warmup_steps={args.warmup}",
                              f"trainer.eval_every={args.eval_every}", f"trainer.checkpoint_every={args.checkpoint_every}",
                              *keep, f"run_dir={run_dir}"], root / f"arm{i}_s{seed}.log"))
    run_cli_all(jobs, args.workers)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--dataset-steps", type=int, default=200_000)
    ap.add_argument("--cql-steps", type=int, default=10_000)
    ap.add_argument("--online-steps", type=int, default=15_000, help="online env steps, warmup included")
    ap.add_argument("--warmup", type=int, default=5_000)
    ap.add_argument("--eval-every", type=int, default=1_000)
    ap.add_argument("--checkpoint-every", type=int, default=5_000,
                    help="online steps between checkpoints (smaller on short GPU leases: a killed run resumes from its last)")
    ap.add_argument("--root", default="runs/bench_wsrl_warmstart", help="where the runs go (resumable)")
    ap.add_argument("--out", default="studies/wsrl-hopper/adam_state.json", help="under benchmarks/results/")
    ap.add_argument("--arms", type=int, nargs="+", default=[0, 1],
                    help="indices of ARMS to run (0: pretrained Adam, 1: fresh Adam, 2: LayerNorm critic and actor, "
                         "3: LayerNorm critic only)")
    ap.add_argument("--matmul-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="agent.model.matmul_dtype of every run (bfloat16: ~2.7x faster CQL on AVX512-BF16 CPUs, "
                         "same learning: qlearning_precision)")
    ap.add_argument("--overrides", nargs="*", default=[], metavar="KEY=VALUE",
                    help="Hydra overrides of every pretraining and fine-tuning, after the arms' own (they win), e.g. "
                         "agent.model.num_critics=10 agent.model.target_subset=2 for WSRL's 10-head ensemble on a GPU (with a fresh "
                         "--root: finished pretrainings and runs there are reused by name)")
    ap.add_argument("--shared-pretraining", action="store_true",
                    help="one CQL pretraining per network for all seeds (results before issue 43; the seeds' spread then "
                         "omits the pretraining's)")
    ap.add_argument("--keep-best", action="store_true",
                    help="trainer.keep_best: each run also keeps the policy of its best evaluation (checkpoints/best.pt)")
    ap.add_argument("--held-out-episodes", type=int, default=50,
                    help="evaluate each run's last (and kept best) policy on this many held-out episodes (0: off)")
    ap.add_argument("--summarize-only", action="store_true",
                    help="run nothing: write the result of the runs under --root as they stand, unfinished ones from their "
                         "last checkpoint (marked finished: false, with the step each stopped at; the document partial: true)")
    args = ap.parse_args()

    root = Path(args.root)
    dataset_id = f"robotrl/hopper/medium-{args.dataset_steps // 1000}k-v0"
    if not args.summarize_only:
        _dataset(dataset_id, args.dataset_steps, root)
    common = ["env=hopper", f"dataset.id={dataset_id}", "trainer.eval_episodes=10", "trainer.progress=false",
              f"agent.model.matmul_dtype={args.matmul_dtype}"]
    arms = [(i, name, *ARMS[name]) for i, name in enumerate(ARMS) if i in args.arms]
    nets = sorted({net for *_, net in arms})
    pretrain = pretrain_dirs(root, nets, args.seeds, args.shared_pretraining)
    if not args.summarize_only:
        _run(args, root, arms, pretrain, common)

    from robotrl.stats import ENDING_EVALS, ending_score
    from robotrl.bench.sweep import add_held_out, sweep_to_learning
    from robotrl.provenance import read_provenance

    command = "python benchmarks/bench_wsrl_warmstart.py " + " ".join(sys.argv[1:])
    doc = sweep_to_learning(root / "online", benchmark="wsrl_warmstart", argv=sys.argv, command=command,
                            unfinished=args.summarize_only)
    names = list(ARMS)
    for run in doc["runs"]:  # sweep_job is the run's directory, arm<i>_s<seed>
        run["method"] = run["family"] = names[int(run["sweep_job"].split("_")[0][3:])]
        run["first_update_step"] = args.warmup  # the onset dip is measured after WSRL's no-update warmup
        after = [score for step, score, *_ in run["curve"] if step > args.warmup]
        # the locomotion limit: no evaluation after the warmup more than 10 points below the offline score
        run["lowest_after_warmup_minus_offline"] = min(after) - run["offline_score"] if after else None
        run["mean_last5"] = ending_score(run["offline_score"], run["curve"], ENDING_EVALS)
        net = ARMS[run["method"]][1]
        run["pretrained_run"] = str(pretrain[net, run["seed"]])
        # where each phase ran (robotrl.provenance): the CQL pretraining's segments and the fine-tuning's
        run["provenance"] = {"pretraining": read_provenance(pretrain[net, run["seed"]]),
                             "fine-tuning": read_provenance(root / "online" / run["sweep_job"])}
        best = max(score for _, score, *_ in run["curve"])
        # issue 43's endings target: the mean of the last five evaluations within 15 normalised points of the best
        run["ending_minus_best"] = run["mean_last5"] - best
    if args.held_out_episodes:
        add_held_out(doc, {r["sweep_job"]: root / "online" / r["sweep_job"] for r in doc["runs"]}, root / "held_out",
                     episodes=args.held_out_episodes)
    doc["setup"] = {"pretraining": f"CQL, {args.cql_steps} updates, "
                                   + ("one checkpoint per network for all seeds (shared)" if args.shared_pretraining
                                      else "an independent pretraining per network and seed"),
                    "overrides": args.overrides, "keep_best": args.keep_best,
                    "network": {name: network_doc([*NETS[net], *args.overrides]) for _, name, _, net in arms},
                    "matmul_dtype": args.matmul_dtype, "dataset": dataset_id, "warmup_steps": args.warmup, "utd": 4,
                    "cql_curve": {f"{net}_s{s}": [[h["step"], h.get("normalized_score")] for h in
                                                  json.loads((d / "report.json").read_text())["history"]]
                                  for (net, s), d in pretrain.items() if (d / "report.json").exists()}}
    out = RESULTS_DIR / args.out
    out.write_text(json.dumps(doc, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
