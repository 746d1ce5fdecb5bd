"""The run schedules as Hydra structured configs: the one source of their defaults and types.

:class:`TrainerConfig` (``trainer.*`` of ``robotrl train``) and :class:`OnPolicyConfig`
(``agent.onpolicy.*`` of the on-policy agents) are registered in Hydra's ``ConfigStore`` as
``schema/trainer`` and ``schema/onpolicy`` (:func:`register`); ``configs/train.yaml`` and the
on-policy agent configs extend them through their defaults lists. So a wrong type
(``trainer.utd=fast``) or an unknown key (``trainer.ofline_steps=100``) fails when Hydra composes
the config, before anything is built, and no YAML repeats a default (Hydra's structured configs;
SB3's habit of one meaning per knob).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from robotrl.errors import ConfigError
from robotrl.utils import check_schedule

__all__ = ["TrainerConfig", "OnPolicyConfig", "RetentionConfig", "RetentionTerm", "register"]


@dataclass
class TrainerConfig:
    """Schedule of a run (all counts in gradient updates offline, env steps online).

    Attributes:
        offline_steps: gradient updates on the dataset before going online.
        online_steps: env steps online (0: offline only).
        batch_size: transitions per critic (or policy) update; the sampled batch is ``utd × batch_size``
            for agents that split it (:mod:`robotrl.utd`).
        n_step: n-step returns of the TD target.
        eval_every, checkpoint_every, log_every: cadences in the loop's clock (updates offline, env steps online).
        eval_episodes, eval_envs: evaluation episodes per point and the envs running them.
        num_envs: online training envs.
        online_buffer_size: capacity of the online replay buffer (transitions).
        online_warmup_steps: env steps collected before the first online update.
        utd: critic updates per env step (the one meaning of UTD, :mod:`robotrl.utd`).
        offline_ratio: share of each online batch drawn from the offline buffer (RLPD 0.5).
        progress: show a progress display.
        init_from: warm start of every agent (off- and on-policy): checkpoint file or run dir (ignored on resume).
        init_parts: parts to load via ``agent.load_parts`` (e.g. ``[policy]``); ``None``: the whole agent (or
            ``agent.load_pretrained``).
        warmup_updates: updates run once on the online buffer when online warmup ends (PORL's pre-sample).
        her_ratio: off-policy goal tasks (Fetch, PointMaze): share of each batch relabelled with a future
            achieved goal (HER 0.8).
        keep_best: also keep ``checkpoints/best.pt``, the policy of the best evaluation so far (selected on the
            run's own evaluation episodes: report it with ``robotrl eval checkpoint=<run>/checkpoints/best.pt
            episodes=50`` on held-out episodes).
        validation_fraction: a run without an env (a dataset with no ``env_spec`` and no ``env.name``, e.g.
            recorded on a robot): the share of episodes held out of training to measure the policy on
            (:mod:`robotrl.validation`); unused when there is an env.
        forgetting_starts: held-out resets of the forgetting metric (:func:`robotrl.evaluation.forgetting_report`:
            the policy at the online start vs the final policy from the resets farthest from the online data),
            computed when an off-policy run's online phase ends and written to its report (``forgetting``,
            ``forgetting_near``, ``forgetting_detail``); 0: off. State observations only.
    """

    offline_steps: int = 20_000
    online_steps: int = 0
    batch_size: int = 256
    n_step: int = 1
    eval_every: int = 5_000
    eval_episodes: int = 20
    eval_envs: int = 10
    checkpoint_every: int = 5_000
    log_every: int = 250
    num_envs: int = 1
    online_buffer_size: int = 1_000_000
    online_warmup_steps: int = 1_000
    utd: int = 1
    offline_ratio: float = 0.5
    progress: bool = True
    init_from: str | None = None
    init_parts: list[str] | None = None
    warmup_updates: int = 0
    her_ratio: float = 0.0
    validation_fraction: float = 0.1
    keep_best: bool = False
    forgetting_starts: int = 0

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (negative budgets, zero batch, ...)."""
        check_schedule(self, "trainer", positive=("batch_size", "n_step", "eval_every", "eval_episodes", "eval_envs",
                                                  "checkpoint_every", "log_every", "num_envs", "online_buffer_size",
                                                  "utd"),
                       non_negative=("offline_steps", "online_steps", "online_warmup_steps", "warmup_updates",
                                     "forgetting_starts"),
                       fractions=("offline_ratio", "her_ratio", "validation_fraction"))


