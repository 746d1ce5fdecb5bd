"""The agent protocol the trainer drives.

An agent owns the training-only parts (losses, optimizers, critics, targets) and exposes
its deployable :class:`~robotrl.policy.Policy` as ``agent.policy``. Agents are built by
Hydra from ``configs/agent/*.yaml`` (``_target_``) with sizes and normalisers passed in
explicitly by the trainer; the core never imports an agent module by name.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from torch import nn

from robotrl.data.batch import Batch


@runtime_checkable
class Agent(Protocol):
    """One gradient step per :meth:`update`; acting for online collection via :meth:`explore`."""

    policy: nn.Module

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One gradient update on ``batch``; returns scalar metrics for logging."""
        ...

    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Exploration actions ``(N, Da)`` raw units for observations ``(N, Do)``."""
        ...

    def state_dict(self) -> dict:
        """Everything needed to resume: networks, optimizers, schedules (tensors/containers only)."""
        ...

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        ...
