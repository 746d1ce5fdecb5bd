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

Cameras are an option of the observation (``image_shapes`` and the flat kwargs of
:class:`~robotrl.vision.frontend.ObservationFrontend`; ResFiT trains its residual on image
features): the residual then sees ``x = [z, normalize(a_base)]`` with ``z (B, F)`` the
:class:`~robotrl.vision.encoders.PixelEncoder`'s features of the frames and the normalised
state, and :meth:`ResidualPolicy.forward` takes ``(state (B, Ds), {camera: uint8 (B, H, W,
k·C)})``. The frozen base is then a camera policy (given the state and the same frames) or a
state policy (given the flat state); it must fit the run's cameras, ``Ds`` and ``Da``
(:func:`check_base_fits`).

Saving: :func:`robotrl.policy.policy_state` stores ``spec()`` — which holds the base's
``{"target", "kwargs"}`` — and the ``state_dict`` — which holds the base's weights under
``base.`` — so :func:`robotrl.policy.load_policy` rebuilds the whole residual policy
without the original base file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agents.residual.base import base_descriptor, build_base
from robotrl.data.normalizer import ActionScaler
from robotrl.errors import ConfigError
from robotrl.networks import MLP
from robotrl.vision.frontend import ObservationFrontend

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
HEADS = ("gaussian", "tanh", "tanh_gaussian")


def combine_delta(base_raw: torch.Tensor, delta: torch.Tensor, scaler: ActionScaler) -> torch.Tensor:
    """Raw ``clip(a_base + δ · (high - low)/2, low, high)`` ``(B, Da)`` for raw base actions ``(B, Da)`` and an
    offset ``δ (B, Da)`` in normalised action units (the addition is in raw units: ``δ = 0`` gives ``a_base``
    bit for bit). Shared by the state and the camera residual policies."""
    a = base_raw + delta * (0.5 * (scaler.high - scaler.low))
    return torch.maximum(torch.minimum(a, scaler.high), scaler.low)


_CHUNK_FIX = "load it with agent.model.base_overrides={act_steps:1} (a diffusion base trained with obs_horizon 1)"


def reads_cameras(policy: nn.Module) -> bool:
    """Whether ``policy`` is a camera policy (an :class:`ObservationFrontend` with cameras)."""
    return isinstance(policy, ObservationFrontend) and policy.has_cameras


