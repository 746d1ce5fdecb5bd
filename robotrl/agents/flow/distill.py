"""One-step distillation of a flow or diffusion policy into a 1-step flow policy (fast control).

The student is a :class:`~robotrl.agents.flow.policy.FlowPolicy` with ``K = 1``: its chunk is
``clip(x_0 + v_φ(x_0, 0, s), ±1)``. It is trained to reproduce the teacher's deterministic
noise-to-chunk map from the same starting noise: ``‖x_0 + v_φ(x_0, 0, s) − T(x_0, s)‖²`` with
``T`` the teacher's ``K``-step Euler flow (a flow or a ReinFlow-fine-tuned flow), its DDIM
chain with ``η = 0`` (a diffusion policy), or the chain DPPO fine-tuned in DPPO's evaluation mode
(a DPPO policy: frozen denoiser for the first ``n − K'`` steps, fine-tuned copy for the last ``K'``). This is the distillation step of rectified
flow (Liu et al. 2023, "Flow Straight and Fast", §2.3: fit a one-step map on (noise, teacher
sample) pairs); RL-100 distils its fine-tuned diffusion policy into a one-step consistency
policy for the same purpose. Conditions ``s`` come from the dataset's observation windows.
Symbols: ``B`` batch, ``To``/``Do``, ``Ta``/``Da`` as in :mod:`robotrl.agents.flow`.

The teacher comes from the warm start (``trainer.init_from``: :meth:`FlowDistillAgent.load_pretrained`);
it is stored in the agent's state so a resumed run keeps it. The student starts from a flow
teacher's velocity net when the networks match (its 1-step map is then the teacher's own
1-step sampling), else from scratch (a shortcut teacher's step-conditioned network does not match).
"""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

from robotrl.agent import OffPolicyAgentBase
from robotrl.agents.diffusion.policy import DiffusionPolicy
from robotrl.agents.diffusion.sampling import chain_timesteps, step_mean_std
from robotrl.agents.diffusion.training import ema_gradient_step, load_trainer_state, trainer_state
from robotrl.agents.dppo.policy import DPPOPolicy
from robotrl.agents.flow.policy import FlowPolicy
from robotrl.checkpoint import load_checkpoint
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.policy import build_policy


