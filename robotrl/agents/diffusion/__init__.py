"""Diffusion policy (DDPM/DDIM over action chunks): ``schedule`` (noise schedule, single
steps), ``networks`` (denoisers), ``sampling`` (reverse chains), ``loss`` (pure losses),
``policy`` (deployable, chunk queues), ``agent`` (pretraining update, EMA, acting), ``pixels`` (the same on
camera features: :class:`PixelDiffusionPolicy`, :class:`PixelDiffusionAgent`)."""

from robotrl.agents.diffusion.agent import DiffusionAgent
from robotrl.agents.diffusion.pixels import PixelDiffusionAgent, PixelDiffusionPolicy
from robotrl.agents.diffusion.policy import DiffusionPolicy

__all__ = ["DiffusionAgent", "DiffusionPolicy", "PixelDiffusionAgent", "PixelDiffusionPolicy"]
