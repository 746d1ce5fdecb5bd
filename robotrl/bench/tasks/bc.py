"""Offline behaviour cloning: robotrl BC vs d3rlpy 2.8.1 BC on the same data, network, batch and updates.

Setup (offline only, no online phase), per seed:

* Data: the main job's generated Minari dataset (``robotrl/pointmaze/umaze-v0``, 200k steps of
  the waypoint-planner recipe; generated on first use through
  :func:`robotrl.experiment.ensure_dataset`; ``--dataset-id`` / ``--dataset-steps`` pick another).
* robotrl: ``robotrl train``'s own config (``train.yaml`` + ``agent/bc.yaml``: deterministic MLP
  256x256 ReLU, tanh output, MSE, AdamW lr 1e-3 / weight decay 1e-4, gradient-norm clip 1.0,
  batch 256, observations normalised with the dataset's mean/std (clip ±10), actions scaled
  from the env's action bounds to [-1, 1]) composed with overrides (dataset, seed, updates,
  no evaluation or checkpoint inside the loop) and run through
  :func:`robotrl.experiment.build_trainer` and ``Trainer.fit``.
* d3rlpy: ``BCConfig(policy_type="deterministic")`` (MLP 256x256 ReLU, tanh output, MSE) with
  the same batch, learning rate, weight decay and gradient clip read from the same composed
  config (``AdamWFactory(weight_decay, clip_grad_norm)``), ``StandardObservationScaler`` with
  the dataset's mean/std and ``MinMaxActionScaler`` with the env's action bounds (so both nets
  see the same inputs and targets), trained with ``fit`` for the same number of updates.
  Remaining differences: d3rlpy divides by ``std + 1e-3`` and does not clip normalised
  observations at ±10 (robotrl: ``max(std, 1e-6)``, clip 10); initialisation and sampling RNGs
  differ (same seeds, different generators).
* Evaluation: both final policies with :func:`robotrl.evaluation.evaluate` on the same eval env
  (the data's MDP, :func:`robotrl.task_mdp.eval_env_args`, as the trainer does), the
  same episode seeds (``seed + 10_000 + i``, the trainer's) and episode count (the config's
  ``trainer.eval_episodes``, 20, unless ``--eval-episodes``). Reported: D4RL-normalised score
  ``100 (R - ref_min) / (ref_max - ref_min)`` with the dataset's reference scores (the
  trainer's ``normalized_score``), success rate and return.
* Speed: the training loop alone is timed (robotrl: the trainer's offline phase, sampling +
  update + its TensorBoard logging every 250 steps, no evaluation; d3rlpy: ``fit`` after
  ``build_with_dataset``, its sampling + update). Gradient updates/s of each, and the ratio
  robotrl / d3rlpy per seed (the two run back to back in one process; the order alternates
  with the seed), median over seeds.

Run from the repository root in the d3rlpy interpreter (see ``benchmarks/bench_qlearning.py``
for how to make one; ``--skip d3rlpy`` runs robotrl alone in the plain interpreter)::

    /tmp/d3rlpy-venv/bin/python benchmarks/bench_bc.py --smoke                      # ~1 min plumbing check
    /tmp/d3rlpy-venv/bin/python benchmarks/bench_bc.py --seeds 0 1 2 --updates 20000 # the main job's 20k updates
    python benchmarks/bench_bc.py --seeds 0 1 2 --skip d3rlpy                        # robotrl only

Writes ``benchmarks/results/full/bc.json`` (``--out``; relative names go under ``benchmarks/results``)
atomically: the normalised learning form of ``robotrl.bench.schema`` (metric
``normalized_score``, budgets ``[]``, per run ``offline_score`` = the final score,
``offline_success``, ``wall_s`` = training time) plus ``throughput`` (the row "BC updates/s":
robotrl, d3rlpy, ratio) and every per-run figure in ``per_run``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from robotrl.bench.tasks._common import learning_result, set_threads, write_json

LABELS = {"robotrl": "robotrl BC", "d3rlpy": "d3rlpy BC"}


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _data_overrides(args) -> list[str]:
    return [f"dataset.id={args.dataset_id}"] + \
        ([f"dataset.recipe_args.num_steps={args.dataset_steps}"] if args.dataset_steps else [])


def setup(args):
    """The composed main-job config, the dataset (generated on first use) and the eval env builder."""
    from robotrl.data import load_dataset
    from robotrl.envs import make_env
    from robotrl.experiment import ensure_dataset
    from robotrl.task_mdp import eval_env_args

    cfg = _compose(_data_overrides(args))
    data = load_dataset(ensure_dataset(cfg.dataset))
    ev = eval_env_args(cfg.env, data)  # the env robotrl's trainer evaluates in (the data's MDP)

    def make_eval_env():
        return make_env(ev["name"], env_kwargs=ev["env_kwargs"], max_episode_steps=ev["max_episode_steps"])

    return cfg, data, make_eval_env


def _evaluate(policy, make_eval_env, args, seed: int, ref_scores) -> dict:
    """The trainer's evaluation: same env, episode seeds ``seed + 10_000 + i``, episodes and envs."""
    from robotrl.evaluation import evaluate

    return evaluate(policy, make_eval_env, args.eval_episodes, seed=seed + 10_000, num_envs=args.eval_envs,
                    ref_scores=ref_scores)


