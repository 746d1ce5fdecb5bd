"""Residual RL on a frozen base policy: ``base`` (loaders: robotrl checkpoints, SB3 .zip),
``policy`` (deployable :class:`ResidualPolicy`), ``ppo`` (ResiP), ``offpolicy`` (ResFiT /
Policy Decorator); cameras are an option of the observation of each (``image_shapes``). Success as termination for training envs is the env layer's
(:class:`robotrl.envs.SuccessTermination`, ``env.train_terminate_on_success``)."""

from robotrl.agents.residual.base import SB3BasePolicy, load_base, load_sb3_base
from robotrl.agents.residual.offpolicy import ResidualOffPolicyAgent
from robotrl.agents.residual.policy import ResidualPolicy, check_base_fits
from robotrl.agents.residual.ppo import ResidualPPOAgent

__all__ = ["ResidualOffPolicyAgent", "ResidualPolicy", "ResidualPPOAgent", "SB3BasePolicy", "check_base_fits",
           "load_base", "load_sb3_base"]
