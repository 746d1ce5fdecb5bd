"""Diffusion policy (DDPM/DDIM over action chunks): ``schedule`` (noise schedule, single
steps), ``networks`` (denoisers), ``sampling`` (reverse chains), ``loss`` (pure losses),
``policy`` (deployable, chunk queues; cameras an option of its observation), ``agent`` (pretraining update,
EMA, acting)."""

from robotrl.agents.diffusion.agent import DiffusionAgent
from robotrl.agents.diffusion.policy import DiffusionPolicy

__all__ = ["DiffusionAgent", "DiffusionPolicy"]
