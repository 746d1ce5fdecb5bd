"""Diffusion policy on cameras: DDPM over action chunks conditioned on image features and the state.

Diffusion Policy (Chi et al. 2023, real-stanford/diffusion_policy: a vision encoder per camera, trained end to end
with the noise network, its features and the low-dimensional state as the denoiser's condition, random-crop
augmentation, an EMA of the whole model deployed). Here the encoder is the shared
:class:`~robotrl.vision.encoders.PixelEncoder` (DrQ conv or a local ResNet-10, spatial-softmax pooling, random
shift) and the chunk model is :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy` itself, composed: its
"observation" is the feature vector ``z = enc(frames, normalize(state)) (F + Ds)`` of each history step, so its
DDPM/DDIM sampling, chunk queues and histories are reused unchanged.

Symbols: ``B``/``N`` batch / envs, ``To`` observation history, ``Ta`` predicted chunk, ``Te`` executed steps,
``Ds`` state size, ``Da`` action size, ``H, W, C`` frame size, ``F`` image features, ``K`` denoising steps.

Training (:class:`PixelDiffusionAgent`): ``(To, Ta)`` windows from the camera buffer (frames ``(B, To, H, W, C)``),
``ε``-prediction loss ``‖ε_θ(√ᾱ_k a + √(1−ᾱ_k) ε, k, z_{1..To}) − ε‖²`` with the gradient into the encoder; the
deployed :class:`PixelDiffusionPolicy` is the EMA of encoder and denoiser together. It takes the raw inputs
(``forward(state (N, Ds), {camera: uint8 (N, H, W, C)}) -> (N, Da)``, once per env step; raw ``Dict``
observations through ``act_observation``) with the state normaliser, frame scaling and action scaler inside.

Export (``robotrl export``): :meth:`PixelDiffusionPolicy.export_module` is the chunk with fixed noise,
``(state (B, Ds), {camera: uint8 (B, H, W, C)}) -> (B, Ta, Da)`` (:class:`PixelDiffusionChunkExport`; ``To > 1``: ``(B, To, ...)`` histories),
traced to TorchScript and ONNX with image inputs; a deploy bundle of it serves ``Te`` actions per chunk.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.diffusion.export import DiffusionChunkExport
from robotrl.agents.diffusion.loss import noise_prediction_loss
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.diffusion.training import chunk_inputs, ema_gradient_step, load_trainer_state, trainer_state
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError
from robotrl.vision.frontend import PixelPolicyFrontend

__all__ = ["PixelDiffusionPolicy", "PixelDiffusionAgent", "PixelDiffusionChunkExport"]


class PixelDiffusionPolicy(PixelPolicyFrontend):
    """Image-conditioned DDPM/DDIM chunk policy: ``(state (N, Ds), {camera: uint8 (N, H, W, C)})`` -> ``(N, Da)`` raw.

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``; state_dim: ``Ds``; action_dim: ``Da``.
        obs_horizon, action_horizon, act_steps, denoising_steps, denoiser, denoiser_kwargs, sampler, ddim_steps,
            eval_min_std, ddim_eta, x0_clip, eps_clip: the chunk model,
            :class:`~robotrl.agents.diffusion.policy.DiffusionPolicy` (``To``, ``Ta``, ``Te``, ``K``, ...), on
            features of size ``F + Ds``.
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad, obs_clip,
            state_layout: the :class:`~robotrl.vision.frontend.PixelPolicyFrontend`.
        frame_stack: 1 only (kept in the spec as every pixel policy's; histories are ``To``).

    Raises:
        ConfigError: ``frame_stack != 1``.

    Attributes:
        To, Ta, Te: the chunk model's horizons (a residual base needs ``To = Te = 1``: load it with
            ``act_steps=1``).
        head: the chunk model (histories of features, chunk queues).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4, denoising_steps: int = 20,
                 denoiser: str = "mlp", denoiser_kwargs: dict | None = None, sampler: str = "ddpm", ddim_steps: int = 5,
                 eval_min_std: float = 1e-3, ddim_eta: float = 0.0, x0_clip: float | None = 1.0, eps_clip: float = 3.0,
                 encoder: str = "drq", pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 obs_clip: float | None = 10.0, state_layout: str | None = None, frame_stack: int = 1):
        if int(frame_stack) != 1:
            raise ConfigError(f"the pixel diffusion policy conditions on obs_horizon (To) encoded frames, it does not "
                              f"stack them (frame_stack={frame_stack}): set agent.model.obs_horizon instead")
        chunk = dict(obs_horizon=int(obs_horizon), action_horizon=int(action_horizon), act_steps=int(act_steps),
                     denoising_steps=int(denoising_steps), denoiser=denoiser, denoiser_kwargs=dict(denoiser_kwargs or {}),
                     sampler=sampler, ddim_steps=int(ddim_steps), eval_min_std=float(eval_min_std),
                     ddim_eta=float(ddim_eta), x0_clip=x0_clip, eps_clip=float(eps_clip))
        super().__init__(image_shapes, state_dim, action_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                         channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                         augment_pad=augment_pad, obs_clip=obs_clip, state_layout=state_layout, **chunk)
        # features are bounded (tanh) and the state already normalised: the chunk model's normaliser is the identity
        self.head = DiffusionPolicy(self.encoder.out_dim, action_dim, obs_clip=None, **chunk)
        self.To, self.Ta, self.Te = self.head.To, self.head.Ta, self.head.Te

    def set_normalizers(self, obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler) -> None:
        """Copy the state statistics and the action bounds (into the chunk model's scaler too)."""
        super().set_normalizers(obs_normalizer, action_scaler)
        self.head.action_scaler.load_state_dict(action_scaler.state_dict())

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return {**super().spec(), "denoiser_kwargs": dict(self._spec["denoiser_kwargs"])}

    # ------------------------------------------------------------------ conditioning
    def condition(self, state: torch.Tensor, images: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Denoiser condition ``(B, To, F + Ds)`` from raw histories: state ``(B, To, Ds)``, frames
        ``{key: uint8 (B, To, H, W, C)}`` (each step encoded alike; random shift in training mode)."""
        B, To = state.shape[:2]
        flat = {k: v.reshape(B * To, *v.shape[2:]) for k, v in images.items()}
        return self.features(state.reshape(B * To, state.shape[-1]), flat).view(B, To, -1)

    @torch.no_grad()
    def predict_chunk(self, state: torch.Tensor, images: Mapping[str, torch.Tensor], *,
                      sampler: str | None = None) -> torch.Tensor:
        """Stateless: raw histories (state ``(B, To, Ds)``, frames ``{key: (B, To, H, W, C)}``) -> raw chunk
        ``(B, Ta, Da)``."""
        return self.head.predict_chunk(self.condition(state, images), sampler=sampler)

    # ------------------------------------------------------------------ per-step acting
    @torch.no_grad()
    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """One raw action ``(N, Da)`` per env for raw ``(N, Ds)`` and ``{key: uint8 (N, H, W, C)}``; the chunk model
        keeps per-env feature histories ``(N, To, F + Ds)`` and action queues, sampling a chunk as a queue empties."""
        return self.head(self.features(state, images))

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear histories and queues of ``env_ids`` (``None``: all envs)."""
        super().reset(env_ids)
        self.head.reset(env_ids)

    # ------------------------------------------------------------------ export
    def export_module(self, seed: int = 0) -> nn.Module:
        """Traceable ``(state (B, Ds), {camera: uint8 (B, H, W, C)}) -> chunk (B, Ta, Da)`` with fixed noise, for
        TorchScript/ONNX export (:class:`PixelDiffusionChunkExport`; ``To > 1``: state ``(B, To, Ds)`` and frames
        ``(B, To, H, W, C)``, the last ``To`` steps oldest first).
        """
        return PixelDiffusionChunkExport(self, seed=seed)

    @property
    def chunk_len(self) -> int:
        """``Ta`` (export metadata)."""
        return self.Ta

    @property
    def act_steps(self) -> int:
        """``Te`` (export metadata: actions executed per chunk)."""
        return self.Te


class PixelDiffusionChunkExport(nn.Module):
    """The pixel diffusion policy's chunk as a plain function, for export: ``(state (B, Ds), {camera: uint8
    (B, H, W, C)}) -> chunk (B, Ta, Da)`` raw, the policy's encoder, normalisers and DDPM/DDIM chain with every random
    draw fixed at export time (:class:`~robotrl.agents.diffusion.export.DiffusionChunkExport` on the features).

    For a batch of one it equals :meth:`PixelDiffusionPolicy.predict_chunk` with a generator seeded like the export.

    Args:
        policy: the :class:`PixelDiffusionPolicy`.
        seed: seed of the fixed noise.
    """

    def __init__(self, policy: PixelDiffusionPolicy, seed: int = 0):
        super().__init__()
        self.policy = policy
        self.chain = DiffusionChunkExport(policy.head, seed=seed)

    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Raw ``(B, Ds)`` and ``{key: uint8 (B, H, W, C)}`` (``To = 1``), or the last ``To`` steps oldest first,
        ``(B, To, Ds)`` and ``{key: uint8 (B, To, H, W, C)}`` → raw chunk ``(B, Ta, Da)``."""
        if self.policy.To == 1:
            state, images = state[:, None], {k: v[:, None] for k, v in images.items()}
        z = self.policy.condition(state, images)  # (B, To, F + Ds)
        return self.chain.chunk(self.policy.head.condition(z))


class PixelDiffusionAgent(OffPolicyAgentBase):
    """Diffusion-policy behaviour cloning from cameras (+ state), encoder trained end to end, EMA deployed.

    Args:
        image_shapes, state_dim, action_dim: sizes (from the dataset / env).
        obs_normalizer: state statistics (``None`` without state); action_scaler: action bounds.
        lr, weight_decay, max_grad_norm: AdamW on encoder and denoiser; gradient clip (``None``: off).
        ema_decay, ema_start: EMA of the deployed policy (a plain copy for the first ``ema_start`` updates).
        device, seed: torch device; seed of the network initialisation and the diffusion noise.
        policy_kwargs: :class:`PixelDiffusionPolicy` settings (horizons, denoiser, sampler, encoder, augment_pad, ...).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler, lr: float = 1e-4,
                 weight_decay: float = 1e-6, max_grad_norm: float | None = 1.0, ema_decay: float = 0.995,
                 ema_start: int = 1000, device: str | torch.device = "cpu", seed: int = 0, **policy_kwargs):
        self.device = torch.device(device)
        with torch.random.fork_rng(devices=[]):  # seeded network initialisation, global RNG untouched
            torch.manual_seed(seed)
            self.policy = PixelDiffusionPolicy(image_shapes, state_dim, action_dim, **policy_kwargs)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.model = copy.deepcopy(self.policy).train()  # trained; self.policy is its EMA
        self.policy.requires_grad_(False)
        self.optimizer = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=lr,
                                           weight_decay=weight_decay)
        self.max_grad_norm, self.ema_decay, self.ema_start = max_grad_norm, float(ema_decay), int(ema_start)
        self.num_updates = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def sample_batch(self, buffer, batch_size: int) -> Batch:
        """``(To, Ta)`` windows with frames ``(B, To, H, W, C)`` (:meth:`~robotrl.data.ReplayBuffer.sample_sequences`)."""
        return buffer.sample_sequences(batch_size, self.policy.To, self.policy.Ta)

    def loss(self, batch: Batch) -> torch.Tensor:
        """ε-prediction loss of ``self.model`` (encoder included) on a sequence batch: state ``(B, To, Ds)``, frames
        ``{key: (B, To, H, W, C)}``, actions ``(B, Ta, Da)``, mask ``(B, Ta)`` (a flat batch: ``To = Ta = 1``)."""
        m, dev = self.model, self.device
        state, x0, mask = chunk_inputs(m, batch, dev)
        images = {k: (v if v.ndim == 5 else v[:, None]).to(dev) for k, v in batch.images().items()}
        k = torch.randint(0, m.head.K, (x0.shape[0],), device=dev, generator=self.gen)
        eps = torch.randn(x0.shape, device=dev, generator=self.gen)
        x_k = m.head.schedule.q_sample(x0, k, eps)
        return noise_prediction_loss(m.head.denoiser(x_k, k, m.condition(state, images)), eps, mask)

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One AdamW step on encoder and denoiser, then the EMA; returns detached ``loss`` and ``grad_norm``."""
        self.model.train()
        return ema_gradient_step(self, self.loss(batch), self.policy)

    def state_dict(self) -> dict:
        """Trained and EMA weights (normalisers inside), optimizer, update count, RNG."""
        return trainer_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_trainer_state(self, state)
