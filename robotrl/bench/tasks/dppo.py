"""DPPO throughput and chunk-inference latency on the CPU, measured side by side in one run.

1. Env steps per second of one DPPO iteration (rollout with denoising + PPO update) against
   stable-baselines3 PPO (rollout + update) with the same number of Hopper envs.
2. Inference latency of one chunk for the default MLP denoiser: DDPM with K steps and DDIM
   with 5 steps (batch 1). Target: DDIM-5 under 5 ms.

Usage (single thread, as on a shared 2-core machine)::

    python benchmarks/bench_dppo.py --envs 8 --steps 64 --threads 1 --out benchmarks/results/full/dppo_throughput.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from robotrl.bench.tasks._common import environment, write_json
from robotrl.bench.tasks._formats import as_result

from robotrl.agents.dppo import DPPOAgent
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env, env_info
from robotrl.onpolicy import RolloutCollector


def dppo_iteration_rate(env: str, n_envs: int, steps: int, K: int, ft: int, epochs: int, batch: int) -> dict:
    """Env steps/s of rollout + update for one DPPO iteration (default 3×512 residual MLP)."""
    info = env_info(env)
    agent = DPPOAgent(info.obs_dim, info.action_dim, obs_normalizer=ObservationNormalizer.identity(info.obs_dim),
                      action_scaler=ActionScaler.from_space(info.action_space), denoising_steps=K,
                      ft_denoising_steps=ft, n_epochs=epochs, batch_size=batch)
    envs = make_env(env, num_envs=n_envs, seed=0, vectorization="sync", action_chunk=agent.policy.Te)
    try:
        col = RolloutCollector(envs, 1, gamma=agent.gamma, seed=0)
        t0 = time.perf_counter()
        ro = col.collect(agent, steps)
        t1 = time.perf_counter()
        agent.update_rollout(ro, 0)
        t2 = time.perf_counter()
    finally:
        envs.close()
    return {"env_steps": ro.env_steps, "rollout_s": t1 - t0, "update_s": t2 - t1,
            "env_steps_per_s": ro.env_steps / (t2 - t0), "rollout_env_steps_per_s": ro.env_steps / (t1 - t0)}


def sb3_ppo_rate(env: str, n_envs: int, total: int) -> dict:
    """Env steps/s of stable-baselines3 PPO (default settings, n_steps so one update covers ``total``)."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    gym_id = {"hopper": "Hopper-v5"}.get(env, env)
    venv = make_vec_env(gym_id, n_envs=n_envs, seed=0)
    model = PPO("MlpPolicy", venv, n_steps=max(total // n_envs, 64), batch_size=64, seed=0, device="cpu", verbose=0)
    t0 = time.perf_counter()
    model.learn(total_timesteps=max(total // n_envs, 64) * n_envs)
    dt = time.perf_counter() - t0
    venv.close()
    return {"env_steps": model.num_timesteps, "seconds": dt, "env_steps_per_s": model.num_timesteps / dt}


def chunk_latency(obs_dim: int, action_dim: int, K: int, reps: int) -> dict:
    """Milliseconds per chunk (batch 1) for DDPM-K and DDIM-5 with the default 3×512 residual MLP."""
    from robotrl.agents.diffusion import DiffusionPolicy

    p = DiffusionPolicy(obs_dim, action_dim, denoising_steps=K, ddim_steps=5).eval()
    x = torch.randn(1, 1, obs_dim)
    out = {}
    for sampler in ("ddpm", "ddim"):
        for _ in range(5):
            p.predict_chunk(x, sampler=sampler)
        t = time.perf_counter()
        for _ in range(reps):
            p.predict_chunk(x, sampler=sampler)
        out[f"{sampler}_ms"] = 1000 * (time.perf_counter() - t) / reps
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="hopper")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--steps", type=int, default=64, help="DPPO chunk steps per env (Te=4 env steps each)")
    ap.add_argument("--K", type=int, default=20)
    ap.add_argument("--ft", type=int, default=10)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    torch.set_num_threads(a.threads)
    info = env_info(a.env)
    res = {"env": a.env, "envs": a.envs, "threads": a.threads, "K": a.K, "K_prime": a.ft,
           "latency": chunk_latency(info.obs_dim, info.action_dim, a.K, a.reps)}
    res["dppo"] = dppo_iteration_rate(a.env, a.envs, a.steps, a.K, a.ft, a.epochs, a.batch)
    res["sb3_ppo"] = sb3_ppo_rate(a.env, a.envs, res["dppo"]["env_steps"])
    res["dppo_over_sb3_env_steps_per_s"] = res["dppo"]["env_steps_per_s"] / res["sb3_ppo"]["env_steps_per_s"]
    res["ddim5_under_5ms"] = res["latency"]["ddim_ms"] < 5.0
    res["environment"] = environment()  # versions, machine and the argv (the suite's resume key)
    print(json.dumps(res, indent=2))
    if a.out:
        write_json(Path(a.out).resolve(), as_result(res, Path(a.out).stem, "dppo_throughput"))


if __name__ == "__main__":
    main()
