"""One warm-start key (``trainer.init_from`` / ``init_parts``) for every agent; the dataset only when a phase reads it."""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.errors import CheckpointError, ConfigError
from robotrl.experiment import needs_dataset, onpolicy_config, trainer_config
from robotrl.warmstart import warm_start


def _compose(overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_on_policy_experiments_warm_start_through_trainer_init_from_without_loading_the_dataset():
    for exp, source in (("ppo", "bc"), ("dppo", "diffusion")):
        cfg = _compose([f"experiment={exp}", "env=hopper"])
        assert cfg.trainer.init_from == f"runs/pretrain/{source}/robotrl-hopper-medium-v0/seed0"
        assert "init_from" not in cfg.agent.onpolicy
        assert not needs_dataset(cfg, trainer_config(cfg))  # no offline_steps/offline_ratio settings needed
    assert needs_dataset(*(lambda c: (c, trainer_config(c)))(_compose(["agent=bc-ppo"])))  # it pretrains on the data
    wsrl = _compose(["experiment=wsrl", "env=hopper"])
    assert needs_dataset(wsrl, trainer_config(wsrl))


def test_the_old_on_policy_key_names_the_new_one():
    cfg = _compose(["agent=ppo", "++agent.onpolicy.init_from=runs/x"])
    with pytest.raises(ConfigError, match="trainer.init_from"):
        onpolicy_config(cfg, trainer_config(cfg))


def test_parts_need_an_agent_that_loads_parts(tmp_path):
    from robotrl.agents.ppo import PPOAgent
    from robotrl.data import ActionScaler, ObservationNormalizer

    agent = PPOAgent(obs_dim=3, action_dim=1, obs_normalizer=ObservationNormalizer.identity(3),
                     action_scaler=ActionScaler(torch.tensor([-2.0]), torch.tensor([2.0])), device="cpu", seed=0,
                     hidden=[8], critic_hidden=[8])
    with pytest.raises(CheckpointError, match="init_parts"):
        warm_start(agent, tmp_path, parts=["policy"])
    with pytest.raises(CheckpointError, match="no checkpoint"):
        warm_start(agent, tmp_path / "missing")


def test_on_policy_resume_of_another_agents_checkpoint_is_a_checkpoint_error(tmp_path):
    """The shell resumes every loop the same way: a checkpoint that does not fit raises CheckpointError."""
    from robotrl.agents.ppo import PPOAgent
    from robotrl.checkpoint import save_checkpoint
    from robotrl.data import ActionScaler, ObservationNormalizer
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

    agent = PPOAgent(obs_dim=3, action_dim=1, obs_normalizer=ObservationNormalizer.identity(3),
                     action_scaler=ActionScaler(torch.tensor([-2.0]), torch.tensor([2.0])), device="cpu", seed=0,
                     hidden=[8], critic_hidden=[8])
    save_checkpoint(tmp_path / "checkpoints" / "latest.pt", {"format": 1, "step": 10, "updates": 1, "history": [],
                                                             "agent": {"actor": {"w": torch.zeros(2)}}})
    runner = OnPolicyTrainer(agent, tmp_path, OnPolicyConfig(progress=False), make_train_envs=lambda: None,
                             make_eval_env=lambda: None)
    with pytest.raises(CheckpointError, match="does not fit this agent"):
        runner.fit()
