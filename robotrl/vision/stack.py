"""Frame stacking for pixel policies: the last ``k`` frames of each camera along channels.

Convention (DrQ, SERL): a stacked camera input is uint8 ``(B, H, W, k·C)``, the frames oldest first
(channels ``j·C .. j·C + C − 1`` hold frame ``t − k + 1 + j``). Before an episode's first frame, the
first frame is repeated (an episode's first stack is ``k`` copies of its first frame), and a stack
never reaches into the previous episode. The replay buffer builds the same stacks from its single
stored copy of each frame by index (:meth:`robotrl.data.ReplayBuffer.sample` with ``frame_stack``,
:func:`robotrl.data.frames.stack_channels`);
:class:`FrameHistory` builds them step by step where a policy acts (evaluation, exploration, the
online actor, deployment), so a policy sees at run time exactly the input it was trained on.

Symbols: ``N`` envs (or ``B`` batch), ``k`` frames per stack, ``H, W, C`` frame size.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

__all__ = ["FrameHistory", "stacked_shapes"]


def stacked_shapes(image_shapes: Mapping[str, tuple[int, ...] | list[int]], k: int) -> dict[str, tuple[int, int, int]]:
    """Cameras ``{key: (H, W, C)}`` -> the stacked inputs ``{key: (H, W, k·C)}``."""
    return {key: (int(s[0]), int(s[1]), int(s[2]) * int(k)) for key, s in image_shapes.items()}


class FrameHistory:
    """Per-env stacks of the last ``k`` frames of each camera, for a policy acting step by step.

    :meth:`push` takes each env's newest frames ``{key: uint8 (N, H, W, C)}`` and returns the stacks
    ``{key: uint8 (N, H, W, k·C)}``; an env whose episode just started (after :meth:`reset` of its id,
    or the first push) gets ``k`` copies of its frame. Row ``i`` is always env ``i``; a push with
    another ``N`` than the last starts every env afresh. ``k = 1`` returns the frames unchanged.

    Args:
        k: frames per stack (``>= 1``).

    Raises:
        ValueError: ``k < 1``.
    """

    def __init__(self, k: int):
        if int(k) < 1:
            raise ValueError(f"frame_stack must be >= 1, got {k}")
        self.k = int(k)
        self._stacks: dict[str, torch.Tensor] = {}
        self._fresh: torch.Tensor | None = None  # (N,) bool: env starts an episode at its next push

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Start the episodes of ``env_ids`` (``None``: every env) afresh at their next push."""
        if env_ids is None or self._fresh is None:
            self._stacks, self._fresh = {}, None
            return
        ids = torch.as_tensor(np.asarray(env_ids, np.int64).reshape(-1), device=self._fresh.device)
        self._fresh[ids] = True

    def push(self, images: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Newest frames ``{key: uint8 (N, H, W, C)}`` -> stacks ``{key: uint8 (N, H, W, k·C)}``, oldest first."""
        if self.k == 1:
            return dict(images)
        first = next(iter(images.values()))
        n = first.shape[0]
        if self._fresh is None or self._fresh.shape[0] != n or set(self._stacks) != set(images):
            self._stacks, self._fresh = {}, torch.ones(n, dtype=torch.bool, device=first.device)
        fresh = self._fresh.to(first.device)[:, None, None, None]
        out = {}
        for key, frame in images.items():
            repeated = frame.repeat(1, 1, 1, self.k)  # (N, H, W, k·C): k copies, an episode's first stack
            old = self._stacks.get(key)
            out[key] = repeated if old is None else torch.where(
                fresh, repeated, torch.cat([old[..., frame.shape[-1]:], frame], dim=-1))
        self._stacks = out
        self._fresh = torch.zeros_like(self._fresh)
        return out
