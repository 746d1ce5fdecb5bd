"""Residual PPO (ResiP): on-policy RL of a per-step Gaussian correction on a frozen base.

Ankile et al. 2024, "From Imitation to Refinement — Residual RL for Precise Visual
Assembly" (ankile/robust-rearrangement). Runs on :class:`robotrl.onpolicy.OnPolicyTrainer`
(vector envs with next-step autoreset, :func:`~robotrl.onpolicy.compute_gae`, running
reward scaling) and reuses the PPO losses of :mod:`robotrl.agents.ppo.loss`.

Symbols: ``T`` rollout steps, ``N`` envs, ``M`` minibatch, ``Do``/``Da`` observation /
action size. Per step the base gives ``a_base``; the residual samples
``r ~ N(μ(x), σ²)`` with ``x = [normalised obs, normalised a_base]``; the env gets
``clip(a_base + α r)`` (normalised units). The PPO ratio is over ``r`` (the base is
frozen and part of the environment from the residual's point of view); the value
function ``V(x)`` sees the same input ``x``. ``log_std`` is fixed (ResiP: −1) or learned.

Defaults follow ResiP (``src/config/base_residual_rl.yaml``, ``actor/residual_diffusion.yaml``):
``α = 0.1``, obs clamp ±3, zero-initialised residual output, fixed ``log_std`` −1, 256×2
actor and value MLPs, clip 0.2, λ 0.95, target KL 0.1 (early stop of the epoch loop), grad
clip 1, ``vf_coef`` 1, 50 epochs, actor lr 3e-4, running reward normalisation. Scaled to a
CPU (``configs/agent/residual-ppo.yaml``):

- batch per update: ResiP collects 1024 envs × 700 steps (716 800 samples) and takes full-batch
  steps; the config here collects 32 envs × 200 steps = 6 400 samples per update (four 50-step
  Fetch episodes per env, fewer when success ends them) in minibatches of 3 200 — as many envs
  as a 2-core machine steps at full speed in one process (sync vector envs: more envs do not
  add throughput there, they only lengthen an iteration).
- γ fitted to the horizon: ResiP's 0.999 over ~700-step episodes is ``1 − 1/(1.4 H)``; for
  Fetch's 50-step episodes ``1 − 1/H = 0.98`` (the class default keeps 0.999).
- success ends the episode in ResiP (``reset_on_success``); Fetch never terminates, so
  ``experiment=residual-ppo`` ends its training episodes at success
  (``env.train_terminate_on_success``, :class:`robotrl.envs.SuccessTermination`).
- critic lr 1e-3 constant (ResiP 5e-3 with a cosine schedule), ``mish`` value MLP (ResiP ReLU),
  no reward clip at ±5.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from robotrl.agent import OnPolicyAgentBase
from robotrl.agents.ppo.loss import gaussian_log_prob
from robotrl.agents.ppo.update import gae_targets, load_state, ppo_epochs, save_state
from robotrl.agents.residual.base import load_base
from robotrl.agents.residual.policy import LOG_STD_MAX, LOG_STD_MIN, ResidualPolicy
from robotrl.agents.retention import PolicyParts, Retention, RetentionConfig
from torch import nn

from robotrl.checkpoint import load_checkpoint
from robotrl.errors import ConfigError
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.networks import ValueNet
from robotrl.onpolicy import Rollout


def refuse_data_terms(cfg: RetentionConfig, agent: str) -> None:
    """The residual agents' retention is the ``kl`` term on their own minibatch: refuse the terms that read the
    pretraining data, in one line naming the way out.

    ``bc`` would clone dataset actions, which are combined actions ``clip(a_base + α r)``, not residuals: the
    residual target ``(a − a_base(s))/α`` is unbounded for the tanh heads (``|a − a_base|`` of a demonstration is
    rarely below ``α`` = 0.1) and undefined where the clip saturated, so it is not built; ``kl_states="offline"``
    and ``replay`` are not built either (the off-policy residual mixes the demonstrations into every batch
    already: ``trainer.offline_ratio``).

    Raises:
        ConfigError: ``bc``, ``replay`` or ``kl_states="offline"`` on.
    """
    if cfg.replay.weight > 0:
        raise ConfigError(f"agent.model.retention.replay is not built for {agent}: the off-policy loop mixes the "
                          "offline data into every batch already (trainer.offline_ratio); use retention.kl")
    if cfg.reads_data:
        raise ConfigError(f"agent.model.retention for {agent} is the kl term toward the residual frozen at the online "
                          "start (kl_states=online); bc (dataset actions are combined actions, not residuals) and "
                          "kl_states=offline are not built")


class ResidualPPOAgent(OnPolicyAgentBase):
    """ResiP: PPO on a zero-initialised Gaussian residual over a frozen base policy.

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent (the
            normaliser's statistics are copied, its clip replaced by ``obs_clip``; an
            identity normaliser means "no dataset statistics": the base's are used).
        base: the frozen base — a robotrl checkpoint / run dir, an SB3 ``.zip``, a folder with a LeRobot ACT or
            diffusion policy (:mod:`robotrl.agents.residual.lerobot`; chunks executed per env as trained, histories
            of ``n_obs_steps`` kept), a policy-state dict or a module (:func:`~robotrl.agents.residual.base.load_base`);
            ``None``: set later by :meth:`load_pretrained` (the on-policy ``init_from``).
        base_overrides: constructor kwargs replaced in the base's spec (e.g. ``act_steps``).
        hidden, act, residual_scale, obs_clip, init_log_std, learn_log_std: see
            :class:`~robotrl.agents.residual.policy.ResidualPolicy`.
        critic_hidden, critic_act: value MLP on ``(Do + Da)``.
        actor_lr, critic_lr: Adam learning rates.
        gamma, gae_lambda: discount per env step and GAE λ.
        clip, vf_coef, n_epochs, batch_size, target_kl, max_grad_norm: PPO settings
            (minibatch ``M = batch_size``; early stop when approx KL > ``target_kl``).
        critic_warmup_iters: iterations that train only the value function.
        reward_scaling: running-std reward scaling in the collector.
        device, seed: torch device; seed of sampling and minibatch order.
        image_shapes, state_layout, frame_stack: the observation spec's cameras (what the build path passes a
            camera run): residual PPO learns from states only, so cameras are refused.
        retention: knowledge retention online (:mod:`robotrl.agents.retention`), the residual's form: only the
            ``kl`` term on the rollout's residual inputs ``x = [obs, a_base]`` (``kl_states="online"``),
            ``KL(N(μ₀(x), σ₀²) ‖ N(μ(x), σ²))`` toward the residual head frozen at :meth:`start_online`
            (``penalty="l2"``: ``‖μ(x) − μ₀(x)‖²``, residual units), added to every PPO minibatch's policy loss;
            schedules count iterations. ``None``: off (the updates unchanged).

    Raises:
        ConfigError: cameras (``image_shapes``): the on-policy rollouts carry no camera frames to this agent yet;
            a retention term that reads the pretraining data (:func:`refuse_data_terms`) or a bad retention setting.
    """

    ARCHITECTURE_KEYS = ("hidden", "act", "obs_clip", "critic_hidden", "critic_act")

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, base=None, base_overrides: dict | None = None,
                 hidden: Sequence[int] = (256, 256), act: str = "relu", residual_scale: float = 0.1,
                 obs_clip: float | None = 3.0, init_log_std: float = -1.0, learn_log_std: bool = False,
                 critic_hidden: Sequence[int] = (256, 256), critic_act: str = "mish",
                 actor_lr: float = 3e-4, critic_lr: float = 1e-3, gamma: float = 0.999, gae_lambda: float = 0.95,
                 clip: float = 0.2, vf_coef: float = 1.0, n_epochs: int = 50, batch_size: int = 3200,
                 target_kl: float | None = 0.1, max_grad_norm: float | None = 1.0, critic_warmup_iters: int = 0,
                 reward_scaling: bool = True, device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, state_layout: str | None = None,
                 frame_stack: int = 1, retention: RetentionConfig | Mapping | None = None):
        if image_shapes:
            raise ConfigError("residual PPO learns from states only: its on-policy rollouts carry no camera frames; "
                              "fine-tune a camera base with agent=residual-offpolicy obs=pixels (ResFiT on cameras), "
                              "or run residual PPO with obs=state")
        self.device = torch.device(device)
        self.base_overrides = dict(base_overrides or {})
        self.policy = ResidualPolicy(obs_dim, action_dim, None, hidden, act=act, head="gaussian",
                                     residual_scale=residual_scale, obs_clip=obs_clip, init_log_std=init_log_std,
                                     learn_log_std=learn_log_std)
        obs_norm = ObservationNormalizer(obs_normalizer.mean.cpu().numpy(), obs_normalizer.std.cpu().numpy(), clip=obs_clip)
        self._identity_obs_norm = bool((obs_normalizer.mean == 0).all() and (obs_normalizer.std == 1).all())
        self.policy.set_normalizers(obs_norm, action_scaler)
        self.policy.to(self.device).eval()
        self.rollout_base: nn.Module | None = None
        if base is not None:
            self.set_base(load_base(base, self.base_overrides, self.device))
        self.critic = ValueNet(obs_dim + action_dim, critic_hidden, critic_act).to(self.device)
        self.actor_opt = torch.optim.Adam([p for p in self.policy.parameters() if p.requires_grad], lr=actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self.gamma, self.gae_lambda, self.clip, self.vf_coef = float(gamma), float(gae_lambda), float(clip), float(vf_coef)
        self.n_epochs, self.batch_size, self.target_kl = int(n_epochs), int(batch_size), target_kl
        self.max_grad_norm, self.critic_warmup_iters = max_grad_norm, int(critic_warmup_iters)
        self.reward_scaling = bool(reward_scaling)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.retention = Retention(retention, squash=False)
        refuse_data_terms(self.retention.cfg, "residual PPO")

    # ------------------------------------------------------------------ knowledge retention
    def _retention_parts(self) -> PolicyParts:
        """What defines the residual's Gaussian ``N(μ(x), σ²)``: the residual MLP and ``log_std`` (shared with the
        policy; retention freezes a copy). Not the base: it is frozen already, and may be large."""
        return PolicyParts(residual=self.policy.residual, log_std=self.policy.log_std)

    def start_online(self) -> None:
        """Freeze the residual head as the online phase starts (π₀ of knowledge retention; kept on resume)."""
        self.retention.start(self._retention_parts())

    def _retention_term(self, x: torch.Tensor) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Retention loss on the minibatch's residual inputs ``x (M, Do + Da)`` (``None``: off or not started)."""
        if self.retention.reference is None:
            return None, {}

        def gaussian(net, inp):
            mean = net.residual(inp)
            return mean, net.log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp().expand_as(mean)

        return self.retention.actor_loss(self._retention_parts(), gaussian=gaussian, states=x, batch_size=x.shape[0])

    # ------------------------------------------------------------------ base
    def set_base(self, base: nn.Module) -> None:
        """Install a frozen base in the policy; rollouts use their own copy (own chunk queues)."""
        self.policy.set_base(base)
        self.rollout_base = copy.deepcopy(self.policy.base)
        if self._identity_obs_norm:  # no dataset statistics given: use the base's own
            self.policy.use_base_obs_statistics()

    def load_pretrained(self, path: str) -> None:
        """``init_from`` of the on-policy loop: a residual checkpoint (whole agent) or a base.

        A checkpoint whose policy is a :class:`ResidualPolicy` restores this agent; any
        other robotrl checkpoint or an SB3 ``.zip`` becomes the frozen base.

        Raises:
            CheckpointError: unreadable checkpoint or weights that do not fit.
        """
        if not str(path).endswith(".zip"):
            state = load_checkpoint(path, map_location=self.device)
            if state.get("policy", {}).get("target", "").endswith("ResidualPolicy"):
                self.load_state_dict(state["agent"])
                self.retention.reset()  # a new run: retention freezes the loaded residual at start_online
                return
        self.set_base(load_base(path, self.base_overrides, self.device))

    # ------------------------------------------------------------------ acting
    def _base_and_features(self, obs_hist: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hist = torch.as_tensor(np.asarray(obs_hist, np.float32), device=self.device)
        if hist.ndim == 2:
            hist = hist[:, None]
        obs = hist[:, -1]
        if hist.shape[1] >= 2:  # identical history rows: the collector restarted this env's episode
            fresh = np.flatnonzero((hist[:, 0] == hist[:, 1]).all(-1).cpu().numpy())
            if fresh.size:
                self.rollout_base.reset(fresh)
        base_raw = self.policy.base_action(obs, base=self.rollout_base)
        return obs, base_raw, self.policy.inputs(obs, base_raw)

    @torch.no_grad()
    def rollout_act(self, obs_hist: np.ndarray) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Sample for ``(N, To, Do)`` histories: raw combined actions ``(N, Da)`` and extras.

        Extras: ``features (N, Do + Da)`` (residual/critic input), ``base (N, Da)`` raw base
        action, ``residual (N, Da)`` the sampled ``r``.
        """
        obs, base_raw, x = self._base_and_features(obs_hist)
        mean, log_std = self.policy.residual_params(x)
        r = mean + log_std.exp() * torch.randn(mean.shape, generator=self.gen, device=self.device)
        a = self.policy.combine(base_raw, r)
        return a.cpu().numpy(), {"features": x, "base": base_raw, "residual": r}

    def reset_rollout(self, env_ids: np.ndarray | None = None) -> None:
        """Clear the rollout base's chunk queues of ``env_ids`` (for loops that know episode starts)."""
        if self.rollout_base is not None:
            self.rollout_base.reset(env_ids)

    def _log_prob(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
        mean, log_std = self.policy.residual_params(x)
        return gaussian_log_prob(r, mean, log_std.exp()).sum(-1)

    # ------------------------------------------------------------------ update
    def _prepare(self, ro: Rollout) -> dict[str, torch.Tensor]:
        dev = self.device
        T, N = ro.rewards.shape
        x = ro.extras["features"].flatten(0, 1)
        with torch.no_grad():
            nobs = torch.as_tensor(ro.next_observations[:, :, -1], device=dev).flatten(0, 1)
            # V(s') needs the base action at s': the stateless base call is exact for per-step
            # bases; for chunked bases it approximates the queued action by a fresh chunk's first
            nx = self.policy.inputs(nobs, self._stateless_base(nobs)).view(T, N, -1)
            # within an episode the next step's recorded features are exactly those of s'
            cont = torch.as_tensor(~(ro.terminated | ro.truncated)[:-1] & ro.valid[1:], device=dev)
            nx[:-1] = torch.where(cont[..., None], x.view(T, N, -1)[1:], nx[:-1])
            nx = nx.flatten(0, 1)
            v, nv = self.critic(x), self.critic(nx)
        adv, ret, keep = gae_targets(ro, v, nv, gamma=self.gamma, lam=self.gae_lambda, device=dev)
        r = ro.extras["residual"].flatten(0, 1)
        with torch.no_grad():
            logp = self._log_prob(x, r)
        data = {"x": x, "r": r, "logp": logp, "adv": adv, "ret": ret}
        return {k: v[keep] for k, v in data.items()}

    @torch.no_grad()
    def _stateless_base(self, obs: torch.Tensor) -> torch.Tensor:
        base = self.policy.base
        if hasattr(base, "predict_chunk"):
            To = getattr(base, "To", 1)
            return base.predict_chunk(obs[:, None].expand(-1, To, -1))[:, 0]
        return self.policy.base_action(obs)

    def update_rollout(self, ro: Rollout, iteration: int) -> dict[str, float]:
        """PPO epochs over the valid env steps of ``ro``; returns mean metrics."""
        d = self._prepare(ro)
        M = d["x"].shape[0]
        self.policy.train()
        out = ppo_epochs(d, critic=self.critic, critic_input="x",
                         log_prob=lambda data, i: self._log_prob(data["x"][i], data["r"][i]),
                         critic_opt=self.critic_opt, critic_params=list(self.critic.parameters()),
                         actor_opt=self.actor_opt,
                         actor_params=[p for p in self.policy.parameters() if p.requires_grad],
                         n_epochs=self.n_epochs, batch_size=self.batch_size, clip=self.clip, vf_coef=self.vf_coef,
                         max_grad_norm=self.max_grad_norm, target_kl=self.target_kl,
                         train_actor=iteration >= self.critic_warmup_iters, generator=self.gen,
                         actor_extra=(lambda i: self._retention_term(d["x"][i])) if self.retention.enabled else None)
        self.retention.tick()
        self.policy.eval()
        out["std"] = float(self.policy.log_std.exp().mean())
        with torch.no_grad():
            out["residual_abs"] = float(self.policy.deterministic_residual(d["x"]).abs().mean()) if M else 0.0
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Residual policy (with the base's descriptor and weights), value net, optimizers, RNG; with knowledge
        retention on, also its frozen residual head and schedule step (``retention``)."""
        out = {"policy_spec": self.policy.spec(), **save_state(self)}
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (rebuilds the base from the stored descriptor when needed)."""
        base_desc = state["policy_spec"]["base"]
        if base_desc is not None and (self.policy.base is None or self.policy.spec()["base"] != base_desc):
            self.policy.set_base(base_desc)
        load_state(self, state)
        self.rollout_base = copy.deepcopy(self.policy.base)
        self.retention.load_state_dict(state.get("retention"), self._retention_parts())
