"""Evaluation without an environment: held-out episodes of the dataset instead of rollouts.

A robot user's first dataset (teleoperated demonstrations recorded on the robot, or converted from
LeRobot) has no simulator behind it. ``robotrl train`` on such a dataset (no ``env_spec`` and no
``env.name``) trains offline and, where it would roll the policy out, measures it on episodes held
out of training (:func:`split_episodes`, ``trainer.validation_fraction``):

- every policy: the action error of replaying each held-out episode's observations through the
  deployable policy exactly as it acts (reset at the episode start, its own chunk queues and
  observation history): ``val_action_mse`` in raw action units² and ``val_action_mse_norm`` in the
  policy's normalised units ([-1, 1] per dimension), so runs with other action scales compare;
- agents with a critic (:class:`CriticAgent`, the Q-learning family): ``val_q_minus_mc``, the mean
  of ``Q(s, a) − G`` on the held-out transitions (``G`` the discounted Monte-Carlo return in the
  agent's reward units: the calibration Cal-QL's bound aims at), ``val_q_mc_corr`` (their Pearson
  correlation) and ``val_td_error``, the mean squared SARSA TD error
  ``(Q(s, a) − r − γ (1 − terminated) Q(s', a'))²`` with the data's next action ``a'``.

Checkpoints of such a run deploy through the bridge as any other (``robotrl deploy``).
"""

from __future__ import annotations

import math
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from robotrl.data.batch import Batch
from robotrl.data.dataset import OfflineData
from robotrl.data.replay import ReplayBuffer
from robotrl.errors import ConfigError
from robotrl.policy import act

__all__ = ["CriticAgent", "Validator", "split_episodes", "select_episodes"]


@runtime_checkable
class CriticAgent(Protocol):
    """An agent with an ensemble critic (:class:`robotrl.agents.qlearning.QLAgent`)."""

    frame_stack: int

    def batch_q_values(self, batch: Batch) -> torch.Tensor:
        """Ensemble ``Q(s, a)`` ``(N, B)`` of a replay batch (raw units; camera frames in ``batch.extras``)."""
        ...


def select_episodes(data: OfflineData, episodes: np.ndarray) -> OfflineData:
    """The dataset restricted to ``episodes`` (indices into its episodes, in that order); camera frames
    follow their transitions.

    Raises:
        ValueError: an index out of range.
    """
    episodes = np.asarray(episodes, np.int64)
    if episodes.size and (episodes.min() < 0 or episodes.max() >= data.num_episodes):
        raise ValueError(f"episode indices {episodes.tolist()} out of range 0..{data.num_episodes - 1}")
    starts, ends = data.episode_starts[episodes], data.episode_ends[episodes]
    rows = np.concatenate([np.arange(s, e) for s, e in zip(starts, ends)]) if episodes.size else np.zeros(0, np.int64)
    lengths = ends - starts
    new_starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if episodes.size else starts
    images, image_index = None, None
    if data.images is not None and data.image_index is not None:
        frames, index, offset = [], [], 0
        for s, e in zip(starts, ends):
            first = int(data.image_index[s])
            frames.append(np.arange(first, int(data.image_index[e - 1]) + 2))  # the episode's T + 1 frames
            index.append(data.image_index[s:e] - first + offset)
            offset += len(frames[-1])
        rows_img = np.concatenate(frames) if frames else np.zeros(0, np.int64)
        images = {k: v[rows_img] for k, v in data.images.items()}
        image_index = np.concatenate(index).astype(np.int64) if index else np.zeros(0, np.int64)
    return OfflineData(
        observations=data.observations[rows], actions=data.actions[rows], rewards=data.rewards[rows],
        next_observations=data.next_observations[rows], terminated=data.terminated[rows], truncated=data.truncated[rows],
        episode_starts=new_starts, episode_ends=(new_starts + lengths).astype(np.int64),
        observation_space=data.observation_space, action_space=data.action_space, obs_layout=data.obs_layout,
        success=None if data.success is None else data.success[rows], metadata=dict(data.metadata),
        images=images, image_index=image_index)


def split_episodes(data: OfflineData, fraction: float, seed: int) -> tuple[OfflineData, OfflineData]:
    """``(train, held_out)``: a seeded random ``fraction`` of the episodes (at least one) held out.

    Raises:
        ConfigError: fewer than two episodes, or ``fraction`` outside (0, 1).
    """
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"trainer.validation_fraction={fraction} must lie in (0, 1): the share of episodes held out "
                          "to measure a run without an env")
    n = data.num_episodes
    if n < 2:
        raise ConfigError(f"dataset {data.metadata.get('dataset_id')!r} has {n} episode: a run without an env holds "
                          "episodes out to measure the policy; record at least two episodes (or name the env: env.name=...)")
    k = min(n - 1, max(1, int(round(fraction * n))))
    order = np.random.default_rng(seed).permutation(n)
    held, kept = np.sort(order[:k]), np.sort(order[k:])
    return select_episodes(data, kept), select_episodes(data, held)


