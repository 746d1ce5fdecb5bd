"""Behaviour cloning (MLP, deterministic or Gaussian): update and acting.

Pomerleau 1988 / the BC baseline of D4RL and CORL (github.com/tinkoff-ai/CORL). Each
:meth:`BCAgent.update` takes a transition :class:`~robotrl.data.batch.Batch`
(``observations (B, Do)``, ``actions (B, Da)`` raw), normalises both with the policy's
own normalisers, and minimises MSE (deterministic) or Gaussian NLL.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.bc.loss import gaussian_nll_loss, mse_loss
from robotrl.agents.bc.policy import BCPolicy
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.policy import act
from robotrl.utils import set_generator_state


class BCAgent(OffPolicyAgentBase):
    """MLP behaviour cloning.

    Args:
        obs_dim, action_dim: ``Do``, ``Da`` (derived from env and dataset by the trainer).
        obs_normalizer, action_scaler: statistics from the dataset / env bounds.
        hidden, act, gaussian, dropout, layer_norm, obs_clip: policy architecture.
        lr, weight_decay: AdamW settings.
        max_grad_norm: max gradient norm (``None``: off).
        explore_std: std of Gaussian noise (normalised units) on deterministic
            actions when acting online; Gaussian policies sample instead.
        device: torch device.
        seed: seed of the exploration noise.
    """

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
    ):
        self.device = torch.device(device)
        self.policy = BCPolicy(obs_dim, action_dim, hidden, act=act, gaussian=gaussian, dropout=dropout,
                               layer_norm=layer_norm, obs_clip=obs_clip)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device)
        self.optimizer = torch.optim.AdamW(self.policy.actor.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm = max_grad_norm
        self.explore_std = explore_std
        self.gaussian = gaussian
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def update(self, batch: Batch, step: int) -> dict[str, float]:
        """One gradient step on ``batch`` (transitions). Returns detached scalar tensors ``loss``, ``mse``, ``grad_norm``."""
        self.policy.train()
        obs = batch.observations.to(self.device)
        target = self.policy.action_scaler.normalize(batch.actions.to(self.device)).clamp(-1.0, 1.0)
        mean, log_std = self.policy.distribution(obs)
        loss = gaussian_nll_loss(mean, log_std, target) if self.gaussian else mse_loss(mean, target)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(self.policy.actor.parameters(), self.max_grad_norm or float("inf"))
        self.optimizer.step()
        self.policy.eval()
        with torch.no_grad():
            mse = mse_loss(mean, target)
        # detached tensors: the trainer converts them only on logging steps (no per-step GPU sync)
        return {"loss": loss.detach(), "mse": mse, "grad_norm": gn.detach()}

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Actions ``(N, Da)`` raw: Gaussian samples, or the mean plus ``explore_std`` noise."""
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        mean, log_std = self.policy.distribution(x)
        std = log_std.exp() if log_std is not None else torch.full_like(mean, self.explore_std)
        a = (mean + std * torch.randn(mean.shape, generator=self.gen, device=self.device)).clamp(-1, 1)
        return self.policy.action_scaler.unnormalize(a).cpu().numpy()

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic raw actions for NumPy observations."""
        return act(self.policy, obs)

    def state_dict(self) -> dict:
        """Policy weights, normalisers and optimizer state."""
        return {"policy": self.policy.state_dict(), "optimizer": self.optimizer.state_dict(),
                "gen": self.gen.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        self.policy.load_state_dict(state["policy"])
        self.optimizer.load_state_dict(state["optimizer"])
        set_generator_state(self.gen, state["gen"])
