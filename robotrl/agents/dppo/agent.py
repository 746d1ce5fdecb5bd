"""DPPO: PPO over the denoising MDP of a pretrained diffusion policy.

Ren et al. 2024, "Diffusion Policy Policy Optimization" (irom-princeton/dppo
``agent/finetune/train_ppo_diffusion_agent.py``, ``model/diffusion/diffusion_ppo.py``).
Symbols: ``T`` chunk steps per env per iteration, ``N`` envs, ``S`` valid env steps of a
rollout, ``K`` denoising steps, ``n`` chain length (``K`` for DDPM, ``ddim_steps`` for
DDIM), ``K'`` fine-tuned steps, ``M`` minibatch of (env step, denoising step) pairs,
``To``/``Do``, ``Ta``/``Te``/``Da`` as in :mod:`robotrl.agents.diffusion`.

Per iteration (driven by :class:`robotrl.onpolicy.OnPolicyTrainer`):

1. Rollout: each chunk is sampled with σ = max(σ_k, ``min_sampling_std``), noise clipped
   to ±``eps_clip``, noise at the last step too (DDIM: η = 1); the last ``K'+1`` latents
   ``(N, K'+1, Ta, Da)`` are stored; the first ``Te`` actions are executed (clamped to the
   action box), rewards summed. The stored final sample is the one DPPO stores: unclamped with
   ``final_action_clip_value=None`` (DPPO's default, and what its Gym, Robomimic and Furniture
   fine-tuning configs use: ``VPGDiffusion.forward`` appends ``x`` to the chain after a clamp that
   only runs when the value is set), clamped to ``±final_action_clip_value`` otherwise, so the
   log-probs score exactly what was stored. ReinFlow's reference always clamps its last step and
   scores the clamped sample (:mod:`robotrl.agents.reinflow.agent`, ``score_clamped_final``).
2. Rewards scaled by the running std of the discounted return; GAE over chunk steps
   bootstrapping unless terminated (:func:`robotrl.onpolicy.compute_gae`); ``V(s)`` on
   the observation history only.
3. Old log-probs of every pair with σ = max(σ_k, ``min_logprob_std``), element-wise
   clamped to ``[-5, 2]``, averaged over the executed ``Te×Da`` entries.
4. Epochs of minibatches over ``S·K'`` pairs: advantages normalised per minibatch, then
   multiplied by ``γ_denoise^(K'−1−i)``; clip ``ε_i`` from :func:`clip_schedule`;
   value loss ``0.5·MSE``; actor frozen for ``critic_warmup_iters`` iterations; early
   stop when approx KL > ``target_kl``.

From cameras (``image_shapes``: the pretrained diffusion policy's cameras and encoder) the same class fine-tunes:
the rollout's histories carry the frames (:class:`robotrl.onpolicy.RolloutCollector` on a camera env's ``Dict``
observations), the denoisers and the value net condition on the policy's encoder features of each history step
``(To, F)``, computed once per rollout. The encoder stays as pretrained (only ``denoiser_ft`` and the value net
learn; a deviation from DPPO's image tasks, whose ViT encoder is fine-tuned with the actor and whose critic has
its own encoder).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from robotrl.agent import FRONTEND_ARCHITECTURE, OnPolicyAgentBase
from robotrl.agents.diffusion.agent import camera_options
from robotrl.agents.diffusion.sampling import chain_timesteps, sample_chain, step_mean_std
from robotrl.agents.dppo.loss import chunk_log_prob, clip_schedule, denoising_discount
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.dppo.policy import DPPOPolicy
from robotrl.agents.ppo.loss import gaussian_log_prob, normalize_advantages, ppo_policy_loss, value_loss
from robotrl.agents.ppo.update import gae_targets, load_state, minibatch_epochs, save_state
from robotrl.agents.retention import Retention, RetentionConfig

from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.networks import ValueNet
from robotrl.onpolicy import Rollout
from robotrl.warmstart import pretrained_policy



class DPPOAgent(OnPolicyAgentBase):
    """Diffusion Policy Policy Optimization.

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent.
        obs_horizon, action_horizon, act_steps, denoising_steps, denoiser, denoiser_kwargs,
            obs_clip, x0_clip: the diffusion policy (must match the pretrained checkpoint).
        ft_denoising_steps: ``K'``.
        use_ddim, ddim_steps: fine-tune a DDIM chain (η = 1 while fine-tuning, 0 in evaluation).
        min_sampling_std, min_logprob_std: exploration / log-prob std floors (0.1, 0.1).
        eps_clip: clip of the sampling noise (3).
        final_action_clip_value: clamp of the final rollout sample before it is stored and scored (DPPO's
            ``final_action_clip_value``; ``None``, the reference default: store and score the unclamped sample).
        logprob_min, logprob_max: element-wise log-prob clamp (−5, 2).
        gamma, gae_lambda, gamma_denoising: discounts (per chunk step) and GAE λ.
        clip, clip_base, clip_rate: clip schedule (ε of the final step, ε_base, growth rate 3).
        actor_lr, critic_lr, critic_hidden, critic_act: optimisers and value net.
        n_epochs, batch_size: epochs and minibatch size in pairs ``M`` (``max(1, ⌊pairs/M⌋)`` minibatches
            per epoch, the remainder of the shuffled pairs skipped, as DPPO does).
        target_kl: early-stop threshold on approx KL (``None``: off).
        vf_coef, max_grad_norm, critic_warmup_iters, reward_scaling: as named.
        device, seed: torch device; seed of sampling noise and minibatch order.
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad,
            frame_stack, state_layout: the observation spec's cameras and their encoder
            (:class:`~robotrl.vision.frontend.ObservationFrontend`; must match the pretrained checkpoint;
            ``image_shapes=None``: a state agent).
        retention: knowledge retention online (:mod:`robotrl.agents.retention`), DPPO's form: only the ``kl`` term
            on the rollout's states (``kl_states="online"``): for every (env step, denoising step) pair of a
            minibatch, ``KL(N(μ₀, σ²) ‖ N(μθ, σ²))`` of that reverse step between the fine-tuned denoiser frozen at
            :meth:`start_online` and the live one (the same floored σ: ``‖μθ − μ₀‖² / 2σ²`` summed over
            ``Ta×Da``; ``penalty="l2"``: ``‖μθ − μ₀‖²``), added to the PPO loss. The sum over the ``K'`` steps is
            the KL of the two chains' path distributions, the exact KL a diffusion policy allows. ``None``: off.

    Raises:
        ConfigError: a retention term that reads the pretraining data (bc, replay, kl_states=offline: not built
            for diffusion chains), or a bad retention setting.
    """

    ARCHITECTURE_KEYS = ("obs_horizon", "action_horizon", "act_steps", "denoising_steps", "denoiser",
                         "denoiser_kwargs", "obs_clip", "critic_hidden", "critic_act", *FRONTEND_ARCHITECTURE)

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 denoising_steps: int = 20, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 obs_clip: float | None = 10.0, x0_clip: float | None = 1.0, ft_denoising_steps: int = 10,
                 use_ddim: bool = False, ddim_steps: int = 10, min_sampling_std: float = 0.1,
                 min_logprob_std: float = 0.1, eps_clip: float = 3.0, final_action_clip_value: float | None = None,
                 logprob_min: float = -5.0,
                 logprob_max: float = 2.0, gamma: float = 0.99, gae_lambda: float = 0.95,
                 gamma_denoising: float = 0.99, clip: float = 0.01, clip_base: float = 0.001, clip_rate: float = 3.0,
                 actor_lr: float = 1e-4, critic_lr: float = 1e-3, critic_hidden=(256, 256, 256),
                 critic_act: str = "mish", n_epochs: int = 5, batch_size: int = 50_000,
                 target_kl: float | None = 1.0, vf_coef: float = 0.5, max_grad_norm: float | None = None,
                 critic_warmup_iters: int = 0, reward_scaling: bool = True,
                 device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq",
                 pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 frame_stack: int = 1, state_layout: str | None = None, retention: RetentionConfig | Mapping | None = None):
        self.device = torch.device(device)
        self.sampler = "ddim" if use_ddim else "ddpm"
        cameras = camera_options(image_shapes=image_shapes, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                                 channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                                 augment_pad=augment_pad, frame_stack=frame_stack, state_layout=state_layout)
        self.policy = DPPOPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                 act_steps=act_steps, denoising_steps=denoising_steps, denoiser=denoiser,
                                 denoiser_kwargs=denoiser_kwargs, sampler=self.sampler, ddim_steps=ddim_steps,
                                 obs_clip=obs_clip, x0_clip=x0_clip, eps_clip=eps_clip,
                                 ft_denoising_steps=ft_denoising_steps, **cameras)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.frame_stack = 1
        self.critic = ValueNet(obs_horizon * self.policy.out_dim, critic_hidden, critic_act).to(self.device)
        self.actor_opt = torch.optim.Adam(self.policy.denoiser_ft.parameters(), lr=actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self.Kp = self.policy.ft_steps
        ks, ks_prev = chain_timesteps(denoising_steps, self.sampler, ddim_steps)
        n = len(ks)
        self.ft_k, self.ft_k_prev = ks[n - self.Kp:].to(self.device), ks_prev[n - self.Kp:].to(self.device)
        self.clip_i = clip_schedule(self.Kp, clip, clip_base, clip_rate).to(self.device)
        self.discount_i = denoising_discount(self.Kp, gamma_denoising).to(self.device)
        self.min_sampling_std, self.min_logprob_std = float(min_sampling_std), float(min_logprob_std)
        self.final_clip = None if final_action_clip_value is None else float(final_action_clip_value)
        self.logprob_clamp = (float(logprob_min), float(logprob_max))
        self.gamma, self.gae_lambda = float(gamma), float(gae_lambda)
        self.n_epochs, self.batch_size, self.target_kl = int(n_epochs), int(batch_size), target_kl
        self.vf_coef, self.max_grad_norm = float(vf_coef), max_grad_norm
        self.critic_warmup_iters, self.reward_scaling = int(critic_warmup_iters), bool(reward_scaling)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.retention = Retention(retention, squash=False)
        if self.retention.cfg.reads_data:
            raise ConfigError("agent.model.retention for DPPO is the kl term on the rollouts' states "
                              "(kl_states=online); bc, replay and kl_states=offline are not built for diffusion chains")

    # ------------------------------------------------------------------ knowledge retention
    def start_online(self) -> None:
        """Freeze the fine-tuned denoiser as it starts (π₀ of knowledge retention; kept on resume)."""
        self.retention.start(self.policy.denoiser_ft)

    def _retention_term(self, cond: torch.Tensor, x_prev: torch.Tensor,
                        i: torch.Tensor) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """The retention KL of the minibatch's pairs: conditions ``(M, To, F)``, ``x_prev (M, Ta, Da)``, steps ``i (M,)``."""
        if self.retention.reference is None:
            return None, {}
        p = self

        def gaussian(net, _cond):
            mean, std = step_mean_std(p.policy.schedule, net, x_prev, p.ft_k[i], p.ft_k_prev[i], cond, p.sampler, 1.0)
            return mean.flatten(1), std.clamp(min=p.min_logprob_std).expand_as(mean).flatten(1)

        return self.retention.actor_loss(self.policy.denoiser_ft, gaussian=gaussian, states=cond,
                                         batch_size=cond.shape[0])

    # ------------------------------------------------------------------ warm start
    def load_pretrained(self, path: str) -> None:
        """Initialise from a diffusion-BC checkpoint (EMA denoiser → frozen and fine-tuned copies,
        normalisers) or resume from a DPPO checkpoint (whole agent).

        Raises:
            CheckpointError: another policy class, an architecture that does not match, or a checkpoint
                that leaves weights of the policy unloaded (named) or holds weights it does not have.
        """
        kind, state = pretrained_policy(path, self.device, own="DPPOPolicy", base=DiffusionPolicy,
                                        spec=self.policy.spec(),
                                        what="DPPO fine-tunes a diffusion-policy checkpoint")
        if kind == "own":
            self.load_state_dict(state["agent"])
            self.retention.reset()  # a new run: retention freezes the loaded denoiser at start_online
            return
        sd = {k: v for k, v in state.items() if not k.startswith("denoiser_ft.")}
        missing, unexpected = self.policy.load_state_dict(sd, strict=False)
        missing = [k for k in missing if not k.startswith("denoiser_ft.")]  # the copy is made from the base below
        if missing or unexpected:
            raise CheckpointError(f"{path}: the diffusion weights do not fit the DPPO policy (missing {missing}, "
                                  f"unexpected {list(unexpected)}); pretrain with the same agent.model settings")
        self.policy.sync_ft_from_base()

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def rollout_act(self, obs_hist: np.ndarray | Mapping) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Exploratory chunks for histories ``(N, To, Do)`` (a camera env's: its ``Dict`` of ``(N, To, ...)``
        histories): raw actions ``(N, Te, Da)`` (``(N, Da)`` if ``Te = 1``) and ``{"chains": (N, K'+1, Ta, Da)}``."""
        p = self.policy
        cond = p.condition(*p.history_inputs(obs_hist))
        x, chain = sample_chain(p.schedule, p.net_for_step, cond, (p.Ta, p.action_dim), sampler=self.sampler,
                                ddim_steps=p.ddim_steps, eta=1.0, min_std=self.min_sampling_std, final_noise=True,
                                eps_clip=p.eps_clip, record_last=self.Kp, generator=self.gen, final_clip=self.final_clip)
        a = p.action_scaler.unnormalize(x[:, : p.Te]).cpu().numpy()
        return (a[:, 0] if p.Te == 1 else a), {"chains": chain}

    # ------------------------------------------------------------------ denoising-MDP log-probs
    def step_log_prob(self, cond: torch.Tensor, x_prev: torch.Tensor, x_next: torch.Tensor,
                      i: torch.Tensor) -> torch.Tensor:
        """Element-wise ``log N(x_next; μθ(x_prev, k_i, s), max(σ_{k_i}, min_logprob_std)²)`` ``(M, Ta, Da)``.

        Args:
            cond: conditions ``(M, To, F)`` (normalised histories ``(M, To, Do)`` of a state policy); x_prev, x_next: ``(M, Ta, Da)``;
            i: fine-tuned step indices ``(M,)`` in ``[0, K')``.
        """
        p = self.policy
        mean, std = step_mean_std(p.schedule, p.denoiser_ft, x_prev, self.ft_k[i], self.ft_k_prev[i], cond,
                                  self.sampler, 1.0)
        return gaussian_log_prob(x_next, mean, std.clamp(min=self.min_logprob_std))

    def pair_log_prob(self, cond, x_prev, x_next, i) -> torch.Tensor:
        """Chunk log-prob ``(M,)``: :meth:`step_log_prob` clamped and averaged over ``Te×Da``."""
        return chunk_log_prob(self.step_log_prob(cond, x_prev, x_next, i), self.policy.Te, self.logprob_clamp)

    # ------------------------------------------------------------------ update
    def _prepare(self, ro: Rollout) -> dict[str, torch.Tensor]:
        """Flatten the valid steps: cond ``(S, To, F)`` (``F = Do`` without cameras), chains ``(S, K'+1, Ta, Da)``,
        adv/ret ``(S,)``, old log-probs ``(S, K')``."""
        dev = self.device
        with torch.no_grad():
            cond, ncond = rollout_condition(self.policy, ro.observations), rollout_condition(self.policy, ro.next_observations)
            v, nv = self.critic(cond), self.critic(ncond)
        adv, ret, keep = gae_targets(ro, v, nv, gamma=self.gamma, lam=self.gae_lambda, device=dev)
        d = {"cond": cond[keep], "chains": ro.extras["chains"].flatten(0, 1)[keep], "adv": adv[keep], "ret": ret[keep]}
        S = d["cond"].shape[0]
        old = torch.empty(S, self.Kp, device=dev)
        with torch.no_grad():
            for j in range(self.Kp):
                i = torch.full((S,), j, device=dev, dtype=torch.long)
                old[:, j] = self.pair_log_prob(d["cond"], d["chains"][:, j], d["chains"][:, j + 1], i)
        d["logp"] = old
        return d

    def _minibatch(self, d: dict, idx: torch.Tensor, train_actor: bool) -> dict[str, torch.Tensor]:
        s, i = idx // self.Kp, idx % self.Kp
        cond = d["cond"][s]
        vl = value_loss(self.critic(cond), d["ret"][s])
        out = {"value_loss": vl.detach()}
        loss = self.vf_coef * vl
        if train_actor:
            logp = self.pair_log_prob(cond, d["chains"][s, i], d["chains"][s, i + 1], i)
            adv = normalize_advantages(d["adv"][s]) * self.discount_i[i]
            pl, info = ppo_policy_loss(logp, d["logp"][s, i], adv, self.clip_i[i])
            loss = loss + pl
            out.update(policy_loss=pl.detach(), **info)
            keep, kept = self._retention_term(cond, d["chains"][s, i], i)
            if keep is not None:
                loss = loss + keep
                out.update(kept)
        self.actor_opt.zero_grad(set_to_none=True)
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.max_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.policy.denoiser_ft.parameters(), self.max_grad_norm)
        if train_actor:
            self.actor_opt.step()
        self.critic_opt.step()
        return out

    def update_rollout(self, ro: Rollout, iteration: int) -> dict[str, float]:
        """PPO epochs over the rollout's (env step, denoising step) pairs; returns mean metrics."""
        d = self._prepare(ro)
        train_actor = iteration >= self.critic_warmup_iters
        out = minibatch_epochs(d["cond"].shape[0] * self.Kp, lambda idx: self._minibatch(d, idx, train_actor),
                               n_epochs=self.n_epochs, batch_size=self.batch_size, target_kl=self.target_kl,
                               generator=self.gen, device=self.device, drop_last=True)  # as DPPO: remainder skipped
        self.retention.tick()
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Policy, value net, optimizers, RNG (:data:`~robotrl.agents.ppo.update.ONPOLICY_STATE`); with knowledge
        retention on, also its frozen denoiser and schedule step (``retention``)."""
        out = save_state(self)
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_state(self, state)
        self.retention.load_state_dict(state.get("retention"), self.policy.denoiser_ft)


def rollout_condition(policy, observations) -> torch.Tensor:
    """A rollout's histories ``(T, N, To, ...)`` (arrays or a camera env's dict of them) as the policy's
    conditions ``(T·N, To, F)``, in chunks of 4096 steps (the encoder's memory)."""
    state, images = policy.history_inputs(observations)
    state = state.flatten(0, 1)
    if images is None:
        return policy.condition(state)
    images = {k: v.flatten(0, 1) for k, v in images.items()}
    return torch.cat([policy.condition(state[i:i + 4096], {k: v[i:i + 4096] for k, v in images.items()})
                      for i in range(0, state.shape[0], 4096)])
