"""SAC / RLPD / CQL / Cal-QL / WSRL on cameras: a shared image encoder trained by the critic, the
actor reading it with the gradient stopped, DrQ random shift on every encoded batch (DrQ, SERL,
HIL-SERL).

Per update (one gradient step each; call ``update`` ``UTD`` times per env step for RLPD / WSRL):

1. critic: features ``z = enc(aug(o), s)`` (gradient into the encoder) and target features
   ``z' = enc_targ(aug(o'), s')``; ``y = r + γ^m (1 - term) (min_{M of N} Q_targ(z', a') [- α log π(a'|z')])``
   with ``a' ~ π(z')`` (the entropy term: ``backup_entropy``, RLPD yes, CQL/Cal-QL/WSRL no); loss
   ``Σ_i mean (Q_i(z, a) - y)^2`` (RLPD/WSRL: ``N = 10`` LayerNorm heads, ``M = 2`` random heads; SAC:
   ``N = M = 2``). ``algo="cql"`` adds CQL(H)'s penalty on ``R`` uniform and ``2R`` policy actions scored
   at ``z`` (Kumar et al. 2020), ``algo="calql"`` floors the policy actions' values at the Monte-Carlo
   return-to-go (Cal-QL, Nakamoto et al. 2023): :func:`robotrl.agents.qlearning.loss.cql_critic_loss`;
2. actor: ``z.detach()`` (DrQ/SERL: the actor never trains the encoder); loss
   ``mean(α log π(a|z) - Q(z, a))`` with ``Q`` the mean (RLPD) or min (CQL, Cal-QL, WSRL) over heads;
3. temperature: ``α`` towards the target entropy ``-Da``;
4. Polyak update of the target encoder and critic.

RLPD's symmetric sampling (half offline, half online) is the caller's batch
(:class:`robotrl.data.MixedSampler` with ``offline_ratio=0.5``). WSRL (Zhou et al. 2024) is this
agent with ``algo="sac"`` warm-started from a pixel Cal-QL/CQL run through :meth:`PixelSACAgent.load_parts`
(``trainer.init_from``, ``trainer.init_parts``); ``online_algo`` switches the rule when the online
phase starts (Cal-QL offline then SAC online in one run).

Frozen encoder (``freeze_encoder=True``, ``augment_pad=0``) with ``cache_features=True``: the trunk's
output is computed once per stored frame (:class:`robotrl.vision.cache.FrozenFeatureCache`). Symbols: ``B`` batch, ``Ds``
state size, ``Da`` action size, ``N`` critic heads, ``F`` image features.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.qlearning.loss import cql_critic_loss, critic_td_loss, subset_min, td_target
from robotrl.agents.qlearning.networks import EnsembleCritic, TanhGaussianActor
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError
from robotrl.networks import polyak_update_
from robotrl.utils import set_generator_state
from robotrl.vision.cache import FrozenFeatureCache
from robotrl.vision.frontend import PixelPolicyFrontend
from robotrl.vision.stack import FrameHistory

__all__ = ["PixelSACPolicy", "PixelSACAgent"]


class PixelSACPolicy(PixelPolicyFrontend):
    """Deployable pixel SAC/RLPD policy: ``(state (B, Ds), {camera: uint8 (B, H, W, k·C)})`` -> raw ``(B, Da)``.

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
        frame_stack: ``k`` frames per camera: ``forward`` then takes uint8 ``(B, H, W, k·C)`` stacks
            (:mod:`robotrl.vision.stack`).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                 hidden: Sequence[int] = (256, 256), *, act: str = "relu", encoder: str = "drq", pooling: str = "flatten",
                 feature_dim: int = 50, channels: int = 32, encoder_weights: str | None = None,
                 freeze_encoder: bool = False, augment_pad: int = 4, obs_clip: float | None = 10.0,
                 state_layout: str | None = None, frame_stack: int = 1):
        super().__init__(image_shapes, state_dim, action_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                         channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                         augment_pad=augment_pad, obs_clip=obs_clip, state_layout=state_layout, frame_stack=frame_stack,
                         hidden=[int(h) for h in hidden], act=act)
        self.actor = TanhGaussianActor(self.encoder.out_dim, action_dim, hidden, act=act)

    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        return self.action_scaler.unnormalize(self.actor.mode(self.features(state, images)))


