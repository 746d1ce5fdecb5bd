"""From a resolved Hydra config to a running :class:`~robotrl.trainer.Trainer`.

This is where sizes are derived, never typed in: ``Do`` and ``Da`` come from the
environment and are checked against the dataset; observation statistics come from the
dataset; action bounds from the env's action space. The agent is built with
``hydra.utils.instantiate`` from ``cfg.agent.model`` and receives explicit arguments
only (never the whole config).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer, check_spaces, load_dataset
from robotrl.data.dataset import OfflineData, resolve_dataset_path
from robotrl.errors import ConfigError, DatasetNotFoundError
from robotrl.trainer import Trainer, TrainerConfig
from robotrl.utils import resolve_device, set_seed

if TYPE_CHECKING:
    from robotrl.onpolicy import OnPolicyTrainer


def ensure_dataset(ds_cfg: DictConfig) -> str:
    """The dataset id of ``ds_cfg``, generating it with its recipe on first use.

    Raises:
        DatasetNotFoundError: missing and no recipe (or ``generate: false``).
    """
    try:
        resolve_dataset_path(ds_cfg.id)
        return ds_cfg.id
    except DatasetNotFoundError:
        if not ds_cfg.get("recipe") or not ds_cfg.get("generate", True):
            raise
    from robotrl.collect import ensure_dataset as generate_once

    print(f"dataset {ds_cfg.id} not found locally: generating it with recipe {ds_cfg.recipe} (cached for later runs)")
    args = OmegaConf.to_container(ds_cfg.get("recipe_args") or {}, resolve=True)
    return generate_once(ds_cfg.recipe, **{**args, "dataset_id": ds_cfg.id})  # one generator at a time


def eval_env_args(env_cfg: DictConfig, data: OfflineData | None) -> dict[str, Any]:
    """Arguments of :func:`robotrl.envs.make_env` for evaluation.

    The dataset's ``eval_env_spec`` (Minari) wins when ``env.eval_from_dataset`` is true,
    so scores are comparable with the dataset's reference scores.
    """
    args: dict[str, Any] = {"name": env_cfg.name, "env_kwargs": OmegaConf.to_container(env_cfg.kwargs, resolve=True),
                            "max_episode_steps": env_cfg.max_episode_steps}
    spec_json = data.metadata.get("eval_env_spec") if data is not None else None
    if env_cfg.get("eval_from_dataset", True) and spec_json:
        spec = json.loads(spec_json)
        args = {"name": spec["id"], "env_kwargs": {**(spec.get("kwargs") or {}), **args["env_kwargs"]},
                "max_episode_steps": env_cfg.max_episode_steps or spec.get("max_episode_steps")}
    return args


def trainer_config(cfg: DictConfig) -> TrainerConfig:
    """:class:`TrainerConfig` from ``cfg.trainer`` (unknown keys raise ConfigError)."""
    known = {f.name for f in fields(TrainerConfig)}
    given = OmegaConf.to_container(cfg.trainer, resolve=True)
    unknown = set(given) - known
    if unknown:
        raise ConfigError(f"unknown trainer settings {sorted(unknown)}; known: {sorted(known)}")
    return TrainerConfig(**given)


def build_trainer(cfg: DictConfig, run_dir: Path) -> "Trainer | OnPolicyTrainer":
    """Dataset, envs, normalisers, agent, buffer and trainer for one run.

    Agents whose config has an ``onpolicy`` section (DPPO, Gaussian PPO, residual PPO) get
    the on-policy loop (:class:`robotrl.onpolicy.OnPolicyTrainer`); the others the
    offline/online :class:`~robotrl.trainer.Trainer`. Both have ``fit() -> summary``.
    """
    from hydra.utils import instantiate

    from robotrl.envs import env_info, make_env

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    set_seed(int(cfg.seed))
    device = resolve_device(cfg.device)
    tcfg = trainer_config(cfg)

    data = None
    samples_offline = tcfg.offline_steps > 0 or tcfg.offline_ratio > 0
    if samples_offline or tcfg.init_from:  # a warm start still evaluates like its pretraining (eval spec, ref scores)
        data = load_dataset(ensure_dataset(cfg.dataset))
    info = env_info(cfg.env.name, OmegaConf.to_container(cfg.env.kwargs, resolve=True) or None)
    if data is not None:
        check_spaces(data, info.observation_space, info.action_space)
    obs_dim, action_dim = info.obs_dim, info.action_dim

    if data is not None:
        obs_norm = ObservationNormalizer.from_data(data.observations, clip=cfg.agent.model.get("obs_clip"))
    else:
        obs_norm = ObservationNormalizer.identity(obs_dim)
    action_space = info.action_space
    action_scaler = ActionScaler.from_space(action_space) if isinstance(action_space, gym.spaces.Box) and \
        bool((abs(action_space.low) < 1e6).all() and (abs(action_space.high) < 1e6).all()) else ActionScaler.from_data(data.actions)

    agent = instantiate(cfg.agent.model, obs_dim=obs_dim, action_dim=action_dim, obs_normalizer=obs_norm,
                        action_scaler=action_scaler, device=device, seed=int(cfg.seed), _convert_="all")

    ev = eval_env_args(cfg.env, data)
    env_kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    ref_scores = data.ref_scores if data is not None else None

    def make_eval_env():
        return make_env(ev["name"], env_kwargs=ev["env_kwargs"], max_episode_steps=ev["max_episode_steps"])

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": obs_dim, "action_dim": action_dim, "eval_env": ev, "device": str(device),
                           "dataset_transitions": data.num_transitions if data is not None else 0,
                           "ref_scores": list(ref_scores) if ref_scores else None}
    title = f"{cfg.agent.name} on {cfg.env.name}"

    if cfg.agent.get("onpolicy") is not None:  # DPPO / Gaussian PPO / residual PPO: the on-policy loop
        from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

        ocfg = OnPolicyConfig(**OmegaConf.to_container(cfg.agent.onpolicy, resolve=True), progress=tcfg.progress)

        def make_chunk_envs():
            return make_env(cfg.env.name, num_envs=ocfg.num_envs, seed=int(cfg.seed), vectorization=ocfg.vectorization,
                            action_chunk=int(getattr(agent.policy, "Te", 1)), env_kwargs=env_kwargs,
                            max_episode_steps=cfg.env.max_episode_steps)

        return OnPolicyTrainer(agent, run_dir, ocfg, make_train_envs=make_chunk_envs, make_eval_env=make_eval_env,
                               ref_scores=ref_scores, seed=int(cfg.seed), run_config=resolved, title=title)

    # reward scale/bias: applied once, here to the offline data and by the trainer to online rewards,
    # so the buffers' MC returns (Cal-QL's bound) and the sparse fill are in the same units
    r_scale, r_bias = float(cfg.agent.get("reward_scale", 1.0)), float(cfg.agent.get("reward_bias", 0.0))
    fill = cfg.agent.get("mc_sparse_fill")
    fill = None if fill is None else r_scale * float(fill) + r_bias
    buffer = None
    if data is not None and samples_offline:
        if (r_scale, r_bias) != (1.0, 0.0):
            data = dataclasses.replace(data, rewards=(r_scale * data.rewards + r_bias).astype(np.float32))
        buffer = ReplayBuffer.from_offline(data, gamma=float(cfg.agent.get("gamma", 0.99)), device=device,
                                           seed=int(cfg.seed), mc_sparse_fill=fill)

    def make_train_envs():
        return make_env(cfg.env.name, num_envs=tcfg.num_envs, seed=int(cfg.seed), vectorization="sync",
                        env_kwargs=env_kwargs, max_episode_steps=cfg.env.max_episode_steps)

    return Trainer(agent, run_dir, tcfg, offline_buffer=buffer, make_eval_env=make_eval_env,
                   make_train_envs=make_train_envs, ref_scores=ref_scores,
                   seed=int(cfg.seed), run_config=resolved, title=title,
                   reward_scale=r_scale, reward_bias=r_bias, mc_sparse_fill=fill,
                   gamma=float(cfg.agent.get("gamma", 0.99)))
