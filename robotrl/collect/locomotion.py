"""Gym-MuJoCo locomotion datasets (Hopper, HalfCheetah, Walker2d) in the manner of D4RL.

Recipe (after D4RL, Fu et al. 2020, "D4RL: Datasets for Deep Data-Driven RL", Sec. 5 and
``d4rl/gym_mujoco``): ``random`` = uniform random actions; ``expert`` = a fully trained
online RL policy; ``medium`` = a policy of the same training run stopped early, at about
one third of the expert's return. Episodes end on the env's termination (fall) or its
1000-step time limit (truncation); each dataset has ``num_steps`` steps (D4RL: 1e6) and
the last episode is cut (truncated) where the budget ends. Episode ``k`` resets with
``seed + k``. Envs: ``Hopper-v5``, ``HalfCheetah-v5``, ``Walker2d-v5`` (default kwargs).

Policy: D4RL used SAC; on the project's 2-core CPU SB3 SAC runs ~51 env steps/s (1e6 steps
would take 5+ hours) while SB3 PPO with 8 envs runs ~1,900 steps/s, so robotrl trains
**PPO** (8 envs, VecNormalize on observations and rewards, n_steps 512, batch 64,
10 epochs, lr 3e-4, γ 0.99, λ 0.95, MLP 64x64) for ``train_steps`` (default 1e6: Hopper took
844 s here on a busy 2-core machine, best checkpoint return 1478 ≈ 46 normalised).
Every ``train_steps / 20`` steps a checkpoint (SB3 ``.zip`` + the
observation normaliser ``.npz``) is saved and evaluated with the stochastic policy (the
one that collects data) over ``eval_episodes`` (default 5) episodes. ``expert`` = the
checkpoint with the best evaluated return; ``medium`` = the checkpoint whose return is
closest to ``R_random + (R_expert - R_random) / 3`` (D4RL's "about 1/3 of expert"), with
``R_random`` the D4RL random reference and ``R_expert`` that best checkpoint's return.
PPO at 1e6 steps does not reach D4RL's SAC experts: the normalised score each dataset's
policy reached is in its provenance. Data are collected with stochastic actions
(``deterministic=False``; SB3 clips them to the action box), as D4RL sampled its policies.

Caching: the training run lives next to the datasets in the hidden folder
``<root>/robotrl/<env>/.policies/ppo-<train_steps>-s<seed>/`` (``index.json`` written
last); medium and expert share it, and re-collection reuses it instead of retraining.

Reference scores (``ref_min_score`` / ``ref_max_score``) are D4RL's Gym-MuJoCo
references from ``d4rl/gym_mujoco/__init__.py`` (HOPPER/HALFCHEETAH/WALKER_RANDOM_SCORE
and _EXPERT_SCORE): hopper -20.272305 / 3234.3, halfcheetah -280.178953 / 12135.0,
walker2d 1.629008 / 4592.3; they were measured on the v2/v3 envs (mujoco-py), whose
rewards the v5 envs keep. ``eval_env_spec`` is the collection env.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from robotrl.collect._common import base_provenance, collect_steps, progress_bar
from robotrl.data.writer import datasets_root, write_dataset
from robotrl.errors import ConfigError, require
from robotrl.files import atomic_write

__all__ = ["collect_locomotion", "train_policy", "SB3Policy", "LOCO_ENVS", "D4RL_REF_SCORES"]

LOCO_ENVS = {"hopper": "Hopper-v5", "halfcheetah": "HalfCheetah-v5", "walker2d": "Walker2d-v5"}
D4RL_REF_SCORES = {"hopper": (-20.272305, 3234.3), "halfcheetah": (-280.178953, 12135.0), "walker2d": (1.629008, 4592.3)}
QUALITIES = ("random", "medium", "expert")
PPO_KWARGS = dict(n_steps=512, batch_size=64, n_epochs=10, learning_rate=3e-4, gamma=0.99, gae_lambda=0.95, clip_range=0.2)


class SB3Policy:
    """A saved SB3 checkpoint as a policy on raw env observations.

    Args:
        model_path: the SB3 ``.zip``. stats_path: ``.npz`` with ``mean``, ``var``,
            ``clip``, ``epsilon`` of VecNormalize's observation normaliser.
        deterministic: mean action instead of a sample.
        seed: seeds the policy's sampling (torch).

    ``policy(obs (Do,)) -> action (Da,)`` in env units, clipped to the action box.
    """

    def __init__(self, model_path: str | os.PathLike, stats_path: str | os.PathLike, deterministic: bool = False, seed: int | None = None):
        import torch
        from stable_baselines3 import PPO

        self.model = PPO.load(str(model_path), device="cpu")
        st = np.load(stats_path)
        self.mean, self.std, self.clip = st["mean"], np.sqrt(st["var"] + float(st["epsilon"])), float(st["clip"])
        self.deterministic = deterministic
        if seed is not None:
            torch.manual_seed(seed)

    def __call__(self, obs) -> np.ndarray:
        x = np.clip((np.asarray(obs) - self.mean) / self.std, -self.clip, self.clip).astype(np.float32)
        action, _ = self.model.predict(x, deterministic=self.deterministic)
        return action


class _OneThread:
    """Context: torch limited to one thread (small per-step forwards thrash with more)."""

    def __enter__(self):
        import torch

        self.prev = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc):
        import torch

        torch.set_num_threads(self.prev)


def _rollout_returns(env_id: str, policy, episodes: int, seed: int) -> list[float]:
    env = gym.make(env_id)
    out = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += float(r)
            done = term or trunc
        out.append(total)
    env.close()
    return out


def policy_cache_dir(env: str, train_steps: int, seed: int, root: str | os.PathLike | None = None) -> Path:
    """``<root>/robotrl/<env>/.policies/ppo-<train_steps>-s<seed>`` (hidden from Minari's listing)."""
    return (Path(root) if root is not None else datasets_root()) / "robotrl" / env / ".policies" / f"ppo-{train_steps}-s{seed}"


def train_policy(
    env: str,
    train_steps: int = 1_000_000,
    seed: int = 0,
    root: str | os.PathLike | None = None,
    progress: bool = True,
    *,
    n_envs: int = 8,
    n_checkpoints: int = 20,
    eval_episodes: int = 5,
) -> dict:
    """Train (or reuse) the PPO run for ``env`` and return its ``index.json`` as a dict.

    The index lists ``checkpoints``: ``{"steps", "model", "stats", "eval_returns",
    "eval_mean"}`` (paths relative to the cache dir, returns in env reward units).
    Cached under :func:`policy_cache_dir`; an existing complete index is reused.

    Raises:
        ConfigError: unknown ``env`` or ``train_steps`` < 1.
    """
    if env not in LOCO_ENVS:
        raise ConfigError(f"unknown locomotion env {env!r}; choose one of {sorted(LOCO_ENVS)}")
    if train_steps < 1:
        raise ConfigError(f"train_steps must be >= 1, got {train_steps}")
    cache = policy_cache_dir(env, train_steps, seed, root)
    index_path = cache / "index.json"
    if index_path.exists():
        index = json.loads(index_path.read_text())
        index["cache_dir"] = str(cache)
        index["reused"] = True
        return index

    import torch

    require("stable_baselines3", "locomotion", f"training the {env} recipes' PPO demonstrator")
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    cache.mkdir(parents=True, exist_ok=True)
    env_id = LOCO_ENVS[env]
    torch.manual_seed(seed)
    # One torch thread: with 2 threads on the 2-core machine and any other busy process,
    # PPO's small minibatch updates fell from ~3,300 to ~22 env steps/s (thread spinning).
    prev_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    venv = VecNormalize(make_vec_env(env_id, n_envs=n_envs, seed=seed), norm_obs=True, norm_reward=True, gamma=0.99)
    kwargs = dict(PPO_KWARGS)
    kwargs["n_steps"] = int(min(kwargs["n_steps"], max(16, train_steps // n_envs)))
    kwargs["batch_size"] = int(min(kwargs["batch_size"], kwargs["n_steps"] * n_envs))
    model = PPO("MlpPolicy", venv, seed=seed, device="cpu", verbose=0, **kwargs)
    # SB3's default logger creates an empty /tmp/SB3-<date> folder per run; log nowhere instead
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))
    every = max(1, train_steps // n_checkpoints)
    checkpoints: list[dict] = []
    bar = progress_bar(train_steps, f"train PPO {env_id}", progress)

    def save(steps: int) -> None:
        name = f"ckpt_{steps:09d}"
        model.save(cache / f"{name}.zip")
        rms = venv.obs_rms
        np.savez(cache / f"{name}.npz", mean=rms.mean, var=rms.var, clip=venv.clip_obs, epsilon=venv.epsilon)
        pol = SB3Policy(cache / f"{name}.zip", cache / f"{name}.npz", deterministic=False, seed=seed + len(checkpoints))
        rets = _rollout_returns(env_id, pol, eval_episodes, seed=10_000 + 100 * len(checkpoints))
        checkpoints.append({"steps": steps, "model": f"{name}.zip", "stats": f"{name}.npz", "eval_returns": rets, "eval_mean": float(np.mean(rets))})
        bar.set_postfix(ret=f"{np.mean(rets):.0f}")

    class _Cb(BaseCallback):
        def __init__(self):
            super().__init__()
            self.next = every

        def _on_step(self) -> bool:
            bar.update(self.training_env.num_envs)
            if self.num_timesteps >= self.next and self.num_timesteps < train_steps:
                save(self.num_timesteps)
                self.next += every
            return True

    t0 = time.time()
    try:
        model.learn(total_timesteps=train_steps, callback=_Cb())
        save(model.num_timesteps)
    finally:
        bar.close()
        venv.close()
        torch.set_num_threads(prev_threads)
    index = {
        "env_id": env_id,
        "algorithm": "PPO (stable-baselines3), VecNormalize(obs, reward)",
        "ppo_kwargs": kwargs,
        "n_envs": n_envs,
        "train_steps": train_steps,
        "seed": seed,
        "eval_episodes": eval_episodes,
        "eval_mode": "stochastic",
        "train_seconds": round(time.time() - t0, 1),
        "checkpoints": checkpoints,
    }
    atomic_write(index_path, json.dumps(index, indent=1), mode=0o666)
    index["cache_dir"] = str(cache)
    index["reused"] = False
    return index


def select_checkpoint(index: dict, quality: str, random_score: float) -> dict:
    """The expert (best ``eval_mean``, latest on ties) or medium (closest to 1/3 of the way
    from ``random_score`` to the expert's return) checkpoint of a training ``index``."""
    ckpts = index["checkpoints"]
    best = max(ckpts, key=lambda c: (c["eval_mean"], c["steps"]))
    if quality == "expert":
        return best
    target = random_score + (best["eval_mean"] - random_score) / 3.0
    return min(ckpts, key=lambda c: (abs(c["eval_mean"] - target), c["steps"]))


def collect_locomotion(
    env: str = "hopper",
    quality: str = "medium",
    num_steps: int = 1_000_000,
    train_steps: int = 1_000_000,
    seed: int = 0,
    dataset_id: str | None = None,
    data_format: str = "hdf5",
    root: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = True,
    *,
    n_envs: int = 8,
    eval_episodes: int = 5,
    deterministic: bool = False,
) -> Path:
    """Generate a D4RL-style locomotion dataset and write it with Minari.

    Args:
        env: ``"hopper"``, ``"halfcheetah"`` or ``"walker2d"`` (the ``-v5`` env ids).
        quality: ``"random"`` (uniform actions), ``"medium"`` or ``"expert"`` (PPO
            checkpoints, see the module docstring).
        num_steps: env steps to record (D4RL: 1e6).
        train_steps: PPO env steps (ignored for ``random``); default 1e6 (Hopper: 844 s here).
        seed: training seed, episode resets ``seed + k``, action sampling.
        dataset_id: default ``robotrl/<env>/<quality>-v0``.
        data_format, root, overwrite, progress: as in :func:`robotrl.data.writer.write_dataset`;
            ``progress`` shows tqdm bars for training and collection.
        n_envs: parallel envs for PPO. eval_episodes: episodes per checkpoint evaluation.
        deterministic: collect with the policy's mean action instead of samples.

    Returns:
        The dataset directory.

    Raises:
        ConfigError: unknown env or quality, or ``num_steps`` < 1. DatasetExistsError: id taken.
    """
    if env not in LOCO_ENVS:
        raise ConfigError(f"unknown locomotion env {env!r}; choose one of {sorted(LOCO_ENVS)}")
    if quality not in QUALITIES:
        raise ConfigError(f"unknown quality {quality!r}; choose one of {list(QUALITIES)}")
    if num_steps < 1:
        raise ConfigError(f"num_steps must be >= 1, got {num_steps}")
    dataset_id = dataset_id or f"robotrl/{env}/{quality}-v0"
    env_id = LOCO_ENVS[env]
    ref_min, ref_max = D4RL_REF_SCORES[env]
    facts: dict = {}
    if quality == "random":
        gym_env = gym.make(env_id)
        space = gym_env.action_space
        policy = lambda obs: space.sample()  # noqa: E731
        facts["policy"] = "uniform random actions"
    else:
        index = train_policy(env, train_steps, seed, root, progress, n_envs=n_envs, eval_episodes=eval_episodes)
        ck = select_checkpoint(index, quality, ref_min)
        cache = Path(index["cache_dir"])
        policy = SB3Policy(cache / ck["model"], cache / ck["stats"], deterministic=deterministic, seed=seed)
        gym_env = gym.make(env_id)
        facts.update(
            policy=f"PPO checkpoint at {ck['steps']} steps ({'mean action' if deterministic else 'sampled actions'})",
            policy_model=str(cache / ck["model"]),
            policy_eval_mean_return=ck["eval_mean"],
            policy_eval_normalized=100 * (ck["eval_mean"] - ref_min) / (ref_max - ref_min),
            training={k: index[k] for k in ("algorithm", "ppo_kwargs", "n_envs", "train_steps", "train_seconds", "eval_episodes", "eval_mode")},
            training_reused=index["reused"],
            checkpoint_returns={c["steps"]: round(c["eval_mean"], 1) for c in index["checkpoints"]},
        )
    gym_env.action_space.seed(seed)
    t0 = time.time()
    bar = progress_bar(num_steps, f"collect {dataset_id}", progress)
    with _OneThread():
        episodes = collect_steps(gym_env, policy, num_steps, seed, bar)
    bar.close()
    spec = gym_env.spec
    gym_env.close()
    complete = [float(ep.rewards.sum()) for ep in episodes if ep.terminations[-1] or len(ep) == spec.max_episode_steps]
    prov = base_provenance(
        f"{env}-{quality}",
        env_id=env_id,
        quality=quality,
        seed=seed,
        num_steps=num_steps,
        num_episodes=len(episodes),
        dataset_mean_return=float(np.mean(complete)) if complete else None,
        ref_scores_source="D4RL d4rl/gym_mujoco/__init__.py *_RANDOM_SCORE / *_EXPERT_SCORE (v2 envs)",
        collect_seconds=round(time.time() - t0, 2),
        **facts,
    )
    return write_dataset(
        dataset_id,
        episodes,
        env=spec,
        eval_env=spec,
        ref_min_score=ref_min,
        ref_max_score=ref_max,
        algorithm_name="random" if quality == "random" else "PPO",
        description=f"{env_id} {quality}: {num_steps} steps, D4RL-style recipe (robotrl.collect.locomotion).",
        provenance=prov,
        data_format=data_format,
        root=root,
        overwrite=overwrite,
    )
