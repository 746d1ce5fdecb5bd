"""Uni-O4: one on-policy objective offline and online (Lei et al., ICLR 2024, "Uni-O4: Unifying Online and
Offline Deep RL with Multi-Step On-Policy Optimization"; reference code Lei-Kun/Uni-O4, ``main.py``,
``BC_ensemble.py``, ``abppo.py``, ``critic.py``).

The offline phase runs inside the on-policy loop's pretraining (``agent.onpolicy.pretrain_steps`` calls of
:meth:`UniO4Agent.bc_update`, one batch of ``B`` dataset transitions each), in three stages read top to bottom:

1. **Ensemble behaviour cloning** (``bc_steps``): ``K = num_policies`` Gaussian policies (the PPO policy's class,
   :class:`~robotrl.agents.ppo.policy.GaussianPPOPolicy`: tanh-MLP mean, state-independent ``log_std``, both learned
   here), each by maximum likelihood with the paper's disagreement term (``BC_ensemble.joint_loss``, ``kl_bc=data``)::

       L_i = −log π_i(a|s) − α · (log π_i(a|s) − max_{j≠i} log π_j(a|s))      (others detached; α = bc_alpha)

   With the others detached its gradient is ``(1 + α)`` times the plain likelihood gradient of ``π_i``; the
   members differ by their initialisation (the reference's; :func:`ensemble_bc_loss`).
2. **Value and Q of the behaviour** (``critic_steps``): ``V(s)`` — the PPO critic itself, so it goes online as
   it is — regressed on the dataset's Monte-Carlo returns (``critic.py`` ``ValueLearner``), and ``Q(s, a)`` by
   fitted Q evaluation on the dataset's transitions, ``Q(s,a) ← r + γ (1 − terminated) Q̄(s', a')`` with a Polyak
   target ``Q̄`` (τ every ``target_update_freq`` steps). Deviation: the reference's SARSA takes the dataset's next
   action ``a'``; a robotrl batch holds no next action, so ``a' ~ π_k(·|s')`` of a random ensemble member ``k`` per
   row (expected SARSA of the cloned behaviour mixture).
3. **Multi-step policy improvement** (``bppo_steps``, BPPO, ``abppo.py``): for each member ``i`` against its
   behaviour policy ``π_β,i`` (first the cloned policy): actions ``a ~ π_β,i(·|s)`` on the batch's states,
   advantages ``A = Q(s, a) − V(s)`` normalised over the batch and weighted ``ω`` where ``A > 0`` and ``1 − ω``
   elsewhere (:func:`weighted_advantages`), and the clipped ratio objective
   ``−E[min(ρ A, clip(ρ, 1 ± ε) A)]``, ``ρ = π_i(a|s) / π_β,i(a|s)`` (:func:`bppo_policy_loss`; learning rate
   decayed linearly to 0, gradients clipped to ``bppo_max_grad_norm``). Every ``ope_every`` steps an off-policy
   evaluation scores each member, ``Ĵ(π) = mean_s Q(s, μ_π(s))`` over a fixed pool of ``ope_states`` dataset
   states (:func:`q_ope`); a member whose ``Ĵ`` beats its best so far is **accepted**: its behaviour policy
   becomes the current policy (the next steps improve on it: multi-step). Otherwise the behaviour policy is kept
   (the reference goes on training the current policy from there). Deviation: the paper's OPE ("AM-Q") rolls
   each policy out for ``H`` steps in a learned dynamics ensemble and adds ``Q`` at the end; here ``H = 0``
   (the Q of its mean action on dataset states): no dynamics model.
4. **Choice**: each member ends as its last accepted policy (never a rejected step; the reference saves the
   last trained one), and the member of highest ``Ĵ`` becomes the PPO policy.

Online the agent is :class:`~robotrl.agents.ppo.agent.PPOAgent` unchanged, from the chosen policy and the value
``V`` of stage 2: nothing switches objective between the phases.

Symbols: ``B`` batch, ``K`` members, ``S`` OPE states, ``Do``/``Da`` observation/action size; actions of the
losses are in normalised units (``[-1, 1]``), observations raw (the policies normalise them).
Reference defaults (hopper-medium-v2): K 4, α 0.1, BC 4·10⁵ steps at 1e-4, V 2·10⁶ steps at 1e-4 (512×3),
Q 2·10⁶ steps at 1e-4 (1024×2, τ 0.005 every 2), BPPO 10⁴ steps at 1e-4 (linear decay), ε 0.25, ω 0.7,
gradient clip 0.5, OPE every 100 steps, batches of 512. ``docs/algorithms/unio4.md`` lists every deviation.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from robotrl.agents.ppo.agent import PPOAgent
from robotrl.agents.ppo.loss import gaussian_log_prob, normalize_advantages
from robotrl.agents.ppo.policy import GaussianPPOPolicy
from robotrl.agents.ppo.update import optimizer_step
from robotrl.agents.retention import RetentionConfig
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError
from robotrl.networks import MLP, polyak_update_

__all__ = ["UniO4Agent", "bppo_policy_loss", "ensemble_bc_loss", "q_ope", "weighted_advantages"]


# ---------------------------------------------------------------------- pure pieces
def ensemble_bc_loss(logp: torch.Tensor, i: int, alpha: float) -> torch.Tensor:
    """Member ``i``'s behaviour-cloning loss with the disagreement term (``BC_ensemble.joint_loss``).

    Args:
        logp: ``(K, B)`` log-likelihoods of the dataset actions under every member (row ``i`` with gradients).
        i: the member trained; alpha: weight ``α`` of the disagreement term.

    Returns:
        Scalar ``mean_b[−logp_i − α (logp_i − max_{j≠i} logp_j)]``, the others detached (``K = 1``: plain NLL).
    """
    own = logp[i]
    if logp.shape[0] == 1:
        return -own.mean()
    others = torch.cat([logp[:i], logp[i + 1:]]).detach().max(0).values
    return (-own - alpha * (own - others)).mean()


def weighted_advantages(adv: torch.Tensor, omega: float) -> torch.Tensor:
    """BPPO's asymmetric weighting of advantages ``(B,)`` (normalised first): ``ω·A`` where ``A > 0``, ``(1 − ω)·A``
    elsewhere (``ω = 0.5``: ``A`` unchanged, the reference's ``weighted_advantage``)."""
    adv = normalize_advantages(adv)
    if omega == 0.5:
        return adv
    return torch.where(adv > 0, omega * adv, (1.0 - omega) * adv)


def bppo_policy_loss(logp_new: torch.Tensor, logp_behaviour: torch.Tensor, adv: torch.Tensor,
                     clip: float) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """BPPO's clipped ratio objective against the behaviour policy.

    Args:
        logp_new: ``(B,)`` log-probs of the actions under the policy trained (with gradients).
        logp_behaviour: ``(B,)`` their log-probs under the behaviour policy that sampled them.
        adv: ``(B,)`` (weighted) advantages; clip: ``ε``.

    Returns:
        ``(−mean(min(ρ A, clip(ρ, 1−ε, 1+ε) A)), {"ratio", "clipfrac"})`` with ``ρ = exp(logp_new − logp_behaviour)``.
    """
    ratio = (logp_new - logp_behaviour).exp()
    loss = -torch.min(ratio * adv, ratio.clamp(1.0 - clip, 1.0 + clip) * adv).mean()
    with torch.no_grad():
        info = {"ratio": ratio.mean(), "clipfrac": ((ratio - 1).abs() > clip).float().mean()}
    return loss, info


@torch.no_grad()
def q_ope(q: nn.Module, policy: GaussianPPOPolicy, states: torch.Tensor) -> float:
    """Off-policy estimate ``Ĵ(π) = mean_s Q(s, μ_π(s))`` over raw dataset states ``(S, Do)`` (μ: the policy's
    mean action, normalised, as it is evaluated), with ``q`` a :class:`QNet`."""
    return float(q(states, policy.distribution(states)[0]).mean())


class QNet(nn.Module):
    """``Q(s, a)``: raw observations ``(B, Do)`` (normalised by the policy's normaliser, shared) and normalised
    actions ``(B, Da)`` → ``(B,)``."""

    def __init__(self, obs_normalizer: ObservationNormalizer, obs_dim: int, action_dim: int, hidden: Sequence[int],
                 act: str):
        super().__init__()
        self.obs_normalizer = obs_normalizer
        self.net = MLP(obs_dim + action_dim, 1, hidden, act=act)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([self.obs_normalizer(obs), actions], -1)).squeeze(-1)


