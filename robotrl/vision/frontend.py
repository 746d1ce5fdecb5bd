"""The front end every deployable policy shares: state normaliser, optional camera encoder, action scaler.

:class:`ObservationFrontend` builds, as attributes of the policy itself (so the policies'
``state_dict`` keys stay ``obs_normalizer.*``, ``action_scaler.*`` and, with cameras, ``encoder.*``),
the normaliser / scaler buffers that make a saved policy carry all its preprocessing and, when the
observation spec has cameras, the :class:`~robotrl.vision.encoders.PixelEncoder` over
``{camera: uint8 (B, H, W, C)}`` plus the normalised state ``(B, Ds)``. Every policy puts its heads
on :attr:`ObservationFrontend.out_dim` features: cameras are an option of the observation, not a
class of their own.

Frame stacking (``frame_stack = k > 1``, :mod:`robotrl.vision.stack`): ``forward`` takes each camera's last
``k`` frames along channels, uint8 ``(B, H, W, k·C)`` (the encoder's trunk reads ``k·C`` channels, one random
shift for all of them), as the replay buffer samples them; where the policy acts step by step on raw
observations (:meth:`ObservationFrontend.act_observation`, :meth:`ObservationFrontend.stack_frames`) it keeps
its own per-env :class:`~robotrl.vision.stack.FrameHistory`, cleared by :meth:`ObservationFrontend.reset` at
episode starts. ``k`` is in the saved spec.

Symbols: ``B`` batch, ``Ds`` state size, ``Da`` action size, ``H, W, C`` frame size, ``k`` frames per stack.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.data.spaces import FlatLayout
from robotrl.errors import SpaceMismatchError
from robotrl.vision.encoders import PixelEncoder
from robotrl.vision.obs import PixelLayout
from robotrl.vision.stack import FrameHistory, stacked_shapes

__all__ = ["ObservationFrontend"]


class ObservationFrontend(nn.Module):
    """The front end of every deployable policy: state normaliser, optional camera encoder, action scaler.

    One observation spec for every agent (LeRobot's habit: one policy takes state and images through its
    features). Without cameras (``image_shapes`` ``None`` or empty) it holds no encoder and
    :meth:`features` is the normalised state ``(B, Do)``, so a state policy's ``state_dict`` keys
    (``obs_normalizer.*``, ``action_scaler.*``) and numbers are exactly those of a policy built
    without it. With cameras it holds a :class:`~robotrl.vision.encoders.PixelEncoder` over
    ``{camera: uint8 (B, H, W, k·C)}`` plus the normalised state, and :meth:`features` is ``(B, F)``.
    A policy puts its heads on :attr:`out_dim` features.

    Args:
        obs_dim: ``Do``, the flat state size beside the cameras (0: cameras only).
        action_dim: ``Da``.
        image_shapes: cameras ``{key: (H, W, C)}`` (``None``: a state policy).
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad: the
            :class:`~robotrl.vision.encoders.PixelEncoder` (``encoder_weights``: a local file for
            ``encoder="resnet10"``; the saved spec never points at it, the ``state_dict`` holds the weights).
            Ignored without cameras.
        obs_clip: clamp the normalised state to ``±obs_clip``.
        state_layout: how the env's raw ``Dict`` observation flattens into the state
            (:meth:`robotrl.data.spaces.FlatLayout.to_json`; ``None``: the policy takes only
            ``(state, images)``, never a raw observation). Saved in the spec, so a rebuilt policy
            splits raw observations itself (:meth:`split_observation`).
        frame_stack: ``k``, frames per camera the encoder reads (module doc; 1: the frame alone).
        **spec: the subclass's own constructor arguments, kept in :meth:`spec`.

    Raises:
        ValueError / FileNotFoundError: from :class:`~robotrl.vision.encoders.PixelEncoder` (unknown encoder or
            pooling, missing weights file); ``frame_stack < 1``.
    """

    #: Constructor kwargs that define the networks: a checkpoint converted or warm-started into this class
    #: must match them (:func:`robotrl.warmstart.pretrained_policy`); subclasses extend the tuple with their own.
    ARCH_KEYS: ClassVar[tuple[str, ...]] = ("obs_dim", "action_dim", "image_shapes", "encoder", "pooling",
                                            "feature_dim", "channels")
    #: What a saved spec implies for an architecture key it leaves out (a state policy names no camera settings;
    #: checkpoints written before a key existed).
    ARCH_DEFAULTS: ClassVar[dict[str, Any]] = dict.fromkeys(("image_shapes", "encoder", "pooling", "feature_dim",
                                                             "channels"))


    def __init__(self, obs_dim: int, action_dim: int, *, image_shapes: Mapping[str, Sequence[int]] | None = None,
                 encoder: str = "drq", pooling: str = "flatten", feature_dim: int = 50, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 obs_clip: float | None = 10.0, state_layout: str | None = None, frame_stack: int = 1, **spec):
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        shapes = {k: [int(d) for d in v] for k, v in (image_shapes or {}).items()}
        self.image_keys = list(shapes)
        self.frame_stack = int(frame_stack)
        self._history = FrameHistory(self.frame_stack)
        self._spec = dict(obs_dim=self.obs_dim, action_dim=self.action_dim, **spec, obs_clip=obs_clip)
        self.encoder: PixelEncoder | None = None
        if shapes:
            self._spec.update(image_shapes=shapes, encoder=encoder, pooling=pooling, feature_dim=int(feature_dim),
                              channels=int(channels), encoder_weights=None, freeze_encoder=bool(freeze_encoder),
                              augment_pad=int(augment_pad), state_layout=state_layout, frame_stack=self.frame_stack)
            self.encoder = PixelEncoder(stacked_shapes(shapes, self.frame_stack), self.obs_dim, encoder=encoder,
                                        pooling=pooling, feature_dim=feature_dim, channels=channels,
                                        weights=encoder_weights, freeze=freeze_encoder, augment_pad=augment_pad,
                                        allow_random_init=encoder_weights is None)
        elif state_layout is not None:
            self._spec["state_layout"] = state_layout
        self._layout = PixelLayout(FlatLayout.from_json(state_layout) if state_layout else None,
                                   {k: tuple(v) for k, v in shapes.items()})
        width = max(self.obs_dim, 1)
        self.obs_normalizer = ObservationNormalizer(np.zeros(width), np.ones(width), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))

    @property
    def state_dim(self) -> int:
        """``Ds``: the flat state size (the same as :attr:`obs_dim`)."""
        return self.obs_dim

    @property
    def has_cameras(self) -> bool:
        """Whether the policy reads camera frames."""
        return self.encoder is not None

    @property
    def out_dim(self) -> int:
        """Width of :meth:`features`: the encoder's ``F`` with cameras, else ``Do``."""
        return self.encoder.out_dim if self.encoder is not None else self.obs_dim

    def set_normalizers(self, obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers (``obs_normalizer`` None: no state)."""
        if obs_normalizer is not None:
            self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def input_shapes(self) -> dict[str, tuple[int, int, int]]:
        """What :meth:`forward` takes per camera: ``{key: (H, W, k·C)}`` (``(H, W, C)`` for ``k = 1``; empty
        for a state policy)."""
        return stacked_shapes(self._spec.get("image_shapes") or {}, self.frame_stack)

    def stack_frames(self, images: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Each env's newest frames ``{key: uint8 (N, H, W, C)}`` -> the stacks :meth:`forward` takes,
        ``{key: uint8 (N, H, W, k·C)}``, through this policy's own history (row ``i`` is env ``i``; unchanged
        for ``k = 1``). Call :meth:`reset` with the ids of envs whose episode starts."""
        return self._history.push(images)

    def normalized_state(self, state: torch.Tensor) -> torch.Tensor | None:
        """``(B, Ds)`` raw -> normalised (``None`` without state)."""
        return self.obs_normalizer(state) if self.state_dim else None

    def features(self, state: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Features ``(B, out_dim)`` of raw inputs: the normalised state ``(B, Do)`` for a state policy; the
        encoder's ``(B, F)`` over the frames (uint8 ``(B, H, W, k·C)`` per camera) and the normalised state
        with cameras.

        Raises:
            SpaceMismatchError: a camera policy called without frames.
        """
        if self.encoder is None:
            return self.obs_normalizer(state)
        if not images:
            raise SpaceMismatchError(f"{type(self).__name__} reads cameras {self.image_keys}: pass their frames "
                                     "(policy(state, images)) or a raw Dict observation to act_observation")
        return self.encoder(images, self.normalized_state(state))

    def split_observation(self, obs: Mapping) -> tuple[torch.Tensor, dict[str, torch.Tensor], bool]:
        """A raw camera observation, one or a batch of ``B`` (the ``Dict`` of
        :class:`robotrl.envs.pixels.PixelObservation`), -> ``(state float32 (B, Ds), {camera: uint8
        (B, H, W, C)}, single)`` tensors on the policy's device; ``single``: one observation (``B = 1`` added).

        Raises:
            SpaceMismatchError: the policy has a state but no ``state_layout``, a camera is missing, or a
                frame has another size than the policy was trained on.
        """
        if self.encoder is None:
            raise SpaceMismatchError(f"{type(self).__name__} takes flat observations (B, Do), not a Dict with keys "
                                     f"{sorted(obs)}; make the env without pixels=[...]")
        if self.state_dim and self._layout.state is None:
            raise SpaceMismatchError("this pixel policy was built without state_layout: call it with (state, images), "
                                     "or build it with state_layout=<the env's FlatLayout JSON> (robotrl train does)")
        state, images = self._layout.split(obs)
        single = next(iter(images.values())).ndim == 3
        dev = self.action_scaler.low.device
        s = torch.as_tensor(np.asarray(state, np.float32), device=dev)
        imgs = {k: torch.as_tensor(np.asarray(v), device=dev) for k, v in images.items()}
        if single:
            s, imgs = s[None], {k: v[None] for k, v in imgs.items()}
        return s, imgs, single

    @torch.no_grad()
    def act_observation(self, obs: Mapping) -> np.ndarray:
        """Deterministic raw actions for raw camera observations: ``(B, Da)`` for a batch, ``(Da,)`` for one.

        Raises:
            SpaceMismatchError: as :meth:`split_observation`.
        """
        state, images, single = self.split_observation(obs)
        out = self(state, self.stack_frames(images)).cpu().numpy()
        return out[0] if single else out

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Start the frame histories of ``env_ids`` (``None``: all) afresh (nothing to clear for ``k = 1``)."""
        self._history.reset(env_ids)

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return dict(self._spec)
