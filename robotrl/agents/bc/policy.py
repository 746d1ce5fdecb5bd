"""The deployable BC policy: observation front end + actor + action scaler.

``forward``: raw flat observations ``(B, Do)`` (and, with cameras, their frames) → raw env actions
``(B, Da)`` (the mean action; deterministic). Normaliser statistics are buffers, so they are in the
``state_dict`` and in every checkpoint. Cameras are an option of the observation
(:class:`~robotrl.vision.frontend.ObservationFrontend`): the actor then reads encoder features.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from robotrl.agents.bc.networks import BCActor
from robotrl.vision.frontend import ObservationFrontend


class BCPolicy(ObservationFrontend):
    """``(B, Do)`` raw observation (+ frames ``{camera: uint8 (B, H, W, k·C)}``) → ``(B, Da)`` raw action.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras), ``Da``.
        hidden, act, gaussian, dropout, layer_norm: see :class:`BCActor`.
        obs_clip: clamp normalised observations to ``±obs_clip``.
        **frontend: the observation spec's cameras and encoder (``image_shapes``, ``encoder``, ``augment_pad``,
            ``frame_stack``, ... of :class:`~robotrl.vision.frontend.ObservationFrontend`; none: a state policy).

    The normaliser statistics start as identity placeholders and are set with
    :meth:`set_normalizers` (training) or loaded with the ``state_dict`` (deployment).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 gaussian: bool = False, dropout: float = 0.0, layer_norm: bool = False, obs_clip: float | None = 10.0,
                 **frontend):
        super().__init__(obs_dim, action_dim, obs_clip=obs_clip, **frontend, hidden=[int(h) for h in hidden], act=act,
                         gaussian=bool(gaussian), dropout=float(dropout), layer_norm=bool(layer_norm))
        self.actor = BCActor(self.out_dim, action_dim, hidden, act=act, gaussian=gaussian, dropout=dropout,
                             layer_norm=layer_norm)

    def distribution(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised-space ``(mean, log_std)`` for raw observations ``(B, Do)`` (and their frames)."""
        return self.actor(self.features(obs, images))

    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        mean, _ = self.distribution(obs, images)
        return self.action_scaler.unnormalize(mean)