def run_robotrl(args, seed: int, work: Path, make_eval_env, ref_scores) -> dict:
    from robotrl.experiment import build_trainer
    from robotrl.policy import act

    run_dir = work / f"robotrl-s{seed}"
    big = 10**9  # no evaluation or checkpoint inside the training loop: fit() evaluates and saves once at the end
    cfg = _compose([*_data_overrides(args), f"seed={seed}", f"trainer.offline_steps={args.updates}",
                    "trainer.online_steps=0", f"trainer.batch_size={args.batch_size}", f"trainer.eval_every={big}",
                    f"trainer.checkpoint_every={big}", f"trainer.eval_episodes={args.eval_episodes}",
                    f"trainer.eval_envs={args.eval_envs}", "trainer.progress=false",
                    f"torch_threads={args.threads}", f"run_dir={run_dir}", *args.robotrl_extra])
    t0 = time.perf_counter()
    tr = build_trainer(cfg, run_dir)
    build_s = time.perf_counter() - t0
    timing = {}
    offline_phase = tr._offline_phase

    def timed(bar):  # the training loop alone: sampling, update, the trainer's logging
        t = time.perf_counter()
        offline_phase(bar)
        timing["train_s"] = time.perf_counter() - t

    tr._offline_phase = timed
    summary = tr.fit()
    # the trainer's own final evaluation (same function, env, seeds) and ours must agree
    res = _evaluate(lambda o: act(tr.agent.policy, o), make_eval_env, args, seed, ref_scores)
    trainer_eval = tr.history[-1]
    return {"updates": int(summary["gradient_updates"]), "train_s": timing["train_s"], "build_s": build_s,
            "eval": res, "trainer_eval_normalized_score": trainer_eval["normalized_score"],
            "trainer_wall_time_s": summary["wall_time_s"]}


