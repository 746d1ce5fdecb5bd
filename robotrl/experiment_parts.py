"""The pieces every run is built from, shared by the one build path (:func:`robotrl.experiment.build_trainer`),
the robot learner (:func:`robotrl.real_robot.online_cli.build_learner`) and Ray workers
(:func:`robotrl.distributed.collector.build_worker_agent`): the agent (:func:`build_agent`, from the run's
:class:`~robotrl.spec.ObservationSpec`), the observation normaliser and action scaler, the reward transform
(with Cal-QL's sparse fill) and the offline buffer, and the warm start's observation check."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig

from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer
from robotrl.data.dataset import OfflineData
from robotrl.errors import ConfigError, RobotRLError
from robotrl.schema import RetentionConfig
from robotrl.spec import ObservationSpec
from robotrl.trainer import TrainerConfig


def observation_normalizer(data: OfflineData | None, dim: int, clip: float | None,
                           std_floor: float | None = None) -> ObservationNormalizer:
    """The agents' observation normaliser ``(Do,)``: the data's statistics (std floored at ``std_floor``, the dataset
    config's ``obs_std_floor``), values clamped to ``±clip`` (``agent.model.obs_clip``); identity without data."""
    if data is None:
        return ObservationNormalizer.identity(dim)
    return ObservationNormalizer.from_data(data.observations, clip=clip, std_floor=std_floor)


def action_scaler_for(action_space: gym.Space, data: OfflineData | None) -> ActionScaler:
    """The env's action bounds when they are finite (``|bound| < 1e6``), else the data's action range.

    Raises:
        AttributeError: unbounded actions and no dataset (``data`` is ``None``).
    """
    if isinstance(action_space, gym.spaces.Box) and bool((abs(action_space.low) < 1e6).all()
                                                          and (abs(action_space.high) < 1e6).all()):
        return ActionScaler.from_space(action_space)
    return ActionScaler.from_data(data.actions)  # type: ignore[union-attr]


def reward_transform(agent_cfg: DictConfig) -> tuple[float, float, float | None]:
    """``(scale, bias, fill)`` of the agent config: rewards enter every buffer as ``scale·r + bias``;
    ``fill`` is Cal-QL's never-solved sparse fill in those transformed units (``None``: off)."""
    r_scale, r_bias = float(agent_cfg.get("reward_scale", 1.0)), float(agent_cfg.get("reward_bias", 0.0))
    fill = agent_cfg.get("mc_sparse_fill")
    return r_scale, r_bias, None if fill is None else r_scale * float(fill) + r_bias


def transformed_rewards(agent_cfg: DictConfig, data: OfflineData) -> OfflineData:
    """``data`` with the agent's reward transform applied once (:func:`reward_transform`)."""
    r_scale, r_bias, _ = reward_transform(agent_cfg)
    if (r_scale, r_bias) == (1.0, 0.0):
        return data
    return dataclasses.replace(data, rewards=(r_scale * data.rewards + r_bias).astype(np.float32))


def replay_buffer(agent_cfg: DictConfig, spec: ObservationSpec, data: OfflineData | None, *, device: torch.device | str,
                  seed: int, extra_capacity: int = 0, num_envs: int = 1) -> ReplayBuffer:
    """A :class:`~robotrl.data.ReplayBuffer` for ``spec`` holding ``data`` (``None``: empty) with the reward
    transform applied once and Cal-QL's sparse fill (:func:`reward_transform`), room for ``extra_capacity``
    more transitions from ``num_envs`` writers (the robot learner's demonstration buffer, which fills with
    interventions), frames stored once as uint8 and sampled in stacks of ``spec.frame_stack``.

    Raises:
        ConfigError: ``data`` has other cameras than ``spec``.
    """
    _, _, fill = reward_transform(agent_cfg)
    n = data.num_transitions if data is not None else 0
    shapes = {k: tuple(v) for k, v in spec.image_shapes.items()} or None
    if data is not None and {k: tuple(v.shape[1:]) for k, v in (data.images or {}).items()} != (shapes or {}):
        raise ConfigError(f"dataset {data.metadata.get('dataset_id')!r} has cameras "
                          f"{ {k: tuple(v.shape[1:]) for k, v in (data.images or {}).items()} }, the run observes "
                          f"{shapes or {}}: record the data with the run's cameras, or choose obs= to match the data")
    buf = ReplayBuffer(max(1, n + int(extra_capacity)), spec.obs_dim, spec.action_dim,
                       gamma=float(agent_cfg.get("gamma", 0.99)), num_envs=num_envs, mc_sparse_fill=fill, device=device,
                       seed=seed, image_shapes=shapes, frame_stack=spec.frame_stack if shapes else 1)
    if data is not None:
        buf.add_offline(transformed_rewards(agent_cfg, data))
    return buf


def retention_reads_data(agent_cfg: DictConfig) -> bool:
    """Whether ``agent.model.retention`` (:class:`robotrl.schema.RetentionConfig`) samples the pretraining data
    online (BC, replay, or a KL on dataset states).

    Raises:
        ConfigError: a bad retention setting (one line naming it).
    """
    model = agent_cfg.get("model") or {}
    return RetentionConfig.from_mapping(model.get("retention")).reads_data


def offline_buffer(agent_cfg: DictConfig, data: OfflineData | None, tcfg: TrainerConfig, device: torch.device,
                   seed: int, frame_stack: int = 1) -> ReplayBuffer | None:
    """The offline :class:`~robotrl.data.ReplayBuffer` (cameras included: frames stored once as uint8, transitions
    sampled with stacks of ``frame_stack`` frames, the observation spec's) with the
    reward transform applied once (:func:`reward_transform`), or ``None`` when no phase reads offline rows
    (no dataset, ``offline_steps == 0``, ``offline_ratio == 0`` and no knowledge retention that reads the
    pretraining data, :func:`retention_reads_data`)."""
    if data is None or not (tcfg.offline_steps > 0 or tcfg.offline_ratio > 0 or retention_reads_data(agent_cfg)):
        return None
    _, _, fill = reward_transform(agent_cfg)
    return ReplayBuffer.from_offline(transformed_rewards(agent_cfg, data), gamma=float(agent_cfg.get("gamma", 0.99)),
                                     device=device, seed=seed, mc_sparse_fill=fill,
                                     frame_stack=frame_stack if data.images else 1)


def build_agent(model: DictConfig, spec: ObservationSpec, *, obs_normalizer, action_scaler, device: torch.device | str,
                seed: int) -> Any:
    """The agent of ``model`` (``cfg.agent.model``, ``_target_`` and settings) for the observation ``spec``.

    Every run builds its agent here: simulation (states or cameras), the robot learner, Ray workers.
    Explicit arguments only: ``spec``'s sizes (:meth:`~robotrl.spec.ObservationSpec.agent_kwargs`: ``obs_dim``,
    ``action_dim`` and, with cameras, ``image_shapes``, ``state_layout``, ``frame_stack``), ``obs_normalizer``,
    ``action_scaler``, ``device``, ``seed``.

    Raises:
        RobotRLError: the constructor's own (``ConfigError`` for a residual base that does not fit the run,
            ``CheckpointError``, ...), not wrapped in Hydra's ``InstantiationException``.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(model, **spec.agent_kwargs(), obs_normalizer=obs_normalizer, action_scaler=action_scaler, device=device,
                           seed=int(seed), _convert_="all")
    except InstantiationException as exc:
        if isinstance(exc.__cause__, RobotRLError):
            raise exc.__cause__ from None
        raise


def check_warm_start_spec(source: str | Path, spec: ObservationSpec) -> None:
    """Refuse a warm start whose pretraining run observed something else than this run: other cameras or
    frame size, another ``Do`` or ``Da`` (the weights cannot be loaded; the architecture keys, by contrast,
    are adopted: :func:`warm_start_architecture`).

    Raises:
        ConfigError: each difference named (pretraining run, this run), with the way out.
        CheckpointError: the checkpoint cannot be read (a missing one is left to the warm start's own error).
    """
    from robotrl.checkpoint import load_checkpoint

    path = Path(str(source))
    if not path.exists():
        return
    recorded = load_checkpoint(path).get("config") or {}
    derived = recorded.get("derived") or {}
    if not derived:
        return  # written by a loop that records no sizes (weights are checked on load)
    theirs = {"cameras {key: [H, W, C]}": {k: list(v) for k, v in (derived.get("image_shapes") or {}).items()},
              "state size Do": derived.get("obs_dim"), "action size Da": derived.get("action_dim")}
    mine = {"cameras {key: [H, W, C]}": {k: list(v) for k, v in spec.image_shapes.items()},
            "state size Do": spec.obs_dim, "action size Da": spec.action_dim}
    if spec.has_cameras:  # frames per camera stack into the encoder's input channels
        theirs["obs.frame_stack"] = int((derived.get("observation") or {}).get("frame_stack")
                                        or ((recorded.get("agent") or {}).get("model") or {}).get("frame_stack") or 1)
        mine["obs.frame_stack"] = spec.frame_stack
    diff = {k: (theirs[k], mine[k]) for k in theirs if theirs[k] != mine[k]}
    if diff:
        raise ConfigError(f"trainer.init_from={source} was pretrained on other observations than this run; differences "
                          f"(pretraining run, this run): {diff}. Its weights cannot be loaded: fine-tune on the "
                          f"pretraining run's dataset (dataset.id={(recorded.get('dataset') or {}).get('id')}) and "
                          "observation (obs=...), or pretrain again on this run's and point trainer.init_from at it")
