"""Image encoders for pixel agents: DrQ conv trunk, a pretrained ResNet-10 from a local file,
spatial-softmax / learned spatial-embedding pooling, and the camera+state encoder shared by
actor and critic.

Symbols: ``B`` batch, ``C`` channels, ``H, W`` frame size, ``K`` trunk channels, ``F``
feature size, ``Ds`` low-dimensional (state) size.

Conventions (DrQ, Kostrikov et al. 2020; DrQ-v2, Yarats et al. 2021; SERL, Luo et al. 2024):
frames arrive uint8 ``(B, H, W, C)`` (the data layer's layout) and are scaled to ``[-0.5, 0.5]``
inside the encoder, so the saved policy carries its own image preprocessing; the critic's loss
trains the shared encoder, the actor reads its features with the gradient stopped
(``PixelEncoder(..., detach=True)``).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from robotrl.errors import ConfigError

__all__ = ["DrQConv", "ResNet10", "SpatialSoftmax", "SpatialEmbedding", "PixelEncoder", "load_encoder_weights",
           "ENCODERS", "POOLINGS"]


def to_float_chw(frames: torch.Tensor) -> torch.Tensor:
    """uint8 ``(B, H, W, C)`` -> float32 ``(B, C, H, W)`` in ``[-0.5, 0.5]`` (DrQ's scaling).

    Raises:
        ValueError: not 4-D or not uint8.
    """
    if frames.dim() != 4 or frames.dtype != torch.uint8:
        raise ValueError(f"camera frames must be uint8 (B, H, W, C), got {frames.dtype} {tuple(frames.shape)}")
    return frames.permute(0, 3, 1, 2).float().div(255.0).sub(0.5)


class DrQConv(nn.Module):
    """DrQ/DrQ-v2 conv trunk trained from scratch: ``(B, C, H, W) -> (B, K, H', W')``.

    Four 3x3 conv layers with ``K`` channels and ReLU; the first has stride 2 (DrQ-v2:
    64 px -> 29x29, 128 px -> 61x61).

    Args:
        in_channels: ``C``.
        channels: ``K`` (DrQ 32).
        layers: number of conv layers (DrQ 4).
    """

    def __init__(self, in_channels: int, channels: int = 32, layers: int = 4):
        super().__init__()
        mods: list[nn.Module] = []
        c = in_channels
        for i in range(layers):
            mods += [nn.Conv2d(c, channels, 3, stride=2 if i == 0 else 1), nn.ReLU()]
            c = channels
        self.net = nn.Sequential(*mods)
        self.out_channels = channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W) -> (B, K, H', W')``."""
        return self.net(x)


class _Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = nn.GroupNorm(min(4, cout), cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = nn.GroupNorm(min(4, cout), cout)
        self.skip = None if stride == 1 and cin == cout else nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                                                           nn.GroupNorm(min(4, cout), cout))

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))
        y = self.norm2(self.conv2(y))
        return F.relu(y + (x if self.skip is None else self.skip(x)))