@dataclass
class OnPolicyConfig:
    """Schedule of an on-policy fine-tuning run (budgets in iterations and env steps).

    Attributes:
        iterations: rollout-and-update iterations.
        steps_per_iter: ``T``, chunk steps per env per iteration.
        num_envs: rollout envs.
        eval_every, checkpoint_every: cadences in iterations.
        eval_episodes, eval_envs: evaluation episodes per point and the envs running them.
        max_env_steps: stop once this many env steps were collected (``None``: the iterations' budget).
        pretrain_steps: behaviour-cloning updates on the dataset before going online (``agent.bc_update``).
        pretrain_batch_size: their batch size.
        vectorization: ``sync`` or ``async`` vector envs.
        progress: show a progress display (the trainer's setting).
    """

    iterations: int = 100
    steps_per_iter: int = 500
    num_envs: int = 40
    eval_every: int = 10
    eval_episodes: int = 20
    eval_envs: int = 10
    checkpoint_every: int = 10
    max_env_steps: int | None = None
    pretrain_steps: int = 0
    pretrain_batch_size: int = 256
    vectorization: str = "sync"
    progress: bool = True

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (zero envs, negative budgets, ...)."""
        check_schedule(self, "agent.onpolicy", positive=("iterations", "steps_per_iter", "num_envs", "eval_every",
                                                         "eval_episodes", "eval_envs", "checkpoint_every",
                                                         "pretrain_batch_size"),
                       non_negative=("max_env_steps", "pretrain_steps"))


def register() -> None:
    """Store :class:`TrainerConfig` as ``schema/trainer`` and :class:`OnPolicyConfig` as ``schema/onpolicy`` in
    Hydra's ``ConfigStore`` (idempotent; done when :mod:`robotrl.configs` is imported, which Hydra does before
    composing any robotrl config)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(group="schema", name="trainer", node=TrainerConfig)
    cs.store(group="schema", name="onpolicy", node=OnPolicyConfig)


# ---------------------------------------------------------------------- knowledge retention
DECAYS = ("none", "linear", "exp")
PENALTIES = ("kl", "l2")
KL_STATES = ("online", "offline")

@dataclass(frozen=True)
class RetentionTerm:
    """One knowledge-retention term (:mod:`robotrl.agents.retention`): its weight and the decay of that weight.

    Args:
        weight: ``w ≥ 0`` (``bc``/``kl``: loss coefficient; ``replay``: batch fraction ``ρ ∈ [0, 1]``).
        decay: ``"none"``, ``"linear"`` (to 0 at ``decay_steps``) or ``"exp"`` (half-life ``decay_steps``).
        decay_steps: ``T`` in retention steps (:mod:`robotrl.agents.retention`); must be > 0 unless
            ``decay="none"``.
    """

    weight: float = 0.0
    decay: str = "none"
    decay_steps: int = 0

    def at(self, step: int) -> float:
        """The weight after ``step`` retention steps."""
        if self.weight == 0.0 or self.decay == "none":
            return float(self.weight)
        if self.decay == "linear":
            return float(self.weight) * max(0.0, 1.0 - step / self.decay_steps)
        return float(self.weight) * 0.5 ** (step / self.decay_steps)


