"""Behaviour cloning on cameras: image encoder + MLP actor, preprocessing inside the policy.

The deployable :class:`PixelBCPolicy` takes the raw inputs a robot or env gives (the
flat state ``(B, Ds)`` in env units and uint8 frames ``(B, H, W, C)`` per camera) and returns
raw env actions ``(B, Da)``: state normalisation, frame scaling and the action scaler are
all inside it (buffers in its ``state_dict``), so a checkpoint or a TorchScript export needs
nothing else. :class:`PixelBCAgent` trains it on batches whose cameras travel in
``Batch.extras`` (:meth:`robotrl.data.Batch.images`).

Symbols: ``B`` batch, ``Ds`` state size, ``Da`` action size, ``H, W, C`` frame size.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import torch

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.bc.loss import gaussian_nll_loss, mse_loss
from robotrl.agents.bc.networks import BCActor
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.utils import set_generator_state
from robotrl.vision.frontend import PixelPolicyFrontend

__all__ = ["PixelBCPolicy", "PixelBCAgent"]


class PixelBCPolicy(PixelPolicyFrontend):
    """``(state (B, Ds), {camera: uint8 (B, H, W, k·C)})`` raw -> ``(B, Da)`` raw action (``k = 1``: ``(B, H, W, C)``).

    Args:
        image_shapes: cameras ``{key: (H, W, C)}``.
        state_dim: ``Ds`` (0: cameras only).
        action_dim: ``Da``.
        hidden, act, gaussian, layer_norm: the :class:`~robotrl.agents.bc.networks.BCActor`.
        encoder, pooling, feature_dim, channels, encoder_weights, freeze_encoder, augment_pad:
            the :class:`~robotrl.vision.encoders.PixelEncoder` (``encoder_weights``: a local
            file for ``encoder="resnet10"``; the saved policy carries the weights itself).
        obs_clip: clamp the normalised state to ``±obs_clip``.
        state_layout: the env's state :class:`~robotrl.data.spaces.FlatLayout` JSON, so the policy
            also acts on raw ``Dict`` observations (:meth:`~robotrl.vision.frontend.PixelPolicyFrontend.act_observation`).
        frame_stack: ``k`` frames per camera: ``forward`` then takes uint8 ``(B, H, W, k·C)`` stacks
            (:mod:`robotrl.vision.stack`).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int,
                 hidden: Sequence[int] = (256, 256), *, act: str = "relu", gaussian: bool = False, layer_norm: bool = False,
                 encoder: str = "drq", pooling: str = "flatten", feature_dim: int = 50, channels: int = 32,
                 encoder_weights: str | None = None, freeze_encoder: bool = False, augment_pad: int = 0,
                 obs_clip: float | None = 10.0, state_layout: str | None = None, frame_stack: int = 1):
        super().__init__(image_shapes, state_dim, action_dim, encoder=encoder, pooling=pooling, feature_dim=feature_dim,
                         channels=channels, encoder_weights=encoder_weights, freeze_encoder=freeze_encoder,
                         augment_pad=augment_pad, obs_clip=obs_clip, state_layout=state_layout, frame_stack=frame_stack,
                         hidden=[int(h) for h in hidden], act=act,
                         gaussian=bool(gaussian), layer_norm=bool(layer_norm))
        self.actor = BCActor(self.encoder.out_dim, action_dim, hidden, act=act, gaussian=gaussian, layer_norm=layer_norm)

    def distribution(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised-space ``(mean, log_std)`` ``(B, Da)`` for raw inputs."""
        return self.actor(self.features(state, images))

    def forward(self, state: torch.Tensor, images: dict[str, torch.Tensor]) -> torch.Tensor:
        """Deterministic raw action ``(B, Da)``."""
        mean, _ = self.distribution(state, images)
        return self.action_scaler.unnormalize(mean)


class PixelBCAgent(OffPolicyAgentBase):
    """Behaviour cloning from cameras (+ state): MSE or Gaussian NLL in normalised action space.

    Args:
        image_shapes, state_dim, action_dim: sizes (from the dataset / env).
        obs_normalizer: state statistics (``None`` when ``state_dim == 0``).
        action_scaler: action bounds.
        lr, weight_decay, max_grad_norm: AdamW settings.
        device, seed: torch device; seed of the exploration noise.
        policy_kwargs: the :class:`PixelBCPolicy` architecture (``encoder``, ``pooling``,
            ``augment_pad``, ``hidden``, ``frame_stack``, ...).
    """

    def __init__(self, image_shapes: Mapping[str, Sequence[int]], state_dim: int, action_dim: int, *,
                 obs_normalizer: ObservationNormalizer | None, action_scaler: ActionScaler, lr: float = 3e-4,
                 weight_decay: float = 1e-4, max_grad_norm: float | None = 1.0, explore_std: float = 0.1,
                 device: str | torch.device = "cpu", seed: int = 0, **policy_kwargs):
        self.device = torch.device(device)
        self.policy = PixelBCPolicy(image_shapes, state_dim, action_dim, **policy_kwargs)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        self.frame_stack = self.policy.frame_stack
        self.params = [p for p in self.policy.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=lr, weight_decay=weight_decay)
        self.max_grad_norm, self.explore_std = max_grad_norm, explore_std
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One gradient step on a transition batch with cameras; returns detached ``loss``, ``mse``, ``grad_norm``."""
        self.policy.train()
        images = {k: v.to(self.device) for k, v in batch.images().items()}
        target = self.policy.action_scaler.normalize(batch.actions.to(self.device)).clamp(-1.0, 1.0)
        mean, log_std = self.policy.distribution(batch.observations.to(self.device), images)
        loss = gaussian_nll_loss(mean, log_std, target) if log_std is not None else mse_loss(mean, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.policy.eval()
        return {"loss": loss.detach(), "mse": mse_loss(mean.detach(), target), "grad_norm": gn.detach()}

    @torch.no_grad()
    def act(self, state: np.ndarray, images: Mapping[str, np.ndarray]) -> np.ndarray:
        """Deterministic raw actions for NumPy inputs ``(N, Ds)`` and ``{key: uint8 (N, H, W, k·C)}`` (stacked frames,
        as :meth:`PixelBCPolicy.forward` takes them)."""
        self.policy.eval()
        s = torch.as_tensor(np.asarray(state, np.float32), device=self.device)
        imgs = {k: torch.as_tensor(np.asarray(v), device=self.device) for k, v in images.items()}
        return self.policy(s, imgs).cpu().numpy()

    def state_dict(self) -> dict:
        """Policy weights, normalisers and optimizer state."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(), "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_generator_state(self.gen, state["gen"])