ALGOS = ("sac", "cql", "calql")
#: parts a warm start can load (``trainer.init_parts``), :meth:`PixelSACAgent.load_parts`
PARTS = ("encoder", "policy", "critic", "temperature", "optimizers")


class PixelSACAgent(OffPolicyAgentBase):
    """SAC / RLPD / CQL / Cal-QL / WSRL from cameras (+ state) with a shared, critic-trained encoder (module doc).

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        obs_normalizer: state statistics (``None`` without state); action_scaler: action bounds.
        algo: ``"sac"`` (RLPD, WSRL fine-tuning), ``"cql"`` or ``"calql"`` (offline pretraining).
        online_algo: the rule from the trainer's online phase on (``None``: ``algo``).
        num_critics: ``N`` (RLPD/WSRL 10, SAC 2); num_min_critics: ``M`` heads in the target min (2).
        critic_layer_norm: LayerNorm in the critic (RLPD: on).
        critic_hidden: critic widths.
        backup_entropy: subtract ``α log π(a'|z')`` in the TD target (RLPD yes; CQL, Cal-QL, WSRL no).
        actor_q: ``"mean"`` (RLPD) or ``"min"`` (CQL, Cal-QL, WSRL) over the heads in the actor loss.
        cql_alpha, cql_n_actions, cql_temperature, cql_clip_diff: CQL(H)'s weight, ``R``, logsumexp
            temperature and gap clamp (JaxCQL / Cal-QL defaults 5.0, 10, 1.0, none).
        tau: Polyak rate of the target encoder and critic.
        actor_lr, critic_lr, alpha_lr, init_alpha: Adam settings and initial temperature.
        cache_features: cache the frozen trunk's output per stored frame (needs ``freeze_encoder=True``,
            ``augment_pad=0`` and ``frame_stack=1``); feature_cache_size: frames kept per camera.
        device, seed: torch device; seed of the network initialisation and the action sampling.
        policy_kwargs: :class:`PixelSACPolicy` architecture (encoder, pooling, augment_pad, frame_stack ``k``:
            batches then carry uint8 ``(B, H, W, k·C)`` stacks, ``ReplayBuffer(frame_stack=k)``, ...).

    Raises:
        ValueError: unknown ``algo`` / ``online_algo`` / ``actor_q``, or ``num_min_critics`` out of range.
        ConfigError: ``cache_features`` without a frozen, unshifted, unstacked encoder (names the settings to change).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler, algo: str = "sac",
                 online_algo: str | None = None, num_critics: int = 10,
                 num_min_critics: int = 2, critic_layer_norm: bool = True, critic_hidden: Sequence[int] = (256, 256),
                 backup_entropy: bool = True, actor_q: str = "mean", cql_alpha: float = 5.0, cql_n_actions: int = 10,
                 cql_temperature: float = 1.0, cql_clip_diff: Sequence[float] | None = None,
                 tau: float = 0.005, actor_lr: float = 3e-4, critic_lr: float = 3e-4, alpha_lr: float = 3e-4,
                 init_alpha: float = 0.1, cache_features: bool = False, feature_cache_size: int = 100_000,
                 device: str | torch.device = "cpu", seed: int = 0, **policy_kwargs):
        if not 1 <= num_min_critics <= num_critics:
            raise ValueError(f"num_min_critics must be in [1, num_critics={num_critics}], got {num_min_critics}")
        for a in (algo, online_algo or algo):
            if a not in ALGOS:
                raise ValueError(f"unknown algo {a!r} for a pixel Q-learning agent; choose one of {ALGOS}")
        if actor_q not in ("mean", "min"):
            raise ValueError(f"actor_q must be 'mean' or 'min', got {actor_q!r}")
        self.device = torch.device(device)
        self.algo, self.online_algo = algo, online_algo
        with torch.random.fork_rng(devices=[]):  # seeded network initialisation, global RNG untouched
            torch.manual_seed(seed)
            self.policy = PixelSACPolicy(image_shapes, state_dim, action_dim, **policy_kwargs)
            enc = self.policy.encoder
            self.critic = EnsembleCritic(enc.out_dim, action_dim, num_critics, critic_hidden,
                                         layer_norm=critic_layer_norm)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        self.critic.to(self.device)
        self.target_encoder = copy.deepcopy(enc).requires_grad_(False)
        if enc.freeze:  # a frozen trunk is its own target: one module, so cached features serve both passes
            self.target_encoder.trunks = enc.trunks
        self.target_critic = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = torch.tensor(float(np.log(init_alpha)), device=self.device, requires_grad=True)
        self.action_dim = int(action_dim)
        self.target_entropy = -float(action_dim)
        self.num_min, self.tau = int(num_min_critics), float(tau)
        self.backup_entropy, self.actor_q = bool(backup_entropy), actor_q
        self.cql_n = int(cql_n_actions)
        self.cql_args = dict(alpha=float(cql_alpha), temperature=float(cql_temperature),
                             clip_diff=tuple(cql_clip_diff) if cql_clip_diff is not None else (-float("inf"), float("inf")))
        self.lrs = dict(actor=actor_lr, critic=critic_lr, alpha=alpha_lr)
        # every encoder parameter is in the critic's optimizer (a frozen trunk's get no gradient, so Adam skips
        # them): the optimizer state has one layout whether the trunk is frozen or not, and a warm start can
        # move between the two
        self.critic_opt = torch.optim.Adam(list(enc.parameters()) + list(self.critic.parameters()), lr=critic_lr)
        self.actor_opt = torch.optim.Adam(self.policy.actor.parameters(), lr=actor_lr)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=alpha_lr)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.frame_stack = self.policy.frame_stack
        self.explore_frames = FrameHistory(self.frame_stack)
        self.feature_cache: FrozenFeatureCache | None = None
        if cache_features:
            if self.frame_stack > 1:
                raise ConfigError("agent.model.cache_features=true caches features per stored frame, and with "
                                  f"agent.model.frame_stack={self.frame_stack} the encoder reads stacks of frames: "
                                  "set agent.model.frame_stack=1 or drop cache_features")
            if not enc.cacheable():
                raise ConfigError(
                    "agent.model.cache_features=true caches a frozen encoder's features per stored frame: set "
                    f"agent.model.freeze_encoder=true and agent.model.augment_pad=0 (now freeze_encoder={enc.freeze}, "
                    f"augment_pad={enc.augment_pad}; a random shift changes a frame's features every update), "
                    "or drop cache_features")
            self.feature_cache = FrozenFeatureCache(enc, feature_cache_size)

    # ------------------------------------------------------------------ trainer hooks
    @property
    def needs_mc_returns(self) -> bool:
        """Cal-QL bounds with MC returns-to-go: the trainer then samples only ended episodes online."""
        return self.algo == "calql"

    def start_online(self) -> None:
        """Called by the trainer when its online phase starts (also on resume): ``online_algo`` from then on."""
        if self.online_algo is not None:
            self.algo = self.online_algo

    # ------------------------------------------------------------------ update
    def _encode(self, encoder, images: dict[str, torch.Tensor], state: torch.Tensor | None,
                uids: torch.Tensor | None) -> torch.Tensor:
        """``(B, F + Ds)`` features; from the frozen trunk's cached stems when caching is on and the batch
        carries frame ids (``Batch.extras["obs_uid"]``), else a full encoder pass."""
        if self.feature_cache is not None and uids is not None:
            return encoder.forward_from_stems(self.feature_cache.stems(images, uids), state)
        return encoder(images, state)

    def _polyak_pairs(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """(targets, sources) of the Polyak update: target encoder and critic, less a shared frozen trunk (its
        own target: never written, so its cached features stay valid)."""
        pairs = [(t, s) for t, s in zip([*self.target_encoder.parameters(), *self.target_critic.parameters()],
                                        [*self.policy.encoder.parameters(), *self.critic.parameters()]) if t is not s]
        return [t for t, _ in pairs], [s for _, s in pairs]

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One critic, actor and temperature step on a transition batch with cameras.

        Args:
            batch: ``B`` transitions: state ``(B, Ds)``, actions ``(B, Da)`` raw, frames uint8
                ``{key: (B, H, W, k·C)}`` in ``extras`` (``mc_returns (B,)`` for Cal-QL).
            step: trainer step (unused).

        Returns:
            Detached scalars ``critic_loss``, ``actor_loss``, ``alpha``, ``q`` (and CQL's ``cql_penalty``, ...).

        Raises:
            ValueError: Cal-QL on a batch without ``mc_returns``.
        """
        p, dev = self.policy, self.device
        p.train()
        self.target_encoder.train()  # random shift on the next frames too (DrQ)
        images = {k: v.to(dev) for k, v in batch.images().items()}
        next_images = {k: v.to(dev) for k, v in batch.next_images().items()}
        uid, next_uid = batch.extras.get("obs_uid"), batch.extras.get("next_obs_uid")
        s, s2 = p.normalized_state(batch.observations.to(dev)), p.normalized_state(batch.next_observations.to(dev))
        a = p.action_scaler.normalize(batch.actions.to(dev)).clamp(-1.0, 1.0)
        alpha = self.log_alpha.exp().detach()
        conservative = self.algo in ("cql", "calql")
        B, R = a.shape[0], self.cql_n
        with torch.no_grad():
            z2 = self._encode(self.target_encoder, next_images, s2, next_uid)
            a2, logp2 = p.actor.sample(z2, self.gen)
            heads = torch.randperm(self.critic.n, generator=self.gen, device=dev)[: self.num_min]
            v2 = subset_min(self.target_critic(z2, a2), heads)
            if self.backup_entropy:
                v2 = v2 - alpha * logp2
            y = td_target(batch.rewards.to(dev), batch.discounts.to(dev), batch.terminated.to(dev), v2)
        z = self._encode(p.encoder, images, s, uid)
        extra: dict[str, torch.Tensor] = {}
        if conservative:
            if self.algo == "calql" and batch.mc_returns is None:
                raise ValueError("Cal-QL needs mc_returns in the batch (the replay buffer provides them)")
            with torch.no_grad():  # R policy actions at s' then at s, scored at s (CQL(H), JaxCQL)
                a_n, lp_n = p.actor.sample_n(torch.cat([z2, z.detach()]), R, self.gen)  # (R, 2B, Da), (R, 2B)
                a_pi = a_n.view(R, 2, B, -1).transpose(0, 1).reshape(2 * R * B, -1)
                lp_pi = lp_n.view(R, 2, B).transpose(0, 1).reshape(2 * R * B)
            a_rand = torch.rand((R * B, self.action_dim), generator=self.gen, device=dev) * 2 - 1
            mc = batch.mc_returns.to(dev) if self.algo == "calql" and batch.mc_returns is not None else None
            critic_loss, q, extra = cql_critic_loss(self.critic, z, a, y, a_rand, a_pi, lp_pi, n_actions=R,
                                                    mc_lower_bound=mc, **self.cql_args)
        else:
            q = self.critic(z, a)
            critic_loss = critic_td_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()

        zd = z.detach()  # the actor's gradient stops at the encoder
        pa, logp = p.actor.sample(zd, self.gen)
        q_pi = self.critic(zd, pa)
        q_pi = q_pi.mean(0) if self.actor_q == "mean" else q_pi.min(0).values
        actor_loss = (alpha * logp - q_pi).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        polyak_update_(*self._polyak_pairs(), self.tau)
        p.eval()
        return {"critic_loss": critic_loss.detach(), "actor_loss": actor_loss.detach(), "alpha": alpha,
                "q": q.detach().mean(), **{k: v.detach() for k, v in extra.items()}}

    def _inputs(self, state, images: Mapping[str, np.ndarray] | None,
                history: FrameHistory) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(state (N, Ds), {key: uint8 (N, H, W, k·C)})`` (frames as the policy takes them), or a raw batch of
        ``Dict`` observations with ``images=None`` (split by the policy's ``state_layout``, each env's newest frames
        stacked by ``history``), as tensors on the agent's device."""
        if images is None:
            s, imgs, _ = self.policy.split_observation(state)
            return s, history.push(imgs)
        return (torch.as_tensor(np.asarray(state, np.float32), device=self.device),
                {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in images.items()})

    @torch.no_grad()
    def explore(self, state, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Sampled raw actions ``(N, Da)`` for ``(N, Ds)`` and ``{key: uint8 (N, H, W, k·C)}``, or for a raw
        batch of the env's ``Dict`` observations (``images=None``: what the trainer's online loop passes; frames
        stacked by the agent's exploration history, :meth:`reset_explore` at episode starts)."""
        p = self.policy.eval()
        s, imgs = self._inputs(state, images, self.explore_frames)
        a, _ = p.actor.sample(p.encoder(imgs, p.normalized_state(s)), self.gen)
        return p.action_scaler.unnormalize(a).cpu().numpy()

    @torch.no_grad()
    def act(self, state, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Deterministic raw actions ``(N, Da)`` (inputs as :meth:`explore`; raw observations stacked by the
        policy's own history, :meth:`PixelSACPolicy.reset`)."""
        return self.policy.eval()(*self._inputs(state, images, self.policy._history)).cpu().numpy()

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None:
        """The episodes of the trainer's envs ``env_ids`` (``None``: all) start: their exploration frame stacks
        start afresh."""
        self.explore_frames.reset(env_ids)

    def state_dict(self) -> dict:
        """Every network, target, optimiser and the temperature (plain tensors)."""
        return {"policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "target_encoder": self.target_encoder.state_dict(), "target_critic": self.target_critic.state_dict(),
                "log_alpha": self.log_alpha.detach().clone(), "critic_opt": self.critic_opt.state_dict(),
                "actor_opt": self.actor_opt.state_dict(), "alpha_opt": self.alpha_opt.state_dict(), "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (resume: the saved learning rates too).

        Raises:
            KeyError, RuntimeError, ValueError: a state of another agent or architecture.
        """
        self.load_parts(state, ("encoder", "policy", "critic", "temperature"))
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        set_generator_state(self.gen, state["gen"])

    def load_parts(self, state: dict, parts: Sequence[str]) -> None:
        """Warm start from a pretrained pixel agent's :meth:`state_dict` (pixel WSRL from pixel Cal-QL/CQL).

        Parts (``trainer.init_parts``): ``encoder`` = the shared image encoder and its target (DrQ: one encoder
        for actor and critic); ``policy`` = the actor head, the state normaliser and the action scaler;
        ``critic`` = the ensemble and its target; ``temperature`` = ``log α``; ``optimizers`` = the three Adam
        states (moments and step counts; this agent's configured learning rates kept), as WSRL's reference
        restores the whole pretrained train state (zhouzypaul/wsrl ``finetune.py``). With ``freeze_encoder`` the
        target encoder shares the loaded trunk (a frozen trunk is its own target); a cached feature store is
        cleared when the encoder changes.

        Raises:
            ValueError: an unknown part.
            KeyError, RuntimeError: the state lacks a part or its tensors do not fit (another architecture).
        """
        for part in parts:
            if part not in PARTS:
                raise ValueError(f"unknown part {part!r}; choose from {PARTS}")
        pol = state["policy"]
        if "encoder" in parts:  # the target first: a frozen trunk it shares then holds the online trunk's weights
            self.target_encoder.load_state_dict(state["target_encoder"])
            self.policy.encoder.load_state_dict({k[len("encoder."):]: v for k, v in pol.items() if k.startswith("encoder.")})
            if self.feature_cache is not None:
                self.feature_cache.clear()
        if "policy" in parts:
            own = {k: v for k, v in pol.items() if not k.startswith("encoder.")}
            own.update({k: v for k, v in self.policy.state_dict().items() if k.startswith("encoder.")})
            self.policy.load_state_dict(own)
        if "critic" in parts:
            self.critic.load_state_dict(state["critic"])
            self.target_critic.load_state_dict(state["target_critic"])
        if "temperature" in parts:
            with torch.no_grad():
                self.log_alpha.copy_(state["log_alpha"])
        if "optimizers" in parts:
            for opt, key, lr in ((self.critic_opt, "critic_opt", self.lrs["critic"]),
                                 (self.actor_opt, "actor_opt", self.lrs["actor"]),
                                 (self.alpha_opt, "alpha_opt", self.lrs["alpha"])):
                opt.load_state_dict(state[key])
                for group in opt.param_groups:
                    group["lr"] = lr
