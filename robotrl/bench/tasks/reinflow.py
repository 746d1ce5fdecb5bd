"""Flow policies: chunk-inference latency (flow and shortcut 1/2/4 steps vs diffusion DDIM-5) and
ReinFlow vs DPPO fine-tuning from equally trained pretrained policies.

``latency`` — one chunk ``(1, Ta, Da)`` at batch 1, one torch thread, for (i) the policies'
``predict_chunk`` (normalisers, sampling, unnormalising) and (ii) their TorchScript-traced
export modules (fixed noise, what ``real_robot`` deploys). Same denoiser network for both
families: the configs' state-task residual MLP (3x512, Mish, time_dim 16), Hopper sizes
(``Do`` 11, ``Da`` 3, ``To`` 1, ``Ta`` 4); diffusion K = 20 trained steps sampled with DDIM-5
(η = 0); the shortcut policy (``shortcut=True``: the same network plus the step-size embedding,
Frans et al. 2024) samples with ``d = 1/K``. Timed round-robin (``_common.run_interleaved``): each repeat runs a block of calls of
every contender back to back; ratios are paired per repeat (robust to a shared machine's drift).

``learning`` — the DPPO benchmark's task and setting (``benchmarks/bench_dppo_learning.py``:
PointMaze UMaze, fixed reset and goal, dense reward, 50-step episodes, data from the noisy
planner with a +0.5 action bias, 10 envs x 2 episodes per iteration, same env-step budget,
same eval: 3 seed sets x 50 episodes). Per seed a diffusion policy (DPPO's bench network: 2x64
residual MLP, K=5) and a flow policy (same network, K=4 Euler steps) are behaviour-cloned with
the same updates, batch and lr; DPPO fine-tunes with ``bench_dppo_learning.DPPO_ARGS`` and
ReinFlow with ``REINFLOW_ARGS`` (ReinFlowAgent's defaults = the ReinFlow Gym reference, with the
same task-size changes as DPPO's). ReinFlow starts from the flow BC snapshot whose return is closest to
the diffusion BC policy's (equally good starting points; both scores recorded). Reported: pretrained and
fine-tuned returns, per-iteration curves ``[env steps, train wall s, eval return]`` (evaluations excluded
from the wall time), fine-tuning wall time, and per seed ReinFlow's time to DPPO's final return divided by
DPPO's wall time (None: never reached), with its IQM over seeds.

Usage (single torch thread; run niced and never beside another timing benchmark)::

    nice -n 19 python benchmarks/bench_reinflow.py latency --out benchmarks/results/full/reinflow_latency.json
    nice -n 19 python benchmarks/bench_reinflow.py learning --seeds 0 1 2 --env-steps 20000 \
        --out benchmarks/results/full/reinflow_learning.json
    nice -n 19 python benchmarks/bench_reinflow.py shortcut --seeds 0 1 2 --steps 1 2 4 \
        --out benchmarks/results/studies/reinflow-pointmaze/shortcut_quality.json

``shortcut`` — flow vs shortcut policy (same BC budget) scored at 1 and K sampling steps on that task
(:func:`shortcut_quality`).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.bench.tasks._common import Case, command_argv, command_line, environment, learning_result, paired_ratio, run_interleaved, set_threads, write_json
from robotrl.bench.tasks._formats import as_result

NET = {"hidden": [512, 512, 512], "time_dim": 16, "act": "mish"}
SIZES = dict(obs_dim=11, action_dim=3)
HORIZONS = dict(obs_horizon=1, action_horizon=4, act_steps=4)
FLOW_STEPS = (1, 2, 4)

# ReinFlow: ReinFlowAgent's defaults = the reference's Gym values (clip 0.01, actor lr 4.5e-5, critic lr 6.5e-4,
# target KL 1, ent 0.03, σ in [0.10, 0.24] with learn_decay, log-prob clamp [-1, 1], repeat_samples 10, 5 epochs);
# only what the task and the pretrained policy size fix is set, the same values as DPPO_ARGS:
REINFLOW_ARGS = dict(
    flow_steps=4,            # the reference's Gym K (DPPO here: K = K' = 5)
    gamma=0.95,              # per 4-step chunk, as DPPO_ARGS
    critic_hidden=[64, 64],  # as DPPO_ARGS
    batch_size=500,          # env steps per minibatch, as DPPO_ARGS's pairs
    repeat_samples=5,        # the reference repeats each env step 10x = its DPPO K'=10, so both run as many
                             # minibatches; DPPO_ARGS has K'=5
    critic_warmup_iters=2,   # as DPPO_ARGS
    noise_decay_iters=None,  # set from the budget in fine_tune_reinflow (iterations of the run)
)


def latency(args) -> dict:
    from robotrl.agents.diffusion import DiffusionPolicy
    from robotrl.agents.flow import FlowPolicy
    from robotrl.real_robot.export import optimized_for_this_machine

    torch.manual_seed(0)
    flow = FlowPolicy(**SIZES, **HORIZONS, flow_steps=1, denoiser="mlp", denoiser_kwargs=NET).eval()
    shortcut = FlowPolicy(**SIZES, **HORIZONS, flow_steps=1, denoiser="mlp", denoiser_kwargs=NET, shortcut=True).eval()
    diff = DiffusionPolicy(**SIZES, **HORIZONS, denoising_steps=20, denoiser="mlp", denoiser_kwargs=NET,
                           sampler="ddim", ddim_steps=5, ddim_eta=0.0).eval()
    obs = torch.randn(1, 1, SIZES["obs_dim"])
    flows = {"flow": flow, "shortcut": shortcut}
    cases = [Case(f"{n}_{k}", (lambda p=p, k=k: (p.predict_chunk(obs, steps=k), 1)[1]))
             for n, p in flows.items() for k in FLOW_STEPS]
    cases.append(Case("ddim_5", lambda: (diff.predict_chunk(obs), 1)[1]))
    exported = {}
    with torch.no_grad():
        for n, p in flows.items():
            for k in FLOW_STEPS:
                p.K = k
                exported[f"{n}_{k}_traced"] = torch.jit.trace(p.export_module(), obs[:, 0])
            p.K = 1
        exported["ddim_5_traced"] = torch.jit.trace(diff.export_module(), obs[:, 0])
        # what load_deploy_policy runs from a TorchScript export: the traced module optimised on this machine
        for name in ("flow_1_traced", "shortcut_1_traced", "ddim_5_traced"):
            exported[name.replace("traced", "deployed")] = optimized_for_this_machine(exported[name].eval(), obs[:, 0])
    for name, mod in exported.items():
        cases.append(Case(name, (lambda mod=mod: (mod(obs[:, 0]), 1)[1])))
    import onnxruntime as ort  # the ONNX backend real_robot deploys (a core dependency)

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1
    onnx_dir = Path(tempfile.mkdtemp(prefix="bench_reinflow_onnx_"))
    o = obs[:, 0].numpy()
    for name, mod in (("flow_1_onnx", flow.export_module()), ("shortcut_1_onnx", shortcut.export_module()),
                      ("ddim_5_onnx", diff.export_module())):
        path = str(onnx_dir / f"{name}.onnx")
        with torch.no_grad():
            torch.onnx.export(mod, (obs[:, 0],), path, input_names=["obs"], output_names=["actions"],
                              opset_version=17, dynamo=False)
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(sess.run(None, {"obs": o})[0], mod(obs[:, 0]).detach().numpy(), atol=1e-5)  # same outputs
        cases.append(Case(name, (lambda sess=sess: (sess.run(None, {"obs": o}), 1)[1])))
    with torch.no_grad():
        run_interleaved(cases, repeats=args.repeats, warmup=args.warmup, block_s=args.block_s)
    by = {c.name: c for c in cases}
    rows = {c.name: {"ms_median": 1e3 * c.median_seconds, "ms_min": 1e3 * min(c.seconds),
                     "ms_max": 1e3 * max(c.seconds), "calls_per_block": c.calls, "repeats": len(c.seconds)}
            for c in cases}
    ratios = {}
    for n in flows:
        for k in FLOW_STEPS:
            ratios[f"{n}_{k}_over_ddim_5"] = 1.0 / paired_ratio(by[f"{n}_{k}"], by["ddim_5"], time_based=True)
            ratios[f"{n}_{k}_traced_over_ddim_5_traced"] = 1.0 / paired_ratio(by[f"{n}_{k}_traced"],
                                                                              by["ddim_5_traced"], time_based=True)
    ratios["flow_1_deployed_over_ddim_5_deployed"] = 1.0 / paired_ratio(by["flow_1_deployed"], by["ddim_5_deployed"],
                                                                        time_based=True)
    ratios["flow_1_deployed_over_flow_1_traced"] = 1.0 / paired_ratio(by["flow_1_deployed"], by["flow_1_traced"],
                                                                      time_based=True)
    for kind in ("", "_traced", "_onnx"):  # the step-size embedding's cost: shortcut vs flow at one step
        ratios[f"shortcut_1{kind}_over_flow_1{kind}"] = 1.0 / paired_ratio(by[f"shortcut_1{kind}"], by[f"flow_1{kind}"],
                                                                           time_based=True)
    for name, r in rows.items():
        print(f"{name:>22}: {r['ms_median']:.3f} ms (min {r['ms_min']:.3f})")
    for name, r in ratios.items():
        print(f"{name:>36}: {r:.3f}")
    return {"benchmark": "reinflow_latency", "setting": {"network": NET, **SIZES, **HORIZONS, "batch": 1,
                                                        "threads": torch.get_num_threads(), "diffusion_K": 20,
                                                        "ddim_steps": 5, "flow_steps": list(FLOW_STEPS)},
            "latency": rows, "ratios": ratios,
            "one_step_under_0_5_ms": {"predict_chunk": rows["flow_1"]["ms_median"] < 0.5,
                                      "traced": rows["flow_1_traced"]["ms_median"] < 0.5,
                                      "deployed_torchscript": rows["flow_1_deployed"]["ms_median"] < 0.5,
                                      "onnx": rows["flow_1_onnx"]["ms_median"] < 0.5},
            "command": command_line(), "argv": command_argv(), "environment": environment()}


# ---------------------------------------------------------------------- learning
def pretrain(B, data, seed: int, updates: int, out: Path, snapshot_at: tuple[int, ...] = ()) -> tuple:
    """Diffusion-BC and flow-BC checkpoints on the (biased) data with the same updates/batch/lr; returns the
    diffusion path, the flow paths (snapshots after ``snapshot_at`` updates, then the final one) and seconds."""
    from robotrl.agents.diffusion import DiffusionAgent
    from robotrl.agents.flow import FlowAgent
    from robotrl.checkpoint import save_checkpoint
    from robotrl.data import ReplayBuffer
    from robotrl.policy import policy_state

    on, sc = B.normalizers(data)
    out.mkdir(parents=True, exist_ok=True)
    secs = []
    paths = []
    for kind in ("diffusion", "flow"):
        t = time.time()
        torch.manual_seed(seed)
        if kind == "diffusion":
            agent = DiffusionAgent(data.obs_dim, data.action_dim, obs_normalizer=on, action_scaler=sc, lr=1e-3,
                                   ema_start=updates // 2, seed=seed, **B.DIFFUSION)
        else:
            net = {k: v for k, v in B.DIFFUSION.items() if k != "denoising_steps"}
            agent = FlowAgent(data.obs_dim, data.action_dim, obs_normalizer=on, action_scaler=sc, lr=1e-3,
                              ema_start=updates // 2, seed=seed, flow_steps=REINFLOW_ARGS["flow_steps"], **net)
        buf = ReplayBuffer.from_offline(data, seed=seed)
        snaps = []
        for u in range(updates):
            agent.update(agent.sample_batch(buf, 256), u)
            if kind == "flow" and (u + 1) in snapshot_at:
                snaps.append(out / f"flow_{u + 1}.pt")
                save_checkpoint(snaps[-1], {"policy": policy_state(agent.policy)})
        p = out / f"{kind}.pt"
        save_checkpoint(p, {"policy": policy_state(agent.policy)})
        paths.append(p if kind == "diffusion" else snaps + [p])
        secs.append(time.time() - t)
    return paths[0], paths[1], secs[0], secs[1]


def match_pretrained(B, diffusion_ckpt: Path, flow_ckpts: list[Path], tol: float) -> tuple[Path, dict, dict, list]:
    """The flow BC snapshot whose return (``B.score``, 150 episodes) is closest to the diffusion BC policy's: equally
    good starting points for ReinFlow and DPPO. Returns (path, diffusion score, flow score, all candidates); the
    caller records whether ``|Δreturn| <= tol``."""
    from robotrl.agents.diffusion import DiffusionAgent  # noqa: F401  (policy classes for load_policy)
    from robotrl.policy import load_policy

    d = B.score(load_policy(str(diffusion_ckpt)))
    cands = [(p, B.score(load_policy(str(p)))) for p in flow_ckpts]
    best = min(cands, key=lambda c: abs(c[1]["return"] - d["return"]))
    return best[0], d, best[1], [(p.stem, round(s["return"], 3)) for p, s in cands]


def fine_tune(kind: str, B, data, init: Path, seed: int, env_steps: int, run_dir: Path, overrides: dict,
              eval_every: int, eval_episodes: int) -> dict:
    """DPPO (``kind="dppo"``, ``B.DPPO_ARGS``) or ReinFlow (``REINFLOW_ARGS``) fine-tuning from ``init`` with the
    trainer evaluating every ``eval_every`` iterations (``eval_episodes`` episodes, fixed eval seed): the curve rows
    ``[env steps, train wall s (evaluations excluded), return]``; before/after scores with ``B.score``."""
    from robotrl.agents.dppo import DPPOAgent
    from robotrl.agents.reinflow import ReinFlowAgent
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

    on, sc = B.normalizers(data)
    T = 2 * (-(-B.HORIZON // 4) + 1)  # 2 episodes of 13 chunks + 1 reset step each (both: 4-step chunks)
    iters = -(-env_steps // (T * B.N_ENVS * 4))
    torch.manual_seed(seed)
    if kind == "dppo":
        kw = {**B.DPPO_ARGS, **overrides}
        agent = DPPOAgent(data.obs_dim, data.action_dim, obs_normalizer=on, action_scaler=sc, **B.DIFFUSION, **kw,
                          seed=seed)
    else:
        net = {k: v for k, v in B.DIFFUSION.items() if k != "denoising_steps"}
        kw = {**REINFLOW_ARGS, "noise_decay_iters": iters, **overrides}
        agent = ReinFlowAgent(data.obs_dim, data.action_dim, obs_normalizer=on, action_scaler=sc, **net, **kw,
                              seed=seed)
    agent.load_pretrained(str(init))
    before = B.score(agent.policy)
    cfg = OnPolicyConfig(iterations=10**6, steps_per_iter=T, num_envs=B.N_ENVS, eval_every=eval_every,
                         eval_episodes=eval_episodes, eval_envs=10, checkpoint_every=10**6, max_env_steps=env_steps,
                         progress=False)
    trainer = OnPolicyTrainer(agent, run_dir, cfg, make_train_envs=B.train_envs(4, seed), make_eval_env=B.eval_env,
                              seed=seed)
    summary = trainer.fit()
    curve = [[int(h["step"]), round(float(h["train_wall_s"]), 2), float(h["return_mean"])] for h in trainer.history]
    after = B.score(agent.policy)
    return {"pretrained": before, "finetuned": after, "env_steps": summary["online_steps"],
            "iterations": summary["iterations"], "finetune_wall_s": round(curve[-1][1], 1), "curve": curve,
            "args": kw}


def time_to_reach(curve: list, target: float) -> float | None:
    """Train wall seconds at the first curve point ``[step, wall_s, return]`` with return >= ``target``; None: never."""
    return next((w for _, w, r in curve if r >= target), None)


def _parse_overrides(items: list[str]) -> dict:
    import yaml

    out = {}
    for it in items:
        k, _, v = it.partition("=")
        out[k] = yaml.safe_load(v)
    return out


def bench_data(args):
    """The DPPO benchmark's PointMaze UMaze planner data (``args.data_steps`` steps, cached under
    ``args.minari_root``) with ``args.bias`` added to the actions."""
    from robotrl.collect import collect_pointmaze
    from robotrl.data import load_dataset

    root = Path(args.minari_root or tempfile.mkdtemp(prefix="bench_reinflow_minari_"))
    ds_id = f"robotrl/pointmaze/umaze-bench-dppo-{args.data_steps}-v0"
    path = root / ds_id
    if not path.exists():
        path = collect_pointmaze("umaze", num_steps=args.data_steps, seed=0, dataset_id=ds_id, root=root,
                                 progress=False, ref_episodes=2,
                                 env_kwargs={"continuing_task": True, "reset_target": True})
    data = load_dataset(str(path))
    return dataclasses.replace(data, actions=np.clip(data.actions + np.float32(args.bias), -1, 1).astype(np.float32))


@torch.no_grad()
def chunk_gaps(policy, data, steps, seed: int, n: int = 2048) -> dict[int, float]:
    """Per ``K`` in ``steps``: mean ``|chunk_K − chunk_1|`` (normalised action units) over ``n`` dataset observations,
    each K-step and 1-step chunk sampled from the same start noise."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, len(data.observations), (n,), generator=g)
    cond = policy.condition(torch.as_tensor(data.observations)[idx][:, None])
    x0 = torch.randn((n, policy.Ta, policy.action_dim), generator=g)
    one = policy.sample_normalized(cond, steps=1, x0=x0)
    return {k: float((policy.sample_normalized(cond, steps=k, x0=x0) - one).abs().mean()) for k in steps}


