"""ReinFlow's loss pieces (pure functions): bounded noise std, exact chain log-likelihood,
chain entropy, W2 behaviour-cloning regulariser, the noise-bound schedule and the learning-rate schedule.

Zhang et al. 2025, "ReinFlow: Fine-tuning Flow Matching Policy with Online Reinforcement
Learning" (ReinFlow/ReinFlow ``model/flow/ft_ppo/ppoflow.py``, ``model/flow/mlp_flow.py``).
Symbols: ``M`` minibatch of env steps, ``K`` Euler steps of the chain, ``Ta``/``Da`` chunk
length / action size.

The noisy chain is the Markov process ``x_0 ~ N(0, I)``,
``x_{k+1} ~ N(μ_k, diag σ_k²)`` with ``μ_k = clip(x_k + v_θ(x_k, t_k, s)/K)`` and
``σ_k = σ_θ'(s, t_k[, x_k])``; its log-likelihood is exactly
``log N(x_0; 0, I) + Σ_k log N(x_{k+1}; μ_k, σ_k²)`` (summed over the ``Ta×Da`` entries).
ReinFlow (``normalize_denoising_horizon`` and ``normalize_act_space_dimension``, both on in
its Gym/robomimic runs) divides it by ``(K+1)·Ta·Da`` and clamps it to ``[-1, 1]``.
"""

from __future__ import annotations

import math

import torch

_LOG_2PI = math.log(2 * math.pi)


def bounded_std(raw: torch.Tensor, std_min: float | torch.Tensor, std_max: float | torch.Tensor) -> torch.Tensor:
    """ReinFlow's squashing of a raw network output into ``[std_min, std_max]`` (same shape).

    ``log σ² = log σ_min² + (log σ_max² − log σ_min²)·(tanh(raw) + 1)/2``, ``σ = exp(½ log σ²)``.
    """
    lo = torch.as_tensor(std_min, dtype=raw.dtype, device=raw.device).log() * 2
    hi = torch.as_tensor(std_max, dtype=raw.dtype, device=raw.device).log() * 2
    return torch.exp(0.5 * (lo + (hi - lo) * (torch.tanh(raw) + 1) / 2))


def chain_log_prob(chain: torch.Tensor, means: torch.Tensor, stds: torch.Tensor, *, include_initial: bool = True,
                   normalize: bool = True) -> torch.Tensor:
    """Log-likelihood ``(M,)`` of recorded noisy Euler chains.

    Args:
        chain: ``(M, K+1, Ta, Da)``: ``x_0`` (the starting noise) … ``x_K`` (the final sample as stored: clamped to
            the action box by default, :class:`~robotrl.agents.reinflow.agent.ReinFlowAgent`).
        means, stds: ``(M, K_s, Ta, Da)`` of the last ``K_s <= K`` transitions ``x_k → x_{k+1}`` (stds > 0; the
            first ``K − K_s`` steps are deterministic and contribute no factor).
        include_initial: add ``log N(x_0; 0, I)`` (ReinFlow's ``account_for_initial_stochasticity``;
            a constant of the parameters, it shifts every log-prob and cancels in PPO ratios).
        normalize: divide by the number of Gaussian factors ``(K_s + include_initial)·Ta·Da``.

    Returns:
        ``(M,)`` log-probs (per entry when ``normalize``).
    """
    nxt = chain[:, chain.shape[1] - means.shape[1]:]
    z = (nxt - means) / stds
    lp = (-0.5 * z * z - stds.log() - 0.5 * _LOG_2PI).flatten(1).sum(-1)
    n = means[0].numel()
    if include_initial:
        x0 = chain[:, 0]
        lp = lp + (-0.5 * x0 * x0 - 0.5 * _LOG_2PI).flatten(1).sum(-1)
        n += x0[0].numel()
    return lp / n if normalize else lp


def chain_entropy(stds: torch.Tensor, *, include_initial: bool = True, normalize: bool = True) -> torch.Tensor:
    """Entropy ``(M,)`` of the chain's Gaussian factors (``Σ ½ log(2πe σ²)``, ``+ ½ log(2πe)`` per
    entry of ``x_0``), normalised like :func:`chain_log_prob` (ReinFlow's entropy-rate estimate).

    Args:
        stds: ``(M, K_s, Ta, Da)`` of the random transitions.
    """
    h = (0.5 * (_LOG_2PI + 1) + stds.log()).flatten(1).sum(-1)
    n = stds[0].numel()
    if include_initial:
        per = stds[0, 0].numel()
        h = h + 0.5 * (_LOG_2PI + 1) * per
        n += per
    return h / n if normalize else h


def w2_bc_loss(actions: torch.Tensor, ref_actions: torch.Tensor) -> torch.Tensor:
    """ReinFlow's ``W2`` regulariser: ``mean((a_θ − a_ref)²)`` between the fine-tuned and the
    frozen pretrained flow's deterministic chunks from the same ``x_0`` (both ``(M, Ta, Da)``;
    ``ref_actions`` is detached here)."""
    return (actions - ref_actions.detach()).pow(2).mean()


def decayed_max_std(iteration: int, total_iters: int | None, std_min: float, std_max: float, *,
                    hold_ratio: float = 0.35, decay_ratio: float = 0.7) -> float:
    """Upper noise bound of ``iteration`` under ReinFlow's ``learn_decay`` schedule.

    Held at ``std_max`` for the first ``hold_ratio·total_iters`` iterations, then cosine-annealed
    to ``std_min·(1 − decay_ratio) + std_max·decay_ratio`` at ``total_iters``; ``total_iters``
    ``None`` (or 0): constant ``std_max``. Stds in normalised action units (the chain's ``[−1, 1]`` box).
    Source: ReinFlow/ReinFlow ``model/flow/ft_ppo/ppoflow.py`` (``noise_scheduler_type: learn_decay``,
    ``max_noise_hold_ratio``, ``max_noise_decay_ratio``).
    """
    if not total_iters:
        return float(std_max)
    end = std_min * (1 - decay_ratio) + std_max * decay_ratio
    hold = hold_ratio * total_iters
    p = min(max((iteration - hold) / max(total_iters - hold, 1e-9), 0.0), 1.0)
    return float(end + (std_max - end) * 0.5 * (1 + math.cos(math.pi * p)))


def warmup_cosine_lr(iteration: int, max_lr: float, min_lr: float | None, cycle: int = 100, warmup: int = 10) -> float:
    """Learning rate of ``iteration`` (0-based count of the optimiser's schedule steps) under ReinFlow's
    ``CosineAnnealingWarmupRestarts`` (ReinFlow/ReinFlow ``util/scheduler.py``, cycle multiplier and γ 1, as its
    configs use it): within each ``cycle`` of iterations, a linear rise from ``min_lr`` to ``max_lr`` over the first
    ``warmup``, then a cosine from ``max_lr`` down to ``min_lr`` over the rest; the first iteration runs at
    ``min_lr``. ``min_lr`` ``None``: constant ``max_lr``.

    Raises:
        ValueError: ``warmup >= cycle`` or ``cycle < 1``.
    """
    if min_lr is None:
        return float(max_lr)
    if cycle < 1 or not 0 <= warmup < cycle:
        raise ValueError(f"the learning-rate cycle needs 0 <= warmup < cycle, got warmup={warmup}, cycle={cycle}")
    c = max(int(iteration), 0) % cycle
    if c < warmup:
        return float(min_lr + (max_lr - min_lr) * c / warmup)
    return float(min_lr + (max_lr - min_lr) * (1 + math.cos(math.pi * (c - warmup) / (cycle - warmup))) / 2)
