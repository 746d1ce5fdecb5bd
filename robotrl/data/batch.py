"""The one batch type of robotrl.

Every sampler (uniform transitions, n-step, ``(To, Ta)`` sequences, offline/online
mixtures) returns a :class:`Batch`; every agent consumes one. Offline and online data
are the same kind of object (TorchRL's habit).

Shapes (symbols of ``algorithms.md``; ``B`` batch):

========================  ====================  ========================
field                     transitions           sequences
========================  ====================  ========================
``observations``          ``(B, Do)``           ``(B, To, Do)``
``actions``               ``(B, Da)``           ``(B, Ta, Da)``
``rewards``               ``(B,)``              ``(B, Ta)``
``next_observations``     ``(B, Do)``           ``(B, Ta, Do)``
``terminated``            ``(B,)``              ``(B, Ta)``
``truncated``             ``(B,)``              ``(B, Ta)``
``discounts``             ``(B,)``              ``(B, Ta)``
``mc_returns``            ``(B,)``              ``(B, Ta)``
``mask``                  ``None``              ``(B, Ta)``
========================  ====================  ========================

For n-step transitions ``rewards`` is the discounted n-step sum ``Σ_{k<m} γ^k r_{t+k}``,
``next_observations`` the observation after the last of the ``m ≤ n`` steps and
``discounts = γ^m``; the TD target is
``rewards + discounts * (1 - terminated) * V(next_observations)``. ``terminated`` and
``truncated`` are never merged: a truncated step still bootstraps.

Cameras travel in ``extras`` as uint8 ``"obs/<key>"`` and ``"next_obs/<key>"``
(``(B, H, W, C)``; ``(B, To, ...)`` / ``(B, Ta, ...)`` for sequences); :meth:`Batch.images`
and :meth:`Batch.next_images` return them by key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch


@dataclass
class Batch:
    """A batch of transitions or sequences as torch tensors (see the module table)."""

    observations: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_observations: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    discounts: torch.Tensor
    mc_returns: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def to(self, device: torch.device | str) -> "Batch":
        """Copy of the batch on ``device`` (non-blocking where possible)."""
        def mv(t):
            return None if t is None else t.to(device, non_blocking=True)

        kw = {f.name: mv(getattr(self, f.name)) for f in fields(self) if f.name != "extras"}
        return Batch(**kw, extras={k: mv(v) for k, v in self.extras.items()})

    @staticmethod
    def from_numpy(device: torch.device | str = "cpu", **arrays) -> "Batch":
        """Build from NumPy arrays (bools become float32 0/1 for arithmetic in losses)."""
        def conv(a):
            if a is None:
                return None
            a = np.asarray(a)
            if a.dtype == np.bool_:
                a = a.astype(np.float32)
            return torch.from_numpy(np.ascontiguousarray(a)).to(device, non_blocking=True)

        extras = {k: conv(v) for k, v in (arrays.pop("extras", None) or {}).items()}
        return Batch(**{k: conv(v) for k, v in arrays.items()}, extras=extras)

    @staticmethod
    def cat(batches: list["Batch"]) -> "Batch":
        """Concatenate along the batch dimension (fields missing in one are dropped)."""
        first = batches[0]
        kw = {}
        for f in fields(first):
            if f.name == "extras":
                continue
            vals = [getattr(b, f.name) for b in batches]
            kw[f.name] = None if any(v is None for v in vals) else torch.cat(vals, dim=0)
        keys = set.intersection(*(set(b.extras) for b in batches))
        return Batch(**kw, extras={k: torch.cat([b.extras[k] for b in batches]) for k in keys})

    def images(self) -> dict[str, torch.Tensor]:
        """Camera frames of the observations, ``{key: uint8 (B, H, W, C)}`` (``(B, To, H, W, C)`` for sequences)."""
        return {k[len("obs/"):]: v for k, v in self.extras.items() if k.startswith("obs/")}

    def next_images(self) -> dict[str, torch.Tensor]:
        """Camera frames of the next observations, ``{key: uint8 (B, H, W, C)}`` (``(B, Ta, H, W, C)`` for sequences)."""
        return {k[len("next_obs/"):]: v for k, v in self.extras.items() if k.startswith("next_obs/")}

    def replace(self, **changes) -> "Batch":
        """A copy with some fields replaced (e.g. normalised observations)."""
        return replace(self, **changes)
