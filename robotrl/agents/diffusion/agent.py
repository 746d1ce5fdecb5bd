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

With cameras (``image_shapes``; Chi et al.'s vision policy) the windows carry frames ``(B, To, H, W, C)`` per
camera (:meth:`~robotrl.data.batch.Batch.images`), ``o`` is each step's encoder features, the encoder is
trained end to end with the denoiser (``agent.model`` is then a copy of the whole policy, encoder included,
and the EMA covers both), and the network initialisation is seeded by ``seed`` (the global RNG untouched).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import FRONTEND_ARCHITECTURE
from robotrl.agents.diffusion.loss import noise_prediction_loss
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.diffusion.training import ChunkBCAgent, chunk_inputs
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer


class DiffusionAgent(ChunkBCAgent):
    """DDPM behaviour cloning over action chunks, from states or (``image_shapes``) cameras plus the state.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras; 0: cameras only), ``Da`` (derived by
            the trainer).
        obs_normalizer, action_scaler: dataset statistics / env bounds (``obs_normalizer`` ``None``: no state).
        obs_horizon, action_horizon, act_steps, denoising_steps, denoiser, denoiser_kwargs,
            sampler, ddim_steps, eval_min_std, ddim_eta, obs_clip, x0_clip, eps_clip: see
            :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy`.
        lr, weight_decay, max_grad_norm: AdamW settings and max gradient norm (``None``: off).
        ema_decay: EMA decay of the deployed weights; ``ema_start``: updates before which
            the EMA copies the weights.
        device: torch device; seed: seed of the diffusion noise generator (and, with cameras, of the network
            initialisation).
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad,
            frame_stack, state_layout: the observation spec's cameras and their encoder
            (:class:`~robotrl.vision.frontend.ObservationFrontend`; ``image_shapes=None``: a state agent, the other
            camera options unused; ``frame_stack`` must be 1).
    """

    ARCHITECTURE_KEYS = ("obs_horizon", "action_horizon", "act_steps", "denoising_steps", "denoiser",
                         "denoiser_kwargs", "obs_clip", *FRONTEND_ARCHITECTURE)

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 denoising_steps: int = 20, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 sampler: str = "ddpm", ddim_steps: int = 5, eval_min_std: float = 1e-3, ddim_eta: float = 0.0,
                 obs_clip: float | None = 10.0, x0_clip: float | None = 1.0, eps_clip: float = 3.0,
                 lr: float = 1e-4, weight_decay: float = 1e-6, max_grad_norm: float | None = 1.0,
                 ema_decay: float = 0.995, ema_start: int = 1000, device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq",
                 pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 frame_stack: int = 1, state_layout: str | None = None):
        self.device = torch.device(device)
        cameras = camera_options(image_shapes=image_shapes, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                                 channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                                 augment_pad=augment_pad, frame_stack=frame_stack, state_layout=state_layout)
        with seeded_init(seed, bool(image_shapes)):
            self.policy = DiffusionPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                          act_steps=act_steps, denoising_steps=denoising_steps, denoiser=denoiser,
                                          denoiser_kwargs=denoiser_kwargs, sampler=sampler, ddim_steps=ddim_steps,
                                          eval_min_std=eval_min_std, ddim_eta=ddim_eta, obs_clip=obs_clip,
                                          x0_clip=x0_clip, eps_clip=eps_clip, **cameras)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        # trained: the denoiser (a state policy, as before cameras were an option) or the whole policy, encoder
        # included; the deployed self.policy (or its denoiser) is the EMA
        self._init_training(self.policy.denoiser, lr=lr, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                            ema_decay=ema_decay, ema_start=ema_start, seed=seed)

    # ------------------------------------------------------------------ training
    def loss(self, batch: Batch) -> torch.Tensor:
        """ε-prediction loss of ``self.model`` on a sequence batch (obs ``(B,To,Do)``, actions ``(B,Ta,Da)``, mask
        ``(B,Ta)``; with cameras frames ``{key: (B, To, H, W, C)}``, the encoder in the graph; a flat batch:
        ``To = Ta = 1``)."""
        cams = self.policy.has_cameras
        p, net = (self.model, self.model.denoiser) if cams else (self.policy, self.model)
        obs, x0, mask = chunk_inputs(p, batch, self.device)
        images = step_frames(batch, self.device) if cams else None
        B = x0.shape[0]
        k = torch.randint(0, p.K, (B,), device=self.device, generator=self.gen)
        eps = torch.randn(x0.shape, device=self.device, generator=self.gen)
        x_k = p.schedule.q_sample(x0, k, eps)
        return noise_prediction_loss(net(x_k, k, p.condition(obs, images)), eps, mask)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Stateless exploration: first action of a fresh stochastic DDPM chunk per env ``(N, Da)`` raw.

        (``To = 1`` semantics; chunked, history-aware acting is ``agent.policy``'s job.)
        """
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        return self.policy.predict_chunk(x[:, None].expand(-1, self.policy.To, -1), sampler="ddpm")[:, 0].cpu().numpy()


def camera_options(*, image_shapes: Mapping[str, Sequence[int]] | None, **options) -> dict:
    """The policy's camera keyword arguments: ``image_shapes`` and the encoder ``options`` (``state_layout``
    always, it is harmless for a state policy); nothing else without cameras, so a state policy's spec is as it was."""
    layout = {"state_layout": options.pop("state_layout", None)}
    return {"image_shapes": image_shapes, **options, **layout} if image_shapes else layout


@contextlib.contextmanager
def seeded_init(seed: int, on: bool) -> Iterator[None]:
    """With ``on``: the block's network initialisation seeded by ``seed``, the global torch RNG untouched (a camera
    policy's, as the former pixel agents did); off: the global RNG, as state policies always were."""
    if not on:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def step_frames(batch: Batch, device: torch.device) -> dict[str, torch.Tensor]:
    """A sequence batch's frames per step ``{key: uint8 (B, To, H, W, C)}`` on ``device`` (a flat batch's
    ``(B, H, W, C)`` as ``To = 1``)."""
    return {k: (v if v.ndim == 5 else v[:, None]).to(device) for k, v in batch.images().items()}