@torch.no_grad()
def teacher_chunk(teacher: nn.Module, cond: torch.Tensor, x0: torch.Tensor, steps: int | None = None,
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """The teacher's chunk ``(B, Ta, Da)`` in ``[-1, 1]`` from the starting noise ``x0 (B, Ta, Da)``.

    Flow teachers integrate ``steps`` (default their ``K``) Euler steps; plain diffusion teachers run
    a DDIM chain (``ddim_steps``, or ``steps``) with ``η = 0`` from ``x_T = x0`` (deterministic, the
    probability-flow map of the same model). A DPPO teacher runs the chain DPPO fine-tuned, in DPPO's
    evaluation mode (:meth:`DiffusionPolicy.sample_normalized`: DDPM with the std floored at
    ``eval_min_std`` and a noise-free last step, or its DDIM chain with its ``ddim_eta``), so its
    fine-tuned copy serves the last ``K'`` steps as during fine-tuning; the small DDPM noise comes from
    ``generator``.

    Raises:
        CheckpointError: a teacher of another kind.
        ConfigError: ``steps`` for a DPPO teacher other than the length of its fine-tuned chain.
    """
    if isinstance(teacher, FlowPolicy):
        return teacher.sample_normalized(cond, steps=steps, x0=x0)
    if isinstance(teacher, DPPOPolicy):
        n = teacher.chain_length()
        if steps is not None and int(steps) != n:
            raise ConfigError(f"agent.model.teacher_steps={steps}: a DPPO teacher runs the {n}-step {teacher.sampler} "
                              f"chain it was fine-tuned on; set teacher_steps=null")
        return teacher.sample_normalized(cond, generator=generator, x_init=x0)
    if isinstance(teacher, DiffusionPolicy):
        ks, ks_prev = chain_timesteps(teacher.K, "ddim", int(steps or teacher.ddim_steps))
        x = x0
        B = x0.shape[0]
        for i in range(len(ks)):
            k = torch.full((B,), int(ks[i]), device=x0.device, dtype=torch.long)
            kp = torch.full((B,), int(ks_prev[i]), device=x0.device, dtype=torch.long)
            x, _ = step_mean_std(teacher.schedule, teacher.net_for_step(int(ks[i])), x, k, kp, cond, "ddim", 0.0)
        return x.clamp(-1.0, 1.0)
    raise CheckpointError(f"a distillation teacher must be a flow or diffusion policy, not {type(teacher).__name__}")


class FlowDistillAgent(OffPolicyAgentBase):
    """Distils a teacher policy into a one-step flow policy (module doc).

    Args:
        obs_dim, action_dim, obs_normalizer, action_scaler: as for every agent (the teacher's
            normalisers replace them at the warm start).
        obs_horizon, action_horizon, act_steps, denoiser, denoiser_kwargs, obs_clip, x_clip: the
            student :class:`FlowPolicy` (``To``, ``Ta``, ``Te`` must be the teacher's).
        teacher_steps: the teacher's chain length (``None``: its own ``K`` / ``ddim_steps``).
        lr, weight_decay, max_grad_norm, ema_decay, ema_start: as :class:`~robotrl.agents.flow.FlowAgent`.
        device, seed: torch device; seed of the starting-noise generator.
    """

    ARCHITECTURE_KEYS = ("obs_horizon", "action_horizon", "act_steps", "denoiser", "denoiser_kwargs", "obs_clip")

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, obs_horizon: int = 1, action_horizon: int = 4, act_steps: int = 4,
                 denoiser: str = "mlp", denoiser_kwargs: dict | None = None, obs_clip: float | None = 10.0,
                 x_clip: float | None = 1.0, teacher_steps: int | None = None, lr: float = 1e-4,
                 weight_decay: float = 1e-6, max_grad_norm: float | None = 1.0, ema_decay: float = 0.995,
                 ema_start: int = 1000, device: str | torch.device = "cpu", seed: int = 0):
        self.device = torch.device(device)
        self.policy = FlowPolicy(obs_dim, action_dim, obs_horizon=obs_horizon, action_horizon=action_horizon,
                                 act_steps=act_steps, flow_steps=1, denoiser=denoiser, denoiser_kwargs=denoiser_kwargs,
                                 obs_clip=obs_clip, x_clip=x_clip)
        self.policy.set_normalizers(obs_normalizer, action_scaler)
        self.policy.to(self.device).eval()
        self.model = copy.deepcopy(self.policy.velocity).train()
        self.policy.velocity.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay)
        self.max_grad_norm, self.ema_decay, self.ema_start = max_grad_norm, float(ema_decay), int(ema_start)
        self.teacher_steps = None if teacher_steps is None else int(teacher_steps)
        self.teacher: nn.Module | None = None
        self._teacher_state: dict | None = None
        self.num_updates = 0
        self.gen = torch.Generator(device=self.device).manual_seed(seed)

    # ------------------------------------------------------------------ teacher
    def set_teacher(self, state: dict) -> None:
        """Install a teacher from its :func:`~robotrl.policy.policy_state`.

        Raises:
            CheckpointError: not a flow/diffusion policy, or other ``Do``/``Da``/``To``/``Ta`` than the student's.
        """
        teacher = build_policy(state, self.device)
        if not isinstance(teacher, (FlowPolicy, DiffusionPolicy)):
            raise CheckpointError(f"a distillation teacher must be a flow or diffusion policy, not {state.get('target')!r}")
        p = self.policy
        mine, theirs = (p.obs_dim, p.action_dim, p.To, p.Ta), (teacher.obs_dim, teacher.action_dim, teacher.To, teacher.Ta)
        if mine != theirs:
            raise CheckpointError(f"teacher (Do, Da, To, Ta) = {theirs} differs from the student's {mine}")
        self.teacher = teacher.requires_grad_(False).eval()
        self._teacher_state = state
        p.obs_normalizer.load_state_dict(teacher.obs_normalizer.state_dict())
        p.action_scaler.load_state_dict(teacher.action_scaler.state_dict())

    def load_pretrained(self, path: str) -> None:
        """Warm start: the checkpoint's policy becomes the teacher; a flow teacher with the student's
        network also initialises the student (and its EMA copy).

        Raises:
            CheckpointError: unreadable checkpoint or an unsuitable policy.
        """
        state = load_checkpoint(path, map_location=self.device)
        if "policy" not in state:
            raise CheckpointError(f"{path} holds no policy to distil")
        self.set_teacher(state["policy"])
        t = self.teacher
        keys = ("denoiser", "denoiser_kwargs", "shortcut")  # a shortcut teacher's network takes d too
        if isinstance(t, FlowPolicy) and {k: t.spec()[k] for k in keys} == {k: self.policy.spec()[k] for k in keys}:
            self.model.load_state_dict(t.velocity.state_dict())
            self.policy.velocity.load_state_dict(t.velocity.state_dict())

    # ------------------------------------------------------------------ training
    def sample_batch(self, buffer, batch_size: int) -> Batch:
        """``(To, Ta)`` windows from ``buffer`` (only the observations are used)."""
        return buffer.sample_sequences(batch_size, self.policy.To, self.policy.Ta)

    def loss(self, batch: Batch) -> torch.Tensor:
        """``mean ‖x0 + v_φ(x0, 0, s) − T(x0, s)‖²`` over a batch of conditions ``(B, To, Do)``.

        Raises:
            ConfigError: no teacher (the run has no ``trainer.init_from``).
        """
        if self.teacher is None:
            raise ConfigError("flow-distill needs a teacher: set trainer.init_from=<flow/diffusion/ReinFlow/DPPO "
                              "run or checkpoint>")
        p = self.policy
        obs = batch.observations.to(self.device)
        cond = p.condition(obs if obs.ndim == 3 else obs[:, None])
        x0 = torch.randn((cond.shape[0], p.Ta, p.action_dim), device=self.device, generator=self.gen)
        target = teacher_chunk(self.teacher, cond, x0, self.teacher_steps, generator=self.gen)
        pred = x0 + self.model(x0, torch.zeros(cond.shape[0], device=self.device), cond)
        return (pred - target).pow(2).mean()

    def update(self, batch: Batch, step: int) -> dict[str, torch.Tensor]:
        """One gradient step and EMA update; returns detached ``loss`` and ``grad_norm``."""
        return ema_gradient_step(self, self.loss(batch), self.policy.velocity)

    @torch.no_grad()
    def explore(self, obs: np.ndarray) -> np.ndarray:
        """Stateless acting: first action of the student's chunk per env ``(N, Da)`` raw."""
        x = torch.as_tensor(np.asarray(obs, np.float32), device=self.device)
        return self.policy.predict_chunk(x[:, None].expand(-1, self.policy.To, -1))[:, 0].cpu().numpy()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """Student weights (trained and EMA), optimizer, counters, RNG and the teacher's policy state."""
        return {**trainer_state(self), "teacher": self._teacher_state}

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict`."""
        if state.get("teacher") is not None:
            self.set_teacher(state["teacher"])
        load_trainer_state(self, state)
