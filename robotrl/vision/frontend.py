"""The front end every deployable pixel policy shares: image encoder, state normaliser, action scaler.

:class:`PixelPolicyFrontend` builds, as attributes of the policy itself (so the policies'
``state_dict`` keys stay ``encoder.*``, ``obs_normalizer.*``, ``action_scaler.*``), the
:class:`~robotrl.vision.encoders.PixelEncoder` over ``{camera: uint8 (B, H, W, C)}`` plus the
normalised state ``(B, Ds)``, and the normaliser / scaler buffers that make a saved policy carry
all its preprocessing. The pixel BC policy (:mod:`robotrl.agents.bc.pixels`) and the pixel SAC /
RLPD policy (:mod:`robotrl.agents.qlearning.pixels`) add their actor head on ``encoder.out_dim``
features.

Symbols: ``B`` batch, ``Ds`` state size, ``Da`` action size, ``H, W, C`` frame size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.vision.encoders import PixelEncoder

__all__ = ["PixelPolicyFrontend"]


class PixelPolicyFrontend(nn.Module):
    """Encoder, state normaliser and action scaler of a pixel policy (a base for the policies, not used alone).

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``.
        state_dim: ``Ds`` (0: cameras only).
        action_dim: ``Da``.
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad: the
            :class:`~robotrl.vision.encoders.PixelEncoder` (``encoder_weights``: a local file for
            ``encoder="resnet10"``; the saved spec never points at it, the ``state_dict`` holds the weights).
        obs_clip: clamp the normalised state to ``±obs_clip``.
        **spec: the subclass's own constructor arguments, kept in :meth:`spec`.

    Raises:
        ValueError / FileNotFoundError: from :class:`~robotrl.vision.encoders.PixelEncoder` (unknown encoder or
            pooling, missing weights file).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 encoder: str = "drq", pooling: str = "flatten", feature_dim: int = 50, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 obs_clip: float | None = 10.0, **spec):
        super().__init__()
        shapes = {k: [int(d) for d in v] for k, v in image_shapes.items()}
        self.image_keys = list(shapes)
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self._spec = dict(image_shapes=shapes, state_dim=self.state_dim, action_dim=self.action_dim, **spec,
                          encoder=encoder, pooling=pooling, feature_dim=int(feature_dim), channels=int(channels),
                          encoder_weights=None, freeze_encoder=bool(freeze_encoder), augment_pad=int(augment_pad),
                          obs_clip=obs_clip)
        self.encoder = PixelEncoder(shapes, self.state_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                                    channels=channels, weights=encoder_weights, freeze=freeze_encoder,
                                    augment_pad=augment_pad, allow_random_init=encoder_weights is None)
        width = max(self.state_dim, 1)
        self.obs_normalizer = ObservationNormalizer(np.zeros(width), np.ones(width), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))

    def set_normalizers(self, obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers (``obs_normalizer`` None: no state)."""
        if obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def normalized_state(self, state: torch.Tensor) -> torch.Tensor | None:
        """``(B, Ds)`` raw -> normalised (``None`` without state)."""
        return self.obs_normalizer(state) if self.state_dim else None

    def features(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Encoder features ``(B, F)`` of raw inputs (frames uint8 ``(B, H, W, C)`` per camera)."""
        return self.encoder(images, self.normalized_state(state))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Stateless: nothing to clear."""

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return dict(self._spec)
