"""Diffusion-policy behaviour cloning: ε-prediction training on ``(To, Ta)`` windows with EMA.

Diffusion Policy (Chi et al. 2023, real-stanford/diffusion_policy), state-task settings
of DPPO's pretraining (irom-princeton/dppo ``agent/pretrain/train_diffusion_agent.py``).
Symbols: ``B`` batch, ``To``/``Do`` observation history/size, ``Ta``/``Da`` chunk
length/action size, ``K`` denoising steps.

The trainer calls :meth:`DiffusionAgent.sample_batch` (``buffer.sample_sequences(B, To,
Ta)``: observations ``(B, To, Do)``, actions ``(B, Ta, Da)``, mask ``(B, Ta)``) and then
:meth:`update`: ``k ~ U{0..K-1}``, ``ε ~ N(0, I)``, loss ``‖ε_θ(√ᾱ_k a + √(1-ᾱ_k) ε, k, o) − ε‖²``
over the valid chunk entries. The trained network is ``agent.model``; the deployable
``agent.policy`` holds its exponential moving average (decay 0.995), which is what
evaluation and checkpoints' ``policy`` use.
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.diffusion.loss import noise_prediction_loss
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.diffusion.training import chunk_inputs, ema_gradient_step, load_trainer_state, trainer_state
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class DiffusionAgent(OffPolicyAgentBase):
    """DDPM behaviour cloning over action chunks.

    Args:
        obs_dim, action_dim: ``Do``, ``Da`` (derived by the trainer).
        obs_normalizer, action_scaler: dataset statistics / env bounds.
        obs_horizon, action_horizon, act_steps, denoising_steps, denoiser, denoiser_kwargs,
            sampler, ddim_steps, eval_min_std, ddim_eta, obs_clip, x0_clip, eps_clip: see
            :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy`.
        lr, weight_decay, max_grad_norm: AdamW settings and max gradient norm (``None``: off).
        ema_decay: EMA decay of the deployed weights; ``ema_start``: updates before which
            the EMA copies the weights.
        device: torch device; seed: seed of the diffusion noise generator.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 denoising_steps: int = 20, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 sampler: str = "ddpm", ddim_steps: int = 5, eval_min_std: float = 1e-3, ddim_eta: float = 0.0,
                 obs_clip: float | None = 10.0, x0_clip: float | None = 1.0, eps_clip: float = 3.0,
                 lr: float = 1e-4, weight_decay: float = 1e-6, max_grad_norm: float | None = 1.0,
                 ema_decay: float = 0.995, ema_start: int = 1000, device: str | torch.device = "cpu", seed: int = 0):
        self.device = torch.device(device)
        self.policy = DiffusionPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                      act_steps=act_steps, denoising_steps=denoising_steps, denoiser=denoiser,
                                      denoiser_kwargs=denoiser_kwargs, sampler=sampler, ddim_steps=ddim_steps,
                                      eval_min_std=eval_min_std, ddim_eta=ddim_eta, obs_clip=obs_clip,
                                      x0_clip=x0_clip, eps_clip=eps_clip)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.model = copy.deepcopy(self.policy.denoiser).train()
        self.policy.denoiser.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm, self.ema_decay, self.ema_start = max_grad_norm, float(ema_decay), int(ema_start)
        self.num_updates = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ data
    def sample_batch(self, buffer, batch_size: int) -> Batch:
        """``(To, Ta)`` windows from ``buffer`` (:meth:`ReplayBuffer.sample_sequences`)."""
        return buffer.sample_sequences(batch_size, self.policy.To, self.policy.Ta)

    # ------------------------------------------------------------------ training
    def loss(self, batch: Batch) -> torch.Tensor:
        """ε-prediction loss of ``self.model`` on a sequence batch (obs ``(B,To,Do)``, actions ``(B,Ta,Da)``)."""
        p = self.policy
        obs, x0, mask = chunk_inputs(p, batch, self.device)
        B = x0.shape[0]
        k = torch.randint(0, p.K, (B,), device=self.device, generator=self.gen)
        eps = torch.randn(x0.shape, device=self.device, generator=self.gen)
        x_k = p.schedule.q_sample(x0, k, eps)
        return noise_prediction_loss(self.model(x_k, k, p.condition(obs)), eps, mask)

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One gradient step and EMA update; returns detached ``loss`` and ``grad_norm``."""
        return ema_gradient_step(self, self.loss(batch), self.policy.denoiser)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Stateless exploration: first action of a fresh stochastic DDPM chunk per env ``(N, Da)`` raw.

        (``To = 1`` semantics; chunked, history-aware acting is ``agent.policy``'s job.)
        """
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        return self.policy.predict_chunk(x[:, None].expand(-1, self.policy.To, -1), sampler="ddpm")[:, 0].cpu().numpy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Trained and EMA weights, normalisers, optimizer, counters, RNG."""
        return trainer_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_trainer_state(self, state)
