"""Behaviour-cloning losses (pure functions).

Symbols: ``B`` batch, ``Da`` action size; actions normalised to ``[-1, 1]``.
"""

from __future__ import annotations

import math

import torch


def mse_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Deterministic BC: mean over ``(B, Da)`` of ``(pred - target)²``."""
    return ((pred - target) ** 2).mean()


def gaussian_nll_loss(mean: torch.Tensor, log_std: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Gaussian BC: ``-log N(target; mean, exp(log_std)²)`` summed over ``Da``, averaged over ``B``.

    Args:
        mean, log_std, target: ``(B, Da)``.
    """
    z = (target - mean) * torch.exp(-log_std)
    nll = 0.5 * z.pow(2) + log_std + 0.5 * math.log(2 * math.pi)
    return nll.sum(-1).mean()
