"""Pieces of a run that every off-policy build shares (:func:`robotrl.experiment.build_trainer` and the camera
runs' :func:`robotrl.experiment_pixels.build_pixel_trainer`): the action scaler and the offline buffer with the
task's reward transform."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch
from omegaconf import DictConfig

from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer
from robotrl.data.dataset import OfflineData
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


def offline_buffer(agent_cfg: DictConfig, data: OfflineData | None, tcfg: TrainerConfig, device: torch.device,
                   seed: int) -> ReplayBuffer | None:
    """The offline :class:`~robotrl.data.ReplayBuffer` (cameras included: frames stored once as uint8, transitions
    sampled with stacks of ``agent.model.frame_stack`` frames) with the
    reward transform applied once (:func:`reward_transform`), or ``None`` when no phase reads offline rows
    (no dataset, ``offline_steps == 0`` and ``offline_ratio == 0``)."""
    if data is None or not (tcfg.offline_steps > 0 or tcfg.offline_ratio > 0):
        return None
    r_scale, r_bias, fill = reward_transform(agent_cfg)
    if (r_scale, r_bias) != (1.0, 0.0):
        data = dataclasses.replace(data, rewards=(r_scale * data.rewards + r_bias).astype(np.float32))
    return ReplayBuffer.from_offline(data, gamma=float(agent_cfg.get("gamma", 0.99)), device=device, seed=seed,
                                     mc_sparse_fill=fill, frame_stack=int((agent_cfg.get("model") or {}).get("frame_stack") or 1))
