"""Observation and action normalisers computed from data and saved in every checkpoint.

Both are ``torch.nn.Module`` s whose statistics are registered buffers, so they travel
inside a policy's ``state_dict`` (a deployed policy uses exactly the numbers training
used; ``algorithms.md``, "Data semantics").

- :class:`ObservationNormalizer`: ``(o - mean) / std``, optionally clipped to ``±clip``.
- :class:`ActionScaler`: affine map between raw action bounds ``[low, high]`` and
  ``[-1, 1]`` (the space networks act in).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class ObservationNormalizer(nn.Module):
    """``(o - mean) / std`` over the last dimension ``Do``.

    Args:
        mean, std: ``(Do,)``; ``std`` is floored at ``eps``.
        clip: clamp normalised values to ``±clip`` (``None``: no clamp).
    """

    def __init__(self, mean, std, *, clip: float | None = None, eps: float = 1e-6):
        super().__init__()
        mean = torch.as_tensor(np.asarray(mean, np.float32))
        std = torch.as_tensor(np.maximum(np.asarray(std, np.float32), eps))
        self.register_buffer("mean", mean)
        self.register_buffer("std", std)
        self.clip = clip

    @classmethod
    def from_data(cls, observations: np.ndarray, *, std_floor: float | None = None, **kw) -> "ObservationNormalizer":
        """Statistics of ``observations (M, Do)``; constant features get ``std = 1``.

        ``std_floor``: raise every std to at least this (observation units; ResFiT's ``min_state_std`` 0.1), so a
        dimension that barely varies in a few demonstrations (Fetch's finger width: std ~2e-4) does not normalise
        to ``|z| >> 3`` when a policy leaves the demonstrated states. ``kw``: the constructor's (``clip``).
        """
        obs = np.asarray(observations, np.float64).reshape(-1, observations.shape[-1])
        std = obs.std(0)
        std = np.where(std < 1e-6, 1.0, std)
        if std_floor:
            std = np.maximum(std, float(std_floor))
        return cls(obs.mean(0), std, **kw)

    @classmethod
    def identity(cls, dim: int) -> "ObservationNormalizer":
        """No-op normaliser of size ``dim``."""
        return cls(np.zeros(dim), np.ones(dim))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(..., Do) -> (..., Do)``."""
        x = (obs - self.mean) / self.std
        return x.clamp(-self.clip, self.clip) if self.clip is not None else x

    def unnormalize(self, x: torch.Tensor) -> torch.Tensor:
        """Inverse of :meth:`forward` (ignoring the clip)."""
        return x * self.std + self.mean


class ActionScaler(nn.Module):
    """Affine map ``[low, high] <-> [-1, 1]`` per action dimension ``Da``.

    Args:
        low, high: ``(Da,)`` finite raw bounds (env action space, or data min/max).

    Raises:
        ValueError: infinite bounds or ``high <= low``.
    """

    def __init__(self, low, high):
        super().__init__()
        low, high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        if not (np.isfinite(low).all() and np.isfinite(high).all()):
            raise ValueError("action bounds must be finite; pass data min/max via ActionScaler.from_data")
        if np.any(high <= low):
            raise ValueError(f"action high must exceed low in every dimension, got low={low}, high={high}")
        self.register_buffer("low", torch.as_tensor(low))
        self.register_buffer("high", torch.as_tensor(high))

    @classmethod
    def from_space(cls, space) -> "ActionScaler":
        """From a gymnasium ``Box`` action space."""
        return cls(space.low.reshape(-1), space.high.reshape(-1))

    @classmethod
    def from_data(cls, actions: np.ndarray, margin: float = 1e-3) -> "ActionScaler":
        """From the min/max of ``actions (M, Da)``, widened by ``margin``."""
        a = np.asarray(actions, np.float32).reshape(-1, actions.shape[-1])
        lo, hi = a.min(0) - margin, a.max(0) + margin
        return cls(lo, hi)

    def normalize(self, action: torch.Tensor) -> torch.Tensor:
        """Raw ``(..., Da)`` → ``[-1, 1]``."""
        return 2.0 * (action - self.low) / (self.high - self.low) - 1.0

    def unnormalize(self, action: torch.Tensor) -> torch.Tensor:
        """``[-1, 1]`` ``(..., Da)`` → raw units, clipped to ``[low, high]``."""
        a = (action.clamp(-1.0, 1.0) + 1.0) * 0.5 * (self.high - self.low) + self.low
        return a
