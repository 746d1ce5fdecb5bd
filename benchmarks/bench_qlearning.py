"""Gradient updates per second: robotrl's Q-learning agents vs d3rlpy 2.8.1, side by side in one run.

Setup (d3rlpy 2.8.1 pins ``gymnasium==1.0.0``; install it without its pins into a
separate venv that still sees the project's packages)::

    python -m venv --system-site-packages /tmp/d3rlpy-venv
    /tmp/d3rlpy-venv/bin/pip install --no-deps d3rlpy==2.8.1 gym==0.26.2 gym-notices structlog colorama \\
        dataclasses-json marshmallow typing-inspect mypy-extensions cloudpickle
    /tmp/d3rlpy-venv/bin/pip install scikit-learn        # d3rlpy imports sklearn at import time

Run from the repository root::

    /tmp/d3rlpy-venv/bin/python benchmarks/bench_qlearning.py              # 2 torch threads
    /tmp/d3rlpy-venv/bin/python benchmarks/bench_qlearning.py --threads 1 --quick

What it does: one batch of ``B = 256`` real Hopper-v5 transitions (random actions,
MuJoCo), the same for every contender. For each of SAC, CQL, Cal-QL and IQL it builds
robotrl's :class:`~robotrl.agents.qlearning.QLAgent` and d3rlpy's counterpart with
matching sizes: actor and critics 256×256 ReLU MLPs, 2 critics, Adam, batch 256; SAC/CQL
with entropy backup and the min over both critics in the actor loss (d3rlpy's choices);
CQL/Cal-QL with 10 sampled actions per kind and a fixed conservative weight 5
(d3rlpy ``alpha_learning_rate=0``); IQL expectile 0.7, β 3. One timed call = one full
update (critic + actor + temperature/value + target update): ``QLAgent.update(batch)``
vs d3rlpy's ``algo.impl.update(torch_batch, step)`` on a prebuilt ``TorchMiniBatch``
(neither pays for sampling or host→tensor conversion). robotrl is timed twice: float32
(same arithmetic as d3rlpy; the critic's fused one-node forward/backward, ``--unfused`` adds
the previous module-by-module pass for before/after ratios) and ``matmul_dtype="bfloat16"``
(bf16 autocast of the network passes; weights, optimizer state and losses float32). A fused
bf16 node was tried and measured no faster than autocast's module pass on this CPU
(0.87-1.0x), so bf16 keeps the module pass. Also timed, for information:
robotrl's WSRL network (N = 10 heads with LayerNorm, min over 2 random target heads).

Contenders are timed round-robin (``benchmarks/_common.run_interleaved``), with the
median over repeats and the paired ratio ours/d3rlpy per repeat. Results go to stdout
and ``benchmarks/results/qlearning_throughput.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Case, environment, format_table, paired_ratio, run_interleaved, set_threads, write_json  # noqa: E402

TARGETS = {"sac": 2.0, "iql": 2.0, "cql": 3.0, "calql": 3.0}


def hopper_batch(n: int = 256, seed: int = 0) -> dict[str, np.ndarray]:
    """``n`` real Hopper-v5 transitions with uniformly random actions (episodes reset as they end)."""
    import gymnasium as gym

    env = gym.make("Hopper-v5")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    rows = {k: [] for k in ("obs", "act", "rew", "next", "term")}
    while len(rows["obs"]) < n:
        a = rng.uniform(-1, 1, 3).astype(np.float32)
        nxt, r, term, trunc, _ = env.step(a)
        for k, v in zip(rows, (obs, a, r, nxt, term)):
            rows[k].append(v)
        obs = env.reset()[0] if term or trunc else nxt
    env.close()
    return {k: np.asarray(v, np.float32) for k, v in rows.items()}


def ours(algo: str, data: dict, fused: bool = True, **overrides):
    import torch

    from robotrl.agents.qlearning import QLAgent
    from robotrl.data import ActionScaler, Batch, ObservationNormalizer

    kw = dict(algo=algo, num_critics=2, target_subset=None, critic_layer_norm=False, final_init_scale=None,
              actor_lr=3e-4, critic_lr=3e-4, alpha_lr=3e-4, backup_entropy=True, actor_q="min",
              cql_alpha=5.0, cql_n_actions=10, iql_expectile=0.7, iql_beta=3.0)
    kw.update(overrides)
    agent = QLAgent(11, 3, obs_normalizer=ObservationNormalizer.from_data(data["obs"]),
                    action_scaler=ActionScaler(-np.ones(3), np.ones(3)), device="cpu", seed=0, **kw)
    n = data["obs"].shape[0]
    rtg = np.cumsum(data["rew"][::-1])[::-1].copy()
    batch = Batch.from_numpy("cpu", observations=data["obs"], actions=data["act"], rewards=data["rew"],
                             next_observations=data["next"], terminated=data["term"],
                             truncated=np.zeros(n, bool), discounts=np.full(n, 0.99, np.float32), mc_returns=rtg)
    if not fused:  # the previous implementation: module-by-module critic pass (plain autograd)
        agent.critic.net.fused = agent.critic_target.net.fused = False
    step = [0]

    def fn() -> int:
        agent.update(batch, step[0])
        step[0] += 1
        return 1

    torch.manual_seed(0)
    return fn


def d3rlpy_update(algo: str, data: dict):
    import d3rlpy
    import torch
    from d3rlpy.torch_utility import TorchMiniBatch

    common = dict(batch_size=256, actor_learning_rate=3e-4, critic_learning_rate=3e-4)
    if algo == "sac":
        cfg = d3rlpy.algos.SACConfig(**common, temp_learning_rate=3e-4, n_critics=2)
    elif algo == "cql":
        cfg = d3rlpy.algos.CQLConfig(**common, temp_learning_rate=3e-4, n_critics=2, alpha_learning_rate=0.0,
                                     initial_alpha=1.0, conservative_weight=5.0, n_action_samples=10)
    elif algo == "calql":
        cfg = d3rlpy.algos.CalQLConfig(**common, temp_learning_rate=3e-4, n_critics=2, alpha_learning_rate=0.0,
                                       initial_alpha=1.0, conservative_weight=5.0, n_action_samples=10)
    else:
        cfg = d3rlpy.algos.IQLConfig(**common, n_critics=2, expectile=0.7, weight_temp=3.0)  # V shares the critic lr
    a = cfg.create(device="cpu:0")
    a.create_impl((11,), 3)
    n = data["obs"].shape[0]
    t = lambda x: torch.as_tensor(x, dtype=torch.float32)  # noqa: E731
    rtg = np.cumsum(data["rew"][::-1])[::-1].copy()
    batch = TorchMiniBatch(observations=t(data["obs"]), actions=t(data["act"]), rewards=t(data["rew"][:, None]),
                           next_observations=t(data["next"]), next_actions=t(data["act"]),
                           returns_to_go=t(rtg[:, None]), terminals=t(data["term"][:, None]),
                           intervals=torch.ones(n, 1), device="cpu:0")
    step = [0]

    def fn() -> int:
        a.impl.update(batch, step[0])
        step[0] += 1
        return 1

    return fn


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=float, default=3.0, help="seconds per timed block")
    ap.add_argument("--quick", action="store_true", help="3 repeats of 1.5 s blocks")
    ap.add_argument("--algos", default="sac,cql,calql,iql")
    ap.add_argument("--unfused", action="store_true",
                    help="also time the previous float32 critic pass (module by module), for before/after ratios")
    ap.add_argument("--out", default="qlearning_throughput.json", help="file name under benchmarks/results/")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.block = 3, 1.5
    set_threads(args.threads)
    data = hopper_batch()
    results, rows = {}, []
    for algo in args.algos.split(","):
        cases = [Case(f"robotrl {algo} fp32", ours(algo, data)), Case(f"d3rlpy {algo}", d3rlpy_update(algo, data)),
                 Case(f"robotrl {algo} bf16", ours(algo, data, matmul_dtype="bfloat16")),
                 Case(f"robotrl {algo} N=10 LN (WSRL net) fp32",
                      ours(algo, data, num_critics=10, target_subset=2, critic_layer_norm=True, actor_q="mean"))]
        if args.unfused:
            cases.append(Case(f"robotrl {algo} fp32 unfused critic (previous)", ours(algo, data, fused=False)))
        run_interleaved(cases, repeats=args.repeats, warmup=3, block_s=args.block)
        r32, r16 = paired_ratio(cases[0], cases[1]), paired_ratio(cases[2], cases[1])
        results[algo] = {"ratio_fp32_over_d3rlpy": r32, "ratio_bf16_over_d3rlpy": r16, "target": TARGETS[algo],
                         **{c.name: c.summary() for c in cases}}
        if args.unfused:
            results[algo]["ratio_fp32_unfused_over_d3rlpy"] = paired_ratio(cases[4], cases[1])
            results[algo]["ratio_fp32_fused_over_unfused"] = paired_ratio(cases[0], cases[4])
        rows.append([algo, f"{cases[1].median_rate:.1f}", f"{cases[0].median_rate:.1f}", f"{r32:.2f}x",
                     f"{cases[2].median_rate:.1f}", f"{r16:.2f}x", f"{TARGETS[algo]:.0f}x", f"{cases[3].median_rate:.1f}"])
        if args.unfused:
            rows[-1].append(f"{results[algo]['ratio_fp32_unfused_over_d3rlpy']:.2f}x")
        print(rows[-1], flush=True)
    print(format_table(["algo", "d3rlpy upd/s", "robotrl fp32 upd/s", "fp32 ratio", "robotrl bf16 upd/s",
                        "bf16 ratio", "target", "robotrl N=10 LN fp32 upd/s"]
                       + (["fp32 unfused (previous) ratio"] if args.unfused else []), rows))
    import d3rlpy

    env = environment()
    env["d3rlpy"] = d3rlpy.__version__
    path = write_json(args.out, {"environment": env, "batch_size": 256, "results": results})
    print(f"results: {path}")


if __name__ == "__main__":
    main()