def _log_prob(policy: GaussianPPOPolicy, obs: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``(B,)`` log-probs of normalised actions ``a (B, Da)`` at raw ``obs (B, Do)``."""
    mean, std = policy.distribution(obs)
    return gaussian_log_prob(a, mean, std).sum(-1)


# ---------------------------------------------------------------------- the agent
class UniO4Agent(PPOAgent):
    """Uni-O4: ensemble BC, V/Q of the behaviour, BPPO steps checked by OPE offline; PPO online (module doc).

    Args:
        (the settings of :class:`~robotrl.agents.ppo.agent.PPOAgent`; ``bc_lr`` is the ensemble's BC rate,
        ``critic_lr`` the rate of ``V``'s Monte-Carlo regression, the PPO critic's own optimizer.)
        num_policies: ``K`` ensemble members; bc_alpha: ``α`` of the disagreement term.
        bc_steps, critic_steps, bppo_steps: lengths of the three offline stages in :meth:`bc_update` calls;
            ``agent.onpolicy.pretrain_steps`` must be their sum (the offline phase ends with the choice of member).
        q_hidden, q_act, q_lr: the Q network and its Adam rate; tau, target_update_freq: its Polyak target.
        bppo_lr: members' Adam rate in stage 3 (decayed linearly to 0); bppo_clip: ``ε``; omega: ``ω``;
        bppo_max_grad_norm: gradient clip of the BPPO steps.
        ope_every: BPPO steps between off-policy evaluations; ope_states: ``S``, dataset states they average over
            (the first ones the offline phase sees).

    Raises:
        ConfigError: a count that cannot work, or ``bc_alpha > 0`` with one member (no disagreement).
    """

    def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer: ObservationNormalizer,
                 action_scaler: ActionScaler, hidden: Sequence[int] = (256, 256), act: str = "relu",
                 init_log_std: float = -1.0, obs_clip: float | None = 10.0,
                 critic_hidden: Sequence[int] = (256, 256, 256), critic_act: str = "mish",
                 actor_lr: float = 1e-4, critic_lr: float = 1e-3, gamma: float = 0.99, gae_lambda: float = 0.95,
                 clip: float = 0.2, vf_coef: float = 0.5, n_epochs: int = 5, batch_size: int = 2048,
                 target_kl: float | None = 0.05, max_grad_norm: float | None = 1.0, critic_warmup_iters: int = 0,
                 reward_scaling: bool = True, bc_lr: float = 1e-3, device: str | torch.device = "cpu",
                 seed: int = 0, retention: RetentionConfig | Mapping | None = None,
                 num_policies: int = 4, bc_alpha: float = 0.1, bc_steps: int = 400_000, critic_steps: int = 2_000_000,
                 bppo_steps: int = 10_000, q_hidden: Sequence[int] = (1024, 1024), q_act: str = "relu",
                 q_lr: float = 1e-4, tau: float = 0.005, target_update_freq: int = 2, bppo_lr: float = 1e-4,
                 bppo_clip: float = 0.25, omega: float = 0.7, bppo_max_grad_norm: float | None = 0.5,
                 ope_every: int = 100, ope_states: int = 2048):
        super().__init__(obs_dim, action_dim, obs_normalizer=obs_normalizer, action_scaler=action_scaler,
                         hidden=hidden, act=act, init_log_std=init_log_std, obs_clip=obs_clip,
                         critic_hidden=critic_hidden, critic_act=critic_act, actor_lr=actor_lr, critic_lr=critic_lr,
                         gamma=gamma, gae_lambda=gae_lambda, clip=clip, vf_coef=vf_coef, n_epochs=n_epochs,
                         batch_size=batch_size, target_kl=target_kl, max_grad_norm=max_grad_norm,
                         critic_warmup_iters=critic_warmup_iters, reward_scaling=reward_scaling, bc_lr=bc_lr,
                         device=device, seed=seed, retention=retention)
        for name, value in (("num_policies", num_policies), ("ope_every", ope_every), ("ope_states", ope_states),
                            ("target_update_freq", target_update_freq), ("bc_steps", bc_steps)):
            if int(value) < 1:
                raise ConfigError(f"agent.model.{name} must be >= 1, got {value}")
        for name, value in (("critic_steps", critic_steps), ("bppo_steps", bppo_steps)):
            if int(value) < 0:
                raise ConfigError(f"agent.model.{name} must be >= 0, got {value}")
        if bc_alpha > 0 and int(num_policies) < 2:
            raise ConfigError("agent.model.bc_alpha > 0 weighs the disagreement between ensemble members: set "
                              "agent.model.num_policies >= 2, or agent.model.bc_alpha=0")
        if not 0.0 <= omega <= 1.0:
            raise ConfigError(f"agent.model.omega weighs positive advantages in [0, 1], got {omega}")
        K, dev = int(num_policies), self.device
        self.bc_alpha, self.bppo_clip, self.omega = float(bc_alpha), float(bppo_clip), float(omega)
        self.bc_steps, self.critic_steps, self.bppo_steps = int(bc_steps), int(critic_steps), int(bppo_steps)
        self.bppo_lr, self.bppo_max_grad_norm = float(bppo_lr), bppo_max_grad_norm
        self.tau, self.target_update_freq = float(tau), int(target_update_freq)
        self.ope_every, self.ope_states = int(ope_every), int(ope_states)

        # the ensemble: K policies of the PPO policy's class, each its own initialisation (seeded from the run seed)
        spec = self.policy.spec()
        torch_state = torch.random.get_rng_state()
        torch.manual_seed(int(seed) + 7919)
        self.members = nn.ModuleList()
        for _ in range(K):
            m = GaussianPPOPolicy(spec["obs_dim"], spec["action_dim"], spec["hidden"], act=spec["act"],
                                  init_log_std=spec["init_log_std"], obs_clip=spec["obs_clip"])
            m.set_normalizers(obs_normalizer, action_scaler)
            self.members.append(m.to(dev))
        self.q = QNet(self.policy.obs_normalizer, obs_dim, action_dim, q_hidden, q_act).to(dev)
        torch.random.set_rng_state(torch_state)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.behaviours = copy.deepcopy(self.members).requires_grad_(False)  # π_β,i of stage 3
        self.member_bc_opts = [torch.optim.Adam(m.parameters(), lr=bc_lr) for m in self.members]
        self.member_bppo_opts = [torch.optim.Adam(m.parameters(), lr=bppo_lr) for m in self.members]
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=q_lr)
        # offline progress: stage counter, OPE pool and scores, chosen member
        self.offline_step = 0
        self.q_updates = 0
        self.ope_pool = torch.zeros((0, obs_dim), device=dev)
        self.best_ope = torch.full((K,), float("-inf"))
        self.accepted = torch.zeros(K, dtype=torch.long)    # accepted BPPO evaluations per member
        self.chosen = -1                                    # member that became the PPO policy (-1: not yet)

    @property
    def offline_total(self) -> int:
        """``bc_steps + critic_steps + bppo_steps``: the offline phase's :meth:`bc_update` calls."""
        return self.bc_steps + self.critic_steps + self.bppo_steps

    # ------------------------------------------------------------------ offline phase (the pretraining hook)
    def bc_update(self, batch: Batch) -> dict[str, torch.Tensor]:
        """One step of the offline phase's current stage on ``B`` dataset transitions (module doc, stages 1-4).

        Args:
            batch: ``observations (B, Do)``, ``actions (B, Da)`` raw, ``rewards``, ``terminated``,
                ``mc_returns (B,)`` (``-inf`` where the episode did not end in the data), ``next_observations``.

        Returns:
            Stage metrics and always ``bc_loss``: the members' mean negative log-likelihood of the batch's actions
            (the loss trained in stage 1, a measure of the drift from the data after).

        Raises:
            ConfigError: a call past ``bc_steps + critic_steps + bppo_steps`` (``pretrain_steps`` too large).
        """
        k = self.offline_step
        if k >= self.offline_total:
            raise ConfigError(f"Uni-O4's offline phase has {self.offline_total} steps (bc_steps + critic_steps + "
                              f"bppo_steps): set agent.onpolicy.pretrain_steps={self.offline_total}")
        batch = batch.to(self.device)
        obs = batch.observations
        act = self.policy.action_scaler.normalize(batch.actions).clamp(-1.0, 1.0)
        if self.ope_pool.shape[0] < self.ope_states:  # the first S states seen: the OPE's fixed pool
            self.ope_pool = torch.cat([self.ope_pool, obs[: self.ope_states - self.ope_pool.shape[0]]])
        if k < self.bc_steps:
            out = self._bc_step(obs, act)
        elif k < self.bc_steps + self.critic_steps:
            out = self._critic_step(batch, obs, act)
        else:
            out = self._bppo_step(obs, k - self.bc_steps - self.critic_steps)
        if "bc_loss" not in out:
            with torch.no_grad():
                out["bc_loss"] = -torch.stack([_log_prob(m, obs, act) for m in self.members]).mean()
        self.offline_step += 1
        if self.offline_step == self.offline_total:
            self._choose_member()
        return out

    def _bc_step(self, obs: torch.Tensor, act: torch.Tensor) -> dict[str, torch.Tensor]:
        """Stage 1: every member one Adam step on its likelihood with the disagreement term."""
        with torch.no_grad():
            logp_all = torch.stack([_log_prob(m, obs, act) for m in self.members])  # (K, B)
        losses = []
        for i, (m, opt) in enumerate(zip(self.members, self.member_bc_opts)):
            logp = logp_all.clone()
            logp[i] = _log_prob(m, obs, act)
            loss = ensemble_bc_loss(logp, i, self.bc_alpha)
            optimizer_step(loss, opt, m.parameters(), None)
            with torch.no_grad():
                logp_all[i] = _log_prob(m, obs, act)  # the next members see this one's update (the reference's order)
            losses.append(loss.detach())
        return {"bc_loss": -logp_all.mean(), "bc_joint_loss": torch.stack(losses).mean()}

    def _critic_step(self, batch: Batch, obs: torch.Tensor, act: torch.Tensor) -> dict[str, torch.Tensor]:
        """Stage 2: ``V`` on the Monte-Carlo returns, ``Q`` by fitted Q evaluation of the behaviour."""
        out: dict[str, torch.Tensor] = {}
        mc = batch.mc_returns
        ok = torch.isfinite(mc) if mc is not None else torch.zeros(len(batch), dtype=torch.bool, device=self.device)
        if bool(ok.any()):
            v = self.critic(self.policy.obs_normalizer(obs[ok]))
            v_loss = 0.5 * (v - mc[ok]).pow(2).mean()
            optimizer_step(v_loss, self.critic_opt, self.critic.parameters(), None)
            out["v_loss"] = v_loss.detach()
        with torch.no_grad():
            nobs = batch.next_observations
            pick = torch.randint(len(self.members), (len(batch),), generator=self.gen, device=self.device)
            means, stds = zip(*(m.distribution(nobs) for m in self.members))
            mean = torch.stack(means)[pick, torch.arange(len(batch), device=self.device)]
            std = torch.stack(stds)[pick, torch.arange(len(batch), device=self.device)]
            a_next = (mean + std * torch.randn(mean.shape, generator=self.gen, device=self.device)).clamp(-1.0, 1.0)
            target = batch.rewards + self.gamma * (1.0 - batch.terminated) * self.q_target(nobs, a_next)
        q_loss = 0.5 * (self.q(obs, act) - target).pow(2).mean()
        optimizer_step(q_loss, self.q_opt, self.q.parameters(), None)
        self.q_updates += 1
        if self.q_updates % self.target_update_freq == 0:
            polyak_update_(self.q_target.parameters(), self.q.parameters(), self.tau)
        out["q_loss"] = q_loss.detach()
        return out

    def _bppo_step(self, obs: torch.Tensor, j: int) -> dict[str, torch.Tensor]:
        """Stage 3: BPPO step ``j`` of every member against its behaviour policy; every ``ope_every`` steps the
        OPE accepts (behaviour ← current) or keeps the behaviour policy."""
        if j == 0:  # the cloned policies are the first behaviour policies, their OPE the score to beat
            self.behaviours.load_state_dict(self.members.state_dict())
            self.best_ope = torch.tensor([q_ope(self.q, m, self.ope_pool) for m in self.members])
        lr = self.bppo_lr * (1.0 - j / self.bppo_steps)
        with torch.no_grad():
            v = self.critic(self.policy.obs_normalizer(obs))
        losses, ratios = [], []
        for m, beh, opt in zip(self.members, self.behaviours, self.member_bppo_opts):
            with torch.no_grad():
                mean, std = beh.distribution(obs)
                a = mean + std * torch.randn(mean.shape, generator=self.gen, device=self.device)
                logp_beh = gaussian_log_prob(a, mean, std).sum(-1)
                adv = weighted_advantages(self.q(obs, a.clamp(-1.0, 1.0)) - v, self.omega)
            loss, info = bppo_policy_loss(_log_prob(m, obs, a), logp_beh, adv, self.bppo_clip)
            for g in opt.param_groups:
                g["lr"] = lr
            optimizer_step(loss, opt, m.parameters(), self.bppo_max_grad_norm)
            losses.append(loss.detach())
            ratios.append(info["ratio"])
        out = {"bppo_loss": torch.stack(losses).mean(), "bppo_ratio": torch.stack(ratios).mean()}
        if (j + 1) % self.ope_every == 0 or j + 1 == self.bppo_steps:
            out.update(self.ope_check())
        return out

    def ope_check(self) -> dict[str, torch.Tensor]:
        """Score every member by :func:`q_ope`; accept (its behaviour policy ← the member) where the score beats the
        member's best so far, else keep the behaviour policy. Returns ``ope_mean`` and ``ope_accepted`` (count)."""
        scores = torch.tensor([q_ope(self.q, m, self.ope_pool) for m in self.members])
        better = scores > self.best_ope
        for i in torch.nonzero(better).flatten().tolist():
            self.behaviours[i].load_state_dict(self.members[i].state_dict())
            self.best_ope[i] = scores[i]
            self.accepted[i] += 1
        return {"ope_mean": scores.mean(), "ope_accepted": better.sum().float()}

    def _choose_member(self) -> None:
        """Stage 4: members ← their last accepted policies; the best by OPE becomes the PPO policy."""
        if self.bppo_steps == 0:  # no improvement stage: the cloned policies, scored once
            self.behaviours.load_state_dict(self.members.state_dict())
            self.best_ope = torch.tensor([q_ope(self.q, m, self.ope_pool) for m in self.members])
        self.members.load_state_dict(self.behaviours.state_dict())
        self.chosen = int(torch.argmax(self.best_ope))
        self.policy.load_state_dict(self.members[self.chosen].state_dict())

    # ------------------------------------------------------------------ online: PPO from the chosen policy and V
    def start_online(self) -> None:
        """PPO's :meth:`~robotrl.agents.ppo.agent.PPOAgent.start_online`, once the offline phase is complete (or
        never started: a warm start or plain PPO).

        Raises:
            ConfigError: the offline phase stopped part way (``pretrain_steps`` smaller than its stages).
        """
        if 0 < self.offline_step < self.offline_total:
            raise ConfigError(f"Uni-O4's offline phase stopped after {self.offline_step} of its {self.offline_total} "
                              f"steps (bc_steps + critic_steps + bppo_steps): set "
                              f"agent.onpolicy.pretrain_steps={self.offline_total}")
        super().start_online()

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict:
        """PPO's state plus ``unio4``: the ensemble (members, behaviour policies), ``Q`` and its target, the OPE pool
        and best scores, accepted counts, the chosen member and the stage counters. (The members' optimizers are
        not kept: the on-policy loop checkpoints after the offline phase, not inside it.)"""
        out = super().state_dict()
        out["unio4"] = {"members": self.members.state_dict(), "behaviours": self.behaviours.state_dict(),
                        "q": self.q.state_dict(), "q_target": self.q_target.state_dict(),
                        "q_opt": self.q_opt.state_dict(), "ope_pool": self.ope_pool.detach().cpu(),
                        "best_ope": self.best_ope.clone(), "accepted": self.accepted.clone(), "chosen": self.chosen,
                        "offline_step": self.offline_step, "q_updates": self.q_updates}
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (a PPO checkpoint without ``unio4`` loads as PPO: offline phase not run)."""
        super().load_state_dict(state)
        u = state.get("unio4")
        if u is None:
            return
        self.members.load_state_dict(u["members"])
        self.behaviours.load_state_dict(u["behaviours"])
        self.q.load_state_dict(u["q"])
        self.q_target.load_state_dict(u["q_target"])
        self.q_opt.load_state_dict(u["q_opt"])
        self.ope_pool = u["ope_pool"].to(self.device)
        self.best_ope, self.accepted = u["best_ope"].clone(), u["accepted"].clone()
        self.chosen, self.offline_step, self.q_updates = int(u["chosen"]), int(u["offline_step"]), int(u["q_updates"])

