"""Training mechanics shared by the chunk-BC agents (diffusion, flow matching, one-step distillation).

Each agent trains ``model`` (a copy of its policy's network) with AdamW and keeps the deployed
network an EMA of it (Chi et al. 2023, "Diffusion Policy"; DPPO's pretraining: decay 0.995 after
``ema_start`` updates, a plain copy before). Symbols: ``B`` batch, ``To``/``Do`` observation
horizon / size, ``Ta``/``Da`` chunk length / action size.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from robotrl.agent import OffPolicyAgentBase
from robotrl.data.batch import Batch
from robotrl.utils import set_generator_state

@torch.no_grad()
def ema_trainer(policy, net: nn.Module, *, lr: float, weight_decay: float
                ) -> tuple[nn.Module, nn.Module, torch.optim.Optimizer]:
    """The EMA training parts of a chunk agent (diffusion, flow): ``(ema_target, model, optimizer)``.

    The EMA target is what is deployed: the whole policy with cameras (its encoder trained end to end) or, on
    states, its network ``net`` (the denoiser / velocity net), as before cameras were an option; ``model`` is its
    trained copy and ``optimizer`` AdamW over the copy's trainable parameters (a frozen encoder's excluded).
    """
    ema_target = policy if policy.has_cameras else net
    model = copy.deepcopy(ema_target).train()
    ema_target.requires_grad_(False)
    optimizer = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=lr, weight_decay=weight_decay)
    return ema_target, model, optimizer


def ema_update(target: nn.Module, source: nn.Module, decay: float) -> None:
    """``θ_target ← decay·θ_target + (1−decay)·θ_source`` (parameters); buffers copied."""
    for pe, pm in zip(target.parameters(), source.parameters()):
        pe.lerp_(pm, 1.0 - decay)
    for be, bm in zip(target.buffers(), source.buffers()):
        be.copy_(bm)


def chunk_inputs(policy, batch: Batch, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """A sequence batch as the networks see it: raw observations ``(B, To, Do)``, actions normalised
    to ``[-1, 1]`` ``(B, Ta, Da)`` (a flat batch gets ``To = Ta = 1``) and the padding mask or ``None``."""
    obs = batch.observations.to(device)
    if obs.ndim == 2:
        obs = obs[:, None]
    x = policy.action_scaler.normalize(batch.actions.to(device)).clamp(-1.0, 1.0)
    if x.ndim == 2:
        x = x[:, None]
    mask = batch.mask.to(device) if batch.mask is not None else None
    return obs, x, mask


def ema_gradient_step(agent, loss: torch.Tensor, ema_target: nn.Module) -> dict[str, torch.Tensor]:
    """One AdamW step of ``agent.model`` on ``loss`` (gradient norm clipped at ``agent.max_grad_norm``),
    then ``agent.num_updates += 1`` and the EMA of ``ema_target`` (decay 0 until ``agent.ema_start``).

    Returns:
        Detached ``{"loss", "grad_norm"}``.
    """
    agent.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(agent.model.parameters(), agent.max_grad_norm or float("inf"))
    agent.optimizer.step()
    agent.num_updates += 1
    ema_update(ema_target, agent.model, 0.0 if agent.num_updates <= agent.ema_start else agent.ema_decay)
    return {"loss": loss.detach(), "grad_norm": gn.detach()}


def trainer_state(agent) -> dict:
    """Trained and EMA weights (``model``, ``policy``), optimizer, update count and RNG of a chunk-BC agent."""
    return {"model": agent.model.state_dict(), "policy": agent.policy.state_dict(),
            "optimizer": agent.optimizer.state_dict(), "num_updates": agent.num_updates, "gen": agent.gen.get_state()}


def load_trainer_state(agent, state: dict) -> None:
    """Inverse of :func:`trainer_state`."""
    agent.model.load_state_dict(state["model"])
    agent.policy.load_state_dict(state["policy"])
    agent.optimizer.load_state_dict(state["optimizer"])
    agent.num_updates = int(state["num_updates"])
    set_generator_state(agent.gen, state["gen"])


class ChunkBCAgent(OffPolicyAgentBase):
    """The training shell the chunk-BC agents share (:class:`~robotrl.agents.diffusion.DiffusionAgent`,
    :class:`~robotrl.agents.flow.FlowAgent`): ``(To, Ta)`` windows as batches, one AdamW step of the trained copy
    ``model`` per :meth:`update` with the deployed network an EMA of it (Chi et al. 2023; DPPO's pretraining),
    the resumable state, and offline-only learning from cameras. A subclass builds ``self.policy`` and
    ``self.device``, calls :meth:`_init_training` and defines :meth:`loss` and :meth:`explore`.
    """

    policy: nn.Module
    device: torch.device

    def _init_training(self, net: nn.Module, *, lr: float, weight_decay: float, max_grad_norm: float | None,
                       ema_decay: float, ema_start: int, seed: int) -> None:
        """Move the policy to the device and set up the EMA training parts of ``net`` (:func:`ema_trainer`)."""
        self.policy.to(self.device).eval()
        self.frame_stack = 1
        self.ema_target, self.model, self.optimizer = ema_trainer(self.policy, net, lr=lr, weight_decay=weight_decay)
        self.max_grad_norm, self.ema_decay, self.ema_start = max_grad_norm, float(ema_decay), int(ema_start)
        self.num_updates = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    def sample_batch(self, buffer, batch_size: int) -> Batch:
        """``(To, Ta)`` windows from ``buffer`` (:meth:`ReplayBuffer.sample_sequences`)."""
        return buffer.sample_sequences(batch_size, self.policy.To, self.policy.Ta)

    def loss(self, batch: Batch) -> torch.Tensor:
        """The agent's training loss of ``self.model`` on a sequence batch (a scalar)."""
        raise NotImplementedError

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One gradient step and EMA update; returns detached ``loss`` and ``grad_norm``."""
        self.model.train()
        return ema_gradient_step(self, self.loss(batch), self.ema_target)

    @property
    def explores_online(self) -> bool:
        """``False`` from cameras: the stateless ``explore`` keeps no frame history, so a chunk-BC agent learns
        offline only there (the build path refuses online steps)."""
        return not self.policy.has_cameras

    def state_dict(self) -> dict:
        """Trained and EMA weights, normalisers, optimizer, counters, RNG."""
        return trainer_state(self)

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        load_trainer_state(self, state)
