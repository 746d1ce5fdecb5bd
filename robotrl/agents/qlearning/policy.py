"""The deployable policy of the Q-learning agents: observation normaliser + tanh-Gaussian actor + action scaler.

``forward``: raw flat observations ``(B, Do)`` -> raw env actions ``(B, Da)``, the
deterministic ``tanh(mean)`` action. Normaliser statistics are buffers, so they travel
in every checkpoint (and with ``init_from`` warm starts).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agents.qlearning.networks import TanhGaussianActor
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class QLPolicy(nn.Module):
    """``(B, Do)`` raw observation -> ``(B, Da)`` raw action.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden, act, layer_norm, final_init_scale: see :class:`TanhGaussianActor`.
        obs_clip: clamp normalised observations to ``±obs_clip``.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 layer_norm: bool = False, final_init_scale: float | None = None, obs_clip: float | None = 10.0):
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self._spec = dict(obs_dim=int(obs_dim), action_dim=int(action_dim), hidden=[int(h) for h in hidden], act=act,
                          layer_norm=bool(layer_norm), final_init_scale=final_init_scale, obs_clip=obs_clip)
        self.obs_normalizer = ObservationNormalizer(np.zeros(obs_dim), np.ones(obs_dim), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))
        self.actor = TanhGaussianActor(obs_dim, action_dim, hidden, act=act, layer_norm=layer_norm,
                                       final_init_scale=final_init_scale)

    def set_normalizers(self, obs_normalizer: ObservationNormalizer, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers."""
        self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` for raw observations ``(B, Do)``."""
        return self.action_scaler.unnormalize(self.actor.mode(self.obs_normalizer(obs)))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Stateless: nothing to clear."""

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return dict(self._spec)
