"""Reverse-process sampling (DDPM and DDIM) with the knobs DPPO needs.

Symbols: ``B`` batch, ``To``/``Do`` observation history/size, ``Ta``/``Da`` chunk
length/action size, ``K`` training timesteps, ``n`` steps of the sampling chain
(``K`` for DDPM, ``ddim_steps`` for DDIM), ``K'`` fine-tuned (last) steps of the chain.

A chain runs steps ``i = 0 .. n-1`` (0 the noisiest). Step ``i`` goes from timestep
``ks[i]`` to ``ks_prev[i]`` (``-1`` after the last). Each step is the Gaussian
``x_{i+1} ~ N(mean_i, max(std_i, min_std)²)`` with the noise clipped to ``±eps_clip``
(DPPO ``randn_clip_value``); the final step's noise is dropped unless ``final_noise``
(DPPO's fine-tuning rollouts keep it). The network of step ``i`` is ``net_for_step(ks[i])``:
chosen by the step's *timestep*, as DPPO's ``p_mean_var`` does (``t < K'`` on a DDPM chain), so a
policy run on another chain than the one it was fine-tuned on still uses each network at the noise
levels it was trained for. Final chunks are clamped to ``[-1, 1]``; the recorded chain keeps the
unclamped final sample unless ``final_clip`` is set (DPPO's ``final_action_clip_value``, see
:func:`sample_chain`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from robotrl.agents.diffusion.schedule import DiffusionSchedule, ddim_timesteps


def chain_timesteps(K: int, sampler: str, ddim_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(ks (n,), ks_prev (n,))`` int64 of a DDPM (``n = K``) or DDIM (``n = ddim_steps``) chain.

    Raises:
        ValueError: unknown sampler or bad ``ddim_steps``.
    """
    if sampler == "ddpm":
        ks = torch.arange(K - 1, -1, -1)
    elif sampler == "ddim":
        ks = ddim_timesteps(K, ddim_steps)
    else:
        raise ValueError(f"sampler must be 'ddpm' or 'ddim', got {sampler!r}")
    return ks, torch.cat([ks[1:], torch.full((1,), -1, dtype=ks.dtype)])


def step_mean_std(schedule: DiffusionSchedule, net: nn.Module, x: torch.Tensor, k: torch.Tensor,
                  k_prev: torch.Tensor, cond: torch.Tensor, sampler: str, eta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean ``(B, Ta, Da)`` and unfloored std ``(B, 1, 1)`` of one reverse step.

    Args:
        x: latents ``(B, Ta, Da)``; k, k_prev: ``(B,)`` int timesteps; cond ``(B, To, Do)``.
        sampler: ``"ddpm"`` (``k_prev = k-1`` implied) or ``"ddim"`` with ``eta``.
    """
    eps = net(x, k, cond)
    if sampler == "ddpm":
        return schedule.ddpm_step(x, k, eps)
    return schedule.ddim_step(x, k, k_prev, eps, eta)


@torch.no_grad()
def sample_chain(
    schedule: DiffusionSchedule,
    net_for_step: Callable[[int], nn.Module],
    cond: torch.Tensor,
    shape: tuple[int, int],
    *,
    sampler: str = "ddpm",
    ddim_steps: int = 5,
    eta: float = 0.0,
    min_std: float = 1e-3,
    final_noise: bool = False,
    eps_clip: float = 3.0,
    record_last: int = 0,
    generator: torch.Generator | None = None,
    x_init: torch.Tensor | None = None,
    final_clip: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run the reverse process from ``x ~ N(0, I)``.

    Args:
        net_for_step: the noise network for a step at timestep ``k`` (int; DPPO: frozen or fine-tuned).
        cond: normalised observation history ``(B, To, Do)``.
        shape: ``(Ta, Da)``.
        min_std: std floor of every noisy step (DP/DPPO eval: 1e-3; DPPO rollouts: 0.1).
        final_noise: add noise at the last step too (DPPO fine-tuning rollouts).
        record_last: ``K'``: also return the last ``K'+1`` latents.
        generator: source of the starting noise and of every step's noise.
        x_init: the starting latent ``x_n (B, Ta, Da)`` (``None``: drawn from ``N(0, I)``).
        final_clip: DPPO's ``final_action_clip_value``: clamp the final sample to ``±final_clip``
            *before* it is recorded, so the chain's last entry (what DPPO's log-probs are computed
            on) is the clamped sample. ``None`` (DPPO's default, and what its Gym, Robomimic and
            Furniture fine-tuning configs use): the chain records the unclamped final sample.

    Returns:
        ``(x0 (B, Ta, Da) in [-1, 1], chain (B, K'+1, Ta, Da) or None)``; the chain's
        last entry is the final sample, unclamped unless ``final_clip``.

    Raises:
        ValueError: ``record_last`` longer than the chain.
    """
    B = cond.shape[0]
    ks, ks_prev = chain_timesteps(schedule.K, sampler, ddim_steps)
    n = len(ks)
    if record_last > n:
        raise ValueError(f"cannot fine-tune K'={record_last} steps of a {n}-step chain")
    x = torch.randn((B, *shape), device=cond.device, generator=generator) if x_init is None else x_init
    chain = [x] if record_last == n else []
    for i in range(n):
        k = torch.full((B,), int(ks[i]), device=cond.device, dtype=torch.long)
        kp = torch.full((B,), int(ks_prev[i]), device=cond.device, dtype=torch.long)
        mean, std = step_mean_std(schedule, net_for_step(int(ks[i])), x, k, kp, cond, sampler, eta)
        std = std.clamp(min=min_std)
        if i == n - 1 and not final_noise:
            std = torch.zeros_like(std)
        noise = torch.randn(mean.shape, device=mean.device, generator=generator)
        if eps_clip is not None:
            noise = noise.clamp(-eps_clip, eps_clip)
        x = mean + std * noise
        if final_clip is not None and i == n - 1:
            x = x.clamp(-final_clip, final_clip)
        if record_last and i >= n - record_last - 1:  # input of fine-tuned step i+1, or the final sample
            chain.append(x)
    return x.clamp(-1.0, 1.0), (torch.stack(chain, dim=1) if record_last else None)
