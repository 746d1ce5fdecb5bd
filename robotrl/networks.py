"""Network building blocks shared by the agents.

Symbols: ``B`` batch, ``Din`` input size, ``Dout`` output size, ``N`` ensemble size.
"""

from __future__ import annotations

from collections.abc import Sequence

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
        last = nn.Linear(d, out_dim)
        if final_init_scale is not None:
            with torch.no_grad():
                last.weight.mul_(final_init_scale)
                last.bias.zero_()
        layers.append(last)
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(..., Din) -> (..., Dout)``."""
        return self.net(x)
