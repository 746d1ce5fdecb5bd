"""Residual RL on a frozen base policy: ``base`` (loaders: robotrl checkpoints, SB3 .zip),
``policy`` (deployable :class:`ResidualPolicy`), ``ppo`` (ResiP), ``offpolicy`` (ResFiT /
Policy Decorator), ``pixels`` (ResFiT on cameras). Success as termination for training envs is the env layer's
(:class:`robotrl.envs.SuccessTermination`, ``env.train_terminate_on_success``)."""

from robotrl.agents.residual.base import SB3BasePolicy, load_base, load_sb3_base
from robotrl.agents.residual.offpolicy import ResidualOffPolicyAgent
from robotrl.agents.residual.pixels import PixelResidualAgent, PixelResidualPolicy
from robotrl.agents.residual.policy import ResidualPolicy
from robotrl.agents.residual.ppo import ResidualPPOAgent

__all__ = ["PixelResidualAgent", "PixelResidualPolicy", "ResidualOffPolicyAgent", "ResidualPolicy", "ResidualPPOAgent",
           "SB3BasePolicy", "load_base", "load_sb3_base"]
