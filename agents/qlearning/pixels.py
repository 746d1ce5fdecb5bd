"""SAC / RLPD on cameras: a shared image encoder trained by the critic, the actor reading it
with the gradient stopped, DrQ random shift on every encoded batch (DrQ, SERL, HIL-SERL).

Per update (one gradient step each; call ``update`` ``UTD`` times per env step for RLPD):

1. critic: features ``z = enc(aug(o), s)`` (gradient into the encoder) and target features
   ``z' = enc_targ(aug(o'), s')``; ``y = r + γ^m (1 - term) (min_{M of N} Q_targ(z', a') - α log π(a'|z'))``
   with ``a' ~ π(z')``; loss ``Σ_i mean (Q_i(z, a) - y)^2`` (RLPD: ``N = 10`` LayerNorm heads,
   ``M = 2`` random heads; SAC: ``N = M = 2``);
2. actor: ``z.detach()`` (DrQ/SERL: the actor never trains the encoder); loss
   ``mean(α log π(a|z) - mean_i Q_i(z, a))``;
3. temperature: ``α`` towards the target entropy ``-Da``;
4. Polyak update of the target encoder and critic.

RLPD's symmetric sampling (half offline, half online) is the caller's batch
(:class:`robotrl.data.MixedSampler` with ``offline_ratio=0.5``). Symbols: ``B`` batch, ``Ds``
state size, ``Da`` action size, ``N`` critic heads, ``F`` image features.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agents.qlearning.loss import critic_td_loss, subset_min, td_target
from robotrl.agents.qlearning.networks import EnsembleCritic, TanhGaussianActor
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.networks import polyak_update_
from robotrl.vision.frontend import PixelPolicyFrontend

__all__ = ["PixelSACPolicy", "PixelSACAgent"]


class PixelSACPolicy(PixelPolicyFrontend):
    """Deployable pixel SAC/RLPD policy: ``(state (B, Ds), {camera: uint8 (B, H, W, C)})`` -> raw ``(B, Da)``.

    Holds the encoder, the actor (deterministic mode ``tanh(mean)``) and the state normaliser
    and action scaler as buffers: the saved policy carries all preprocessing.

    Args:
        image_shapes, state_dim, action_dim: sizes.
        hidden, act: the actor's MLP.
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad:
            the :class:`~robotrl.vision.encoders.PixelEncoder` (random shift ``augment_pad = 4``
            by default: on for Q-learning).
        obs_clip: clamp the normalised state to ``±obs_clip``.
        state_layout: the env's state :class:`~robotrl.data.spaces.FlatLayout` JSON, so the policy
            also acts on raw ``Dict`` observations (:meth:`~robotrl.vision.frontend.PixelPolicyFrontend.act_observation`).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                 hidden: Sequence[int] = (256, 256), *, act: str = "relu", encoder: str = "drq", pooling: str = "flatten",
                 feature_dim: int = 50, channels: int = 32, encoder_weights: str | None = None,
                 freeze_encoder: bool = False, augment_pad: int = 4, obs_clip: float | None = 10.0,
                 state_layout: str | None = None):
        super().__init__(image_shapes, state_dim, action_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                         channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                         augment_pad=augment_pad, obs_clip=obs_clip, state_layout=state_layout,
                         hidden=[int(h) for h in hidden], act=act)
        self.actor = TanhGaussianActor(self.encoder.out_dim, action_dim, hidden, act=act)

    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        return self.action_scaler.unnormalize(self.actor.mode(self.features(state, images)))


