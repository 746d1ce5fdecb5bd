"""DPPO (Diffusion Policy Policy Optimization): ``loss`` (clip schedule, denoising discount,
chunk log-probs), ``policy`` (deployable, frozen + fine-tuned denoisers, K' recorded),
``agent`` (rollout sampling, denoising-MDP log-probs, PPO update)."""

from robotrl.agents.dppo.agent import DPPOAgent
from robotrl.agents.dppo.policy import DPPOPolicy

__all__ = ["DPPOAgent", "DPPOPolicy"]
