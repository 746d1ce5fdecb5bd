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
  ``a = clip(a_base + α r)``.
- Critic: the batched ensemble :class:`robotrl.agents.qlearning.networks.EnsembleCritic`
  (``N`` heads, LayerNorm) scoring ``Q(o_n, a)`` of the COMBINED executed action — the
  buffer's action (online: what was executed; offline demos: the demonstrated action).
  Target: ``y = R_n + γ^m (1 − terminated) min_{2 random heads} Q'(s', a')`` with
  ``a' = clip(a_base(s') + α r'(s'))`` (TD3: plus clipped target noise on ``r'``; SAC:
  minus ``α_ent log π``), losses :func:`robotrl.agents.qlearning.loss.td_target` /
  :func:`~robotrl.agents.qlearning.loss.critic_td_loss`; n-step sums come from the
  buffer (``trainer.n_step``).
- Base actions are recomputed from observations at update time: offline demonstrations
  are thereby relabelled with the base's actions (ResFiT) and online transitions get the
  base action their state had. This is exact for per-step bases (BC, SB3, diffusion with
  ``act_steps = 1`` and ``obs_horizon = 1``); chunked bases should be loaded with
  ``base_overrides={"act_steps": 1}`` (the agent enforces it for diffusion bases).
- Exploration (``explore``): the first ``base_noise_steps`` calls act with the base plus
  Gaussian noise (``base_noise_std``, normalised units) — set ``trainer.online_warmup_steps``
  to the same number so no update happens before; the first ``critic_warmup_updates``
  updates train only the critic; afterwards TD3 adds ``explore_std`` noise to ``r`` and SAC
  samples. ``progressive_steps = H > 0`` (Policy Decorator) switches the residual on per
  env and step with probability ``min(t/H, 1)``, ``t`` counting explore calls after the
  base-noise phase; otherwise the base acts alone.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence

import numpy as np
import torch

