"""Sampling offline and online buffers at an exact, schedulable ratio.

RLPD (Ball et al. 2023, github.com/ikostrikov/rlpd) samples each batch half offline,
half online; Cal-QL online mixes offline data in; WSRL uses ratio 0 (no offline data).
:class:`MixedSampler` draws exactly ``round(ratio · B)`` offline transitions per batch
(never a Bernoulli draw per row), so the mixture is exact in every batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from robotrl.data.batch import Batch
from robotrl.data.replay import ReplayBuffer


@dataclass(frozen=True)
class LinearSchedule:
    """``start → end`` linearly over ``steps`` calls, then constant (e.g. an offline ratio)."""

    start: float
    end: float
    steps: int

    def __call__(self, step: int) -> float:
        if self.steps <= 0:
            return self.end
        frac = min(max(step / self.steps, 0.0), 1.0)
        return self.start + frac * (self.end - self.start)


class MixedSampler:
    """Batches with an exact share of offline transitions.

    Args:
        offline: buffer of offline data.
        online: buffer of online experience.
        offline_ratio: fraction ``ρ ∈ [0, 1]`` of each batch drawn from ``offline``, or a
            callable ``step -> ρ`` (e.g. :class:`LinearSchedule`).

    The returned batch carries ``extras["offline"]`` ``(B,)``: 1 for rows from the
    offline buffer, 0 for online rows (offline rows first).
    """

    def __init__(self, offline: ReplayBuffer, online: ReplayBuffer, offline_ratio: float | Callable[[int], float]):
        self.offline, self.online = offline, online
        self.offline_ratio = offline_ratio

    def ratio(self, step: int) -> float:
        """ρ at ``step``; raises ValueError when outside ``[0, 1]``."""
        r = self.offline_ratio(step) if callable(self.offline_ratio) else float(self.offline_ratio)
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"offline ratio must be in [0, 1], got {r}")
        return r

    def split(self, batch_size: int, step: int = 0) -> tuple[int, int]:
        """``(n_offline, n_online)`` with ``n_offline = round(ρ · B)``."""
        n_off = int(round(self.ratio(step) * batch_size))
        return n_off, batch_size - n_off

    def sample(self, batch_size: int, *, step: int = 0, n_step: int = 1, complete_only: bool = False) -> Batch:
        """A batch of ``B`` transitions, exactly ``split(B, step)`` from each buffer
        (``complete_only``: online rows only from ended episodes, see :meth:`ReplayBuffer.sample`)."""
        n_off, n_on = self.split(batch_size, step)
        parts = []
        if n_off:
            parts.append(self.offline.sample(n_off, n_step=n_step))
        if n_on:  # the online buffer may still hold fewer rows than its share: repeats are fine there
            parts.append(self.online.sample(n_on, n_step=n_step, allow_small=True, complete_only=complete_only))
        out = Batch.cat(parts) if len(parts) > 1 else parts[0]
        device = out.rewards.device
        flag = torch.cat([torch.ones(n_off, device=device), torch.zeros(n_on, device=device)])
        out.extras["offline"] = flag
        return out
