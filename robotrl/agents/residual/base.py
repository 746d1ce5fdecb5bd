"""Frozen base policies for residual RL: loaders and the stable-baselines3 adapter.

A residual policy (:class:`~robotrl.agents.residual.policy.ResidualPolicy`) wraps any
deployable robotrl policy (``forward(raw obs (B, Do)) -> raw action (B, Da)``,
``reset(env_ids)``, ``spec()``). This module turns what users have into such a module:

- a robotrl checkpoint (file or run directory) of BC, diffusion, DPPO, Gaussian PPO or
  Q-learning training: its ``policy`` entry is rebuilt with
  :func:`robotrl.policy.build_policy`;
- a stable-baselines3 model ``.zip`` (PPO/A2C, SAC, TD3/DDPG with MLP policies): the
  actor's linear layers are copied into :class:`SB3BasePolicy`, a plain robotrl module,
  so the residual checkpoint never holds (or unpickles) SB3 objects;
- a folder where LeRobot saved an ACT or diffusion policy (``save_pretrained`` with its pre/post-processors):
  :class:`robotrl.agents.residual.lerobot.LeRobotPolicy`, loaded through LeRobot's own library (the
  ``[lerobot]`` extra), executing its action chunks as trained.

The base is described by ``{"target": class path, "kwargs": spec}`` (JSON-able); its
weights live in the residual policy's ``state_dict`` under ``base.``, so a residual
checkpoint rebuilds without the original base file.

Symbols: ``B`` batch, ``Do`` observation size, ``Da`` action size.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

from robotrl.errors import CheckpointError
from robotrl.networks import MLP
from robotrl.policy import policy_class, renamed_policy


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


_ON_POLICY_PREFIX, _OFF_POLICY_PREFIXES = "mlp_extractor.policy_net.", ("actor.latent_pi.", "actor.mu.")
_DEFAULT_ACT = {"on_policy": "tanh", "off_policy": "relu"}  # SB3's defaults: PPO/A2C Tanh, SAC/TD3/DDPG ReLU


def _layer_stack(sd: dict[str, torch.Tensor], prefixes: Sequence[str]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(weight, bias)`` of the linear layers under ``prefixes``, in order (Sequential indices)."""
    out = []
    for prefix in prefixes:
        idx = sorted({int(k[len(prefix):].split(".")[0]) for k in sd if k.startswith(prefix) and k.endswith(".weight")
                      and k[len(prefix):].split(".")[0].isdigit()})
        if idx:
            out += [(sd[f"{prefix}{i}.weight"], sd[f"{prefix}{i}.bias"]) for i in idx]
        elif f"{prefix.rstrip('.')}.weight" in sd:  # a bare Linear (action_net, actor.mu of SAC)
            out.append((sd[f"{prefix.rstrip('.')}.weight"], sd[f"{prefix.rstrip('.')}.bias"]))
    return out


def _space_bounds(space: dict, path) -> tuple[np.ndarray, np.ndarray]:
    """Bounds of a Box from SB3's JSON ``data`` (its readable ``low``/``high`` strings)."""
    try:
        low = np.array(space["low"].replace("[", " ").replace("]", " ").split(), dtype=np.float32)
        high = np.array(space["high"].replace("[", " ").replace("]", " ").split(), dtype=np.float32)
    except (KeyError, AttributeError, ValueError) as exc:
        raise CheckpointError(f"{path}: cannot read the action bounds from the model's data ({exc})") from exc
    return low, high


