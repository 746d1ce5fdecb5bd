"""Behaviour cloning (MLP, deterministic or Gaussian): update and acting.

Pomerleau 1988 / the BC baseline of D4RL and CORL (github.com/tinkoff-ai/CORL). Each
:meth:`BCAgent.update` takes a transition :class:`~robotrl.data.batch.Batch`
(``observations (B, Do)``, ``actions (B, Da)`` raw), normalises both with the policy's
own normalisers, and minimises MSE (deterministic) or Gaussian NLL.

Cameras are an option of the observation (``image_shapes``, :class:`~robotrl.vision.frontend.ObservationFrontend`):
the batch then carries each camera's frames in ``Batch.extras`` (:meth:`~robotrl.data.batch.Batch.images`,
uint8 ``(B, H, W, k·C)``), the encoder is trained end to end with the actor (DrQ random shift inside it when
``augment_pad > 0``), and the agent learns offline only (no :meth:`BCAgent.explore`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import FRONTEND_ARCHITECTURE, OffPolicyAgentBase
from robotrl.agents.bc.loss import gaussian_nll_loss, mse_loss
from robotrl.agents.bc.policy import BCPolicy
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.policy import act as act_raw
from robotrl.utils import set_generator_state


class BCAgent(OffPolicyAgentBase):
    """MLP behaviour cloning, from states or (with ``image_shapes``) from cameras plus the state.

    Args:
        obs_dim, action_dim: ``Do`` (the flat state beside any cameras; 0: cameras only), ``Da`` (derived from
            env and dataset by the trainer).
        obs_normalizer, action_scaler: statistics from the dataset / env bounds (``obs_normalizer`` ``None``:
            no state).
        hidden, act, gaussian, dropout, layer_norm, obs_clip: policy architecture.
        image_shapes, encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad, frame_stack, state_layout:
            the observation spec's cameras and their encoder
            (:class:`~robotrl.vision.frontend.ObservationFrontend`; ``image_shapes=None``: a state agent, the
            other camera options unused).
        lr, weight_decay: AdamW settings.
        max_grad_norm: max gradient norm (``None``: off).
        explore_std: std of Gaussian noise (normalised units) on deterministic
            actions when acting online; Gaussian policies sample instead.
        device: torch device.
        seed: seed of the exploration noise.
    """

    ARCHITECTURE_KEYS = ("hidden", "act", "gaussian", "dropout", "layer_norm", "obs_clip", *FRONTEND_ARCHITECTURE)

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        *,
        obs_normalizer: ObservationNormalizer,
        action_scaler: ActionScaler,
        hidden: Sequence[int] = (256, 256),
        act: str = "relu",
        gaussian: bool = False,
        dropout: float = 0.0,
        layer_norm: bool = False,
        obs_clip: float | None = 10.0,
        lr: float = 1e-3,
        weight_decay: float = 1e-4,
        max_grad_norm: float | None = 1.0,
        explore_std: float = 0.1,
        device: str | torch.device = "cpu",
        seed: int = 0,
        image_shapes: Mapping[str, Sequence[int]] | None = None,
        encoder: str = "drq",
        pooling: str = "flatten",
        feature_dim: int = 50,
        channels: int = 32,
        encoder_weights: str | None = None,
        freeze_encoder: bool = False,
        augment_pad: int = 0,
        frame_stack: int = 1,
        state_layout: str | None = None,
    ):
        self.device = torch.device(device)
        cameras = dict(image_shapes=image_shapes, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                       channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                       augment_pad=augment_pad, frame_stack=frame_stack) if image_shapes else {}
        self.policy = BCPolicy(obs_dim, action_dim, hidden, act=act, gaussian=gaussian, dropout=dropout,
                               layer_norm=layer_norm, obs_clip=obs_clip, state_layout=state_layout, **cameras)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        self.frame_stack = self.policy.frame_stack
        # the actor's parameters (a state agent: the same list, in the same order); with cameras also the encoder's
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.explore_std = explore_std
        self.gaussian = gaussian
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One gradient step on ``batch`` (transitions; with cameras their frames in ``batch.extras``, the encoder
        trained too). Returns detached scalar tensors ``loss``, ``mse``, ``grad_norm``."""
        self.policy.train()
        obs = batch.observations.to(self.device)
        images = {k: v.to(self.device) for k, v in batch.images().items()} if self.policy.has_cameras else None
        target = self.policy.action_scaler.normalize(batch.actions.to(self.device)).clamp(-1.0, 1.0)
        mean, log_std = self.policy.distribution(obs, images)
        loss = gaussian_nll_loss(mean, log_std, target) if self.gaussian else mse_loss(mean, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.policy.eval()
        with torch.no_grad():
            mse = mse_loss(mean, target)
        # detached tensors: the trainer converts them only on logging steps (no per-step GPU sync)
        return {"loss": loss.detach(), "mse": mse, "grad_norm": gn.detach()}

    @property
    def explores_online(self) -> bool:
        """``False`` from cameras: this agent's stateless :meth:`explore` keeps no frame history, so it learns
        offline only there (the build path refuses online steps)."""
        return not self.policy.has_cameras

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Actions ``(N, Da)`` raw: Gaussian samples, or the mean plus ``explore_std`` noise."""
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        mean, log_std = self.policy.distribution(x)
        std = log_std.exp() if log_std is not None else torch.full_like(mean, self.explore_std)
        a = (mean + std * torch.randn(mean.shape, generator=self.gen, device=self.device)).clamp(-1, 1)
        return self.policy.action_scaler.unnormalize(a).cpu().numpy()

    @torch.no_grad()
    def act(self, obs: np.ndarray | Mapping, images: Mapping[str, np.ndarray] | None = None) -> np.ndarray:
        """Deterministic raw actions for NumPy observations ``(N, Do)`` (a camera agent: with ``images``
        ``{key: uint8 (N, H, W, k·C)}``, stacked as :meth:`BCPolicy.forward` takes them, or raw ``Dict``
        observations alone, split and stacked by the policy, :meth:`BCPolicy.act_observation`)."""
        if images is None:
            return act_raw(self.policy, obs)
        self.policy.eval()
        s = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        imgs = {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in images.items()}
        return self.policy(s, imgs).cpu().numpy()

    def state_dict(self) -> dict:
        """Policy weights, normalisers and optimizer state."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_generator_state(self.gen, state["gen"])
