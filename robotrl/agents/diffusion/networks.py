"""Noise-prediction networks ``ε_θ(x^k, k, s)`` of the diffusion policy.

Symbols: ``B`` batch, ``To`` observation history, ``Do`` observation size, ``Ta``
action chunk length, ``Da`` action size. Inputs: noisy chunk ``x (B, Ta, Da)``,
timesteps ``k (B,)`` (int), normalised observation history ``cond (B, To, Do)``;
output: predicted noise ``(B, Ta, Da)``.

- :class:`MLPDenoiser` — DPPO's state-task denoiser (irom-princeton/dppo
  ``model/diffusion/mlp_diffusion.py``): sinusoidal time embedding → MLP, input
  ``[x flat, t_emb, cond flat]``, optionally residual blocks (default: 3 residual blocks of
  width 512 with Mish, the reference's setting).
- :class:`UNet1DDenoiser` — a compact conditional 1D temporal UNet over the chunk with
  FiLM conditioning (Diffusion Policy, Chi et al. 2023, ``ConditionalUnet1D``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from robotrl.networks import activation


class SinusoidalEmbedding(nn.Module):
    """``k (B,) -> (B, dim)`` sinusoidal embedding (Vaswani et al.), ``dim`` even."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freq = torch.exp(torch.arange(half, device=k.device, dtype=torch.float32) * (-math.log(10000.0) / max(half - 1, 1)))
        arg = k.float()[:, None] * freq[None]
        return torch.cat([arg.sin(), arg.cos()], dim=-1)


class ResidualBlock(nn.Module):
    """``h + Linear(act(Linear(act(h))))`` on ``(B, H)`` (pre-activation, DPPO's ``TwoLayerPreActivationResNetLinear``)."""

    def __init__(self, width: int, act: str):
        super().__init__()
        self.net = nn.Sequential(activation(act), nn.Linear(width, width), activation(act), nn.Linear(width, width))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.net(h)


