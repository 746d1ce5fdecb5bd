"""The deployable policy of the Q-learning agents: observation front end + tanh-Gaussian actor + action scaler.

``forward``: raw flat observations ``(B, Do)`` (and, with cameras, their frames) -> raw env actions
``(B, Da)``, the deterministic ``tanh(mean)`` action. Normaliser statistics are buffers, so they travel
in every checkpoint (and with ``init_from`` warm starts). Cameras are an option of the observation
(:class:`~robotrl.vision.frontend.ObservationFrontend`): the actor then reads encoder features.
"""

from __future__ import annotations

from collections.abc import Sequence

from collections.abc import Mapping

import torch

from robotrl.agents.qlearning.networks import TanhGaussianActor
from robotrl.vision.frontend import ObservationFrontend


class QLPolicy(ObservationFrontend):
    """``(B, Do)`` raw observation (+ frames ``{camera: uint8 (B, H, W, k·C)}``) -> ``(B, Da)`` raw action.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras), ``Da``.
        hidden, act, layer_norm, final_init_scale: see :class:`TanhGaussianActor`.
        obs_clip: clamp normalised observations to ``±obs_clip``.
        augment_pad: DrQ's random shift with cameras (4, DrQ/SERL; ignored without cameras).
        **frontend: the observation spec's cameras and encoder (``image_shapes``, ``encoder``, ``frame_stack``,
            ... of :class:`~robotrl.vision.frontend.ObservationFrontend`; none: a state policy).
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 layer_norm: bool = False, final_init_scale: float | None = None, obs_clip: float | None = 10.0,
                 augment_pad: int = 4, **frontend):
        super().__init__(obs_dim, action_dim, obs_clip=obs_clip, augment_pad=augment_pad, **frontend,
                         hidden=[int(h) for h in hidden], act=act, layer_norm=bool(layer_norm),
                         final_init_scale=final_init_scale)
        self.actor = TanhGaussianActor(self.out_dim, action_dim, hidden, act=act, layer_norm=layer_norm,
                                       final_init_scale=final_init_scale)

    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` for raw observations ``(B, Do)`` (and their frames)."""
        return self.action_scaler.unnormalize(self.actor.mode(self.features(obs, images)))
