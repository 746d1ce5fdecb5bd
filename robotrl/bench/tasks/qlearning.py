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

Contenders are timed round-robin (:func:`robotrl.bench.tasks._common.run_interleaved`), with the
median over repeats and the paired ratio ours/d3rlpy per repeat. Results go to stdout
and ``benchmarks/results/full/qlearning_throughput.json``.

Allocator before/after (``--malloc-compare``; project venv, no d3rlpy needed)::

    python benchmarks/bench_qlearning.py --malloc-compare --threads 1

runs the same robotrl CQL/Cal-QL update (fp32; the default config's network, N = 10
LayerNorm heads, and the 2-critic network above) in fresh subprocesses, alternately with
glibc's default allocator (``ROBOTRL_MALLOC_TUNE=0``) and with the setting ``import
robotrl`` applies (:mod:`robotrl._alloc`: mmap threshold 256 MiB, trim threshold 1 GiB). Each
subprocess warms up, then times ``--malloc-updates`` updates and counts minor page faults
(``resource.getrusage(RUSAGE_SELF).ru_minflt``) over them. Reported: median updates/s per
setting, the paired ratio tuned/default per repeat (median), page faults per update and
peak RSS. Results go to ``benchmarks/results/studies/qlearning-pointmaze/malloc_wsrl_network.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from robotrl.bench.tasks._common import Case, environment, format_table, paired_ratio, run_interleaved, set_threads, write_json
from robotrl.bench.tasks._formats import as_result

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


MALLOC_NETS = {"N=10 LN (default config)": dict(num_critics=10, target_subset=2, critic_layer_norm=True, actor_q="mean"),
               "2 critics": {}}


def malloc_worker(algo: str, net: str, updates: int, warmup: int, threads: int) -> dict:
    """In this (fresh) process: time ``updates`` CQL/Cal-QL updates after ``warmup``, count minor page faults."""
    import resource

    set_threads(threads)
    from robotrl import _alloc  # importing robotrl applies (or, with ROBOTRL_MALLOC_TUNE=0, skips) the setting

    fn = ours(algo, hopper_batch(), **MALLOC_NETS[net])
    for _ in range(warmup):
        fn()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    for _ in range(updates):
        fn()
    dt = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    return {"algo": algo, "net": net, "allocator": dict(_alloc.STATE), "updates": updates, "seconds": dt,
            "updates_per_s": updates / dt, "minflt_per_update": (ru1.ru_minflt - ru.ru_minflt) / updates,
            "sys_s_per_update": (ru1.ru_stime - ru.ru_stime) / updates, "maxrss_mib": ru1.ru_maxrss / 1024}


def malloc_compare(args) -> None:
    """Same update with glibc's default allocator and with robotrl's setting, in alternating subprocesses."""
    settings = {"default": {"ROBOTRL_MALLOC_TUNE": "0"}, "robotrl": {}}
    base_env = {k: v for k, v in os.environ.items()
                if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", "ROBOTRL_MALLOC_TUNE")}
    results, rows = {}, []
    for algo in args.algos.split(","):
        for net in [n for n in MALLOC_NETS if args.malloc_nets in ("all", n)]:
            runs = {k: [] for k in settings}
            for rep in range(args.repeats):
                order = list(settings) if rep % 2 == 0 else list(settings)[::-1]
                for name in order:
                    cmd = [sys.executable, "-m", "robotrl.bench.tasks.qlearning", "--malloc-worker", algo, net, "--malloc-updates",
                           str(args.malloc_updates), "--threads", str(args.threads)]
                    out = subprocess.run(cmd, env={**base_env, **settings[name]}, capture_output=True, text=True,
                                         check=True)
                    runs[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
            rate = {k: statistics.median(r["updates_per_s"] for r in v) for k, v in runs.items()}
            flt = {k: statistics.median(r["minflt_per_update"] for r in v) for k, v in runs.items()}
            ratio = statistics.median(t["updates_per_s"] / d["updates_per_s"] for t, d in zip(runs["robotrl"], runs["default"]))
            results[f"{algo} {net}"] = {"runs": runs, "updates_per_s": rate, "minflt_per_update": flt,
                                        "ratio_robotrl_over_default": ratio}
            rows.append([algo, net, f"{rate['default']:.2f}", f"{rate['robotrl']:.2f}", f"{ratio:.2f}x",
                         f"{flt['default']:.0f}", f"{flt['robotrl']:.0f}",
                         f"{statistics.median(r['maxrss_mib'] for r in runs['default']):.0f} / "
                         f"{statistics.median(r['maxrss_mib'] for r in runs['robotrl']):.0f}"])
            print(rows[-1], flush=True)
    print(format_table(["algo", "network", "default upd/s", "robotrl upd/s", "ratio (paired)", "default faults/upd",
                        "robotrl faults/upd", "peak RSS MiB default / robotrl"], rows))
    env = environment()
    path = write_json(args.out if args.out != "full/qlearning_throughput.json" else "studies/qlearning-pointmaze/malloc_wsrl_network.json",
                      {"environment": env, "batch_size": 256, "repeats": args.repeats,
                       "updates_per_run": args.malloc_updates, "results": results})
    print(f"results: {path}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--block", type=float, default=3.0, help="seconds per timed block")
    ap.add_argument("--quick", action="store_true", help="3 repeats of 1.5 s blocks")
    ap.add_argument("--algos", default="sac,cql,calql,iql")
    ap.add_argument("--unfused", action="store_true",
                    help="also time the previous float32 critic pass (module by module), for before/after ratios")
    ap.add_argument("--out", default="full/qlearning_throughput.json", help="file name under benchmarks/results/")
    ap.add_argument("--malloc-compare", action="store_true",
                    help="CQL/Cal-QL updates/s and page faults with glibc's default allocator vs robotrl's setting")
    ap.add_argument("--malloc-updates", type=int, default=20, help="timed updates per --malloc-compare subprocess")
    ap.add_argument("--malloc-nets", default="all", choices=["all", *MALLOC_NETS],
                    help="--malloc-compare: the networks to run")
    ap.add_argument("--malloc-worker", nargs=2, metavar=("ALGO", "NET"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.malloc_worker:
        algo, net = args.malloc_worker
        print(json.dumps(malloc_worker(algo, net, args.malloc_updates, warmup=10, threads=args.threads)))
        return
    if args.malloc_compare:
        if args.algos == "sac,cql,calql,iql":
            args.algos = "cql,calql"
        if args.quick:
            args.repeats, args.malloc_updates = 2, 10
        malloc_compare(args)
        return
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
    path = write_json(args.out, as_result({"environment": env, "batch_size": 256, "results": results}, Path(args.out).stem,
                                          "qlearning_throughput"))
    print(f"results: {path}")


if __name__ == "__main__":
    main()
