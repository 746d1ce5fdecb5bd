"""A deterministic, traceable chunk sampler of a flow policy, for TorchScript/ONNX export.

Symbols: ``B`` batch, ``Do`` observation size, ``To`` observation history,
``Ta`` chunk length, ``Da`` action size, ``K`` Euler steps. The module runs the policy's
``K``-step Euler chain from a starting noise ``x_0`` ``(1, Ta, Da)`` fixed at export time,
so it is a plain function ``obs (B, Do) -> chunk (B, Ta, Da)`` (``To = 1``; ``(B, To, Do)``, the last
``To`` observations oldest first, for ``To > 1``), raw units, normalisers inside, that :func:`robotrl.real_robot.export.export_policy` traces. It equals
:meth:`FlowPolicy.sample_normalized` given the same ``x_0`` (the tests check this).
Fine-tuned ReinFlow policies export their fine-tuned velocity network (noise off).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from robotrl.agents.diffusion.export import as_history
from robotrl.agents.flow.sampling import euler_mean


class FlowChunkExport(nn.Module):
    """``obs (B, Do)`` (``To = 1``) or ``(B, To, Do)`` ``-> chunk (B, Ta, Da)`` with a fixed ``x_0`` (module doc).

    Args:
        policy: a :class:`~robotrl.agents.flow.policy.FlowPolicy` (or ReinFlow's).
        seed: seed of the fixed ``x_0``.
    """

    def __init__(self, policy: nn.Module, seed: int = 0):
        super().__init__()
        self.policy = policy
        self.K = int(policy.K)
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("x0", torch.randn((1, policy.Ta, policy.action_dim), generator=gen))

    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Raw ``(B, Do)`` (``To = 1``) or history ``(B, To, Do)`` (with cameras and their frames ``(B, H, W, C)``
        or ``(B, To, H, W, C)``) → ``(B, Ta, Da)`` raw actions."""
        if images is not None and self.policy.To == 1 and obs.dim() == 2:
            images = {k: v[:, None] for k, v in images.items()}
        cond = self.policy.condition(as_history(obs, self.policy.To), images)
        x = self.x0.expand(obs.shape[0], -1, -1)
        for i in range(self.K):
            t = torch.full_like(cond[:, 0, 0], i / self.K)
            x = euler_mean(self.policy.velocity, x, t, cond, 1.0 / self.K, self.policy.x_clip)
        return self.policy.action_scaler.unnormalize(x.clamp(-1.0, 1.0))
