"""Diffusion-policy losses (pure functions).

Symbols: ``B`` batch, ``Ta`` chunk length, ``Da`` action size.
"""

from __future__ import annotations

import torch


def noise_prediction_loss(eps_pred: torch.Tensor, eps: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """DDPM ε-prediction loss (Ho et al. 2020): mean of ``(ε̂ - ε)²`` over valid entries.

    Args:
        eps_pred, eps: ``(B, Ta, Da)``.
        mask: ``(B, Ta)`` bool, False for chunk steps past an episode's end (excluded);
            ``None``: all valid.

    Returns:
        Scalar loss.
    """
    err = (eps_pred - eps).pow(2)
    if mask is None:
        return err.mean()
    m = mask.to(err.dtype)[..., None].expand_as(err)
    return (err * m).sum() / m.sum().clamp(min=1.0)
