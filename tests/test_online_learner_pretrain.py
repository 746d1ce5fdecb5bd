"""Offline-pretrained then online in one learner (``robotrl learner ... trainer.offline_steps=N``): Cal-QL updates on
the demonstrations before serving, the switch to the online update rule, and no second pretraining on resume.

Real MuJoCo twin demonstrations (the scripted P-D controller) written as a real Minari dataset; the learner is
built by the same code as ``robotrl learner`` (:func:`robotrl.real_robot.online_cli.build_learner`).
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.errors import ConfigError
from robotrl.real_robot.online_cli import build_learner
from robotrl.real_robot.online_eval import LEARNER, record_controller_demos, robot_overrides


def _cfg(tmp_path, *extra):
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("online/learner", overrides=[
            *robot_overrides("open", "dense", 60), "agent=calql", "agent.model.online_algo=sac",
            "agent.model.num_critics=2", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
            "agent.model.cql_n_actions=4", "trainer.batch_size=32", f"run_dir={tmp_path / 'run'}",
            "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}", *LEARNER, *extra])


def _weights(agent) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in agent.policy.parameters()])


def test_learner_pretrains_on_demos_then_switches_to_the_online_rule_once(tmp_path):
    demos = record_controller_demos(tmp_path / "minari" / "demos", episodes=4, max_steps=60, maze="open",
                                    reward="dense", seed=7)
    fresh, _, _ = build_learner(_cfg(tmp_path, f"demos={demos}"))  # no pretraining: the reference weights
    w0 = _weights(fresh.agent)
    fresh.ep.close()
    learner, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert not resumed and learner.pretrain_updates == 30 and learner.status()["pretrain_updates"] == 30
        assert learner.agent.algo == "sac"  # Cal-QL offline, SAC online (WSRL's switch)
        assert learner.updates == 0  # the online schedule starts from 0
        w1 = _weights(learner.agent)
        assert not torch.equal(w0, w1)  # the updates moved the policy
        assert learner.ckpt_path.exists()  # checkpointed: durable before any actor connects
    finally:
        learner.ep.close()
    again, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert resumed and again.pretrain_updates == 30 and again.agent.algo == "sac"
        assert torch.equal(_weights(again.agent), w1)  # resumed, not pretrained a second time
    finally:
        again.ep.close()


def test_pretraining_without_demonstrations_is_refused_with_the_way_out(tmp_path):
    with pytest.raises(ConfigError, match="needs demonstrations.*offline_steps=0"):
        build_learner(_cfg(tmp_path, "trainer.offline_steps=10", "trainer.offline_ratio=0"))