class ResNet10(nn.Module):
    """ResNet-10 trunk (one basic block per stage, GroupNorm): ``(B, C, H, W) -> (B, 8w, H/32, W/32)``.

    The architecture of SERL/HIL-SERL's pretrained image encoder (ResNet-10 with four
    stages); its weights come from a local file (:func:`load_encoder_weights`), never
    downloaded at run time.

    Args:
        in_channels: ``C``.
        width: channels of the first stage ``w`` (stages ``w, 2w, 4w, 8w``; SERL 64).
    """

    def __init__(self, in_channels: int = 3, width: int = 64):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, width, 7, 2, 3, bias=False), nn.GroupNorm(min(4, width), width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        chans = [width, 2 * width, 4 * width, 8 * width]
        blocks, c = [], width
        for i, k in enumerate(chans):
            blocks.append(_Block(c, k, 1 if i == 0 else 2))
            c = k
        self.blocks = nn.Sequential(*blocks)
        self.out_channels = c

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, C, H, W) -> (B, 8w, H/32, W/32)``."""
        return self.blocks(self.stem(x))


def load_encoder_weights(module: nn.Module, path: str | os.PathLike, *, prefix: str = "") -> None:
    """Load a trunk's weights from a local file (a ``state_dict`` saved with ``torch.save``).

    Read with ``torch.load(..., weights_only=True)`` (no unpickling of code). Keys may carry
    ``prefix`` (e.g. ``"encoder."`` of a larger checkpoint); only those are used, prefix removed.

    Raises:
        ConfigError: the file is missing, is not a weights file, or its tensors do not fit
            ``module`` (the message names the missing/unexpected/mis-shaped keys).
    """
    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(f"encoder weights file {str(p)!r} does not exist; point agent.model.encoder_weights "
                          "at a state_dict saved with torch.save(module.state_dict(), path)")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ConfigError(f"encoder weights {str(p)!r} cannot be read as a torch state_dict "
                          f"({type(exc).__name__}: {exc}); save one with torch.save(module.state_dict(), path)") from exc
    if not isinstance(state, Mapping):
        raise ConfigError(f"encoder weights {str(p)!r} hold a {type(state).__name__}, not a state_dict")
    if prefix:
        state = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    own = module.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shapes = [k for k in own if k in state and tuple(state[k].shape) != tuple(own[k].shape)]
    if missing or unexpected or shapes:
        raise ConfigError(f"encoder weights {str(p)!r} do not fit {type(module).__name__}: missing {missing[:5]}, "
                          f"unexpected {unexpected[:5]}, shape mismatch {shapes[:5]}; check the architecture "
                          "(encoder, width) or the key prefix")
    module.load_state_dict(state)


class SpatialSoftmax(nn.Module):
    """Spatial soft-argmax: ``(B, K, H, W) -> (B, 2K)`` expected ``(x, y)`` per channel in ``[-1, 1]``.

    Levine et al. 2016 ("End-to-End Training of Deep Visuomotor Policies"); Diffusion Policy's
    image encoder. A learned temperature scales the logits.
    """

    def __init__(self):
        super().__init__()
        self.log_temperature = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, K, H, W) -> (B, 2K)``."""
        B, K, H, W = x.shape
        attn = torch.softmax(x.reshape(B, K, H * W) / self.log_temperature.exp(), dim=-1)
        ys = torch.linspace(-1.0, 1.0, H, device=x.device, dtype=x.dtype)
        xs = torch.linspace(-1.0, 1.0, W, device=x.device, dtype=x.dtype)
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        kx = (attn * gx.reshape(1, 1, -1)).sum(-1)
        ky = (attn * gy.reshape(1, 1, -1)).sum(-1)
        return torch.cat([kx, ky], dim=-1)


