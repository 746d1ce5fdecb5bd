"""Off-policy residual RL (ResFiT), with Policy Decorator's progressive exploration as an option.

ResFiT: "Residual Off-Policy RL for Finetuning Behavior Cloning Policies"
(amazon-science/residual-offpolicy-rl); Policy Decorator (Yuan et al. 2024,
tongzhoumu/policy_decorator). Runs on :class:`robotrl.trainer.Trainer` (online phase:
``agent.explore``, online buffer, ``utd`` updates, offline/online mixing).

Symbols: ``B`` batch, ``N`` critic heads / envs, ``Do``/``Da`` observation / action size.
All in normalised units: ``o_n`` the clamped normalised observation, actions in ``[-1, 1]``.

- Actor: the residual of a :class:`~robotrl.agents.residual.policy.ResidualPolicy` on
  ``[o_n, a_base]``: deterministic ``tanh`` (TD3-style, ``actor="td3"``) or a tanh-Gaussian
  (``actor="sac"``); zero-initialised output layer; combined action
  ``a = clip(a_base + α r)``. TD3 keeps a Polyak target actor (``actor_target``, rate
  ``tau``, moved after every actor step) for ``a'``.
- Observation statistics: the residual's (and critic's) observation std is floored at
  ``obs_std_floor`` (ResFiT ``min_state_std`` 0.1) before normalising; the frozen base keeps its own.
- Critic: the batched ensemble :class:`robotrl.agents.qlearning.networks.EnsembleCritic`
  (``N`` heads, LayerNorm) scoring ``Q(o_n, a)`` of the COMBINED executed action — the
  buffer's action (online: what was executed; offline demos: the demonstrated action).
  Target: ``y = R_n + γ^m (1 − terminated) min_{2 random heads} Q'(s', a')`` with
  ``a' = clip(a_base(s') + clip(α r'(s') + ε, ±1))`` (TD3: ``r'`` from the target actor,
  ``ε ~ N(0, target_noise²)`` clipped to ``±target_noise_clip``, both in normalised env action
  units, i.e. on the SCALED residual as ResFiT's ``TruncatedNormal(α·μ, σ)``; SAC: the
  current actor's sample, minus ``α_ent log π``), losses :func:`robotrl.agents.qlearning.loss.td_target` /
  :func:`~robotrl.agents.qlearning.loss.critic_td_loss`; n-step sums come from the
  buffer (``trainer.n_step``).
- Base actions, per-step bases (BC, SB3, diffusion with ``act_steps = 1``): recomputed from observations at
  update time, so offline demonstrations are relabelled with the base's actions (ResFiT) and online transitions
  get the base action their state had (exact: the base is a function of the observation).
- Base actions, chunked bases (``Te > 1``: robotrl diffusion/DPPO with ``act_steps > 1``, a LeRobot ACT or
  diffusion policy, :mod:`robotrl.agents.residual.lerobot`; ``To = 1``): the base executes its chunks as it was
  trained — one chunk prediction every ``Te`` env steps per env, from an exploration copy of the base whose
  queues :meth:`reset_explore` clears at episode starts — and the residual acts every step on
  ``(o_t, a_base_t)``, ``a_base_t`` the action of the current chunk due at step ``t``. Such an ``a_base_t`` is not
  a function of ``o_t`` (it depends on the observation the chunk was predicted from), so it cannot be recomputed:
  the agent declares ``transition_fields = {"base_action": Da}``, the trainer stores the base action actually
  executed with each online transition (:meth:`explore_extras`, :class:`robotrl.data.ReplayBuffer` ``extra_dims``),
  and updates read it back. Relabelling of a sampled transition ``(o, a, R, o')``:

  * ``a_base(o)`` (residual input of the actor loss): the stored executed base action; for offline rows (no
    stored base action) the first action of a fresh chunk predicted from ``o`` (ResFiT's relabelling of demos
    with the base; the demos' own actions stay the critic's ``a``);
  * ``a_base(o')`` (target action ``a'``): the executed base action stored with the step that followed ``o'``
    in the same episode (the queued action mid-chunk, a fresh chunk's first at a chunk start) — what the base
    really did at ``o'``; where that step is not stored (an episode cut by truncation, the env's newest step,
    offline rows) the first action of a fresh chunk predicted from ``o'``: exact where a chunk starts at ``o'``,
    an approximation mid-chunk (the base would have continued its queue);
  * the critic scores the executed combined action ``a`` as stored, so ``Q`` is that of the policy that
    runs (chunked base + per-step residual).

  Bases on an observation history (``To > 1``) are refused: a fresh chunk cannot be predicted from one stored
  observation. Camera agents take per-step bases only (:func:`~robotrl.agents.residual.policy.check_base_fits`).
- Exploration (``explore``): the first ``base_noise_steps`` calls act with the base plus
  Gaussian noise (``base_noise_std``, normalised units) — set ``trainer.online_warmup_steps``
  to the same number so no update happens before; the first ``critic_warmup_updates``
  updates train only the critic; afterwards TD3 executes ``clip(a_base + clip(α r + ε, ±1))``
  with ``ε ~ N(0, explore_std²)`` in normalised env action units (on the scaled residual, so
  the executed noise has std ``explore_std`` whatever ``α`` is; unclipped, as ResFiT's
  ``act``) and SAC samples.

Reference defaults (ResFiT ``ResidualTD3AlgoConfig``/``QAgentConfig``) and the deviations
from them, all deliberate:

- same: α 0.1 (the paper's box-cleanup runs use 0.2), σ 0.05 exploration and target noise,
  target clip 0.3, N=10 LayerNorm critic heads, min over 2 random heads in the target,
  actor on the mean over heads (``policy_gradient_type="ensemble_mean"``), τ 0.005 for
  critic and actor targets, γ 0.99, grad clip 1, zero-initialised residual output, obs std
  floor 0.1, UTD 4 with one actor update per 4 critic updates (``actor_delay=4``, with
  ``trainer.utd=4`` and ``trainer.num_envs=1`` — ResFiT asserts one env), n-step 3, batch
  256, offline fraction 0.5, demos relabelled with base actions.
- different: MLPs of 256×2 without LayerNorm in the actor (ResFiT: 1024-wide, LayerNorm,
  on image features) for 2-core CPUs; actor lr 1e-4 and critic lr 3e-4 (ResFiT: 1e-6–5e-6
  and 1e-4, tuned for 300k-step image runs; far too slow for the budgets here); base+noise
  collection is Gaussian (``base_noise_std``) where ResFiT draws uniform noise of scale
  0.2; warmup lengths are set per experiment (ResFiT 10k env steps, 10k critic updates).
- rewards/termination: ResFiT trains on 0/1 success rewards with termination on success;
  here rewards come from the env through ``reward_scale``/``reward_bias`` (Fetch's sparse
  −1/0 become 0/1 with ``reward_bias: 1``); ``experiment=residual-offpolicy`` ends training
  episodes at success (``env.train_terminate_on_success``, :class:`robotrl.envs.SuccessTermination`)
  and marks the demonstrations' successful transitions terminal
  (:func:`robotrl.task_mdp.terminate_data_at_success`). ``progressive_steps = H > 0`` (Policy Decorator) switches the residual on per
  env and step with probability ``min(t/H, 1)``, ``t`` counting explore calls after the
  base-noise phase; otherwise the base acts alone.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from robotrl.agent import FRONTEND_ARCHITECTURE, OffPolicyAgentBase
from robotrl.agents.qlearning.loss import critic_td_loss, sac_actor_loss, subset_min, td_target, temperature_loss
from robotrl.agents.qlearning.networks import EnsembleCritic
from robotrl.agents.residual.base import load_base
from robotrl.agents.residual.policy import LOG_STD_MAX, LOG_STD_MIN, ResidualPolicy
from robotrl.agents.residual.ppo import refuse_data_terms
from robotrl.agents.retention import PolicyParts, Retention, RetentionConfig

from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.networks import polyak_update_, squashed_gaussian
from robotrl.utils import set_generator_state
from robotrl.vision.stack import FrameHistory


def noisy_scaled_residual(r: torch.Tensor, scale: float, std: float, clip: float | None,
                          gen: torch.Generator) -> torch.Tensor:
    """ResFiT's ``TruncatedNormal(α r, std).sample(clip)``: ``clip(α r + ε, ±1)`` ``(B, Da)`` in normalised action
    units, ``ε ~ N(0, std²)`` clamped to ``±clip`` (``None``: unclamped, as ResFiT's exploration).

    Args:
        r: the residual actor's tanh output ``(B, Da)`` in ``[-1, 1]``.
        scale: α, the residual scale.
        gen: the agent's generator (its device is the noise's).
    """
    eps = std * torch.randn(r.shape, generator=gen, device=r.device)
    eps = eps if clip is None else eps.clamp(-clip, clip)
    return (scale * r + eps).clamp(-1.0, 1.0)


def install_saved_base(policy, state: dict) -> None:
    """Give ``policy`` (a state or pixel residual policy) the frozen base its checkpoint ``state`` was saved with
    (``state["policy_spec"]["base"]``), when it has none or another; before loading the residual's weights."""
    base_desc = state["policy_spec"]["base"]
    if base_desc is not None and (policy.base is None or policy.spec()["base"] != base_desc):
        policy.set_base(base_desc)


