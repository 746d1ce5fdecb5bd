"""The deployable residual policy: a frozen base policy plus a small per-step correction.

ResiP (Ankile et al. 2024, "From Imitation to Refinement", ankile/robust-rearrangement),
ResFiT ("Residual Off-Policy RL for Finetuning Behavior Cloning Policies",
amazon-science/residual-offpolicy-rl) and Policy Decorator (tongzhoumu/policy_decorator)
share this structure. Symbols: ``B``/``N`` batch / envs, ``Do`` observation size, ``Da``
action size, ``Ta``/``Te`` the base's predicted / executed chunk length.

Per env step, for raw observations ``o (B, Do)``:

1. ``a_base = base(o)`` raw ``(B, Da)``. The base is any robotrl policy (composition,
   never subclassing): chunked bases (diffusion, DPPO) serve one action per step from
   their per-env queues, refilled as they empty; :meth:`ResidualPolicy.reset` clears
   the queues of the given envs at episode starts.
2. The residual network sees ``x = [clamp(normalize(o), ±obs_clip), normalize(a_base)]``
   ``(B, Do + Da)`` (normalised observation, base action in ``[-1, 1]``) and outputs
   ``r (B, Da)`` (``head``: ``"gaussian"`` mean for PPO, ``"tanh"`` for TD3,
   ``"tanh_gaussian"`` for SAC).
3. The combined action adds ``residual_scale · r`` in normalised action space, which
   in raw units is ``a = clip(a_base + residual_scale · r · (high - low) / 2, low, high)``.

The residual's output layer starts at exactly zero, so at initialisation ``r = 0`` and
``a = a_base`` bit for bit (the addition is done in raw units for that reason).

Saving: :func:`robotrl.policy.policy_state` stores ``spec()`` — which holds the base's
``{"target", "kwargs"}`` — and the ``state_dict`` — which holds the base's weights under
``base.`` — so :func:`robotrl.policy.load_policy` rebuilds the whole residual policy
without the original base file.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agents.residual.base import base_descriptor, build_base
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.networks import MLP

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
HEADS = ("gaussian", "tanh", "tanh_gaussian")


def combine_delta(base_raw: torch.Tensor, delta: torch.Tensor, scaler: ActionScaler) -> torch.Tensor:
    """Raw ``clip(a_base + δ · (high - low)/2, low, high)`` ``(B, Da)`` for raw base actions ``(B, Da)`` and an
    offset ``δ (B, Da)`` in normalised action units (the addition is in raw units: ``δ = 0`` gives ``a_base``
    bit for bit). Shared by the state and the camera residual policies."""
    a = base_raw + delta * (0.5 * (scaler.high - scaler.low))
    return torch.maximum(torch.minimum(a, scaler.high), scaler.low)


class ResidualPolicy(nn.Module):
    """``(B, Do)`` raw observation → ``(B, Da)`` raw action = frozen base + scaled residual.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        base: ``{"target": class path under robotrl.agents., "kwargs": spec}`` of the base
            policy (see :func:`~robotrl.agents.residual.base.base_descriptor`), or a
            module (its descriptor is taken; its weights are copied), or ``None`` (set
            later with :meth:`set_base`; acting before that raises).
        hidden, act: residual MLP.
        head: ``"gaussian"`` (PPO: state-independent ``log_std``), ``"tanh"``
            (deterministic TD3 actor), ``"tanh_gaussian"`` (SAC actor, state-dependent
            ``log_std``).
        residual_scale: ``α``, the scale of ``r`` in normalised action units (ResiP 0.1,
            Policy Decorator 0.03–0.3).
        obs_clip: clamp of normalised observations seen by the residual (ResiP 3).
        init_log_std: initial ``log_std`` of the Gaussian head (ResiP −1, fixed).
        learn_log_std: train ``log_std`` (``False``: fixed, as ResiP).

    Attributes:
        To: 2 — the on-policy collector keeps two observations; a history whose rows are
            identical marks an episode start (:mod:`robotrl.onpolicy` restarts histories
            from the reset observation), which resets the base's chunk queue in rollouts.
        Te: 1 — one action per env step (the residual acts inside base chunks).

    Raises:
        ValueError: unknown ``head``.
    """

    To = 2
    Te = 1

    def __init__(self, obs_dim: int, action_dim: int, base: dict | nn.Module | None = None,
                 hidden: Sequence[int] = (256, 256), *, act: str = "relu", head: str = "gaussian",
                 residual_scale: float = 0.1, obs_clip: float | None = 3.0, init_log_std: float = -1.0,
                 learn_log_std: bool = False):
        super().__init__()
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self.head, self.residual_scale = head, float(residual_scale)
        self._spec = dict(obs_dim=self.obs_dim, action_dim=self.action_dim, base=None, hidden=[int(h) for h in hidden],
                          act=act, head=head, residual_scale=self.residual_scale, obs_clip=obs_clip,
                          init_log_std=float(init_log_std), learn_log_std=bool(learn_log_std))
        self.obs_normalizer = ObservationNormalizer(np.zeros(obs_dim), np.ones(obs_dim), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))
        out = 2 * action_dim if head == "tanh_gaussian" else action_dim
        self.residual = MLP(obs_dim + action_dim, out, hidden, act=act, final_init_scale=0.0)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)), requires_grad=bool(learn_log_std))
        self.base: nn.Module | None = None
        if base is not None:
            self.set_base(base)

    # ------------------------------------------------------------------ setup
    def set_base(self, base: dict | nn.Module) -> None:
        """Install the frozen base (a descriptor ``{"target", "kwargs"}`` or a module, copied).

        Raises:
            ValueError: the base's ``obs_dim``/``action_dim`` differ from this policy's.
        """
        if isinstance(base, nn.Module):
            desc, module = base_descriptor(base), copy.deepcopy(base)
        else:
            desc, module = {"target": base["target"], "kwargs": copy.deepcopy(dict(base["kwargs"]))}, None
            module = build_base(desc["target"], desc["kwargs"])
        if int(getattr(module, "obs_dim", self.obs_dim)) != self.obs_dim or \
                int(getattr(module, "action_dim", self.action_dim)) != self.action_dim:
            raise ValueError(f"base sizes (Do={module.obs_dim}, Da={module.action_dim}) differ from the residual's "
                             f"(Do={self.obs_dim}, Da={self.action_dim})")
        ref = self.log_std
        self.base = module.to(ref.device).eval()
        self.base.requires_grad_(False)
        self._spec["base"] = desc

    def set_normalizers(self, obs_normalizer: ObservationNormalizer, action_scaler: ActionScaler) -> None:
        """Copy statistics (dataset observations, env action bounds) into this policy's buffers."""
        self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def use_base_obs_statistics(self) -> bool:
        """Copy the base's observation mean/std (BC, diffusion, PPO bases have them); returns whether it did."""
        norm = getattr(self.base, "obs_normalizer", None)
        if norm is None:
            return False
        with torch.no_grad():
            self.obs_normalizer.mean.copy_(norm.mean)
            self.obs_normalizer.std.copy_(norm.std)
        return True

    def floor_obs_std(self, floor: float) -> None:
        """Raise the residual's observation std to at least ``floor`` (ResFiT: 0.1), so dimensions that
        barely vary in a few demonstrations (Fetch's fingers: std ~1e-4) do not normalise to ``|z| >> 3``."""
        if floor > 0:
            with torch.no_grad():
                self.obs_normalizer.std.clamp_(min=float(floor))

    def train(self, mode: bool = True) -> "ResidualPolicy":
        """Train mode for the residual only; the frozen base stays in eval mode."""
        super().train(mode)
        if self.base is not None:
            self.base.eval()
        return self

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able), including the base's descriptor."""
        return copy.deepcopy(self._spec)

    # ------------------------------------------------------------------ pieces
    @torch.no_grad()
    def base_action(self, obs: torch.Tensor, base: nn.Module | None = None) -> torch.Tensor:
        """Raw base action ``(B, Da)`` (advances the base's chunk queues; ``base``: another copy).

        Raises:
            RuntimeError: no base installed.
        """
        base = base if base is not None else self.base
        if base is None:
            raise RuntimeError("ResidualPolicy has no base policy; pass base= or call set_base / agent.load_pretrained")
        return base(obs).to(obs.dtype)

    def features(self, obs: torch.Tensor, base_raw: torch.Tensor) -> torch.Tensor:
        """Residual input ``(B, Do + Da)``: clamped normalised obs and base action in ``[-1, 1]``."""
        return torch.cat([self.obs_normalizer(obs), self.action_scaler.normalize(base_raw).clamp(-1.0, 1.0)], dim=-1)

    def residual_params(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Head outputs for features ``x (B, Do + Da)``: ``(mean (B, Da), log_std (B, Da) or None)``.

        ``gaussian``: mean and the (clamped) parameter ``log_std``; ``tanh``: pre-tanh
        output and ``None``; ``tanh_gaussian``: pre-tanh mean and state-dependent ``log_std``.
        """
        out = self.residual(x)
        if self.head == "gaussian":
            return out, self.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).expand_as(out)
        if self.head == "tanh":
            return out, None
        mean, log_std = out.split(self.action_dim, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def deterministic_residual(self, x: torch.Tensor) -> torch.Tensor:
        """``r (B, Da)`` used for deployment: the Gaussian mean, or ``tanh`` of the mean."""
        mean, _ = self.residual_params(x)
        return mean if self.head == "gaussian" else torch.tanh(mean)

    def combine(self, base_raw: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """Raw combined action ``clip(a_base + α · r · (high - low)/2, low, high)`` ``(B, Da)``."""
        return self.combine_delta(base_raw, self.residual_scale * r)

    def combine_delta(self, base_raw: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Raw ``clip(a_base + δ · (high - low)/2, low, high)`` for an offset ``δ (B, Da)`` already in
        normalised action units (``δ = α r`` plus any exploration noise, which ResFiT adds there)."""
        return combine_delta(base_raw, delta, self.action_scaler)

    def combine_normalized(self, base_raw: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        """The combined action in ``[-1, 1]`` (what critics score), differentiable in ``r``."""
        return self.action_scaler.normalize(self.combine(base_raw, r)).clamp(-1.0, 1.0)

    # ------------------------------------------------------------------ deployable interface
    @torch.no_grad()
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` for raw observations ``(B, Do)``."""
        base_raw = self.base_action(obs)
        return self.combine(base_raw, self.deterministic_residual(self.features(obs, base_raw)))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear the base's per-env state (chunk queues, histories) of ``env_ids`` (``None``: all)."""
        if self.base is not None:
            self.base.reset(env_ids)
