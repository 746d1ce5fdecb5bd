"""Benchmark of robotrl's data layer against Minari and stable-baselines3.

Run from the repository root::

    python benchmarks/bench_replay.py            # ~20k Hopper steps (default)
    python benchmarks/bench_replay.py --quick    # ~3k steps, fewer repeats (smoke run)
    python benchmarks/bench_replay.py --steps 50000

What it does (see ``benchmarks/README.md`` for the meaning of every row):

1. Generates a real dataset: Hopper-v5 (MuJoCo) rollouts with uniformly random actions,
   whole episodes until ``--steps`` transitions, written once with robotrl's
   ``write_dataset`` as hdf5 and as arrow into a temporary ``MINARI_DATASETS_PATH``.
2. Load time: ``robotrl.data.load_dataset(id)`` (contiguous float32 arrays) vs
   ``minari.load_dataset(id)`` + ``iterate_episodes()`` + concatenation into the same
   arrays, for both backends (outputs are checked to be equal).
3. Sampling throughput at batch 256: robotrl ``ReplayBuffer.sample`` (torch tensors),
   n-step (n=3), ``sample_sequences(256, To=2, Ta=8)``, ``MixedSampler`` 50/50; Minari
   ``sample_episodes(n)`` (transitions counted) with ``n = ceil(256 / mean episode
   length)`` and ``n = 64``, both backends; SB3 ``ReplayBuffer.sample(256)`` holding the
   same data. Also per-step ``add`` throughput of robotrl vs SB3 (online writing).

All contenders are timed side by side, round-robin, with warmup, several repeats and
the median (``time.perf_counter``), with ``torch.set_num_threads(2)``. The table goes to
stdout, the full results to ``benchmarks/results/full/replay.json``.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from robotrl.bench.tasks._common import Case, environment, fmt_rate, format_table, paired_ratio, run_interleaved, set_threads, write_json
from robotrl.bench.tasks._formats import as_result

ENV_ID = "Hopper-v5"
BATCH = 256
TARGET_X_MINARI = 20.0  # the target: sampling >= 20x Minari per transition


# --------------------------------------------------------------------------- data
def collect_random_episodes(steps: int, seed: int):
    """Whole Hopper-v5 episodes with uniformly random actions, at least ``steps`` transitions."""
    import gymnasium as gym

    from robotrl.data import Episode

    env = gym.make(ENV_ID)
    env.action_space.seed(seed)
    episodes, total, k = [], 0, 0
    t0 = time.perf_counter()
    while total < steps:
        obs, _ = env.reset(seed=seed + k)
        o, a, r, te, tr = [obs], [], [], [], []
        while True:
            act = env.action_space.sample()
            obs, rew, term, trunc, _ = env.step(act)
            for seq, x in ((o, obs), (a, act), (r, rew), (te, term), (tr, trunc)):
                seq.append(x)
            if term or trunc:
                break
        episodes.append(
            Episode(
                observations=np.asarray(o), actions=np.asarray(a), rewards=np.asarray(r),
                terminations=np.asarray(te, bool), truncations=np.asarray(tr, bool), seed=seed + k,
            )
        )
        total += len(r)
        k += 1
    dt = time.perf_counter() - t0
    env.close()
    return episodes, total, dt


# --------------------------------------------------------------------------- loaders
def minari_load_arrays(dataset_id: str) -> dict[str, np.ndarray]:
    """Minari's own path: load the dataset, iterate all episodes, concatenate transitions."""
    import minari

    ds = minari.load_dataset(dataset_id)
    obs, nxt, act, rew, term, trunc = [], [], [], [], [], []
    for ep in ds.iterate_episodes():
        o = np.asarray(ep.observations, dtype=np.float32)
        obs.append(o[:-1])
        nxt.append(o[1:])
        act.append(np.asarray(ep.actions, dtype=np.float32))
        rew.append(np.asarray(ep.rewards, dtype=np.float32))
        term.append(np.asarray(ep.terminations, dtype=bool))
        trunc.append(np.asarray(ep.truncations, dtype=bool))
    return {
        "observations": np.concatenate(obs), "next_observations": np.concatenate(nxt),
        "actions": np.concatenate(act), "rewards": np.concatenate(rew),
        "terminated": np.concatenate(term), "truncated": np.concatenate(trunc),
    }


