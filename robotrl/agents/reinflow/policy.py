"""The ReinFlow policy: a flow policy with a learnable noise network on its Euler steps.

ReinFlow (Zhang et al. 2025, ReinFlow/ReinFlow ``model/flow/mlp_flow.py`` ``NoisyFlowMLP``,
``ExploreNoiseNet``). Symbols: ``B``/``M`` batch, ``To``/``Do`` observation history/size,
``Ta``/``Da`` chunk length/action size, ``K`` Euler steps.

During fine-tuning each Euler step becomes Gaussian:
``x_{k+1} ~ N(clip(x_k + v_θ(x_k, t_k, s)/K), σ_θ'(s, t_k[, x_k])²)`` with ``σ`` squashed
into ``[σ_min, σ_max]`` (:func:`~robotrl.agents.reinflow.loss.bounded_std`), a
discrete-time Markov chain with an exact likelihood. The deployable behaviour —
``forward``, :meth:`predict_chunk`, evaluation, export — is the inherited deterministic
flow with the noise off, on the fine-tuned velocity network. The noise network is kept in
the policy (small) so that a checkpoint's policy describes the exploratory chain too.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from robotrl.agents.diffusion.networks import SinusoidalEmbedding
from robotrl.agents.flow.policy import FlowPolicy
from robotrl.agents.flow.sampling import euler_mean, euler_times
from robotrl.agents.reinflow.loss import bounded_std
from robotrl.errors import ConfigError
from robotrl.networks import MLP


class NoiseNet(nn.Module):
    """``σ_θ'(s, t[, x_t])``: ``(x (B,Ta,Da), t (B,), cond (B,To,Do)) -> std (B,Ta,Da)`` in ``[σ_min, σ_max]``.

    Input ``[cond flat, sinusoidal(t)]`` (and ``x`` flat with ``use_x``) → MLP → ReinFlow's
    tanh squashing of ``log σ²``. The bounds are buffers (the ``learn_decay`` schedule lowers
    ``σ_max`` during fine-tuning; checkpoints keep the current bounds).

    Args:
        cond_dim: ``To·Do``; action_horizon, action_dim: ``Ta``, ``Da``.
        hidden, act: MLP widths and activation (ReinFlow: ``[64, 64]``, tanh).
        time_dim: size of the time embedding.
        std_min, std_max: bounds (ReinFlow Gym: 0.10, 0.24).
        use_x: also condition on the latent ``x_t`` (ReinFlow: off).

    Raises:
        ConfigError: ``not 0 < std_min <= std_max``.
    """

    def __init__(self, cond_dim: int, action_horizon: int, action_dim: int, *, hidden: Sequence[int] = (64, 64),
                 act: str = "tanh", time_dim: int = 16, std_min: float = 0.10, std_max: float = 0.24,
                 use_x: bool = False):
        super().__init__()
        self.shape, self.use_x = (action_horizon, action_dim), bool(use_x)
        self.time_emb = SinusoidalEmbedding(time_dim)
        d_in = cond_dim + time_dim + (action_horizon * action_dim if use_x else 0)
        self.net = MLP(d_in, action_horizon * action_dim, list(hidden), act=act)
        self.register_buffer("std_min", torch.tensor(0.0))
        self.register_buffer("std_max", torch.tensor(0.0))
        self.set_bounds(std_min, std_max)

    def set_bounds(self, std_min: float, std_max: float) -> None:
        """Set ``[σ_min, σ_max]``.

        Raises:
            ConfigError: ``not 0 < std_min <= std_max``.
        """
        if not 0 < std_min <= std_max:
            raise ConfigError(f"agent.model.std_min/std_max: noise std bounds must satisfy 0 < std_min <= std_max, got [{std_min}, {std_max}]")
        self.std_min.fill_(float(std_min))
        self.std_max.fill_(float(std_max))

    def forward(self, x: torch.Tensor, t: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Noise std ``(B, Ta, Da)`` (normalised action units, in ``[std_min, std_max]``) of the Euler step at
        flow times ``t (B,)`` from conditioning ``cond (B, To, Do)`` and, with ``noise_uses_x``, the sample
        ``x (B, Ta, Da)``."""
        B = x.shape[0]
        parts = [cond.reshape(B, -1), self.time_emb(t)] + ([x.reshape(B, -1)] if self.use_x else [])
        raw = self.net(torch.cat(parts, dim=-1)).view(B, *self.shape)
        return bounded_std(raw, self.std_min, self.std_max)


