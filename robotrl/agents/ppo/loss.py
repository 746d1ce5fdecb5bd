"""PPO losses (pure functions), shared by Gaussian PPO and DPPO.

Schulman et al. 2017; symbols: ``M`` minibatch of samples (env steps, or DPPO's
(env step, denoising step) pairs).
"""

from __future__ import annotations

import torch


def normalize_advantages(adv: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(adv - mean) / (std + eps)`` over the minibatch ``(M,)`` (unchanged if ``M == 1``)."""
    if adv.numel() < 2:
        return adv
    return (adv - adv.mean()) / (adv.std() + eps)


def ppo_policy_loss(logp_new: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor,
                    clip: torch.Tensor | float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate ``-E[min(ρ A, clip(ρ, 1-ε, 1+ε) A)]`` with ``ρ = exp(logp_new - logp_old)``.

    Args:
        logp_new, logp_old, adv: ``(M,)``.
        clip: ``ε`` scalar or per-sample ``(M,)`` (DPPO's per-denoising-step schedule).

    Returns:
        ``(loss, {"approx_kl", "clipfrac", "ratio"})`` — ``approx_kl`` is
        ``E[(ρ-1) - log ρ]`` (Schulman's low-variance estimator), detached.
    """
    log_ratio = logp_new - logp_old
    ratio = log_ratio.exp()
    clip = torch.as_tensor(clip, dtype=ratio.dtype, device=ratio.device)
    loss = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv).mean()
    with torch.no_grad():
        stats = {"approx_kl": ((ratio - 1) - log_ratio).mean(),
                 "clipfrac": ((ratio - 1).abs() > clip).float().mean(), "ratio": ratio.mean()}
    return loss, stats


def value_loss(v_pred: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """``0.5 · mean((V - R)²)`` over ``(M,)``."""
    return 0.5 * (v_pred - returns).pow(2).mean()


def gaussian_log_prob(x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """Element-wise ``log N(x; mean, std²)`` (broadcasting), same shape as ``x``."""
    var = std * std
    return -((x - mean) ** 2) / (2 * var) - std.log() - 0.5 * torch.log(torch.tensor(2 * torch.pi, dtype=x.dtype, device=x.device))
