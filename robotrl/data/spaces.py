"""Flattening of (possibly goal-conditioned) observation spaces.

Minari datasets and gymnasium-robotics tasks (PointMaze, AntMaze, Fetch, Kitchen) use
``Dict`` observations such as ``{"achieved_goal": (2,), "desired_goal": (2,),
"observation": (4,)}``. Networks need one flat vector of size ``Do``. The order is the
order of the ``Dict`` space's own keys (gymnasium sorts the keys of a plain dict, so for
the tasks above it is alphabetical); nested dicts are walked depth first and named with
``/``. The :class:`FlatLayout` records that order, each key's shape and its slice, so a
flat vector can be split back into its parts (:meth:`FlatLayout.unflatten`). The layout
is stored with every checkpoint and recorded into datasets the project writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.errors import SpaceMismatchError


@dataclass(frozen=True)
class FlatLayout:
    """Order, shapes and slices of a flattened ``Dict`` observation.

    Attributes:
        keys: key paths in flattening order, nested keys joined with ``/``.
        shapes: the per-key shape (without batch dimensions).
    """

    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]

    @property
    def size(self) -> int:
        """``Do``, the length of the flat vector."""
        return int(sum(int(np.prod(s)) for s in self.shapes))

    @property
    def slices(self) -> dict[str, slice]:
        """Slice of the flat vector that holds each key."""
        out, start = {}, 0
        for key, shape in zip(self.keys, self.shapes):
            n = int(np.prod(shape))
            out[key] = slice(start, start + n)
            start += n
        return out

    def flatten(self, obs: Mapping) -> np.ndarray:
        """Flatten a (possibly nested) dict of arrays.

        Args:
            obs: mapping with arrays of shape ``(*batch, *shape_k)`` per key; the batch
                dimensions must agree across keys (none for a single observation).

        Returns:
            float32 array ``(*batch, Do)``.

        Raises:
            SpaceMismatchError: a key of the layout is missing or has another shape.
        """
        parts = []
        batch = None
        for key, shape in zip(self.keys, self.shapes):
            value = obs
            try:
                for part in key.split("/"):
                    value = value[part]
            except (KeyError, TypeError) as exc:
                raise SpaceMismatchError(
                    f"observation has no key {key!r} (expected keys {list(self.keys)}); "
                    "the data comes from a different environment than this layout"
                ) from exc
            arr = np.asarray(value, dtype=np.float32)
            lead = arr.shape[: arr.ndim - len(shape)]
            if arr.shape[arr.ndim - len(shape):] != tuple(shape) or (batch is not None and lead != batch):
                raise SpaceMismatchError(
                    f"observation key {key!r} has shape {arr.shape}, expected (*batch, {tuple(shape)}) "
                    "consistent across keys; check that the dataset matches the environment"
                )
            batch = lead
            parts.append(arr.reshape(*lead, -1))
        return np.concatenate(parts, axis=-1)

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """Split ``(*batch, Do)`` back into ``{key: (*batch, *shape_k)}`` (flat keys)."""
        flat = np.asarray(flat)
        if flat.shape[-1] != self.size:
            raise SpaceMismatchError(f"flat observation has size {flat.shape[-1]}, layout expects {self.size}")
        lead = flat.shape[:-1]
        return {k: flat[..., sl].reshape(*lead, *shape) for (k, sl), shape in zip(self.slices.items(), self.shapes)}

    def to_json(self) -> str:
        """Serialise as JSON (stored in checkpoints and dataset metadata)."""
        return json.dumps({"keys": list(self.keys), "shapes": [list(s) for s in self.shapes]})

    @classmethod
    def from_json(cls, text: str) -> "FlatLayout":
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        return cls(tuple(d["keys"]), tuple(tuple(s) for s in d["shapes"]))


def _walk(space: gym.Space, prefix: str, keys: list, shapes: list) -> None:
    if isinstance(space, gym.spaces.Dict):
        for name, sub in space.spaces.items():
            _walk(sub, f"{prefix}{name}/", keys, shapes)
    elif isinstance(space, gym.spaces.Box):
        keys.append(prefix[:-1])
        shapes.append(tuple(int(d) for d in space.shape))
    else:
        raise SpaceMismatchError(
            f"unsupported observation sub-space {space!r} at {prefix[:-1]!r}: robotrl flattens Box and Dict-of-Box spaces"
        )


def layout_for_space(space: gym.Space) -> FlatLayout | None:
    """Layout of a ``Dict`` space, or ``None`` for a ``Box`` (already flat-able).

    Raises:
        SpaceMismatchError: the space is neither Box nor a (nested) Dict of Box.
    """
    if isinstance(space, gym.spaces.Box):
        return None
    if not isinstance(space, gym.spaces.Dict):
        raise SpaceMismatchError(f"unsupported observation space {space!r}: use a Box or Dict-of-Box space")
    keys: list[str] = []
    shapes: list[tuple[int, ...]] = []
    _walk(space, "", keys, shapes)
    return FlatLayout(tuple(keys), tuple(shapes))


def flat_dim(space: gym.Space) -> int:
    """``Do`` (observations) or ``Da`` (actions): the flattened size of a Box/Dict space."""
    layout = layout_for_space(space)
    return int(np.prod(space.shape)) if layout is None else layout.size


def flatten_observation(obs, layout: FlatLayout | None) -> np.ndarray:
    """Flatten one observation or a batch: dicts through ``layout``, arrays reshaped.

    Returns float32 ``(*batch, Do)``; for a Box observation, ``(*batch, *obs_shape)``
    is flattened over its trailing dimensions only when ``layout`` is ``None`` and the
    observation is 1-D per item (the case for every supported task).
    """
    if layout is None:
        return np.asarray(obs, dtype=np.float32)
    return layout.flatten(obs)


def flat_observation_space(space: gym.Space) -> gym.spaces.Box:
    """The ``Box(Do)`` space of flattened observations of ``space``."""
    layout = layout_for_space(space)
    if layout is None:
        return space
    lows, highs = [], []

    def walk(s):
        if isinstance(s, gym.spaces.Dict):
            for sub in s.spaces.values():
                walk(sub)
        else:
            lows.append(np.asarray(s.low, dtype=np.float32).ravel())
            highs.append(np.asarray(s.high, dtype=np.float32).ravel())

    walk(space)
    return gym.spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)


def is_image_space(space: gym.Space) -> bool:
    """A camera: ``Box`` of dtype uint8 and shape ``(H, W, C)`` with ``C`` in 1, 3, 4."""
    return (isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3
            and space.shape[-1] in (1, 3, 4))


def split_images(space: gym.Space) -> tuple[gym.Space, dict[str, tuple[int, int, int]]]:
    """Split a ``Dict`` space into its low-dimensional part and its cameras.

    Returns:
        ``(low, images)``: ``low`` the space without camera entries (a ``Dict``, possibly
        empty; ``space`` itself when it is not a ``Dict``), ``images`` ``{key path: (H, W, C)}``
        of every ``uint8 (H, W, C)`` entry (nested keys joined with ``/``), in the space's order.
    """
    images: dict[str, tuple[int, int, int]] = {}

    def walk(sp: gym.Space, prefix: str):
        if isinstance(sp, gym.spaces.Dict):
            kept = {}
            for name, sub in sp.spaces.items():
                if is_image_space(sub):
                    images[f"{prefix}{name}"] = tuple(int(d) for d in sub.shape)  # type: ignore[assignment]
                else:
                    kept[name] = walk(sub, f"{prefix}{name}/")
            return gym.spaces.Dict(kept)
        return sp

    return walk(space, ""), images


def get_key(obs, key: str):
    """``obs[a][b]`` for the key path ``"a/b"``."""
    for part in key.split("/"):
        obs = obs[part]
    return obs


def stack_obs(obs_list: list) -> Any:
    """Stack a list of observations (arrays or nested dicts of arrays) along a new axis 0."""
    first = obs_list[0]
    if isinstance(first, Mapping):
        return {k: stack_obs([o[k] for o in obs_list]) for k in first}
    return np.stack([np.asarray(o) for o in obs_list])
