"""Flow-matching behaviour cloning: rectified-flow training on ``(To, Ta)`` windows with EMA.

Rectified flow (Liu et al. 2023) as the ReinFlow repository pretrains its policies
(ReinFlow/ReinFlow ``model/flow/reflow.py``, ``agent/pretrain/train_reflow_agent.py``:
uniform ``t``, MSE on the velocity, EMA 0.995). Symbols: ``B`` batch, ``To``/``Do``
observation history/size, ``Ta``/``Da`` chunk length/action size, ``K`` Euler steps.

The trainer calls :meth:`FlowAgent.sample_batch` (``buffer.sample_sequences(B, To, Ta)``:
observations ``(B, To, Do)``, actions ``(B, Ta, Da)``, mask ``(B, Ta)``) and then
:meth:`update`: ``x1`` = normalised action chunk clamped to ``[-1, 1]``, ``x0 ~ N(0, I)``,
``t ~ U[0, 1)``, ``x_t = (1-t)·x0 + t·x1``, loss ``‖v_θ(x_t, t, o) − (x1 − x0)‖²`` over the
valid chunk entries. The trained network is ``agent.model``; the deployable
``agent.policy`` holds its exponential moving average (what evaluation and checkpoints'
``policy`` use), exactly as :class:`~robotrl.agents.diffusion.DiffusionAgent` does.

``shortcut=True`` trains a shortcut model (Frans et al. 2024; :mod:`robotrl.agents.flow.shortcut`)
with :func:`~robotrl.agents.flow.loss.shortcut_loss`: a ``shortcut_fraction`` of each batch
(paper: 1/4; the reference code's ``bootstrap_every = 8``: 1/8) trains self-consistency at step
sizes ``d ∈ {1, …, 2/M}``, the rest flow matching at ``d = 0``. The self-consistency targets come
from the EMA network ``policy.velocity`` (``shortcut_ema_targets``, the reference's default
``bootstrap_ema = 1``: a slowly moving target network, the deployed one; before ``ema_start`` it
is a copy of the trained network), or from the trained network itself.

With cameras (``image_shapes``) the windows carry frames ``(B, To, H, W, C)`` and ``o`` is each step's encoder
features, the encoder trained end to end with the velocity network and covered by the EMA, as the diffusion
agent does (:mod:`robotrl.agents.diffusion.agent`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import FRONTEND_ARCHITECTURE
from robotrl.agents.diffusion.agent import camera_options, seeded_init, step_frames
from robotrl.agents.diffusion.training import ChunkBCAgent, chunk_inputs
from robotrl.agents.flow.loss import flow_matching_loss, shortcut_loss
from robotrl.agents.flow.policy import FlowPolicy
from robotrl.agents.flow.sampling import interpolate
from robotrl.agents.flow.shortcut import shortcut_times
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError


class FlowAgent(ChunkBCAgent):
    """Rectified-flow behaviour cloning over action chunks.

    Args:
        obs_dim, action_dim: ``Do``, ``Da`` (derived by the trainer).
        obs_normalizer, action_scaler: dataset statistics / env bounds.
        obs_horizon, action_horizon, act_steps, flow_steps, denoiser, denoiser_kwargs, obs_clip,
            x_clip: see :class:`~robotrl.agents.flow.policy.FlowPolicy`.
        lr, weight_decay, max_grad_norm: AdamW settings and max gradient norm (``None``: off).
        ema_decay: EMA decay of the deployed weights; ``ema_start``: updates before which
            the EMA copies the weights.
        shortcut, shortcut_max_steps: a shortcut model and its ``M`` (:class:`FlowPolicy`).
        shortcut_fraction: share of each batch trained for self-consistency (in ``[0, 1]``).
        shortcut_ema_targets: self-consistency targets from the EMA network (else the trained one).
        device: torch device; seed: seed of the noise / time generator (and, with cameras, of the network
            initialisation).
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad,
            frame_stack, state_layout: the observation spec's cameras and their encoder
            (:class:`~robotrl.vision.frontend.ObservationFrontend`; ``image_shapes=None``: a state agent).

    Raises:
        ConfigError: bad policy settings (:class:`FlowPolicy`) or ``shortcut_fraction``.
    """

    ARCHITECTURE_KEYS = ("obs_horizon", "action_horizon", "act_steps", "denoiser", "denoiser_kwargs", "obs_clip",
                         "shortcut", "shortcut_max_steps", *FRONTEND_ARCHITECTURE)

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 flow_steps: int = 4, denoiser: str = "mlp", denoiser_kwargs: dict | None = None,
                 obs_clip: float | None = 10.0, x_clip: float | None = 1.0, lr: float = 1e-4,
                 weight_decay: float = 1e-6, max_grad_norm: float | None = 1.0, ema_decay: float = 0.995,
                 ema_start: int = 1000, shortcut: bool = False, shortcut_max_steps: int = 128,
                 shortcut_fraction: float = 0.25, shortcut_ema_targets: bool = True,
                 device: str | torch.device = "cpu", seed: int = 0,
                 image_shapes: Mapping[str, Sequence[int]] | None = None, encoder: str = "drq",
                 pooling: str = "spatial_softmax", feature_dim: int = 64, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 frame_stack: int = 1, state_layout: str | None = None):
        if not 0.0 <= shortcut_fraction <= 1.0:
            raise ConfigError(f"agent.model.shortcut_fraction must be in [0, 1], got {shortcut_fraction}")
        self.device = torch.device(device)
        cameras = camera_options(image_shapes=image_shapes, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                                 channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                                 augment_pad=augment_pad, frame_stack=frame_stack, state_layout=state_layout)
        with seeded_init(seed, bool(image_shapes)):
            self.policy = FlowPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                     act_steps=act_steps, flow_steps=flow_steps, denoiser=denoiser,
                                     denoiser_kwargs=denoiser_kwargs, obs_clip=obs_clip, x_clip=x_clip,
                                     shortcut=shortcut, shortcut_max_steps=shortcut_max_steps, **cameras)
        self.shortcut, self.shortcut_fraction = bool(shortcut), float(shortcut_fraction)
        self.shortcut_ema_targets = bool(shortcut_ema_targets)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        # trained: the velocity net (a state policy, as before cameras were an option) or the whole policy,
        # encoder included; the deployed self.policy (or its velocity net) is the EMA
        self._init_training(self.policy.velocity, lr=lr, weight_decay=weight_decay, max_grad_norm=max_grad_norm,
                            ema_decay=ema_decay, ema_start=ema_start, seed=seed)

    # ------------------------------------------------------------------ training
    def loss(self, batch: Batch) -> torch.Tensor:
        """Flow-matching (or shortcut) loss of ``self.model`` on a sequence batch (obs ``(B,To,Do)``,
        actions ``(B,Ta,Da)``; with cameras frames ``{key: (B, To, H, W, C)}``, the encoder in the graph)."""
        cams = self.policy.has_cameras
        p, net = (self.model, self.model.velocity) if cams else (self.policy, self.model)
        obs, x1, mask = chunk_inputs(p, batch, self.device)
        cond = p.condition(obs, step_frames(batch, self.device) if cams else None)
        B = x1.shape[0]
        if self.shortcut:
            t, d = shortcut_times(B, round(self.shortcut_fraction * B), net.max_steps, device=self.device,
                                  generator=self.gen)
            x0 = torch.randn(x1.shape, device=self.device, generator=self.gen)
            target_net = self.policy.velocity if self.shortcut_ema_targets else net
            return shortcut_loss(net, target_net, x0, x1, cond, t, d, mask)
        t = torch.rand((B,), device=self.device, generator=self.gen)
        x0 = torch.randn(x1.shape, device=self.device, generator=self.gen)
        x_t, v = interpolate(x0, x1, t)
        return flow_matching_loss(net(x_t, t, cond), v, mask)

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Stateless acting: first action of a fresh chunk per env ``(N, Da)`` raw (``To = 1`` semantics)."""
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        return self.policy.predict_chunk(x[:, None].expand(-1, self.policy.To, -1))[:, 0].cpu().numpy()
