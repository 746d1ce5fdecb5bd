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


#: ``gymnasium.make`` kwargs that change how an env is rendered, never its rewards or dynamics.
RENDER_KWARGS = frozenset({"render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config"})


def _full_kwargs(gym_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Every constructor argument ``gym.make(gym_id, **kwargs)`` ends up with: the env class's
    defaults, overlaid with the registered kwargs, overlaid with ``kwargs``; render settings
    dropped; values JSON-canonical (so recorded and configured specs compare equal)."""
    import inspect

    full: dict[str, Any] = {}
    if gym_id in gym.registry:
        spec = gym.spec(gym_id)
        if isinstance(spec.entry_point, str) or callable(spec.entry_point):
            try:
                creator = gym.envs.registration.load_env_creator(spec.entry_point) \
                    if isinstance(spec.entry_point, str) else spec.entry_point
                full = {k: p.default for k, p in inspect.signature(creator).parameters.items()
                        if p.default is not inspect.Parameter.empty}
            except (ImportError, AttributeError, TypeError, ValueError):
                full = {}
        full.update(spec.kwargs)
    full.update(kwargs or {})
    return {k: json.loads(json.dumps(v, default=str)) for k, v in full.items() if k not in RENDER_KWARGS}


def task_env_args(env_cfg: DictConfig, data: OfflineData | None) -> dict[str, Any]:
    """Arguments of :func:`robotrl.envs.make_env` for the online and evaluation envs: the data's MDP.

    The dataset's recorded ``env_spec`` (gymnasium id, kwargs, time limit) is the task:
    online fine-tuning and evaluation run in exactly that env, so the rewards the agent
    meets online are the rewards it was pretrained on (a critic pretrained on one reward
    function and fine-tuned on another sees its targets jump and collapses). The
    configured env must describe the same MDP; render settings (``render_mode``,
    ``width``, ...) may differ. ``env.match_dataset: false`` opts out: the configured env
    is used as given (evaluation then follows :func:`eval_env_args`).

    Args:
        env_cfg: the ``env`` config group (``name``, ``kwargs``, ``max_episode_steps``,
            ``match_dataset``, ``eval_from_dataset``).
        data: the offline dataset, or ``None`` (online from scratch: the configured env).

    Returns:
        ``{"name": gym id or robotrl name, "env_kwargs": dict, "max_episode_steps": int | None}``.

    Raises:
        ConfigError: the configured env (id, kwargs or time limit) or the dataset's own
            ``eval_env_spec`` describes another MDP than the one the data was recorded in.
    """
    from robotrl.envs.registry import resolve_env

    kwargs = OmegaConf.to_container(env_cfg.kwargs, resolve=True) or {}
    configured = {"name": env_cfg.name, "env_kwargs": kwargs, "max_episode_steps": env_cfg.max_episode_steps}
    spec_json = data.metadata.get("env_spec") if data is not None else None
    if not spec_json or not env_cfg.get("match_dataset", True):
        return configured
    spec = json.loads(spec_json)
    data_id, data_kwargs, data_limit = spec["id"], spec.get("kwargs") or {}, spec.get("max_episode_steps")
    fix = ("pick the env the dataset was recorded in (its env_spec above), or set env.match_dataset=false "
           "to fine-tune and evaluate in another MDP on purpose")
    cfg_id, table_kwargs = resolve_env(env_cfg.name)
    want, have = _full_kwargs(data_id, data_kwargs), _full_kwargs(cfg_id, {**table_kwargs, **kwargs})
    diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if cfg_id != data_id or diff:
        shown = {k: (have.get(k), want.get(k)) for k in diff[:6]}
        raise ConfigError(
            f"env {env_cfg.name!r} ({cfg_id}) is not the MDP dataset {data.metadata.get('dataset_id')!r} was recorded "
            f"in ({data_id}); differing kwargs (configured, recorded): {shown}. Its rewards would differ from the "
            f"data's; {fix}")
    if env_cfg.max_episode_steps is not None and data_limit is not None and int(env_cfg.max_episode_steps) != int(data_limit):
        raise ConfigError(f"env.max_episode_steps={env_cfg.max_episode_steps} differs from the dataset's time limit "
                          f"{data_limit}; {fix}")
    eval_json = data.metadata.get("eval_env_spec")
    if eval_json:
        ev = json.loads(eval_json)
        if ev["id"] != data_id or _full_kwargs(ev["id"], ev.get("kwargs")) != want:
            raise ConfigError(
                f"dataset {data.metadata.get('dataset_id')!r} records an evaluation env ({ev['id']}, "
                f"{ev.get('kwargs')}) that pays other rewards than the env its data comes from ({data_id}, "
                f"{data_kwargs}); robotrl evaluates and fine-tunes in the data's MDP. Set env.match_dataset=false "
                "to train on this data and evaluate in its eval env anyway")
    render = {k: v for k, v in kwargs.items() if k in RENDER_KWARGS}
    return {"name": data_id, "env_kwargs": {**{k: v for k, v in data_kwargs.items() if k not in RENDER_KWARGS}, **render},
            "max_episode_steps": data_limit if env_cfg.max_episode_steps is None else env_cfg.max_episode_steps}


def eval_env_args(env_cfg: DictConfig, data: OfflineData | None, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arguments of :func:`robotrl.envs.make_env` for evaluation: the data's MDP
    (:func:`task_env_args`); with ``env.match_dataset: false`` the configured env, or the
    dataset's ``eval_env_spec`` when ``env.eval_from_dataset`` (as Minari's D4RL datasets intend).

    ``task``: :func:`task_env_args`'s answer when the caller has it already.

    Raises:
        ConfigError: as :func:`task_env_args`.
    """
    configured = task if task is not None else task_env_args(env_cfg, data)
    if data is None or env_cfg.get("match_dataset", True):
        return configured
    spec_json = data.metadata.get("eval_env_spec")
    if not (env_cfg.get("eval_from_dataset", True) and spec_json):
        return configured
    spec = json.loads(spec_json)
    return {"name": spec["id"], "env_kwargs": {**(spec.get("kwargs") or {}), **configured["env_kwargs"]},
            "max_episode_steps": env_cfg.max_episode_steps or spec.get("max_episode_steps")}


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
    pretrains = bool((cfg.agent.get("onpolicy") or {}).get("pretrain_steps"))
    if samples_offline or tcfg.init_from or pretrains:  # a warm start still evaluates like its pretraining (eval spec, ref scores)
        data = load_dataset(ensure_dataset(cfg.dataset))
    task = task_env_args(cfg.env, data)  # the data's MDP: online and evaluation envs alike
    info = env_info(task["name"], task["env_kwargs"] or None)
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

    ev = eval_env_args(cfg.env, data, task)
    ref_scores = data.ref_scores if data is not None else None

    def make_eval_env():
        return make_env(ev["name"], env_kwargs=ev["env_kwargs"], max_episode_steps=ev["max_episode_steps"])

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": obs_dim, "action_dim": action_dim, "train_env": task, "eval_env": ev,
                           "device": str(device),
                           "dataset_transitions": data.num_transitions if data is not None else 0,
                           "ref_scores": list(ref_scores) if ref_scores else None}
    title = f"{cfg.agent.name} on {cfg.env.name}"

    if cfg.agent.get("onpolicy") is not None:  # DPPO / Gaussian PPO / residual PPO: the on-policy loop
        from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

        ocfg = OnPolicyConfig(**OmegaConf.to_container(cfg.agent.onpolicy, resolve=True), progress=tcfg.progress)

        def make_chunk_envs():
            return make_env(task["name"], num_envs=ocfg.num_envs, seed=int(cfg.seed), vectorization=ocfg.vectorization,
                            action_chunk=int(getattr(agent.policy, "Te", 1)), env_kwargs=task["env_kwargs"],
                            max_episode_steps=task["max_episode_steps"])

        demos = None
        if ocfg.pretrain_steps > 0:
            if data is None:
                raise ConfigError("agent.onpolicy.pretrain_steps > 0 needs a dataset (it pretrains on it)")
            demos = ReplayBuffer.from_offline(data, gamma=float(cfg.agent.get("gamma", 0.99)), device=device,
                                              seed=int(cfg.seed))
        return OnPolicyTrainer(agent, run_dir, ocfg, make_train_envs=make_chunk_envs, make_eval_env=make_eval_env,
                               ref_scores=ref_scores, seed=int(cfg.seed), run_config=resolved, title=title,
                               offline_buffer=demos)

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
        return make_env(task["name"], num_envs=tcfg.num_envs, seed=int(cfg.seed), vectorization="sync",
                        env_kwargs=task["env_kwargs"], max_episode_steps=task["max_episode_steps"])

    return Trainer(agent, run_dir, tcfg, offline_buffer=buffer, make_eval_env=make_eval_env,
                   make_train_envs=make_train_envs, ref_scores=ref_scores,
                   seed=int(cfg.seed), run_config=resolved, title=title,
                   reward_scale=r_scale, reward_bias=r_bias, mc_sparse_fill=fill,
                   gamma=float(cfg.agent.get("gamma", 0.99)))
