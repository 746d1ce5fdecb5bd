"""Hydra configs shipped with the package; importing it registers the structured configs they extend.

- ``schema/trainer`` and ``schema/onpolicy`` (:func:`robotrl.schema.register`): ``trainer.*`` in ``train.yaml``,
  ``agent.onpolicy.*`` in the on-policy agent configs;
- ``schema/model/<ClassName>`` for each agent class of :data:`AGENTS` (:func:`robotrl.schema.register_agents`):
  ``agent.model.*``, the settings of the class's constructor with its defaults (:func:`robotrl.schema.model_schema`).
  Every ``configs/agent/*.yaml`` extends its class's schema (``defaults: [/schema/model/QLAgent@model, _self_]``,
  or its parent config, which does) and writes only its presets: the constructor is the one source of each default.

The schemas are registered from the agent settings table (:data:`TABLE`, :func:`robotrl.schema.schemas_from_table`),
so composing a config imports no agent class and no torch; ``tests/test_configs.py`` keeps the table equal to the
constructors and ``python -m robotrl.configs`` rewrites it. The package sits at the top of the import layers beside
:mod:`robotrl.cli` (``tests/test_layers.py``): :func:`agent_classes` imports the agents; nothing in the core imports it.
"""

from __future__ import annotations

import importlib
import json
from importlib import resources

from robotrl.schema import register as _register
from robotrl.schema import register_agents as _register_agents
from robotrl.schema import schemas_from_table as _schemas_from_table

#: The agent classes ``configs/agent/*.yaml`` instantiate (``model._target_``, the schema's default), as
#: ``module:Class``: each is registered as ``schema/model/<Class>``.
AGENTS: tuple[str, ...] = (
    "robotrl.agents.bc:BCAgent", "robotrl.agents.diffusion:DiffusionAgent", "robotrl.agents.dppo:DPPOAgent",
    "robotrl.agents.flow:FlowAgent", "robotrl.agents.flow.distill:FlowDistillAgent", "robotrl.agents.ppo:PPOAgent",
    "robotrl.agents.ppo.unio4:UniO4Agent",
    "robotrl.agents.qlearning:QLAgent", "robotrl.agents.reinflow:ReinFlowAgent",
    "robotrl.agents.residual:ResidualOffPolicyAgent", "robotrl.agents.residual:ResidualPPOAgent",
    "robotrl.real_robot.reward_classifier:RewardClassifierAgent",
)

#: The agent settings table: :func:`robotrl.schema.settings_table` of :data:`AGENTS`, as JSON.
TABLE = resources.files("robotrl") / "configs" / "agent_settings.json"


def agent_classes() -> tuple[type, ...]:
    """The classes of :data:`AGENTS` (imports them, torch included)."""
    out = []
    for entry in AGENTS:
        module, _, name = entry.partition(":")
        out.append(getattr(importlib.import_module(module), name))
    return tuple(out)


_register()
_register_agents(_schemas_from_table(json.loads(TABLE.read_text(encoding="utf-8"))))