def _shapes(image_shapes: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    return {k: [int(d) for d in v] for k, v in image_shapes.items()}


def check_base_fits(base: nn.Module, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                    state_layout: str | None, frame_stack: int = 1) -> None:
    """Refuse a base that cannot act on a camera run's observations.

    Args:
        base: the frozen base (a camera policy, :func:`reads_cameras`; else a state policy with ``obs_dim``).
        image_shapes: this run's cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        state_layout: this run's state :class:`~robotrl.data.spaces.FlatLayout` JSON (``None``: unknown).
        frame_stack: this run's ``k`` (a camera base must stack as many frames).

    Raises:
        ConfigError: a chunked base (``Te`` or ``To`` > 1), another ``frame_stack``, other cameras or frame size,
            another ``Ds`` (or a state layout with other keys), another ``Da``, or a state base on a run without a
            state; the message says what differs and the way out.
    """
    if getattr(base, "Te", 1) != 1 or getattr(base, "To", 1) != 1:
        raise ConfigError(f"the residual's base {type(base).__name__} executes chunks (Te={getattr(base, 'Te', 1)}, "
                          f"To={getattr(base, 'To', 1)}); the off-policy residual recomputes base actions from single "
                          f"observations: {_CHUNK_FIX}")
    retrain = ("train the base on this run's camera dataset (robotrl train experiment=bc obs=pixels dataset.id=<this "
               "run's dataset>), or run the residual on the base's dataset (dataset.id=<the base run's>)")
    if reads_cameras(base):
        if base.frame_stack != frame_stack:
            raise ConfigError(f"the residual's pixel base stacks frame_stack={base.frame_stack} frames per camera, this "
                              f"run {frame_stack}: set obs.frame_stack={base.frame_stack} (the base gets the "
                              "residual's stacks), or train the base with this run's frame_stack")
        theirs, mine = _shapes(base.spec()["image_shapes"]), _shapes(image_shapes)
        if theirs != mine:
            raise ConfigError(f"the residual's pixel base sees cameras {theirs} (key: [H, W, C]), this run's data and "
                              f"env give {mine}: {retrain}")
        layout = base.spec().get("state_layout")
        if state_layout and layout and layout != state_layout:
            raise ConfigError(f"the residual's pixel base reads the state as {layout}, this run's env as "
                              f"{state_layout}: {retrain}")
        have = base.state_dim
    else:
        have = int(getattr(base, "obs_dim", state_dim))
        if state_dim == 0:
            raise ConfigError("this camera run has no state beside the frames, and the residual's base is a state "
                              "policy: use a pixel base (experiment=bc obs=pixels) or a dataset with a state")
    if have != state_dim:
        raise ConfigError(f"the residual's base takes states of size {have}, this run's env has Ds={state_dim} beside "
                          f"the cameras: a state base must be trained on the same task's flat observations "
                          f"(robotrl train experiment=residual-base env=<this task>), a pixel base on this data; "
                          f"or {retrain}")
    if int(getattr(base, "action_dim", action_dim)) != action_dim:
        raise ConfigError(f"the residual's base acts in Da={base.action_dim}, this run's env in Da={action_dim}: "
                          f"{retrain}")


class ResidualPolicy(ObservationFrontend):
    """``(B, Do)`` raw observation (+ frames) → ``(B, Da)`` raw action = frozen base + scaled residual.

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
        augment_pad: DrQ's random shift with cameras (4, DrQ/SERL; ignored without cameras).
        **frontend: the observation spec's cameras and encoder (``image_shapes``, ``encoder``, ``frame_stack``,
            ``state_layout``, ... of :class:`~robotrl.vision.frontend.ObservationFrontend`; none: a state policy,
            whose keys, spec and numbers are those of a build without them). ``obs_dim`` is then the flat
            state ``Ds`` beside the frames.

    Attributes:
        To: 2 — the on-policy collector keeps two observations; a history whose rows are
            identical marks an episode start (:mod:`robotrl.onpolicy` restarts histories
            from the reset observation), which resets the base's chunk queue in rollouts.
            1 with cameras (one observation in per step).
        Te: 1 — one action per env step (the residual acts inside base chunks).

    Raises:
        ValueError: unknown ``head``; and as :class:`~robotrl.vision.frontend.ObservationFrontend`.
    """

    To = 2
    Te = 1

    def __init__(self, obs_dim: int, action_dim: int, base: dict | nn.Module | None = None,
                 hidden: Sequence[int] = (256, 256), *, act: str = "relu", head: str = "gaussian",
                 residual_scale: float = 0.1, obs_clip: float | None = 3.0, init_log_std: float = -1.0,
                 learn_log_std: bool = False, augment_pad: int = 4, **frontend):
        if head not in HEADS:
            raise ValueError(f"head must be one of {HEADS}, got {head!r}")
        super().__init__(obs_dim, action_dim, obs_clip=obs_clip, augment_pad=augment_pad, **frontend, base=None,
                         hidden=[int(h) for h in hidden], act=act, head=head, residual_scale=float(residual_scale),
                         init_log_std=float(init_log_std), learn_log_std=bool(learn_log_std))
        self.head, self.residual_scale = head, float(residual_scale)
        if self.has_cameras:
            self.To = 1
        out = 2 * action_dim if head == "tanh_gaussian" else action_dim
        self.residual = MLP(self.out_dim + action_dim, out, hidden, act=act, final_init_scale=0.0)
        self.log_std = nn.Parameter(torch.full((action_dim,), float(init_log_std)), requires_grad=bool(learn_log_std))
        self.base: nn.Module | None = None
        if base is not None:
            self.set_base(base)

    # ------------------------------------------------------------------ setup
    def set_base(self, base: dict | nn.Module) -> None:
        """Install the frozen base (a descriptor ``{"target", "kwargs"}`` or a module, copied).

        Raises:
            ValueError: a state policy's base has other ``obs_dim``/``action_dim``.
            ConfigError: a camera policy's base does not fit its cameras, ``Ds`` or ``Da`` (:func:`check_base_fits`).
        """
        if isinstance(base, nn.Module):
            desc, module = base_descriptor(base), copy.deepcopy(base)
        else:
            desc, module = {"target": base["target"], "kwargs": copy.deepcopy(dict(base["kwargs"]))}, None
            module = build_base(desc["target"], desc["kwargs"])
        if self.has_cameras:
            check_base_fits(module, self._spec["image_shapes"], self.state_dim, self.action_dim,
                            self._spec["state_layout"], self.frame_stack)
        elif int(getattr(module, "obs_dim", self.obs_dim)) != self.obs_dim or \
                int(getattr(module, "action_dim", self.action_dim)) != self.action_dim:
            raise ValueError(f"base sizes (Do={module.obs_dim}, Da={module.action_dim}) differ from the residual's "
                             f"(Do={self.obs_dim}, Da={self.action_dim})")
        ref = self.log_std
        self.base = module.to(ref.device).eval()
        self.base.requires_grad_(False)
        self._spec["base"] = desc

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

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        """A checkpoint of the former camera-only ``PixelResidualPolicy`` (TD3 head) has no ``log_std``, which
        only the Gaussian head reads: this policy's own value is kept for it."""
        if self.head != "gaussian" and prefix + "log_std" not in state_dict:
            state_dict[prefix + "log_std"] = self.log_std.detach().clone()
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    # ------------------------------------------------------------------ pieces
    @torch.no_grad()
    def base_action(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None,
                    base: nn.Module | None = None) -> torch.Tensor:
        """Raw base action ``(B, Da)`` for raw observations ``(B, Do)`` (``base``: another copy).

        A state policy calls the base per step (advancing a chunked base's queues). A camera policy
        (``images`` ``{key: uint8 (B, H, W, k·C)}``) gives a camera base the state and the frames, a state
        base the state, and a chunked base (``Te = To = 1``) the first action of a fresh chunk (stateless).

        Raises:
            RuntimeError: a state policy without a base.
            ConfigError: a camera policy without a base (names ``agent.model.base``).
        """
        base = base if base is not None else self.base
        if base is None:
            if self.has_cameras:
                raise ConfigError("the pixel residual policy has no base: set agent.model.base=<a bc-pixels or "
                                  "residual-base run dir, checkpoint or SB3 .zip>")
            raise RuntimeError("ResidualPolicy has no base policy; pass base= or call set_base / agent.load_pretrained")
        if images is None:
            return base(obs).to(obs.dtype)
        if reads_cameras(base):
            if hasattr(base, "predict_chunk"):
                out = base.predict_chunk(obs[:, None], {k: v[:, None] for k, v in images.items()})[:, 0]
            else:
                out = base(obs, dict(images))
        elif hasattr(base, "predict_chunk"):
            out = base.predict_chunk(obs[:, None])[:, 0]
        else:
            out = base(obs)
        return out.to(obs.dtype)

    def residual_input(self, z: torch.Tensor, base_raw: torch.Tensor) -> torch.Tensor:
        """Residual input ``x (B, W + Da)``: observation features ``z (B, W)`` (:meth:`features`: the clamped
        normalised state, or the encoder's features with cameras) and the base action in ``[-1, 1]``."""
        return torch.cat([z, self.action_scaler.normalize(base_raw).clamp(-1.0, 1.0)], dim=-1)

    def inputs(self, obs: torch.Tensor, base_raw: torch.Tensor,
               images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Residual input of raw observations ``(B, Do)`` (and their frames): :meth:`residual_input` of
        :meth:`features`."""
        return self.residual_input(self.features(obs, images), base_raw)

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
    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` for raw observations ``(B, Do)`` (and, with cameras, their
        frames ``{key: uint8 (B, H, W, k·C)}``)."""
        base_raw = self.base_action(obs, images)
        return self.combine(base_raw, self.deterministic_residual(self.inputs(obs, base_raw, images)))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear the frame histories and the base's per-env state (chunk queues, histories) of ``env_ids``
        (``None``: all)."""
        super().reset(env_ids)
        if self.base is not None:
            self.base.reset(env_ids)
