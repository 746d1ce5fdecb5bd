"""Losses of the warm-start Q-learning agents (pure functions, no module state).

Symbols: ``B`` batch, ``N`` critic heads, ``R`` sampled actions per state (CQL),
``Da`` action size. Q-values are in (scaled) reward units; rewards, discounts and MC
returns come from :class:`robotrl.data.Batch` already transformed (the data layer
applies reward scale/bias once, see :mod:`robotrl.experiment`).

References: SAC (Haarnoja et al. 2018), CQL(H) (Kumar et al. 2020) and Cal-QL
(Nakamoto et al. 2023, github.com/nakamotoo/Cal-QL, JaxCQL's ``conservative_sac``),
IQL (Kostrikov et al. 2021, github.com/ikostrikov/implicit_q_learning), RLPD/WSRL
ensemble targets (github.com/ikostrikov/rlpd, github.com/zhouzypaul/wsrl).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch

Critic = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (B, Do), (B, Da) -> (N, B)


def subset_min(q: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
    """Min over a subset of ensemble heads: ``q (N, B)``, ``heads (M,)`` indices -> ``(B,)``.

    RLPD/WSRL draw ``M = 2`` of ``N = 10`` target heads at random per update; with
    ``M = N`` it is the clipped double-Q minimum of SAC/CQL.
    """
    return q.index_select(0, heads).min(dim=0).values


def td_target(rewards: torch.Tensor, discounts: torch.Tensor, terminated: torch.Tensor,
              next_value: torch.Tensor) -> torch.Tensor:
    """``y = r + γ^m (1 - terminated) V(s')``, all ``(B,)``; only termination stops bootstrapping.

    ``rewards`` is the n-step discounted sum and ``discounts = γ^m`` (see
    :class:`robotrl.data.Batch`); a truncated step still bootstraps.
    """
    return rewards + discounts * (1.0 - terminated) * next_value


def critic_td_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Squared TD error of every head: ``q (N, B)``, ``target (B,)`` (no grad) -> scalar.

    Mean over ``B``, summed over ``N`` (each head gets the gradient it would get alone,
    as the two ``qf_loss`` terms of SAC/CQL's reference code).
    """
    return (q - target.unsqueeze(0)).pow(2).mean(dim=1).sum()


def cql_penalty(
    q_data: torch.Tensor,
    q_rand: torch.Tensor,
    q_pi: torch.Tensor,
    q_next_pi: torch.Tensor,
    logp_pi: torch.Tensor,
    logp_next_pi: torch.Tensor,
    action_dim: int,
    *,
    mc_lower_bound: torch.Tensor | None = None,
    temperature: float = 1.0,
    clip_diff: tuple[float, float] = (-math.inf, math.inf),
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CQL(H) regulariser with optional Cal-QL calibration; returns ``(penalty (N,), info)``.

    ``penalty_i = clip(T·logsumexp_R(cat[Q_rand - log U, Q_next_pi - log π', Q_pi - log π] / T)
    - mean_B Q_data, clip_diff)`` averaged over ``B`` (the logsumexp is over the ``3R``
    sampled actions of each state; ``log U = Da·log 0.5`` is the uniform density on
    ``[-1, 1]^Da``).

    Cal-QL: where ``mc_lower_bound`` is given, ONLY the policy-action values ``q_pi``
    and ``q_next_pi`` are floored at ``V^μ(s)`` (the Monte Carlo return-to-go) before the
    logsumexp; the uniform-action values and the data values are never bounded. Rows
    with no known return (``-inf``, e.g. an online episode still running) are unbounded.

    Args:
        q_data: ``(N, B)`` Q of the dataset actions.
        q_rand, q_pi, q_next_pi: ``(N, B, R)`` Q(s, ·) of uniform actions, current-policy
            actions at s, and policy actions sampled at s' (all evaluated at s).
        logp_pi, logp_next_pi: ``(B, R)`` log-probs of those policy actions (no grad).
        action_dim: ``Da``.
        mc_lower_bound: ``(B,)`` Cal-QL's ``V^μ(s)`` or ``None`` (plain CQL).
        temperature: CQL's logsumexp temperature ``T``.
        clip_diff: clamp of the per-state gap (JaxCQL's ``cql_clip_diff_min/max``).

    Returns:
        ``(N,)`` per-head penalty (multiply by α) and ``info`` with ``cql_ood`` (mean
        logsumexp) and ``calql_bound_rate`` (fraction of policy values raised by the bound).
    """
    info: dict[str, torch.Tensor] = {}
    if mc_lower_bound is not None:
        lb = mc_lower_bound.view(1, -1, 1)
        info["calql_bound_rate"] = (q_pi < lb).float().mean().detach()
        q_pi = torch.maximum(q_pi, lb)
        q_next_pi = torch.maximum(q_next_pi, lb)
    log_uniform = action_dim * math.log(0.5)
    cat = torch.cat([q_rand - log_uniform, q_next_pi - logp_next_pi.unsqueeze(0), q_pi - logp_pi.unsqueeze(0)], dim=2)
    ood = torch.logsumexp(cat / temperature, dim=2) * temperature  # (N, B)
    gap = (ood - q_data).clamp(*clip_diff)
    info["cql_ood"] = ood.mean().detach()
    return gap.mean(dim=1), info


def sac_actor_loss(q_pi: torch.Tensor, logp: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """``E[α log π(a|s) - Q(s, a)]``: ``q_pi (B,)`` (ensemble mean or min), ``logp (B,)`` -> scalar."""
    return (alpha * logp - q_pi).mean()


def temperature_loss(log_alpha: torch.Tensor, logp: torch.Tensor, target_entropy: float) -> torch.Tensor:
    """SAC v2 temperature loss ``-E[α (log π + H_target)]`` with ``logp (B,)`` detached -> scalar."""
    return -(log_alpha.exp() * (logp.detach() + target_entropy)).mean()


def expectile_loss(diff: torch.Tensor, expectile: float) -> torch.Tensor:
    """IQL's asymmetric L2: ``|τ - 1(diff < 0)| · diff²`` averaged; ``diff = Q - V`` ``(B,)`` -> scalar."""
    weight = torch.where(diff < 0, 1.0 - expectile, expectile)
    return (weight * diff.pow(2)).mean()


def awr_actor_loss(log_prob: torch.Tensor, advantage: torch.Tensor, beta: float,
                   max_weight: float = 100.0) -> tuple[torch.Tensor, torch.Tensor]:
    """IQL policy extraction ``-E[min(exp(β A), w_max) log π(a|s)]``; ``(B,)`` each -> (loss, weights (B,))."""
    w = torch.exp(beta * advantage.detach()).clamp(max=max_weight)
    return -(w * log_prob).mean(), w


def sac_critic_loss(critic: Critic, obs: torch.Tensor, act: torch.Tensor,
                    target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """SAC's critic loss (also WSRL/RLPD/PORL online): :func:`critic_td_loss` of every head.

    Args:
        critic: the ensemble ``Q``; obs ``(B, Do)`` normalised, act ``(B, Da)`` in ``[-1, 1]``;
        target: ``(B,)`` TD target (no grad).

    Returns:
        ``(loss, q (N, B), {})``.
    """
    q = critic(obs, act)
    return critic_td_loss(q, target), q, {}


def cql_critic_loss(critic: Critic, obs: torch.Tensor, act: torch.Tensor, target: torch.Tensor,
                    a_rand: torch.Tensor, a_pi: torch.Tensor, logp_pi: torch.Tensor, *, n_actions: int,
                    alpha: float, temperature: float = 1.0, clip_diff: tuple[float, float] = (-math.inf, math.inf),
                    mc_lower_bound: torch.Tensor | None = None,
                    rows: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """CQL(H) / Cal-QL critic loss: TD on every row + ``α·Σ_heads`` :func:`cql_penalty` on ``rows``, all
    ``3R+1`` actions per state scored in ONE ensemble pass (Kumar et al. 2020; Nakamoto et al. 2023; JaxCQL).

    The penalty covers every row (CQL, Cal-QL) or the ``n`` rows ``rows`` (SUNG's uncertainty-drawn subset, Guo
    et al. 2023, :mod:`robotrl.agents.qlearning.sung`); with ``rows=None`` ``n = B``.

    Args:
        critic: the ensemble ``Q``; obs ``(B, Do)``, act ``(B, Da)``, target ``(B,)`` as in
            :func:`sac_critic_loss`.
        a_rand: ``(R·n, Da)`` uniform actions in ``[-1, 1]``.
        a_pi, logp_pi: ``(2·R·n, Da)``, ``(2·R·n,)`` policy samples, rows ``R`` blocks of ``n``
            at ``s'`` then ``R`` blocks at ``s`` (no grad).
        n_actions: ``R``.
        alpha, temperature, clip_diff: CQL's weight, logsumexp temperature, gap clamp.
        mc_lower_bound: ``(n,)`` Cal-QL's ``V^μ(s)`` of the penalised rows or ``None`` (plain CQL).
        rows: ``(n,)`` indices of the penalised rows, or ``None`` for all ``B``.

    Returns:
        ``(loss, q (N, B) of the data actions, {"td_loss", "cql_penalty", "cql_ood"[, "calql_bound_rate"]})``.
    """
    B, R, Da = obs.shape[0], n_actions, act.shape[-1]
    pen = obs if rows is None else obs[rows]
    n = pen.shape[0]
    # rows: data (B) | uniform (R·n) | policy at s' (R·n) | policy at s (R·n); all scored at s
    q_all = critic(torch.cat([obs, pen.repeat(3 * R, 1)]), torch.cat([act, a_rand, a_pi]))  # (N, B + 3R·n)
    q = q_all[:, :B]
    rest = q_all[:, B:].reshape(q.shape[0], 3, R, n).permute(1, 0, 3, 2)  # (3, N, n, R)
    lp = logp_pi.reshape(2, R, n).transpose(1, 2)  # (2, n, R): s', s
    penalty, info = cql_penalty(q if rows is None else q[:, rows], rest[0], rest[2], rest[1], lp[1], lp[0], Da,
                                mc_lower_bound=mc_lower_bound, temperature=temperature, clip_diff=clip_diff)
    td = critic_td_loss(q, target)
    loss = td + alpha * penalty.sum()
    return loss, q, {"td_loss": td.detach(), "cql_penalty": penalty.mean().detach(), **info}


def q_minus_mc(q: torch.Tensor, mc_returns: torch.Tensor) -> torch.Tensor:
    """How far the critic sits from the data's Monte-Carlo returns: ``mean_B(mean_N Q(s, a) - G)``
    over the rows with a finite return ``G`` (NaN when none): the critic's scale check.

    A Cal-QL/CQL critic trained too briefly sits far above ``G`` on sparse tasks (its values
    have not propagated the per-step cost over the horizon yet), and WSRL then spends its first
    online updates dragging the whole critic down instead of improving the policy. ``G`` of a
    time-limited episode is cut at the limit where ``Q`` bootstraps past it, so a calibrated
    critic sits somewhat below ``G`` on failed episodes; the gap's trend is what to watch.

    Args:
        q: ``(N, B)`` ensemble values of the data actions; mc_returns: ``(B,)`` returns-to-go
            in the agent's reward units (``-inf``/NaN: unknown).
    """
    ok = torch.isfinite(mc_returns)
    if not bool(ok.any()):
        return torch.tensor(float("nan"), device=q.device)
    return (q.mean(0)[ok] - mc_returns[ok]).mean()


class IQLLosses(NamedTuple):
    """What :func:`iql_critic_losses` returns: both losses, ``q (N, B)``, ``target (B,)``, the
    advantage ``Q̄(s, a) - V(s)`` ``(B,)`` the AWR actor uses, and ``mean V`` (all but the losses detached)."""

    value_loss: torch.Tensor
    critic_loss: torch.Tensor
    q: torch.Tensor
    target: torch.Tensor
    advantage: torch.Tensor
    v_mean: torch.Tensor


def iql_critic_losses(critic: Critic, critic_target: Critic, value: Callable[[torch.Tensor], torch.Tensor],
                      obs: torch.Tensor, act: torch.Tensor, nobs: torch.Tensor, rewards: torch.Tensor,
                      discounts: torch.Tensor, terminated: torch.Tensor, expectile: float) -> IQLLosses:
    """IQL's value and critic losses (Kostrikov et al. 2021, github.com/ikostrikov/implicit_q_learning).

    ``V`` regresses the min over the target heads with :func:`expectile_loss`; ``Q`` regresses
    ``r + γ^m (1 - terminated) V(s')``. The two losses touch disjoint networks, so they may be
    stepped one after the other.

    Args:
        critic, critic_target: ensembles ``(B, Do), (B, Da) -> (N, B)``; value: ``(B, Do) -> (B,)``.
        obs, nobs: ``(B, Do)`` normalised; act ``(B, Da)`` in ``[-1, 1]``.
        rewards, discounts, terminated: ``(B,)`` as in :func:`td_target`.
        expectile: ``τ``.

    Returns:
        :class:`IQLLosses`.
    """
    with torch.no_grad():
        q_t = critic_target(obs, act).min(0).values
        target = td_target(rewards, discounts, terminated, value(nobs))
    v = value(obs)
    value_loss = expectile_loss(q_t - v, expectile)
    q = critic(obs, act)
    return IQLLosses(value_loss, critic_td_loss(q, target), q, target, q_t - v.detach(), v.detach().mean())