def run_d3rlpy(args, seed: int, cfg, data, make_eval_env, ref_scores) -> dict:
    import d3rlpy
    from d3rlpy.models.encoders import VectorEncoderFactory
    from d3rlpy.optimizers import AdamWFactory
    from d3rlpy.preprocessing import MinMaxActionScaler, StandardObservationScaler

    from robotrl.envs import env_info

    m = cfg.agent.model
    d3rlpy.seed(seed)
    terminals = data.terminated.astype(np.float32)
    timeouts = (data.truncated | np.isin(np.arange(data.num_transitions), data.episode_ends - 1)) & ~data.terminated
    dataset = d3rlpy.dataset.MDPDataset(data.observations, data.actions, data.rewards, terminals,
                                        timeouts=timeouts.astype(np.float32))
    obs = np.asarray(data.observations, np.float64)
    std = obs.std(0)
    std = np.where(std < 1e-6, 1.0, std)  # robotrl's ObservationNormalizer.from_data statistics
    space = env_info(cfg.env.name).action_space  # robotrl scales actions from the env's bounds
    algo = d3rlpy.algos.BCConfig(
        batch_size=args.batch_size, learning_rate=float(m.lr), policy_type="deterministic",
        encoder_factory=VectorEncoderFactory(hidden_units=list(m.hidden), activation=str(m.act)),
        optim_factory=AdamWFactory(weight_decay=float(m.weight_decay), clip_grad_norm=m.max_grad_norm),
        observation_scaler=StandardObservationScaler(mean=obs.mean(0), std=std),
        action_scaler=MinMaxActionScaler(minimum=np.asarray(space.low, np.float64),
                                         maximum=np.asarray(space.high, np.float64)),
    ).create(device="cpu:0")
    t0 = time.perf_counter()
    algo.build_with_dataset(dataset)
    build_s = time.perf_counter() - t0
    t = time.perf_counter()
    algo.fit(dataset, n_steps=args.updates, n_steps_per_epoch=args.updates, show_progress=False,
             save_interval=10**9, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    train_s = time.perf_counter() - t
    res = _evaluate(algo.predict, make_eval_env, args, seed, ref_scores)
    return {"updates": int(args.updates), "train_s": train_s, "build_s": build_s, "eval": res}


def to_runs(rows: list[dict], metric: str) -> list[dict]:
    key = {"normalized_score": "normalized_score", "return": "return_mean"}[metric]
    return [{"method": LABELS[r["contender"]], "family": "bc", "peer": r["contender"] != "robotrl", "seed": r["seed"],
             "offline_score": r["eval"][key], "curve": [],
             "offline_success": r["eval"]["success_rate"], "offline_return": r["eval"]["return_mean"],
             "wall_s": round(r["train_s"], 2), "updates_per_s": r["updates"] / r["train_s"]} for r in rows]


def throughput(rows: list[dict], benchmark: str) -> dict:
    """The "BC updates/s" row: medians over seeds, ratio = median of per-seed paired ratios."""
    by = {c: {r["seed"]: r["updates"] / r["train_s"] for r in rows if r["contender"] == c} for c in LABELS}
    ours = statistics.median(by["robotrl"].values()) if by["robotrl"] else None
    peer = statistics.median(by["d3rlpy"].values()) if by["d3rlpy"] else None
    pairs = [by["robotrl"][s] / by["d3rlpy"][s] for s in by["robotrl"] if s in by["d3rlpy"]]
    ratio = statistics.median(pairs) if pairs else None
    return {"benchmark": benchmark,
            "rows": [{"what": "BC updates/s", "ours": ours, "peer_name": "d3rlpy", "peer": peer, "unit": "updates/s",
                      "ratio": ratio, "target": None, "target_on": "ratio", "higher_is_better": True,
                      "regression_check": True, "per_seed_ratio": pairs}]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--updates", type=int, default=0, help="gradient updates (0: the config's trainer.offline_steps)")
    ap.add_argument("--batch-size", type=int, default=0, help="0: the config's trainer.batch_size (256)")
    ap.add_argument("--eval-episodes", type=int, default=0, help="0: the config's trainer.eval_episodes")
    ap.add_argument("--eval-envs", type=int, default=0, help="0: the config's trainer.eval_envs")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (the main job's torch_threads is 1)")
    ap.add_argument("--dataset-id", default="robotrl/pointmaze/umaze-v0")
    ap.add_argument("--dataset-steps", type=int, default=0, help="generation size (0: the config's)")
    ap.add_argument("--robotrl-extra", nargs="*", default=[], help="extra Hydra overrides for the robotrl runs")
    ap.add_argument("--skip", nargs="*", default=[], choices=["d3rlpy"], help="contenders to skip")
    ap.add_argument("--out", default="", help="results file (relative: under benchmarks/results; default bc.json, "
                    "bc_smoke.json with --smoke)")
    ap.add_argument("--smoke", action="store_true", help="tiny dataset, 1 seed, 300 updates: checks the plumbing")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.updates, args.eval_episodes = [0], 300, 4
        args.dataset_id, args.dataset_steps = "robotrl/pointmaze/umaze-smoke-v0", 3000
    set_threads(args.threads)
    t_all = time.time()
    cfg, data, make_eval_env = setup(args)
    args.updates = args.updates or int(cfg.trainer.offline_steps)
    args.batch_size = args.batch_size or int(cfg.trainer.batch_size)
    args.eval_episodes = args.eval_episodes or int(cfg.trainer.eval_episodes)
    args.eval_envs = args.eval_envs or int(cfg.trainer.eval_envs)
    ref = data.ref_scores
    metric = "normalized_score" if ref else "return"
    contenders = ["robotrl"] + ([] if "d3rlpy" in args.skip else ["d3rlpy"])
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_bc_") as tmp:
        for i, seed in enumerate(args.seeds):
            for c in (contenders if i % 2 == 0 else contenders[::-1]):  # alternate the order against drift
                if c == "robotrl":
                    r = run_robotrl(args, seed, Path(tmp), make_eval_env, ref)
                else:
                    r = run_d3rlpy(args, seed, cfg, data, make_eval_env, ref)
                r.update(contender=c, seed=seed)
                rows.append(r)
                e = r["eval"]
                print(f"seed {seed} {c:8s} score {e['normalized_score']:6.1f}  success {e['success_rate']:.2f}  "
                      f"return {e['return_mean']:7.2f}  {r['updates']} updates in {r['train_s']:.1f} s "
                      f"({r['updates'] / r['train_s']:,.0f}/s)", flush=True)
    name = Path(args.out or ("bc_smoke.json" if args.smoke else "full/bc.json")).stem
    tp = throughput(rows, f"{name}_updates")
    summary = {}
    for c in contenders:
        rs = [r for r in rows if r["contender"] == c]
        summary[c] = {"normalized_score_mean": float(np.mean([r["eval"]["normalized_score"] for r in rs])),
                      "success_mean": float(np.mean([r["eval"]["success_rate"] for r in rs])),
                      "return_mean": float(np.mean([r["eval"]["return_mean"] for r in rs])),
                      "train_s_mean": float(np.mean([r["train_s"] for r in rs])),
                      "updates_per_s_median": statistics.median(r["updates"] / r["train_s"] for r in rs)}
    m = cfg.agent.model
    setting = {"dataset": args.dataset_id, "transitions": int(data.num_transitions), "ref_scores": list(ref or []),
               "updates": args.updates, "batch_size": args.batch_size, "lr": float(m.lr),
               "weight_decay": float(m.weight_decay), "max_grad_norm": m.max_grad_norm, "hidden": list(m.hidden),
               "eval_episodes": args.eval_episodes, "threads": args.threads}
    res = learning_result(name, f"{args.dataset_id} ({args.updates} BC updates, batch {args.batch_size}, offline only)",
                          metric, [], to_runs(rows, metric), throughput=tp, setting=setting, per_run=rows,
                          summary=summary, args=vars(args), total_wall_s=round(time.time() - t_all, 1))
    if "d3rlpy" in contenders:
        import d3rlpy

        res["environment"]["d3rlpy"] = d3rlpy.__version__
    path = write_json(args.out or ("bc_smoke.json" if args.smoke else "full/bc.json"), res)
    for c, s in summary.items():
        print(f"{LABELS[c]:11s} normalised score {s['normalized_score_mean']:6.1f}  success {s['success_mean']:.2f}  "
              f"{s['updates_per_s_median']:,.0f} updates/s")
    row = tp["rows"][0]
    if row["ratio"] is not None:
        per = [round(x, 2) for x in row["per_seed_ratio"]]
        print(f"BC updates/s robotrl / d3rlpy: {row['ratio']:.2f}x (per seed {per})")
    print(f"total wall {res['total_wall_s']} s; wrote {path}")


if __name__ == "__main__":
    main()
