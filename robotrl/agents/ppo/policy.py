"""The deployable Gaussian PPO policy: observation normaliser + BC-shaped actor + ``log_std``.

``forward(obs (B, Do) raw) -> action (B, Da) raw`` is the deterministic mean (evaluation);
:meth:`distribution` gives the normalised-space Gaussian used for PPO. The actor's weight
names match :class:`~robotrl.agents.bc.policy.BCPolicy` so a BC checkpoint loads into it.
``To = Te = 1`` (no chunking); they are attributes so the on-policy loop treats all
policies alike.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agents.bc.networks import BCActor
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class GaussianPPOPolicy(nn.Module):
    """``(B, Do)`` raw observation → ``(B, Da)`` raw action (mean); Gaussian with learned ``log_std``.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden, act: actor MLP (as the BC actor).
        init_log_std: initial ``log_std`` (normalised action units).
        obs_clip: clamp of normalised observations.
    """

    To = 1
    Te = 1

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 init_log_std: float = -1.0, obs_clip: float | None = 10.0):
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self._spec = dict(obs_dim=self.obs_dim, action_dim=self.action_dim, hidden=[int(h) for h in hidden], act=act,
                          init_log_std=float(init_log_std), obs_clip=obs_clip)
        self.obs_normalizer = ObservationNormalizer(np.zeros(obs_dim), np.ones(obs_dim), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))
        self.actor = BCActor(obs_dim, action_dim, hidden, act=act)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)))

    def set_normalizers(self, obs_normalizer: ObservationNormalizer, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers."""
        self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised-space ``(mean (B, Da), std (B, Da))`` for raw observations ``(B, Do)``."""
        mean, _ = self.actor(self.obs_normalizer(obs))
        return mean, self.log_std.clamp(-5.0, 1.0).exp().expand_as(mean)

    @torch.no_grad()
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        return self.action_scaler.unnormalize(self.distribution(obs)[0])

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Stateless: nothing to clear."""

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return dict(self._spec)
