"""Monte Carlo return-to-go (incl. Cal-QL's sparse fill) and discontinuous-episode splitting."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from robotrl.data import ReplayBuffer, mc_returns, split_discontinuous
from robotrl.data.returns import discounted_return_to_go


def plain_mc(rewards, starts, ends, gamma, sparse_fill=None):
    out = []
    for s, e in zip(starts, ends):
        r = [float(x) for x in rewards[s:e]]
        if sparse_fill is not None and all(x == sparse_fill for x in r):
            out += [sparse_fill / (1 - gamma)] * len(r)
            continue
        g, seg = 0.0, []
        for x in reversed(r):
            g = x + gamma * g
            seg.append(g)
        out += seg[::-1]
    return np.asarray(out)


@settings(max_examples=30, deadline=None)
@given(lengths=st.lists(st.integers(1, 12), min_size=1, max_size=6), gamma=st.floats(0.0, 0.999),
       seed=st.integers(0, 1000), sparse=st.booleans())
def test_mc_returns_match_plain_loop(lengths, gamma, seed, sparse):
    rng = np.random.default_rng(seed)
    ends = np.cumsum(lengths)
    starts = ends - np.asarray(lengths)
    if sparse:  # sparse task: -1 per step, 0 at the goal for some episodes
        rewards = np.full(ends[-1], -1.0, np.float32)
        for s, e in zip(starts, ends):
            if rng.random() < 0.5:
                rewards[e - 1] = 0.0
    else:
        rewards = rng.normal(size=ends[-1]).astype(np.float32)
    fill = -1.0 if sparse else None
    got = mc_returns(rewards, starts, ends, gamma, sparse_fill=fill)
    assert got.dtype == np.float32 and got.shape == rewards.shape
    np.testing.assert_allclose(got, plain_mc(rewards, starts, ends, gamma, fill), rtol=1e-5, atol=1e-5)


def test_sparse_fill_only_for_never_solved_episodes():
    gamma = 0.9
    r = np.array([-1, -1, -1, -1, -1, 0], np.float32)  # ep 0 never solved, ep 1 reaches the goal
    got = mc_returns(r, np.array([0, 3]), np.array([3, 6]), gamma, sparse_fill=-1.0)
    np.testing.assert_allclose(got[:3], [-10.0, -10.0, -10.0], rtol=1e-6)
    np.testing.assert_allclose(got[3:], [-1 - 0.9, -1.0, 0.0], rtol=1e-6)
    # without the fill, the never-solved episode gets its plain (shorter-horizon) return-to-go
    np.testing.assert_allclose(mc_returns(r, np.array([0, 3]), np.array([3, 6]), gamma)[:3],
                               [-1 - 0.9 - 0.81, -1 - 0.9, -1.0], rtol=1e-6)
    np.testing.assert_allclose(discounted_return_to_go([1.0, 2.0, 3.0], 0.5), [1 + 1 + 0.75, 2 + 1.5, 3.0])


def test_buffer_mc_returns_with_sparse_fill_stepwise_and_offline_agree():
    gamma = 0.9
    r = np.array([-1, -1, -1, -1, 0], np.float32)
    term = np.array([0, 0, 1, 0, 1], bool)  # ep A (3 steps, never solved), ep B solved
    buf = ReplayBuffer(10, 1, 1, gamma=gamma, mc_sparse_fill=-1.0)
    for i in range(5):
        buf.add([float(i)], [0.0], r[i], [float(i + 1)], term[i], False)
    buf.add([9.0], [0.0], -1.0, [10.0], False, False)  # an open episode: no bound yet
    expected = plain_mc(r, [0, 3], [3, 5], gamma, -1.0)
    np.testing.assert_allclose(buf.mc_returns[:5], expected, rtol=1e-6)
    assert buf.mc_returns[5] == -np.inf
    b = buf.sample(6, indices=np.arange(6))
    np.testing.assert_allclose(b.mc_returns[:5].numpy(), expected, rtol=1e-6)


def test_split_discontinuous_cuts_where_next_obs_differs():
    # one recorded "episode" of 6 steps with a jump between steps 2 and 3 (next_obs[2] != obs[3])
    obs = np.array([[0], [1], [2], [50], [51], [52]], np.float32)
    nxt = np.array([[1], [2], [3], [51], [52], [53]], np.float32)
    starts, ends = split_discontinuous(obs, nxt, np.array([0]), np.array([6]))
    assert starts.tolist() == [0, 3] and ends.tolist() == [3, 6]
    assert starts.dtype == np.int64 and ends.dtype == np.int64
    # existing episode bounds are kept, contiguous data is not cut, tiny float noise is tolerated
    obs2 = np.concatenate([obs[:3], obs[:3] + 1e-8], 0)
    nxt2 = np.concatenate([nxt[:3], nxt[:3]], 0)
    nxt2[2] = obs2[3]  # contiguous across the recorded boundary
    s2, e2 = split_discontinuous(obs2, nxt2, np.array([0, 2]), np.array([2, 6]))
    assert s2.tolist() == [0, 2] and e2.tolist() == [2, 6]
    # returns are computed per segment and never run across the cut
    r = np.ones(6, np.float32)
    g = mc_returns(r, starts, ends, 0.5)
    np.testing.assert_allclose(g, [1.75, 1.5, 1.0, 1.75, 1.5, 1.0])


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(1, 8), min_size=1, max_size=5), cuts=st.sets(st.integers(1, 39)),
       seed=st.integers(0, 100))
def test_split_discontinuous_segments_are_exactly_the_contiguous_runs(lengths, cuts, seed):
    rng = np.random.default_rng(seed)
    ends = np.cumsum(lengths)
    M = int(ends[-1])
    starts = ends - np.asarray(lengths)
    obs = rng.normal(size=(M, 2)).astype(np.float32)
    nxt = np.empty_like(obs)
    nxt[:-1] = obs[1:]
    nxt[-1] = 0
    cuts = {c for c in cuts if c < M}
    for c in cuts:  # break continuity before step c
        nxt[c - 1] += 1.0
    s, e = split_discontinuous(obs, nxt, starts, ends)
    bounds = sorted({0, M, *starts.tolist(), *ends.tolist(), *cuts})
    assert s.tolist() == bounds[:-1] and e.tolist() == bounds[1:]
