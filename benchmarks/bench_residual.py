"""Residual RL vs full fine-tuning on Fetch with a deliberately imprecise BC base.

For each seed, at the same env-step budget:

1. **base** — BC (MLP) trained on a few noisy scripted demonstrations
   (``robotrl.collect.collect_fetch(task, "noisy", demos)``), evaluated as is;
2. **residual PPO** (ResiP, :class:`robotrl.agents.residual.ResidualPPOAgent`) on the frozen base;
3. **off-policy residual** (ResFiT, :class:`robotrl.agents.residual.ResidualOffPolicyAgent`,
   TD3-style, ensemble critic, n-step 3, half of each batch from the demonstrations);
4. **full fine-tuning** of the base with Gaussian PPO (:class:`robotrl.agents.ppo.PPOAgent`
   initialised from the BC run, i.e. DPPO's Gaussian baseline).

It records final success rate (``evaluate``, ``--eval-episodes`` episodes, seeds 10 000+),
env steps actually used and wall time of each run, and writes JSON plus a markdown table.
The JSON (under ``benchmarks/results/``, rewritten after every run with ``"partial": true``
until the end) is in the normalised learning form of ``robotrl.bench.schema`` (``runs``,
``budgets``, ``metric`` "success", ``command``, ``environment``) plus ``args``, ``summary``,
``per_method`` (the raw figures per method and seed) and ``table``.

Usage (one torch thread, as on the shared 2-core machine)::

    python benchmarks/bench_residual.py --task push --seeds 0 1 2 --budget 20000
    python benchmarks/bench_residual.py --quick          # smoke run: 1 seed, tiny budgets (~3 min)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, learning_result, set_threads, write_json  # noqa: E402

LABELS = {"base": "base (frozen BC)", "residual_ppo": "residual PPO", "residual_offpolicy": "off-policy residual",
          "full_ppo": "full fine-tuning (Gaussian PPO)"}


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _data_overrides(task: str, demos: int) -> list[str]:
    return [f"dataset.id=robotrl/fetch-{task}/noisy-{demos}ep-bench-v0", f"dataset.recipe_args.num_episodes={demos}",
            "+dataset.recipe_args.ref_episodes=5", "torch_threads=1", "trainer.progress=false"]


def train_base(task: str, demos: int, bc_steps: int, seed: int, run_dir: Path, eval_episodes: int) -> dict:
    """BC on ``demos`` noisy demonstrations through ``robotrl train`` machinery; returns its summary."""
    from robotrl.experiment import build_trainer

    cfg = _compose([f"experiment=fetch-{task}-residual-base", *_data_overrides(task, demos), f"seed={seed}",
                    f"trainer.offline_steps={bc_steps}", f"trainer.eval_every={bc_steps}",
                    f"trainer.checkpoint_every={bc_steps}", f"trainer.eval_episodes={eval_episodes}"])
    t = time.time()
    summary = build_trainer(cfg, run_dir).fit()
    return {"success": summary["final_success_rate"], "wall_s": time.time() - t}


def _sizes(task: str, demos: int):
    from robotrl.data import ActionScaler, ObservationNormalizer, load_dataset
    from robotrl.envs import env_info

    data = load_dataset(f"robotrl/fetch-{task}/noisy-{demos}ep-bench-v0")
    info = env_info(f"fetch-{task}")
    return info, ObservationNormalizer.from_data(data.observations, clip=10.0), ActionScaler.from_space(info.action_space)


def run_onpolicy(kind: str, task: str, demos: int, base_dir: Path, seed: int, budget: int, num_envs: int,
                 run_dir: Path, eval_episodes: int) -> dict:
    """Residual PPO (``kind="residual_ppo"``) or full Gaussian-PPO fine-tuning (``"full_ppo"``) for ``budget`` env steps."""
    from robotrl.agents.ppo import PPOAgent
    from robotrl.agents.residual import ResidualPPOAgent
    from robotrl.envs import make_env
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

    info, obs_norm, scaler = _sizes(task, demos)
    common = dict(obs_normalizer=obs_norm, action_scaler=scaler, seed=seed, gamma=0.99)
    if kind == "residual_ppo":
        agent = ResidualPPOAgent(info.obs_dim, info.action_dim, base=base_dir, residual_scale=0.2, n_epochs=10,
                                 batch_size=1024, critic_warmup_iters=1, **common)
    else:
        agent = PPOAgent(info.obs_dim, info.action_dim, n_epochs=10, batch_size=1024, critic_warmup_iters=1, **common)
        agent.load_pretrained(str(base_dir))
    steps = 50  # one Fetch episode per env per iteration
    cfg = OnPolicyConfig(iterations=10**6, steps_per_iter=steps, num_envs=num_envs, eval_every=10**6,
                         eval_episodes=eval_episodes, eval_envs=10, checkpoint_every=10**6, max_env_steps=budget,
                         progress=False)
    name = f"fetch-{task}"
    t = time.time()
    summary = OnPolicyTrainer(agent, run_dir, cfg, seed=seed,
                              make_train_envs=lambda: make_env(name, num_envs=num_envs, seed=seed, vectorization="sync"),
                              make_eval_env=lambda: make_env(name)).fit()
    return {"success": summary["final_success_rate"], "start_success": summary["offline_success_rate"],
            "env_steps": summary["online_steps"], "wall_s": time.time() - t}


def run_offpolicy(task: str, demos: int, base_dir: Path, seed: int, budget: int, run_dir: Path,
                  eval_episodes: int, warmup: int, utd: int) -> dict:
    """ResFiT (TD3 residual) for ``budget`` env steps with demonstrations at offline ratio 0.5."""
    from robotrl.experiment import build_trainer

    cfg = _compose([f"experiment=fetch-{task}-residual-offpolicy", *_data_overrides(task, demos), f"seed={seed}",
                    f"agent.model.base={base_dir}", f"agent.model.base_noise_steps={warmup}",
                    f"agent.model.critic_warmup_updates={warmup}", "agent.model.residual_scale=0.2",
                    "agent.model.critic_n=4", "agent.model.actor_lr=3e-4",
                    f"trainer.online_steps={budget}", f"trainer.online_warmup_steps={warmup}", f"trainer.utd={utd}",
                    f"trainer.eval_every={budget}", f"trainer.checkpoint_every={budget}",
                    f"trainer.eval_episodes={eval_episodes}"])
    t = time.time()
    trainer = build_trainer(cfg, run_dir)
    summary = trainer.fit()
    return {"success": summary["final_success_rate"], "env_steps": budget, "updates": summary["gradient_updates"],
            "wall_s": time.time() - t}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="push", choices=["push", "pickandplace"])
    p.add_argument("--demos", type=int, default=20, help="noisy demonstrations for the BC base")
    p.add_argument("--bc-steps", type=int, default=5000)
    p.add_argument("--budget", type=int, default=20000, help="env steps per fine-tuning method")
    p.add_argument("--num-envs", type=int, default=16, help="envs of the on-policy methods")
    p.add_argument("--utd", type=int, default=1, help="off-policy updates per env step")
    p.add_argument("--warmup", type=int, default=1000, help="off-policy base+noise steps and critic-only updates")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--methods", nargs="+", default=["residual_ppo", "residual_offpolicy", "full_ppo"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="1 seed, 400 BC steps, 1600 env steps, 10 eval episodes")
    p.add_argument("--out", default=None, help="file under benchmarks/results/ (default residual_fetch_<task>.json)")
    args = p.parse_args()
    if args.quick:
        args.seeds, args.bc_steps, args.budget, args.eval_episodes, args.warmup = [0], 400, 1600, 10, 200
    set_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench_residual_"))
    os.environ["MINARI_DATASETS_PATH"] = str(work / "minari")
    results: dict[str, list[dict]] = {"base": [], **{m: [] for m in args.methods}}
    try:
        for seed in args.seeds:
            base_dir = work / f"base_s{seed}"
            results["base"].append({"seed": seed, **train_base(args.task, args.demos, args.bc_steps, seed, base_dir,
                                                               args.eval_episodes)})
            print(f"[seed {seed}] base success {results['base'][-1]['success']:.2f}", flush=True)
            for m in args.methods:
                rd = work / f"{m}_s{seed}"
                if m == "residual_offpolicy":
                    r = run_offpolicy(args.task, args.demos, base_dir, seed, args.budget, rd, args.eval_episodes,
                                      args.warmup, args.utd)
                else:
                    r = run_onpolicy(m, args.task, args.demos, base_dir, seed, args.budget, args.num_envs, rd,
                                     args.eval_episodes)
                results[m].append({"seed": seed, **r})
                print(f"[seed {seed}] {m}: success {r['success']:.2f} in {r['wall_s']:.0f} s", flush=True)
                _write(args, results, partial=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write(args, results, partial=False)


def normalised_runs(results: dict[str, list[dict]], budget: int) -> list[dict]:
    """Per method and seed, the suite's learning form: success before fine-tuning (the base's) and after ``budget``."""
    base = {r["seed"]: r["success"] for r in results.get("base", [])}
    runs = []
    for m, rs in results.items():
        for r in rs:
            if m == "base":
                runs.append({"method": LABELS[m], "family": "bc", "peer": False, "seed": r["seed"],
                             "offline_score": r["success"], "curve": [], "wall_s": r["wall_s"]})
                continue
            start = r.get("start_success", base.get(r["seed"]))
            runs.append({"method": LABELS.get(m, m), "family": m, "peer": False, "seed": r["seed"], "offline_score": start,
                         "curve": ([[0, start]] if start is not None else []) + [[budget, r["success"]]],
                         "wall_s": r["wall_s"]})
    return runs


def _write(args, results: dict, partial: bool) -> None:
    """Markdown table to stdout (final) and JSON under ``benchmarks/results/`` (also after every run)."""
    table = ["| method | success (mean ± std over seeds) | per seed | wall time s (mean) |", "|---|---|---|---|"]
    summary = {}
    for m, runs in results.items():
        if not runs:
            continue
        s = [r["success"] for r in runs]
        w = [r["wall_s"] for r in runs]
        summary[m] = {"success_mean": float(np.mean(s)), "success_std": float(np.std(s)),
                      "wall_s_mean": float(statistics.mean(w))}
        table.append(f"| {m} | {np.mean(s):.2f} ± {np.std(s):.2f} | {', '.join(f'{x:.2f}' for x in s)} | "
                     f"{statistics.mean(w):.0f} |")
    if not partial:
        print("\n".join(table))
    out = RESULTS_DIR / (args.out or f"residual_fetch_{args.task}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # "runs": the suite's normalised learning form (robotrl.bench.schema); "per_method": the raw figures
    doc = learning_result(out.stem, f"fetch-{args.task} ({args.demos} noisy demos, BC base)",
                          "success", [args.budget], normalised_runs(results, args.budget), args=vars(args),
                          partial=partial, summary=summary, per_method=results, table=table)
    write_json(out, doc)
    if not partial:
        print(f"wrote {out}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
