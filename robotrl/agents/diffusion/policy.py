"""The deployable diffusion policy: normalisers + denoiser (EMA weights) + chunk queues.

Diffusion Policy (Chi et al. 2023, real-stanford/diffusion_policy) as configured by DPPO
(irom-princeton/dppo) for state tasks. Symbols: ``B``/``N`` batch / envs, ``To``
observation history, ``Do`` observation size, ``Ta`` predicted chunk, ``Te`` executed
steps per chunk (``act_steps``), ``Da`` action size, ``K`` denoising steps.

``forward(obs (N, Do) raw) -> action (N, Da) raw`` is called once per env step: the
policy keeps per-env histories ``(N, To, Do)`` (padded with the first observation at an
episode start) and per-env queues of ``Te`` actions; a new chunk is sampled for the envs
whose queue is empty. :meth:`reset` clears the state of the given envs. If the batch
size changes between calls (e.g. the caller drops finished envs) all state is restarted.

:meth:`predict_chunk` is the stateless path ``(B, To, Do) -> (B, Ta, Da)`` raw.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from robotrl.agents.diffusion.networks import build_denoiser
from robotrl.agents.diffusion.sampling import chain_timesteps, sample_chain
from robotrl.agents.diffusion.schedule import DiffusionSchedule
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class DiffusionPolicy(nn.Module):
    """DDPM/DDIM action-chunk policy.

    Args:
        obs_dim, action_dim: ``Do``, ``Da``.
        obs_horizon, action_horizon, act_steps: ``To``, ``Ta``, ``Te`` (``Te <= Ta``).
        denoising_steps: ``K``.
        denoiser: ``"mlp"`` (residual), ``"plain_mlp"`` or ``"unet"``; ``denoiser_kwargs``
            go to its constructor (e.g. ``hidden``, ``channels``).
        sampler: ``"ddpm"`` or ``"ddim"`` for inference; ``ddim_steps`` its chain length.
        eval_min_std: std floor of DDPM inference steps (DPPO: 1e-3; the last step is noise-free).
        ddim_eta: DDIM η at inference (0: deterministic).
        obs_clip: clamp of normalised observations; ``x0_clip``: clamp of predicted ``x0``.
        eps_clip: clip of the sampling noise (DPPO ``randn_clip_value`` 3).

    Raises:
        ValueError: ``act_steps > action_horizon`` or bad sampler settings.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_horizon: int = 1, action_horizon: int = 4,
                 act_steps: int = 4, denoising_steps: int = 20, denoiser: str = "mlp",
                 denoiser_kwargs: dict | None = None, sampler: str = "ddpm", ddim_steps: int = 5,
                 eval_min_std: float = 1e-3, ddim_eta: float = 0.0, obs_clip: float | None = 10.0,
                 x0_clip: float | None = 1.0, eps_clip: float = 3.0):
        super().__init__()
        if not 1 <= act_steps <= action_horizon:
            raise ValueError(f"act_steps Te={act_steps} must be in [1, Ta={action_horizon}]")
        chain_timesteps(denoising_steps, sampler, ddim_steps)  # validates sampler / ddim_steps
        self.obs_dim, self.action_dim = int(obs_dim), int(action_dim)
        self.To, self.Ta, self.Te, self.K = int(obs_horizon), int(action_horizon), int(act_steps), int(denoising_steps)
        self.sampler, self.ddim_steps, self.eval_min_std, self.ddim_eta = sampler, int(ddim_steps), float(eval_min_std), float(ddim_eta)
        self.eps_clip = float(eps_clip)
        self._spec = dict(obs_dim=self.obs_dim, action_dim=self.action_dim, obs_horizon=self.To, action_horizon=self.Ta,
                          act_steps=self.Te, denoising_steps=self.K, denoiser=denoiser,
                          denoiser_kwargs=dict(denoiser_kwargs or {}), sampler=sampler, ddim_steps=self.ddim_steps,
                          eval_min_std=self.eval_min_std, ddim_eta=self.ddim_eta, obs_clip=obs_clip, x0_clip=x0_clip,
                          eps_clip=self.eps_clip)
        self.obs_normalizer = ObservationNormalizer(np.zeros(obs_dim), np.ones(obs_dim), clip=obs_clip)
        self.action_scaler = ActionScaler(-np.ones(action_dim), np.ones(action_dim))
        self.schedule = DiffusionSchedule(self.K, x0_clip)
        self.denoiser = build_denoiser(denoiser, self.obs_dim, self.action_dim, self.To, self.Ta, **(denoiser_kwargs or {}))
        self._hist: torch.Tensor | None = None  # (N, To, Do) raw
        self._queue: torch.Tensor | None = None  # (N, Te, Da) raw
        self._qpos = np.zeros(0, np.int64)
        self._fresh = np.zeros(0, bool)

    # ------------------------------------------------------------------ setup
    def set_normalizers(self, obs_normalizer: ObservationNormalizer, action_scaler: ActionScaler) -> None:
        """Copy statistics computed from data into this policy's buffers."""
        self.obs_normalizer.load_state_dict(obs_normalizer.state_dict())
        self.action_scaler.load_state_dict(action_scaler.state_dict())

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return {**self._spec, "denoiser_kwargs": dict(self._spec["denoiser_kwargs"])}

    def export_module(self, seed: int = 0) -> nn.Module:
        """Traceable ``obs (B, Do) -> chunk (B, Ta, Da)`` with fixed noise, for TorchScript/ONNX export.

        See :class:`~robotrl.agents.diffusion.export.DiffusionChunkExport`.
        """
        from robotrl.agents.diffusion.export import DiffusionChunkExport

        return DiffusionChunkExport(self, seed=seed)

    @property
    def chunk_len(self) -> int:
        """``Ta`` (export metadata)."""
        return self.Ta

    @property
    def act_steps(self) -> int:
        """``Te`` (export metadata)."""
        return self.Te

    def net_for_step(self, k: int) -> nn.Module:
        """The noise network of a chain step at timestep ``k`` (the pretrained one; DPPO overrides)."""
        return self.denoiser

    def chain_length(self, sampler: str | None = None) -> int:
        """``n``: steps of the inference chain (``K`` for DDPM, ``ddim_steps`` for DDIM)."""
        return self.K if (sampler or self.sampler) == "ddpm" else self.ddim_steps

    # ------------------------------------------------------------------ stateless
    def condition(self, obs_hist: torch.Tensor) -> torch.Tensor:
        """Raw history ``(B, To, Do)`` → normalised, clipped condition ``(B, To, Do)``."""
        return self.obs_normalizer(obs_hist)

    @torch.no_grad()
    def sample_normalized(self, cond: torch.Tensor, *, sampler: str | None = None,
                          generator: torch.Generator | None = None, x_init: torch.Tensor | None = None) -> torch.Tensor:
        """Inference chunk ``(B, Ta, Da)`` in ``[-1, 1]`` for a normalised condition ``(B, To, Do)``.

        ``x_init`` ``(B, Ta, Da)``: the chain's starting latent (``None``: drawn from ``generator``).
        """
        sampler = sampler or self.sampler
        x, _ = sample_chain(self.schedule, self.net_for_step, cond, (self.Ta, self.action_dim), sampler=sampler,
                            ddim_steps=self.ddim_steps, eta=self.ddim_eta,
                            min_std=self.eval_min_std if sampler == "ddpm" else 0.0, eps_clip=self.eps_clip,
                            generator=generator, x_init=x_init)
        return x

    @torch.no_grad()
    def predict_chunk(self, obs_hist: torch.Tensor, *, sampler: str | None = None) -> torch.Tensor:
        """Raw history ``(B, To, Do)`` (or ``(B, Do)`` when ``To == 1``) → raw chunk ``(B, Ta, Da)``."""
        if obs_hist.ndim == 2:
            obs_hist = obs_hist[:, None]
        return self.action_scaler.unnormalize(self.sample_normalized(self.condition(obs_hist), sampler=sampler))

    # ------------------------------------------------------------------ per-step acting
    def _restart(self, obs: torch.Tensor) -> None:
        N = obs.shape[0]
        self._hist = obs[:, None].repeat(1, self.To, 1).clone()
        self._queue = torch.zeros(N, self.Te, self.action_dim, device=obs.device)
        self._qpos = np.full(N, self.Te, np.int64)
        self._fresh = np.zeros(N, bool)

    @torch.no_grad()
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """One raw action ``(N, Da)`` per env for raw observations ``(N, Do)``; samples chunks as queues empty."""
        if self._hist is None or self._hist.shape[0] != obs.shape[0] or self._hist.device != obs.device:
            self._restart(obs)
        else:
            fresh = torch.as_tensor(self._fresh, device=obs.device)
            rolled = torch.cat([self._hist[:, 1:], obs[:, None]], dim=1)
            self._hist = torch.where(fresh[:, None, None], obs[:, None].expand_as(self._hist), rolled)
            self._fresh[:] = False
        need = np.flatnonzero(self._qpos >= self.Te)
        if need.size:
            idx = torch.as_tensor(need, device=obs.device)
            self._queue[idx] = self.predict_chunk(self._hist[idx])[:, : self.Te]
            self._qpos[need] = 0
        rows = torch.arange(obs.shape[0], device=obs.device)
        out = self._queue[rows, torch.as_tensor(self._qpos, device=obs.device)]
        self._qpos += 1
        return out

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear histories and queues of ``env_ids`` (``None``: all envs)."""
        if env_ids is None or self._hist is None:
            self._hist = None
            return
        ids = np.asarray(env_ids, np.int64).reshape(-1)
        if ids.size and ids.max() >= self._qpos.shape[0]:
            self._hist = None  # a new, larger batch: restart on the next call
            return
        self._fresh[ids] = True
        self._qpos[ids] = self.Te
