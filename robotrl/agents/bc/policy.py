"""The deployable BC policy: observation normaliser + actor + action scaler.

``forward``: raw flat observations ``(B, Do)`` → raw env actions ``(B, Da)`` (the mean
action; deterministic). Normaliser statistics are buffers, so they are in the
``state_dict`` and in every checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agents.bc.networks import BCActor
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class BCPolicy(nn.Module):
    """``(B, Do)`` raw observation → ``(B, Da)`` raw action.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden, act, gaussian, dropout, layer_norm: see :class:`BCActor`.
        obs_clip: clamp normalised observations to ``±obs_clip``.

    The normaliser statistics start as identity placeholders and are set with
    :meth:`set_normalizers` (training) or loaded with the ``state_dict`` (deployment).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 gaussian: bool = False, dropout: float = 0.0, layer_norm: bool = False, obs_clip: float | None = 10.0):
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self._spec = dict(obs_dim=int(obs_dim), action_dim=int(action_dim), hidden=[int(h) for h in hidden], act=act,
                          gaussian=bool(gaussian), dropout=float(dropout), layer_norm=bool(layer_norm), obs_clip=obs_clip)
        self.obs_normalizer = ObservationNormalizer(np.zeros(obs_dim), np.ones(obs_dim), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))
        self.actor = BCActor(obs_dim, action_dim, hidden, act=act, gaussian=gaussian, dropout=dropout, layer_norm=layer_norm)

    def set_normalizers(self, obs_normalizer: ObservationNormalizer, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers."""
        self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised-space ``(mean, log_std)`` for raw observations ``(B, Do)``."""
        return self.actor(self.obs_normalizer(obs))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        mean, _ = self.distribution(obs)
        return self.action_scaler.unnormalize(mean)

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Stateless: nothing to clear."""

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return dict(self._spec)
