"""The deployable diffusion policy: observation front end + denoiser (EMA weights) + chunk queues.

Diffusion Policy (Chi et al. 2023, real-stanford/diffusion_policy) as configured by DPPO
(irom-princeton/dppo) for state tasks. Symbols: ``B``/``N`` batch / envs, ``To``
observation history, ``Do`` observation size, ``Ta`` predicted chunk, ``Te`` executed
steps per chunk (``act_steps``), ``Da`` action size, ``K`` denoising steps, ``F`` features
per history step (``Do`` for a state policy), ``H, W, C`` frame size.

The denoiser conditions on the features of each history step
(:meth:`~robotrl.vision.frontend.ObservationFrontend.features`): the normalised state ``(Do)`` for a
state policy; with cameras (``image_shapes``; Chi et al.'s vision policy: an encoder per camera trained end
to end with the noise network, random-crop augmentation, here the shared
:class:`~robotrl.vision.encoders.PixelEncoder` with random shift) the encoder's ``F`` features of that step's
frames and normalised state. Cameras are an option of the observation, not a class of their own.

``forward(obs (N, Do) raw[, {camera: uint8 (N, H, W, C)}]) -> action (N, Da) raw`` is called once per env
step: the policy keeps per-env raw histories ``(N, To, Do)`` (and frames ``(N, To, H, W, C)``; padded with the
first step at an episode start) and per-env queues of ``Te`` actions; a new chunk is sampled for the envs whose queue is
empty. :meth:`reset` clears the state of the given envs. If the batch size changes between calls (e.g. the
caller drops finished envs) all state is restarted.

:meth:`predict_chunk` is the stateless path ``(B, To, Do)`` (with cameras and frames
``{camera: (B, To, H, W, C)}``) ``-> (B, Ta, Da)`` raw.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

from robotrl.agents.diffusion.networks import build_denoiser
from robotrl.agents.diffusion.sampling import chain_timesteps, sample_chain
from robotrl.agents.diffusion.schedule import DiffusionSchedule
from robotrl.errors import ConfigError
from robotrl.vision.frontend import ObservationFrontend

#: ``state_dict`` key prefixes of the former ``PixelDiffusionPolicy`` (its chunk model was a ``head``) -> this
#: class's; ``None``: dropped (the head's identity normaliser and its copy of the action scaler).
_PIXEL_HEAD_KEYS = {"head.denoiser.": "denoiser.", "head.schedule.": "schedule.", "head.obs_normalizer.": None,
                    "head.action_scaler.": None}


class DiffusionPolicy(ObservationFrontend):
    """DDPM/DDIM action-chunk policy, from states or (``image_shapes``) cameras plus the state.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras; 0: cameras only), ``Da``.
        obs_horizon, action_horizon, act_steps: ``To``, ``Ta``, ``Te`` (``Te <= Ta``).
        denoising_steps: ``K``.
        denoiser: ``"mlp"`` (residual), ``"plain_mlp"`` or ``"unet"``; ``denoiser_kwargs``
            go to its constructor (e.g. ``hidden``, ``channels``).
        sampler: ``"ddpm"`` or ``"ddim"`` for inference; ``ddim_steps`` its chain length.
        eval_min_std: std floor of DDPM inference steps (DPPO: 1e-3; the last step is noise-free).
        ddim_eta: DDIM η at inference (0: deterministic).
        obs_clip: clamp of normalised observations; ``x0_clip``: clamp of predicted ``x0``.
        eps_clip: clip of the sampling noise (DPPO ``randn_clip_value`` 3).
        **frontend: the observation spec's cameras and encoder (``image_shapes``, ``encoder``, ``pooling``,
            ``augment_pad``, ``state_layout``, ... of :class:`~robotrl.vision.frontend.ObservationFrontend`; none: a
            state policy, whose ``state_dict`` and numbers are those of the policy before cameras were an option).
            ``frame_stack`` must be 1: the history is ``To`` encoded steps.

    Raises:
        ValueError: ``act_steps > action_horizon`` or bad sampler settings.
        ConfigError: ``frame_stack != 1``.
    """

    ARCH_KEYS = (*ObservationFrontend.ARCH_KEYS, "obs_horizon", "action_horizon", "denoising_steps", "denoiser",
                 "denoiser_kwargs")


    def __init__(self, obs_dim: int, action_dim: int, *, obs_horizon: int = 1, action_horizon: int = 4,
                 act_steps: int = 4, denoising_steps: int = 20, denoiser: str = "mlp",
                 denoiser_kwargs: dict | None = None, sampler: str = "ddpm", ddim_steps: int = 5,
                 eval_min_std: float = 1e-3, ddim_eta: float = 0.0, obs_clip: float | None = 10.0,
                 x0_clip: float | None = 1.0, eps_clip: float = 3.0, **frontend):
        if not 1 <= act_steps <= action_horizon:
            raise ValueError(f"act_steps Te={act_steps} must be in [1, Ta={action_horizon}]")
        chain_timesteps(denoising_steps, sampler, ddim_steps)  # validates sampler / ddim_steps
        check_no_frame_stack(frontend)
        super().__init__(obs_dim, action_dim, obs_clip=obs_clip, **frontend, obs_horizon=int(obs_horizon),
                         action_horizon=int(action_horizon), act_steps=int(act_steps),
                         denoising_steps=int(denoising_steps), denoiser=denoiser,
                         denoiser_kwargs=dict(denoiser_kwargs or {}), sampler=sampler, ddim_steps=int(ddim_steps),
                         eval_min_std=float(eval_min_std), ddim_eta=float(ddim_eta), x0_clip=x0_clip,
                         eps_clip=float(eps_clip))
        self.To, self.Ta, self.Te, self.K = int(obs_horizon), int(action_horizon), int(act_steps), int(denoising_steps)
        self.sampler, self.ddim_steps, self.eval_min_std, self.ddim_eta = sampler, int(ddim_steps), float(eval_min_std), float(ddim_eta)
        self.eps_clip = float(eps_clip)
        self.schedule = DiffusionSchedule(self.K, x0_clip)
        self.denoiser = build_denoiser(denoiser, self.out_dim, self.action_dim, self.To, self.Ta, **(denoiser_kwargs or {}))
        self._init_queues()
        self._register_load_state_dict_pre_hook(_from_pixel_head)

    # ------------------------------------------------------------------ setup
    def _init_queues(self) -> None:
        self._hist: torch.Tensor | None = None  # (N, To, Do) raw
        self._frames: dict[str, torch.Tensor] | None = None  # {camera: (N, To, H, W, C)} raw
        self._queue: torch.Tensor | None = None  # (N, Te, Da) raw
        self._qpos = np.zeros(0, np.int64)
        self._fresh = np.zeros(0, bool)

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return {**self._spec, "denoiser_kwargs": dict(self._spec["denoiser_kwargs"])}

    def export_module(self, seed: int = 0) -> nn.Module:
        """Traceable ``obs (B, Do) -> chunk (B, Ta, Da)`` (with cameras ``(obs, {camera: uint8 (B, H, W, C)})``)
        with fixed noise, for TorchScript/ONNX export.

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
    def history_inputs(self, obs_hist) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
        """Raw histories as the policy's tensors: an array ``(*lead, Do)`` -> ``(state, None)``; a camera env's
        ``Dict`` observations with leading dimensions ``lead`` (``(N, To)`` from the on-policy collector) ->
        ``(state float32 (*lead, Do), {camera: uint8 (*lead, H, W, C)})``, split with the saved state layout.

        Raises:
            SpaceMismatchError: a ``Dict`` for a state policy, a camera policy without ``state_layout`` (and a
                state), or a missing camera (:meth:`~robotrl.vision.obs.PixelLayout.split`).
        """
        dev = self.action_scaler.low.device
        if not isinstance(obs_hist, Mapping):
            return torch.as_tensor(np.asarray(obs_hist, np.float32), device=dev), None
        if self.encoder is None or (self.obs_dim and self._layout.state is None):
            self.split_observation(obs_hist)  # raises the one-line SpaceMismatchError
        state, images = self._layout.split(obs_hist)
        return (torch.as_tensor(np.asarray(state, np.float32), device=dev),
                {k: torch.as_tensor(np.asarray(v), device=dev) for k, v in images.items()})

    def condition(self, obs_hist: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Denoiser condition ``(B, To, F)`` from raw histories: the normalised, clipped state ``(B, To, Do)``
        of a state policy; with cameras each step's features of state ``(B, To, Do)`` and frames
        ``{camera: uint8 (B, To, H, W, C)}``, every step encoded alike (random shift in training mode).

        Raises:
            SpaceMismatchError: a camera policy called without frames.
        """
        if self.encoder is None:
            return self.obs_normalizer(obs_hist)
        B, To = obs_hist.shape[:2]
        flat = {k: v.reshape(B * To, *v.shape[2:]) for k, v in (images or {}).items()}
        return self.features(obs_hist.reshape(B * To, obs_hist.shape[-1]), flat).view(B, To, -1)

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
    def predict_chunk(self, obs_hist: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None, *,
                      sampler: str | None = None) -> torch.Tensor:
        """Raw history ``(B, To, Do)`` (or ``(B, Do)`` when ``To == 1``; frames ``{camera: (B, To, H, W, C)}`` or
        ``(B, H, W, C)`` alike) → raw chunk ``(B, Ta, Da)``."""
        obs_hist, images = as_step_history(obs_hist, images)
        return self.action_scaler.unnormalize(self.sample_normalized(self.condition(obs_hist, images), sampler=sampler))

    # ------------------------------------------------------------------ per-step acting
    def _restart(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> None:
        N = obs.shape[0]
        self._hist = _repeat_step(obs, self.To)
        self._frames = None if images is None else {k: _repeat_step(v, self.To) for k, v in images.items()}
        self._queue = torch.zeros(N, self.Te, self.action_dim, device=obs.device)
        self._qpos = np.full(N, self.Te, np.int64)
        self._fresh = np.zeros(N, bool)

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """One raw action ``(N, Da)`` per env for raw observations ``(N, Do)`` (and, with cameras, frames
        ``{camera: uint8 (N, H, W, C)}``); samples chunks as queues empty."""
        if self._hist is None or self._hist.shape[0] != obs.shape[0] or self._hist.device != obs.device:
            self._restart(obs, images)
        else:
            fresh = torch.as_tensor(self._fresh, device=obs.device)
            self._hist = _roll(self._hist, obs, fresh)
            if images is not None and self._frames is not None:
                self._frames = {k: _roll(self._frames[k], v, fresh) for k, v in images.items()}
            self._fresh[:] = False
        need = np.flatnonzero(self._qpos >= self.Te)
        if need.size:
            idx = torch.as_tensor(need, device=obs.device)
            hist = self._hist[idx]
            if self._frames is None:
                chunk = self.predict_chunk(hist)
            else:
                chunk = self.predict_chunk(hist, {k: v[idx] for k, v in self._frames.items()})
            self._queue[idx] = chunk[:, : self.Te]
            self._qpos[need] = 0
        rows = torch.arange(obs.shape[0], device=obs.device)
        out = self._queue[rows, torch.as_tensor(self._qpos, device=obs.device)]
        self._qpos += 1
        return out

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear histories and queues of ``env_ids`` (``None``: all envs)."""
        ObservationFrontend.reset(self, env_ids)  # the frame history (also as FlowPolicy.reset)
        if env_ids is None or self._hist is None:
            self._hist = None
            return
        ids = np.asarray(env_ids, np.int64).reshape(-1)
        if ids.size and ids.max() >= self._qpos.shape[0]:
            self._hist = None  # a new, larger batch: restart on the next call
            return
        self._fresh[ids] = True
        self._qpos[ids] = self.Te


def _repeat_step(x: torch.Tensor, To: int) -> torch.Tensor:
    """One step ``(N, ...)`` as a history of ``To`` copies ``(N, To, ...)``."""
    return x[:, None].repeat(1, To, *([1] * (x.ndim - 1))).clone()


def _roll(hist: torch.Tensor, x: torch.Tensor, fresh: torch.Tensor) -> torch.Tensor:
    """History ``(N, To, ...)`` shifted by the new step ``x (N, ...)``; rows ``fresh (N,)`` restart from it."""
    rolled = torch.cat([hist[:, 1:], x[:, None]], dim=1)
    mask = fresh.view(-1, *([1] * (hist.ndim - 1)))
    return torch.where(mask, x[:, None].expand_as(hist), rolled)


def check_no_frame_stack(frontend: Mapping) -> None:
    """Refuse ``frame_stack != 1`` for a chunk policy (its history is ``To`` encoded steps).

    Raises:
        ConfigError: ``frame_stack`` other than 1.
    """
    k = int(frontend.get("frame_stack", 1))
    if k != 1:
        raise ConfigError(f"a chunk policy conditions on obs_horizon (To) encoded frames, it does not stack them "
                          f"(frame_stack={k}): set agent.model.obs_horizon instead")


def as_step_history(obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor] | None]:
    """``(B, Do)`` and frames ``(B, H, W, C)`` (one step) -> ``(B, 1, Do)`` and ``(B, 1, H, W, C)``; histories
    ``(B, To, ...)`` unchanged."""
    if obs.ndim == 2:
        obs = obs[:, None]
        images = None if images is None else {k: v[:, None] if v.ndim == 4 else v for k, v in images.items()}
    return obs, None if images is None else dict(images)


def _from_pixel_head(state_dict: dict, prefix: str, *args) -> None:
    """``load_state_dict`` pre-hook: a former ``PixelDiffusionPolicy``'s weights (its chunk model under ``head.``)
    in this class's keys (:data:`_PIXEL_HEAD_KEYS`)."""
    for key in list(state_dict):
        for old, new in _PIXEL_HEAD_KEYS.items():
            if key.startswith(prefix + old):
                value = state_dict.pop(key)
                if new is not None:
                    state_dict[prefix + new + key[len(prefix + old):]] = value
                break
