"""Flow-matching loss (pure function).

Conditional flow matching with the rectified-flow path (Lipman et al. 2023; Liu et al.
2023): regress ``v_θ(x_t, t, s)`` on ``x1 - x0``. Symbols: ``B`` batch, ``Ta`` chunk
length, ``Da`` action size.
"""

from __future__ import annotations

import torch

from robotrl.agents.diffusion.loss import noise_prediction_loss


def flow_matching_loss(v_pred: torch.Tensor, v_target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``(v̂ - v)²`` over valid entries (the same masked MSE as diffusion's ε loss).

    Args:
        v_pred, v_target: ``(B, Ta, Da)``.
        mask: ``(B, Ta)`` bool, False for chunk steps past an episode's end; ``None``: all valid.

    Returns:
        Scalar loss.
    """
    return noise_prediction_loss(v_pred, v_target, mask)
