"""Flow-matching policy (rectified flow over action chunks): ``sampling`` (Euler chain,
interpolation path), ``loss`` (pure losses), ``policy`` (deployable, chunk queues),
``agent`` (pretraining update, EMA), ``export`` (traceable fixed-noise sampler), ``shortcut``
(shortcut models: step-size-conditioned network and training grid; ``shortcut=True``)."""

from robotrl.agents.flow.agent import FlowAgent
from robotrl.agents.flow.policy import FlowPolicy

__all__ = ["FlowAgent", "FlowPolicy"]
