"""robotrl.onpolicy: GAE against a reference loop, running reward scaling, and rollouts over real
vector envs with gymnasium's next-step autoreset."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.agent import OnPolicyAgentBase
from robotrl.envs import make_env
from robotrl.onpolicy import RolloutCollector, RunningRewardScaler, compute_gae


def _reference_gae(r, v, nv, term, trunc, gamma, lam):
    """Per-env episode-by-episode GAE written the textbook way (independent of compute_gae)."""
    T, N = r.shape
    adv = np.zeros((T, N))
    for n in range(N):
        # split the env's steps into episodes at every terminated/truncated step
        start = 0
        for t in range(T):
            if term[t, n] or trunc[t, n] or t == T - 1:
                ep = range(start, t + 1)
                a = 0.0
                for s in reversed(ep):
                    boot = 0.0 if term[s, n] else nv[s, n]
                    delta = r[s, n] + gamma * boot - v[s, n]
                    a = delta + (gamma * lam * a if s != t else 0.0)
                    # the last step of a rollout segment bootstraps from V(s') (GAE tail = delta)
                    adv[s, n] = a
                start = t + 1
    return adv


def test_gae_matches_reference_loop_with_terminations_and_truncations():
    rng = np.random.default_rng(0)
    T, N, gamma, lam = 37, 5, 0.97, 0.9
    r, v, nv = rng.normal(size=(T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N))
    term, trunc = rng.random((T, N)) < 0.08, rng.random((T, N)) < 0.08
    trunc &= ~term
    adv, ret = compute_gae(r, v, nv, term, trunc, gamma=gamma, lam=lam)
    ref = _reference_gae(r, v, nv, term, trunc, gamma, lam)
    np.testing.assert_allclose(adv, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ret, ref + v, rtol=1e-5, atol=1e-5)
    # a truncated step bootstraps V(s'); a terminated one does not
    i = np.argwhere(trunc)[0]
    j = np.argwhere(term)[0]
    assert np.isclose(adv[tuple(i)], r[tuple(i)] + gamma * nv[tuple(i)] - v[tuple(i)], atol=1e-5)
    assert np.isclose(adv[tuple(j)], r[tuple(j)] - v[tuple(j)], atol=1e-5)


def test_gae_invalid_reset_steps_get_zero_and_do_not_leak():
    T, N = 6, 1
    r = np.ones((T, N))
    v, nv = np.zeros((T, N)), np.full((T, N), 10.0)
    term = np.zeros((T, N), bool)
    trunc = np.zeros((T, N), bool)
    trunc[2] = True
    valid = np.ones((T, N), bool)
    valid[3] = False  # next-step autoreset
    r[3] = 123.0      # whatever the env reported there must not matter
    adv, _ = compute_gae(r, v, nv, term, trunc, valid, gamma=0.9, lam=1.0)
    assert adv[3, 0] == 0.0
    assert np.isclose(adv[2, 0], 1 + 0.9 * 10.0)
    r2 = r.copy()
    r2[3] = -5.0
    assert np.allclose(compute_gae(r2, v, nv, term, trunc, valid, gamma=0.9, lam=1.0)[0], adv)


def test_running_reward_scaler_divides_by_return_std_and_resets_on_done():
    sc = RunningRewardScaler(2, gamma=0.9)
    rng = np.random.default_rng(1)
    rewards = rng.normal(3.0, 1.0, size=(200, 10, 2))
    for r in rewards:
        sc.scale_rollout(r, np.zeros((10, 2), bool))
    # the running statistics are those of every discounted return G_t = 0.9 G_{t-1} + r_t seen (a plain loop),
    # beside the prior's 1e-4 count; the returns of these 2000 steps climb from 3 to ~30 (mean 3 / (1 - 0.9))
    g, seen = np.zeros(2), []
    for r in rewards.reshape(-1, 2):
        g = 0.9 * g + r
        seen.append(g)
    seen = np.asarray(seen)
    assert sc.count == pytest.approx(4000 + 1e-4) and sc.mean == pytest.approx(seen.mean(), rel=1e-6)
    assert sc.var == pytest.approx(seen.var(), rel=1e-5) and 25 < seen[-100:].mean() < 35
    r = rng.normal(3.0, 1.0, size=(1, 2))
    out = sc.scale_rollout(r, np.array([[True, False]]))
    assert sc.ret[0] == 0.0 and sc.ret[1] != 0.0
    np.testing.assert_allclose(out, r / np.sqrt(sc.var + sc.eps), rtol=1e-6)


def test_running_reward_scaler_first_rollout_of_identical_sparse_rewards_stays_in_scale():
    """Fetch pays −1 per step in every env until success. Scaled step by step, the first step's
    reward was divided by the std of N identical returns (~0) and stored as ~−686 (4-step chunks,
    50 envs); DPPO scales the rollout with the statistics of all its returns, clipped to ±10."""
    T, N = 13, 50
    r = np.full((T, N), -4.0)
    r[8:, :10] = -2.0
    done = np.zeros((T, N), bool)
    done[-1] = True
    sc = RunningRewardScaler(N, gamma=0.95)
    out = sc.scale_rollout(r, done)
    g = np.zeros(N)
    rets = []
    for t in range(T):  # the per-env discounted returns of the rollout, all of them in the statistics
        g = 0.95 * g + r[t]
        rets.append(g.copy())
    rets = np.concatenate(rets)
    assert sc.count == pytest.approx(1e-4 + T * N)
    assert sc.var == pytest.approx(float(rets.var()), rel=1e-3)
    np.testing.assert_allclose(out, r / np.sqrt(sc.var + sc.eps), rtol=1e-5)
    assert np.abs(out).max() < 1.0            # the first step is scaled like every other
    assert (sc.ret == 0).all()                # the episodes ended: the next rollout starts new returns
    # a reward far outside the running scale (one env among the 650 returns seen) is clipped to DPPO's ±10
    spike = np.full((1, N), -4.0)
    spike[0, 0] = -1e4
    big = sc.scale_rollout(spike, np.zeros((1, N), bool))
    assert big[0, 0] == -10.0 and np.abs(big[0, 1:]).max() < 1.0
    # steps that were not real env steps (valid False) add neither to a return nor to the statistics
    count, ret = sc.count, sc.ret.copy()
    sc.scale_rollout(np.full((2, N), 5.0), np.zeros((2, N), bool), np.zeros((2, N), bool))
    assert sc.count == count and np.array_equal(sc.ret, ret)


class _ConstantAgent(OnPolicyAgentBase):
    """Deterministic on-policy agent used to drive the collector (zero actions; the hooks' no-op defaults)."""

    def __init__(self, da):
        self.da = da

    def rollout_act(self, obs_hist):
        n = obs_hist.shape[0]
        return np.zeros((n, self.da), np.float32), {"obs_last": torch.as_tensor(obs_hist[:, -1])}


def test_rollout_collector_handles_next_step_autoreset_on_real_envs():
    envs = make_env("pointmaze-umaze", num_envs=3, seed=0, vectorization="sync", max_episode_steps=7)
    try:
        col = RolloutCollector(envs, obs_horizon=2, reward_scaling=False, seed=0)
        ro = col.collect(_ConstantAgent(2), 20)
    finally:
        envs.close()
    # episodes of 7 steps: truncation at t=6, reset-only step at t=7, next episode t=8..14, ...
    assert ro.truncated[6].all() and not ro.valid[7].any() and ro.valid[8].all()
    assert ro.truncated[14].all() and not ro.valid[15].any()
    assert ro.valid.sum() == 3 * 18 and ro.env_steps == 3 * 18
    assert len(ro.episode_returns) == 6
    # the truncated step's next observation is the real final one, not the reset observation
    assert not np.allclose(ro.next_observations[6, :, -1], ro.observations[8, :, -1])
    # after the reset the history restarts: both history slots equal the reset observation
    np.testing.assert_allclose(ro.observations[8, :, 0], ro.observations[8, :, 1])
    np.testing.assert_allclose(ro.observations[1, :, 0], ro.observations[0, :, 1])  # history rolls within an episode
    assert ro.extras["obs_last"].shape == (20, 3, 4 + 4)
