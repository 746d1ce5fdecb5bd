"""ReinFlow: PPO over the noisy Euler chain of a pretrained flow-matching policy.

Zhang et al. 2025, "ReinFlow: Fine-tuning Flow Matching Policy with Online Reinforcement
Learning" (ReinFlow/ReinFlow ``model/flow/ft_ppo/ppoflow.py``,
``agent/finetune/reinflow/train_ppo_flow_agent.py``). Symbols: ``T`` chunk steps per env
per iteration, ``N`` envs, ``S`` valid env steps of a rollout, ``K`` Euler steps, ``K_s`` of them
scored (the last ``noise_steps``; ``K`` by default), ``M`` minibatch of env steps, ``To``/``Do``,
``Ta``/``Te``/``Da`` as in :mod:`robotrl.agents.flow`.

Per iteration (driven by :class:`robotrl.onpolicy.OnPolicyTrainer`):

1. Rollout: each chunk is a noisy chain ``x_0 … x_K`` ``(N, K+1, Ta, Da)`` of
   :meth:`ReinFlowPolicy.sample_noisy_chain` (noise std from the learnable noise network,
   bounded in ``[σ_min, σ_max]``); ``clip(x_K, ±1)``'s first ``Te`` actions are executed.
2. Rewards scaled by the running std of the discounted return; GAE over chunk steps
   (:func:`robotrl.agents.ppo.update.gae_targets`), ``V`` on the observation history only.
3. One PPO ratio per env step: the chain's exact log-likelihood
   (:func:`~robotrl.agents.reinflow.loss.chain_log_prob`, normalised by ``(K+1)·Ta·Da`` and
   clamped to ``[logprob_min, logprob_max]``, as ReinFlow does), advantages normalised per
   minibatch, clip ``ε``; with ``per_step_ratio`` instead one ratio per (env step, scored transition),
   ``(M, K_s)``, as DPPO's per denoising step; loss ``pg − ent_coef·H + vf_coef·V-loss + bc_coef·W2``, one backward,
   actor (velocity + noise nets) and critic stepped together; early stop on approx KL.
4. After the update the noise upper bound follows ReinFlow's ``learn_decay`` schedule
   (:func:`~robotrl.agents.reinflow.loss.decayed_max_std`) when ``noise_decay_iters`` is set.

As the reference, the chain is stored and scored with its final sample clamped to the action
box, ``x_K ← clip(x_K, ±1)`` (``score_clamped_final``; ReinFlow's ``PPOFlow.get_actions`` clamps
``x_K`` to ``[act_min, act_max]`` at the last step before recording it in ``x_chain``, always; DPPO
instead stores the unclamped sample unless ``final_action_clip_value`` is set, and
:class:`~robotrl.agents.dppo.DPPOAgent` follows DPPO there): the executed action's value, so a sample
beyond the box pulls the last step's mean to the box edge, not past it where the clamped mean
has no gradient (scoring the unclamped sample, the exact density, let the share of saturated
action entries grow on FetchPush); and the learning rates follow its cosine schedule with warmup
and restarts (:func:`~robotrl.agents.reinflow.loss.warmup_cosine_lr`, per iteration; the actor's
starts after the critic warm-up). Deviations from the reference (also listed in
``configs/agent/reinflow.yaml``): the sampling std is the noise net's (ReinFlow floors it at
``min_sampling_denoising_std = σ_min``, the same thing); the critic is a plain MLP (the
reference: residual).

Logged per iteration besides PPO's statistics: ``saturated_frac`` (share of the executed chunks'
entries whose sample fell outside the action box), ``bc_drift`` (RMS distance, normalised action
units, between the deterministic chunks of the fine-tuned and the pretrained velocity nets on up
to 256 of the rollout's states from the same ``x_0``), ``explained_variance`` of the critic, and
the learning rates.

From cameras (``image_shapes``: the pretrained flow policy's cameras and encoder) the same class fine-tunes, as
DPPO does (:mod:`robotrl.agents.dppo.agent`): the rollout's histories carry the frames, the velocity, noise and
value nets condition on the policy's encoder features of each history step ``(To, F)``, computed once per
rollout; the encoder stays as pretrained (a deviation from ReinFlow's visual tasks, which fine-tune it).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import FRONTEND_ARCHITECTURE, OnPolicyAgentBase
from robotrl.agents.diffusion.agent import camera_options
from robotrl.agents.dppo.agent import rollout_condition
from robotrl.agents.flow.sampling import euler_sample
from robotrl.agents.dppo.loss import chunk_log_prob, clip_schedule
from robotrl.agents.ppo.loss import gaussian_log_prob, normalize_advantages, ppo_policy_loss, value_loss
from robotrl.agents.ppo.update import ONPOLICY_STATE, gae_targets, load_state, minibatch_epochs, save_state
from robotrl.agents.reinflow.loss import (chain_entropy, chain_log_prob, decayed_max_std, w2_bc_loss,
                                          warmup_cosine_lr)
from robotrl.agents.flow.policy import FlowPolicy
from robotrl.agents.reinflow.policy import ReinFlowPolicy
from robotrl.agents.retention import PolicyParts, Retention, RetentionConfig
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.networks import ValueNet
from robotrl.onpolicy import Rollout
from robotrl.warmstart import pretrained_policy

#: What the agent saves: the on-policy state plus the frozen pretrained velocity net (the BC reference).
_STATE = (*ONPOLICY_STATE, "ref_velocity")


class ReinFlowAgent(OnPolicyAgentBase):
    """ReinFlow fine-tuning of a flow-matching policy.

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent.
        obs_horizon, action_horizon, act_steps, denoiser, denoiser_kwargs, obs_clip, x_clip, shortcut,
            shortcut_max_steps: the flow policy (:class:`~robotrl.agents.flow.policy.FlowPolicy`; must match the
            pretrained checkpoint). A shortcut policy's chain steps call its network with ``d = 1/K``.
        flow_steps: ``K``, Euler steps of the fine-tuned chain (ReinFlow Gym: 4).
        noise_hidden, noise_act, noise_time_dim, noise_uses_x: the noise network (``[64, 64]``, tanh).
        noise_steps, early_std: the last ``K'`` steps get the noise network's std, the first ``K − K'`` a fixed
            ``early_std`` (``None``: ``σ_min``, ReinFlow's ``ft_denoising_steps``; ``0``: deterministic and
            unscored) — :class:`ReinFlowPolicy`. ``noise_steps`` ``None``: all ``K`` (the reference's configs).
        std_min, std_max: noise std bounds (0.10, 0.24).
        noise_decay_iters: iterations over which ``σ_max`` follows the ``learn_decay`` schedule
            (``None``: constant bounds); noise_hold_ratio, noise_decay_ratio: its shape (0.35, 0.7).
        eps_clip: clip of the standard-normal sampling noise (3; ``None``: off).
        logprob_min, logprob_max: clamp of the normalised chain log-prob (−1, 1).
        normalize_logprob, include_initial_logprob: :func:`chain_log_prob` options (both on).
        gamma, gae_lambda: discount (per chunk step) and GAE λ.
        clip: PPO clip ``ε`` (0.01).
        actor_lr, actor_weight_decay, critic_lr, critic_weight_decay: AdamW settings (the learning rates are the
            schedule's maxima).
        actor_lr_min, critic_lr_min: the cosine schedule's minima (2e-5, 3e-4; ``None``: constant rates);
        lr_cycle_iters, lr_warmup_iters: its cycle and linear warmup in iterations (100, 10).
        score_clamped_final: store and score the chain's final sample clamped to ``±1`` (reference; ``False``:
            the unclamped sample, its exact density).
        straight_through_clip: score the chain with straight-through clamps of its Euler means (the clamped value,
            the unclamped mean's gradient; a deviation, off by default): the reference's clamp gives an entry whose
            mean is past the bound no gradient, so an update cannot pull it back inside.
        per_step_ratio: DPPO's ratio structure instead of the reference's one per chain (a deviation, off by default):
            one PPO ratio per (env step, scored Euler transition), each transition's log-prob the mean over its
            executed ``Te×Da`` entries clamped to DPPO's ``[−5, 2]`` (:func:`robotrl.agents.dppo.loss.chunk_log_prob`),
            every ratio clipped at ``clip`` with its env step's advantage; ``x_0``'s constant factor left out.
            ``logprob_min``/``logprob_max``, ``normalize_logprob`` and ``include_initial_logprob`` then shape only
            the logged entropy, not the ratio. Minibatches still draw env steps (each with its ``K_s`` transitions),
            where DPPO draws (env step, denoising step) pairs independently: the same loss in expectation.
        clip_base, clip_rate: with ``per_step_ratio``, DPPO's clip schedule over the ``K_s`` scored transitions
            (:func:`robotrl.agents.dppo.loss.clip_schedule`: ``clip_base`` on the first, growing at ``clip_rate`` to
            ``clip`` on the last; a deviation, ``None``: ``clip`` on every transition).
        noise_lr: the noise network's learning rate in its own AdamW group, following the actor's schedule scaled
            by ``noise_lr / actor_lr`` (a deviation; ``None``: the actor's rate, as the reference).
        critic_hidden, critic_act: value net.
        n_epochs, batch_size: epochs and minibatch size in env steps.
        repeat_samples: each env step appears this many times per epoch (ReinFlow's ``repeat_samples``
            with its multiplier 10, matching DPPO's number of minibatches); 1: plain PPO epochs. The copies of a
            step in one minibatch go through the networks once (:meth:`minibatch_loss`).
        target_kl: early stop of the epochs on approx KL (``None``: off).
        vf_coef, ent_coef, bc_coef: loss weights (0.5, 0.03, 0).
        max_grad_norm: gradient clip of actor and critic (``None``: off).
        critic_warmup_iters: iterations that train the critic only.
        reward_scaling: running return-std reward scaling.
        device, seed: torch device; seed of the chain noise and minibatch order.
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad,
            frame_stack, state_layout: the observation spec's cameras and their encoder
            (:class:`~robotrl.vision.frontend.ObservationFrontend`; must match the pretrained checkpoint;
            ``image_shapes=None``: a state agent).
        retention: knowledge retention online (:mod:`robotrl.agents.retention`), ReinFlow's form: only the ``kl``
            term on the rollout's states (``kl_states="online"``; :meth:`_retention_term`): for every (env step,
            scored Euler transition) pair of a minibatch, ``KL(N(μ₀, σ₀²) ‖ N(μθ, σθ²))`` of that transition between
            the chain frozen at :meth:`start_online` and the live one (``penalty="l2"``: ``‖μθ − μ₀‖²``), averaged
            over the pairs and added to the PPO loss. ``None``: off (the updates unchanged).

    Raises:
        ConfigError: ``repeat_samples < 1``, ``flow_steps < 1``, ``clip_base`` without ``per_step_ratio``, a
            ``noise_lr`` that is not positive, bad flow/noise settings, a retention term that reads the pretraining
            data (bc, replay, kl_states=offline: not built for flow chains), or a bad retention setting.
        ValueError: a learning-rate cycle that :func:`~robotrl.agents.reinflow.loss.warmup_cosine_lr` refuses
            (``lr_cycle_iters < 1`` or ``lr_warmup_iters`` not below it).
    """

    ARCHITECTURE_KEYS = ("obs_horizon", "action_horizon", "act_steps", "denoiser", "denoiser_kwargs", "obs_clip",
                         "shortcut", "shortcut_max_steps", "critic_hidden", "critic_act", *FRONTEND_ARCHITECTURE)

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 flow_steps: int = 4, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 obs_clip: float | None = 10.0, x_clip: float | None = 1.0, shortcut: bool = False,
                 shortcut_max_steps: int = 128, noise_hidden=(64, 64),
                 noise_act: str = "tanh", noise_time_dim: int = 16, noise_uses_x: bool = False,
                 noise_steps: int | None = None, early_std: float | None = None,
                 std_min: float = 0.10, std_max: float = 0.24, noise_decay_iters: int | None = None,
                 noise_hold_ratio: float = 0.35, noise_decay_ratio: float = 0.7, eps_clip: float | None = 3.0,
                 logprob_min: float = -1.0, logprob_max: float = 1.0, normalize_logprob: bool = True,
                 include_initial_logprob: bool = True, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip: float = 0.01, actor_lr: float = 4.5e-5, actor_weight_decay: float = 0.0,
                 critic_lr: float = 6.5e-4, critic_weight_decay: float = 1e-5, actor_lr_min: float | None = 2e-5,
                 critic_lr_min: float | None = 3e-4, lr_cycle_iters: int = 100, lr_warmup_iters: int = 10,
                 score_clamped_final: bool = True, straight_through_clip: bool = False, per_step_ratio: bool = False,
                 clip_base: float | None = None, clip_rate: float = 3.0, noise_lr: float | None = None,
                 critic_hidden=(256, 256, 256),
                 critic_act: str = "mish", n_epochs: int = 5, batch_size: int = 50_000, repeat_samples: int = 10,
                 target_kl: float | None = 1.0, vf_coef: float = 0.5, ent_coef: float = 0.03, bc_coef: float = 0.0,
                 max_grad_norm: float | None = None, critic_warmup_iters: int = 0, reward_scaling: bool = True,
                 device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq",
                 pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 frame_stack: int = 1, state_layout: str | None = None,
                 retention: RetentionConfig | Mapping | None = None):
        if flow_steps < 1:
            raise ConfigError(f"agent.model.flow_steps must be >= 1, got {flow_steps}")
        if repeat_samples < 1:
            raise ConfigError(f"agent.model.repeat_samples must be >= 1, got {repeat_samples}")
        if clip_base is not None and not per_step_ratio:
            raise ConfigError("agent.model.clip_base schedules the clip over the Euler transitions, which needs "
                              "agent.model.per_step_ratio=true (or leave clip_base=null)")
        if noise_lr is not None and noise_lr <= 0:
            raise ConfigError(f"agent.model.noise_lr must be > 0 (or null: the actor's rate), got {noise_lr}")
        self.device = torch.device(device)
        self.policy = ReinFlowPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                     act_steps=act_steps, flow_steps=flow_steps, denoiser=denoiser,
                                     denoiser_kwargs=denoiser_kwargs, obs_clip=obs_clip, x_clip=x_clip,
                                     shortcut=shortcut, shortcut_max_steps=shortcut_max_steps, noise_hidden=noise_hidden, noise_act=noise_act, noise_time_dim=noise_time_dim,
                                     std_min=std_min, std_max=std_max, noise_uses_x=noise_uses_x,
                                     noise_steps=noise_steps, early_std=early_std,
                                     **camera_options(image_shapes=image_shapes, encoder=encoder, pooling=pooling,
                                                      feature_dim=feature_dim, channels=channels,
                                                      encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                                                      augment_pad=augment_pad, frame_stack=frame_stack,
                                                      state_layout=state_layout))
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.frame_stack = 1
        self.ref_velocity = copy.deepcopy(self.policy.velocity).requires_grad_(False)
        self.critic = ValueNet(obs_horizon * self.policy.out_dim, critic_hidden, critic_act).to(self.device)
        self.actor_opt = torch.optim.AdamW(self._actor_groups(noise_lr, actor_lr), lr=actor_lr,
                                           weight_decay=actor_weight_decay)
        self.critic_opt = torch.optim.AdamW(self.critic.parameters(), lr=critic_lr, weight_decay=critic_weight_decay)
        self.std_min, self.std_max = float(std_min), float(std_max)
        self.noise_decay_iters = None if noise_decay_iters is None else int(noise_decay_iters)
        self.noise_hold_ratio, self.noise_decay_ratio = float(noise_hold_ratio), float(noise_decay_ratio)
        self.eps_clip = None if eps_clip is None else float(eps_clip)
        self.logprob_clamp = (float(logprob_min), float(logprob_max))
        self.normalize_logprob, self.include_initial_logprob = bool(normalize_logprob), bool(include_initial_logprob)
        self.gamma, self.gae_lambda, self.clip = float(gamma), float(gae_lambda), float(clip)
        self.n_epochs, self.batch_size, self.repeat_samples = int(n_epochs), int(batch_size), int(repeat_samples)
        self.target_kl = target_kl
        self.vf_coef, self.ent_coef, self.bc_coef = float(vf_coef), float(ent_coef), float(bc_coef)
        self.max_grad_norm, self.critic_warmup_iters = max_grad_norm, int(critic_warmup_iters)
        self.reward_scaling = bool(reward_scaling)
        self.lr = {"actor": (float(actor_lr), actor_lr_min), "critic": (float(critic_lr), critic_lr_min)}
        self.lr_cycle_iters, self.lr_warmup_iters = int(lr_cycle_iters), int(lr_warmup_iters)
        warmup_cosine_lr(0, actor_lr, actor_lr_min, self.lr_cycle_iters, self.lr_warmup_iters)  # checks the cycle
        self.score_clamped_final = bool(score_clamped_final)
        self.policy.straight_through_clip = bool(straight_through_clip)
        self.per_step_ratio = bool(per_step_ratio)
        self.clip_base, self.clip_rate = (None if clip_base is None else float(clip_base)), float(clip_rate)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.retention = Retention(retention, squash=False)
        if self.retention.cfg.reads_data:
            raise ConfigError("agent.model.retention for ReinFlow is the kl term on the rollouts' states "
                              "(kl_states=online); bc, replay and kl_states=offline are not built for flow chains")

    # ------------------------------------------------------------------ knowledge retention
    def _retention_parts(self) -> PolicyParts:
        """What defines the chain's transitions ``x_k → x_{k+1} ~ N(μ_k, σ_k²)``, the parts retention freezes: the
        velocity net (the mean ``μ_k = clip(x_k + v_θ(x_k, t_k, s)/K)``) and the noise net (``σ_k``); shared with
        the policy (the snapshot is a copy). Not the encoder of a camera policy: it never trains here (the
        conditions are its features, computed once per rollout), so both chains read the same conditions; not the
        flow settings (``K``, ``x_clip``, ``noise_steps``, ``early_std``): the policy's own, fixed per run."""
        return PolicyParts(velocity=self.policy.velocity, noise_net=self.policy.noise_net)

    def start_online(self) -> None:
        """Freeze the velocity and noise nets as fine-tuning starts (π₀ of knowledge retention; kept on resume)."""
        self.retention.start(self._retention_parts())

    def _retention_term(self, cond: torch.Tensor, chain: torch.Tensor,
                        index: torch.Tensor | None = None) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """The retention KL of a minibatch's recorded chains (``None`` when off or before the online start).

        For every env step and each of its ``K_s`` scored transitions, the KL between the snapshot's and the live
        policy's Gaussian ``N(μ_k, diag σ_k²)`` of ``x_{k+1}`` given the recorded ``x_k`` (closed form, summed over
        ``Ta×Da``; ``penalty="l2"``: ``‖μθ − μ₀‖²``), averaged over the ``M·K_s`` pairs: DPPO's per-step form, whose
        sum over the ``K_s`` steps is the KL of the two chains' path distributions given the recorded prefix.
        The snapshot's noise net reads the live bounds ``[σ_min, σ_max]`` (the ``learn_decay`` schedule lowers
        ``σ_max`` on both alike: a schedule, not something the policy learned, so it is not penalised).

        Args:
            cond: conditions ``(U, To, F)`` of the distinct env steps; chain: their chains ``(U, K+1, Ta, Da)``.
            index: ``(M,)`` the minibatch's rows as indices into the ``U`` distinct ones (repeats allowed; ``None``:
                the ``U`` rows themselves).
        """
        ref = self.retention.reference
        if ref is None:
            return None, {}
        p = self.policy
        with torch.no_grad():
            ref.noise_net.set_bounds(float(p.noise_net.std_min), float(p.noise_net.std_max))

        def gaussian(net, c):
            mean, std = p.transitions(c, chain, velocity=net.velocity, noise_net=net.noise_net)
            return mean.flatten(2).flatten(0, 1), std.flatten(2).flatten(0, 1)  # (U·K_s, Ta·Da)

        Ks = p.K - p.scored_from
        rows = None if index is None else (index[:, None] * Ks + torch.arange(Ks, device=index.device)).flatten()
        return self.retention.actor_loss(self._retention_parts(), gaussian=gaussian, states=cond,
                                         batch_size=cond.shape[0], index=rows)

    def _actor_groups(self, noise_lr: float | None, actor_lr: float) -> list[dict]:
        """The actor optimiser's parameter groups: one (the reference), or with ``noise_lr`` the velocity net and
        the noise net apart, the latter's rate scaled by ``noise_lr / actor_lr`` (``lr_scale``). A camera
        policy's encoder is in neither (it stays as pretrained)."""
        actor = [q for n, q in self.policy.named_parameters() if not n.startswith("encoder.")]
        if noise_lr is None:
            return [{"params": actor}]
        noise = list(self.policy.noise_net.parameters())
        ids = {id(q) for q in noise}
        return [{"params": [q for q in actor if id(q) not in ids], "lr_scale": 1.0},
                {"params": noise, "lr": float(noise_lr), "lr_scale": float(noise_lr) / float(actor_lr)}]

    # ------------------------------------------------------------------ warm start
    def load_pretrained(self, path: str) -> None:
        """Initialise from a flow-BC checkpoint (EMA velocity net → fine-tuned policy and frozen
        BC reference, normalisers; the noise net starts fresh) or resume from a ReinFlow checkpoint.

        Raises:
            CheckpointError: another policy class, or a flow network that does not match the config.
        """
        kind, state = pretrained_policy(path, self.device, own=".ReinFlowPolicy", base=FlowPolicy,
                                        spec=self.policy.spec(),
                                        what="ReinFlow fine-tunes a flow-policy checkpoint (agent=flow)")
        if kind == "own":
            self.load_state_dict(state["agent"])
            self.retention.reset()  # a new run: retention freezes the loaded chain at start_online
            return
        sd = {k: v for k, v in state.items() if not k.startswith("noise_net.")}
        missing, unexpected = self.policy.load_state_dict(sd, strict=False)
        if unexpected or any(not k.startswith("noise_net.") for k in missing):
            raise CheckpointError(f"{path}: flow weights do not fit (missing {missing}, unexpected {unexpected})")
        self.ref_velocity.load_state_dict(self.policy.velocity.state_dict())

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def rollout_act(self, obs_hist: np.ndarray | Mapping) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Exploratory chunks for histories ``(N, To, Do)`` (a camera env's: its ``Dict`` of ``(N, To, ...)``
        histories): raw actions ``(N, Te, Da)`` (``(N, Da)`` if ``Te = 1``) and ``{"chains": (N, K+1, Ta, Da)}``."""
        p = self.policy
        cond = p.condition(*p.history_inputs(obs_hist))
        chain = p.sample_noisy_chain(cond, eps_clip=self.eps_clip, generator=self.gen)
        executed = chain[:, -1, : p.Te]
        saturated = (executed.abs() >= 1.0).float().mean(dim=(1, 2))  # (N,) share of entries outside the box
        if self.score_clamped_final:
            chain[:, -1] = chain[:, -1].clamp(-1.0, 1.0)
        a = p.action_scaler.unnormalize(executed.clamp(-1.0, 1.0)).cpu().numpy()
        return (a[:, 0] if p.Te == 1 else a), {"chains": chain, "saturated": saturated}

    # ------------------------------------------------------------------ chain likelihood
    def log_prob(self, cond: torch.Tensor, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Clamped chain log-probs ``(M,)`` (per transition ``(M, K_s)`` with ``per_step_ratio``) and entropies ``(M,)``
        under the current policy.

        Args:
            cond: normalised histories ``(M, To, Do)``; chain: ``(M, K+1, Ta, Da)``.
        """
        mean, std = self.policy.transitions(cond, chain)
        kw = dict(include_initial=self.include_initial_logprob, normalize=self.normalize_logprob)
        if self.per_step_ratio:
            return self._step_log_probs(chain, mean, std), chain_entropy(std, **kw)
        return chain_log_prob(chain, mean, std, **kw).clamp(*self.logprob_clamp), chain_entropy(std, **kw)

    def _step_log_probs(self, chain: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """Per-transition log-probs ``(M, K_s)`` of ``per_step_ratio``: each scored transition's entry-wise
        log-likelihood clamped and averaged over the executed ``Te×Da`` entries (DPPO's ``chunk_log_prob``)."""
        nxt = chain[:, chain.shape[1] - mean.shape[1]:]
        lp = gaussian_log_prob(nxt, mean, std)  # (M, K_s, Ta, Da)
        M, Ks = lp.shape[:2]
        return chunk_log_prob(lp.flatten(0, 1), self.policy.Te).view(M, Ks)

    # ------------------------------------------------------------------ update
    def _prepare(self, ro: Rollout) -> dict[str, torch.Tensor]:
        """Flatten the valid steps: cond ``(S, To, F)`` (``F = Do`` without cameras), chains ``(S, K+1, Ta, Da)``,
        adv/ret ``(S,)``, logp ``(S,)`` (``(S, K_s)`` with ``per_step_ratio``)."""
        dev = self.device
        with torch.no_grad():
            cond, ncond = rollout_condition(self.policy, ro.observations), rollout_condition(self.policy, ro.next_observations)
            v, nv = self.critic(cond), self.critic(ncond)
        adv, ret, keep = gae_targets(ro, v, nv, gamma=self.gamma, lam=self.gae_lambda, device=dev)
        d = {"cond": cond[keep], "chains": ro.extras["chains"].to(dev).flatten(0, 1)[keep], "adv": adv[keep],
             "ret": ret[keep], "v": v.reshape(-1)[keep]}
        if "saturated" in ro.extras:
            d["saturated"] = ro.extras["saturated"].to(dev).flatten(0, 1)[keep]
        with torch.no_grad():
            d["logp"] = torch.cat([self.log_prob(c, x)[0] for c, x in zip(d["cond"].split(4096), d["chains"].split(4096))])
        return d

    def minibatch_loss(self, d: dict, s: torch.Tensor, train_actor: bool, *,
                       dedup: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The PPO loss of one minibatch of env steps ``s (M,)`` (indices into ``d``'s ``S`` steps, repeats allowed).

        ``repeat_samples`` puts each env step into an epoch several times, and a recorded chain's log-prob,
        entropy and value are the same every time. With ``dedup`` the networks run once per distinct step and
        the results are gathered back to ``(M,)``, so every term (advantage normalisation, means, the
        gradient, which sums over the copies) is the one of the duplicated batch at the cost of the distinct
        steps: the same update in up to ``repeat_samples``× less compute (exact up to float summation order;
        ReinFlow's reference runs the copies through the networks).

        Shapes: log-probs, old log-probs and advantages ``(M,)``, or ``(M, K_s)`` with ``per_step_ratio`` (each env
        step's advantage repeated over its transitions); entropy ``(M,)``. The W2 term (``bc_coef > 0``) starts both
        velocity nets from the stored ``x_0`` (ReinFlow: from ``z = 0``), so it compares the chunks the rollout
        actually began from.

        Returns:
            ``(loss, metrics)`` — ``vf_coef·V-loss`` plus, when ``train_actor``, ``pg − ent_coef·H (+ bc_coef·W2)``
            (+ the retention term, :meth:`_retention_term`, with its ``retention_*`` metrics).
        """
        if dedup:
            u, inv = torch.unique(s, return_inverse=True)
        else:
            u, inv = s, torch.arange(len(s), device=s.device)
        cond = d["cond"][u]
        vl = value_loss(self.critic(cond)[inv], d["ret"][s])
        out = {"value_loss": vl.detach()}
        loss = self.vf_coef * vl
        if train_actor:
            chain = d["chains"][u]
            logp, ent = (x[inv] for x in self.log_prob(cond, chain))
            adv = normalize_advantages(d["adv"][s])
            if self.per_step_ratio:  # (M, K_s) ratios, each with its env step's advantage
                adv = adv[:, None].expand_as(logp)
            pl, info = ppo_policy_loss(logp.flatten(), d["logp"][s].flatten(), adv.flatten(), self._clip(logp))
            loss = loss + pl - self.ent_coef * ent.mean()
            out.update(policy_loss=pl.detach(), entropy=ent.mean().detach(), **info)
            if self.bc_coef > 0:
                x0 = chain[:, 0]
                with torch.no_grad():
                    ref = euler_sample(self.ref_velocity, cond, x0, self.policy.K, x_clip=self.policy.x_clip)
                own = euler_sample(self.policy.velocity, cond, x0, self.policy.K, x_clip=self.policy.x_clip)
                bc = w2_bc_loss(own[inv], ref[inv])
                loss = loss + self.bc_coef * bc
                out["bc_loss"] = bc.detach()
            keep, kept = self._retention_term(cond, chain, inv)
            if keep is not None:
                loss = loss + keep
                out.update(kept)
        return loss, out

    def _clip(self, logp: torch.Tensor) -> torch.Tensor | float:
        """PPO clip for log-probs ``(M,)`` or ``(M, K_s)``: ``clip``, or with ``clip_base`` DPPO's schedule over the
        ``K_s`` transitions, flattened like ``logp``."""
        if self.clip_base is None:
            return self.clip
        eps = clip_schedule(logp.shape[1], self.clip, self.clip_base, self.clip_rate).to(logp)
        return eps[None, :].expand_as(logp).flatten()

    def _minibatch(self, d: dict, idx: torch.Tensor, train_actor: bool) -> dict[str, torch.Tensor]:
        loss, out = self.minibatch_loss(d, idx % d["cond"].shape[0], train_actor)
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            torch.nn.utils.clip_grad_norm_(self.critic.parameters(), self.max_grad_norm)
        self.critic_opt.step()
        if train_actor:
            self.actor_opt.step()
        return out

    def set_learning_rates(self, iteration: int) -> dict[str, float]:
        """Set both optimisers' rates for ``iteration`` (:func:`warmup_cosine_lr`; the actor's schedule counts
        from the end of the critic warm-up, as the reference steps it); returns ``{"actor_lr", "critic_lr"}``."""
        steps = {"actor": iteration - self.critic_warmup_iters, "critic": iteration}
        out = {}
        for name, opt in (("actor", self.actor_opt), ("critic", self.critic_opt)):
            lr = warmup_cosine_lr(steps[name], *self.lr[name], self.lr_cycle_iters, self.lr_warmup_iters)
            for g in opt.param_groups:
                g["lr"] = lr * g.get("lr_scale", 1.0)
            out[f"{name}_lr"] = lr
        return out

    @torch.no_grad()
    def bc_drift(self, cond: torch.Tensor) -> float:
        """RMS distance (normalised action units) between the deterministic chunks of the fine-tuned and the
        pretrained velocity nets on ``cond (M, To, Do)``, both from the same ``x_0`` (a fixed-seed draw)."""
        p = self.policy
        x0 = torch.randn((cond.shape[0], p.Ta, p.action_dim), generator=torch.Generator().manual_seed(0)).to(cond)
        own = euler_sample(p.velocity, cond, x0, p.K, x_clip=p.x_clip).clamp(-1, 1)
        ref = euler_sample(self.ref_velocity, cond, x0, p.K, x_clip=p.x_clip).clamp(-1, 1)
        return float((own - ref).pow(2).mean().sqrt())

    def update_rollout(self, ro: Rollout, iteration: int) -> dict[str, float]:
        """PPO epochs over the rollout's env steps (the critic only during the first ``critic_warmup_iters``
        iterations); then the next iteration's noise bounds.

        Args:
            ro: the iteration's rollout (``T`` chunk steps × ``N`` envs, chains ``(T, N, K+1, Ta, Da)`` in its extras).
            iteration: 0-based iteration, for the learning-rate and noise schedules and the critic warm-up.

        Returns:
            Mean metrics over the minibatches (losses, approx KL, clip fraction, entropy, noise std,
            ``saturated_frac``, ``bc_drift``, ``explained_variance``, learning rates).
        """
        d = self._prepare(ro)
        train_actor = iteration >= self.critic_warmup_iters
        lrs = self.set_learning_rates(iteration)
        S = d["cond"].shape[0]
        with torch.no_grad():
            noise_std = float(self.policy.transitions(d["cond"][:256], d["chains"][:256])[1].mean())
            ret_var = d["ret"].var()
            explained = float(1 - (d["ret"] - d["v"]).var() / ret_var) if S > 1 and ret_var > 0 else float("nan")
        out = minibatch_epochs(S * self.repeat_samples, lambda idx: self._minibatch(d, idx, train_actor),
                               n_epochs=self.n_epochs, batch_size=self.batch_size, target_kl=self.target_kl,
                               generator=self.gen, device=self.device)
        self.retention.tick()
        hi = decayed_max_std(iteration + 1, self.noise_decay_iters, self.std_min, self.std_max,
                             hold_ratio=self.noise_hold_ratio, decay_ratio=self.noise_decay_ratio)
        self.policy.noise_net.set_bounds(self.std_min, max(hi, self.std_min))
        diag = {"bc_drift": self.bc_drift(d["cond"][:256]), "explained_variance": explained}
        if "saturated" in d:
            diag["saturated_frac"] = float(d["saturated"].mean())
        return {**out, **lrs, **diag, "noise_std": noise_std, "noise_std_max": hi}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Policy (velocity + noise nets), frozen reference, value net, optimizers, RNG; with knowledge retention
        on, also its frozen snapshot and schedule step (``retention``)."""
        out = save_state(self, _STATE)
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`.

        Raises:
            KeyError: ``state`` lacks one of the saved parts; RuntimeError / ValueError: a part that does not
                fit this agent's networks (torch's own errors).
        """
        load_state(self, state, _STATE)
        self.retention.load_state_dict(state.get("retention"), self._retention_parts())