from robotrl.agents.qlearning.loss import critic_td_loss, sac_actor_loss, subset_min, td_target, temperature_loss
from robotrl.agents.qlearning.networks import EnsembleCritic
from robotrl.agents.residual.base import load_base
from robotrl.agents.residual.policy import ResidualPolicy
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class ResidualOffPolicyAgent:
    """ResFiT: TD3- or SAC-style residual actor, ensemble critic on the combined action.

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent (statistics
            copied, clip ``obs_clip``; an identity normaliser: the base's statistics are used).
        base: robotrl checkpoint / run dir, SB3 ``.zip``, policy-state dict or module.
        base_overrides: constructor kwargs replaced in the base's spec.
        actor: ``"td3"`` (deterministic tanh residual) or ``"sac"`` (tanh-Gaussian).
        hidden, act, residual_scale, obs_clip: residual actor (ResFiT α = 0.1).
        critic_n, critic_subset, critic_hidden, critic_layer_norm: ensemble critic (ResFiT:
            10 heads, min over 2 random, LayerNorm).
        actor_lr, critic_lr, tau, gamma: Adam rates, Polyak factor, discount.
        actor_delay: actor (and target) update every ``actor_delay`` critic updates (TD3).
        target_noise, target_noise_clip: TD3 target smoothing on ``r'`` (residual units).
        explore_std: TD3 exploration noise on ``r``.
        base_noise_steps, base_noise_std: base-plus-noise collection before learning.
        critic_warmup_updates: updates that train only the critic.
        progressive_steps: Policy Decorator's ``H`` (0: off).
        init_temperature, target_entropy: SAC temperature (``None`` target: ``-Da``).
        grad_clip: max gradient norm (``None``: off).
        device, seed: torch device and seed of all sampling.

    Raises:
        ValueError: unknown ``actor``, or a chunked base that is not per-step.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, base=None, base_overrides: dict | None = None, actor: str = "td3",
                 hidden: Sequence[int] = (256, 256), act: str = "relu", residual_scale: float = 0.1,
                 obs_clip: float | None = 3.0, critic_n: int = 10, critic_subset: int = 2,
                 critic_hidden: Sequence[int] = (256, 256), critic_layer_norm: bool = True,
                 actor_lr: float = 1e-4, critic_lr: float = 3e-4, tau: float = 0.005, gamma: float = 0.99,
                 actor_delay: int = 2, target_noise: float = 0.2, target_noise_clip: float = 0.5,
                 explore_std: float = 0.1, base_noise_steps: int = 0, base_noise_std: float = 0.1,
                 critic_warmup_updates: int = 0, progressive_steps: int = 0, init_temperature: float = 0.1,
                 target_entropy: float | None = None, grad_clip: float | None = 1.0,
                 device: str | torch.device = "cpu", seed: int = 0):
        if actor not in ("td3", "sac"):
            raise ValueError(f"actor must be 'td3' or 'sac', got {actor!r}")
        self.device = torch.device(device)
        self.actor = actor
        self.base_overrides = dict(base_overrides or {})
        self.policy = ResidualPolicy(obs_dim, action_dim, None, hidden, act=act,
                                     head="tanh" if actor == "td3" else "tanh_gaussian",
                                     residual_scale=residual_scale, obs_clip=obs_clip)
        obs_norm = ObservationNormalizer(obs_normalizer.mean.cpu().numpy(), obs_normalizer.std.cpu().numpy(), clip=obs_clip)
        self._identity_obs_norm = bool((obs_normalizer.mean == 0).all() and (obs_normalizer.std == 1).all())
        self.policy.set_normalizers(obs_norm, action_scaler)
        self.policy.to(self.device).eval()
        if base is not None:
            self.set_base(load_base(base, self.base_overrides, self.device))
        self.critic = EnsembleCritic(obs_dim, action_dim, critic_n, critic_hidden, layer_norm=critic_layer_norm).to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.policy.residual.parameters(), lr=actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self.log_alpha = torch.tensor(math.log(init_temperature), device=self.device, requires_grad=True)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=actor_lr)
        self.target_entropy = float(-action_dim if target_entropy is None else target_entropy)
        self.critic_subset, self.tau, self.gamma = int(critic_subset), float(tau), float(gamma)
        self.actor_delay = int(actor_delay)
        self.target_noise, self.target_noise_clip = float(target_noise), float(target_noise_clip)
        self.explore_std = float(explore_std)
        self.base_noise_steps, self.base_noise_std = int(base_noise_steps), float(base_noise_std)
        self.critic_warmup_updates, self.progressive_steps = int(critic_warmup_updates), int(progressive_steps)
        self.grad_clip = grad_clip
        self.num_updates = 0
        self.num_explore = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ base
    def set_base(self, base) -> None:
        """Install a frozen per-step base.

        Raises:
            ValueError: the base executes chunks (``Te > 1``) or uses an observation history.
        """
        if getattr(base, "Te", 1) != 1 or getattr(base, "To", 1) != 1:
            raise ValueError("the off-policy residual recomputes base actions from single observations: load a "
                             "chunked base with base_overrides={'act_steps': 1} and obs_horizon 1")
        self.policy.set_base(base)
        if self._identity_obs_norm:  # no dataset statistics given: use the base's own
            self.policy.use_base_obs_statistics()

    @torch.no_grad()
    def base_actions(self, obs: torch.Tensor) -> torch.Tensor:
        """Raw base actions ``(B, Da)`` recomputed for observations ``(B, Do)`` (relabelling)."""
        base = self.policy.base
        if hasattr(base, "predict_chunk"):  # stateless: first action of a fresh chunk (Te = 1)
            return base.predict_chunk(obs[:, None])[:, 0].to(obs.dtype)
        return self.policy.base_action(obs)

    # ------------------------------------------------------------------ actor pieces
    def _residual(self, x: torch.Tensor, *, deterministic: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(r (B, Da) in [-1, 1], log π(r) (B,) or None)``."""
        mean, log_std = self.policy.residual_params(x)
        if self.actor == "td3" or deterministic:
            return torch.tanh(mean), None
        eps = torch.randn(mean.shape, generator=self.gen, device=mean.device)
        u = mean + log_std.exp() * eps
        logp = (-0.5 * eps.pow(2) - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))).sum(-1)
        return torch.tanh(u), logp

    def combined_action(self, obs: torch.Tensor, *, deterministic: bool = True,
                        base_raw: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised combined action ``(B, Da)`` (differentiable in the residual) and log-prob."""
        base_raw = self.base_actions(obs) if base_raw is None else base_raw
        r, logp = self._residual(self.policy.features(obs, base_raw), deterministic=deterministic)
        return self.policy.combine_normalized(base_raw, r), logp

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Raw exploration actions ``(N, Da)`` (module docstring: base+noise, residual noise, progressive)."""
        o = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        base_raw = self.base_actions(o)
        sc = self.policy.action_scaler
        self.num_explore += 1
        if self.num_explore <= self.base_noise_steps:
            a = sc.normalize(base_raw) + self.base_noise_std * torch.randn(base_raw.shape, generator=self.gen, device=self.device)
            return sc.unnormalize(a.clamp(-1, 1)).cpu().numpy()
        x = self.policy.features(o, base_raw)
        r, _ = self._residual(x, deterministic=self.actor == "td3")
        if self.actor == "td3":
            r = (r + self.explore_std * torch.randn(r.shape, generator=self.gen, device=self.device)).clamp(-1, 1)
        if self.progressive_steps > 0:
            p = min((self.num_explore - self.base_noise_steps) / self.progressive_steps, 1.0)
            on = torch.rand(r.shape[0], generator=self.gen, device=self.device) < p
            r = r * on[:, None]
        return self.policy.combine(base_raw, r).cpu().numpy()

    # ------------------------------------------------------------------ update
    def _clip(self, params) -> torch.Tensor:
        return torch.nn.utils.clip_grad_norm_(params, self.grad_clip or float("inf"))

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One critic update (and, every ``actor_delay``, actor/temperature/target updates)."""
        dev = self.device
        obs, nobs = batch.observations.to(dev), batch.next_observations.to(dev)
        a = self.policy.action_scaler.normalize(batch.actions.to(dev)).clamp(-1.0, 1.0)  # executed (combined) action
        o_n, no_n = self.policy.obs_normalizer(obs), self.policy.obs_normalizer(nobs)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            nbase = self.base_actions(nobs)
            nx = self.policy.features(nobs, nbase)
            r2, logp2 = self._residual(nx, deterministic=False)
            if self.actor == "td3":
                noise = (self.target_noise * torch.randn(r2.shape, generator=self.gen, device=dev)).clamp(
                    -self.target_noise_clip, self.target_noise_clip)
                r2 = (r2 + noise).clamp(-1, 1)
            a2 = self.policy.combine_normalized(nbase, r2)
            heads = torch.randperm(self.critic.n, generator=self.gen, device=dev)[: self.critic_subset]
            nq = subset_min(self.critic_target(no_n, a2), heads)
            if logp2 is not None:
                nq = nq - alpha * logp2
            y = td_target(batch.rewards.to(dev), batch.discounts.to(dev), batch.terminated.to(dev), nq)
        q = self.critic(o_n, a)
        c_loss = critic_td_loss(q, y)
        self.critic_opt.zero_grad(set_to_none=True)
        c_loss.backward()
        c_gn = self._clip(self.critic.parameters())
        self.critic_opt.step()
        self.num_updates += 1
        out = {"critic_loss": c_loss.detach(), "q_mean": q.mean().detach(), "critic_grad_norm": c_gn.detach()}
        if self.num_updates > self.critic_warmup_updates and self.num_updates % self.actor_delay == 0:
            out.update(self._actor_step(obs, o_n))
        with torch.no_grad():
            for pt, p in zip(self.critic_target.parameters(), self.critic.parameters()):
                pt.lerp_(p, self.tau)
        return out

    def _actor_step(self, obs: torch.Tensor, o_n: torch.Tensor) -> dict[str, torch.Tensor]:
        self.policy.train()
        a_pi, logp = self.combined_action(obs, deterministic=False)
        q_pi = self.critic(o_n, a_pi).mean(0)
        alpha = self.log_alpha.exp().detach()
        loss = sac_actor_loss(q_pi, logp, alpha) if logp is not None else -q_pi.mean()
        self.actor_opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = self._clip(self.policy.residual.parameters())
        self.actor_opt.step()
        self.policy.eval()
        out = {"actor_loss": loss.detach(), "actor_grad_norm": gn.detach()}
        if logp is not None:
            t_loss = temperature_loss(self.log_alpha, logp, self.target_entropy)
            self.alpha_opt.zero_grad(set_to_none=True)
            t_loss.backward()
            self.alpha_opt.step()
            out["alpha"] = self.log_alpha.exp().detach()
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Residual policy (with base descriptor/weights), critics, optimizers, counters, RNG."""
        return {"policy_spec": self.policy.spec(), "policy": self.policy.state_dict(), "critic": self.critic.state_dict(),
                "critic_target": self.critic_target.state_dict(), "actor_opt": self.actor_opt.state_dict(),
                "critic_opt": self.critic_opt.state_dict(), "log_alpha": self.log_alpha.detach().clone(),
                "alpha_opt": self.alpha_opt.state_dict(), "num_updates": self.num_updates,
                "num_explore": self.num_explore, "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        base_desc = state["policy_spec"]["base"]
        if base_desc is not None and (self.policy.base is None or self.policy.spec()["base"] != base_desc):
            self.policy.set_base(base_desc)
        self.policy.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.alpha_opt.load_state_dict(state["alpha_opt"])
        self.num_updates, self.num_explore = int(state["num_updates"]), int(state["num_explore"])
        self.gen.set_state(state["gen"])
