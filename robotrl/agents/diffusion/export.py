"""A deterministic, traceable chunk sampler of a diffusion policy, for TorchScript/ONNX export.

Symbols: ``B`` batch, ``Do`` observation size, ``To`` observation history,
``Ta`` chunk length, ``Da`` action size, ``n`` chain length (``K`` DDPM steps or the
DDIM steps). The module runs the policy's own inference chain (DDPM, or DDIM with the
policy's fixed number of steps and η) with every random draw replaced by noise fixed at
export time: ``x_n`` ``(1, Ta, Da)`` and one ``(1, Ta, Da)`` noise per step. It is
therefore a plain function ``obs (B, Do) -> chunk (B, Ta, Da)`` (``To = 1``), or of the last ``To``
observations ``(B, To, Do)``, oldest first (``To > 1``; the deploy side keeps that history,
:class:`robotrl.real_robot.export.DeployPolicy`), raw units, normalisers inside, that :func:`robotrl.real_robot.export.export_policy` traces. For a batch of one
it equals :func:`~robotrl.agents.diffusion.sampling.sample_chain` with a generator
seeded like the export (the tests check this); DPPO policies export their fine-tuned
steps because the chain asks ``policy.net_for_step(k)`` for each step's timestep ``k``. A policy with cameras
exports the same chain on its features: ``(state (B, Ds), {camera: uint8 (B, H, W, C)}) -> (B, Ta, Da)``
(``To > 1``: ``(B, To, Ds)`` and ``(B, To, H, W, C)``, oldest first), its encoder inside.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from robotrl.agents.diffusion.sampling import chain_timesteps, step_mean_std


def as_history(obs: torch.Tensor, To: int) -> torch.Tensor:
    """An exported chunk module's input as a raw history ``(B, To, Do)``: ``(B, Do)`` for ``To = 1``, the last
    ``To`` observations ``(B, To, Do)`` (oldest first) otherwise.

    Raises:
        ValueError: the input is not ``(B, To, Do)`` for ``To > 1`` (a single observation carries no history).
    """
    if obs.dim() == 2 and To == 1:
        return obs[:, None]
    if not torch.jit.is_tracing() and (obs.dim() != 3 or obs.shape[1] != To):  # the traced input's shape is fixed
        raise ValueError(f"this policy conditions on the last To={To} observations: pass them as (B, {To}, Do), "
                         f"oldest first, not {tuple(obs.shape)}")
    return obs


class DiffusionChunkExport(nn.Module):
    """``obs (B, Do)`` (``To = 1``) or ``(B, To, Do)`` ``-> chunk (B, Ta, Da)`` with fixed noise (see module doc);
    a camera policy's also takes its frames ``{camera: uint8 (B, H, W, C)}`` (``(B, To, H, W, C)``).

    Args:
        policy: a :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy` (or DPPO's), with or without cameras.
        seed: seed of the fixed noise.
    """

    def __init__(self, policy: nn.Module, seed: int = 0):
        super().__init__()
        self.policy = policy
        self.sampler = policy.sampler
        ks, ks_prev = chain_timesteps(policy.K, policy.sampler, policy.ddim_steps)
        self.ks, self.ks_prev = [int(k) for k in ks], [int(k) for k in ks_prev]
        self.nets = nn.ModuleList([policy.net_for_step(k) for k in self.ks])
        gen = torch.Generator().manual_seed(seed)
        shape = (1, policy.Ta, policy.action_dim)
        x_n = torch.randn(shape, generator=gen)
        noise = []
        for _ in self.ks:  # same draw order as sample_chain: x_n, then one noise per step
            noise.append(torch.randn(shape, generator=gen).clamp(-policy.eps_clip, policy.eps_clip))
        self.register_buffer("x_n", x_n)
        self.register_buffer("noise", torch.stack(noise))
        self.min_std = policy.eval_min_std if policy.sampler == "ddpm" else 0.0
        self.eta = policy.ddim_eta

    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Raw ``(B, Do)`` (``To = 1``) or history ``(B, To, Do)`` (with cameras and their frames ``(B, H, W, C)``
        or ``(B, To, H, W, C)``) → ``(B, Ta, Da)`` raw actions."""
        if images is not None and self.policy.To == 1 and obs.dim() == 2:
            images = {k: v[:, None] for k, v in images.items()}
        return self.chunk(self.policy.condition(as_history(obs, self.policy.To), images))

    def chunk(self, cond: torch.Tensor) -> torch.Tensor:
        """The fixed-noise chain on a normalised condition ``(B, To, Do)`` → raw chunk ``(B, Ta, Da)``."""
        x = self.x_n.expand(cond.shape[0], -1, -1)
        n = len(self.ks)
        for i in range(n):
            k = torch.full_like(cond[:, 0, 0], self.ks[i]).long()
            kp = torch.full_like(cond[:, 0, 0], self.ks_prev[i]).long()
            mean, std = step_mean_std(self.policy.schedule, self.nets[i], x, k, kp, cond, self.sampler, self.eta)
            if i == n - 1:
                x = mean
            else:
                x = mean + std.clamp(min=self.min_std) * self.noise[i]
        return self.policy.action_scaler.unnormalize(x.clamp(-1.0, 1.0))
