"""Pixel SAC/RLPD update throughput (with vs without random-shift augmentation, vs d3rlpy's pixel SAC)
and camera memory per transition.

Run from the repository root::

    python benchmarks/bench_pixels.py                 # 64 and 128 px, batch 256
    python benchmarks/bench_pixels.py --quick         # fewer repeats, batch 64 (smoke run)
    .bench/peers-venv/bin/python benchmarks/bench_pixels.py --threads 1 --repeats 2   # with d3rlpy 2.8.1

(d3rlpy 2.8.1 in a separate venv that still sees the project: see ``bench_qlearning.py``'s docstring.
Without d3rlpy the script prints a note and times robotrl only.)

What it measures:

1. updates/s of :class:`robotrl.agents.qlearning.QLAgent` on cameras (``critic_utd=1``: one critic and one
   actor step per update; RLPD settings: 10
   LayerNorm critics, min of 2 target heads; DrQ conv encoder, 32 channels, feature 50; one
   camera; a 4-dim state appended to the image features) at batch ``--batch`` (256) on 64x64 and
   128x128 frames, with random shift (pad 4, the default for Q-learning) and without (pad 0);
2. when d3rlpy is importable, d3rlpy 2.8.1's pixel SAC on the same frames (``SACConfig`` with
   ``PixelObservationScaler``, ``PixelEncoderFactory(filters=[[32, 3, 2], [32, 3, 1], [32, 3, 1],
   [32, 3, 1]], feature_size=50)`` for actor and critic: robotrl's DrQ trunk layer for layer;
   ``MeanQFunctionFactory(share_encoder=True)``; ``n_critics=10`` as robotrl's agent, and, for
   information, ``n_critics=2``, d3rlpy's default). One timed d3rlpy call is
   ``PixelObservationScaler.transform`` of the uint8 ``(B, C, H, W)`` frames and next frames (what
   ``TorchMiniBatch.from_batch`` does each step) plus ``algo.impl.update(torch_batch, step)``; one
   robotrl call is ``agent.update(batch)`` (its uint8 -> float conversion is inside). d3rlpy has no
   random shift: its ratios are given against both robotrl cases (shift / d3rlpy, no-aug / d3rlpy);
3. camera bytes per transition held by the replay buffer against a naive copy (observation
   and next observation frames stored per transition, uint8 and float32).

All cases of one frame size are timed side by side, round-robin (``_common.run_interleaved``, one
update per block), median over repeats, ratios paired per round (``_common.paired_ratio``). Batches
are sampled from a filled :class:`robotrl.data.ReplayBuffer` once (sampling excluded;
``bench_replay.py`` times it); d3rlpy gets the same frames, permuted to ``(B, C, H, W)`` once
outside the timing (d3rlpy's datasets store that layout).

Differences in computation between robotrl's update and d3rlpy's (read the ratio with them; also in
the JSON's ``setting``). Per update, in full-batch conv-trunk passes (F forward only, FB forward +
backward):

- robotrl: one shared encoder (actor and critic), trained by the critic loss only; the actor reads
  its features with the gradient stopped (DrQ/SERL). Target: one target encoder (Polyak copy,
  tau 0.005) on the next frames, whose features feed both the actor's next-action sample and the
  target critic. Passes: 1 F (target encoder, next frames) + 1 FB (encoder, frames) = 2 trunk
  passes. The 10 critic heads are one batched 256x256 LayerNorm MLP ensemble on ``[z, s, a]``.
- d3rlpy: the actor has its own encoder (trained by the actor loss); the critic ensemble shares
  one encoder (``share_encoder=True``) but *each head calls it again* (the action is concatenated
  after the conv trunk, inside the encoder), so N heads mean N trunk passes per Q evaluation. The
  actor loss backpropagates through the actor's encoder and through the N critic passes (critic
  weight gradients computed, then discarded). Passes: 1 F (actor encoder, next frames) + N F
  (target ensemble, next frames) + N FB (critic loss) + 1 FB (actor encoder) + N FB (actor loss's Q)
  = N + 1 F and 2N + 1 FB: 11 F + 21 FB at N = 10, 3 F + 5 FB at N = 2.
- heads: robotrl's projection is Linear -> LayerNorm -> tanh to 50 features, critics and actor
  256x256 MLPs (critic LayerNorm); d3rlpy's ``PixelEncoderFactory`` has no hidden MLP after the
  trunk and no LayerNorm: Linear(trunk + action -> 50) -> ReLU -> Linear(50 -> 1) per critic head,
  Linear(trunk -> 50) -> ReLU -> mean/log-std heads for the actor (the dense layers are a few
  per cent of the trunk's FLOPs).
- inputs: robotrl appends a 4-dim normalised state to the image features; d3rlpy sees images only
  (its ``PixelEncoderFactory`` takes one ``(C, H, W)`` observation; a tuple observation would need
  a custom encoder factory, i.e. no longer stock d3rlpy). Scaling: robotrl ``x / 255 - 0.5`` in
  the encoder, d3rlpy ``x / 255`` in the scaler, both timed.
- targets: robotrl min over 2 random of the 10 target heads and mean over heads in the actor loss
  (RLPD); d3rlpy min over all N target heads and min in the actor loss (compute-neutral).
  Both Polyak-update the target encoder and target critics every step (tau 0.005).
- augmentation: robotrl pad 4 shifts frames and next frames (one gather each); d3rlpy none.

d3rlpy's pixel CQL is not timed: the robotrl agent here is SAC/RLPD (``algo="sac"``); a CQL
comparison would need a robotrl ``algo="cql"`` case beside it. Results go to ``benchmarks/results/studies/pixels/throughput.json``
(``--quick``: ``pixels_quick.json``).
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


#: d3rlpy's conv trunk as close as ``PixelEncoderFactory`` allows to robotrl's DrQ trunk: 4 conv layers,
#: 32 channels, 3x3, first stride 2, ReLU; flatten; one Linear to 50 features
D3RLPY_FILTERS = [[32, 3, 2], [32, 3, 1], [32, 3, 1], [32, 3, 1]]
D3RLPY_FEATURE = 50


def _have_d3rlpy() -> str | None:
    """d3rlpy's version, or None (with a printed note) when it cannot be imported."""
    try:
        import d3rlpy
    except Exception as exc:  # ImportError, or a broken install (its gym/gymnasium pins)
        print(f"note: d3rlpy is not importable here ({type(exc).__name__}: {exc}); its pixel SAC is skipped "
              "(run with a venv that has d3rlpy 2.8.1, see bench_qlearning.py)")
        return None
    return d3rlpy.__version__


