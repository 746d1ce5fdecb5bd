"""MLP behaviour cloning: ``networks`` (actor), ``loss`` (pure losses), ``policy`` (deployable), ``agent`` (update/acting)."""

from robotrl.agents.bc.agent import BCAgent
from robotrl.agents.bc.policy import BCPolicy

__all__ = ["BCAgent", "BCPolicy"]