class MLPDenoiser(nn.Module):
    """MLP / residual-MLP noise predictor ``(x (B,Ta,Da), k (B,), cond (B,To,Do)) -> (B,Ta,Da)``.

    Args:
        obs_dim, action_dim, obs_horizon, action_horizon: ``Do``, ``Da``, ``To``, ``Ta``.
        hidden: widths; with ``residual`` all widths must be equal (one residual block
            per entry after the input layer, DPPO's 3×512 is ``[512, 512, 512]``).
        time_dim: size of the time embedding.
        act: activation name (DPPO: mish).
        residual: residual blocks instead of a plain MLP.
    """

    def __init__(self, obs_dim: int, action_dim: int, obs_horizon: int, action_horizon: int,
                 hidden: Sequence[int] = (512, 512, 512), *, time_dim: int = 16, act: str = "mish",
                 residual: bool = True):
        super().__init__()
        self.shape = (action_horizon, action_dim)
        self.time_emb = nn.Sequential(SinusoidalEmbedding(time_dim), nn.Linear(time_dim, 2 * time_dim),
                                      activation(act), nn.Linear(2 * time_dim, time_dim))
        d_in = action_horizon * action_dim + time_dim + obs_horizon * obs_dim
        hidden = list(hidden)
        if residual:
            if len(set(hidden)) != 1:
                raise ValueError(f"residual MLP needs equal widths, got {hidden}")
            layers = [nn.Linear(d_in, hidden[0])] + [ResidualBlock(hidden[0], act) for _ in hidden] + \
                     [activation(act), nn.Linear(hidden[0], action_horizon * action_dim)]
        else:
            layers, d = [], d_in
            for h in hidden:
                layers += [nn.Linear(d, h), activation(act)]
                d = h
            layers.append(nn.Linear(d, action_horizon * action_dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor, k: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        h = torch.cat([x.reshape(B, -1), self.time_emb(k), cond.reshape(B, -1)], dim=-1)
        return self.net(h).view(B, *self.shape)


class _FiLMConvBlock(nn.Module):
    """Two Conv1d+GroupNorm+Mish layers on ``(B, C, Ta)``; FiLM ``(scale, bias)`` from the condition."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel: int = 5, groups: int = 8):
        super().__init__()
        g = math.gcd(groups, c_out)
        self.conv1 = nn.Sequential(nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(g, c_out), nn.Mish())
        self.conv2 = nn.Sequential(nn.Conv1d(c_out, c_out, kernel, padding=kernel // 2), nn.GroupNorm(g, c_out), nn.Mish())
        self.film = nn.Sequential(nn.Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        scale, bias = self.film(c).unsqueeze(-1).chunk(2, dim=1)
        h = self.conv1(x) * (1 + scale) + bias
        return self.conv2(h) + self.skip(x)


class UNet1DDenoiser(nn.Module):
    """Conditional 1D UNet over the chunk's time axis (Chi et al. 2023), sized for small ``Ta``.

    Args:
        obs_dim, action_dim, obs_horizon, action_horizon: ``Do``, ``Da``, ``To``, ``Ta``.
        channels: channel widths per level (down-sampling by 2 between levels; ``Ta``
            must be divisible by ``2^(levels-1)``).
        time_dim: size of the time embedding.

    Raises:
        ValueError: ``Ta`` not divisible by ``2^(len(channels)-1)``.
    """

    def __init__(self, obs_dim: int, action_dim: int, obs_horizon: int, action_horizon: int,
                 channels: Sequence[int] = (64, 128), *, time_dim: int = 32, kernel: int = 3):
        super().__init__()
        channels = list(channels)
        if action_horizon % (2 ** (len(channels) - 1)):
            raise ValueError(f"Ta={action_horizon} must be divisible by {2 ** (len(channels) - 1)} for a "
                             f"{len(channels)}-level UNet")
        self.time_emb = nn.Sequential(SinusoidalEmbedding(time_dim), nn.Linear(time_dim, 2 * time_dim), nn.Mish(),
                                      nn.Linear(2 * time_dim, time_dim))
        cd = time_dim + obs_horizon * obs_dim
        self.down = nn.ModuleList()
        c_prev = action_dim
        for c in channels:
            self.down.append(_FiLMConvBlock(c_prev, c, cd, kernel))
            c_prev = c
        self.mid = _FiLMConvBlock(c_prev, c_prev, cd, kernel)
        self.up = nn.ModuleList(_FiLMConvBlock(c + c_lo, c_lo, cd, kernel)
                                for c, c_lo in zip(reversed(channels[1:]), reversed(channels[:-1])))
        self.out = nn.Conv1d(channels[0], action_dim, 1)

    def forward(self, x: torch.Tensor, k: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        c = torch.cat([self.time_emb(k), cond.reshape(B, -1)], dim=-1)
        h = x.transpose(1, 2)  # (B, Da, Ta)
        skips = []
        for i, block in enumerate(self.down):
            h = block(h, c)
            if i < len(self.down) - 1:
                skips.append(h)
                h = nn.functional.avg_pool1d(h, 2)
        h = self.mid(h, c)
        for block in self.up:
            h = nn.functional.interpolate(h, scale_factor=2, mode="nearest")
            h = block(torch.cat([h, skips.pop()], dim=1), c)
        return self.out(h).transpose(1, 2)


def build_denoiser(kind: str, obs_dim: int, action_dim: int, obs_horizon: int, action_horizon: int,
                   **kwargs) -> nn.Module:
    """``kind``: ``"mlp"`` (residual MLP), ``"plain_mlp"`` or ``"unet"``.

    Raises:
        ValueError: unknown ``kind``.
    """
    if kind == "mlp":
        return MLPDenoiser(obs_dim, action_dim, obs_horizon, action_horizon, residual=True, **kwargs)
    if kind == "plain_mlp":
        return MLPDenoiser(obs_dim, action_dim, obs_horizon, action_horizon, residual=False, **kwargs)
    if kind == "unet":
        return UNet1DDenoiser(obs_dim, action_dim, obs_horizon, action_horizon, **kwargs)
    raise ValueError(f"unknown denoiser {kind!r}; choose mlp, plain_mlp or unet")