class SpatialEmbedding(nn.Module):
    """Learned spatial embedding (SERL): ``(B, K, H, W) -> (B, K·E)``.

    Each of ``E`` learned kernels ``(K, H, W)`` weights the feature map and sums over
    positions (Luo et al. 2024, SERL's ``SpatialLearnedEmbeddings``).

    Args:
        channels, height, width: ``K, H, W`` of the trunk's output.
        num_features: ``E`` (SERL 8).
    """

    def __init__(self, channels: int, height: int, width: int, num_features: int = 8):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(num_features, channels, height, width) * (1.0 / (height * width)) ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``(B, K, H, W) -> (B, K·E)``."""
        return torch.einsum("bkhw,ekhw->bke", x, self.kernel).flatten(1)


ENCODERS = ("drq", "resnet10")
POOLINGS = ("flatten", "spatial_softmax", "spatial_embedding")


class PixelEncoder(nn.Module):
    """Cameras (+ state) -> features ``(B, F + Ds)``: one trunk per camera, pooling, projection.

    ``forward(images, state)``: each camera's uint8 ``(B, H, W, C)`` frame is scaled to
    ``[-0.5, 0.5]``, optionally shifted (:func:`~robotrl.vision.augment.random_shift`, training
    only), encoded by its trunk, pooled, concatenated over cameras and projected by
    ``Linear -> LayerNorm -> tanh`` to ``F`` (DrQ's projection); the state ``(B, Ds)`` is
    appended unchanged (normalise it before).

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``.
        state_dim: ``Ds`` (0 for cameras only).
        encoder: ``"drq"`` (from scratch) or ``"resnet10"`` (pretrained from ``weights``).
        pooling: ``"flatten"`` (DrQ), ``"spatial_softmax"`` or ``"spatial_embedding"`` (SERL).
        feature_dim: ``F`` (DrQ 50).
        channels: ``K`` of the DrQ trunk; ``w`` of the ResNet-10.
        weights: local file with the trunk's ``state_dict`` (required for ``"resnet10"``
            unless ``allow_random_init``); loaded into every camera's trunk.
        freeze: keep the trunk's weights fixed (a pretrained encoder; pooling and
            projection still train).
        augment_pad: random-shift pad ``p`` applied in training mode (0: off).

    Raises:
        ConfigError: unknown encoder/pooling, no cameras, or unusable weights. (A frame so small that the trunk
            leaves fewer than 2x2 cells for a keypoint pooling is warned about: its keypoints are constant.)
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int = 0, *, encoder: str = "drq",
                 pooling: str = "flatten", feature_dim: int = 50, channels: int = 32, weights: str | None = None,
                 freeze: bool = False, augment_pad: int = 0, allow_random_init: bool = False):
        super().__init__()
        if encoder not in ENCODERS:
            raise ConfigError(f"unknown image encoder {encoder!r}; choose one of {list(ENCODERS)}")
        if pooling not in POOLINGS:
            raise ConfigError(f"unknown pooling {pooling!r}; choose one of {list(POOLINGS)}")
        if not image_shapes:
            raise ConfigError("PixelEncoder needs at least one camera (image_shapes is empty)")
        if encoder == "resnet10" and weights is None and not allow_random_init:
            raise ConfigError("encoder=resnet10 is a pretrained encoder: set agent.model.encoder_weights to a local "
                              "weights file (nothing is downloaded), or use encoder=drq to train one from scratch")
        self.keys = list(image_shapes)
        self.image_shapes = {k: tuple(int(d) for d in v) for k, v in image_shapes.items()}
        self.state_dim, self.feature_dim, self.augment_pad, self.freeze = int(state_dim), int(feature_dim), int(augment_pad), freeze
        self.trunks = nn.ModuleDict()
        self.pools = nn.ModuleDict()
        pooled = 0
        for i, k in enumerate(self.keys):
            H, W, C = self.image_shapes[k]
            trunk = DrQConv(C, channels) if encoder == "drq" else ResNet10(C, channels)
            if weights is not None:
                load_encoder_weights(trunk, weights)
            if freeze:
                trunk.requires_grad_(False)
            with torch.no_grad():
                _, K, h, w = trunk(torch.zeros(1, C, H, W)).shape
            if pooling == "spatial_softmax" and h * w < 4:  # the keypoints of a 1x1 map are constant
                warnings.warn(f"camera {k} ({H}x{W} px) leaves a {h}x{w} feature map after the {encoder} trunk, too "
                              f"small for pooling={pooling}: its keypoints are constant, so the policy does not see this "
                              "camera; record larger frames (e.g. 64 px for resnet10, 24 px for drq) or set "
                              "agent.model.pooling=flatten", RuntimeWarning, stacklevel=2)
            pool: nn.Module = {"flatten": nn.Flatten(), "spatial_softmax": SpatialSoftmax(),
                               "spatial_embedding": SpatialEmbedding(K, h, w)}[pooling]
            pooled += {"flatten": K * h * w, "spatial_softmax": 2 * K, "spatial_embedding": K * 8}[pooling]
            self.trunks[f"cam{i}"] = trunk
            self.pools[f"cam{i}"] = pool
        self.project = nn.Sequential(nn.Linear(pooled, feature_dim), nn.LayerNorm(feature_dim), nn.Tanh())

    @property
    def out_dim(self) -> int:
        """``F + Ds``."""
        return self.feature_dim + self.state_dim

    def forward(self, images: Mapping[str, torch.Tensor], state: torch.Tensor | None = None, *,
                detach: bool = False) -> torch.Tensor:
        """``{key: uint8 (B, H, W, C)}``, ``(B, Ds)`` -> ``(B, F + Ds)``.

        ``detach=True`` stops the gradient at the features (the actor's reading of an
        encoder the critic trains: DrQ/SERL). Random shift applies in training mode only.

        Raises:
            ValueError: a camera is missing or has the wrong shape/dtype.
        """
        from robotrl.vision.augment import random_shift

        parts = []
        for i, k in enumerate(self.keys):
            if k not in images:
                raise ValueError(f"PixelEncoder expects camera {k!r}; got {sorted(images)}")
            x = to_float_chw(images[k])
            if not torch.jit.is_tracing() and tuple(x.shape[2:]) != self.image_shapes[k][:2]:
                raise ValueError(f"camera {k!r} frames are {tuple(x.shape[2:])}, the encoder was built for {self.image_shapes[k][:2]}")
            if self.training and self.augment_pad > 0:
                x = random_shift(x, self.augment_pad)
            parts.append(self._head(i, self._stem(i, x)))
        return self._finish(parts, state, detach)

    def cacheable(self) -> bool:
        """Whether the trunk's output per frame is a fixed function of the frame: a frozen trunk and no random
        shift (``freeze`` and ``augment_pad == 0``), so :meth:`stem` may be cached per stored frame."""
        return bool(self.freeze) and self.augment_pad == 0

    def _pool_is_fixed(self, i: int) -> bool:
        return not any(True for _ in self.pools[f"cam{i}"].parameters())

    def _stem(self, i: int, x: torch.Tensor) -> torch.Tensor:
        """Trunk (and parameter-free pooling) of camera ``i`` on float ``(B, C, H, W)``."""
        y = self.trunks[f"cam{i}"](x)
        return self.pools[f"cam{i}"](y) if self._pool_is_fixed(i) else y

    def _head(self, i: int, y: torch.Tensor) -> torch.Tensor:
        """The trainable pooling of camera ``i`` on its stem output (identity when pooling has no parameters)."""
        return y if self._pool_is_fixed(i) else self.pools[f"cam{i}"](y)

    @torch.no_grad()
    def stem(self, key: str, frames: torch.Tensor) -> torch.Tensor:
        """The frozen part of camera ``key`` on uint8 ``(B, H, W, C)`` frames, no random shift: the trunk's
        pooled output ``(B, P)`` (``flatten``: ``P = K·h·w``; ``spatial_softmax``: ``2K``) or, for the
        learned ``spatial_embedding`` pooling, the feature map ``(B, K, h, w)``. What
        :class:`robotrl.vision.cache.FrozenFeatureCache` stores per frame.

        Raises:
            ValueError: frames not uint8 ``(B, H, W, C)``; an unknown camera (``KeyError``).
        """
        return self._stem(self.keys.index(key), to_float_chw(frames))

    def forward_from_stems(self, stems: Mapping[str, torch.Tensor], state: torch.Tensor | None = None, *,
                           detach: bool = False) -> torch.Tensor:
        """:meth:`forward` from precomputed :meth:`stem` outputs ``{key: (B, ...)}`` (a frozen trunk's cached
        features): the trainable pooling, the projection and the state -> ``(B, F + Ds)``.

        Raises:
            ValueError: a camera missing, or the encoder is not :meth:`cacheable` (its stem changes per call).
        """
        if not self.cacheable():
            raise ValueError("forward_from_stems needs a frozen trunk without random shift (freeze=True, augment_pad=0)")
        missing = [k for k in self.keys if k not in stems]
        if missing:
            raise ValueError(f"PixelEncoder expects stems of cameras {missing}; got {sorted(stems)}")
        return self._finish([self._head(i, stems[k]) for i, k in enumerate(self.keys)], state, detach)

    def _finish(self, parts: list[torch.Tensor], state: torch.Tensor | None, detach: bool) -> torch.Tensor:
        """Projection of the pooled cameras and the appended state."""
        z = self.project(torch.cat(parts, dim=-1))
        if self.state_dim:
            if state is None or (not torch.jit.is_tracing() and state.shape[-1] != self.state_dim):
                raise ValueError(f"PixelEncoder expects a state (B, {self.state_dim}), got "
                                 f"{None if state is None else tuple(state.shape)}")
            z = torch.cat([z, state.to(z.dtype)], dim=-1)
        return z.detach() if detach else z
