"""Networks of the MLP behaviour-cloning agent.

Symbols: ``B`` batch, ``Do`` observation size, ``Da`` action size. The actor works in
normalised spaces: normalised observations in, actions in ``[-1, 1]`` out.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robotrl.networks import MLP

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class BCActor(nn.Module):
    """MLP actor: ``(B, Do) -> mean (B, Da)`` in ``[-1, 1]`` (tanh) and, if Gaussian, ``log_std (B, Da)``.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden: hidden widths.
        act: activation name.
        gaussian: predict a state-dependent ``log_std`` (clamped to ``[-5, 2]``) as well.
        dropout, layer_norm: regularisation of the trunk.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 gaussian: bool = False, dropout: float = 0.0, layer_norm: bool = False):
        super().__init__()
        self.gaussian = gaussian
        self.action_dim = action_dim
        self.net = MLP(obs_dim, action_dim * (2 if gaussian else 1), hidden, act=act, dropout=dropout, layer_norm=layer_norm)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(B, Do) -> (mean (B, Da), log_std (B, Da) or None)``."""
        out = self.net(obs)
        if not self.gaussian:
            return torch.tanh(out), None
        mean, log_std = out.split(self.action_dim, dim=-1)
        return torch.tanh(mean), log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
