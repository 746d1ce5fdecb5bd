"""Off-policy residual RL (ResFiT) on cameras: a frozen base plus a residual whose actor and critic see the frames.

ResFiT ("Residual Off-Policy RL for Finetuning Behavior Cloning Policies", amazon-science/residual-offpolicy-rl)
trains its residual on image features; this is :class:`~robotrl.agents.residual.offpolicy.ResidualOffPolicyAgent`'s
TD3 residual with the camera conventions of :mod:`robotrl.agents.qlearning.pixels` (DrQ, SERL):

- one :class:`~robotrl.vision.encoders.PixelEncoder` (the policy's, :class:`~robotrl.vision.frontend.PixelPolicyFrontend`)
  over ``{camera: uint8 (B, H, W, C)}`` and the normalised state ``(B, Ds)``, features ``z (B, F + Ds)``, shared by
  actor and critic; the critic's loss trains it, the actor reads ``z`` with the gradient stopped; random shift
  (``augment_pad``, 4 by default) on every encoded batch, observations and next observations;
- the frozen base is either a state policy (a ``residual-base`` BC run, SB3, diffusion with ``act_steps = 1``: it
  gets the env's flat state ``(B, Ds)``, the same vector the encoder sees beside the frames) or a pixel policy (a
  ``bc-pixels`` or ``diffusion-pixels`` run: it gets the state and the unshifted frames). Its cameras, frame size,
  ``Ds`` and ``Da`` must be this run's (:func:`check_base_fits`, a :class:`~robotrl.errors.ConfigError` otherwise);
- residual ``r = tanh(MLP([z, normalize(a_base)]))`` ``(B, Da)``, zero-initialised output layer, combined action
  ``a = clip(a_base + α r)`` added in raw units (``r = 0`` gives the base's action bit for bit);
- TD3: Polyak target actor and target encoder, ``N`` LayerNorm critic heads on ``(z, a)``, target
  ``y = R_n + γ^m (1 − term) min_{2 random heads} Q'(z', a')`` with ``a' = clip(a_base(s') + clip(α r'(z') + ε,
  ±1))``, ``ε ~ N(0, target_noise²)`` clipped; one actor step every ``actor_delay`` critic steps after
  ``critic_warmup_updates``; exploration ``clip(a_base + α r + ε)`` with ``ε ~ N(0, explore_std²)``, base plus
  noise for the first ``base_noise_steps`` calls. Base actions are recomputed at update time from the stored
  observations (ResFiT's relabelling of the demonstrations).

Not here (the state agent has them): the SAC residual and Policy Decorator's progressive exploration.
The deployable :class:`PixelResidualPolicy` holds the base (its descriptor in the spec, its weights under
``base.``), the encoder, the residual, the state normaliser (std floored at ``obs_std_floor``), the action scaler
and the state layout: it acts on raw ``Dict`` observations (:meth:`~robotrl.vision.frontend.PixelPolicyFrontend.act_observation`).

Symbols: ``B`` batch, ``N`` envs (or critic heads), ``Ds`` state size, ``Da`` action size, ``H, W, C`` frame
size, ``F`` image features, ``To``/``Te`` a chunked base's observation history / executed steps.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.qlearning.loss import critic_td_loss, subset_min, td_target
from robotrl.agents.qlearning.networks import EnsembleCritic
from robotrl.agents.residual.base import base_descriptor, build_base, load_base
from robotrl.agents.residual.offpolicy import base_plus_noise, install_saved_base, noisy_scaled_residual
from robotrl.agents.residual.policy import combine_delta
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.networks import MLP, polyak_update_
from robotrl.utils import set_generator_state
from robotrl.vision.frontend import PixelPolicyFrontend
from robotrl.vision.stack import FrameHistory

__all__ = ["PixelResidualPolicy", "PixelResidualAgent", "check_base_fits"]

_CHUNK_FIX = "load it with agent.model.base_overrides={act_steps:1} (a diffusion base trained with obs_horizon 1)"


def _shapes(image_shapes: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    return {k: [int(d) for d in v] for k, v in image_shapes.items()}


def check_base_fits(base: nn.Module, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                    state_layout: str | None, frame_stack: int = 1) -> None:
    """Refuse a base that cannot act on this run's observations.

    Args:
        base: the frozen base (a pixel policy: :class:`PixelPolicyFrontend`; else a state policy with ``obs_dim``).
        image_shapes: this run's cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        state_layout: this run's state :class:`~robotrl.data.spaces.FlatLayout` JSON (``None``: unknown).
        frame_stack: this run's ``k`` (a pixel base must stack as many frames).

    Raises:
        ConfigError: a chunked base (``Te`` or ``To`` > 1), another ``frame_stack``, other cameras or frame size, another ``Ds`` (or a state
            layout with other keys), another ``Da``, or a state base on a run without a state; the message says
            what differs and the way out.
    """
    if getattr(base, "Te", 1) != 1 or getattr(base, "To", 1) != 1:
        raise ConfigError(f"the residual's base {type(base).__name__} executes chunks (Te={getattr(base, 'Te', 1)}, "
                          f"To={getattr(base, 'To', 1)}); the off-policy residual recomputes base actions from single "
                          f"observations: {_CHUNK_FIX}")
    retrain = ("train the base on this run's camera dataset (robotrl train experiment=bc-pixels dataset.id=<this "
               "run's dataset>), or run the residual on the base's dataset (dataset.id=<the base run's>)")
    if isinstance(base, PixelPolicyFrontend):
        if base.frame_stack != frame_stack:
            raise ConfigError(f"the residual's pixel base stacks frame_stack={base.frame_stack} frames per camera, this "
                              f"run {frame_stack}: set agent.model.frame_stack={base.frame_stack} (the base gets the "
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
                              "policy: use a pixel base (experiment=bc-pixels) or a dataset with a state")
    if have != state_dim:
        raise ConfigError(f"the residual's base takes states of size {have}, this run's env has Ds={state_dim} beside "
                          f"the cameras: a state base must be trained on the same task's flat observations "
                          f"(robotrl train experiment=residual-base env=<this task>), a pixel base on this data; "
                          f"or {retrain}")
    if int(getattr(base, "action_dim", action_dim)) != action_dim:
        raise ConfigError(f"the residual's base acts in Da={base.action_dim}, this run's env in Da={action_dim}: "
                          f"{retrain}")


class PixelResidualPolicy(PixelPolicyFrontend):
    """``(state (B, Ds), {camera: uint8 (B, H, W, C)})`` raw -> ``(B, Da)`` raw: frozen base + ``α·tanh`` residual.

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        base: ``{"target", "kwargs"}`` of the base (:func:`~robotrl.agents.residual.base.base_descriptor`), a module
            (copied), or ``None`` (set later with :meth:`set_base`; acting before raises).
        hidden, act: the residual MLP on ``[z (F + Ds), a_base (Da)]``.
        residual_scale: ``α`` in normalised action units (ResFiT 0.1).
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad, obs_clip,
            state_layout, frame_stack: the :class:`~robotrl.vision.frontend.PixelPolicyFrontend` (random shift on by
            default; ``frame_stack = k``: frames arrive as uint8 ``(B, H, W, k·C)`` stacks, a pixel base must stack
            ``k`` too and gets the same stacks).

    Attributes:
        To, Te: 1, 1 — one observation in, one action out per step.
    """

    To = 1
    Te = 1

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                 base: dict | nn.Module | None = None, hidden: Sequence[int] = (256, 256), *, act: str = "relu",
                 residual_scale: float = 0.1, encoder: str = "drq", pooling: str = "flatten", feature_dim: int = 50,
                 channels: int = 32, encoder_weights: str | None = None, freeze_encoder: bool = False,
                 augment_pad: int = 4, obs_clip: float | None = 3.0, state_layout: str | None = None,
                 frame_stack: int = 1):
        super().__init__(image_shapes, state_dim, action_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                         channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                         augment_pad=augment_pad, obs_clip=obs_clip, state_layout=state_layout, frame_stack=frame_stack,
                         base=None,
                         hidden=[int(h) for h in hidden], act=act, residual_scale=float(residual_scale))
        self.residual_scale = float(residual_scale)
        self.residual = MLP(self.encoder.out_dim + self.action_dim, self.action_dim, hidden, act=act,
                            final_init_scale=0.0)
        self.base: nn.Module | None = None
        if base is not None:
            self.set_base(base)

    # ------------------------------------------------------------------ setup
    def set_base(self, base: dict | nn.Module) -> None:
        """Install the frozen base (a descriptor ``{"target", "kwargs"}`` or a module, copied).

        Raises:
            ConfigError: the base does not fit this policy's cameras, ``Ds`` or ``Da`` (:func:`check_base_fits`).
        """
        if isinstance(base, nn.Module):
            desc, module = base_descriptor(base), copy.deepcopy(base)
        else:
            desc = {"target": base["target"], "kwargs": copy.deepcopy(dict(base["kwargs"]))}
            module = build_base(desc["target"], desc["kwargs"])
        check_base_fits(module, self._spec["image_shapes"], self.state_dim, self.action_dim, self._spec["state_layout"],
                        self.frame_stack)
        self.base = module.to(self.action_scaler.low.device).eval()
        self.base.requires_grad_(False)
        self._spec["base"] = desc

    def floor_obs_std(self, floor: float) -> None:
        """Raise the state normaliser's std to at least ``floor`` (ResFiT ``min_state_std`` 0.1)."""
        if floor > 0:
            with torch.no_grad():
                self.obs_normalizer.std.clamp_(min=float(floor))

    def train(self, mode: bool = True) -> "PixelResidualPolicy":
        """Train mode (random shift) for the encoder and residual; the frozen base stays in eval mode."""
        super().train(mode)
        if self.base is not None:
            self.base.eval()
        return self

    # ------------------------------------------------------------------ pieces
    @torch.no_grad()
    def base_action(self, state: torch.Tensor, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Raw base action ``(B, Da)``: a pixel base gets ``(state (B, Ds), frames)``, a state base ``state``;
        a chunked base (``Te = To = 1``) the first action of a fresh chunk (stateless).

        Raises:
            ConfigError: no base installed.
        """
        base = self.base
        if base is None:
            raise ConfigError("the pixel residual policy has no base: set agent.model.base=<a bc-pixels or "
                              "residual-base run dir, checkpoint or SB3 .zip>")
        if isinstance(base, PixelPolicyFrontend):
            if hasattr(base, "predict_chunk"):
                out = base.predict_chunk(state[:, None], {k: v[:, None] for k, v in images.items()})[:, 0]
            else:
                out = base(state, dict(images))
        elif hasattr(base, "predict_chunk"):
            out = base.predict_chunk(state[:, None])[:, 0]
        else:
            out = base(state)
        return out.to(state.dtype)

    def encode(self, state: torch.Tensor, images: Mapping[str, torch.Tensor], *, detach: bool = False) -> torch.Tensor:
        """Features ``z (B, F + Ds)`` of raw inputs (random shift in training mode; ``detach``: gradient stopped)."""
        return self.encoder(images, self.normalized_state(state), detach=detach)

    def residual_action(self, z: torch.Tensor, base_raw: torch.Tensor, net: nn.Module | None = None) -> torch.Tensor:
        """``r = tanh(net([z, normalize(a_base)]))`` ``(B, Da)`` in ``[-1, 1]`` (``net``: the residual or its target)."""
        x = torch.cat([z, self.action_scaler.normalize(base_raw).clamp(-1.0, 1.0)], dim=-1)
        return torch.tanh((self.residual if net is None else net)(x))

    def combine_delta(self, base_raw: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Raw ``clip(a_base + δ (high − low)/2)`` ``(B, Da)`` for ``δ (B, Da)`` in normalised action units."""
        return combine_delta(base_raw, delta, self.action_scaler)

    # ------------------------------------------------------------------ deployable interface
    @torch.no_grad()
    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)`` = ``clip(a_base + α r)``."""
        base_raw = self.base_action(state, images)
        return self.combine_delta(base_raw, self.residual_scale * self.residual_action(self.encode(state, images), base_raw))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear the frame histories and the base's per-env state of ``env_ids`` (``None``: all)."""
        super().reset(env_ids)
        if self.base is not None:
            self.base.reset(env_ids)


