"""Frozen base policies for residual RL: loaders and the stable-baselines3 adapter.

A residual policy (:class:`~robotrl.agents.residual.policy.ResidualPolicy`) wraps any
deployable robotrl policy (``forward(raw obs (B, Do)) -> raw action (B, Da)``,
``reset(env_ids)``, ``spec()``). This module turns what users have into such a module:

- a robotrl checkpoint (file or run directory) of BC, diffusion, DPPO, Gaussian PPO or
  Q-learning training: its ``policy`` entry is rebuilt with
  :func:`robotrl.policy.build_policy`;
- a stable-baselines3 model ``.zip`` (PPO/A2C, SAC, TD3/DDPG with MLP policies): the
  actor's linear layers are copied into :class:`SB3BasePolicy`, a plain robotrl module,
  so the residual checkpoint never holds (or unpickles) SB3 objects.

The base is described by ``{"target": class path, "kwargs": spec}`` (JSON-able); its
weights live in the residual policy's ``state_dict`` under ``base.``, so a residual
checkpoint rebuilds without the original base file.

Symbols: ``B`` batch, ``Do`` observation size, ``Da`` action size.
"""

from __future__ import annotations

import copy
import importlib
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.errors import CheckpointError
from robotrl.networks import MLP

_ALLOWED_PREFIX = "robotrl.agents."


