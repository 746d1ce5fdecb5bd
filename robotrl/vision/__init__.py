"""Vision for pixel agents: encoders, pooling and augmentation.

``PixelEncoder`` turns ``{camera: uint8 (B, H, W, C)}`` (+ a state ``(B, Ds)``) into
features ``(B, F + Ds)``; ``random_shift`` is DrQ's augmentation. See
:mod:`robotrl.vision.encoders` and :mod:`robotrl.vision.augment`.
"""

from robotrl.vision.augment import random_shift
from robotrl.vision.encoders import (
    ENCODERS,
    POOLINGS,
    DrQConv,
    PixelEncoder,
    ResNet10,
    SpatialEmbedding,
    SpatialSoftmax,
    load_encoder_weights,
    to_float_chw,
)

__all__ = ["random_shift", "ENCODERS", "POOLINGS", "DrQConv", "PixelEncoder", "ResNet10", "SpatialEmbedding",
           "SpatialSoftmax", "load_encoder_weights", "to_float_chw"]