@dataclass(frozen=True)
class RetentionConfig:
    """Knowledge-retention settings (``agent.model.retention``; :mod:`robotrl.agents.retention`). Defaults: all off.

    Declared here, beside the run schedules, so that the build parts (:func:`robotrl.experiment_parts.offline_buffer`)
    know whether a run must keep its pretraining data without importing an agent.

    Args:
        bc: behaviour cloning on the pretraining data (dataset actions' negative log-likelihood).
        kl: penalty toward the frozen pretrained policy (``penalty``, ``kl_states``).
        replay: offline replay, fraction of each Q-learning batch (Q-learning family only).
        penalty: ``"kl"`` (``KL(π₀ ‖ π)``, closed form) or ``"l2"`` (``‖μ − μ₀‖²``).
        kl_states: ``"online"`` (the actor's minibatch: kickstarting) or ``"offline"`` (dataset states).
        batch_size: rows sampled from the pretraining data per retention step for ``bc`` and offline
            ``kl`` (``None``: the actor minibatch's size).
    """

    bc: RetentionTerm = field(default_factory=RetentionTerm)
    kl: RetentionTerm = field(default_factory=RetentionTerm)
    replay: RetentionTerm = field(default_factory=RetentionTerm)
    penalty: str = "kl"
    kl_states: str = "online"
    batch_size: int | None = None

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any] | RetentionConfig | None) -> RetentionConfig:
        """A config from ``agent.model.retention`` (a mapping, e.g. Hydra's ``DictConfig``; ``None``: all off).

        Raises:
            ConfigError: an unknown key, a negative weight, a replay fraction above 1, an unknown
                ``decay``/``penalty``/``kl_states``, or a decay without ``decay_steps > 0`` (one line
                naming the setting).
        """
        if isinstance(given, RetentionConfig):
            given.check()
            return given
        raw = dict(given or {})
        known = {f.name for f in fields(cls)}
        for k in raw:
            if k not in known:
                raise ConfigError(f"agent.model.retention.{k} is not a retention setting; choose from {sorted(known)}")
        terms = {}
        for name in ("bc", "kl", "replay"):
            sub = dict(raw.pop(name, None) or {})
            bad = set(sub) - {"weight", "decay", "decay_steps"}
            if bad:
                raise ConfigError(f"agent.model.retention.{name}.{sorted(bad)[0]} is not a term setting; "
                                  "choose from weight, decay, decay_steps")
            terms[name] = RetentionTerm(float(sub.get("weight", 0.0)), str(sub.get("decay", "none")),
                                        int(sub.get("decay_steps", 0)))
        cfg = cls(**terms, **raw)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Raises :class:`~robotrl.errors.ConfigError` on a setting that cannot work (:meth:`from_mapping`)."""
        for name in ("bc", "kl", "replay"):
            t: RetentionTerm = getattr(self, name)
            key = f"agent.model.retention.{name}"
            if not math.isfinite(t.weight) or t.weight < 0:
                raise ConfigError(f"{key}.weight={t.weight} must be a finite number >= 0 (0: off)")
            if t.decay not in DECAYS:
                raise ConfigError(f"{key}.decay={t.decay!r} is unknown; choose from {DECAYS}")
            if t.decay != "none" and t.decay_steps <= 0:
                raise ConfigError(f"{key}.decay={t.decay} needs {key}.decay_steps > 0 (retention steps), "
                                  f"got {t.decay_steps}")
        if self.replay.weight > 1:
            raise ConfigError(f"agent.model.retention.replay.weight={self.replay.weight} is a batch fraction: "
                              "choose it in [0, 1]")
        if self.penalty not in PENALTIES:
            raise ConfigError(f"agent.model.retention.penalty={self.penalty!r} is unknown; choose from {PENALTIES}")
        if self.kl_states not in KL_STATES:
            raise ConfigError(f"agent.model.retention.kl_states={self.kl_states!r} is unknown; choose from {KL_STATES}")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError(f"agent.model.retention.batch_size={self.batch_size} must be > 0 (or null)")

    @property
    def enabled(self) -> bool:
        """Whether any term has a weight."""
        return any(getattr(self, n).weight > 0 for n in ("bc", "kl", "replay"))

    @property
    def reads_data(self) -> bool:
        """Whether a term samples the pretraining data (``bc``, ``replay``, or ``kl`` on offline states)."""
        return self.bc.weight > 0 or self.replay.weight > 0 or (self.kl.weight > 0 and self.kl_states == "offline")
