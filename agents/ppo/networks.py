"""Networks of the Gaussian PPO agent.

Symbols: ``B`` batch, ``Do`` observation size, ``Da`` action size. The actor is the BC
agent's :class:`~robotrl.agents.bc.networks.BCActor` (so a BC checkpoint initialises it)
plus a state-independent ``log_std (Da,)``; the critic is an MLP ``(B, Do) -> (B,)`` on
normalised observations.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robotrl.networks import MLP


class ValueNet(nn.Module):
    """``V(s)``: normalised observation ``(B, Do)`` (or history ``(B, To, Do)``, flattened) → ``(B,)``."""

    def __init__(self, in_dim: int, hidden: Sequence[int] = (256, 256, 256), act: str = "mish"):
        super().__init__()
        self.net = MLP(in_dim, 1, hidden, act=act)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs.reshape(obs.shape[0], -1)).squeeze(-1)
