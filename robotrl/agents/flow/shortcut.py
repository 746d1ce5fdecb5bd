"""Shortcut models: a flow velocity network also conditioned on the step size ``d``.

Frans, Hafner, Levine, Abbeel 2024, "One Step Diffusion via Shortcut Models" (reference code
kvfrans/shortcut-models, ``targets_shortcut.py``). The network ``s_θ(x_t, t, d, s)`` predicts
the *average* velocity over a step of size ``d``, so ``x ← x + d·s(x, t, d)`` is a good step
for any ``d`` the network was trained on, ``d = 1`` (one step) included. Symbols: ``B`` batch,
``To``/``Do`` observation history/size, ``Ta``/``Da`` chunk length/action size, ``M`` finest
number of steps (``shortcut_max_steps``, 128 in the paper).

Step sizes are embedded through their level ``log2(1/d)`` (the reference feeds
``dt_base = log2(steps)`` to a time embedder): levels ``0 … log2 M``; ``d = 0`` (plain flow
matching) shares the finest level ``log2 M`` with ``d = 1/M``, as in the reference, where the
flow-matching rows of a batch carry ``dt_base = log2 M``.

Training times (:func:`shortcut_times`, the reference's grid): a self-consistency row draws a
level ``L ∈ {0 … log2 M − 1}`` uniformly, trains the step ``d = 2^-L ∈ {1, 1/2, …, 2/M}`` from two
half steps ``d/2 ∈ {1/2, …, 1/M}``, at ``t`` on the grid of multiples of ``d`` in ``[0, 1)``; a
flow-matching row has ``d = 0`` and ``t ~ U[0, 1)``. (The reference assigns the levels to the
self-consistency rows in equal shares rather than at random, and puts the flow-matching rows' ``t``
on the grid of multiples of ``1/M``.)
"""

from __future__ import annotations

import math

import torch
from torch import nn

from robotrl.agents.diffusion.networks import SinusoidalEmbedding
from robotrl.errors import ConfigError
from robotrl.networks import activation


def check_max_steps(max_steps: int) -> int:
    """``M`` as an int.

    Raises:
        ConfigError: ``M`` is not a power of two ``>= 2``.
    """
    m = int(max_steps)
    if m < 2 or m & (m - 1):
        raise ConfigError(f"agent.model.shortcut_max_steps (M, the finest number of steps) must be a power of two "
                          f">= 2, got {max_steps}")
    return m


def step_level(d: torch.Tensor, max_steps: int) -> torch.Tensor:
    """Embedding input ``log2(1/d)`` ``(B,)`` float for step sizes ``d (B,)``; ``d = 0`` (and
    ``d < 1/M``) map to the finest level ``log2 M``."""
    top = math.log2(max_steps)
    safe = d.float().clamp(min=1.0 / max_steps)
    return torch.where(d > 0, -torch.log2(safe), torch.full_like(safe, top))


class ShortcutVelocity(nn.Module):
    """``s_θ(x (B,Ta,Da), t (B,), cond (B,To,Do), d (B,)) -> (B,Ta,Da)``: a flow denoiser whose condition
    is extended by an embedding of the step size.

    The step level (:func:`step_level`) goes through the same time-embedding machinery as ``t``
    (sinusoidal embedding → Linear → act → Linear) and is concatenated to the flattened
    observation history; ``base`` (any :func:`~robotrl.agents.diffusion.networks.build_denoiser`
    network, built for a condition of ``To·Do + step_dim`` values) sees ``(x, t, [cond, emb(d)])``.

    Args:
        base: the denoiser, built with ``obs_horizon = 1`` and ``obs_dim = To·Do + step_dim``.
        max_steps: ``M``; step_dim: size of the step embedding (even); act: its activation.

    Attributes:
        step_conditioned: True (what :func:`~robotrl.agents.flow.sampling.velocity` dispatches on).
    """

    step_conditioned = True

    def __init__(self, base: nn.Module, max_steps: int, step_dim: int = 16, act: str = "mish"):
        super().__init__()
        self.max_steps = check_max_steps(max_steps)
        self.base = base
        self.step_emb = nn.Sequential(SinusoidalEmbedding(step_dim), nn.Linear(step_dim, 2 * step_dim),
                                      activation(act), nn.Linear(2 * step_dim, step_dim))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
        B = x.shape[0]
        e = self.step_emb(step_level(d, self.max_steps))
        return self.base(x, t, torch.cat([cond.reshape(B, -1), e], dim=-1)[:, None])


def shortcut_times(batch: int, n_consistency: int, max_steps: int, *, device: torch.device | str | None = None,
                   generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Times ``t (B,)`` and step sizes ``d (B,)`` of a shortcut training batch (module doc).

    The first ``n_consistency`` rows are self-consistency rows (``d ∈ {1, …, 2/M}``, ``t`` a
    multiple of ``d`` in ``[0, 1)``), the others flow-matching rows (``d = 0``, ``t ~ U[0, 1)``).

    Raises:
        ConfigError: ``n_consistency`` outside ``[0, batch]`` or a bad ``M``.
    """
    if not 0 <= n_consistency <= batch:
        raise ConfigError(f"{n_consistency} self-consistency rows do not fit a batch of {batch}: lower "
                          "agent.model.shortcut_fraction (in [0, 1])")
    levels = int(math.log2(check_max_steps(max_steps)))
    t = torch.rand((batch,), device=device, generator=generator)
    lvl = torch.randint(0, levels, (n_consistency,), device=device, generator=generator)
    sections = 2 ** lvl
    u = torch.rand((n_consistency,), device=device, generator=generator)
    t[:n_consistency] = torch.floor(u * sections) / sections
    d = torch.zeros((batch,), device=device)
    d[:n_consistency] = 1.0 / sections
    return t, d
