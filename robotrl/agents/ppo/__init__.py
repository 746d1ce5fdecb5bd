"""Gaussian MLP PPO fine-tuning (DPPO's baseline): ``update`` (the on-policy pieces shared with residual PPO
and DPPO: GAE preparation, the epoch loop, state), ``loss`` (pure
PPO losses, shared with DPPO), ``policy`` (deployable), ``agent`` (rollout acting, update)."""

from robotrl.agents.ppo.agent import PPOAgent
from robotrl.agents.ppo.policy import GaussianPPOPolicy

__all__ = ["PPOAgent", "GaussianPPOPolicy"]