def same_arrays(data, arrays: dict[str, np.ndarray]) -> bool:
    return all(np.array_equal(getattr(data, k), v) for k, v in arrays.items())


# --------------------------------------------------------------------------- SB3
def sb3_buffer_from(data, observation_space, action_space):
    """An SB3 ReplayBuffer holding ``data`` (arrays set directly; equal to ``add`` of each row)."""
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    M = data.num_transitions
    buf = SB3Buffer(M, observation_space, action_space, device="cpu", handle_timeout_termination=False)
    buf.observations[:, 0] = data.observations.astype(buf.observations.dtype)
    buf.next_observations[:, 0] = data.next_observations.astype(buf.next_observations.dtype)
    buf.actions[:, 0] = data.actions.astype(buf.actions.dtype)
    buf.rewards[:, 0] = data.rewards
    buf.dones[:, 0] = data.terminated  # SB3 bootstraps unless done; truncation still bootstraps
    buf.pos, buf.full = 0, True
    return buf


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="transitions to collect (default 20000, 3000 with --quick)")
    p.add_argument("--quick", action="store_true", help="small dataset, fewer repeats, short blocks (smoke run)")
    p.add_argument("--repeats", type=int, default=None, help="timed repeats per contender (default 15, 3 with --quick)")
    p.add_argument("--block", type=float, default=None, help="seconds per timed sampling block (default 0.15, 0.05 with --quick)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch threads (machine.md: 2)")
    p.add_argument("--out", type=str, default="full/replay.json", help="file name under benchmarks/results/")
    p.add_argument("--keep-data", action="store_true", help="keep the temporary MINARI_DATASETS_PATH")
    args = p.parse_args(argv)
    steps = args.steps or (3000 if args.quick else 20000)
    repeats = args.repeats or (3 if args.quick else 15)
    block = args.block or (0.05 if args.quick else 0.15)
    load_repeats = 3 if args.quick else 7

    set_threads(args.threads)
    root = Path(tempfile.mkdtemp(prefix="robotrl-bench-minari-"))
    os.environ["MINARI_DATASETS_PATH"] = str(root)  # before anything reads it
    try:
        return _run(args, steps, repeats, block, load_repeats, root)
    finally:
        if args.keep_data:
            print(f"datasets kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _run(args, steps, repeats, block, load_repeats, root: Path) -> int:
    import minari
    import torch

    from robotrl.data import MixedSampler, ReplayBuffer, load_dataset, write_dataset

    print(f"# robotrl data-layer benchmark  (torch threads={torch.get_num_threads()}, repeats={repeats})")
    episodes, M, rollout_s = collect_random_episodes(steps, args.seed)
    E = len(episodes)
    mean_len = M / E
    print(f"collected {M} {ENV_ID} transitions in {E} episodes (mean length {mean_len:.1f}) "
          f"in {rollout_s:.1f}s ({M / rollout_s:,.0f} env steps/s)")

    ids = {fmt: f"hopper/random-bench-{fmt}-v0" for fmt in ("hdf5", "arrow")}
    create_s = {}
    for fmt, did in ids.items():
        t0 = time.perf_counter()
        write_dataset(did, episodes, env=ENV_ID, data_format=fmt, description="robotrl benchmark data")
        create_s[fmt] = time.perf_counter() - t0
        print(f"wrote {did} ({fmt}) in {create_s[fmt]:.1f}s")
    del episodes

    # ---------------------------------------------------------------- load time
    data = load_dataset(ids["hdf5"])
    equal = {fmt: same_arrays(data, minari_load_arrays(did)) and same_arrays(load_dataset(did), minari_load_arrays(did))
             for fmt, did in ids.items()}
    load_cases = []
    for fmt, did in ids.items():
        load_cases.append(Case(f"robotrl load_dataset [{fmt}]", lambda d=did: load_dataset(d).num_transitions))
        load_cases.append(Case(f"minari load+iterate+concat [{fmt}]", lambda d=did: len(minari_load_arrays(d)["rewards"])))
    run_interleaved(load_cases, repeats=load_repeats, warmup=1, block_s=None)
    lc = {c.name: c for c in load_cases}
    load_rows, load_json = [], {}
    for fmt in ids:
        r, m = lc[f"robotrl load_dataset [{fmt}]"], lc[f"minari load+iterate+concat [{fmt}]"]
        ratio = paired_ratio(r, m, time_based=True)
        load_rows.append([fmt, f"{r.median_seconds:.3f}", f"{m.median_seconds:.3f}", f"{ratio:.2f}x", "yes" if equal[fmt] else "NO"])
        load_json[fmt] = {"robotrl": r.summary(), "minari": m.summary(), "speedup_robotrl_vs_minari": ratio,
                          "outputs_equal": equal[fmt], "create_s": create_s[fmt]}

    # ---------------------------------------------------------------- sampling
    obs_space, act_space = data.observation_space, data.action_space
    buf = ReplayBuffer.from_offline(data, seed=args.seed)
    # the "online" buffer of MixedSampler: the same transitions written step by step via add()
    online = ReplayBuffer(M, data.obs_dim, data.action_dim, seed=args.seed + 1)
    t0 = time.perf_counter()
    for i in range(M):
        online.add(data.observations[i], data.actions[i], data.rewards[i], data.next_observations[i],
                   data.terminated[i], data.truncated[i])
    online_fill_s = time.perf_counter() - t0
    mixed = MixedSampler(buf, online, 0.5)
    sb3 = sb3_buffer_from(data, obs_space, act_space)
    mds = {fmt: minari.load_dataset(did) for fmt, did in ids.items()}
    for i, ds in enumerate(mds.values()):
        ds.set_seed(args.seed + 10 + i)
    n_match = min(math.ceil(BATCH / mean_len), E)
    n_plain = min(64, E)

    def minari_sampler(ds, n):
        def fn():
            return sum(int(ep.rewards.shape[0]) for ep in ds.sample_episodes(n))
        return fn

    def sb3_sample():
        s = sb3.sample(BATCH)
        return int(s.rewards.shape[0])

    samp_cases = [
        Case("robotrl sample(256)", lambda: len(buf.sample(BATCH))),
        Case("robotrl sample(256, n_step=3)", lambda: len(buf.sample(BATCH, n_step=3))),
        Case("robotrl sample_sequences(256, 2, 8)", lambda: len(buf.sample_sequences(BATCH, 2, 8))),
        Case("robotrl MixedSampler 50/50 (256)", lambda: len(mixed.sample(BATCH))),
        Case("sb3 ReplayBuffer.sample(256)", sb3_sample),
    ]
    for fmt, ds in mds.items():
        samp_cases.append(Case(f"minari sample_episodes({n_match}) [{fmt}]", minari_sampler(ds, n_match)))
        samp_cases.append(Case(f"minari sample_episodes({n_plain}) [{fmt}]", minari_sampler(ds, n_plain)))

    # per-step online writing: 1000 add() calls into a full circular buffer of capacity M
    from stable_baselines3.common.buffers import ReplayBuffer as SB3Buffer

    add_rb = ReplayBuffer(M, data.obs_dim, data.action_dim)
    add_sb3 = SB3Buffer(M, obs_space, act_space, device="cpu", handle_timeout_termination=False)
    CHUNK = 1000
    cursor = {"rb": 0, "sb3": 0}
    dones = data.terminated | data.truncated
    empty_infos = [{}]

    def rb_add():
        s = cursor["rb"]
        for i in range(s, s + CHUNK):
            j = i % M
            add_rb.add(data.observations[j], data.actions[j], data.rewards[j], data.next_observations[j],
                       data.terminated[j], data.truncated[j])
        cursor["rb"] = (s + CHUNK) % M
        return CHUNK

    def sb3_add():
        s = cursor["sb3"]
        for i in range(s, s + CHUNK):
            j = i % M
            add_sb3.add(data.observations[j][None], data.next_observations[j][None], data.actions[j][None],
                        data.rewards[j:j + 1], dones[j:j + 1], empty_infos)
        cursor["sb3"] = (s + CHUNK) % M
        return CHUNK

    add_cases = [Case("robotrl ReplayBuffer.add (1 env, per step)", rb_add), Case("sb3 ReplayBuffer.add (per step)", sb3_add)]

    print(f"timing {len(samp_cases)} samplers x {repeats} repeats (~{block:.2f}s blocks) ...")
    run_interleaved(samp_cases, repeats=repeats, warmup=20, block_s=block)
    run_interleaved(add_cases, repeats=repeats, warmup=1, block_s=block)
    sc = {c.name: c for c in samp_cases}

    sb3_c = sc["sb3 ReplayBuffer.sample(256)"]
    mm = {fmt: sc[f"minari sample_episodes({n_match}) [{fmt}]"] for fmt in ids}
    samp_rows, samp_json = [], {}
    for c in samp_cases:
        per_call = c.median_seconds * 1e3
        row = [c.name, fmt_rate(c.median_rate), f"{per_call:.3f}"]
        if c.name.startswith("robotrl"):
            row += [f"{paired_ratio(c, mm['hdf5']):.1f}x", f"{paired_ratio(c, mm['arrow']):.1f}x", f"{paired_ratio(c, sb3_c):.2f}x"]
        else:
            row += ["", "", ""]
        samp_rows.append(row)
        samp_json[c.name] = {
            **c.summary(),
            "x_minari_hdf5_matched": paired_ratio(c, mm["hdf5"]),
            "x_minari_arrow_matched": paired_ratio(c, mm["arrow"]),
            "x_sb3": paired_ratio(c, sb3_c),
        }
    ac = {c.name: c for c in add_cases}
    x_add = paired_ratio(ac["robotrl ReplayBuffer.add (1 env, per step)"], ac["sb3 ReplayBuffer.add (per step)"])
    add_rows = [[c.name, fmt_rate(c.median_rate), f"{c.median_seconds / CHUNK * 1e6:.1f}"] for c in add_cases]

    x_vs = {fmt: paired_ratio(sc["robotrl sample(256)"], mm[fmt]) for fmt in ids}
    x_worst = min(x_vs.values())
    target_met = x_worst >= TARGET_X_MINARI

    # ---------------------------------------------------------------- report
    print()
    print(f"## Dataset: {ENV_ID} random actions, {M} transitions, {E} episodes, mean length {mean_len:.1f}")
    print(format_table(["backend", "create s"], [[f, f"{create_s[f]:.2f}"] for f in ids]))
    print()
    print(f"## Load time (median of {load_repeats}, seconds; speed-up = median of paired Minari/robotrl ratios)")
    print(format_table(["backend", "robotrl load_dataset", "minari load+iterate+concat", "robotrl speed-up", "same arrays"], load_rows))
    print()
    print(f"## Sampling throughput, batch {BATCH} (median of {repeats}; transitions/s, sequences: windows/s)")
    print(f"   Minari n={n_match} = ceil({BATCH}/{mean_len:.1f}) episodes per call is the per-transition match; "
          f"ratios are medians of per-round paired ratios vs that row (per backend) and vs SB3")
    print(format_table(["sampler", "transitions/s", "ms/call", "x Minari hdf5", "x Minari arrow", "x SB3"], samp_rows))
    print()
    print(f"## Online writing, per-step add() (median of {repeats})")
    print(format_table(["writer", "transitions/s", "us/step"], add_rows))
    print(f"   robotrl/SB3 add: {x_add:.2f}x; filling the online buffer step by step: {online_fill_s:.2f}s")
    print()
    print(f"Target (issue): robotrl sample(256) >= {TARGET_X_MINARI:.0f}x Minari per transition: "
          f"{x_vs['hdf5']:.1f}x (hdf5), {x_vs['arrow']:.1f}x (arrow) -> {'MET' if target_met else 'NOT MET'}")

    payload = {
        "benchmark": "replay",
        "environment": environment(),
        "config": {"env_id": ENV_ID, "steps_requested": steps, "quick": args.quick, "repeats": repeats,
                   "load_repeats": load_repeats, "block_s": block, "batch": BATCH, "seed": args.seed,
                   "minari_n_matched": n_match, "minari_n_plain": n_plain},
        "dataset": {"transitions": M, "episodes": E, "mean_episode_length": mean_len, "rollout_s": rollout_s,
                    "env_steps_per_s": M / rollout_s, "create_s": create_s},
        "load": load_json,
        "sampling": samp_json,
        "add": {"robotrl": ac["robotrl ReplayBuffer.add (1 env, per step)"].summary(),
                "sb3": ac["sb3 ReplayBuffer.add (per step)"].summary(),
                "x_robotrl_vs_sb3": x_add, "online_fill_s": online_fill_s},
        "target": {"x_minari_required": TARGET_X_MINARI, "x_minari_hdf5": x_vs["hdf5"], "x_minari_arrow": x_vs["arrow"],
                   "met": target_met},
    }
    path = write_json(args.out, as_result(payload, Path(args.out).stem, "replay"))
    print(f"results written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
