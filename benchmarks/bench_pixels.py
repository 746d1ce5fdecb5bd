"""Pixel SAC/RLPD update throughput (with vs without random-shift augmentation) and camera
memory per transition.

Run from the repository root::

    python benchmarks/bench_pixels.py                 # 64 and 128 px, batch 256
    python benchmarks/bench_pixels.py --quick         # fewer repeats, batch 64 (smoke run)

What it measures:

1. updates/s of :class:`robotrl.agents.qlearning.pixels.PixelSACAgent` (RLPD settings: 10
   LayerNorm critics, min of 2 target heads; DrQ conv encoder, 32 channels, feature 50; one
   camera) at batch ``--batch`` (256) on 64x64 and 128x128 frames, with random shift (pad 4,
   the default for Q-learning) and without (pad 0), timed side by side, round-robin, median
   over repeats; batches are sampled from a filled :class:`robotrl.data.ReplayBuffer` once
   (sampling excluded; ``bench_replay.py`` times it);
2. camera bytes per transition held by the replay buffer against a naive copy (observation
   and next observation frames stored per transition, uint8 and float32).

d3rlpy's pixel SAC/CQL is not installed here and is not compared. Results go to
``benchmarks/results/pixels.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import Case, command_line, environment, format_table, paired_ratio, run_interleaved, set_threads, write_json  # noqa: E402


def _buffer(size: int, n: int, seed: int):
    from robotrl.data import ReplayBuffer

    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n, 4, 2, num_envs=1, image_shapes={"cam": (size, size, 3)}, seed=seed)
    ep = 50  # 50-step episodes written step by step, as an env does: each next frame is the next step's frame
    f = rng.integers(0, 256, (1, size, size, 3), dtype=np.uint8)
    for t in range(n):
        nf = rng.integers(0, 256, (1, size, size, 3), dtype=np.uint8)
        buf.add(rng.normal(size=(1, 4)).astype(np.float32), rng.uniform(-1, 1, (1, 2)).astype(np.float32),
                rng.normal(size=1).astype(np.float32), rng.normal(size=(1, 4)).astype(np.float32),
                np.zeros(1, bool), np.array([(t + 1) % ep == 0]), images={"cam": f}, next_images={"cam": nf})
        f = rng.integers(0, 256, (1, size, size, 3), dtype=np.uint8) if (t + 1) % ep == 0 else nf
    return buf


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.repeats = 64, 2
    set_threads(args.threads)
    import torch

    from robotrl.agents.qlearning.pixels import PixelSACAgent
    from robotrl.data import ActionScaler, ObservationNormalizer

    torch.manual_seed(0)
    rows, results = [], {}
    for size in args.sizes:
        buf = _buffer(size, 1000, 0)
        batches = [buf.sample(args.batch) for _ in range(4)]
        M = len(buf)
        frame = size * size * 3
        mem = {"stored_bytes_per_transition": buf.image_bytes() / M, "naive_uint8_bytes_per_transition": 2 * frame,
               "naive_float32_bytes_per_transition": 2 * frame * 4}
        cases = []
        for pad in (4, 0):
            agent = PixelSACAgent({"cam": (size, size, 3)}, 4, 2, obs_normalizer=ObservationNormalizer.identity(4),
                                  action_scaler=ActionScaler(-np.ones(2), np.ones(2)), augment_pad=pad, seed=0)
            it = iter(range(1 << 30))

            def fn(agent=agent, it=it, batches=batches):
                agent.update(batches[next(it) % len(batches)], 0)
                return 1

            cases.append(Case(f"{size}px pad{pad}", fn))
        run_interleaved(cases, repeats=args.repeats, warmup=1, block_s=None)
        aug, plain = cases
        ratio = paired_ratio(aug, plain)
        results[f"{size}px"] = {"with_augmentation": aug.summary(), "without_augmentation": plain.summary(),
                                "augmented_over_plain_rate": ratio, "memory": mem}
        rows.append([f"{size}x{size}", f"{aug.median_rate:.2f}", f"{plain.median_rate:.2f}", f"{ratio:.2f}",
                     f"{mem['stored_bytes_per_transition']:,.0f}", f"{mem['naive_uint8_bytes_per_transition']:,}",
                     f"{mem['naive_float32_bytes_per_transition']:,}"])
    table = format_table(["frames", "updates/s shift(4)", "updates/s no aug", "ratio", "buffer B/transition",
                          "naive uint8 B/tr", "naive float32 B/tr"], rows)
    print(f"pixel RLPD update (batch {args.batch}, 10 critics, DrQ encoder), CPU threads {args.threads}")
    print(table)
    payload = {"command": command_line(), "batch": args.batch, "threads": args.threads, "repeats": args.repeats,
               "environment": environment(), "results": results, "table": table}
    write_json("pixels.json" if not args.quick else "pixels_quick.json", payload)
    return payload


if __name__ == "__main__":
    main()
