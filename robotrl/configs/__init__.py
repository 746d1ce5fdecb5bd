"""Hydra configs shipped with the package; importing it registers the structured configs they extend.

- ``schema/trainer`` and ``schema/onpolicy`` (:func:`robotrl.schema.register`): ``trainer.*`` in ``train.yaml``,
  ``agent.onpolicy.*`` in the on-policy agent configs;
- ``schema/model/<ClassName>`` for each agent class of :data:`AGENTS` (:func:`robotrl.schema.register_agents`):
  ``agent.model.*``, the settings of the class's constructor with its defaults (:func:`robotrl.schema.model_schema`).
  Every ``configs/agent/*.yaml`` extends its class's schema (``defaults: [/schema/model/QLAgent@model, _self_]``,
  or its parent config, which does) and writes only its presets: the constructor is the one source of each default.

It imports the agent classes, so it sits at the top of the import layers beside :mod:`robotrl.cli`
(``tests/test_layers.py``); nothing in the core imports it (Hydra does, to compose a config).
"""

from robotrl.agents.bc import BCAgent
from robotrl.agents.diffusion import DiffusionAgent
from robotrl.agents.dppo import DPPOAgent
from robotrl.agents.flow import FlowAgent
from robotrl.agents.flow.distill import FlowDistillAgent
from robotrl.agents.ppo import PPOAgent
from robotrl.agents.ppo.unio4 import UniO4Agent
from robotrl.agents.qlearning import QLAgent
from robotrl.agents.reinflow import ReinFlowAgent
from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPPOAgent
from robotrl.real_robot.reward_classifier import RewardClassifierAgent
from robotrl.schema import register as _register
from robotrl.schema import register_agents as _register_agents

#: The agent classes ``configs/agent/*.yaml`` instantiate (``model._target_``, the schema's default): each is
#: registered as ``schema/model/<ClassName>``.
AGENTS: tuple[type, ...] = (BCAgent, DiffusionAgent, DPPOAgent, FlowAgent, FlowDistillAgent, PPOAgent, QLAgent,
                            ReinFlowAgent, ResidualOffPolicyAgent, ResidualPPOAgent, RewardClassifierAgent, UniO4Agent)

_register()
_register_agents(AGENTS)