def load_sb3_base(path: str | os.PathLike, vecnormalize: str | os.PathLike | None = None,
                  act: str | None = None) -> SB3BasePolicy:
    """Copy the actor of a stable-baselines3 model ``.zip`` into an :class:`SB3BasePolicy`, unpickling nothing.

    The ``.zip`` is read directly: the weights from ``policy.pth`` with
    ``torch.load(weights_only=True)`` and the action bounds from the readable fields of
    its JSON ``data`` (SB3's own loader would unpickle the ``:serialized:`` entries).
    Supported: ``PPO``/``A2C`` (``mlp_extractor.policy_net`` + ``action_net``: raw Gaussian
    mean, clipped), ``SAC`` (``actor.latent_pi`` + ``actor.mu``) and ``TD3``/``DDPG``
    (``actor.mu``), both tanh-squashed, all MLP policies on flat ``Box`` observations.

    Args:
        path: the model ``.zip``.
        vecnormalize: optional ``.npz`` with the ``VecNormalize`` observation statistics
            the model was trained with: arrays ``mean``, ``var`` and scalar ``clip_obs``
            (write it with ``np.savez(p, mean=vn.obs_rms.mean, var=vn.obs_rms.var,
            clip_obs=vn.clip_obs)``; robotrl does not unpickle SB3's ``VecNormalize`` files).
        act: the actor's activation when the model was built with a custom
            ``policy_kwargs["activation_fn"]`` (default: SB3's, tanh for PPO/A2C, relu else).

    Raises:
        CheckpointError: not a readable SB3 model, an unsupported policy, or a custom
            activation without ``act``.
    """
    import json
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            data = json.loads(z.read("data"))
            with z.open("policy.pth") as f:
                sd = torch.load(f, map_location="cpu", weights_only=True)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile, RuntimeError) as exc:
        raise CheckpointError(f"{path} is not a readable stable-baselines3 model .zip ({type(exc).__name__}: {exc})") from exc
    if any(k.startswith(_ON_POLICY_PREFIX) for k in sd):
        kind, layers, squash = "on_policy", _layer_stack(sd, (_ON_POLICY_PREFIX, "action_net.")), False
    elif any(k.startswith(_OFF_POLICY_PREFIXES[1]) for k in sd):
        kind, layers, squash = "off_policy", _layer_stack(sd, _OFF_POLICY_PREFIXES), True
    else:
        raise CheckpointError(f"{path}: unsupported stable-baselines3 policy (no MLP actor weights found)")
    if "activation_fn" in (data.get("policy_kwargs") or {}) and act is None:
        raise CheckpointError(f"{path}: the model uses a custom activation_fn; pass act=<relu|tanh|...> to load_sb3_base")
    act = act or _DEFAULT_ACT[kind]
    low, high = _space_bounds(data.get("action_space") or {}, path)
    obs_dim = int(layers[0][0].shape[1])
    hidden = [int(w.shape[0]) for w, _ in layers[:-1]]
    base = SB3BasePolicy(obs_dim, len(low), hidden, act=act, squash=squash, low=low.tolist(), high=high.tolist())
    dst = _linears(base.net)
    if len(dst) != len(layers) or int(layers[-1][0].shape[0]) != len(low):
        raise CheckpointError(f"{path}: the actor is not a plain MLP on flat observations")
    with torch.no_grad():
        for (w, b), d in zip(layers, dst):
            d.weight.copy_(w)
            d.bias.copy_(b)
        if vecnormalize is not None:
            mean, var, clip = _read_vecnormalize(vecnormalize)
            base.obs_mean.copy_(torch.as_tensor(mean, dtype=torch.float32))
            base.obs_var.copy_(torch.as_tensor(var, dtype=torch.float32))
            base.obs_clip = base._spec["obs_clip"] = clip
        else:
            base.obs_clip = base._spec["obs_clip"] = 1e6  # no standardisation: identity statistics, no clip
    return base.eval()


def _read_vecnormalize(path) -> tuple[np.ndarray, np.ndarray, float]:
    from robotrl.checkpoint import load_arrays  # allow_pickle=False

    z = load_arrays(path)
    try:
        return np.asarray(z["mean"]), np.asarray(z["var"]), float(z["clip_obs"])
    except KeyError as exc:
        raise CheckpointError(f"{path}: VecNormalize statistics need arrays mean, var and clip_obs ({exc})") from exc


def build_base(target: str, kwargs: dict) -> nn.Module:
    """A fresh (untrained) base module of class ``target`` with constructor ``kwargs`` (a class merged into
    another, :func:`robotrl.policy.renamed_policy`: the class it was merged into).

    Raises:
        CheckpointError: ``target`` is not a class under ``robotrl.agents.`` or does not exist.
    """
    target, kwargs = renamed_policy(target, kwargs)  # a class merged into another: its new name and kwargs
    return policy_class(target)(**copy.deepcopy(kwargs))


def base_descriptor(base: nn.Module) -> dict:
    """``{"target", "kwargs"}`` of a base module (JSON-able; weights travel separately)."""
    cls = type(base)
    return {"target": f"{cls.__module__}.{cls.__qualname__}", "kwargs": base.spec()}


def load_base(source: str | os.PathLike | nn.Module | dict, overrides: dict | None = None,
              device: str | torch.device = "cpu") -> nn.Module:
    """A frozen base policy (eval mode, ``requires_grad=False``) from what the user has.

    Args:
        source: a robotrl checkpoint file or run directory, a stable-baselines3 ``.zip``, a local
            folder with a LeRobot ACT/diffusion policy (``overrides``: :class:`~robotrl.agents.residual.lerobot.
            LeRobotPolicy` kwargs, e.g. ``{"n_action_steps": 2}``), a policy-state dict (``{"target", "kwargs", "state_dict"}``), or a module
            (used as is: it must be a robotrl policy to be saved with the residual).
        overrides: constructor kwargs replaced in the base's spec before rebuilding,
            e.g. ``{"act_steps": 1}`` to make a diffusion base re-plan every step.
        device: torch device.

    Raises:
        CheckpointError: unreadable source, no policy in it, or weights that do not fit (a LeRobot folder
            without LeRobot installed: names the extra).
    """
    from robotrl.agents.residual.lerobot import is_lerobot_policy_dir, load_lerobot_policy
    from robotrl.checkpoint import load_checkpoint

    if isinstance(source, nn.Module):
        base = source
    elif not isinstance(source, dict) and is_lerobot_policy_dir(source):
        base = load_lerobot_policy(source, **(overrides or {}))
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


