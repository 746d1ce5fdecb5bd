"""MixedSampler: exactly round(ρ·B) offline rows in every batch, flags, schedules, bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotrl.data import LinearSchedule, MixedSampler, ReplayBuffer


def tagged_buffer(tag: float, n: int, seed: int) -> ReplayBuffer:
    """obs = [tag, i]: tag +1 offline, -1 online; one long truncated episode."""
    buf = ReplayBuffer(max(n, 1), 2, 1, gamma=0.9, seed=seed)
    for i in range(n):
        buf.add([tag, i], [0.0], 1.0, [tag, i + 1], False, i == n - 1)
    return buf


@pytest.fixture(scope="module")
def buffers():
    return tagged_buffer(1.0, 80, 0), tagged_buffer(-1.0, 80, 1)


def _check(batch, n_off, B):
    src = batch.observations[:, 0].numpy()
    assert len(batch) == B and set(np.unique(src)) <= {1.0, -1.0}
    assert int((src == 1.0).sum()) == n_off
    # offline rows first; the flag marks exactly them; next_observations come from the same buffer
    assert (src[:n_off] == 1.0).all() and (src[n_off:] == -1.0).all()
    np.testing.assert_array_equal(batch.extras["offline"].numpy(), (src == 1.0).astype(np.float32))
    np.testing.assert_array_equal(batch.next_observations[:, 0].numpy(), src)
    assert batch.mc_returns is not None and batch.mc_returns.shape == (B,)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 64), ratio=st.floats(0.0, 1.0), n_step=st.integers(1, 3))
def test_every_batch_has_exactly_round_ratio_offline_rows(buffers, B, ratio, n_step):
    sampler = MixedSampler(*buffers, offline_ratio=ratio)
    n_off = round(ratio * B)
    assert sampler.split(B) == (n_off, B - n_off)
    for _ in range(3):
        _check(sampler.sample(B, n_step=n_step), n_off, B)


def test_ratio_zero_never_touches_offline_buffer_wsrl():
    online = tagged_buffer(-1.0, 20, 0)
    empty_offline = ReplayBuffer(10, 2, 1)  # WSRL: no offline data retained
    b = MixedSampler(empty_offline, online, 0.0).sample(16)
    _check(b, 0, 16)
    assert b.extras["offline"].sum().item() == 0.0


def test_ratio_one_is_all_offline():
    offline = tagged_buffer(1.0, 20, 0)
    b = MixedSampler(offline, ReplayBuffer(10, 2, 1), 1.0).sample(16)  # online buffer still empty
    _check(b, 16, 16)


def test_half_and_half_rlpd():
    off, on = tagged_buffer(1.0, 50, 0), tagged_buffer(-1.0, 50, 1)
    for B in (2, 7, 256 // 8):
        _check(MixedSampler(off, on, 0.5).sample(B), round(0.5 * B), B)


def test_linear_schedule_changes_ratio_per_step(buffers):
    sched = LinearSchedule(1.0, 0.0, 10)
    assert [sched(s) for s in (0, 5, 10, 20, -3)] == [1.0, 0.5, 0.0, 0.0, 1.0]
    assert LinearSchedule(0.3, 0.7, 0)(0) == 0.7
    sampler = MixedSampler(*buffers, offline_ratio=sched)
    B = 20
    counts = []
    for step in range(12):
        b = sampler.sample(B, step=step)
        n_off = round(sched(step) * B)
        _check(b, n_off, B)
        counts.append(n_off)
    assert counts == [20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0, 0]


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan")])
def test_ratio_outside_unit_interval_raises(buffers, bad):
    with pytest.raises(ValueError, match=r"offline ratio must be in \[0, 1\]"):
        MixedSampler(*buffers, offline_ratio=bad).sample(8)


def test_schedule_leaving_unit_interval_raises_at_that_step(buffers):
    sampler = MixedSampler(*buffers, offline_ratio=LinearSchedule(0.5, 1.5, 10))
    sampler.sample(8, step=4)  # 0.9: fine
    with pytest.raises(ValueError, match=r"offline ratio must be in \[0, 1\], got 1\.1"):
        sampler.sample(8, step=6)


def test_online_share_larger_than_a_filling_online_buffer_is_sampled_with_repeats():
    import numpy as np

    from robotrl.data import MixedSampler, ReplayBuffer

    off = ReplayBuffer(100, 2, 1, seed=0)
    for t in range(50):
        off.add(np.zeros(2), np.zeros(1), 0.0, np.zeros(2), False, t == 49)
    on = ReplayBuffer(100, 2, 1, seed=1)
    for t in range(3):
        on.add(np.ones(2), np.ones(1), 1.0, np.ones(2), False, False)
    batch = MixedSampler(off, on, 0.5).sample(64)
    assert int(batch.extras["offline"].sum()) == 32
    assert (batch.observations[32:] == 1).all()  # 32 rows from the 3 online transitions
