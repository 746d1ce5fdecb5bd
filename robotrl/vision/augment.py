"""Image augmentation for Q-learning on pixels: DrQ's random shift.

Symbols: ``B`` batch, ``C`` channels, ``H, W`` frame height/width, ``p`` the pad.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["random_shift"]


def random_shift(images: torch.Tensor, pad: int = 4, *, generator: torch.Generator | None = None,
                 return_shifts: bool = False):
    """Shift every frame by its own random integer offset in ``[-p, p]`` (DrQ random shift).

    The frames are padded by ``p`` pixels on each side by repeating the border (``replicate``),
    then each sample's ``H x W`` window is cut at its own offset ``(dy, dx)`` drawn uniformly
    from ``{0, ..., 2p}^2`` (Kostrikov, Yarats & Fergus 2020, "Image Augmentation Is All You
    Need", DrQ; Yarats et al. 2021 DrQ-v2; SERL uses ``p = 4`` at 128 px). One gather, no loop.

    Args:
        images: ``(B, C, H, W)`` (any float dtype, or uint8: the output keeps the dtype).
        pad: ``p >= 0``; 0 returns ``images`` unchanged.
        generator: torch generator for the offsets (on ``images``' device), for reproducibility.
        return_shifts: also return the offsets ``int64 (B, 2)`` as ``(dy, dx)`` in ``[0, 2p]``.

    Returns:
        ``(B, C, H, W)`` shifted frames (and the offsets if asked).

    Raises:
        ValueError: ``images`` is not 4-D or ``pad`` is negative.
    """
    if images.dim() != 4:
        raise ValueError(f"random_shift expects (B, C, H, W) frames, got shape {tuple(images.shape)}")
    if pad < 0:
        raise ValueError(f"pad must be >= 0, got {pad}")
    B, C, H, W = images.shape
    if pad == 0:
        shifts = torch.full((B, 2), 0, dtype=torch.long, device=images.device)
        return (images, shifts) if return_shifts else images
    dtype = images.dtype
    x = images.float() if not images.is_floating_point() else images
    x = F.pad(x, (pad, pad, pad, pad), mode="replicate")
    shifts = torch.randint(0, 2 * pad + 1, (B, 2), generator=generator, device=images.device)
    rows = (shifts[:, 0, None] + torch.arange(H, device=images.device)[None])  # (B, H)
    cols = (shifts[:, 1, None] + torch.arange(W, device=images.device)[None])  # (B, W)
    b = torch.arange(B, device=images.device)[:, None, None]
    out = x.permute(0, 2, 3, 1)[b, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)  # (B, C, H, W)
    out = out.to(dtype).contiguous()
    return (out, shifts) if return_shifts else out