def shortcut_quality(args) -> dict:
    """``shortcut``: a flow and a shortcut policy (Frans et al. 2024) behaviour-cloned per seed with the same
    network (the DPPO bench's 2x64 residual MLP), data, updates, batch and lr, each scored (``B.score``: 150
    episodes) at every ``--steps`` K, with the mean gap between its K-step and 1-step chunks from the same start
    noise (:func:`chunk_gaps`); summary: mean and IQM over seeds of each per (policy, K)."""
    from robotrl.bench.tasks import dppo_learning as B

    from robotrl.agents.flow import FlowAgent
    from robotrl.data import ReplayBuffer

    data = bench_data(args)
    on, sc = B.normalizers(data)
    net = {k: v for k, v in B.DIFFUSION.items() if k != "denoising_steps"}
    rows = []
    for seed in args.seeds:
        for name in ("flow", "shortcut"):
            torch.manual_seed(seed)
            agent = FlowAgent(data.obs_dim, data.action_dim, obs_normalizer=on, action_scaler=sc, lr=1e-3,
                              ema_start=args.bc_updates // 2, seed=seed, shortcut=name == "shortcut",
                              shortcut_max_steps=args.max_steps, shortcut_fraction=args.fraction, **net)
            buf = ReplayBuffer.from_offline(data, seed=seed)
            t = time.time()
            for u in range(args.bc_updates):
                agent.update(agent.sample_batch(buf, 256), u)
            train_s = time.time() - t
            gaps = chunk_gaps(agent.policy, data, args.steps, seed)
            for k in args.steps:
                agent.policy.K = k
                r = B.score(agent.policy)
                rows.append({"policy": name, "seed": seed, "steps": k, "return": r["return"],
                             "success_rate": r["success_rate"], "chunk_gap_to_1_step": gaps[k],
                             "train_s": round(train_s, 1)})
                print(f"seed {seed} {name:>8} K={k}: return {r['return']:.2f} success {r['success_rate']:.2f} "
                      f"chunk gap to 1 step {gaps[k]:.3f} "
                      f"(trained {train_s:.0f} s)", flush=True)
    summary = {}
    for name in ("flow", "shortcut"):
        for k in args.steps:
            rs = [r for r in rows if r["policy"] == name and r["steps"] == k]
            summary[f"{name}_{k}"] = {m: {"mean": float(np.mean([r[m] for r in rs])), "iqm": B.iqm([r[m] for r in rs])}
                                      for m in ("return", "success_rate", "chunk_gap_to_1_step")}
    print(summary)
    return {"benchmark": "reinflow_shortcut_quality", "task": "PointMaze UMaze fixed goal, dense (DPPO benchmark task)",
            "setting": {"bias": args.bias, "data_steps": args.data_steps, "bc_updates": args.bc_updates, "batch": 256,
                        "lr": 1e-3, "network": net, "steps": list(args.steps), "shortcut_max_steps": args.max_steps,
                        "shortcut_fraction": args.fraction, "eval_episodes": 150},
            "per_run": rows, "summary": summary, "command": command_line(), "argv": command_argv(),
            "environment": environment()}


