"""The on-policy pieces shared by Gaussian PPO, residual PPO and DPPO (Schulman et al. 2017;
Ren et al. 2024): GAE preparation of a rollout, the epoch loop over shuffled minibatches with
the approx-KL early stop, the PPO minibatch step, and the agents' state dict.

Symbols: ``T`` steps per env, ``N`` envs, ``M`` items to train on (valid env steps; DPPO:
(env step, denoising step) pairs), ``B`` minibatch size.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np
import torch
from robotrl.agents.ppo.loss import normalize_advantages, ppo_policy_loss, value_loss

from robotrl.onpolicy import Rollout, compute_gae
from robotrl.utils import set_generator_state

#: What every on-policy agent saves: its policy and value net, both optimizers and its RNG.
ONPOLICY_STATE = ("policy", "critic", "actor_opt", "critic_opt", "gen")


def save_state(agent, names: Sequence[str] = ONPOLICY_STATE) -> dict:
    """``{name: state}`` of the agent's attributes ``names`` (modules/optimizers: ``state_dict()``,
    ``torch.Generator``: ``get_state()``)."""
    out = {}
    for name in names:
        obj = getattr(agent, name)
        out[name] = obj.get_state() if isinstance(obj, torch.Generator) else obj.state_dict()
    return out


def load_state(agent, state: dict, names: Sequence[str] = ONPOLICY_STATE) -> None:
    """Inverse of :func:`save_state`.

    Raises:
        KeyError: ``state`` lacks one of ``names``; RuntimeError / ValueError: a state that does
            not fit (torch's own errors).
    """
    for name in names:
        obj = getattr(agent, name)
        if isinstance(obj, torch.Generator):
            set_generator_state(obj, state[name])
        else:
            obj.load_state_dict(state[name])


def gae_targets(ro: Rollout, values: torch.Tensor, next_values: torch.Tensor, *, gamma: float, lam: float,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """GAE advantages and returns of a rollout, flattened, with the mask of its valid steps.

    Args:
        ro: the rollout (``scaled_rewards``, ``terminated``, ``truncated``, ``valid``: ``(T, N)``).
        values, next_values: ``V(s)`` and ``V(s')`` of every step, ``(T·N,)`` or ``(T, N)``.
        gamma, lam: discount and GAE λ (:func:`robotrl.onpolicy.compute_gae`).
        device: where the results go.

    Returns:
        ``adv (T·N,)``, ``ret (T·N,)`` and ``keep (T·N,)`` bool (valid steps; index the
        per-step tensors with it).
    """
    T, N = ro.rewards.shape
    adv, ret = compute_gae(ro.scaled_rewards, values.view(T, N).cpu().numpy(), next_values.view(T, N).cpu().numpy(),
                           ro.terminated, ro.truncated, ro.valid, gamma=gamma, lam=lam)
    keep = torch.as_tensor(ro.valid.reshape(-1), device=device)
    return torch.as_tensor(adv, device=device).flatten(), torch.as_tensor(ret, device=device).flatten(), keep


def minibatch_epochs(n_items: int, step: Callable[[torch.Tensor], dict[str, torch.Tensor | float]], *, n_epochs: int,
                     batch_size: int, target_kl: float | None, generator: torch.Generator, device: torch.device,
                     drop_last: bool = False) -> dict[str, float]:
    """``n_epochs`` passes over a fresh permutation of ``n_items`` in minibatches of ``batch_size``.

    Args:
        n_items: ``M``.
        step: trains on one minibatch of item indices ``(B,)`` and returns its metrics; an
            ``approx_kl`` among them above ``target_kl`` stops all epochs (PPO's early stop).
        drop_last: ``max(1, ⌊M/B⌋)`` whole minibatches per epoch, the rest of the permutation
            skipped (DPPO); else ``⌈M/B⌉`` with a smaller last one (SB3/PPO).
        generator, device: the permutation's RNG and device.

    Returns:
        The mean of each metric over the minibatches run.
    """
    stats: dict[str, list[float]] = {}
    per_epoch = max(1, n_items // batch_size) if drop_last else -(-n_items // batch_size)
    for _ in range(n_epochs):
        perm = torch.randperm(n_items, generator=generator, device=device)
        for b in range(per_epoch):
            out = step(perm[b * batch_size: (b + 1) * batch_size])
            for k, v in out.items():
                stats.setdefault(k, []).append(float(v))
            if target_kl is not None and "approx_kl" in out and float(out["approx_kl"]) > target_kl:
                return {k: float(np.mean(v)) for k, v in stats.items()}
    return {k: float(np.mean(v)) for k, v in stats.items()}


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
    actor_extra: Callable[[torch.Tensor], tuple[torch.Tensor | None, dict[str, torch.Tensor]]] | None = None,
) -> dict[str, float]:
    """PPO epochs over shuffled minibatches of ``data``; early stop when approx KL > ``target_kl``.

    Args:
        data: tensors with leading dim ``M``: ``logp`` (behaviour log-probs ``(M,)``),
            ``adv`` ``(M,)``, ``ret`` ``(M,)`` and whatever ``critic_input``/``log_prob`` read.
        critic: value net on ``data[critic_input][i]`` → ``(B,)``.
        log_prob: ``(data, i) -> (B,)`` log-probs of the stored actions under the current policy.
        train_actor: ``False`` during critic warmup (value steps only).
        actor_extra: ``i -> (loss or None, metrics)``: a term added to the policy loss of minibatch ``i``
            (knowledge retention, :mod:`robotrl.agents.retention`); ``None``: the plain PPO loss.

    Returns:
        Means over minibatches of ``value_loss``, ``policy_loss`` and the loss's info
        (``approx_kl``, ``clip_frac``, ...).
    """
    def step(i: torch.Tensor) -> dict[str, torch.Tensor]:
        vl = value_loss(critic(data[critic_input][i]), data["ret"][i])
        optimizer_step(vf_coef * vl, critic_opt, critic_params, max_grad_norm)
        out = {"value_loss": vl.detach()}
        if train_actor:
            pl, info = ppo_policy_loss(log_prob(data, i), data["logp"][i], normalize_advantages(data["adv"][i]), clip)
            extra, extra_info = actor_extra(i) if actor_extra is not None else (None, {})
            optimizer_step(pl if extra is None else pl + extra, actor_opt, actor_params, max_grad_norm)
            out.update(policy_loss=pl.detach(), **info, **extra_info)
        return out

    return minibatch_epochs(data["adv"].shape[0], step, n_epochs=n_epochs, batch_size=batch_size, target_kl=target_kl,
                            generator=generator, device=data["adv"].device)