class ReinFlowPolicy(FlowPolicy):
    """A :class:`FlowPolicy` (deterministic when deployed) plus the noise network of its fine-tuning chain.

    Args:
        noise_hidden, noise_act, noise_time_dim, std_min, std_max, noise_uses_x: :class:`NoiseNet`.
        noise_steps: ``K'``, the last Euler steps whose noise the noise network sets (ReinFlow's
            ``ft_denoising_steps``, its ``learn_explore_noise_from = K − K'``); ``None``: all ``K``.
        early_std: std of the first ``K − K'`` steps: ``None`` (the reference) the current lower bound
            ``σ_min``, a fixed noise scored like the rest; ``0``: those steps are deterministic Euler steps,
            left out of the log-likelihood (a deviation: then the chain's randomness is ``x_0`` and the last
            ``K'`` steps only).
        **kwargs: :class:`FlowPolicy` arguments.

    Raises:
        ConfigError: bad flow settings, noise bounds, ``noise_steps`` outside ``[1, K]`` or a negative ``early_std``.
    """

    def __init__(self, obs_dim: int, action_dim: int, *, noise_hidden: Sequence[int] = (64, 64),
                 noise_act: str = "tanh", noise_time_dim: int = 16, std_min: float = 0.10, std_max: float = 0.24,
                 noise_uses_x: bool = False, noise_steps: int | None = None, early_std: float | None = None,
                 **kwargs):
        super().__init__(obs_dim, action_dim, **kwargs)
        if noise_steps is not None and not 1 <= noise_steps <= self.K:
            raise ConfigError(f"agent.model.noise_steps must be in [1, flow_steps={self.K}] (or null: all), got {noise_steps}")
        if early_std is not None and early_std < 0:
            raise ConfigError(f"agent.model.early_std must be >= 0 (or null: std_min), got {early_std}")
        self.noise_from = 0 if noise_steps is None else self.K - int(noise_steps)
        #: score the chain with straight-through clamps of the step means (set by the agent; a training option)
        self.straight_through_clip = False
        self.early_std = None if early_std is None else float(early_std)
        #: first transition of the chain that is random (and scored): the early steps are skipped when deterministic
        self.scored_from = self.noise_from if self.early_std == 0 else 0
        self.noise_net = NoiseNet(self.To * self.out_dim, self.Ta, self.action_dim, hidden=noise_hidden,
                                  act=noise_act, time_dim=noise_time_dim, std_min=std_min, std_max=std_max,
                                  use_x=noise_uses_x)
        self._spec.update(noise_hidden=list(noise_hidden), noise_act=noise_act, noise_time_dim=int(noise_time_dim),
                          std_min=float(std_min), std_max=float(std_max), noise_uses_x=bool(noise_uses_x),
                          noise_steps=None if noise_steps is None else int(noise_steps), early_std=self.early_std)

    def spec(self) -> dict:
        """Constructor kwargs (JSON-able)."""
        return {**super().spec(), "noise_hidden": list(self._spec["noise_hidden"])}

    def _early_std(self) -> torch.Tensor:
        return self.noise_net.std_min if self.early_std is None else torch.tensor(self.early_std)

    def transitions(self, cond: torch.Tensor, chain: torch.Tensor, *, velocity: nn.Module | None = None,
                    noise_net: NoiseNet | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Means and stds ``(M, K_s, Ta, Da)`` of the random transitions ``x_k → x_{k+1}``, ``k = K − K_s … K−1``, of
        recorded chains, in one batched pass (``K_s = K − scored_from``: every step unless the early ones are
        deterministic).

        Args:
            cond: normalised histories ``(M, To, Do)``; chain: ``(M, K+1, Ta, Da)`` (only ``x_0 … x_{K-1}`` are read).
            velocity, noise_net: other networks of this architecture in place of the policy's own (``None``: its
                own): the transitions of another chain with this one's settings, e.g. a frozen snapshot's
                (knowledge retention, :meth:`~robotrl.agents.reinflow.ReinFlowAgent._retention_term`).
        """
        velocity = self.velocity if velocity is None else velocity
        noise_net = self.noise_net if noise_net is None else noise_net
        M, K = chain.shape[0], chain.shape[1] - 1
        first = self.scored_from
        n = K - first
        x = chain[:, first:K].flatten(0, 1)
        t = euler_times(K, chain.device)[first:].repeat(M)
        c = cond.repeat_interleave(n, dim=0)
        mean = euler_mean(velocity, x, t, c, 1.0 / K, self.x_clip, straight_through=self.straight_through_clip)
        L = K - self.noise_from  # steps whose std the noise net sets; the scored ones before them have a fixed σ
        std = noise_net(chain[:, self.noise_from:K].flatten(0, 1), euler_times(K, chain.device)[self.noise_from:].repeat(M),
                        cond.repeat_interleave(L, dim=0)).view(M, L, self.Ta, self.action_dim)
        if n > L:  # the reference's σ_min on the first K − K' steps
            early = noise_net.std_min if self.early_std is None else torch.tensor(self.early_std)
            std = torch.cat([early.to(std).expand(M, n - L, self.Ta, self.action_dim), std], dim=1)
        return mean.view(M, n, self.Ta, self.action_dim), std

    @torch.no_grad()
    def sample_noisy_chain(self, cond: torch.Tensor, *, eps_clip: float | None = 3.0,
                           generator: torch.Generator | None = None) -> torch.Tensor:
        """Exploratory chains ``(B, K+1, Ta, Da)`` (``x_0`` … unclamped ``x_K``) for ``cond (B, To, Do)``.

        ``eps_clip``: standard-normal noise clipped to ``±eps_clip`` (ReinFlow ``randn_clip_value`` 3;
        ``None``: unclipped, the chain then follows its Gaussian likelihood exactly).
        """
        B = cond.shape[0]
        x = torch.randn((B, self.Ta, self.action_dim), device=cond.device, generator=generator)
        chain = [x]
        ts = euler_times(self.K, cond.device)
        for i in range(self.K):
            t = ts[i].expand(B)
            mean = euler_mean(self.velocity, x, t, cond, 1.0 / self.K, self.x_clip)
            eps = torch.randn(mean.shape, device=mean.device, generator=generator)
            if eps_clip is not None:
                eps = eps.clamp(-eps_clip, eps_clip)
            std = self.noise_net(x, t, cond) if i >= self.noise_from else self._early_std().to(mean)
            x = mean + std * eps
            chain.append(x)
        return torch.stack(chain, dim=1)
