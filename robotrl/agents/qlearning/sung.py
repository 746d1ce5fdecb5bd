"""SUNG: uncertainty-guided online fine-tuning, an option of :class:`~robotrl.agents.qlearning.QLAgent`.

Guo, Sun, Hu, Huang, Chen, Piao, Sun, Chang, "A Simple Unified Uncertainty-Guided Framework for
Offline-to-Online Reinforcement Learning" (arXiv 2023; IEEE TNNLS 2025, doi 10.1109/TNNLS.2025.3633997;
reference code github.com/guosyjlu/SUNG, ``CQL/``). On top of a CQL/Cal-QL (or IQL) pretrained actor and
critic, the online phase is SAC with three additions, all driven by one density estimate:

- **uncertainty**: a VAE over the normalised ``(state, action)`` pair (:class:`DensityVAE`) is pretrained on
  the offline data when the online phase starts and takes one step per agent update on the training batch;
  its per-sample negative ELBO ``u(s, a)`` is the uncertainty (high where the data have little density);
- **optimistic exploration** (:func:`optimistic_choice`): per state, ``candidates`` actions from the policy,
  the ``topk`` most uncertain kept, one drawn by ``softmax(Q)`` among them (``explore="prob"``, the
  reference; ``"greedy"``: the highest ``Q``; ``"policy"``: plain policy sampling);
- **adaptive exploitation** (:func:`conservative_rows`): the CQL(H) penalty on ``conservative_fraction`` of each
  critic minibatch, rows drawn by ``softmax(u)`` (``"greedy"``: the most uncertain ones), weighted
  ``conservative_weight · cql_alpha`` (the reference's ``λ = 0.1`` times CQL's ``α = 5``); the TD loss on every
  row, so the remaining rows get the plain online (SAC) objective.

The offline replay of the reference (10 % of each batch from the offline buffer) is the trainer's
``trainer.offline_ratio`` (:class:`~robotrl.data.MixedSampler`); ``experiment=sung`` sets it to 0.1.

Deviations (``docs/algorithms/sung.md``): the VAE's hidden width defaults to 256 (reference 750) and its
pretraining to 10k steps (reference 100k), CPU-sized; the reference's offline buffer also receives every
online transition (its 10 % "offline" share is drawn from offline + all online data, the online 90 % from the
last 20k online transitions), here the offline share is offline data only and the online buffer keeps the run.

Symbols: ``B`` batch, ``C`` candidates, ``K`` top-k, ``N`` envs (exploration) or critic heads, ``Do``, ``Da``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from robotrl.data.batch import Batch
from robotrl.errors import ConfigError
from robotrl.utils import check_schedule, config_dataclass

__all__ = ["DensityVAE", "Sung", "SungConfig", "conservative_rows", "optimistic_choice"]

EXPLORE = ("prob", "greedy", "policy")
ORDERS = ("uq", "qu")
CONSERVATIVE = ("prob", "greedy", "none")
SECTION = "agent.model.sung"


@dataclass
class SungConfig:
    """SUNG's settings (``agent.model.sung``); off by default (an agent without them updates exactly as before).

    Args:
        enabled: SUNG on (the online phase; nothing changes offline).
        vae_hidden: hidden width of the VAE's two encoder and two decoder layers (reference 750; default 256,
            CPU-sized: a deviation).
        vae_latent: latent size (``None``: ``2·Da``, the reference).
        vae_beta: weight of the KL term in the negative ELBO (reference 0.5).
        vae_lr: Adam learning rate of the VAE (reference 1e-3).
        vae_pretrain_steps: VAE steps on the offline data at the online start (reference 100k; default 10k,
            CPU-sized: a deviation); 0: none (the VAE then learns online only).
        vae_batch_size: rows per pretraining step (reference 256).
        vae_tanh_decoder: the decoder's output through ``tanh`` (the reference's ``max_action·tanh`` with
            ``max_action = 1``; normalised states beyond ±1 then reconstruct with a floor of error).
        candidates: actions sampled from the policy per state when exploring (reference 100).
        topk: candidates kept by the first criterion (reference 20).
        order: ``"uq"``: keep the ``topk`` most uncertain, draw by ``Q`` (reference); ``"qu"``: keep the ``topk``
            highest ``Q``, draw by uncertainty.
        explore: ``"prob"``: draw by softmax (reference), ``"greedy"``: the maximum, ``"policy"``: plain policy
            sampling (SUNG's exploration off).
        explore_temperature: softmax temperature of the draw (reference 1: ``softmax(Q)``, in reward units).
        conservative: ``"prob"``: CQL rows drawn by ``softmax(u)`` with replacement (reference), ``"greedy"``: the
            most uncertain rows, ``"none"``: no CQL penalty online (plain SAC).
        conservative_fraction: share of each critic minibatch given the CQL penalty (reference 0.1).
        conservative_weight: ``λ``; the penalty is weighted ``λ · cql_alpha`` (reference 0.1 · 5).
        conservative_temperature: softmax temperature of the row draw (reference 1).
    """

    enabled: bool = False
    vae_hidden: int = 256
    vae_latent: int | None = None
    vae_beta: float = 0.5
    vae_lr: float = 1e-3
    vae_pretrain_steps: int = 10_000
    vae_batch_size: int = 256
    vae_tanh_decoder: bool = True
    candidates: int = 100
    topk: int = 20
    order: str = "uq"
    explore: str = "prob"
    explore_temperature: float = 1.0
    conservative: str = "prob"
    conservative_fraction: float = 0.1
    conservative_weight: float = 0.1
    conservative_temperature: float = 1.0

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any] | SungConfig | None) -> SungConfig:
        """A config from ``agent.model.sung`` (a mapping, e.g. Hydra's ``DictConfig``; ``None``: off).

        Raises:
            ConfigError: an unknown key or a setting that cannot work (:meth:`check`): one line naming it.
        """
        cfg = given if isinstance(given, SungConfig) else config_dataclass(cls, given, SECTION)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Raises :class:`~robotrl.errors.ConfigError` on a setting that cannot work (one line naming the fix)."""
        check_schedule(self, SECTION, positive=("vae_hidden", "vae_batch_size", "candidates", "topk"),
                       non_negative=("vae_pretrain_steps", "vae_latent"), fractions=("conservative_fraction",))
        if self.vae_latent == 0:
            raise ConfigError(f"{SECTION}.vae_latent=0: give a latent size >= 1 or null (2·Da, the reference)")
        if self.topk > self.candidates:
            raise ConfigError(f"{SECTION}.topk={self.topk} keeps more than the {self.candidates} candidates: "
                              f"choose topk <= candidates (reference 20 of 100)")
        for name, allowed in (("explore", EXPLORE), ("order", ORDERS), ("conservative", CONSERVATIVE)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{SECTION}.{name}={getattr(self, name)!r} is unknown; choose from {allowed}")
        for name in ("vae_lr", "explore_temperature", "conservative_temperature"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v <= 0:
                raise ConfigError(f"{SECTION}.{name}={v!r} must be a finite number > 0")
        for name in ("vae_beta", "conservative_weight"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
                raise ConfigError(f"{SECTION}.{name}={v!r} must be a finite number >= 0")


class DensityVAE(nn.Module):
    """A VAE over ``x = [normalised state, action in [-1, 1]]`` whose negative ELBO is SUNG's uncertainty.

    Encoder ``x → 2×(Linear, ReLU) → (μ, log σ)`` (``log σ`` clamped to ``[-4, 15]``, the reference's), decoder
    ``z → 2×(Linear, ReLU) → Linear`` (``tanh`` on the output with ``tanh_decoder``).

    Args:
        obs_dim, action_dim: ``Do``, ``Da``; hidden: width; latent: latent size; beta: KL weight;
            tanh_decoder: squash the reconstruction.
    """

    def __init__(self, obs_dim: int, action_dim: int, hidden: int, latent: int, beta: float, tanh_decoder: bool):
        super().__init__()
        d = obs_dim + action_dim
        self.encoder = nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.mean = nn.Linear(hidden, latent)
        self.log_std = nn.Linear(hidden, latent)
        self.decoder = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                                     nn.Linear(hidden, d))
        self.beta, self.tanh_decoder = float(beta), bool(tanh_decoder)

    def neg_elbo(self, obs: torch.Tensor, action: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        """Per-sample negative ELBO ``(B, Do), (B, Da) → (B,)``: mean squared reconstruction error over ``x``'s
        dimensions plus ``β`` times the KL to ``N(0, I)`` averaged over the latent (one reparameterised ``z``)."""
        x = torch.cat([obs, action], -1)
        h = self.encoder(x)
        mu, log_std = self.mean(h), self.log_std(h).clamp(-4.0, 15.0)
        std = log_std.exp()
        z = mu + std * torch.randn(mu.shape, generator=generator, device=mu.device, dtype=mu.dtype)
        recon = self.decoder(z)
        if self.tanh_decoder:
            recon = torch.tanh(recon)
        rec = (x - recon).pow(2).mean(-1)
        kl = -0.5 * (1.0 + 2.0 * log_std - mu.pow(2) - std.pow(2)).mean(-1)
        return rec + self.beta * kl


def _draw(scores: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One index per column of ``scores (K, N)`` drawn with ``softmax(scores / T)`` over ``K`` → ``(N,)``."""
    p = torch.softmax(scores.float().T / temperature, dim=-1)
    return torch.multinomial(p, 1, generator=generator).squeeze(-1)


def optimistic_choice(q: torch.Tensor, u: torch.Tensor, *, topk: int, order: str = "uq", mode: str = "prob",
                      temperature: float = 1.0, generator: torch.Generator | None = None) -> torch.Tensor:
    """SUNG's optimistic exploration: which of ``C`` candidates each of ``N`` states takes.

    Args:
        q: ``(C, N)`` value of each candidate; u: ``(C, N)`` its uncertainty.
        topk: ``K`` candidates kept; order: ``"uq"`` keeps the ``K`` most uncertain and draws by ``q``, ``"qu"``
            keeps the ``K`` highest ``q`` and draws by ``u``; mode: ``"prob"`` draws by ``softmax(score / T)``,
            ``"greedy"`` takes the maximum; temperature: ``T``; generator: for the draw.

    Returns:
        ``(N,)`` candidate indices in ``[0, C)``.
    """
    first, second = (u, q) if order == "uq" else (q, u)
    keep = first.topk(topk, dim=0).indices  # (K, N)
    score = second.gather(0, keep)
    j = score.argmax(0) if mode == "greedy" else _draw(score, temperature, generator)
    return keep.gather(0, j.unsqueeze(0)).squeeze(0)


def conservative_rows(u: torch.Tensor, n: int, *, mode: str = "prob", temperature: float = 1.0,
                      generator: torch.Generator | None = None) -> torch.Tensor:
    """The ``n`` rows of a minibatch with uncertainty ``u (B,)`` that get the CQL penalty → ``(n,)`` indices.

    ``"prob"``: drawn with replacement from ``softmax(u / T)`` (the reference); ``"greedy"``: the ``n`` most
    uncertain rows.
    """
    if mode == "greedy":
        return u.topk(n).indices
    p = torch.softmax(u.float() / temperature, dim=0)
    return torch.multinomial(p, n, replacement=True, generator=generator)


class Sung:
    """SUNG's state in one agent: settings, the density VAE and its optimiser, the offline data, the phase.

    The agent calls :meth:`attach_data` and :meth:`start` from its ``attach_offline_data`` / ``start_online``
    (VAE pretraining, once: a resumed run keeps its VAE), :meth:`uncertainty` in exploration and in the critic
    step, :meth:`vae_step` once per update, and keeps :meth:`state_dict` in its checkpoint.

    Args:
        config: :class:`SungConfig` or a mapping of it (``None``: off; then no VAE is built).
        obs_dim, action_dim: ``Do``, ``Da``; device: the agent's; seed: the VAE's initialisation (a forked RNG:
            the global RNG and the agent's networks are untouched).

    Raises:
        ConfigError: as :meth:`SungConfig.from_mapping`.
    """

    def __init__(self, config: Mapping[str, Any] | SungConfig | None, obs_dim: int, action_dim: int, *,
                 device: torch.device, seed: int = 0):
        self.cfg = SungConfig.from_mapping(config)
        self.device = device
        self.vae: DensityVAE | None = None
        self.opt: torch.optim.Optimizer | None = None
        self.data = None  # the offline ReplayBuffer (attach_data)
        self.pretrained = False  # the VAE has had its offline pretraining (kept in checkpoints)
        self.active = False  # the online phase runs SUNG (start)
        self.vae_updates = 0
        if self.cfg.enabled:
            c = self.cfg
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed + 7919)
                self.vae = DensityVAE(obs_dim, action_dim, c.vae_hidden, c.vae_latent or 2 * action_dim, c.vae_beta,
                                      c.vae_tanh_decoder).to(device)
            self.opt = torch.optim.Adam(self.vae.parameters(), lr=c.vae_lr)

    @property
    def enabled(self) -> bool:
        return self.cfg.enabled

    @property
    def optimistic(self) -> bool:
        """Whether exploration is SUNG's (online, ``explore != "policy"``)."""
        return self.active and self.cfg.explore != "policy"

    def attach_data(self, buffer) -> None:
        """The offline data (a :class:`~robotrl.data.ReplayBuffer`) the VAE pretrains on."""
        self.data = buffer

    def start(self, prepare: Callable[[Batch], tuple[torch.Tensor, torch.Tensor]],
              generator: torch.Generator) -> float | None:
        """The online phase starts: pretrain the VAE on the offline data unless done (a resume), then SUNG acts.

        Args:
            prepare: ``raw Batch → (normalised states (B, Do), actions in [-1, 1] (B, Da))``.
            generator: the agent's (the VAE's noise).

        Returns:
            The last pretraining loss, ``None`` when nothing was pretrained now.

        Raises:
            ConfigError: pretraining steps without offline data.
        """
        if not self.enabled:
            return None
        last = None
        if not self.pretrained and self.cfg.vae_pretrain_steps > 0:
            if self.data is None:
                raise ConfigError(f"{SECTION} pretrains its VAE on the offline data and this run holds none: give "
                                  "the run its dataset= with trainer.offline_ratio > 0 (experiment=sung: 0.1), or set "
                                  f"{SECTION}.vae_pretrain_steps=0")
            for _ in range(self.cfg.vae_pretrain_steps):
                obs, act = prepare(self.data.sample(self.cfg.vae_batch_size).to(self.device))
                last = float(self.vae_step(obs, act, generator))
        self.pretrained = True
        self.active = True
        return last

    @torch.no_grad()
    def uncertainty(self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """``u(s, a) (B,)``: the VAE's negative ELBO of normalised states ``(B, Do)`` and actions ``(B, Da)``
        (float32, outside any autocast)."""
        with torch.autocast(self.device.type, enabled=False):
            return self.vae.neg_elbo(obs.float(), action.float(), generator)

    def vae_step(self, obs: torch.Tensor, action: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """One Adam step of the VAE on the mean negative ELBO of ``(B, Do), (B, Da)``; returns the loss (detached)."""
        with torch.autocast(self.device.type, enabled=False):
            loss = self.vae.neg_elbo(obs.detach().float(), action.detach().float(), generator).mean()
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.vae_updates += 1
        return loss.detach()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """``{"vae", "vae_opt", "pretrained", "vae_updates"}``; ``{}`` when off."""
        if not self.enabled:
            return {}
        return {"vae": self.vae.state_dict(), "vae_opt": self.opt.state_dict(), "pretrained": self.pretrained,
                "vae_updates": self.vae_updates}

    def load_state_dict(self, state: dict | None) -> None:
        """Inverse of :meth:`state_dict` (nothing when off or when ``state`` is empty: a checkpoint without SUNG)."""
        if not self.enabled or not state:
            return
        self.vae.load_state_dict(state["vae"])
        self.opt.load_state_dict(state["vae_opt"])
        self.pretrained = bool(state.get("pretrained", False))
        self.vae_updates = int(state.get("vae_updates", 0))
