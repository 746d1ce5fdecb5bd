"""Every loss an agent computes is in the info dict its update returns (issue 44: "every loss logged").

One tiny update of each agent family on random transitions (off-policy, BC, chunk BC) or on a short PointMaze
rollout (on-policy), asserting the keys the trainers log (the Runner logs every key of the returned dict) and that
each value is a finite number. The keys an audit found missing before: the SAC temperature's loss
(``alpha_loss``, Q-learning and the off-policy residual), the residual SAC's ``entropy``, CQL/Cal-QL's TD part of
the critic loss (``td_loss``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from robotrl.data import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer

DO, DA = 8, 2


def _norms() -> dict:
    return dict(obs_normalizer=ObservationNormalizer.identity(DO), action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)))


def _batch(B: int = 32, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(torch.randn(B, DO, generator=g), torch.rand(B, DA, generator=g) * 2 - 1, torch.randn(B, generator=g),
                 torch.randn(B, DO, generator=g), torch.zeros(B), torch.zeros(B), torch.full((B,), 0.99),
                 torch.full((B,), -10.0))


def _finite(info: dict, keys: set[str]) -> None:
    missing = keys - set(info)
    assert not missing, f"not logged: {sorted(missing)}; logged: {sorted(info)}"
    for k in keys:
        assert math.isfinite(float(info[k])), (k, info[k])


@pytest.fixture(autouse=True)
def _one_thread(one_thread):
    yield


@pytest.mark.parametrize("algo, keys", [
    ("sac", {"critic_loss", "actor_loss", "alpha", "alpha_loss", "entropy", "q_mean", "td_error"}),
    ("cql", {"critic_loss", "td_loss", "cql_penalty", "cql_ood", "actor_loss", "alpha_loss", "entropy"}),
    ("calql", {"critic_loss", "td_loss", "cql_penalty", "calql_bound_rate", "actor_loss", "alpha_loss", "entropy"}),
    ("iql", {"critic_loss", "value_loss", "actor_loss", "adv_mean", "awr_weight", "entropy"}),
])
def test_qlearning_update_logs_its_losses(algo, keys):
    from robotrl.agents.qlearning import QLAgent

    agent = QLAgent(DO, DA, **_norms(), algo=algo, hidden=(16, 16), critic_hidden=(16, 16), num_critics=2,
                    target_subset=2)
    _finite(agent.update(_batch(), 0), keys)


def test_qlearning_with_a_fixed_temperature_logs_no_temperature_loss():
    from robotrl.agents.qlearning import QLAgent

    agent = QLAgent(DO, DA, **_norms(), algo="sac", hidden=(16,), critic_hidden=(16,), num_critics=2, target_subset=2,
                    fixed_alpha=0.1)
    info = agent.update(_batch(), 0)
    assert "alpha_loss" not in info and "actor_loss" in info  # no temperature step, so no loss of one


@pytest.mark.parametrize("actor, keys", [
    ("sac", {"critic_loss", "q_mean", "critic_grad_norm", "actor_loss", "actor_grad_norm", "alpha", "alpha_loss",
             "entropy"}),
    ("td3", {"critic_loss", "q_mean", "critic_grad_norm", "actor_loss", "actor_grad_norm"}),
])
def test_offpolicy_residual_update_logs_its_losses(actor, keys):
    from robotrl.agents.bc import BCPolicy
    from robotrl.agents.residual import ResidualOffPolicyAgent

    agent = ResidualOffPolicyAgent(DO, DA, **_norms(), base=BCPolicy(DO, DA, hidden=[8]).eval(), actor=actor,
                                   hidden=[16], critic_hidden=[16], num_critics=2, actor_delay=1,
                                   critic_warmup_updates=0, seed=0)
    _finite(agent.update(_batch(), 0), keys)


def test_bc_and_chunk_bc_updates_log_their_losses():
    from robotrl.agents.bc import BCAgent
    from robotrl.agents.diffusion import DiffusionAgent

    _finite(BCAgent(DO, DA, **_norms(), hidden=[16]).update(_batch(), 0), {"loss", "mse", "grad_norm"})
    d = DiffusionAgent(DO, DA, **_norms(), denoising_steps=5, obs_horizon=1, action_horizon=4, act_steps=2,
                       denoiser="mlp", denoiser_kwargs={"hidden": [16, 16], "time_dim": 8})
    g = torch.Generator().manual_seed(0)
    obs, z = torch.randn(16, 1, DO, generator=g), torch.zeros(16)  # (B, To, Do) windows, (B, Ta, Da) chunks
    seq = Batch(obs, torch.rand(16, 4, DA, generator=g) * 2 - 1, z, obs, z, z, torch.ones(16))
    _finite(d.update(seq, 0), {"loss", "grad_norm"})


def _rollout(agent, T: int = 8):
    from robotrl.envs import make_env
    from robotrl.onpolicy import RolloutCollector

    envs = make_env("pointmaze-umaze", num_envs=2, seed=0, vectorization="sync", action_chunk=agent.policy.Te,
                    max_episode_steps=40)
    try:
        return RolloutCollector(envs, getattr(agent.policy, "To", 1), reward_scaling=False, seed=0).collect(agent, T)
    finally:
        envs.close()


def test_onpolicy_updates_log_policy_value_kl_and_the_bc_pretraining_loss():
    from robotrl.agents.dppo import DPPOAgent
    from robotrl.agents.ppo import PPOAgent
    from robotrl.agents.reinflow import ReinFlowAgent

    ppo = PPOAgent(DO, DA, **_norms(), hidden=[16], critic_hidden=[16], batch_size=8, n_epochs=1, seed=0)
    _finite(ppo.bc_update(_batch()), {"bc_loss"})  # bc-ppo's pretraining (OnPolicyLoop logs it under pretrain/)
    _finite(ppo.update_rollout(_rollout(ppo), 0), {"value_loss", "policy_loss", "approx_kl", "clipfrac", "std"})
    dppo = DPPOAgent(DO, DA, **_norms(), action_horizon=4, act_steps=2, denoising_steps=5,
                     denoiser_kwargs={"hidden": [16, 16]}, ft_denoising_steps=2, critic_hidden=[16], batch_size=16,
                     n_epochs=1, seed=0)
    dppo.start_online()
    _finite(dppo.update_rollout(_rollout(dppo), 0), {"value_loss", "policy_loss", "approx_kl", "clipfrac"})
    rf = ReinFlowAgent(DO, DA, **_norms(), obs_horizon=1, action_horizon=4, act_steps=4, denoiser="mlp",
                       denoiser_kwargs={"hidden": [16, 16], "time_dim": 8}, flow_steps=3, critic_hidden=[16],
                       noise_hidden=[16], batch_size=8, repeat_samples=1, n_epochs=1, seed=0)
    _finite(rf.update_rollout(_rollout(rf), 0), {"value_loss", "policy_loss", "entropy", "approx_kl", "clipfrac",
                                                 "noise_std", "actor_lr", "critic_lr"})
