"""The update-to-data (UTD) schedule: one knob, ``trainer.utd``, and the sampled batch derived.

``trainer.utd`` is the number of critic updates per env step and ``trainer.batch_size`` the
minibatch of one critic update. Agents that split one sampled batch into interleaved critic
minibatches (WSRL/RLPD's batch split, :class:`robotrl.agents.qlearning.QLAgent`: ``critic_utd``
critic updates, then one actor update per :meth:`update` call) get one call on
``critic_utd × batch_size`` transitions per ``critic_utd`` critic updates; every other agent
gets ``utd`` calls on ``batch_size`` transitions (Ball et al. 2023, RLPD; Zhou et al. 2024, WSRL).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from robotrl.errors import ConfigError

if TYPE_CHECKING:
    from robotrl.agent import OffPolicyAgent


@dataclass(frozen=True)
class UpdateSchedule:
    """How a trainer feeds an agent.

    Attributes:
        calls_per_step: ``agent.update`` calls per env step (online); a fraction below 1 for a UTD below 1
            (the robot learner, which paces its updates to the transitions it receives).
        sampled_batch: transitions sampled for one call (``split × minibatch``).
        split: critic minibatches one call splits its batch into (1: no split).
    """

    calls_per_step: int | float
    sampled_batch: int
    split: int


def batch_split(agent: OffPolicyAgent) -> int:
    """Critic minibatches one ``agent.update`` call makes of its batch (``agent.critic_utd``; 0 or ``None`` count as 1)."""
    return int(agent.critic_utd or 1)


def update_schedule(split: int, utd: int | float, minibatch: int) -> UpdateSchedule:
    """Derive the calls per env step and the sampled batch from the UTD and the minibatch size.

    Args:
        split: the agent's batch split (:func:`batch_split`).
        utd: critic updates per env step (``trainer.utd``; on the robot learner, per transition received,
            where a fraction, e.g. 0.25, updates once every 4 transitions).
        minibatch: transitions per critic update (``trainer.batch_size``).

    Returns:
        :class:`UpdateSchedule` with ``calls_per_step · split == utd`` and
        ``sampled_batch == split · minibatch``.

    Raises:
        ConfigError: the agent's split does not divide ``utd`` (set ``agent.model.critic_utd``
            from ``trainer.utd``, as ``configs/agent/sac.yaml`` does), a fractional UTD with a split
            above 1, or ``utd <= 0``.
    """
    if utd <= 0:
        raise ConfigError(f"trainer.utd={utd}: critic updates per env step must be > 0")
    if float(utd).is_integer():
        utd = int(utd)
        if split < 1 or utd % split:
            raise ConfigError(f"agent.model.critic_utd={split} must divide trainer.utd={utd} "
                              "(critic updates per env step; leave critic_utd at its default ${trainer.utd})")
        return UpdateSchedule(calls_per_step=utd // split, sampled_batch=split * minibatch, split=split)
    if split != 1:
        raise ConfigError(f"trainer.utd={utd} is fractional, so each update is one critic minibatch: set "
                          "agent.model.critic_utd=1")
    return UpdateSchedule(calls_per_step=float(utd), sampled_batch=minibatch, split=1)
