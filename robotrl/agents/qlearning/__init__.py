"""Warm-start Q-learning: SAC core with an ensemble critic, CQL / Cal-QL / IQL offline, WSRL / RLPD / PORL online.

``networks`` (ensemble critic, tanh-Gaussian actor, value), ``loss`` (pure losses),
``policy`` (deployable), ``agent`` (update/acting). The modes are configs of one agent:
see ``configs/agent/{sac,cql,calql,iql,wsrl,rlpd,porl,calql-online,iql-online}.yaml``.
"""

from robotrl.agents.qlearning.agent import QLAgent
from robotrl.agents.qlearning.policy import QLPolicy

__all__ = ["QLAgent", "QLPolicy"]