class PixelResidualAgent(OffPolicyAgentBase):
    """ResFiT's TD3 residual on cameras (module doc): shared critic-trained encoder, frozen state or pixel base.

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        obs_normalizer: state statistics (``None`` without state; std floored at ``obs_std_floor``);
            action_scaler: the env's action bounds.
        base: robotrl checkpoint / run dir (``bc-pixels``, ``residual-base``, ``diffusion-pixels`` ...), SB3 ``.zip``,
            policy-state dict or module; ``None``: set later (acting raises until then).
        base_overrides: constructor kwargs replaced in the base's spec (``{"act_steps": 1}`` for a diffusion base).
        hidden, act, residual_scale: the residual actor (ResFiT α 0.1).
        obs_std_floor: lower bound of the state std (ResFiT 0.1).
        num_critics, target_subset, critic_hidden, critic_layer_norm: ensemble critic on ``(z, a)``.
        actor_lr, critic_lr (encoder and critic), tau (critic, encoder and actor targets): Adam rates, Polyak rate.
        actor_delay, critic_warmup_updates: one actor step per ``actor_delay`` critic steps, none before the warmup.
        target_noise, target_noise_clip, explore_std: TD3 noise on the scaled residual (normalised action units).
        base_noise_steps, base_noise_std: base-plus-noise exploration calls before the residual acts.
        max_grad_norm: gradient clip (``None``: off).
        device, seed: torch device; seed of the network initialisation and all sampling.
        policy_kwargs: :class:`PixelResidualPolicy` encoder settings (encoder, pooling, augment_pad, obs_clip,
            state_layout, ...).

    Raises:
        ConfigError: the base cannot be read (names ``agent.model.base``) or does not fit (:func:`check_base_fits`).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler, base=None,
                 base_overrides: dict | None = None, hidden: Sequence[int] = (256, 256), act: str = "relu",
                 residual_scale: float = 0.1, obs_std_floor: float = 0.1, num_critics: int = 10, target_subset: int = 2,
                 critic_hidden: Sequence[int] = (256, 256), critic_layer_norm: bool = True, actor_lr: float = 1e-4,
                 critic_lr: float = 3e-4, tau: float = 0.005, actor_delay: int = 4, target_noise: float = 0.05,
                 target_noise_clip: float = 0.3, explore_std: float = 0.05, base_noise_steps: int = 0,
                 base_noise_std: float = 0.1, critic_warmup_updates: int = 0, max_grad_norm: float | None = 1.0,
                 device: str | torch.device = "cpu", seed: int = 0, **policy_kwargs):
        self.device = torch.device(device)
        with torch.random.fork_rng(devices=[]):  # seeded network initialisation, global RNG untouched
            torch.manual_seed(seed)
            self.policy = PixelResidualPolicy(image_shapes, state_dim, action_dim, hidden=hidden, act=act,
                                              residual_scale=residual_scale, **policy_kwargs)
            self.critic = EnsembleCritic(self.policy.encoder.out_dim, action_dim, num_critics, critic_hidden,
                                         layer_norm=critic_layer_norm)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.floor_obs_std(obs_std_floor)
        self.policy.to(self.device).eval()
        self.critic.to(self.device)
        self.base_overrides = dict(base_overrides or {})
        if base is not None:
            self.policy.set_base(self._load_base(base))
        self.target_encoder = copy.deepcopy(self.policy.encoder).requires_grad_(False)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_target = copy.deepcopy(self.policy.residual).requires_grad_(False)
        self.critic_opt = torch.optim.Adam([*self.policy.encoder.parameters(), *self.critic.parameters()], lr=critic_lr)
        self.actor_opt = torch.optim.Adam(self.policy.residual.parameters(), lr=actor_lr)
        self.target_subset, self.tau = int(target_subset), float(tau)
        self.actor_delay, self.critic_warmup_updates = int(actor_delay), int(critic_warmup_updates)
        self.target_noise, self.target_noise_clip = float(target_noise), float(target_noise_clip)
        self.explore_std, self.base_noise_steps, self.base_noise_std = float(explore_std), int(base_noise_steps), float(base_noise_std)
        self.max_grad_norm = max_grad_norm
        self.num_updates = self.num_explore = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.frame_stack = self.policy.frame_stack
        self.explore_frames = FrameHistory(self.frame_stack)

    def _load_base(self, source) -> nn.Module:
        try:
            return load_base(source, self.base_overrides, self.device)
        except CheckpointError as exc:
            raise ConfigError(f"agent.model.base={source} cannot be loaded ({exc}); train a base first, e.g. "
                              "robotrl train experiment=bc-pixels (same dataset), and point agent.model.base at its "
                              "run directory") from exc

    # ------------------------------------------------------------------ noise
    def _noisy_delta(self, r: torch.Tensor, std: float, clip: float | None) -> torch.Tensor:
        return noisy_scaled_residual(r, self.policy.residual_scale, std, clip, self.gen)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def explore(self, obs: Mapping) -> np.ndarray:
        """Raw exploration actions ``(N, Da)`` for a batch of the env's raw ``Dict`` observations: base plus
        noise for the first ``base_noise_steps`` calls, then ``clip(a_base + α r + ε)`` (frames stacked by the
        agent's exploration history, :meth:`reset_explore` at episode starts)."""
        p = self.policy.eval()
        state, frames, _ = p.split_observation(obs)
        images = self.explore_frames.push(frames)
        base_raw = p.base_action(state, images)
        self.num_explore += 1
        sc = p.action_scaler
        if self.num_explore <= self.base_noise_steps:
            return base_plus_noise(sc, base_raw, self.base_noise_std, self.gen).cpu().numpy()
        r = p.residual_action(p.encode(state, images), base_raw)
        return p.combine_delta(base_raw, self._noisy_delta(r, self.explore_std, None)).cpu().numpy()

    @torch.no_grad()
    def act(self, obs: Mapping) -> np.ndarray:
        """Deterministic raw actions ``(N, Da)`` (or ``(Da,)`` for one observation) for raw ``Dict`` observations."""
        return self.policy.eval().act_observation(obs)

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None:
        """The episodes of the trainer's envs ``env_ids`` (``None``: all) start: their exploration frame stacks
        start afresh."""
        self.explore_frames.reset(env_ids)

    # ------------------------------------------------------------------ update
    def _clip(self, params) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(list(params), self.max_grad_norm or float("inf"))

    @torch.no_grad()
    def _target(self, batch: Batch, state2: torch.Tensor, images2: dict[str, torch.Tensor]) -> torch.Tensor:
        """TD target ``y (B,)``: target encoder (shifted frames), target actor with smoothing noise, 2-head min."""
        p = self.policy
        nbase = p.base_action(state2, images2)
        z2 = self.target_encoder(images2, p.normalized_state(state2))
        r2 = p.residual_action(z2, nbase, net=self.actor_target)
        a2 = p.action_scaler.normalize(p.combine_delta(nbase, self._noisy_delta(r2, self.target_noise,
                                                                                self.target_noise_clip))).clamp(-1.0, 1.0)
        heads = torch.randperm(self.critic.n, generator=self.gen, device=self.device)[: self.target_subset]
        nq = subset_min(self.critic_target(z2, a2), heads)
        dev = self.device
        return td_target(batch.rewards.to(dev), batch.discounts.to(dev), batch.terminated.to(dev), nq)

    def actor_loss(self, z: torch.Tensor, state: torch.Tensor, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """``−mean_heads Q(z, a_π)`` with ``a_π = clip(a_base + α r(z))``; ``z (B, F + Ds)`` is read with the
        gradient stopped (the actor never trains the shared encoder: DrQ/SERL)."""
        p, zd = self.policy, z.detach()
        base_raw = p.base_action(state, images)
        a_pi = p.action_scaler.normalize(p.combine_delta(base_raw, p.residual_scale * p.residual_action(zd, base_raw)))
        return -self.critic(zd, a_pi.clamp(-1.0, 1.0)).mean(0).mean()

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One critic (and encoder) step; every ``actor_delay`` steps after the warmup, an actor step; targets moved.

        Args:
            batch: ``B`` transitions: state ``(B, Ds)``, executed (combined) actions ``(B, Da)`` raw, frames uint8
                ``{key: (B, H, W, C)}`` in ``extras``, n-step ``rewards``/``discounts``.
            step: trainer step (unused).

        Returns:
            Detached ``critic_loss``, ``q_mean``, ``critic_grad_norm`` (and ``actor_loss``, ``actor_grad_norm``).
        """
        p, dev = self.policy, self.device
        p.train()
        self.target_encoder.train()  # random shift on the next frames too (DrQ)
        state, state2 = batch.observations.to(dev), batch.next_observations.to(dev)
        images = {k: v.to(dev) for k, v in batch.images().items()}
        y = self._target(batch, state2, {k: v.to(dev) for k, v in batch.next_images().items()})
        z = p.encode(state, images)
        q = self.critic(z, p.action_scaler.normalize(batch.actions.to(dev)).clamp(-1.0, 1.0))
        c_loss = critic_td_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        c_loss.backward()
        c_gn = self._clip([*p.encoder.parameters(), *self.critic.parameters()])
        self.critic_opt.step()
        self.num_updates += 1
        out = {"critic_loss": c_loss.detach(), "q_mean": q.mean().detach(), "critic_grad_norm": c_gn.detach()}
        if self.num_updates > self.critic_warmup_updates and self.num_updates % self.actor_delay == 0:
            out.update(self._actor_step(z, state, images))
        polyak_update_([*self.critic_target.parameters(), *self.target_encoder.parameters()],
                       [*self.critic.parameters(), *p.encoder.parameters()], self.tau)
        p.eval()
        return out

    def _actor_step(self, z: torch.Tensor, state: torch.Tensor, images: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        loss = self.actor_loss(z, state, images)
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = self._clip(self.policy.residual.parameters())
        self.actor_opt.step()
        polyak_update_(self.actor_target.parameters(), self.policy.residual.parameters(), self.tau)
        return {"actor_loss": loss.detach(), "actor_grad_norm": gn.detach()}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Policy (with the base's descriptor and weights), critic, targets, optimizers, counters, RNG."""
        return {"policy_spec": self.policy.spec(), "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(), "target_encoder": self.target_encoder.state_dict(),
                "actor_target": self.actor_target.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "num_updates": self.num_updates,
                "num_explore": self.num_explore, "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (the saved base is installed when this agent has another or none)."""
        install_saved_base(self.policy, state)
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.target_encoder.load_state_dict(state["target_encoder"])
        self.actor_target.load_state_dict(state["actor_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.num_updates, self.num_explore = int(state["num_updates"]), int(state["num_explore"])
        set_generator_state(self.gen, state["gen"])