class Validator:
    """Measures a policy (and its agent's critic) on held-out episodes (module doc).

    Args:
        held_out: the episodes held out of training, rewards already in the agent's units
            (:func:`robotrl.experiment_parts.transformed_rewards`).
        gamma: discount of the Monte-Carlo returns and TD targets.
        mc_sparse_fill: Cal-QL's never-solved fill, as the training buffers use it (``None``: off).
    """

    def __init__(self, held_out: OfflineData, *, gamma: float = 0.99, mc_sparse_fill: float | None = None):
        self.data = held_out
        self.gamma, self.mc_sparse_fill = float(gamma), mc_sparse_fill
        self._buffers: dict[int, ReplayBuffer] = {}

    def _buffer(self, frame_stack: int) -> ReplayBuffer:
        """The held-out transitions with their MC returns (camera frames stacked ``frame_stack`` deep, as the
        agent's replay stacks them); built once per stack depth."""
        if frame_stack not in self._buffers:
            kw = {"frame_stack": frame_stack} if self.data.images else {}
            self._buffers[frame_stack] = ReplayBuffer.from_offline(self.data, gamma=self.gamma,
                                                                   mc_sparse_fill=self.mc_sparse_fill, **kw)
        return self._buffers[frame_stack]

    @torch.no_grad()
    def action_errors(self, policy: nn.Module) -> tuple[float, float]:
        """``(mse raw, mse normalised)`` of the policy's actions on the held-out observations, each episode
        replayed from its start as the policy acts (all episodes side by side, one batch row each); a camera policy
        (``image_keys``) gets each row's recorded frames, uint8 ``(B, H, W, C)`` per camera."""
        d = self.data
        starts, lengths = d.episode_starts, d.episode_ends - d.episode_starts
        T = int(lengths.max())
        policy.reset(None)
        pred = np.zeros_like(d.actions)
        keys = list(getattr(policy, "image_keys", None) or [])  # a camera policy also reads each row's frames
        device = next((p.device for p in policy.parameters()), torch.device("cpu"))
        for t in range(T):
            rows = starts + np.minimum(t, lengths - 1)  # an ended episode repeats its last observation (ignored)
            if keys and d.images is not None and d.image_index is not None:
                frames = {k: torch.as_tensor(d.images[k][d.image_index[rows]], device=device) for k in keys}
                a = policy(torch.as_tensor(d.observations[rows], device=device), frames).cpu().numpy()
            else:
                a = act(policy, d.observations[rows])
            live = t < lengths
            pred[rows[live]] = a[live]
        err = pred - d.actions
        scaler = policy.action_scaler
        low, high = scaler.low.cpu().numpy(), scaler.high.cpu().numpy()
        norm = 2.0 * err / np.maximum(high - low, 1e-8)
        return float(np.mean(err ** 2)), float(np.mean(norm ** 2))

    @torch.no_grad()
    def critic_metrics(self, agent: CriticAgent) -> dict[str, float]:
        """``val_q_minus_mc``, ``val_q_mc_corr``, ``val_td_error`` (module doc) on the held-out transitions."""
        b = self._buffer(agent.frame_stack)
        n = b.size
        q = np.concatenate([agent.batch_q_values(b.sample(len(rows), indices=rows, allow_small=True)).mean(0).cpu().numpy()
                            for rows in np.array_split(np.arange(n), max(1, -(-n // 1024)))])
        g = b.mc_returns[:n]
        ok = np.isfinite(g)
        out = {"val_q_minus_mc": float(np.mean(q[ok] - g[ok])) if ok.any() else math.nan}
        out["val_q_mc_corr"] = float(np.corrcoef(q[ok], g[ok])[0, 1]) if ok.sum() > 2 and np.std(g[ok]) > 0 else math.nan
        nxt = b.next_idx[:n]
        has = nxt >= 0
        if has.any():
            q_next = q[nxt[has]]
            target = b.rewards[:n][has] + self.gamma * (1.0 - b.terminated[:n][has]) * q_next
            out["val_td_error"] = float(np.mean((q[has] - target) ** 2))
        return out

    def __call__(self, agent) -> dict[str, float | str | int]:
        """The validation record of ``agent`` (``agent.policy`` and, where it has one, its critic)."""
        mse, mse_norm = self.action_errors(agent.policy)
        out: dict[str, float | str | int] = {"evaluation": "validation", "val_action_mse": mse,
                                              "val_action_mse_norm": mse_norm, "val_episodes": self.data.num_episodes,
                                              "val_transitions": self.data.num_transitions}
        if isinstance(agent, CriticAgent):
            out.update(self.critic_metrics(agent))
        return out