def d3rlpy_pixel_sac(size: int, batches, n_critics: int):
    """One d3rlpy 2.8.1 pixel-SAC update per call on ``batches`` (robotrl Batches, frames permuted once).

    Timed per call: ``PixelObservationScaler.transform`` of the uint8 frames and next frames (as
    ``TorchMiniBatch.from_batch`` does each step) and ``algo.impl.update``.
    """
    import d3rlpy
    import torch
    from d3rlpy.preprocessing import PixelObservationScaler
    from d3rlpy.torch_utility import TorchMiniBatch

    enc = d3rlpy.models.PixelEncoderFactory(filters=D3RLPY_FILTERS, feature_size=D3RLPY_FEATURE)
    scaler = PixelObservationScaler()
    cfg = d3rlpy.algos.SACConfig(batch_size=batches[0].actions.shape[0], actor_learning_rate=3e-4,
                                 critic_learning_rate=3e-4, temp_learning_rate=3e-4, tau=0.005, gamma=0.99,
                                 actor_encoder_factory=enc, critic_encoder_factory=enc,
                                 q_func_factory=d3rlpy.models.MeanQFunctionFactory(share_encoder=True),
                                 n_critics=n_critics, observation_scaler=scaler)
    algo = cfg.create(device="cpu:0")
    algo.create_impl((3, size, size), 2)
    pre = []
    for b in batches:
        B = b.actions.shape[0]
        chw = lambda x: x.permute(0, 3, 1, 2).contiguous()  # noqa: E731  (d3rlpy stores (C, H, W))
        pre.append(dict(obs=chw(b.images()["cam"]), next_obs=chw(b.next_images()["cam"]),
                        actions=b.actions.float(), rewards=b.rewards.float().view(B, 1),
                        terminals=b.terminated.float().view(B, 1), zeros=torch.zeros(B, 1), ones=torch.ones(B, 1)))
    step = [0]

    def fn() -> int:
        d = pre[step[0] % len(pre)]
        tb = TorchMiniBatch(observations=scaler.transform(d["obs"]), actions=d["actions"], rewards=d["rewards"],
                            next_observations=scaler.transform(d["next_obs"]), next_actions=d["actions"],
                            returns_to_go=d["zeros"], terminals=d["terminals"], intervals=d["ones"], device="cpu:0")
        algo.impl.update(tb, step[0])
        step[0] += 1
        return 1

    return fn


