"""Residual RL learns what the base gets wrong: ResiP (on-policy) and ResFiT (off-policy) on real
MuJoCo PointMaze runs, the off-policy critic scoring the combined action, and the exploration phases.

The easy task (:mod:`robotrl.agents.residual.room`, shared with the quick benchmark tier's residual row):
an open PointMaze room with a fixed start cell two cells left of the goal cell (`maze_map`), dense
reward, 100-step episodes. The base is a BC-architecture policy (:class:`BCPolicy`, one hidden
layer) whose weights implement a PD controller towards the goal with a constant bias on the y
force: it stops ~0.5 m beside the goal, so its success is 0 while the unbiased controller's is 1
(measured over 50 episodes: 0.00 vs 1.00, eval return 39.8 vs 44.6). The residual must learn to
cancel the bias. Budgets were chosen from runs over three seeds where
every run reached success >= 0.9 (PPO 44k-63k env steps; SAC 3000 updates).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPPOAgent
from robotrl.agents.residual.room import (ROOM_ENV, ROOM_KW, ROOM_OFFPOLICY_AGENT, ROOM_OFFPOLICY_SCHEDULE, ROOM_PPO_AGENT,
                                ROOM_PPO_SCHEDULE, biased_pd_base, room_action_scaler, room_eval_env, room_obs_normalizer,
                                room_success, room_train_envs)
from robotrl.data import ReplayBuffer
from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer
from robotrl.policy import act
from robotrl.trainer import Trainer, TrainerConfig

pytestmark = pytest.mark.slow  # learning / end-to-end: `pytest -m "not slow"` skips them, CI runs them

ENV, KW = ROOM_ENV, ROOM_KW
OBS_NORM, SCALER = room_obs_normalizer(), room_action_scaler()
_eval_env, _train_envs, _success = room_eval_env, room_train_envs, room_success


def test_residual_ppo_corrects_a_biased_base(tmp_path):
    torch.set_num_threads(1)
    base = biased_pd_base()
    base_success = _success(base)
    agent = ResidualPPOAgent(8, 2, obs_normalizer=OBS_NORM, action_scaler=SCALER, base=base, seed=0, **ROOM_PPO_AGENT)
    assert _success(agent.policy) == base_success  # zero-initialised residual: exactly the base
    cfg = OnPolicyConfig(**ROOM_PPO_SCHEDULE, eval_every=16, eval_episodes=20, eval_envs=10, checkpoint_every=16,
                         progress=False)
    summary = OnPolicyTrainer(agent, tmp_path / "ppo", cfg, make_train_envs=_train_envs(32, 0),
                              make_eval_env=_eval_env, seed=0).fit()
    assert base_success <= 0.1
    assert summary["offline_success_rate"] == base_success
    assert summary["final_success_rate"] >= base_success + 0.6, summary
    # the base itself was never trained
    torch.testing.assert_close(agent.policy.base.actor.net.net[-1].bias, torch.tensor([0.0, 1.0]))


def _offpolicy_agent(**kw) -> ResidualOffPolicyAgent:
    args = dict(obs_normalizer=OBS_NORM, action_scaler=SCALER, base=biased_pd_base(), seed=0, **ROOM_OFFPOLICY_AGENT)
    return ResidualOffPolicyAgent(8, 2, **{**args, **kw})


def test_offpolicy_critic_scores_the_combined_action():
    agent = _offpolicy_agent(actor="td3", base_noise_steps=0, critic_warmup_updates=0, actor_delay=1,
                             target_noise=0.0)
    with torch.no_grad():  # a non-zero residual (and target actor), so combined and base actions differ
        agent.policy.residual.net[-1].bias.copy_(torch.tensor([-0.5, 0.3]))
        agent.actor_target.load_state_dict(agent.policy.residual.state_dict())
    envs = _train_envs(4, 0)()
    buf = ReplayBuffer(400, 8, 2, gamma=0.95, num_envs=4, seed=0)
    obs, _ = envs.reset(seed=0)
    for _ in range(50):
        a = agent.explore(obs)
        nobs, r, term, trunc, _ = envs.step(a)
        buf.add(obs, a, r, nobs, term, trunc)
        obs = nobs
    envs.close()
    batch = buf.sample(64, n_step=3)
    seen: dict[str, list] = {"critic": [], "target": []}
    agent.critic.register_forward_hook(lambda m, args, out: seen["critic"].append(args[1].detach().clone()))
    agent.critic_target.register_forward_hook(lambda m, args, out: seen["target"].append(args[1].detach().clone()))
    norm = agent.policy.action_scaler.normalize
    with torch.no_grad():  # what the current residual policy would execute at s and at the n-step s'
        expected_pi = norm(agent.policy(batch.observations)).clamp(-1, 1)
        expected_next = norm(agent.policy(batch.next_observations)).clamp(-1, 1)
        base_n = norm(agent.policy.base(batch.observations))
    agent.update(batch, 0)
    # TD step: the buffer's executed action; actor step: clip(base + α r) of the residual, not the base action
    assert len(seen["critic"]) == 2 and len(seen["target"]) == 1
    torch.testing.assert_close(seen["critic"][0], norm(batch.actions).clamp(-1, 1))
    torch.testing.assert_close(seen["critic"][1], expected_pi)
    assert (seen["critic"][1] - base_n).abs().max() > 0.1
    # target: the combined action at the n-step next observation (no target noise here)
    torch.testing.assert_close(seen["target"][0], expected_next)
    # the base never moved
    torch.testing.assert_close(agent.policy.base.actor.net.net[-1].bias, torch.tensor([0.0, 1.0]))


def test_offpolicy_exploration_phases_base_noise_then_progressive():
    agent = _offpolicy_agent(base_noise_steps=2, base_noise_std=0.3, progressive_steps=10**9)
    with torch.no_grad():
        agent.policy.residual.net[-1].bias.fill_(0.7)
    envs = _train_envs(6, 1)()
    obs, _ = envs.reset(seed=1)
    envs.close()
    base = act(agent.policy.base, obs)
    noisy = [agent.explore(obs) for _ in range(2)]
    assert all(not np.allclose(n, base) for n in noisy) and all(np.abs(n - base).max() < 1.5 for n in noisy)
    # progressive exploration at t/H ≈ 0: the residual is off, the base acts alone (bit for bit)
    np.testing.assert_array_equal(agent.explore(obs), base)
    agent.progressive_steps = 1
    assert not np.allclose(agent.explore(obs), base)  # fully on


def test_offpolicy_residual_sac_corrects_a_biased_base(tmp_path):
    torch.set_num_threads(1)
    agent = _offpolicy_agent(actor="sac")
    cfg = TrainerConfig(offline_steps=0, **ROOM_OFFPOLICY_SCHEDULE, eval_every=1500, eval_episodes=20, eval_envs=10,
                        checkpoint_every=1500, progress=False)
    trainer = Trainer(agent, tmp_path / "sac", cfg, offline_buffer=None, make_eval_env=_eval_env,
                      make_train_envs=_train_envs(4, 0), seed=0, gamma=0.95)
    base_success = _success(agent.policy)
    summary = trainer.fit()
    assert base_success <= 0.1
    assert summary["final_success_rate"] >= base_success + 0.6, summary
    # the checkpoint's deployable policy is the residual with its base inside
    from robotrl.policy import load_policy

    pol = load_policy(tmp_path / "sac")
    assert type(pol).__name__ == "ResidualPolicy" and _success(pol) == summary["final_success_rate"]
