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

from robotrl.agents.diffusion.loss import noise_prediction_loss
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class DiffusionAgent:
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
        obs = batch.observations.to(self.device)
        if obs.ndim == 2:
            obs = obs[:, None]
        x0 = p.action_scaler.normalize(batch.actions.to(self.device)).clamp(-1.0, 1.0)
        if x0.ndim == 2:
            x0 = x0[:, None]
        B = x0.shape[0]
        k = torch.randint(0, p.K, (B,), device=self.device, generator=self.gen)
        eps = torch.randn(x0.shape, device=self.device, generator=self.gen)
        x_k = p.schedule.q_sample(x0, k, eps)
        mask = batch.mask.to(self.device) if batch.mask is not None else None
        return noise_prediction_loss(self.model(x_k, k, p.condition(obs)), eps, mask)

    @torch.no_grad()
    def _update_ema(self) -> None:
        decay = 0.0 if self.num_updates <= self.ema_start else self.ema_decay
        for pe, pm in zip(self.policy.denoiser.parameters(), self.model.parameters()):
            pe.lerp_(pm, 1.0 - decay)
        for be, bm in zip(self.policy.denoiser.buffers(), self.model.buffers()):
            be.copy_(bm)

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One gradient step; returns detached ``loss`` and ``grad_norm``."""
        loss = self.loss(batch)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.num_updates += 1
        self._update_ema()
        return {"loss": loss.detach(), "grad_norm": gn.detach()}

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
        return {"model": self.model.state_dict(), "policy": self.policy.state_dict(),
                "optimizer": self.optimizer.state_dict(), "num_updates": self.num_updates, "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        self.model.load_state_dict(state["model"])
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.num_updates = int(state["num_updates"])
        self.gen.set_state(state["gen"])