class SB3BasePolicy(nn.Module):
    """A stable-baselines3 MLP actor as a deterministic robotrl policy.

    ``forward(obs (B, Do) raw) -> action (B, Da) raw``: optional observation
    standardisation (VecNormalize statistics, clipped to ``±obs_clip``), the MLP, then
    either ``tanh`` and an affine map to ``[low, high]`` (``squash=True``: SAC/TD3
    actors, which SB3 trains in ``[-1, 1]``) or a clip to ``[low, high]`` (PPO/A2C
    Gaussian mean, in raw units).

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        hidden: widths of the hidden layers; act: activation name (relu, tanh, ...).
        squash: tanh output rescaled to the bounds (SAC/TD3) vs clipped raw mean (PPO).
        low, high: raw action bounds ``(Da,)``.
        obs_clip: clip of standardised observations (VecNormalize's ``clip_obs``).
    """

    To = 1
    Te = 1

    def __init__(self, obs_dim: int, action_dim: int, hidden: Sequence[int] = (64, 64), *, act: str = "tanh",
                 squash: bool = False, low: Sequence[float] | None = None, high: Sequence[float] | None = None,
                 obs_clip: float = 10.0):
        super().__init__()
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        low = [-1.0] * self.action_dim if low is None else [float(x) for x in low]
        high = [1.0] * self.action_dim if high is None else [float(x) for x in high]
        self._spec = dict(obs_dim=self.obs_dim, action_dim=self.action_dim, hidden=[int(h) for h in hidden], act=act,
                          squash=bool(squash), low=low, high=high, obs_clip=float(obs_clip))
        self.net = MLP(self.obs_dim, self.action_dim, hidden, act=act)
        self.register_buffer("obs_mean", torch.zeros(self.obs_dim))
        self.register_buffer("obs_var", torch.ones(self.obs_dim))
        self.register_buffer("low", torch.tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.tensor(high, dtype=torch.float32))
        self.squash, self.obs_clip = bool(squash), float(obs_clip)

    @torch.no_grad()
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` for raw observations ``(B, Do)``."""
        x = ((obs - self.obs_mean) / torch.sqrt(self.obs_var + 1e-8)).clamp(-self.obs_clip, self.obs_clip)
        y = self.net(x)
        if self.squash:
            return self.low + 0.5 * (torch.tanh(y) + 1.0) * (self.high - self.low)
        return torch.maximum(torch.minimum(y, self.high), self.low)

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Stateless: nothing to clear."""

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return copy.deepcopy(self._spec)


def _linears(module: nn.Module) -> list[nn.Linear]:
    return [m for m in module.modules() if isinstance(m, nn.Linear)]


def load_sb3_base(path: str | os.PathLike, vecnormalize: str | os.PathLike | None = None) -> SB3BasePolicy:
    """Copy the actor of a stable-baselines3 model ``.zip`` into an :class:`SB3BasePolicy`.

    Supported: ``PPO``/``A2C`` (``mlp_extractor.policy_net`` + ``action_net``; separate
    actor/critic networks), ``SAC`` (``actor.latent_pi`` + ``actor.mu``), ``TD3``/``DDPG``
    (``actor.mu``), all with MLP policies on flat ``Box`` observations. The file is
    opened with SB3's own loader (it unpickles; only load files you trust); the result
    holds plain tensors only.

    Args:
        path: the model ``.zip``.
        vecnormalize: optional ``VecNormalize`` pickle whose observation statistics the
            model was trained with.

    Raises:
        CheckpointError: the file is not a loadable SB3 model or the policy is not a
            supported MLP actor.
    """
    import stable_baselines3 as sb3

    errors = []
    model = None
    for name in ("PPO", "SAC", "TD3", "A2C", "DDPG"):
        try:
            model = getattr(sb3, name).load(str(path), device="cpu")
            break
        except Exception as exc:  # wrong algorithm class: try the next
            errors.append(f"{name}: {type(exc).__name__}")
    if model is None:
        raise CheckpointError(f"{path} is not a loadable stable-baselines3 model ({'; '.join(errors)})")
    pol = model.policy
    space = model.action_space
    low, high = np.asarray(space.low, np.float32).reshape(-1), np.asarray(space.high, np.float32).reshape(-1)
    if hasattr(pol, "mlp_extractor") and hasattr(pol, "action_net"):
        layers, squash = _linears(pol.mlp_extractor.policy_net) + _linears(pol.action_net), False
        act_fn = pol.activation_fn
    elif hasattr(pol, "actor") and hasattr(pol.actor, "mu"):
        actor = pol.actor
        trunk = _linears(actor.latent_pi) if hasattr(actor, "latent_pi") else []
        layers, squash = trunk + _linears(actor.mu), True
        act_fn = getattr(actor, "activation_fn", nn.ReLU)
    else:
        raise CheckpointError(f"{path}: unsupported stable-baselines3 policy {type(pol).__name__}")
    act = {nn.ReLU: "relu", nn.Tanh: "tanh", nn.GELU: "gelu", nn.ELU: "elu", nn.SiLU: "silu", nn.Mish: "mish"}.get(act_fn)
    if act is None:
        raise CheckpointError(f"{path}: unsupported activation {act_fn}")
    obs_dim = int(np.prod(model.observation_space.shape))
    hidden = [lin.out_features for lin in layers[:-1]]
    base = SB3BasePolicy(obs_dim, len(low), hidden, act=act, squash=squash, low=low.tolist(), high=high.tolist())
    dst = _linears(base.net)
    if len(dst) != len(layers) or layers[0].in_features != obs_dim:
        raise CheckpointError(f"{path}: the actor is not a plain MLP on flat observations")
    with torch.no_grad():
        for s, d in zip(layers, dst):
            d.weight.copy_(s.weight)
            d.bias.copy_(s.bias)
        if vecnormalize is not None:
            vn = _read_vecnormalize(vecnormalize)
            base.obs_mean.copy_(torch.as_tensor(vn[0], dtype=torch.float32))
            base.obs_var.copy_(torch.as_tensor(vn[1], dtype=torch.float32))
            base.obs_clip = base._spec["obs_clip"] = float(vn[2])
        else:
            base.obs_clip = base._spec["obs_clip"] = 1e6  # no standardisation: identity statistics, no clip
    return base.eval()


def _read_vecnormalize(path) -> tuple[np.ndarray, np.ndarray, float]:
    import pickle

    with open(path, "rb") as f:
        vn = pickle.load(f)  # noqa: S301 - a user-supplied SB3 file, as SB3 itself does
    return np.asarray(vn.obs_rms.mean), np.asarray(vn.obs_rms.var), float(vn.clip_obs)


def build_base(target: str, kwargs: dict) -> nn.Module:
    """A fresh (untrained) base module of class ``target`` with constructor ``kwargs``.

    Raises:
        CheckpointError: ``target`` is not a class under ``robotrl.agents.`` or does not exist.
    """
    if not target.startswith(_ALLOWED_PREFIX):
        raise CheckpointError(f"refusing to build base policy class {target!r}: only classes under {_ALLOWED_PREFIX}")
    module, _, name = target.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"base policy class {target!r} does not exist in this robotrl version") from exc
    return cls(**copy.deepcopy(kwargs))


def base_descriptor(base: nn.Module) -> dict:
    """``{"target", "kwargs"}`` of a base module (JSON-able; weights travel separately)."""
    cls = type(base)
    return {"target": f"{cls.__module__}.{cls.__qualname__}", "kwargs": base.spec()}


def load_base(source: str | os.PathLike | nn.Module | dict, overrides: dict | None = None,
              device: str | torch.device = "cpu") -> nn.Module:
    """A frozen base policy (eval mode, ``requires_grad=False``) from what the user has.

    Args:
        source: a robotrl checkpoint file or run directory, a stable-baselines3 ``.zip``,
            a policy-state dict (``{"target", "kwargs", "state_dict"}``), or a module
            (used as is: it must be a robotrl policy to be saved with the residual).
        overrides: constructor kwargs replaced in the base's spec before rebuilding,
            e.g. ``{"act_steps": 1}`` to make a diffusion base re-plan every step.
        device: torch device.

    Raises:
        CheckpointError: unreadable source, no policy in it, or weights that do not fit.
    """
    from robotrl.checkpoint import load_checkpoint

    if isinstance(source, nn.Module):
        base = source
    else:
        if isinstance(source, dict):
            state = source
        elif str(source).endswith(".zip"):
            state = _state_of(load_sb3_base(source))
        else:
            ckpt = load_checkpoint(source)
            if "policy" not in ckpt:
                raise CheckpointError(f"{source} holds no policy; pass a robotrl training checkpoint or an SB3 .zip")
            state = ckpt["policy"]
        kwargs = {**state["kwargs"], **(overrides or {})}
        base = build_base(state["target"], kwargs)
        try:
            base.load_state_dict(state["state_dict"])
        except RuntimeError as exc:
            raise CheckpointError(f"base weights do not fit {state['target']}: {exc}") from exc
    base = base.to(device).eval()
    base.requires_grad_(False)
    return base


def _state_of(module: nn.Module) -> dict:
    return {**base_descriptor(module), "state_dict": module.state_dict()}


