"""DPPO's loss pieces (pure functions): clip schedule, denoising-step discount, chunk log-prob.

Ren et al. 2024, "Diffusion Policy Policy Optimization" (irom-princeton/dppo
``model/diffusion/diffusion_ppo.py``). Symbols: ``M`` minibatch of (env step, denoising
step) pairs, ``K'`` fine-tuned denoising steps, ``i ∈ [0, K')`` the index of a fine-tuned
step (0 = noisiest, ``K'-1`` = final), ``Ta``/``Te``/``Da`` predicted / executed chunk
length and action size.
"""

from __future__ import annotations

import math

import torch

from robotrl.errors import ConfigError


def clip_schedule(ft_steps: int, clip: float, clip_base: float, rate: float = 3.0) -> torch.Tensor:
    """Per-denoising-step PPO clip ``ε_i`` ``(K',)``, growing towards the final step.

    ``ε_i = ε_base + (ε − ε_base)·(exp(rate·i/(K'−1)) − 1)/(exp(rate) − 1)``. For ``K' = 1``
    the original divides 0/0; here the only step is the final one and gets ``ε``.

    Raises:
        ConfigError: ``ft_steps < 1``.
    """
    if ft_steps < 1:
        raise ConfigError(f"agent.model.ft_denoising_steps must be >= 1 (the fine-tuned chain's last steps), "
                          f"got {ft_steps}")
    if ft_steps == 1:
        return torch.tensor([float(clip)])
    i = torch.arange(ft_steps, dtype=torch.float64)
    frac = (torch.exp(rate * i / (ft_steps - 1)) - 1) / (math.exp(rate) - 1)
    return (clip_base + (clip - clip_base) * frac).float()


def denoising_discount(ft_steps: int, gamma_denoising: float) -> torch.Tensor:
    """Advantage multiplier ``γ_denoise^(K'−1−i)`` per fine-tuned step ``(K',)`` (1 at the final step).

    Raises:
        ConfigError: ``ft_steps < 1``.
    """
    if ft_steps < 1:
        raise ConfigError(f"agent.model.ft_denoising_steps must be >= 1, got {ft_steps}")
    i = torch.arange(ft_steps, dtype=torch.float64)
    return (gamma_denoising ** (ft_steps - 1 - i)).float()


def chunk_log_prob(logp: torch.Tensor, act_steps: int, clamp: tuple[float, float] = (-5.0, 2.0)) -> torch.Tensor:
    """Scalar log-prob per pair ``(M,)`` from element-wise log-probs ``(M, Ta, Da)``.

    As in DPPO: clamp each entry to ``clamp`` (``[-5, 2]``), keep the executed ``Te`` rows,
    average over the ``Te×Da`` entries.
    """
    return logp.clamp(*clamp)[:, :act_steps].mean(dim=(-1, -2))
