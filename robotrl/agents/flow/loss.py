"""Flow-matching and shortcut losses (pure functions: outputs depend on the inputs only).

Conditional flow matching with the rectified-flow path (Lipman et al. 2023; Liu et al.
2023): regress ``v_θ(x_t, t, s)`` on ``x1 - x0``. Shortcut models (Frans et al. 2024, "One
Step Diffusion via Shortcut Models", kvfrans/shortcut-models): rows with ``d = 0`` are that
flow-matching loss; rows with ``d > 0`` regress ``s_θ(x_t, t, d)`` on the mean of two half steps
of the (target) network. Symbols: ``B`` batch, ``To``/``Do`` observation history/size, ``Ta``
chunk length, ``Da`` action size.
"""

from __future__ import annotations

import torch
from torch import nn

from robotrl.agents.diffusion.loss import noise_prediction_loss
from robotrl.agents.flow.sampling import interpolate, velocity


def flow_matching_loss(v_pred: torch.Tensor, v_target: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Mean of ``(v̂ - v)²`` over valid entries (the same masked MSE as diffusion's ε loss).

    Args:
        v_pred, v_target: ``(B, Ta, Da)``.
        mask: ``(B, Ta)`` bool, False for chunk steps past an episode's end; ``None``: all valid.

    Returns:
        Scalar loss.
    """
    return noise_prediction_loss(v_pred, v_target, mask)


@torch.no_grad()
def consistency_target(net: nn.Module, x_t: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, d: torch.Tensor,
                       clip: float | None = 4.0) -> torch.Tensor:
    """Self-consistency target ``(s(x_t, t, d/2) + s(x', t + d/2, d/2)) / 2`` ``(B, Ta, Da)``, without gradient,
    with ``x' = x_t + (d/2)·s(x_t, t, d/2)``.

    Args:
        net: the shortcut network giving the targets (:class:`~robotrl.agents.flow.shortcut.ShortcutVelocity`).
        x_t: ``(B, Ta, Da)``; t: ``(B,)``; cond: ``(B, To, Do)``; d: the trained step ``(B,)`` (``> 0``).
        clip: clamp of ``x'`` and of the target to ``±clip`` (the reference's 4; ``None``: off).
    """
    h = d / 2
    v1 = velocity(net, x_t, t, cond, h)
    x2 = x_t + h.view(-1, 1, 1) * v1
    v2 = velocity(net, x2 if clip is None else x2.clamp(-clip, clip), t + h, cond, h)
    v = (v1 + v2) / 2
    return v if clip is None else v.clamp(-clip, clip)


def shortcut_loss(net: nn.Module, target_net: nn.Module, x0: torch.Tensor, x1: torch.Tensor, cond: torch.Tensor,
                  t: torch.Tensor, d: torch.Tensor, mask: torch.Tensor | None = None,
                  clip: float | None = 4.0) -> torch.Tensor:
    """Shortcut-model loss: flow matching on ``d = 0`` rows, self-consistency on ``d > 0`` rows.

    Every row is ``x_t = (1−t)·x0 + t·x1`` and the prediction ``s_θ(x_t, t, d)`` (``net``); the target is
    ``x1 − x0`` where ``d = 0`` (so a batch of ``d = 0`` rows gives exactly :func:`flow_matching_loss`) and
    :func:`consistency_target` of ``target_net`` where ``d > 0``; the masked MSE of
    :func:`flow_matching_loss` over all rows.

    Args:
        net: trained shortcut network ``(x, t, cond, d) -> (B, Ta, Da)``; target_net: the network of the
            targets (the same one or its EMA; no gradient flows through it).
        x0: noise ``(B, Ta, Da)``; x1: normalised action chunks ``(B, Ta, Da)``; cond: ``(B, To, Do)``.
        t: ``(B,)`` in ``[0, 1)``; d: ``(B,)`` step sizes (``0``: flow matching; ``t + d <= 1``).
        mask: ``(B, Ta)`` bool or ``None``; clip: see :func:`consistency_target`.

    Returns:
        Scalar loss.
    """
    x_t, target = interpolate(x0, x1, t)
    sc = d > 0
    if bool(sc.any()):
        target = target.clone()
        target[sc] = consistency_target(target_net, x_t[sc], t[sc], cond[sc], d[sc], clip)
    return flow_matching_loss(velocity(net, x_t, t, cond, d), target, mask)
