"""ReinFlow (flow-policy fine-tuning with a learnable noise net and PPO): ``loss`` (bounded std,
exact chain log-likelihood, entropy, W2 regulariser, noise-bound schedule), ``policy``
(deployable deterministic flow + noise net), ``agent`` (rollout chains, PPO update)."""

from robotrl.agents.reinflow.agent import ReinFlowAgent
from robotrl.agents.reinflow.policy import ReinFlowPolicy

__all__ = ["ReinFlowAgent", "ReinFlowPolicy"]