def base_plus_noise(scaler, base_raw: torch.Tensor, std: float, gen: torch.Generator) -> torch.Tensor:
    """ResFiT's warm-up collection: raw base actions ``(B, Da)`` plus ``N(0, std²)`` in normalised units, clipped to
    the action bounds; ``scaler`` is the policy's :class:`~robotrl.data.ActionScaler`."""
    a = scaler.normalize(base_raw) + std * torch.randn(base_raw.shape, generator=gen, device=base_raw.device)
    return scaler.unnormalize(a.clamp(-1.0, 1.0))


class ResidualOffPolicyAgent(OffPolicyAgentBase):
    """ResFiT: TD3- or SAC-style residual actor, ensemble critic on the combined action; on states or cameras.

    With cameras (``image_shapes``; ResFiT trains on image features) the policy holds a
    :class:`~robotrl.vision.encoders.PixelEncoder` (:class:`~robotrl.vision.frontend.ObservationFrontend`) whose
    features ``z (B, F)`` of the frames and the normalised state replace the normalised observation for the
    residual and the critic, with the conventions of :class:`robotrl.agents.qlearning.QLAgent` on cameras (DrQ,
    SERL): the critic's loss trains the encoder (its parameters in the critic's optimizer, clipped with the
    critic's), the actor reads ``z`` with the gradient stopped, the TD target reads a Polyak target encoder on
    the next frames, random shift (``augment_pad``, 4) on every encoded training batch. The frozen base is a
    camera policy (given the state and the frames) or a state policy (given the flat state); it must fit the
    run's cameras, ``Ds`` and ``Da`` (:func:`~robotrl.agents.residual.policy.check_base_fits`). Acting takes the
    env's raw ``Dict`` observations (frames stacked per env, :meth:`reset_explore`). A camera agent seeds its
    network initialisation with ``seed`` (a state agent draws it from the global generator, as it always has).

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent (statistics
            copied, clip ``obs_clip``; an identity normaliser on states: the base's statistics are
            used). With cameras ``obs_dim`` is ``Ds``, the flat state beside the frames
            (``obs_normalizer`` ``None``: no state).
        base: robotrl checkpoint / run dir, SB3 ``.zip``, policy-state dict or module.
        base_overrides: constructor kwargs replaced in the base's spec.
        actor: ``"td3"`` (deterministic tanh residual) or ``"sac"`` (tanh-Gaussian).
        hidden, act, residual_scale, obs_clip: residual actor (ResFiT α = 0.1).
        obs_std_floor: lower bound of the observation std used by residual and critic (ResFiT 0.1).
        num_critics, target_subset, critic_hidden, critic_layer_norm: ensemble critic (ResFiT:
            10 heads, min over 2 random, LayerNorm).
        actor_lr, critic_lr, tau, gamma: Adam rates (``critic_lr``: critic and encoder), Polyak factor (critic,
            actor and encoder targets), discount.
        actor_delay: actor (and target) update every ``actor_delay`` critic updates (ResFiT: 4,
            one actor update per UTD-4 iteration).
        target_noise, target_noise_clip: TD3 target smoothing noise, added to the scaled
            residual ``α r'`` (normalised env action units; ResFiT 0.05, clip 0.3).
        explore_std: TD3 exploration noise added to the scaled residual ``α r`` (normalised env
            action units; ResFiT 0.05).
        base_noise_steps, base_noise_std: base-plus-noise collection before learning.
        critic_warmup_updates: updates that train only the critic.
        progressive_steps: Policy Decorator's ``H`` (0: off).
        init_alpha, target_entropy: SAC temperature (``None`` target: ``-Da``).
        max_grad_norm: max gradient norm (``None``: off).
        device, seed: torch device and seed of all sampling.
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad,
            state_layout, frame_stack: the observation's cameras and encoder, as
            :class:`~robotrl.vision.frontend.ObservationFrontend` (``image_shapes`` ``None``: a state agent).
        retention: knowledge retention online (:mod:`robotrl.agents.retention`), the residual's form: only the
            ``kl`` term on the actor minibatch's residual inputs ``x = [o_n, a_base]`` (``kl_states="online"``)
            toward the residual frozen at :meth:`start_online`: ``actor="sac"``: ``KL(π₀(·|x) ‖ π(·|x))`` of the
            pre-tanh Gaussians (``penalty="kl"``) or ``‖tanh μ(x) − tanh μ₀(x)‖²`` (``"l2"``); ``actor="td3"``, a
            deterministic residual: ``"l2"`` only, ``‖r(x) − r₀(x)‖²``; both in residual units ``r ∈ [-1, 1]``
            (the executed offset is ``α r``), added to the actor loss; schedules count actor updates. With
            cameras the snapshot holds its own copy of the encoder (:meth:`_retention_term`). ``None``: off (the
            updates unchanged).

    Attributes:
        frame_stack: ``k`` frames per camera the policy reads (1 for a state agent): the replay buffer stacks that many.

    Raises:
        ValueError: unknown ``actor``, or (states) a base on an observation history (``To > 1``).
        ConfigError: (cameras) the base cannot be read (names ``agent.model.base``) or does not fit
            (:func:`~robotrl.agents.residual.policy.check_base_fits`); ``penalty="kl"`` on the TD3 residual, a term that reads the pretraining data
            (:func:`~robotrl.agents.residual.ppo.refuse_data_terms`), or a bad retention setting.
    """

    ARCHITECTURE_KEYS = ("hidden", "act", "obs_clip", "num_critics", "critic_hidden", "critic_layer_norm",
                         *FRONTEND_ARCHITECTURE)

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer | None,
                 action_scaler: ActionScaler, base=None, base_overrides: dict | None = None, actor: str = "td3",
                 hidden: Sequence[int] = (256, 256), act: str = "relu", residual_scale: float = 0.1,
                 obs_clip: float | None = 3.0, obs_std_floor: float = 0.1, num_critics: int = 10, target_subset: int = 2,
                 critic_hidden: Sequence[int] = (256, 256), critic_layer_norm: bool = True,
                 actor_lr: float = 1e-4, critic_lr: float = 3e-4, tau: float = 0.005, gamma: float = 0.99,
                 actor_delay: int = 4, target_noise: float = 0.05, target_noise_clip: float = 0.3,
                 explore_std: float = 0.05, base_noise_steps: int = 0, base_noise_std: float = 0.1,
                 critic_warmup_updates: int = 0, progressive_steps: int = 0, init_alpha: float = 0.1,
                 target_entropy: float | None = None, max_grad_norm: float | None = 1.0,
                 device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq",
                 pooling: str = "flatten", feature_dim: int = 50, channels: int = 32, encoder_weights: str | None = None,
                 freeze_encoder: bool = False, augment_pad: int = 4, state_layout: str | None = None,
                 frame_stack: int = 1, retention: RetentionConfig | Mapping | None = None):
        if actor not in ("td3", "sac"):
            raise ValueError(f"actor must be 'td3' or 'sac', got {actor!r}")
        self.device = torch.device(device)
        self.actor = actor
        self.base_overrides = dict(base_overrides or {})
        cameras = bool(image_shapes)
        frontend = dict(image_shapes=image_shapes, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                        channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                        augment_pad=augment_pad, state_layout=state_layout, frame_stack=frame_stack) if cameras else {}
        with torch.random.fork_rng(devices=[], enabled=cameras):  # cameras: seeded init, global RNG untouched
            if cameras:
                torch.manual_seed(seed)
            self.policy = ResidualPolicy(obs_dim, action_dim, None, hidden, act=act,
                                         head="tanh" if actor == "td3" else "tanh_gaussian",
                                         residual_scale=residual_scale, obs_clip=obs_clip, **frontend)
            critic = EnsembleCritic(self.policy.out_dim, action_dim, num_critics, critic_hidden,
                                    layer_norm=critic_layer_norm) if cameras else None
        self._identity_obs_norm = False
        if obs_normalizer is not None:
            obs_norm = ObservationNormalizer(obs_normalizer.mean.cpu().numpy(), obs_normalizer.std.cpu().numpy(),
                                             clip=obs_clip)
            self._identity_obs_norm = not cameras and bool((obs_normalizer.mean == 0).all()
                                                           and (obs_normalizer.std == 1).all())
        self.policy.set_normalizers(obs_norm if obs_normalizer is not None else None, action_scaler)
        self.obs_std_floor = float(obs_std_floor)
        self.policy.floor_obs_std(self.obs_std_floor)
        self.policy.to(self.device).eval()
        self.explore_base: torch.nn.Module | None = None  # a chunked base's exploration copy (own chunk queues)
        if base is not None:
            self.set_base(self._load_base(base))
        # TD3 target actor for a' (ResFiT's actor_target); the SAC variant samples the current actor
        self.actor_target = copy.deepcopy(self.policy.residual).requires_grad_(False)
        if critic is None:  # a state agent: built here, from the global generator, as before cameras were an option
            critic = EnsembleCritic(obs_dim, action_dim, num_critics, critic_hidden, layer_norm=critic_layer_norm)
        self.critic = critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        enc = self.policy.encoder
        self.target_encoder = None if enc is None else copy.deepcopy(enc).requires_grad_(False)
        self._critic_params = [*(enc.parameters() if enc is not None else ()), *self.critic.parameters()]
        self._polyak = ([*self.critic_target.parameters(), *(self.target_encoder.parameters() if enc else ())],
                        [*self.critic.parameters(), *(enc.parameters() if enc else ())])
        self.actor_opt = torch.optim.Adam(self.policy.residual.parameters(), lr=actor_lr)
        self.critic_opt = torch.optim.Adam(self._critic_params, lr=critic_lr)
        self.log_alpha = torch.tensor(math.log(init_alpha), device=self.device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=actor_lr)
        self.target_entropy = float(-action_dim if target_entropy is None else target_entropy)
        self.target_subset, self.tau, self.gamma = int(target_subset), float(tau), float(gamma)
        self.actor_delay = int(actor_delay)
        self.target_noise, self.target_noise_clip = float(target_noise), float(target_noise_clip)
        self.explore_std = float(explore_std)
        self.base_noise_steps, self.base_noise_std = int(base_noise_steps), float(base_noise_std)
        self.critic_warmup_updates, self.progressive_steps = int(critic_warmup_updates), int(progressive_steps)
        self.max_grad_norm = max_grad_norm
        self.num_updates = 0
        self.num_explore = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.frame_stack = self.policy.frame_stack
        self.explore_frames = FrameHistory(self.frame_stack)
        self._last_base: np.ndarray | None = None  # the base actions of the last explore call (chunked bases)
        self.retention = Retention(retention, squash=True)
        if self.retention.enabled:
            self._check_retention()

    # ------------------------------------------------------------------ knowledge retention
    def _check_retention(self) -> None:
        """The retention settings this agent has (the ``kl`` term; class doc).

        Raises:
            ConfigError: ``penalty="kl"`` with ``actor="td3"``, or a term that reads the pretraining data.
        """
        if self.actor == "td3" and self.retention.cfg.kl.weight > 0 and self.retention.cfg.penalty == "kl":
            raise ConfigError("agent.model.retention.penalty=kl needs a stochastic residual, and actor=td3 is "
                              "deterministic: set agent.model.retention.penalty=l2 or agent.model.actor=sac")
        refuse_data_terms(self.retention.cfg, "the off-policy residual")

    def _retention_parts(self) -> PolicyParts:
        """What defines the residual's action at an observation: its MLP (TD3: ``tanh`` of the output; SAC: the
        pre-tanh mean and ``log_std`` it outputs) and, with cameras, the encoder (the critic trains it, so the
        features the residual reads change too). Shared with the policy (retention freezes a copy); not the base,
        which is frozen."""
        if self.has_cameras:
            return PolicyParts(residual=self.policy.residual, encoder=self.policy.encoder)
        return PolicyParts(residual=self.policy.residual)

    def start_online(self) -> None:
        """Freeze the residual as the online phase starts (π₀ of knowledge retention; kept on resume)."""
        self.retention.start(self._retention_parts())

    def load_pretrained(self, path: str) -> None:
        """The whole pretrained agent state (:meth:`robotrl.agent.AgentBase.load_pretrained`); a retention snapshot
        saved in it is dropped: this run's retention freezes the loaded residual at :meth:`start_online`."""
        super().load_pretrained(path)
        self.retention.reset()

    def _retention_term(self, x) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Retention loss on the actor minibatch (``None``: off or not started).

        Args:
            x: a state agent's residual inputs ``(B, Do + Da)``; a camera agent's ``(frames {key: uint8 (B, H, W,
                k·C)}, raw states (B, Ds), raw base actions (B, Da))``: each residual (the live one and the
                snapshot) then reads its own encoder's features of the frames, without gradient into either
                encoder and in eval mode (no random shift), as :meth:`QLAgent._retention_loss
                <robotrl.agents.qlearning.QLAgent._retention_loss>`.
        """
        if self.retention.reference is None:
            return None, {}
        p, da = self.policy, self.policy.action_dim

        def inputs(net, inp):
            if not self.has_cameras:
                return inp
            images, state, base_raw = inp
            with torch.no_grad():
                z = net.encoder(images, p.normalized_state(state))
            return p.residual_input(z, base_raw)

        def gaussian(net, inp):
            out = net.residual(inputs(net, inp))
            if self.actor == "td3":  # deterministic: the mean alone (penalty l2, on tanh of it)
                return out, torch.ones_like(out)
            mean, log_std = out.split(da, dim=-1)
            return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()

        training = p.training
        p.eval()
        try:
            return self.retention.actor_loss(self._retention_parts(), gaussian=gaussian, states=x,
                                             batch_size=len(x[1]) if self.has_cameras else x.shape[0])
        finally:
            p.train(training)

    @property
    def has_cameras(self) -> bool:
        """Whether the agent learns from camera frames (``image_shapes`` given)."""
        return self.policy.has_cameras

    # ------------------------------------------------------------------ base
    def _load_base(self, source) -> torch.nn.Module:
        """:func:`~robotrl.agents.residual.base.load_base`; with cameras an unreadable base is a
        :class:`~robotrl.errors.ConfigError` naming ``agent.model.base`` and the way out."""
        if not self.has_cameras:
            return load_base(source, self.base_overrides, self.device)
        try:
            return load_base(source, self.base_overrides, self.device)
        except CheckpointError as exc:
            raise ConfigError(f"agent.model.base={source} cannot be loaded ({exc}); train a base first, e.g. "
                              "robotrl train experiment=bc obs=pixels (same dataset), and point agent.model.base at its "
                              "run directory") from exc

    def set_base(self, base) -> None:
        """Install a frozen base: per-step, or (states) chunked with ``To = 1`` (executed as trained; module doc).

        Raises:
            ValueError: (states) the base conditions on an observation history (``To > 1``).
            ConfigError: (cameras) the base does not fit (:func:`~robotrl.agents.residual.policy.check_base_fits`).
        """
        if not self.has_cameras and getattr(base, "To", 1) != 1:
            raise ValueError(f"the off-policy residual predicts its chunked base's chunks from single stored "
                             f"observations, and {type(base).__name__} conditions on To={base.To} of them: use a base "
                             "trained with obs_horizon 1 (LeRobot: n_obs_steps 1)")
        self.policy.set_base(base)
        self.explore_base = copy.deepcopy(self.policy.base) if self.chunked_base else None
        if self._identity_obs_norm:  # no dataset statistics given: use the base's own
            self.policy.use_base_obs_statistics()
            self.policy.floor_obs_std(self.obs_std_floor)

    @property
    def chunked_base(self) -> bool:
        """Whether the base executes chunks (``Te > 1``): then base actions are recorded, not recomputed."""
        return self.policy.base is not None and int(getattr(self.policy.base, "Te", 1)) > 1

    @property
    def transition_fields(self) -> dict[str, int]:
        """Float fields the trainer stores per online transition (:class:`robotrl.data.ReplayBuffer`
        ``extra_dims``): ``{"base_action": Da}`` with a chunked base (the base action executed), else none."""
        return {"base_action": self.policy.action_dim} if self.chunked_base else {}

    def explore_extras(self) -> dict[str, np.ndarray]:
        """The :attr:`transition_fields` of the last :meth:`explore` call: ``{"base_action": raw (N, Da)}``.

        Raises:
            RuntimeError: called before :meth:`explore`.
        """
        if not self.transition_fields:
            return {}
        if self._last_base is None:
            raise RuntimeError("explore_extras() before explore(): nothing was executed yet")
        return {"base_action": self._last_base}

    def _stored_base(self, stored: torch.Tensor | None, obs: torch.Tensor,
                     images: Mapping[str, torch.Tensor] | None) -> torch.Tensor:
        """Raw base actions ``(B, Da)``: the stored executed ones (``stored (B, Da)``, NaN where unknown), the
        rest recomputed from ``obs`` (:meth:`base_actions`; a chunked base: a fresh chunk's first action)."""
        if stored is None:
            return self.base_actions(obs, images)
        stored = stored.to(obs.device)
        known = torch.isfinite(stored).all(-1)
        if bool(known.all()):
            return stored
        out = stored.clone()
        miss = torch.nonzero(~known).squeeze(-1)
        sub = None if images is None else {k: v[miss] for k, v in images.items()}
        out[miss] = self.base_actions(obs[miss], sub)
        return out
    @torch.no_grad()
    def base_actions(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Raw base actions ``(B, Da)`` recomputed for observations ``(B, Do)`` (and frames; relabelling)."""
        base = self.policy.base
        if images is None and hasattr(base, "predict_chunk"):  # stateless: first action of a fresh chunk (Te = 1)
            return base.predict_chunk(obs[:, None])[:, 0].to(obs.dtype)
        return self.policy.base_action(obs, images)

    # ------------------------------------------------------------------ actor pieces
    def _noisy_delta(self, r: torch.Tensor, std: float, clip: float | None) -> torch.Tensor:
        return noisy_scaled_residual(r, self.policy.residual_scale, std, clip, self.gen)

    def _residual(self, x: torch.Tensor, *, deterministic: bool,
                  net: torch.nn.Module | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(r (B, Da) in [-1, 1], log π(r) (B,) or None)``; ``net``: another residual network (target actor)."""
        if net is not None:
            return torch.tanh(net(x)), None
        mean, log_std = self.policy.residual_params(x)
        if self.actor == "td3" or deterministic:
            return torch.tanh(mean), None
        return squashed_gaussian(mean, log_std, torch.randn(mean.shape, generator=self.gen, device=mean.device))

    def combined_action(self, obs: torch.Tensor, *, deterministic: bool = True, base_raw: torch.Tensor | None = None,
                        z: torch.Tensor | None = None,
                        images: Mapping[str, torch.Tensor] | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised combined action ``(B, Da)`` (differentiable in the residual) and log-prob; ``z``: the
        observation features ``(B, W)`` when already computed (else :meth:`ResidualPolicy.features`)."""
        base_raw = self.base_actions(obs, images) if base_raw is None else base_raw
        z = self.policy.features(obs, images) if z is None else z
        r, logp = self._residual(self.policy.residual_input(z, base_raw), deterministic=deterministic)
        return self.policy.combine_normalized(base_raw, r), logp

    # ------------------------------------------------------------------ acting
    def _observations(self, obs, history: FrameHistory) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """``(state (N, Do), frames {key: uint8 (N, H, W, k·C)} or None)`` on the agent's device: flat
        observations, or for a camera agent the env's raw ``Dict`` observations split by the policy's
        ``state_layout``, each env's newest frames stacked by ``history``."""
        if not self.has_cameras:
            return torch.as_tensor(np.asarray(obs, np.float32), device=self.device), None
        state, frames, _ = self.policy.split_observation(obs)
        return state, history.push(frames)

    @torch.no_grad()
    def explore(self, obs) -> np.ndarray:
        """Raw exploration actions ``(N, Da)`` (module docstring: base+noise, residual noise, progressive) for
        observations ``(N, Do)``, or a camera agent's batch of raw ``Dict`` observations (frames stacked by the
        agent's exploration history, :meth:`reset_explore` at episode starts)."""
        o, images = self._observations(obs, self.explore_frames)
        self.policy.eval()
        if self.explore_base is not None:  # a chunked base executes its chunk (per-env queues)
            base_raw = self.explore_base(o).to(o.dtype)
            self._last_base = base_raw.cpu().numpy()
        else:
            base_raw = self.base_actions(o, images)
        sc = self.policy.action_scaler
        self.num_explore += 1
        if self.num_explore <= self.base_noise_steps:
            return base_plus_noise(sc, base_raw, self.base_noise_std, self.gen).cpu().numpy()
        x = self.policy.inputs(o, base_raw, images)
        r, _ = self._residual(x, deterministic=self.actor == "td3")
        if self.actor == "td3":  # noise on the scaled residual (env action units), unclipped as ResFiT's act
            delta = self._noisy_delta(r, self.explore_std, None)
        else:
            delta = self.policy.residual_scale * r
        if self.progressive_steps > 0:
            p = min((self.num_explore - self.base_noise_steps) / self.progressive_steps, 1.0)
            on = torch.rand(delta.shape[0], generator=self.gen, device=self.device) < p
            delta = delta * on[:, None]
        return self.policy.combine_delta(base_raw, delta).cpu().numpy()

    @torch.no_grad()
    def act(self, obs) -> np.ndarray:
        """Deterministic raw actions ``(N, Da)`` for observations ``(N, Do)``, or for raw ``Dict`` camera
        observations (``(Da,)`` for one; frames stacked by the policy's own history)."""
        p = self.policy.eval()
        if self.has_cameras:
            return p.act_observation(obs)
        return p(torch.as_tensor(np.asarray(obs, np.float32), device=self.device)).cpu().numpy()

    def reset_explore(self, env_ids: np.ndarray | None = None) -> None:
        """The episodes of the trainer's envs ``env_ids`` (``None``: all) start: their exploration frame stacks
        and a chunked base's exploration queues start afresh (nothing to clear for a state agent with a per-step
        base)."""
        self.explore_frames.reset(env_ids)
        if self.explore_base is not None:
            self.explore_base.reset(env_ids)

    # ------------------------------------------------------------------ update
    def _clip(self, params) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm or float("inf"))

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One critic update (and, every ``actor_delay``, actor/temperature/target updates).

        Args:
            batch: ``B`` transitions: observations ``(B, Do)``, executed (combined) actions ``(B, Da)`` raw, n-step
                ``rewards``/``discounts``; with cameras frames uint8 ``{key: (B, H, W, k·C)}`` in ``extras``.
            step: trainer step (unused).

        Returns:
            Detached ``critic_loss``, ``q_mean``, ``critic_grad_norm`` (and ``actor_loss``, ``actor_grad_norm``,
            and for SAC ``alpha``, ``alpha_loss``, ``entropy``).
        """
        dev, p = self.device, self.policy
        obs, nobs = batch.observations.to(dev), batch.next_observations.to(dev)
        images = next_images = None
        if self.target_encoder is not None:
            images = {k: v.to(dev) for k, v in batch.images().items()}
            next_images = {k: v.to(dev) for k, v in batch.next_images().items()}
            p.train()  # DrQ: random shift on the encoded frames, current and next
            self.target_encoder.train()
        a = p.action_scaler.normalize(batch.actions.to(dev)).clamp(-1.0, 1.0)  # executed (combined) action
        if self.target_encoder is None:
            o_n, no_n = p.obs_normalizer(obs), p.obs_normalizer(nobs)
        alpha = self.log_alpha.exp().detach()
        ex = batch.extras
        with torch.no_grad():
            nbase = self._stored_base(ex.get("next_base_action"), nobs, next_images)
            if self.target_encoder is not None:
                no_n = self.target_encoder(next_images, p.normalized_state(nobs))
            nx = p.residual_input(no_n, nbase)
            if self.actor == "td3":  # target actor; smoothing noise on the scaled residual
                r2, logp2 = self._residual(nx, deterministic=True, net=self.actor_target)
                delta2 = self._noisy_delta(r2, self.target_noise, self.target_noise_clip)
            else:
                r2, logp2 = self._residual(nx, deterministic=False)
                delta2 = p.residual_scale * r2
            a2 = p.action_scaler.normalize(p.combine_delta(nbase, delta2)).clamp(-1.0, 1.0)
            heads = torch.randperm(self.critic.n, generator=self.gen, device=dev)[: self.target_subset]
            nq = subset_min(self.critic_target(no_n, a2), heads)
            if logp2 is not None:
                nq = nq - alpha * logp2
            y = td_target(batch.rewards.to(dev), batch.discounts.to(dev), batch.terminated.to(dev), nq)
        if self.target_encoder is not None:
            o_n = p.features(obs, images)  # the gradient reaches the encoder through the critic's loss
        q = self.critic(o_n, a)
        c_loss = critic_td_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        c_loss.backward()
        c_gn = self._clip(self._critic_params)
        self.critic_opt.step()
        self.num_updates += 1
        out = {"critic_loss": c_loss.detach(), "q_mean": q.mean().detach(), "critic_grad_norm": c_gn.detach()}
        if self.num_updates > self.critic_warmup_updates and self.num_updates % self.actor_delay == 0:
            with torch.no_grad():
                base = self._stored_base(ex.get("base_action"), obs, images)
            out.update(self._actor_step(obs, o_n, images, base))
        polyak_update_(*self._polyak, self.tau)
        p.eval()
        return out

    def actor_loss(self, obs: torch.Tensor, z: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None,
                   base_raw: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(loss, log π or None)``: TD3 ``−mean Q(z, a_π)``, SAC ``mean(α log π − Q(z, a_π))``, ``Q`` the mean
        over heads, ``a_π = clip(a_base + α r)``. ``z (B, W)``, the observation features, is read with the
        gradient stopped (with cameras the actor never trains the shared encoder: DrQ/SERL); ``base_raw (B, Da)``:
        the base actions (the relabelling of the module doc; ``None``: recomputed)."""
        z = z.detach()
        a_pi, logp = self.combined_action(obs, deterministic=False, z=z, images=images, base_raw=base_raw)
        q_pi = self.critic(z, a_pi).mean(0)
        alpha = self.log_alpha.exp().detach()
        return (sac_actor_loss(q_pi, logp, alpha) if logp is not None else -q_pi.mean()), logp

    def _actor_step(self, obs: torch.Tensor, z: torch.Tensor, images: Mapping[str, torch.Tensor] | None,
                    base_raw: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        self.policy.train()
        loss, logp = self.actor_loss(obs, z, images, base_raw)
        keep, kept = None, {}
        if self.retention.reference is not None:
            base = self.base_actions(obs, images) if base_raw is None else base_raw
            keep, kept = self._retention_term((images, obs, base) if self.has_cameras
                                              else self.policy.residual_input(z.detach(), base))
        self.actor_opt.zero_grad(set_to_none=True)
        (loss if keep is None else loss + keep).backward()
        gn = self._clip(self.policy.residual.parameters())
        self.actor_opt.step()
        self.policy.eval()
        out = {"actor_loss": loss.detach(), "actor_grad_norm": gn.detach(), **kept}
        self.retention.tick()
        polyak_update_(self.actor_target.parameters(), self.policy.residual.parameters(), self.tau)
        if logp is not None:
            t_loss = temperature_loss(self.log_alpha, logp, self.target_entropy)
            self.alpha_opt.zero_grad(set_to_none=True)
            t_loss.backward()
            self.alpha_opt.step()
            out["alpha"] = self.log_alpha.exp().detach()
            out["alpha_loss"] = t_loss.detach()
            out["entropy"] = -logp.detach().mean()
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Residual policy (with base descriptor/weights), critics (and the target encoder), optimizers, counters,
        RNG."""
        out = {"policy_spec": self.policy.spec(), "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
               "critic_target": self.critic_target.state_dict(),
               "actor_target": self.actor_target.state_dict(), "actor_opt": self.actor_opt.state_dict(),
               "critic_opt": self.critic_opt.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
               "alpha_opt": self.alpha_opt.state_dict(), "num_updates": self.num_updates,
               "num_explore": self.num_explore, "gen": self.gen.get_state()}
        if self.target_encoder is not None:
            out["target_encoder"] = self.target_encoder.state_dict()
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()  # the frozen residual and its schedule step
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (the saved base is installed when this agent has another or none; also
        a checkpoint of the former ``PixelResidualAgent``, which had no temperature)."""
        install_saved_base(self.policy, state)
        self.policy.load_state_dict(state["policy"])
        self.explore_base = copy.deepcopy(self.policy.base) if self.chunked_base else None
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        if self.target_encoder is not None:
            self.target_encoder.load_state_dict(state["target_encoder"])
        if "actor_target" in state:  # checkpoints from before the target actor: start it at the actor
            self.actor_target.load_state_dict(state["actor_target"])
        else:
            self.actor_target.load_state_dict(self.policy.residual.state_dict())
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        if "log_alpha" in state:
            with torch.no_grad():
                self.log_alpha.copy_(state["log_alpha"])
            self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.num_updates, self.num_explore = int(state["num_updates"]), int(state["num_explore"])
        set_generator_state(self.gen, state["gen"])
        self.retention.load_state_dict(state.get("retention"), self._retention_parts())
