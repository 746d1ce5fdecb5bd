"""Gaussian PPO fine-tuning from a BC checkpoint: warm start, a short real run, checkpoint rebuild."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.agents.bc import BCAgent
from robotrl.agents.ppo import GaussianPPOPolicy, PPOAgent
from robotrl.agents.ppo.loss import gaussian_log_prob, ppo_policy_loss
from robotrl.checkpoint import save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env
from robotrl.errors import CheckpointError
from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer
from robotrl.policy import load_policy, policy_state


def _norms():
    rng = np.random.default_rng(0)
    return ObservationNormalizer(rng.normal(size=8), rng.uniform(0.5, 2, size=8)), ActionScaler(-np.ones(2), np.ones(2))


def test_ppo_loss_clips_the_ratio_and_log_prob_is_gaussian():
    x, m, s = torch.randn(5, 3), torch.randn(5, 3), torch.rand(5, 3) + 0.1
    torch.testing.assert_close(gaussian_log_prob(x, m, s), torch.distributions.Normal(m, s).log_prob(x))
    adv = torch.tensor([1.0, -1.0])
    loss, info = ppo_policy_loss(torch.log(torch.tensor([2.0, 0.5])), torch.zeros(2), adv, 0.2)
    # ratio 2 with A>0 is clipped to 1.2; ratio 0.5 with A<0 is clipped to 0.8 -> min picks -0.8
    assert loss.item() == pytest.approx(-(1.2 - 0.8) / 2)
    assert info["clipfrac"].item() == 1.0


def test_ppo_starts_from_bc_and_fine_tunes_on_real_envs(tmp_path):
    torch.manual_seed(0)
    on, sc = _norms()
    bc = BCAgent(8, 2, obs_normalizer=on, action_scaler=sc, hidden=[32, 32])
    save_checkpoint(tmp_path / "bc.pt", {"agent": bc.state_dict(), "policy": policy_state(bc.policy)})
    agent = PPOAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8), action_scaler=sc, hidden=[32, 32],
                     critic_hidden=[32], batch_size=64, n_epochs=2, actor_lr=1e-3, target_kl=None, seed=0)
    agent.load_pretrained(str(tmp_path / "bc.pt"))
    obs = torch.randn(6, 8)
    torch.testing.assert_close(agent.policy(obs), bc.policy(obs))  # same actor and normalisers
    cfg = OnPolicyConfig(iterations=2, steps_per_iter=20, num_envs=2, eval_every=2, eval_episodes=2, eval_envs=2,
                         checkpoint_every=2, progress=False)
    tr = OnPolicyTrainer(agent, tmp_path / "run", cfg,
                         make_train_envs=lambda: make_env("pointmaze-umaze", num_envs=2, seed=0, vectorization="sync",
                                                          max_episode_steps=30),
                         make_eval_env=lambda: make_env("pointmaze-umaze", max_episode_steps=30), seed=0)
    summary = tr.fit()
    assert summary["online_steps"] == 2 * 20 * 2 - 2  # 40 steps per env, one reset-only step each after step 30
    assert not torch.allclose(agent.policy(obs), bc.policy(obs))  # the actor was updated
    pol = load_policy(str(tmp_path / "run"))
    assert isinstance(pol, GaussianPPOPolicy)
    torch.testing.assert_close(pol(obs), agent.policy(obs))


def test_ppo_refuses_a_non_bc_checkpoint(tmp_path):
    from robotrl.agents.diffusion import DiffusionAgent

    on, sc = _norms()
    d = DiffusionAgent(8, 2, obs_normalizer=on, action_scaler=sc, denoiser_kwargs={"hidden": [16, 16]})
    save_checkpoint(tmp_path / "d.pt", {"agent": d.state_dict(), "policy": policy_state(d.policy)})
    agent = PPOAgent(8, 2, obs_normalizer=on, action_scaler=sc)
    with pytest.raises(CheckpointError, match="BC or PPO"):
        agent.load_pretrained(str(tmp_path / "d.pt"))


def test_minibatch_epochs_cover_every_item_and_stop_on_the_kl_threshold():
    """The one epoch loop of PPO, residual PPO and DPPO: ⌈M/B⌉ minibatches per epoch covering each
    item once (DPPO's drop_last: ⌊M/B⌋ whole ones), and an early stop on approx KL."""
    from robotrl.agents.ppo.update import minibatch_epochs

    def run(drop_last, target_kl=None, kl=0.0):
        seen = []
        out = minibatch_epochs(10, lambda i: (seen.append(i.tolist()), {"approx_kl": kl, "n": len(i)})[1],
                               n_epochs=2, batch_size=4, target_kl=target_kl, generator=torch.Generator().manual_seed(0),
                               device=torch.device("cpu"), drop_last=drop_last)
        return seen, out

    seen, out = run(False)
    assert [len(s) for s in seen] == [4, 4, 2] * 2 and sorted(sum(seen[:3], [])) == list(range(10))
    assert out["n"] == pytest.approx(10 / 3)
    seen, _ = run(True)
    assert [len(s) for s in seen] == [4, 4] * 2
    seen, _ = run(False, target_kl=0.01, kl=0.5)
    assert len(seen) == 1


def test_onpolicy_state_round_trip_restores_networks_optimizers_and_rng():
    from robotrl.agents.ppo.update import ONPOLICY_STATE, load_state, save_state

    obs_norm, scaler = _norms()
    a, b = (PPOAgent(8, 2, obs_normalizer=obs_norm, action_scaler=scaler, hidden=[16], critic_hidden=[16], seed=s)
            for s in (0, 1))
    state = save_state(a)
    assert set(state) == set(ONPOLICY_STATE)
    load_state(b, state)
    assert all(torch.equal(p, q) for p, q in zip(a.critic.parameters(), b.critic.parameters()))
    assert torch.equal(torch.randn(3, generator=a.gen), torch.randn(3, generator=b.gen))
