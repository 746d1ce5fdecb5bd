"""Feature caching for a frozen image encoder: the trunk runs once per stored frame, not once per sample.

With a frozen, pretrained trunk (``agent.model.freeze_encoder=true``) and no random shift
(``augment_pad=0``), a frame's trunk output never changes, yet a Q-learning update re-encodes
every sampled frame (``2B`` frames per update, each frame sampled ~``UTD·B/N`` times over its
life in a buffer of ``N``). :class:`FrozenFeatureCache` keeps the trunk's (pooled) output of
every frame it has seen, keyed by the replay buffer's frame ids (``Batch.extras["obs_uid"]`` /
``["next_obs_uid"]``, :mod:`robotrl.data.replay`), and computes only the frames it has not.

Invalidation:

* frames: a replay slot that is overwritten, a separately kept next frame and a buffer
  restored from a checkpoint get fresh ids, so a replaced frame is never served stale
  features (its old entry is simply never hit again and is evicted, oldest first, once the
  cache is full);
* weights: the cache records the version counters of the trunk's parameters; any in-place
  change (``load_state_dict``, a warm start, an optimizer step on an unfrozen trunk) clears it
  at the next lookup. Owners also :meth:`clear` it explicitly when they load weights.

Memory: ``capacity × P × 4`` bytes per camera (``P`` the stem size,
:meth:`robotrl.vision.encoders.PixelEncoder.stem`: ``K·h·w`` for ``flatten`` pooling, ``2K``
for ``spatial_softmax``).

Symbols: ``B`` batch, ``H, W, C`` frame size, ``P`` stem features of one frame.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch

from robotrl.vision.encoders import PixelEncoder

__all__ = ["FrozenFeatureCache"]


class FrozenFeatureCache:
    """Stem outputs of a frozen :class:`~robotrl.vision.encoders.PixelEncoder` per stored frame (module doc).

    Args:
        encoder: the encoder whose :meth:`~robotrl.vision.encoders.PixelEncoder.stem` is cached; it must be
            :meth:`~robotrl.vision.encoders.PixelEncoder.cacheable` (frozen trunk, ``augment_pad=0``).
        capacity: frames kept per camera (oldest evicted first); at least the rows of one lookup is sensible.

    Attributes:
        hits, misses: frames served from the cache / computed, since construction (cleared caches included).

    Raises:
        ValueError: the encoder is not cacheable, or ``capacity < 1``.
    """

    def __init__(self, encoder: PixelEncoder, capacity: int):
        if not encoder.cacheable():
            raise ValueError("feature caching needs a frozen trunk without random shift (freeze_encoder=true, "
                             "augment_pad=0): otherwise a frame's features change between updates")
        if capacity < 1:
            raise ValueError(f"feature cache capacity must be >= 1, got {capacity}")
        self.encoder, self.capacity = encoder, int(capacity)
        self.hits = self.misses = 0
        self._store: dict[str, torch.Tensor] = {}  # key -> (capacity, *stem shape)
        self._row: dict[int, int] = {}  # frame uid -> row (same rows for every camera)
        self._uid_of = np.full(self.capacity, -1, np.int64)  # row -> uid (eviction)
        self._next = 0
        self._versions = self._weight_versions()

    def _weight_versions(self) -> tuple[int, ...]:
        """In-place version counters of the trunks' parameters and buffers (change on any write)."""
        return tuple(t._version for t in (*self.encoder.trunks.parameters(), *self.encoder.trunks.buffers()))

    def clear(self) -> None:
        """Forget every cached frame (the trunk's weights changed)."""
        self._store.clear()
        self._row.clear()
        self._uid_of[:] = -1
        self._next = 0
        self._versions = self._weight_versions()

    def __len__(self) -> int:
        return len(self._row)

    def stems(self, images: Mapping[str, torch.Tensor], uids: torch.Tensor) -> dict[str, torch.Tensor]:
        """Stem outputs ``{key: (B, ...)}`` of frames ``{key: uint8 (B, H, W, C)}`` with ids ``uids`` int64 ``(B,)``.

        Frames whose id is cached are served from the cache; the others (each distinct id once) go
        through the trunk and are stored. Equal to ``{k: encoder.stem(k, images[k])}``.

        Raises:
            ValueError: ``uids`` is not ``(B,)`` for the ``B`` frames, or a camera is missing.
        """
        if self._weight_versions() != self._versions:
            self.clear()
        ids = uids.detach().cpu().numpy().astype(np.int64).reshape(-1)
        B = ids.shape[0]
        for k in self.encoder.keys:
            if k not in images:
                raise ValueError(f"feature cache: camera {k!r} missing from the batch ({sorted(images)})")
            if images[k].shape[0] != B:
                raise ValueError(f"feature cache: {B} frame ids for {images[k].shape[0]} frames of {k!r}")
        rows = np.fromiter((self._row.get(int(u), -1) for u in ids), np.int64, count=B)
        hit = rows >= 0
        miss_ids, first, inverse = np.unique(ids[~hit], return_index=True, return_inverse=True)
        miss_pos = np.flatnonzero(~hit)
        self.hits += int(hit.sum())
        self.misses += int(miss_ids.size)
        dev = next(iter(images.values())).device
        out: dict[str, torch.Tensor] = {}
        fresh: dict[str, torch.Tensor] = {}
        for k in self.encoder.keys:
            new = self.encoder.stem(k, images[k][torch.as_tensor(miss_pos[first], device=dev)]) if miss_ids.size else None
            if k not in self._store:
                shape = new.shape[1:] if new is not None else self.encoder.stem(k, images[k][:1]).shape[1:]
                self._store[k] = torch.zeros((self.capacity, *shape), device=dev)
            res = torch.empty((B, *self._store[k].shape[1:]), device=dev)
            if hit.any():
                res[torch.as_tensor(np.flatnonzero(hit), device=dev)] = self._store[k][torch.as_tensor(rows[hit], device=dev)]
            if new is not None:
                res[torch.as_tensor(miss_pos, device=dev)] = new[torch.as_tensor(inverse, device=dev)]
                fresh[k] = new
            out[k] = res
        if miss_ids.size:  # store after serving: an eviction never hits a row this lookup reads
            keep = miss_ids[-self.capacity:]
            offset = miss_ids.size - keep.size
            slots = (self._next + np.arange(keep.size)) % self.capacity
            self._next = int((self._next + keep.size) % self.capacity)
            for old in self._uid_of[slots][self._uid_of[slots] >= 0].tolist():
                self._row.pop(int(old), None)
            self._uid_of[slots] = keep
            self._row.update(zip(keep.tolist(), slots.tolist()))
            idx = torch.as_tensor(slots, device=dev)
            for k, new in fresh.items():
                self._store[k][idx] = new[offset:]
        return out
