"""The agent protocols the loops drive: :class:`OffPolicyAgent` and :class:`OnPolicyAgent`.

An agent owns the training-only parts (losses, optimizers, critics, targets) and exposes
its deployable :class:`~robotrl.policy.Policy` as ``agent.policy``. Agents are built by
Hydra from ``configs/agent/*.yaml`` (``_target_``) with sizes and normalisers passed in
explicitly by :func:`robotrl.experiment.build_trainer`; the core never imports an agent
module by name.

Each protocol lists the members every agent of its kind has; the *optional hooks* (listed
per protocol, in :data:`OFF_POLICY_HOOKS` / :data:`ON_POLICY_HOOKS`) are found by the loops
with ``getattr`` and change the loop only where an agent defines them.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from robotrl.data.batch import Batch

#: Optional members of an off-policy agent, and what :class:`~robotrl.trainer.OffPolicyLoop` does with them:
#:
#: - ``sample_batch(buffer, batch_size) -> Batch``: the agent samples its own offline batches
#:   (sequences, action chunks) instead of ``buffer.sample(batch_size, n_step=...)``.
#: - ``start_online() -> None``: called once when the online phase starts (e.g. Cal-QL's bound
#:   switched off for SAC fine-tuning, WSRL).
#: - ``needs_mc_returns: bool``: updates use MC returns-to-go (Cal-QL): online rows only from
#:   ended episodes, updates wait for the first one.
#: - ``load_parts(state, parts) -> None``: load named parts (``policy``, ``critic``, ...) of an
#:   agent state (partial warm starts).
#: - ``init_from_data(buffer) -> None``: called once before the first offline update of a fresh run
#:   (not warm-started, not resumed) with the offline replay buffer (e.g. the critic's output
#:   started at the data's mean return).
OFF_POLICY_HOOKS = ("sample_batch", "start_online", "needs_mc_returns", "load_parts", "init_from_data")

#: Optional members of an on-policy agent, and what :class:`~robotrl.onpolicy.OnPolicyLoop` does with them:
#:
#: - ``load_pretrained(path) -> None``: initialise from a pretrained checkpoint (``init_from``).
#: - ``bc_update(batch) -> metrics``: one behaviour-cloning update (``pretrain_steps`` before going online).
#: - ``reset_rollout(env_ids) -> None``: those envs start a new episode (per-env state such as a
#:   base policy's chunk queue).
ON_POLICY_HOOKS = ("load_pretrained", "bc_update", "reset_rollout")


@runtime_checkable
class OffPolicyAgent(Protocol):
    """One gradient step per :meth:`update`; acting for online collection via :meth:`explore`.

    Optional hooks: :data:`OFF_POLICY_HOOKS`.
    """

    policy: nn.Module

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One gradient update on ``batch``; returns scalar metrics for logging."""
        ...

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Exploration actions ``(N, Da)`` raw units for observations ``(N, Do)``."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume: networks, optimizers, generators (tensors/containers only)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        ...


@runtime_checkable
class OnPolicyAgent(Protocol):
    """Rollouts with :meth:`rollout_act`, one iteration of updates per :meth:`update_rollout`.

    ``policy`` has ``To`` (observation history) and ``Te`` (executed chunk length); ``gamma``
    is the discount of the running reward scaler, ``reward_scaling`` whether it is on.
    Optional hooks: :data:`ON_POLICY_HOOKS`.
    """

    policy: nn.Module
    gamma: float
    reward_scaling: bool

    def rollout_act(self, obs_hist: np.ndarray) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Actions for observation histories ``(N, To, Do)`` raw: ``(N, Te, Da)`` or ``(N, Da)`` raw
        units, and extras ``{name: tensor (N, ...)}`` stored in the rollout."""
        ...

    def update_rollout(self, rollout: Any, iteration: int) -> dict[str, float]:
        """Updates on one :class:`~robotrl.onpolicy.Rollout`; returns scalar metrics."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume: networks, optimizers, generators (tensors/containers only)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        ...


#: The off-policy protocol under its former name.
Agent = OffPolicyAgent
