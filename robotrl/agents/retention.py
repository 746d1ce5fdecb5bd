"""Knowledge retention during online fine-tuning: one option for every online agent.

Wołczyk et al., "Fine-tuning Reinforcement Learning Models is Secretly a Forgetting
Mitigation Problem" (ICML 2024): a fine-tuned policy deteriorates on the part of the state
space the early online phase does not visit ("FAR" states), where the pretrained policy was
good; standard knowledge-retention losses fix it. Three terms, each with its own weight and
decay schedule, all OFF by default (an agent built without ``retention`` computes exactly
what it computed before):

- ``bc``: behaviour cloning on the pretraining data, ``-E_{(s, a) ~ D} log π(a | s)``
  (dataset actions, the issue's "BC loss on the pretraining data"; the actor's own
  likelihood: tanh-Gaussian for the Q-learning family, Gaussian for PPO);
- ``kl``: a penalty toward the frozen pretrained policy ``π₀`` (snapshot taken at
  ``start_online()``): ``penalty="kl"`` is ``E_s KL(π₀(·|s) ‖ π(·|s))`` between the two
  (pre-squash) diagonal Gaussians, closed form; ``penalty="l2"`` is the squared distance
  ``‖μ(s) − μ₀(s)‖²`` of their deterministic actions (the action-distance form). States:
  ``kl_states="online"`` — the states of the actor's own minibatch (Wołczyk's
  *kickstarting*, KS); ``"offline"`` — states of the pretraining data (Wołczyk's *BC*,
  distillation of the pretrained policy's outputs on stored states);
- ``replay``: offline replay, the fraction ``ρ`` of every Q-learning batch whose rows are
  replaced by pretraining transitions (critic and actor both see them). Only the
  Q-learning family replays: PPO's objective is on-policy (its ratio needs the behaviour
  log-probs of the rollout), so replay for it is the ``bc`` term; a PPO agent with a
  replay weight raises :class:`~robotrl.errors.ConfigError`.

Which agents have which terms (every other combination raises a one-line
:class:`~robotrl.errors.ConfigError` naming the way out):

- Q-learning family (:class:`~robotrl.agents.qlearning.QLAgent`), states and cameras: all three. With cameras
  the snapshot is the whole policy, encoder included, and every term runs each policy on the batch's frames
  through *its own* encoder (no gradient into either encoder; eval mode, so no random shift; the frozen
  trunk's cached stems when the feature cache is on): ``π₀(·|enc₀(o))`` against ``π(·|enc(o))``.
- Gaussian PPO (:class:`~robotrl.agents.ppo.PPOAgent`, Uni-O4 through it): ``bc`` and ``kl``.
- DPPO: ``kl`` on the reverse-step Gaussians of the rollout's chains (online states only).
- ReinFlow: ``kl`` on the per-step Gaussian transitions ``x_k → x_{k+1}`` of the minibatch's recorded chains
  (online states only); the snapshot is the velocity net and the noise net (:class:`PolicyParts`).
- The residual agents (:class:`~robotrl.agents.residual.ResidualPPOAgent`,
  :class:`~robotrl.agents.residual.ResidualOffPolicyAgent`): ``kl`` toward the residual head frozen at the
  online start, on the residual's own input ``[features, a_base]`` of the minibatch (online states only; a
  deterministic TD3 residual has only ``penalty="l2"``). ``bc`` is refused: the dataset's actions are combined
  actions, not residuals. On cameras the off-policy residual's snapshot also holds the encoder (its critic trains
  it), read as the Q-learning agents' above.

Schedules count *retention steps*: one per :meth:`Retention.tick` — one per ``update()``
call of a Q-learning agent (one actor update), one per actor update of the off-policy residual, one per
on-policy iteration (PPO, DPPO, ReinFlow, residual PPO) — from the online start. ``decay="none"``: the weight
throughout; ``"linear"``: ``w · max(0, 1 − t/T)``; ``"exp"``: ``w · 0.5^(t/T)`` (``T = decay_steps``, a half-life).

Deviations from the paper, all documented in ``docs/algorithms/retention.md``: the paper
fine-tunes APPO (NetHack, Montezuma) and SAC (RoboticSequence) and stores the pretrained
policy's outputs on a buffer of states collected by it; here the offline dataset is that
buffer (the pretraining data itself). EWC and episodic memory are not built (BC and
kickstarting did best in the paper).

The forgetting metric that goes with it is :func:`robotrl.forgetting.forgetting_report`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from robotrl.data.batch import Batch
from robotrl.errors import ConfigError
from robotrl.schema import RetentionConfig, RetentionTerm

__all__ = ["PolicyParts", "Retention", "RetentionConfig", "RetentionTerm", "gaussian_kl"]

#: ``(mean (B, Da), std (B, Da))`` of a policy's (pre-squash) Gaussian in normalised action units.
Gaussian = tuple[torch.Tensor, torch.Tensor]


def gaussian_kl(ref: Gaussian, cur: Gaussian) -> torch.Tensor:
    """``KL(N(μ₀, σ₀²) ‖ N(μ, σ²))`` of diagonal Gaussians, summed over the action: ``(B, Da) → (B,)``.

    ``Σ_d log(σ/σ₀) + (σ₀² + (μ₀ − μ)²) / (2σ²) − 1/2``. A tanh squash applied to both leaves the
    KL unchanged (an invertible map), so it is also the KL of the Q-learning actors' tanh-Gaussians.
    """
    (m0, s0), (m, s) = ref, cur
    return (torch.log(s / s0) + (s0.pow(2) + (m0 - m).pow(2)) / (2 * s.pow(2)) - 0.5).sum(-1)


class PolicyParts(nn.Module):
    """The parts of a policy that define its Gaussian, as one module to snapshot (:meth:`Retention.start`).

    ``PolicyParts(velocity=net, noise_net=net)`` (ReinFlow), ``PolicyParts(residual=mlp, log_std=param)``
    (residual PPO): each keyword becomes an attribute (a module or an ``nn.Parameter``, registered as usual),
    shared with the policy, so a :func:`copy.deepcopy` of it freezes exactly these parts and nothing else of
    the policy (not a frozen base policy, not an encoder that does not train).
    """

    def __init__(self, **parts: nn.Module | nn.Parameter):
        super().__init__()
        for name, part in parts.items():
            setattr(self, name, part)


class Retention:
    """The retention terms of one agent: config, frozen pretrained snapshot, pretraining data, schedule.

    Used by every online agent that fine-tunes a policy (module doc). The agent calls :meth:`start` from its ``start_online()`` (the snapshot is taken
    once and kept in the agent's checkpoint, so a resumed run keeps the *pretrained* snapshot),
    :meth:`actor_loss` in its actor update, :meth:`replay` on its Q-learning batches and
    :meth:`tick` once per retention step.

    Args:
        config: :class:`RetentionConfig` or a mapping of it (``None``: off).
        squash: the policy's deterministic action is ``tanh(μ)`` (Q-learning actors) rather than ``μ``
            (PPO); used by ``penalty="l2"``.

    Raises:
        ConfigError: as :meth:`RetentionConfig.from_mapping`.
    """

    def __init__(self, config: Mapping[str, Any] | RetentionConfig | None, *, squash: bool):
        self.cfg = RetentionConfig.from_mapping(config)
        self.squash = squash
        self.reference: nn.Module | None = None
        self.data = None  # the pretraining data: a ReplayBuffer (attach_data)
        self.steps = 0

    @property
    def enabled(self) -> bool:
        """Whether any term is on."""
        return self.cfg.enabled

    def attach_data(self, buffer) -> None:
        """The pretraining data (a :class:`~robotrl.data.ReplayBuffer`; ``None``: none handed over)."""
        self.data = buffer

    def start(self, policy: nn.Module) -> None:
        """The online phase starts: freeze a copy of ``policy`` as ``π₀``, unless one exists (a resume).

        Raises:
            ConfigError: a term reads the pretraining data and none was handed over.
        """
        if not self.enabled:
            return
        if self.cfg.reads_data and self.data is None:
            raise ConfigError("agent.model.retention reads the pretraining data (bc, replay or kl_states=offline) and "
                              "this run holds none: give the run its dataset= (and trainer.init_from), or use "
                              "only retention.kl with kl_states=online")
        if self.reference is None:
            self.reference = copy.deepcopy(policy).requires_grad_(False).eval()

    def weights(self) -> dict[str, float]:
        """``{"bc", "kl", "replay"}`` weights at the current retention step."""
        return {n: getattr(self.cfg, n).at(self.steps) for n in ("bc", "kl", "replay")}

    def tick(self) -> None:
        """One retention step done (advances the schedules)."""
        if self.enabled:
            self.steps += 1

    def sample(self, n: int, device: torch.device) -> Batch:
        """``n`` rows of the pretraining data (raw units) on ``device``."""
        return self.data.sample(n).to(device)

    def replay(self, batch: Batch) -> Batch:
        """``batch`` with its first ``round(ρ·B)`` rows replaced by pretraining transitions (``ρ``: the replay
        weight now); ``extras["offline"]`` marks them 1. Unchanged when ``ρ = 0``.

        The batch's interleaved critic minibatches (:mod:`robotrl.utd`) then each hold about ``ρ`` of them. Camera
        frames (``obs/<key>``, ``next_obs/<key>`` extras) go with their rows; the other extras are dropped, frame
        ids too (the pretraining buffer's ids are not the online buffer's, so a feature cache keyed by them would
        mix them up: the mixed batch is encoded in full).
        """
        rho = self.weights()["replay"]
        n = int(round(rho * len(batch)))
        if n == 0:
            return batch
        off = self.sample(n, batch.rewards.device)
        keep = torch.arange(n, len(batch), device=batch.rewards.device)
        pick = lambda t: None if t is None else t.index_select(0, keep)  # noqa: E731
        frames = {k: pick(v) for k, v in batch.extras.items() if k.startswith(("obs/", "next_obs/"))}
        rest = Batch(pick(batch.observations), pick(batch.actions), pick(batch.rewards), pick(batch.next_observations),
                     pick(batch.terminated), pick(batch.truncated), pick(batch.discounts), pick(batch.mc_returns), None,
                     frames)
        if batch.mc_returns is None:
            off.mc_returns = None
        elif off.mc_returns is None:
            raise ConfigError("agent.model.retention.replay: the batch carries MC returns (Cal-QL) and the "
                              "pretraining buffer has none; replay with an SAC/IQL online phase")
        missing = [k for k in frames if k not in off.extras]
        if missing:
            raise ConfigError(f"agent.model.retention.replay: the online batch has camera frames {missing} and the "
                              "pretraining buffer has none: give the run a dataset with the same cameras, or drop "
                              "retention.replay")
        out = Batch.cat([off.replace(extras={k: v for k, v in off.extras.items() if k in frames}), rest])
        out.extras["offline"] = torch.cat([torch.ones(n, device=out.rewards.device),
                                           torch.zeros(len(rest), device=out.rewards.device)])
        return out

    def actor_loss(self, policy: nn.Module, *, gaussian: Callable[[nn.Module, torch.Tensor], Gaussian],
                   states: torch.Tensor, batch_size: int,
                   log_prob: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
                   prepare: Callable[[Batch], tuple[Any, torch.Tensor]] | None = None,
                   index: torch.Tensor | None = None) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """The weighted retention loss to add to the actor's loss, and its metrics.

        Args:
            policy: the live policy (the module :meth:`start` snapshotted).
            gaussian: ``(policy, policy input (B, ·)) -> (mean, std) (B, Da)``: a policy's pre-squash Gaussian in
                normalised action units (called on ``policy`` and on the snapshot ``π₀``).
            states: the policy inputs of the actor's own minibatch ``(B, ·)`` (``kl_states="online"``): a tensor,
                or whatever ``gaussian`` takes (a camera agent: its frames, raw states and frame ids).
            batch_size: rows of pretraining data to sample when ``cfg.batch_size`` is ``None``.
            log_prob: ``(policy input (B, ·), normalised actions (B, Da)) -> log π (B,)`` of the live policy
                (needed by ``bc``).
            prepare: ``raw Batch -> (policy input (B, ·), normalised actions (B, Da))`` of pretraining rows
                (needed by ``bc`` and ``kl_states="offline"``).
            index: ``(R,)`` rows of the online penalty to average, repeats allowed (``None``: all ``B``): an agent
                that runs the networks once per distinct row of a minibatch with repeated rows (ReinFlow's
                ``dedup``) gets the mean of the duplicated minibatch.

        Returns:
            ``(loss or None when every weight is 0 now, {"retention_bc", "retention_kl", "retention_bc_w",
            "retention_kl_w"}: detached)``.
        """
        w = self.weights()
        if w["bc"] == 0.0 and w["kl"] == 0.0:
            return None, {}
        n = self.cfg.batch_size or batch_size
        need_data = w["bc"] > 0 or (w["kl"] > 0 and self.cfg.kl_states == "offline")
        if need_data and prepare is None:
            raise ConfigError("agent.model.retention: this agent has no pretraining-data terms (bc, kl_states=offline)")
        dev = next(policy.parameters()).device
        off_in, off_act = prepare(self.sample(n, dev)) if need_data and prepare else (None, None)
        loss = torch.zeros((), device=dev)
        out: dict[str, torch.Tensor] = {}
        if w["bc"] > 0 and log_prob is not None:
            bc = -log_prob(off_in, off_act).mean()
            loss = loss + w["bc"] * bc
            out["retention_bc"] = bc.detach()
        if w["kl"] > 0:
            x = states if self.cfg.kl_states == "online" else off_in
            with torch.no_grad():
                ref = gaussian(self.reference, x)
            cur = gaussian(policy, x)
            if self.cfg.penalty == "kl":
                rows = gaussian_kl(ref, cur)
            else:
                f = torch.tanh if self.squash else (lambda t: t)
                rows = (f(cur[0]) - f(ref[0])).pow(2).sum(-1)
            online = self.cfg.kl_states == "online"
            pen = (rows if index is None or not online else rows.index_select(0, index)).mean()
            loss = loss + w["kl"] * pen
            out["retention_kl"] = pen.detach()
        out.update(retention_bc_w=torch.tensor(w["bc"]), retention_kl_w=torch.tensor(w["kl"]))
        return loss, out

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget the snapshot and schedule (a warm start: the next :meth:`start` freezes the loaded policy)."""
        self.reference, self.steps = None, 0

    def state_dict(self) -> dict:
        """``{"steps", "reference"}`` (the snapshot's state dict, ``None`` before the online start); ``{}`` when off."""
        if not self.enabled:
            return {}
        return {"steps": self.steps, "reference": None if self.reference is None else self.reference.state_dict()}

    def load_state_dict(self, state: dict | None, policy: nn.Module) -> None:
        """Inverse of :meth:`state_dict`; ``policy`` is the live policy (the snapshot's architecture)."""
        if not self.enabled or not state:
            return
        self.steps = int(state.get("steps", 0))
        if state.get("reference") is not None:
            self.reference = copy.deepcopy(policy).requires_grad_(False).eval()
            self.reference.load_state_dict(state["reference"])
