"""Gaussian MLP PPO fine-tuning from a BC checkpoint (the DPPO paper's baseline).

PPO (Schulman et al. 2017) with the conventions of DPPO's Gaussian baseline
(irom-princeton/dppo ``agent/finetune/train_ppo_gaussian_agent.py``): running reward
scaling, GAE over env steps bootstrapping unless terminated, a value net on the
observation, critic warmup iterations, per-minibatch advantage normalisation, early stop
on approximate KL. Symbols: ``T`` steps per env, ``N`` envs, ``M`` minibatch,
``Do``/``Da`` observation/action size. Driven by :class:`robotrl.onpolicy.OnPolicyTrainer`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from robotrl.agent import OnPolicyAgentBase
from robotrl.agents.bc.loss import mse_loss
from robotrl.agents.ppo.loss import gaussian_log_prob
from robotrl.agents.ppo.policy import GaussianPPOPolicy
from robotrl.agents.ppo.update import gae_targets, load_state, ppo_epochs, save_state

from robotrl.checkpoint import load_checkpoint
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError
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
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, hidden: Sequence[int] = (256, 256), act: str = "relu",
                 init_log_std: float = -1.0, obs_clip: float | None = 10.0,
                 critic_hidden: Sequence[int] = (256, 256, 256), critic_act: str = "mish",
                 actor_lr: float = 1e-4, critic_lr: float = 1e-3, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip: float = 0.2, vf_coef: float = 0.5, n_epochs: int = 5, batch_size: int = 2048,
                 target_kl: float | None = 0.05, max_grad_norm: float | None = 1.0, critic_warmup_iters: int = 0,
                 reward_scaling: bool = True, bc_lr: float = 1e-3, device: str | torch.device = "cpu",
                 seed: int = 0):
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
                         train_actor=iteration >= self.critic_warmup_iters, generator=self.gen)
        out["std"] = float(self.policy.log_std.detach().exp().mean())
        return out

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Policy, value net, optimizers, RNG (:data:`~robotrl.agents.ppo.update.ONPOLICY_STATE`)."""
        return save_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_state(self, state)
