"""The PPO minibatch loop shared by Gaussian PPO and residual PPO (Schulman et al. 2017).

Symbols: ``M`` valid env steps of a rollout, ``B`` minibatch size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np
import torch

from robotrl.agents.ppo.loss import normalize_advantages, ppo_policy_loss, value_loss


def optimizer_step(loss: torch.Tensor, opt: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter],
                   max_grad_norm: float | None) -> None:
    """``zero_grad → backward → clip grad norm → step``."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, max_grad_norm or float("inf"))
    opt.step()


def ppo_epochs(
    data: dict[str, torch.Tensor],
    *,
    critic: Callable[[torch.Tensor], torch.Tensor],
    critic_input: str,
    log_prob: Callable[[dict[str, torch.Tensor], torch.Tensor], torch.Tensor],
    critic_opt: torch.optim.Optimizer,
    critic_params: list[torch.nn.Parameter],
    actor_opt: torch.optim.Optimizer,
    actor_params: list[torch.nn.Parameter],
    n_epochs: int,
    batch_size: int,
    clip: float,
    vf_coef: float,
    max_grad_norm: float | None,
    target_kl: float | None,
    train_actor: bool,
    generator: torch.Generator,
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches of ``data``; early stop when approx KL > ``target_kl``.

    Args:
        data: tensors with leading dim ``M``: ``logp`` (behaviour log-probs ``(M,)``),
            ``adv`` ``(M,)``, ``ret`` ``(M,)`` and whatever ``critic_input``/``log_prob`` read.
        critic: value net on ``data[critic_input][i]`` → ``(B,)``.
        log_prob: ``(data, i) -> (B,)`` log-probs of the stored actions under the current policy.
        train_actor: ``False`` during critic warmup (value steps only).

    Returns:
        Means over minibatches of ``value_loss``, ``policy_loss`` and the loss's info
        (``approx_kl``, ``clip_frac``, ...).
    """
    M = data["adv"].shape[0]
    stats: dict[str, list[float]] = {}
    for _ in range(n_epochs):
        perm = torch.randperm(M, generator=generator, device=data["adv"].device)
        for s in range(0, M, batch_size):
            i = perm[s: s + batch_size]
            vl = value_loss(critic(data[critic_input][i]), data["ret"][i])
            optimizer_step(vf_coef * vl, critic_opt, critic_params, max_grad_norm)
            stats.setdefault("value_loss", []).append(float(vl.detach()))
            if not train_actor:
                continue
            pl, info = ppo_policy_loss(log_prob(data, i), data["logp"][i], normalize_advantages(data["adv"][i]), clip)
            optimizer_step(pl, actor_opt, actor_params, max_grad_norm)
            stats.setdefault("policy_loss", []).append(float(pl.detach()))
            for k, v in info.items():
                stats.setdefault(k, []).append(float(v))
            if target_kl is not None and float(info["approx_kl"]) > target_kl:
                return {k: float(np.mean(v)) for k, v in stats.items()}
    return {k: float(np.mean(v)) for k, v in stats.items()}
