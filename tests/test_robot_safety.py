"""The safety supervisor: hard limits hold for any request sequence (hypothesis), e-stop latches, NaN guard."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from robotrl.errors import ConfigError
from robotrl.real_robot.safety import SafetyConfig, SafetySupervisor, WorkspaceBox

LOW, HIGH = [-1.0, -0.5, 0.0], [1.0, 0.5, 2.0]


def _sup(**kw) -> SafetySupervisor:
    cfg = dict(low=LOW, high=HIGH, hold_action=[0.0, 0.0, 1.0], rate_hz=50.0, max_delta=[0.2, 0.1, 0.3],
               max_velocity=[8.0, 4.0, 100.0], max_acceleration=[200.0, 1000.0, 500.0])
    cfg.update(kw)
    return SafetySupervisor(SafetyConfig(**cfg))


floats = st.floats(allow_nan=True, allow_infinity=True, width=64)
requests = st.lists(st.lists(floats, min_size=3, max_size=3), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(requests, st.lists(st.sampled_from(["none", "estop", "rearm", "hold"]), min_size=40, max_size=40),
       st.sampled_from(["fixed", "last"]))
def test_applied_action_never_leaves_the_limits(reqs, events, hold_mode):
    """Bounds always; the per-step change limit always with hold_mode=last (fixed: except the jump to the stop command)."""
    sup = _sup(estop_on_nonfinite=False, hold_mode=hold_mode)
    lo, hi = np.array(LOW), np.array(HIGH)
    dmax = np.minimum(np.array([0.2, 0.1, 0.3]), np.array([8.0, 4.0, 100.0]) / 50.0)
    prev = np.array([0.0, 0.0, 1.0])
    for req, ev in zip(reqs, events):
        if ev == "estop":
            sup.estop()
        elif ev == "rearm":
            sup.rearm()
        elif ev == "hold":
            h = sup.hold().applied.astype(np.float64)
            assert hold_mode == "fixed" or np.array_equal(h, prev)
            prev = h
        d = sup.filter(np.array(req))
        a = d.applied.astype(np.float64)
        assert d.applied.dtype == np.float32 and a.shape == (3,)
        assert np.all(np.isfinite(a))
        assert np.all(a >= lo) and np.all(a <= hi), (req, a)
        stopping = sup.estopped or not np.all(np.isfinite(req))
        if stopping:
            assert np.array_equal(a, [0.0, 0.0, 1.0] if hold_mode == "fixed" else prev)
        if hold_mode == "last" or not stopping:
            assert np.all(np.abs(a - prev) <= dmax + 1e-12), (prev, req, a)
        prev = a


@settings(max_examples=200, deadline=None)
@given(requests, st.lists(st.floats(-3, 3), min_size=2, max_size=2))
def test_workspace_box_on_position_targets(reqs, _):
    ws = WorkspaceBox(source="action", indices=[0, 2], low=[-0.3, 0.5], high=[0.4, 1.5])
    sup = _sup(workspace=ws, max_delta=None, max_velocity=None, max_acceleration=None)
    for req in reqs:
        a = sup.filter(np.nan_to_num(np.array(req), nan=0.0, posinf=9, neginf=-9)).applied
        assert -0.3 <= a[0] <= 0.4 and 0.5 <= a[2] <= 1.5


def test_acceleration_limit_smooths_a_step_request():
    sup = _sup(max_delta=None, max_velocity=None, max_acceleration=[10.0, 10.0, 10.0])
    dt = 1 / 50
    applied = [sup.filter(np.array([1.0, 0.5, 2.0])).applied.astype(np.float64) for _ in range(30)]
    v = np.diff(np.vstack([[0, 0, 1.0], applied]), axis=0) / dt
    acc = np.abs(np.diff(np.vstack([[0, 0, 0.0], v]), axis=0)) / dt
    feasible = np.array(["accel_infeasible" not in d.flags for d in sup.log])
    assert feasible[:10].all() and (~feasible).any()  # stopping at the bound is where the hard limit wins
    assert np.all(acc[feasible] <= 10.0 + 1e-3)
    assert applied[-1][0] > applied[0][0] and sup.counters["acceleration"] > 0


def test_estop_latches_until_explicit_rearm_and_nan_trips_it():
    sup = _sup(max_acceleration=None)
    assert sup.filter(np.array([0.1, 0.0, 1.0])).flags == []
    d = sup.filter(np.array([np.nan, 0.0, 1.0]))
    assert d.flags == ["nonfinite"] and sup.estopped
    for _ in range(5):  # valid commands do not clear it
        d = sup.filter(np.array([0.1, 0.05, 1.1]))
        assert d.flags == ["estop"] and np.array_equal(d.applied, [0, 0, 1])
    sup.rearm()
    d = sup.filter(np.array([0.1, 0.05, 1.1]))
    assert not sup.estopped and np.allclose(d.applied, [0.1, 0.05, 1.1])
    assert sup.counters["nonfinite"] == 1 and sup.counters["estop"] == 5
    # requested vs applied are logged
    assert len(sup.log) == 8 and np.isnan(sup.log[1].requested[0])


def test_observation_workspace_blocks_pushing_outward_only():
    ws = WorkspaceBox(source="observation", indices=[4, 5], action_indices=[0, 1], low=[-1, -1], high=[1, 1])
    sup = SafetySupervisor(SafetyConfig(low=[-1, -1], high=[1, 1], hold_action=[0, 0], rate_hz=100, workspace=ws))
    obs = np.zeros(8)
    obs[4:6] = [1.2, 0.0]  # beyond +x face
    d = sup.filter(np.array([0.8, 0.5]), obs)
    assert d.applied[0] == 0.0 and d.applied[1] == pytest.approx(0.5) and "workspace" in d.flags
    d = sup.filter(np.array([-0.8, 0.5]), obs)  # pushing back inside is allowed
    assert d.applied[0] == pytest.approx(-0.8)
    with pytest.raises(ValueError, match="needs the current observation"):
        sup.filter(np.array([0.1, 0.1]))


def test_bad_configs_and_requests_are_explained():
    with pytest.raises(ConfigError, match="hold_action"):
        SafetyConfig(low=[-1], high=[1], hold_action=[2], rate_hz=10)
    with pytest.raises(ConfigError, match="low <= high"):
        SafetyConfig(low=[1], high=[-1], hold_action=[0], rate_hz=10)
    with pytest.raises(ConfigError, match="max_delta"):
        SafetyConfig(low=[-1], high=[1], hold_action=[0], rate_hz=10, max_delta=0)
    with pytest.raises(ValueError, match="Da=3"):
        _sup().filter(np.zeros(2))
    assert SafetyConfig(low=[-1], high=[1], hold_action=[0], rate_hz=50).watchdog_s == pytest.approx(0.03)


def test_observation_workspace_wins_over_the_step_limit_and_a_hold_on_a_float32_bound_stays_inside():
    """Issue 13 (3): outside a face only inward commands pass even when the change limit would keep pushing out;
    (11): a hold action on a bound float32 cannot represent never exceeds it by an ulp."""
    ws = WorkspaceBox(source="observation", indices=[0], action_indices=[0], low=[-1], high=[1])
    sup = SafetySupervisor(SafetyConfig(low=[-1], high=[1], hold_action=[0], rate_hz=100, max_delta=0.1, workspace=ws))
    inside, outside = np.array([0.5]), np.array([1.2])
    for _ in range(10):
        sup.filter(np.array([1.0]), inside)  # ramp up to +1 (pushing toward the face)
    d = sup.filter(np.array([1.0]), outside)
    assert d.applied[0] == 0.0 and "workspace" in d.flags  # the step limit alone would have allowed 0.9
    assert sup.filter(np.array([-1.0]), outside).applied[0] == pytest.approx(-0.1)  # inward passes (step-limited)
    assert sup.filter(np.array([0.5]), np.array([np.nan])).applied[0] == 0.0  # unknown position: stop
    sup = SafetySupervisor(SafetyConfig(low=[-1.0], high=[0.1], hold_action=[0.1], rate_hz=50))
    sup.estop()
    assert float(sup.filter(np.array([0.0])).applied[0]) <= 0.1 and float(sup.hold().applied[0]) <= 0.1


def test_configs_that_could_pin_the_robot_are_refused():
    """Issue 13 (4): the hold action must lie inside an action workspace; box and indices must be usable."""
    box = dict(source="action", indices=[0], low=[0.2], high=[0.6])
    with pytest.raises(ConfigError, match="outside the action workspace"):
        SafetyConfig(low=[-1], high=[1], hold_action=[0], rate_hz=10, workspace=WorkspaceBox(**box))
    with pytest.raises(ConfigError, match="does not overlap"):
        SafetyConfig(low=[-1], high=[0.1], hold_action=[0], rate_hz=10, workspace=WorkspaceBox(**box))
    with pytest.raises(ConfigError, match="does not exist"):
        SafetyConfig(low=[-1], high=[1], hold_action=[0], rate_hz=10, workspace=WorkspaceBox(**{**box, "indices": [3]}))
    with pytest.raises(ConfigError, match="finite"):
        WorkspaceBox(**{**box, "high": [float("inf")]})
    with pytest.raises(ConfigError, match="distinct integers"):
        WorkspaceBox(source="observation", indices=[4, 4], action_indices=[0, 1], low=[-1, -1], high=[1, 1])
    ok = SafetyConfig(low=[-1], high=[1], hold_action=[0.3], rate_hz=10, workspace=WorkspaceBox(**box))
    assert SafetySupervisor(ok).hold().applied[0] == np.float32(0.3)