class PixelSACAgent:
    """SAC / RLPD from cameras (+ state) with a shared, critic-trained encoder.

    Args:
        image_shapes, state_dim, action_dim: sizes.
        obs_normalizer: state statistics (``None`` without state); action_scaler: action bounds.
        num_critics: ``N`` (RLPD 10, SAC 2); num_min_critics: ``M`` heads in the target min (2).
        critic_layer_norm: LayerNorm in the critic (RLPD: on).
        critic_hidden: critic widths.
        gamma, tau: discount (also in the batch's ``discounts``) and Polyak rate.
        actor_lr, critic_lr, alpha_lr, init_alpha: Adam settings and initial temperature.
        device, seed: torch device; seed of the action sampling.
        policy_kwargs: :class:`PixelSACPolicy` architecture (encoder, pooling, augment_pad, ...).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler, num_critics: int = 10,
                 num_min_critics: int = 2, critic_layer_norm: bool = True, critic_hidden: Sequence[int] = (256, 256),
                 tau: float = 0.005, actor_lr: float = 3e-4, critic_lr: float = 3e-4, alpha_lr: float = 3e-4,
                 init_alpha: float = 0.1, device: str | torch.device = "cpu", seed: int = 0, **policy_kwargs):
        if not 1 <= num_min_critics <= num_critics:
            raise ValueError(f"num_min_critics must be in [1, num_critics={num_critics}], got {num_min_critics}")
        self.device = torch.device(device)
        self.policy = PixelSACPolicy(image_shapes, state_dim, action_dim, **policy_kwargs)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        enc = self.policy.encoder
        self.critic = EnsembleCritic(enc.out_dim, action_dim, num_critics, critic_hidden, layer_norm=critic_layer_norm).to(self.device)
        self.target_encoder = copy.deepcopy(enc).requires_grad_(False)
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(init_alpha)), device=self.device, requires_grad=True)
        self.target_entropy = -float(action_dim)
        self.num_min, self.tau = int(num_min_critics), float(tau)
        self.critic_opt = torch.optim.Adam([p for p in enc.parameters() if p.requires_grad] + list(self.critic.parameters()),
                                           lr=critic_lr)
        self.actor_opt = torch.optim.Adam(self.policy.actor.parameters(), lr=actor_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=alpha_lr)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One critic, actor and temperature step on a transition batch with cameras.

        Returns detached scalars ``critic_loss``, ``actor_loss``, ``alpha``, ``q``.
        """
        p, dev = self.policy, self.device
        p.train()
        self.target_encoder.train()  # random shift on the next frames too (DrQ)
        images = {k: v.to(dev) for k, v in batch.images().items()}
        next_images = {k: v.to(dev) for k, v in batch.next_images().items()}
        s, s2 = p.normalized_state(batch.observations.to(dev)), p.normalized_state(batch.next_observations.to(dev))
        a = p.action_scaler.normalize(batch.actions.to(dev)).clamp(-1.0, 1.0)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            z2 = self.target_encoder(next_images, s2)
            a2, logp2 = p.actor.sample(z2, self.gen)
            heads = torch.randperm(self.critic.n, generator=self.gen, device=dev)[: self.num_min]
            v2 = subset_min(self.target_critic(z2, a2), heads) - alpha * logp2
            y = td_target(batch.rewards.to(dev), batch.discounts.to(dev), batch.terminated.to(dev), v2)
        z = p.encoder(images, s)
        q = self.critic(z, a)
        critic_loss = critic_td_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        zd = z.detach()  # the actor's gradient stops at the encoder
        pa, logp = p.actor.sample(zd, self.gen)
        actor_loss = (alpha * logp - self.critic(zd, pa).mean(0)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        polyak_update_(list(self.target_encoder.parameters()) + list(self.target_critic.parameters()),
                       list(p.encoder.parameters()) + list(self.critic.parameters()), self.tau)
        p.eval()
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "alpha": alpha,
                "q": q.detach().mean()}

    def _inputs(self, state, images: Mapping[str, np.ndarray] | None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(state (N, Ds), {key: uint8 (N, H, W, C)})``, or a raw batch of ``Dict`` observations with
        ``images=None`` (split by the policy's ``state_layout``), as tensors on the agent's device."""
        if images is None:
            s, imgs, _ = self.policy.split_observation(state)
            return s, imgs
        return (torch.as_tensor(np.asarray(state, np.float32), device=self.device),
                {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in images.items()})

    @torch.no_grad()
    def explore(self, state, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Sampled raw actions ``(N, Da)`` for ``(N, Ds)`` and ``{key: uint8 (N, H, W, C)}``, or for a raw
        batch of the env's ``Dict`` observations (``images=None``: what the trainer's online loop passes)."""
        p = self.policy.eval()
        s, imgs = self._inputs(state, images)
        a, _ = p.actor.sample(p.encoder(imgs, p.normalized_state(s)), self.gen)
        return p.action_scaler.unnormalize(a).cpu().numpy()

    @torch.no_grad()
    def act(self, state, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Deterministic raw actions ``(N, Da)`` (inputs as :meth:`explore`)."""
        return self.policy.eval()(*self._inputs(state, images)).cpu().numpy()

    def state_dict(self) -> dict:
        """Every network, target, optimiser and the temperature (plain tensors)."""
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "target_encoder": self.target_encoder.state_dict(), "target_critic": self.target_critic.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "critic_opt": self.critic_opt.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "alpha_opt": self.alpha_opt.state_dict(), "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.target_encoder.load_state_dict(state["target_encoder"])
        self.target_critic.load_state_dict(state["target_critic"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.gen.set_state(state["gen"])
