"""Gaussian MLP PPO fine-tuning from a BC checkpoint (the DPPO paper's baseline).

PPO (Schulman et al. 2017) with the conventions of DPPO's Gaussian baseline
(irom-princeton/dppo ``agent/finetune/train_ppo_gaussian_agent.py``): running reward
scaling, GAE over env steps bootstrapping unless terminated, a value net on the
observation, critic warmup iterations, per-minibatch advantage normalisation, early stop
on approximate KL. Symbols: ``T`` steps per env, ``N`` envs, ``M`` minibatch,
``Do``/``Da`` observation/action size. Driven by :class:`robotrl.onpolicy.OnPolicyTrainer`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch
from robotrl.agent import OnPolicyAgentBase
from robotrl.agents.bc.loss import mse_loss
from robotrl.agents.ppo.loss import gaussian_log_prob
from robotrl.agents.ppo.policy import GaussianPPOPolicy
from robotrl.agents.ppo.update import gae_targets, load_state, ppo_epochs, save_state
from robotrl.agents.retention import Retention, RetentionConfig

from robotrl.checkpoint import load_checkpoint
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.networks import ValueNet
from robotrl.onpolicy import Rollout


class PPOAgent(OnPolicyAgentBase):
    """Gaussian PPO.

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent.
        hidden, act: actor (BC-compatible); init_log_std: initial exploration std (log).
        critic_hidden, critic_act: value net.
        actor_lr, critic_lr: Adam learning rates.
        gamma, gae_lambda: discount (per env step) and GAE λ.
        clip: PPO ratio clip ε; vf_coef: value-loss weight (separate optimizers, so only scale).
        n_epochs, batch_size: epochs over the rollout and minibatch size ``M``.
        target_kl: stop the update when approx KL exceeds it (``None``: never).
        max_grad_norm: gradient clip; critic_warmup_iters: iterations training only the critic.
        reward_scaling: running-std reward scaling.
        bc_lr: Adam rate of :meth:`bc_update` (behaviour-cloning pretraining of the actor mean,
            as ``agent=bc``'s MLP with its default rate).
        device, seed: torch device; seed of action sampling and minibatch order.
        retention: knowledge retention online (:mod:`robotrl.agents.retention`): BC on the pretraining data
            and a KL/action-distance penalty toward the policy frozen at :meth:`start_online`, added to the
            PPO policy loss of every minibatch; schedules count iterations. ``None``: off (PPO unchanged).

    Raises:
        ConfigError: a retention replay weight (PPO is on-policy: use retention.bc), or a bad retention setting.
    """

    ARCHITECTURE_KEYS = ("hidden", "act", "obs_clip", "critic_hidden", "critic_act")

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, hidden: Sequence[int] = (256, 256), act: str = "relu",
                 init_log_std: float = -1.0, obs_clip: float | None = 10.0,
                 critic_hidden: Sequence[int] = (256, 256, 256), critic_act: str = "mish",
                 actor_lr: float = 1e-4, critic_lr: float = 1e-3, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip: float = 0.2, vf_coef: float = 0.5, n_epochs: int = 5, batch_size: int = 2048,
                 target_kl: float | None = 0.05, max_grad_norm: float | None = 1.0, critic_warmup_iters: int = 0,
                 reward_scaling: bool = True, bc_lr: float = 1e-3, device: str | torch.device = "cpu",
                 seed: int = 0, retention: RetentionConfig | Mapping | None = None):
        self.device = torch.device(device)
        self.policy = GaussianPPOPolicy(obs_dim, action_dim, hidden, act=act, init_log_std=init_log_std,
                                        obs_clip=obs_clip)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.critic = ValueNet(obs_dim, critic_hidden, critic_act).to(self.device)
        self.actor_opt = torch.optim.Adam(self.policy.parameters(), lr=actor_lr)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=critic_lr)
        self.gamma, self.gae_lambda, self.clip, self.vf_coef = float(gamma), float(gae_lambda), float(clip), float(vf_coef)
        self.n_epochs, self.batch_size, self.target_kl = int(n_epochs), int(batch_size), target_kl
        self.max_grad_norm, self.critic_warmup_iters = max_grad_norm, int(critic_warmup_iters)
        self.reward_scaling = bool(reward_scaling)
        self.gen = torch.Generator(device=self.device).manual_seed(seed)
        self.bc_opt = torch.optim.Adam(self.policy.actor.parameters(), lr=bc_lr)
        self.retention = Retention(retention, squash=False)
        if self.retention.cfg.replay.weight > 0:
            raise ConfigError("agent.model.retention.replay replays offline rows in Q-learning batches; PPO learns "
                              "on-policy from its rollouts: use agent.model.retention.bc (BC on the pretraining data)")

    # ------------------------------------------------------------------ knowledge retention
    def start_online(self) -> None:
        """Freeze the pretrained policy for knowledge retention (kept from the checkpoint on resume)."""
        self.retention.start(self.policy)

    def attach_offline_data(self, buffer) -> None:
        """The pretraining data for knowledge retention's BC term."""
        self.retention.attach_data(buffer)

    def _retention_term(self, obs: torch.Tensor) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """Retention loss on the minibatch's raw observations ``obs (B, Do)`` (``None``: off or not started)."""
        if self.retention.reference is None:
            return None, {}
        p = self.policy
        return self.retention.actor_loss(
            p, gaussian=lambda pol, x: pol.distribution(x),
            log_prob=lambda x, a: gaussian_log_prob(a, *p.distribution(x)).sum(-1),
            prepare=lambda b: (b.observations, p.action_scaler.normalize(b.actions).clamp(-1.0, 1.0)),
            states=obs, batch_size=obs.shape[0])

    # ------------------------------------------------------------------ warm start
    def bc_update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One behaviour-cloning step of the actor mean on dataset transitions (pretraining).

        Deterministic BC (:func:`robotrl.agents.bc.loss.mse_loss`) in normalised units, as
        ``agent=bc`` trains the same MLP; the exploration ``log_std`` stays at its initial
        value, the critic is untouched.

        Args:
            batch: ``B`` transitions; ``observations (B, Do)``, ``actions (B, Da)`` raw.

        Returns:
            ``{"bc_loss": scalar tensor}``.
        """
        obs = self.policy.obs_normalizer(batch.observations.to(self.device))
        target = self.policy.action_scaler.normalize(batch.actions.to(self.device)).clamp(-1.0, 1.0)
        loss = mse_loss(self.policy.actor(obs)[0], target)
        self.bc_opt.zero_grad(set_to_none=True)
        loss.backward()
        self.bc_opt.step()
        return {"bc_loss": loss.detach()}

    def load_pretrained(self, path: str) -> None:
        """Initialise from a BC checkpoint (actor + normalisers) or a PPO checkpoint (whole agent).

        Raises:
            CheckpointError: the checkpoint holds neither a BC nor a PPO policy.
        """
        state = load_checkpoint(path, map_location=self.device)
        target = state.get("policy", {}).get("target", "")
        if target.endswith("GaussianPPOPolicy"):
            self.load_state_dict(state["agent"])
            self.retention.reset()  # a new run: retention freezes the loaded policy at start_online
            return
        if not target.endswith("BCPolicy"):
            raise CheckpointError(f"{path}: PPO fine-tuning starts from a BC or PPO checkpoint, not {target!r}")
        sd = state["policy"]["state_dict"]
        own = {k: v for k, v in sd.items() if k.startswith(("obs_normalizer.", "action_scaler.", "actor."))}
        missing = self.policy.load_state_dict(own, strict=False).missing_keys
        if [k for k in missing if k != "log_std"]:
            raise CheckpointError(f"{path}: BC weights do not fit the PPO actor (missing {missing})")

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def rollout_act(self, obs_hist: np.ndarray) -> tuple[np.ndarray, dict[str, torch.Tensor]]:
        """Sample actions for ``(N, 1, Do)`` observations: raw env actions ``(N, Da)`` and the normalised sample."""
        obs = torch.as_tensor(obs_hist[:, -1], device=self.device)
        mean, std = self.policy.distribution(obs)
        a = mean + std * torch.randn(mean.shape, generator=self.gen, device=self.device)
        return self.policy.action_scaler.unnormalize(a).cpu().numpy(), {"actions": a}

    def _log_prob(self, obs: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        mean, std = self.policy.distribution(obs)
        return gaussian_log_prob(a, mean, std).sum(-1)

    # ------------------------------------------------------------------ update
    def _prepare(self, ro: Rollout) -> dict[str, torch.Tensor]:
        dev = self.device
        obs = torch.as_tensor(ro.observations[:, :, -1], device=dev).flatten(0, 1)
        nobs = torch.as_tensor(ro.next_observations[:, :, -1], device=dev).flatten(0, 1)
        with torch.no_grad():
            norm = self.policy.obs_normalizer
            v, nv = self.critic(norm(obs)), self.critic(norm(nobs))
        adv, ret, keep = gae_targets(ro, v, nv, gamma=self.gamma, lam=self.gae_lambda, device=dev)
        a = ro.extras["actions"].flatten(0, 1)
        with torch.no_grad():
            logp = self._log_prob(obs, a)
        data = {"obs": obs, "actions": a, "logp": logp, "adv": adv, "ret": ret}
        return {k: v[keep] for k, v in data.items()}

    def update_rollout(self, ro: Rollout, iteration: int) -> dict[str, float]:
        """PPO epochs over the valid env steps of ``ro``; returns mean metrics."""
        d = self._prepare(ro)
        d["obs_n"] = self.policy.obs_normalizer(d["obs"])
        out = ppo_epochs(d, critic=self.critic, critic_input="obs_n",
                         log_prob=lambda data, i: self._log_prob(data["obs"][i], data["actions"][i]),
                         critic_opt=self.critic_opt, critic_params=list(self.critic.parameters()),
                         actor_opt=self.actor_opt, actor_params=list(self.policy.parameters()),
                         n_epochs=self.n_epochs, batch_size=self.batch_size, clip=self.clip, vf_coef=self.vf_coef,
                         max_grad_norm=self.max_grad_norm, target_kl=self.target_kl,
                         train_actor=iteration >= self.critic_warmup_iters, generator=self.gen,
                         actor_extra=(lambda i: self._retention_term(d["obs"][i])) if self.retention.enabled else None)
        self.retention.tick()
        out["std"] = float(self.policy.log_std.detach().exp().mean())
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Policy, value net, optimizers, RNG (:data:`~robotrl.agents.ppo.update.ONPOLICY_STATE`); with knowledge
        retention on, also its frozen snapshot and schedule step (``retention``)."""
        out = save_state(self)
        if self.retention.enabled:
            out["retention"] = self.retention.state_dict()
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_state(self, state)
        self.retention.load_state_dict(state.get("retention"), self.policy)
