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

from dataclasses import dataclass

from robotrl.utils import check_schedule

__all__ = ["TrainerConfig", "OnPolicyConfig", "register"]


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
        validation_fraction: a run without an env (a dataset with no ``env_spec`` and no ``env.name``, e.g.
            recorded on a robot): the share of episodes held out of training to measure the policy on
            (:mod:`robotrl.validation`); unused when there is an env.
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

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (negative budgets, zero batch, ...)."""
        check_schedule(self, "trainer", positive=("batch_size", "n_step", "eval_every", "eval_episodes", "eval_envs",
                                                  "checkpoint_every", "log_every", "num_envs", "online_buffer_size",
                                                  "utd"),
                       non_negative=("offline_steps", "online_steps", "online_warmup_steps", "warmup_updates"),
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