def setting(batch: int, d3rlpy_critics: list[int]) -> dict:
    """What each side computes per update (module docstring), for reading the ratios."""
    return {
        "batch": batch, "action_dim": 2, "cameras": 1,
        "robotrl": {
            "agent": "QLAgent(algo='sac', image_shapes=..., critic_utd=1): RLPD settings", "num_critics": 10, "target_heads_min": 2,
            "actor_q": "mean over heads", "critic_hidden": [256, 256], "critic_layer_norm": True,
            "actor_hidden": [256, 256],
            "encoder": "DrQ trunk 4x conv 3x3, 32 ch, first stride 2, ReLU; flatten; Linear->LayerNorm->tanh to 50",
            "encoders_per_network": "one shared encoder (actor + all critic heads); one target encoder",
            "actor_encoder": "shared; actor reads z.detach() (stop-gradient, encoder trained by the critic only)",
            "state": "4-dim normalised state appended to the 50 image features",
            "scaling": "x/255 - 0.5 inside the encoder (timed)",
            "augmentation": "random shift pad 4 on frames and next frames (case 'shift'), or none (pad 0)",
            "target_updates": "Polyak tau 0.005 on target encoder + target critic, every update",
            "trunk_passes_per_update": "1 forward (target encoder, next frames) + 1 forward/backward (encoder, frames)",
        },
        "d3rlpy": {
            "algo": "SACConfig", "n_critics": d3rlpy_critics, "main_n_critics": d3rlpy_critics[0] if d3rlpy_critics else None,
            "encoder_factory": f"PixelEncoderFactory(filters={D3RLPY_FILTERS}, feature_size={D3RLPY_FEATURE}) "
                               "for actor and critic",
            "q_func_factory": "MeanQFunctionFactory(share_encoder=True)",
            "observation_scaler": "PixelObservationScaler (x/255, timed in each call)",
            "heads": "critic: Linear(trunk + action -> 50) -> ReLU -> Linear(50 -> 1) per head, no hidden MLP, "
                     "no LayerNorm; actor: Linear(trunk -> 50) -> ReLU -> mean / log-std Linear",
            "encoders_per_network": "actor: its own encoder; critic ensemble: one shared encoder, called once per "
                                    "head (action concatenated after the trunk), target ensemble: its own copy",
            "actor_encoder": "separate, trained by the actor loss; the actor loss also backpropagates through "
                             "the N critic encoder passes (critic gradients computed, then discarded)",
            "state": "none: images only (stock PixelEncoderFactory takes one (C, H, W) observation)",
            "augmentation": "none (d3rlpy has no random shift)",
            "targets": "min over all N target heads; min over heads in the actor loss",
            "target_updates": "Polyak tau 0.005 on the target ensemble (incl. its shared encoder), every update",
            "trunk_passes_per_update": "N + 1 forward (actor encoder + N target heads, next frames) and 2N + 1 "
                                       "forward/backward (N critic loss, 1 actor encoder, N actor-loss Q)",
        },
        "timed_call": "robotrl: agent.update(batch) on a prebuilt Batch (uint8 frames); d3rlpy: "
                      "PixelObservationScaler.transform of uint8 (B, C, H, W) frames + next frames, then "
                      "algo.impl.update(TorchMiniBatch, step); sampling and host->tensor conversion excluded on both",
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 128])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--d3rlpy-critics", type=int, nargs="*", default=[10, 2],
                    help="n_critics of the d3rlpy cases (first: the matched one the ratios use; none: skip d3rlpy)")
    args = ap.parse_args(argv)
    if args.quick:
        args.batch, args.repeats = 64, 2
    set_threads(args.threads)
    import torch

    from robotrl.agents.qlearning import QLAgent
    from robotrl.data import ActionScaler, ObservationNormalizer

    d3_version = _have_d3rlpy() if args.d3rlpy_critics else None
    d3_ns = list(args.d3rlpy_critics) if d3_version else []
    torch.manual_seed(0)
    rows, mem_rows, results = [], [], {}
    for size in args.sizes:
        buf = _buffer(size, 1000, 0)
        batches = [buf.sample(args.batch) for _ in range(4)]
        M = len(buf)
        frame = size * size * 3
        mem = {"stored_bytes_per_transition": buf.image_bytes() / M, "naive_uint8_bytes_per_transition": 2 * frame,
               "naive_float32_bytes_per_transition": 2 * frame * 4}
        cases = []
        for pad in (4, 0):
            agent = QLAgent(4, 2, image_shapes={"cam": (size, size, 3)}, obs_normalizer=ObservationNormalizer.identity(4),
                            action_scaler=ActionScaler(-np.ones(2), np.ones(2)), num_critics=10, target_subset=2,
                            critic_layer_norm=True, backup_entropy=True, actor_q="mean", init_alpha=0.1,
                            augment_pad=pad, seed=0)
            it = iter(range(1 << 30))

            def fn(agent=agent, it=it, batches=batches):
                agent.update(batches[next(it) % len(batches)], 0)
                return 1

            cases.append(Case(f"{size}px robotrl pad{pad}", fn))
        for n in d3_ns:
            cases.append(Case(f"{size}px d3rlpy sac n_critics={n}", d3rlpy_pixel_sac(size, batches, n)))
        run_interleaved(cases, repeats=args.repeats, warmup=1, block_s=None)
        aug, plain, peers = cases[0], cases[1], cases[2:]
        ratio = paired_ratio(aug, plain)
        res = {"with_augmentation": aug.summary(), "without_augmentation": plain.summary(),
               "augmented_over_plain_rate": ratio, "memory": mem}
        row = [f"{size}x{size}", f"{aug.median_rate:.3f}", f"{plain.median_rate:.3f}", f"{ratio:.2f}"]
        for n, c in zip(d3_ns, peers):
            r_aug, r_plain = paired_ratio(aug, c), paired_ratio(plain, c)
            res[f"d3rlpy_sac_n{n}"] = {**c.summary(), "robotrl_shift_over_d3rlpy": r_aug,
                                       "robotrl_noaug_over_d3rlpy": r_plain}
            row += [f"{c.median_rate:.3f}", f"{r_aug:.2f}x", f"{r_plain:.2f}x"]
        results[f"{size}px"] = res
        rows.append(row)
        mem_rows.append([f"{size}x{size}", f"{mem['stored_bytes_per_transition']:,.0f}",
                         f"{mem['naive_uint8_bytes_per_transition']:,}", f"{mem['naive_float32_bytes_per_transition']:,}"])
        print(row, flush=True)
    headers = ["frames", "robotrl upd/s shift(4)", "robotrl upd/s no aug", "shift/no aug"]
    for n in d3_ns:
        headers += [f"d3rlpy N={n} upd/s", f"shift/d3rlpy N={n}", f"no aug/d3rlpy N={n}"]
    table = format_table(headers, rows)
    mem_table = format_table(["frames", "buffer B/transition", "naive uint8 B/tr", "naive float32 B/tr"], mem_rows)
    peer = f"; d3rlpy {d3_version}: pixel SAC, images only" if d3_ns else ""
    print(f"pixel SAC/RLPD update (batch {args.batch}; robotrl: 10 LN critics, DrQ encoder, +4-dim state{peer}), "
          f"CPU threads {args.threads}")
    print(table)
    if d3_ns:
        print("notes: d3rlpy calls its shared critic encoder once per head and gives the actor its own encoder "
              f"(N={d3_ns[0]}: {d3_ns[0] + 1} forward + {2 * d3_ns[0] + 1} forward/backward trunk passes per update "
              "vs robotrl's 1 + 1); no hidden MLP, no LayerNorm, no state, no random shift: see the module "
              "docstring / JSON 'setting'")
    print(mem_table)
    env = environment()
    if d3_version:
        env["d3rlpy"] = d3_version
    payload = {"command": command_line(), "batch": args.batch, "threads": args.threads, "repeats": args.repeats,
               "environment": env, "setting": setting(args.batch, d3_ns), "results": results,
               "table": table, "memory_table": mem_table}
    write_json("studies/pixels/throughput.json" if not args.quick else "studies/pixels/throughput_quick.json", payload)
    return payload


if __name__ == "__main__":
    main()
