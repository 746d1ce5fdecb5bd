"""Network building blocks shared by the agents: MLP, last-layer init, value network,
squashed-Gaussian sampler and Polyak update.

Symbols: ``B`` batch, ``Din`` input size, ``Dout`` output size, ``N`` ensemble size,
``Da`` action size.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import nn

_ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "mish": nn.Mish, "tanh": nn.Tanh, "silu": nn.SiLU, "elu": nn.ELU}


def activation(name: str) -> nn.Module:
    """An activation module by name (relu, gelu, mish, tanh, silu, elu).

    Raises:
        ValueError: unknown name.
    """
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(f"unknown activation {name!r}; choose one of {sorted(_ACTIVATIONS)}") from None


class MLP(nn.Module):
    """Multi-layer perceptron ``(..., Din) -> (..., Dout)``.

    Args:
        in_dim, out_dim: ``Din``, ``Dout``.
        hidden: widths of the hidden layers.
        act: activation name.
        layer_norm: LayerNorm after each hidden linear layer (RLPD/WSRL critics).
        dropout: dropout probability after each hidden activation.
        final_init_scale: if set, the last layer's weights are scaled by it and its
            bias zeroed (WSRL uses 1e-2; 0 gives an exactly-zero initial output).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden: Sequence[int] = (256, 256),
        *,
        act: str = "relu",
        layer_norm: bool = False,
        dropout: float = 0.0,
        final_init_scale: float | None = None,
    ):
        super().__init__()
        layers: list[nn.Module] = []
        d = in_dim
        for h in hidden:
            layers.append(nn.Linear(d, h))
            if layer_norm:
                layers.append(nn.LayerNorm(h))
            layers.append(activation(act))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            d = h
        layers.append(scale_last_layer_(nn.Linear(d, out_dim), final_init_scale))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., Din) -> (..., Dout)``."""
        return self.net(x)


def scale_last_layer_(layer: nn.Module, scale: float | None) -> nn.Module:
    """The output-layer init of WSRL/RLPD-style networks, in place: weights times ``scale``,
    bias zeroed (``scale = 0``: an exactly-zero initial output); ``None`` leaves the layer as is.

    Works for any layer with ``weight`` and ``bias`` (``nn.Linear``, ensemble layers).
    Returns the layer.
    """
    if scale is not None:
        with torch.no_grad():
            layer.weight.mul_(scale)
            layer.bias.zero_()
    return layer


class ValueNet(nn.Module):
    """State value ``V(s)``: ``(B, Din)`` (or a history ``(B, To, Do)``, flattened) -> ``(B,)`` float32.

    The critic of PPO / residual PPO / DPPO (on normalised observations or features) and
    IQL's expectile value (Kostrikov et al. 2021).

    Args:
        in_dim: ``Din`` (``To·Do`` for histories).
        hidden, act, layer_norm: the :class:`MLP` trunk.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int] = (256, 256), act: str = "relu", *,
                 layer_norm: bool = False):
        super().__init__()
        self.net = MLP(in_dim, 1, hidden, act=act, layer_norm=layer_norm)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """``(B, ...) -> (B,)`` (float32 also under a bfloat16 autocast)."""
        return self.net(obs.reshape(obs.shape[0], -1)).squeeze(-1).float()


def squashed_gaussian(mean: torch.Tensor, log_std: torch.Tensor,
                      eps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A tanh-squashed Gaussian sample and its log-prob, reparameterised by ``eps ~ N(0, I)``.

    ``u = mean + exp(log_std)·eps``, action ``tanh(u)``; the log-prob includes the tanh
    change of variables in SAC's numerically stable form ``2(log 2 - u - softplus(-2u))``
    (Haarnoja et al. 2018, appendix C).

    Args:
        mean, log_std: ``(..., B, Da)`` of the pre-tanh Gaussian (broadcast against ``eps``).
        eps: standard-normal noise ``(..., B, Da)``.

    Returns:
        ``(action (..., B, Da) in [-1, 1], log_prob (..., B))``.
    """
    u = mean + log_std.exp() * eps
    log_prob = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    log_prob = log_prob - (2.0 * (math.log(2.0) - u - nn.functional.softplus(-2.0 * u))).sum(-1)
    return torch.tanh(u), log_prob


@torch.no_grad()
def polyak_update_(target: Iterable[torch.Tensor], source: Iterable[torch.Tensor], tau: float) -> None:
    """Soft target update in place: ``θ' ← θ' + τ(θ - θ')`` for every pair of tensors (one fused
    ``lerp`` over all of them). ``target``/``source``: parameters of the same shapes, in order."""
    torch._foreach_lerp_(list(target), list(source), tau)
