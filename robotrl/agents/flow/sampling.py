"""Rectified-flow path and Euler sampling (pure tensor functions).

Rectified flow / flow matching (Liu et al. 2023 "Flow Straight and Fast"; Lipman et al.
2023), as the ReinFlow repository's ``model/flow/reflow.py`` uses it for policies.
Symbols: ``B`` batch, ``To``/``Do`` observation history/size, ``Ta``/``Da`` chunk
length/action size, ``K`` Euler steps. Latents are action chunks ``(B, Ta, Da)`` in
normalised units; ``t = 0`` is the noise end (``x_0 ~ N(0, I)``) and ``t = 1`` the action.

The Euler chain of ``K`` steps runs ``t_i = i/K`` (``i = 0..K-1``), ``Δt = 1/K``:
``x_{i+1} = x_i + v(x_i, t_i, s)·Δt``, clipped to ``±x_clip`` after each step (ReinFlow's
``clip_intermediate_actions`` with ``denoised_clip_value = 1``). (ReinFlow's own sampler
feeds ``linspace(0, 1, K)`` as times — ``t = 1`` at the last step — while its log-prob
code uses ``i/K``; here both use ``i/K``, the Euler grid of the ODE.)
"""

from __future__ import annotations

import torch
from torch import nn

from robotrl.errors import ConfigError


def euler_times(K: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Times ``t_i = i/K`` ``(K,)`` float32 of a ``K``-step Euler chain.

    Raises:
        ConfigError: ``K < 1``.
    """
    if K < 1:
        raise ConfigError(f"agent.model.flow_steps (K Euler steps) must be >= 1, got {K}")
    return torch.arange(K, device=device, dtype=torch.float32) / K


def interpolate(x0: torch.Tensor, x1: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rectified-flow training pair: ``x_t = (1-t)·x0 + t·x1`` and the target velocity ``x1 - x0``.

    Args:
        x0: noise ``(B, Ta, Da)``; x1: normalised action chunks ``(B, Ta, Da)``; t: ``(B,)`` in ``[0, 1]``.

    Returns:
        ``(x_t (B, Ta, Da), v (B, Ta, Da))``.
    """
    tt = t.view(-1, *([1] * (x1.ndim - 1))).to(x1.dtype)
    return (1 - tt) * x0 + tt * x1, x1 - x0


def velocity(net: nn.Module, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor,
             d: float | torch.Tensor) -> torch.Tensor:
    """The velocity ``(B, Ta, Da)`` a step of size ``d`` takes: ``v(x, t, s)`` of a flow network, or
    ``s(x, t, d, s)`` of a step-conditioned shortcut network
    (:class:`~robotrl.agents.flow.shortcut.ShortcutVelocity`, ``step_conditioned``).

    Args:
        x: latents ``(B, Ta, Da)``; t: times ``(B,)``; cond: normalised history ``(B, To, Do)``;
        d: step size, a float or ``(B,)`` (``0``: the instantaneous velocity).
    """
    if not getattr(net, "step_conditioned", False):
        return net(x, t, cond)
    return net(x, t, cond, d if isinstance(d, torch.Tensor) else torch.full_like(t, float(d)))


def euler_mean(net: nn.Module, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, dt: float,
               x_clip: float | None = 1.0, straight_through: bool = False) -> torch.Tensor:
    """One Euler step's mean ``clip(x + v(x, t, s)·Δt, ±x_clip)`` ``(B, Ta, Da)``.

    Args:
        net: velocity network ``(x (B,Ta,Da), t (B,), cond (B,To,Do)) -> (B,Ta,Da)``, or a shortcut
            network (it is given ``d = Δt``: :func:`velocity`).
        x: latents ``(B, Ta, Da)``; t: times ``(B,)``; cond: normalised history ``(B, To, Do)``.
        dt: step size ``1/K``; x_clip: clamp of the result (``None``: off).
        straight_through: the clamp's value with the unclamped mean's gradient (a straight-through
            estimator), so an entry clamped at the bound can still be pulled back inside; the value is unchanged.
    """
    mean = x + velocity(net, x, t, cond, dt) * dt
    if x_clip is None:
        return mean
    clamped = mean.clamp(-x_clip, x_clip)
    return mean + (clamped - mean).detach() if straight_through else clamped


def euler_sample(net: nn.Module, cond: torch.Tensor, x0: torch.Tensor, K: int, *,
                 x_clip: float | None = 1.0) -> torch.Tensor:
    """Deterministic ``K``-step Euler integration from ``x0`` ``(B, Ta, Da)``; the result is
    clamped to ``[-1, 1]`` (the action box in normalised units), ``(B, Ta, Da)``.

    Raises:
        ConfigError: ``K < 1``.
    """
    ts = euler_times(K, cond.device)
    x = x0
    B = x0.shape[0]
    for i in range(K):
        x = euler_mean(net, x, ts[i].expand(B), cond, 1.0 / K, x_clip)
    return x.clamp(-1.0, 1.0)
