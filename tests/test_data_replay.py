"""ReplayBuffer: wraparound, links, n-step and MC returns, vectorised adds, sequences, state.

Observations encode where a transition comes from (``[env, episode, t, noise...]``) and
actions encode ``[episode, t]``, so every check can tell exactly which stored step a
sampled row came from.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from robotrl.checkpoint import load_arrays, save_arrays
from robotrl.data import OfflineData, ReplayBuffer
from robotrl.data.returns import discounted_return_to_go, nstep_targets_reference
from robotrl.errors import BatchSizeError

OBS_DIM, ACT_DIM = 4, 2
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def make_offline(lengths, ends, seed=0, env=0) -> OfflineData:
    """Episodes back to back; obs = [env, episode, t, noise], action = [episode, t]."""
    rng = np.random.default_rng(seed)
    obs, nobs, act, rew, term, trunc, starts, stops = [], [], [], [], [], [], [], []
    pos = 0
    for e, (T, end) in enumerate(zip(lengths, ends)):
        o = np.zeros((T + 1, OBS_DIM), np.float32)
        o[:, 0], o[:, 1], o[:, 2] = env, e, np.arange(T + 1)
        o[:, 3] = rng.normal(size=T + 1)
        obs.append(o[:-1])
        nobs.append(o[1:])
        act.append(np.stack([np.full(T, e), np.arange(T)], 1).astype(np.float32))
        rew.append(rng.normal(size=T).astype(np.float32))
        te, tr = np.zeros(T, bool), np.zeros(T, bool)
        (te if end == "term" else tr)[-1] = True
        term.append(te)
        trunc.append(tr)
        starts.append(pos)
        pos += T
        stops.append(pos)
    box = gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32)
    return OfflineData(
        observations=np.concatenate(obs), actions=np.concatenate(act), rewards=np.concatenate(rew),
        next_observations=np.concatenate(nobs), terminated=np.concatenate(term), truncated=np.concatenate(trunc),
        episode_starts=np.asarray(starts, np.int64), episode_ends=np.asarray(stops, np.int64),
        observation_space=box, action_space=gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32),
    )


def add_stepwise(buf: ReplayBuffer, d: OfflineData) -> None:
    for i in range(d.num_transitions):
        buf.add(d.observations[i], d.actions[i], d.rewards[i], d.next_observations[i], d.terminated[i], d.truncated[i])


def episode_end_flags(d: OfflineData) -> np.ndarray:
    end = np.zeros(d.num_transitions, bool)
    end[d.episode_ends - 1] = True
    return end


episode_structures = st.lists(
    st.tuples(st.integers(1, 9), st.sampled_from(["term", "trunc"])), min_size=1, max_size=6
)


# --------------------------------------------------------------------------- n-step


@SETTINGS
@given(eps=episode_structures, n=st.integers(1, 6), gamma=st.floats(0.5, 0.999), seed=st.integers(0, 1000),
       stepwise=st.booleans())
def test_nstep_matches_reference_for_random_episodes(eps, n, gamma, seed, stepwise):
    lengths, ends = zip(*eps)
    d = make_offline(lengths, ends, seed)
    M = d.num_transitions
    buf = ReplayBuffer(M, OBS_DIM, ACT_DIM, gamma=gamma)
    add_stepwise(buf, d) if stepwise else buf.add_offline(d)
    idx = np.arange(M)
    b = buf.sample(M, n_step=n, indices=idx)
    end = episode_end_flags(d)
    for i in idx:
        G, disc, last = nstep_targets_reference(d.rewards, d.terminated, end, int(i), n, gamma)
        m = last - i + 1
        assert 1 <= m <= n
        assert b.rewards[i].item() == pytest.approx(G, rel=1e-5, abs=1e-5)
        # discounts is γ^m for the m steps summed, also when the last step terminated
        assert b.discounts[i].item() == pytest.approx(gamma**m, rel=1e-5)
        assert b.terminated[i].item() == float(d.terminated[last])
        assert b.truncated[i].item() == float(d.truncated[last])
        # the bootstrap factor used in TD targets equals the reference discount
        assert (b.discounts[i] * (1 - b.terminated[i])).item() == pytest.approx(disc, rel=1e-5, abs=1e-12)
        np.testing.assert_array_equal(b.next_observations[i].numpy(), d.next_observations[last])
        np.testing.assert_array_equal(b.observations[i].numpy(), d.observations[i])
        np.testing.assert_array_equal(b.actions[i].numpy(), d.actions[i])


def test_terminated_stops_bootstrap_truncated_keeps_it():
    gamma, n = 0.9, 5
    d = make_offline([3, 3], ["term", "trunc"], seed=3)
    buf = ReplayBuffer.from_offline(d, gamma=gamma)
    b = buf.sample(6, n_step=n, indices=np.arange(6))
    # step 0 of each episode: 3 steps summed, then the episode ends
    assert b.discounts[0].item() == pytest.approx(gamma**3)
    assert b.terminated[0].item() == 1.0 and b.truncated[0].item() == 0.0
    assert b.discounts[3].item() == pytest.approx(gamma**3)
    assert b.terminated[3].item() == 0.0 and b.truncated[3].item() == 1.0
    # TD targets with an arbitrary critic V(s') = sum(s') equal the reference ones
    V = lambda o: o.sum(-1)  # noqa: E731
    target = b.rewards + b.discounts * (1 - b.terminated) * V(b.next_observations)
    end = episode_end_flags(d)
    for i in range(6):
        G, disc, last = nstep_targets_reference(d.rewards, d.terminated, end, i, n, gamma)
        ref = G + disc * float(d.next_observations[last].sum())
        assert target[i].item() == pytest.approx(ref, rel=1e-5, abs=1e-5)
    # the truncated episode's last step bootstraps from its true final observation
    assert b.next_observations[5].tolist() == d.next_observations[5].tolist()
    assert (b.discounts[5] * (1 - b.terminated[5])).item() == pytest.approx(gamma)
    assert (b.discounts[2] * (1 - b.terminated[2])).item() == 0.0


# --------------------------------------------------------------------------- wraparound


def test_wraparound_overwrites_oldest_and_cuts_links():
    gamma = 0.5
    buf = ReplayBuffer(7, OBS_DIM, ACT_DIM, gamma=gamma)
    d = make_offline([10], ["trunc"], seed=1)  # one episode, t = 0..9
    for i in range(10):
        buf.add(d.observations[i], d.actions[i], d.rewards[i], d.next_observations[i], d.terminated[i], d.truncated[i])
        assert buf.size == min(i + 1, 7) and buf.ptr == (i + 1) % 7 and buf.total_added == i + 1
    assert len(buf) == 7
    # slot s holds step t with t % 7 == s, and only the newest 7 steps (3..9)
    t_of_slot = buf.observations[:, 2].astype(int).tolist()
    assert t_of_slot == [7, 8, 9, 3, 4, 5, 6]
    # the oldest surviving step (t=3, slot 3) lost its link to the overwritten t=2
    assert buf.prev_idx[3] == -1
    assert buf.next_idx.tolist() == [1, 2, -1, 4, 5, 6, 0]
    assert buf.prev_idx.tolist() == [6, 0, 1, -1, 3, 4, 5]
    # n-step across the physical wrap (slot 6 -> 0 -> 1) follows the episode
    b = buf.sample(1, n_step=3, indices=np.array([6]))
    G = d.rewards[6] + gamma * d.rewards[7] + gamma**2 * d.rewards[8]
    assert b.rewards[0].item() == pytest.approx(G, rel=1e-6)
    assert b.next_observations[0].tolist() == d.next_observations[8].tolist()
    # a sequence window at the oldest step pads with that step, never with overwritten data
    s = buf.sample_sequences(1, 3, 2, indices=np.array([3]))
    assert s.observations[0, :, 2].tolist() == [3.0, 3.0, 3.0]
    # MC returns of the closed episode cover the surviving steps only
    assert np.allclose(buf.mc_returns[[3, 4, 5, 6, 0, 1, 2]], discounted_return_to_go(d.rewards[3:], gamma), atol=1e-5)


def test_overwritten_episode_successor_loses_prev_link_and_offline_add_wraps():
    d1 = make_offline([4, 3], ["term", "trunc"], seed=2)  # 7 transitions
    buf = ReplayBuffer(9, OBS_DIM, ACT_DIM, gamma=0.9)
    buf.add_offline(d1)
    d2 = make_offline([2, 2], ["trunc", "term"], seed=4, env=1)  # 4 more: slots 7, 8, 0, 1
    buf.add_offline(d2)
    assert buf.size == 9 and buf.ptr == 2 and buf.total_added == 11
    # d2's first episode occupies slots 7, 8 and its second wraps to 0, 1
    assert buf.next_idx[7] == 8 and buf.next_idx[8] == -1 and buf.prev_idx[0] == -1 and buf.next_idx[0] == 1
    # slots 2, 3 hold d1 episode 0 steps 2, 3: step 2 lost its predecessor (overwritten)
    assert buf.observations[2, :3].tolist() == [0.0, 0.0, 2.0]
    assert buf.prev_idx[2] == -1 and buf.next_idx[2] == 3
    # no link anywhere points at a slot holding a different episode
    for s in range(9):
        for link in (buf.next_idx[s], buf.prev_idx[s]):
            if link >= 0:
                assert buf.episode_id[link] == buf.episode_id[s]
                assert buf.observations[link, :2].tolist() == buf.observations[s, :2].tolist()


def test_add_offline_larger_than_capacity_raises():
    d = make_offline([5, 5], ["term", "term"])
    buf = ReplayBuffer(8, OBS_DIM, ACT_DIM)
    with pytest.raises(BatchSizeError, match=r"10 transitions .* holds 8; raise the buffer capacity"):
        buf.add_offline(d)
    with pytest.raises(BatchSizeError, match=r"Do=4, Da=2; buffer was built for 5, 2"):
        ReplayBuffer(20, 5, ACT_DIM).add_offline(d)


def test_capacity_one_never_links_overwritten_slot():
    buf = ReplayBuffer(1, 1, 1, gamma=0.5)
    buf.add([0.0], [0.0], 1.0, [1.0], False, False)
    buf.add([1.0], [0.0], 2.0, [2.0], False, False)  # overwrites step 0 of the same episode
    assert buf.prev_idx[0] == -1 and buf.next_idx[0] == -1
    b = buf.sample(1, n_step=3, indices=np.array([0]))
    assert b.rewards[0].item() == 2.0 and b.discounts[0].item() == 0.5


def test_small_capacity_vectorised_add_never_links_across_envs():
    buf = ReplayBuffer(3, 1, 1, gamma=0.5, num_envs=2)
    z = np.zeros((2, 1))
    buf.add([[0.0], [100.0]], z, [1.0, 1.0], [[1.0], [101.0]], [False, False], [False, False])
    buf.add([[1.0], [101.0]], z, [1.0, 1.0], [[2.0], [102.0]], [False, False], [False, False])
    # slots: 0 = env1 step 1 (101), 1 = env1 step 0 (100), 2 = env0 step 1 (1); env0 step 0 was overwritten
    assert buf.observations[:, 0].tolist() == [101.0, 100.0, 1.0]
    assert buf.prev_idx[2] == -1  # env0's predecessor (slot 0) now holds env1's data
    assert buf.next_idx[0] == -1  # env1's newest step has no successor yet
    assert buf.next_idx[1] == 0 and buf.prev_idx[0] == 1


# --------------------------------------------------------------------------- vectorised adds


def _simulate_vector(num_envs, lengths_per_env, ends_per_env, buf, seed=0):
    """gymnasium 1.x next-step autoreset: the step after an env's episode end is a reset, left out via env_ids.

    Returns ``{(env, ep): (rewards list, closed)}`` ground truth.
    """
    rng = np.random.default_rng(seed)
    ep = np.zeros(num_envs, int)
    t = np.zeros(num_envs, int)
    needs_reset = np.zeros(num_envs, bool)
    truth: dict = {}
    while True:
        active = [e for e in range(num_envs) if ep[e] < len(lengths_per_env[e]) and not needs_reset[e]]
        resetting = [e for e in range(num_envs) if needs_reset[e]]
        if not active and not resetting:
            break
        rows = []
        for e in active:
            T, end = lengths_per_env[e][ep[e]], ends_per_env[e][ep[e]]
            o = np.array([e, ep[e], t[e], rng.normal()], np.float32)
            no = np.array([e, ep[e], t[e] + 1, rng.normal()], np.float32)
            last = t[e] == T - 1
            r = float(rng.normal())
            rows.append((e, o, no, r, last and end == "term", last and end == "trunc"))
            rew, _ = truth.get((e, ep[e]), ([], False))
            truth[(e, ep[e])] = (rew + [r], last)
        if rows:
            ids = np.array([r[0] for r in rows])
            buf.add(np.stack([r[1] for r in rows]), np.zeros((len(rows), ACT_DIM)), np.array([r[3] for r in rows]),
                    np.stack([r[2] for r in rows]), np.array([r[4] for r in rows]), np.array([r[5] for r in rows]),
                    env_ids=ids)
        # next_obs noise must be the following obs: patch stored next_observations to the true next obs later
        for e, o, no, r, te, tr in rows:
            t[e] += 1
            if te or tr:
                needs_reset[e] = True
        for e in resetting:  # reset step: env not added
            needs_reset[e] = False
            ep[e] += 1
            t[e] = 0
    return truth


def _key(obs_row):
    return tuple(int(round(v)) for v in obs_row[:3])


@SETTINGS
@given(
    data=st.data(),
    num_envs=st.integers(1, 4),
    n=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
@pytest.mark.slow
def test_vectorised_interleaved_add_keeps_env_chains_separate(data, num_envs, n, seed):
    lengths = [data.draw(st.lists(st.integers(1, 6), min_size=1, max_size=4)) for _ in range(num_envs)]
    ends = [data.draw(st.lists(st.sampled_from(["term", "trunc"]), min_size=len(L), max_size=len(L))) for L in lengths]
    total = sum(map(sum, lengths))
    capacity = data.draw(st.integers(min(3 * num_envs, total), max(3 * num_envs, total) + 3))
    gamma = 0.9
    buf = ReplayBuffer(capacity, OBS_DIM, ACT_DIM, gamma=gamma, num_envs=num_envs)
    truth = _simulate_vector(num_envs, lengths, ends, buf, seed)
    assert buf.total_added == total and buf.size == min(total, capacity)
    S = buf.size
    where = {_key(buf.observations[s]): s for s in range(S)}
    assert len(where) == S  # every stored step is a distinct (env, episode, t)
    for s in range(S):
        e, ep, t = _key(buf.observations[s])
        ended = bool(buf.terminated[s] or buf.truncated[s])
        succ, pred = where.get((e, ep, t + 1)), where.get((e, ep, t - 1))
        assert buf.next_idx[s] == (-1 if ended or succ is None else succ), (s, e, ep, t)
        assert buf.prev_idx[s] == (-1 if pred is None else pred), (s, e, ep, t)
        # n-step follows the env's own episode, as the plain reference over that episode
        rewards, closed = truth[(e, ep)]
        end = np.zeros(len(rewards), bool)
        end[-1] = True
        term = np.zeros(len(rewards), bool)
        if closed and buf.observations[s, 1] == ep and ends[e][ep] == "term":
            term[-1] = True
        G, disc, last = nstep_targets_reference(np.asarray(rewards, np.float32), term, end, t, n, gamma)
        b = buf.sample(1, n_step=n, indices=np.array([s]))
        assert b.rewards[0].item() == pytest.approx(G, rel=1e-5, abs=1e-5)
        assert (b.discounts[0] * (1 - b.terminated[0])).item() == pytest.approx(disc, rel=1e-5, abs=1e-12)
        assert _key(b.next_observations[0].numpy()) == (e, ep, last + 1)
        # MC return-to-go: whole closed episodes still fully stored match the plain loop; open ones are -inf
        if not closed:
            assert buf.mc_returns[s] == -np.inf
        elif (e, ep, 0) in where:
            assert buf.mc_returns[s] == pytest.approx(discounted_return_to_go(rewards, gamma)[t], rel=1e-5, abs=1e-5)
    # sequence windows never mix envs or episodes
    seq = buf.sample_sequences(S, 3, 3, indices=np.arange(S))
    obs_keys = seq.observations[..., :2].numpy()
    nxt_keys = seq.next_observations[..., :2].numpy()
    assert (obs_keys == obs_keys[:, -1:, :]).all() and (nxt_keys == obs_keys[:, -1:, :]).all()


def test_real_vector_env_next_step_autoreset_chains():
    """A real Hopper-v5 SyncVectorEnv (next-step autoreset) written row by row with env_ids."""
    num_envs, steps = 3, 60
    envs = gym.make_vec("Hopper-v5", num_envs=num_envs, vectorization_mode="sync", max_episode_steps=12)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    envs.action_space.seed(0)
    obs, _ = envs.reset(seed=0)
    buf = ReplayBuffer(1000, 11, 3, gamma=0.99, num_envs=num_envs)
    autoreset = np.zeros(num_envs, bool)
    n_rows = n_ends = 0
    for _ in range(steps):
        act = envs.action_space.sample()
        nobs, rew, term, trunc, _ = envs.step(act)
        ids = np.flatnonzero(~autoreset)
        buf.add(obs[ids], act[ids], rew[ids], nobs[ids], term[ids], trunc[ids], env_ids=ids)
        n_rows += ids.size
        n_ends += int((term[ids] | trunc[ids]).sum())
        autoreset = term | trunc
        obs = nobs
    envs.close()
    S = buf.size
    assert S == n_rows and n_ends >= num_envs  # every env finished at least one 12-step episode
    # every link is a true env transition: next_obs of a step is the obs of the step it links to
    linked = np.flatnonzero(buf.next_idx[:S] >= 0)
    assert linked.size > 0
    np.testing.assert_array_equal(buf.next_observations[linked], buf.observations[buf.next_idx[linked]])
    # chains partition the data into episodes of at most 12 steps, each closed one ending in term/trunc
    heads = np.flatnonzero(buf.prev_idx[:S] < 0)
    seen, closed = 0, 0
    for h in heads:
        chain = [h]
        while buf.next_idx[chain[-1]] >= 0:
            chain.append(int(buf.next_idx[chain[-1]]))
        assert len(chain) <= 12
        assert len(set(buf.episode_id[chain])) == 1
        assert not (buf.terminated[chain[:-1]] | buf.truncated[chain[:-1]]).any()
        closed += bool(buf.terminated[chain[-1]] or buf.truncated[chain[-1]])
        seen += len(chain)
    assert seen == S and closed == n_ends
    assert len(heads) == len(set(buf.episode_id[:S]))


# --------------------------------------------------------------------------- sequences


@SETTINGS
@given(eps=episode_structures, To=st.integers(1, 4), Ta=st.integers(1, 5), seed=st.integers(0, 100))
def test_sample_sequences_windows(eps, To, Ta, seed):
    lengths, ends = zip(*eps)
    d = make_offline(lengths, ends, seed)
    M = d.num_transitions
    buf = ReplayBuffer.from_offline(d, gamma=0.9)
    s = buf.sample_sequences(M, To, Ta, indices=np.arange(M))
    assert tuple(s.observations.shape) == (M, To, OBS_DIM) and tuple(s.actions.shape) == (M, Ta, ACT_DIM)
    assert tuple(s.mask.shape) == (M, Ta) and tuple(s.next_observations.shape) == (M, Ta, OBS_DIM)
    for i in range(M):
        ep, t = int(d.observations[i, 1]), int(d.observations[i, 2])
        T = lengths[ep]
        st_ = int(d.episode_starts[ep])
        # history o_{t-To+1..t}, padded with the episode's first observation
        for k in range(To):
            tk = max(t - (To - 1 - k), 0)
            np.testing.assert_array_equal(s.observations[i, k].numpy(), d.observations[st_ + tk])
        for k in range(Ta):
            valid = t + k <= T - 1
            assert bool(s.mask[i, k]) == valid
            tk = min(t + k, T - 1)  # past the end: the last valid action is repeated
            assert s.actions[i, k].tolist() == [float(ep), float(tk)]
            np.testing.assert_array_equal(s.next_observations[i, k].numpy(), d.next_observations[st_ + tk])
            assert s.rewards[i, k].item() == (pytest.approx(float(d.rewards[st_ + tk])) if valid else 0.0)
            assert s.terminated[i, k].item() == float(valid and d.terminated[st_ + tk])
            assert s.truncated[i, k].item() == float(valid and d.truncated[st_ + tk])
        assert np.allclose(s.discounts[i].numpy(), 0.9 ** np.arange(1, Ta + 1), rtol=1e-6)


# --------------------------------------------------------------------------- errors and state


def test_batch_size_larger_than_data_and_empty_buffer_raise():
    d = make_offline([3, 2], ["term", "trunc"])
    buf = ReplayBuffer.from_offline(d)
    with pytest.raises(BatchSizeError, match=r"batch size 6 is larger than the 5 transitions stored; lower the batch"):
        buf.sample(6)
    with pytest.raises(BatchSizeError, match=r"batch size 6 is larger than the 5 transitions"):
        buf.sample_sequences(6, 2, 2)
    assert len(buf.sample(5)) == 5
    empty = ReplayBuffer(10, OBS_DIM, ACT_DIM)
    with pytest.raises(BatchSizeError, match=r"(empty|0 transitions).*(collect|load)"):
        empty.sample(1)
    with pytest.raises(BatchSizeError, match=r"(empty|0 transitions)"):
        empty.sample_sequences(1, 2, 2)
    with pytest.raises(BatchSizeError, match="must be positive"):
        buf.sample(0)


def test_state_dict_round_trip_gives_identical_samples(tmp_path):
    d = make_offline([5, 4, 6], ["term", "trunc", "trunc"], seed=7)
    buf = ReplayBuffer(12, OBS_DIM, ACT_DIM, gamma=0.8, num_envs=1, seed=0)
    add_stepwise(buf, d)  # 15 steps into 12 slots: wraps
    extra = make_offline([3], ["term"], seed=8, env=1)
    for i in range(2):  # leave an episode open
        buf.add(extra.observations[i], extra.actions[i], extra.rewards[i], extra.next_observations[i], False, False)
    path = save_arrays(tmp_path / "replay.npz", buf.state_dict())
    clone = ReplayBuffer(12, OBS_DIM, ACT_DIM, gamma=0.8, num_envs=1, seed=123)
    clone.load_state_dict(load_arrays(path))
    assert (clone.size, clone.ptr, clone.total_added) == (buf.size, buf.ptr, buf.total_added)
    idx = np.random.default_rng(0).integers(0, buf.size, buf.size)  # repeats allowed
    B = buf.size

    def same(a, b):
        for f in ("observations", "actions", "rewards", "next_observations", "terminated", "truncated",
                  "discounts", "mc_returns", "mask"):
            x, y = getattr(a, f), getattr(b, f)
            assert (x is None) == (y is None)
            if x is not None:
                assert torch.equal(x, y), f

    same(buf.sample(B, n_step=3, indices=idx), clone.sample(B, n_step=3, indices=idx))
    same(buf.sample_sequences(B, 3, 4, indices=idx), clone.sample_sequences(B, 3, 4, indices=idx))
    # the open episode continues in the clone exactly as in the original
    for b_ in (buf, clone):
        b_.add(extra.observations[2], extra.actions[2], extra.rewards[2], extra.next_observations[2], True, False)
    for k in ReplayBuffer._SLOT_ARRAYS:
        np.testing.assert_array_equal(getattr(buf, k), getattr(clone, k), err_msg=k)
    same(buf.sample(B, n_step=4, indices=idx), clone.sample(B, n_step=4, indices=idx))


def test_full_buffer_loaded_into_a_larger_one_continues_in_its_free_slots():
    """A run resumed with a larger online budget gets a larger buffer: new rows go to the free slots, the saved
    rows stay, and no never-written slot lies inside ``size``."""
    small = ReplayBuffer(4, 1, 1, seed=0)
    for t in range(4):
        small.add(np.full(1, t), np.zeros(1), 0.0, np.full(1, t + 1), False, False)
    assert small.ptr == 0 and small.size == 4  # full: the ring wrapped
    big = ReplayBuffer(8, 1, 1, seed=0)
    big.load_state_dict(small.state_dict())
    big.end_open_episodes()
    big.add(np.full(1, 10.0), np.zeros(1), 0.0, np.full(1, 11.0), False, False)
    assert big.size == 5
    np.testing.assert_array_equal(big.observations[:5, 0], [0, 1, 2, 3, 10])