def learning(args) -> dict:
    from robotrl.bench.tasks import dppo_learning as B

    data = bench_data(args)
    rf_over = _parse_overrides(args.reinflow)
    dp_over = _parse_overrides(args.dppo)
    if args.diffusion_steps is not None:  # K of the diffusion BC policy DPPO starts from (bench default 5)
        B.DIFFUSION = {**B.DIFFUSION, "denoising_steps": args.diffusion_steps}
    if args.denoiser_hidden is not None:  # both policies' network (bench default 2x64; DPPO/ReinFlow Gym: 3x512, t 16)
        B.DIFFUSION = {**B.DIFFUSION, "denoiser_kwargs": {**B.DIFFUSION["denoiser_kwargs"],
                                                          "hidden": list(args.denoiser_hidden),
                                                          "time_dim": args.time_dim}}
    snaps = tuple(int(u) for u in args.flow_snapshots)
    rows, work, matches = [], Path(tempfile.mkdtemp(prefix="bench_reinflow_")), []
    for seed in args.seeds:
        dp, fps, dsec, fsec = pretrain(B, data, seed, args.bc_updates, work / f"pre{seed}", snaps)
        fp, dscore, fscore, cands = match_pretrained(B, dp, fps, args.match_tol)
        m = {"seed": seed, "diffusion_bc_return": dscore["return"], "flow_bc_return": fscore["return"],
             "flow_snapshot": fp.stem, "candidates": cands,
             "within_tol": abs(dscore["return"] - fscore["return"]) <= args.match_tol}
        matches.append(m)
        print(f"seed {seed}: pretrained diffusion {dsec:.0f} s, flow {fsec:.0f} s; matched {m}", flush=True)
        d = fine_tune("dppo", B, data, dp, seed, args.env_steps, work / f"dppo{seed}", dp_over, args.eval_every,
                      args.eval_episodes)
        r = fine_tune("reinflow", B, data, fp, seed, args.env_steps, work / f"rf{seed}", rf_over, args.eval_every,
                      args.eval_episodes)
        target = d["curve"][-1][2]  # DPPO's final return on the trainer's eval (same eval for both curves)
        t_rf = time_to_reach(r["curve"], target)
        ratio = None if t_rf is None else t_rf / d["finetune_wall_s"]
        for method, res, sec in (("dppo", d, dsec), ("reinflow", r, fsec)):
            rows.append({"method": method, "seed": seed, "pretrain_s": round(sec, 1), **res,
                         **({"dppo_final_eval_return": target, "time_to_dppo_final_s": t_rf,
                             "time_to_dppo_final_over_dppo_wall": ratio} if method == "reinflow" else {})})
            print(f"  {method:>8}: {res['pretrained']['return']:.2f} -> {res['finetuned']['return']:.2f} "
                  f"in {res['finetune_wall_s']} s ({res['env_steps']} env steps)", flush=True)
        print(f"  ReinFlow reaches DPPO's final {target:.2f} at {t_rf} s: ratio {ratio}", flush=True)
    summary = {}
    for m in ("dppo", "reinflow"):
        rs = [r for r in rows if r["method"] == m]
        summary[m] = {"pretrained_iqm": B.iqm([r["pretrained"]["return"] for r in rs]),
                      "finetuned_iqm": B.iqm([r["finetuned"]["return"] for r in rs]),
                      "finetuned_success_iqm": B.iqm([r["finetuned"]["success_rate"] for r in rs]),
                      "finetune_wall_s_iqm": B.iqm([r["finetune_wall_s"] for r in rs])}
    pairs = [(a, b) for a in rows for b in rows if a["method"] == "reinflow" and b["method"] == "dppo"
             and a["seed"] == b["seed"]]
    summary["wall_ratio_reinflow_over_dppo_median"] = statistics.median(a["finetune_wall_s"] / b["finetune_wall_s"]
                                                                        for a, b in pairs)
    summary["reinflow_reaches_dppo_final_return_seeds"] = sum(a["finetuned"]["return"] >= b["finetuned"]["return"]
                                                              for a, b in pairs)
    tr = [a["time_to_dppo_final_over_dppo_wall"] for a, _ in pairs]
    summary["time_to_dppo_final_ratio_per_seed"] = tr
    summary["time_to_dppo_final_ratio_iqm"] = (B.iqm([float("inf") if x is None else x for x in tr])
                                               if all(x is not None for x in tr) else None)
    summary["time_to_dppo_final_ratio_median"] = statistics.median(float("inf") if x is None else x for x in tr)
    summary["pretrained_match"] = matches
    print(summary)
    runs = [{"method": {"dppo": "DPPO", "reinflow": "ReinFlow"}[r["method"]], "family": r["method"], "peer": False,
             "seed": r["seed"], "offline_score": r["pretrained"]["return"],
             "curve": [[0, r["pretrained"]["return"]], [args.env_steps, r["finetuned"]["return"]]],
             "success_curve": [[0, r["pretrained"]["success_rate"]], [args.env_steps, r["finetuned"]["success_rate"]]],
             "wall_s": r["finetune_wall_s"]} for r in rows]
    return learning_result("reinflow_learning", "PointMaze UMaze fixed goal, dense (DPPO benchmark task)", "return",
                           [args.env_steps], runs, setting={"bias": args.bias, "data_steps": args.data_steps,
                                                            "bc_updates": args.bc_updates,
                                                            "dppo_args": {**B.DPPO_ARGS, **dp_over},
                                                            "reinflow_args": {**REINFLOW_ARGS, **rf_over},
                                                            "network": B.DIFFUSION, "eval_every": args.eval_every,
                                                            "eval_episodes": args.eval_episodes,
                                                            "flow_snapshots": list(snaps), "match_tol": args.match_tol},
                           per_run=rows, summary=summary)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    lat = sub.add_parser("latency")
    lat.add_argument("--repeats", type=int, default=30)
    lat.add_argument("--warmup", type=int, default=20)
    lat.add_argument("--block-s", type=float, default=0.1)
    lat.add_argument("--out", default="benchmarks/results/full/reinflow_latency.json")
    lrn = sub.add_parser("learning")
    lrn.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    lrn.add_argument("--env-steps", type=int, default=20_000)
    lrn.add_argument("--data-steps", type=int, default=20_000)
    lrn.add_argument("--bc-updates", type=int, default=1500)
    lrn.add_argument("--bias", type=float, default=0.5)
    lrn.add_argument("--minari-root", default=None)
    lrn.add_argument("--eval-every", type=int, default=2, help="iterations between curve evaluations")
    lrn.add_argument("--eval-episodes", type=int, default=30)
    lrn.add_argument("--flow-snapshots", nargs="*", default=[300, 600, 900, 1200],
                     help="flow BC update counts saved as candidates for matching the diffusion BC return")
    lrn.add_argument("--match-tol", type=float, default=0.5, help="|flow BC - diffusion BC| return tolerance")
    lrn.add_argument("--reinflow", nargs="*", default=[], metavar="KEY=VALUE", help="ReinFlowAgent overrides")
    lrn.add_argument("--dppo", nargs="*", default=[], metavar="KEY=VALUE",
                     help="DPPOAgent overrides (e.g. ft_denoising_steps=10 with --diffusion-steps 20: DPPO's Gym K/K')")
    lrn.add_argument("--diffusion-steps", type=int, default=None,
                     help="K of the diffusion BC policy (default: the DPPO benchmark's 5; DPPO's Gym reference: 20)")
    lrn.add_argument("--denoiser-hidden", type=int, nargs="+", default=None,
                     help="widths of both policies' residual-MLP network (default: the DPPO benchmark's 64 64; "
                          "the references' Gym network: 512 512 512)")
    lrn.add_argument("--time-dim", type=int, default=16, help="time embedding size with --denoiser-hidden")
    lrn.add_argument("--out", default="benchmarks/results/full/reinflow_learning.json")
    shc = sub.add_parser("shortcut", help="flow vs shortcut policy return at 1 and K steps (same BC budget)")
    shc.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    shc.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4], help="sampling steps K scored")
    shc.add_argument("--data-steps", type=int, default=20_000)
    shc.add_argument("--bc-updates", type=int, default=1500)
    shc.add_argument("--bias", type=float, default=0.0)
    shc.add_argument("--max-steps", type=int, default=128, help="shortcut_max_steps M")
    shc.add_argument("--fraction", type=float, default=0.25, help="shortcut_fraction")
    shc.add_argument("--minari-root", default=None)
    shc.add_argument("--out", default="benchmarks/results/studies/reinflow-pointmaze/shortcut_quality.json")
    for p in (lat, lrn, shc):
        p.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    set_threads(args.threads)
    res = {"latency": latency, "learning": learning, "shortcut": shortcut_quality}[args.mode](args)
    kind = {"latency": "reinflow_latency", "shortcut": "shortcut_quality"}.get(args.mode)  # learning: already the form
    print("wrote", write_json(Path(args.out).resolve(), as_result(res, Path(args.out).stem, kind) if kind else res))


if __name__ == "__main__":
    main()
