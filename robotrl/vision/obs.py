"""Splitting a camera ``Dict`` observation into the flat state and the frames.

Symbols: ``N`` envs (or ``B`` batch), ``Ds`` flat state size, ``H, W, C`` frame size.
"""

from __future__ import annotations

from collections.abc import Mapping

import gymnasium as gym
import numpy as np

from robotrl.data.spaces import FlatLayout, get_key, layout_for_space, split_images
from robotrl.errors import SpaceMismatchError

__all__ = ["PixelLayout", "pixel_layout"]


class PixelLayout:
    """How a camera ``Dict`` observation splits: the flat state's :class:`FlatLayout` and the cameras.

    Args:
        state: layout of the non-camera part (``None``: no state).
        image_shapes: ``{key path: (H, W, C)}`` of the cameras (``"pixels/<camera>"`` for
            :class:`robotrl.envs.pixels.PixelObservation` envs).
    """

    def __init__(self, state: FlatLayout | None, image_shapes: Mapping[str, tuple[int, ...]]):
        self.state = state
        self.image_shapes = {k: tuple(int(d) for d in v) for k, v in image_shapes.items()}

    @property
    def state_dim(self) -> int:
        """``Ds`` (0 without state)."""
        return 0 if self.state is None else self.state.size

    def split(self, obs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """One observation or a batch -> ``(state float32 (*batch, Ds), {key: uint8 (*batch, H, W, C)})``.

        Raises:
            SpaceMismatchError: a camera is missing or not ``uint8`` of its shape.
        """
        images = {}
        for k, shape in self.image_shapes.items():
            try:
                a = np.asarray(get_key(obs, k))
            except (KeyError, TypeError) as exc:
                raise SpaceMismatchError(f"observation has no camera {k!r}; make the env with the same pixels=[...] "
                                         "as the data (make_env(..., pixels=..., size=...))") from exc
            if a.dtype != np.uint8 or a.shape[a.ndim - 3:] != shape:
                raise SpaceMismatchError(f"camera {k!r} is {a.dtype} {a.shape}, expected uint8 (..., {shape}); "
                                         "use the image size the policy was trained with")
            images[k] = a
        lead = next(iter(images.values())).shape[:-3]
        if self.state is None or not self.state.keys:
            return np.zeros((*lead, 0), np.float32), images
        return self.state.flatten(obs), images


def pixel_layout(space: gym.Space) -> PixelLayout:
    """The :class:`PixelLayout` of a ``Dict`` observation space with cameras.

    Raises:
        SpaceMismatchError: the space has no ``uint8 (H, W, C)`` camera.
    """
    low, images = split_images(space)
    if not images:
        raise SpaceMismatchError(f"observation space {space} has no camera (uint8 (H, W, C)); "
                                 "make the env with make_env(..., pixels=[...])")
    return PixelLayout(layout_for_space(low) if isinstance(low, gym.spaces.Dict) else None, images)
