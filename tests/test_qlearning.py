"""Unit tests of the warm-start Q-learning core: ensemble critic, pure losses, agent parts.

No mocks: real networks and real update steps on small tensors; the end-to-end mode runs
on a generated PointMaze dataset are in ``tests/test_qlearning_modes.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from robotrl.agents.qlearning import QLAgent
from robotrl.agents.qlearning import loss as L
from robotrl.agents.qlearning.networks import EnsembleCritic, TanhGaussianActor
from robotrl.data import ActionScaler, Batch, ObservationNormalizer


@pytest.mark.parametrize("layer_norm", [False, True])
def test_batched_ensemble_equals_n_separate_critics(layer_norm):
    """One batched pass over N stacked heads == N independent MLPs, in values and in gradients."""
    torch.manual_seed(0)
    N, B, Do, Da = 5, 33, 7, 3
    critic = EnsembleCritic(Do, Da, n=N, hidden=(32, 16), layer_norm=layer_norm, final_init_scale=0.5)
    with torch.no_grad():  # non-trivial LayerNorm affine parameters
        for p in critic.parameters():
            p.add_(0.1 * torch.randn_like(p))
    obs, act = torch.randn(B, Do), torch.rand(B, Da) * 2 - 1
    heads = [critic.net.head(i) for i in range(N)]
    q = critic(obs, act)
    assert q.shape == (N, B)
    x = torch.cat([obs, act], -1)
    sep = torch.stack([h(x).squeeze(-1) for h in heads])
    torch.testing.assert_close(q, sep, rtol=1e-5, atol=1e-5)
    # gradients: d(sum Q)/d(weights of head i) equal those of the separate MLP i
    (q * torch.arange(1, N + 1).view(N, 1)).sum().backward()
    for i, h in enumerate(heads):
        ((i + 1) * h(x)).sum().backward()
        first = critic.net.net[0]
        torch.testing.assert_close(first.weight.grad[i].T, h.net[0].weight.grad, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(first.bias.grad[i, 0], h.net[0].bias.grad, rtol=1e-4, atol=1e-5)


def test_heads_are_independent_initialisations():
    critic = EnsembleCritic(4, 2, n=3)
    w = critic.net.net[0].weight
    assert not torch.allclose(w[0], w[1]) and not torch.allclose(w[1], w[2])


def _cql_inputs(N=2, B=4, R=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return dict(q_data=torch.randn(N, B, generator=g), q_rand=torch.randn(N, B, R, generator=g),
                q_pi=torch.randn(N, B, R, generator=g), q_next_pi=torch.randn(N, B, R, generator=g),
                logp_pi=torch.randn(B, R, generator=g), logp_next_pi=torch.randn(B, R, generator=g))


def _cql_reference(x, Da, lb=None):
    """Plain-loop CQL(H)/Cal-QL penalty per head (JaxCQL's formula, written out)."""
    N, B, R = x["q_rand"].shape
    out = torch.zeros(N)
    for i in range(N):
        for b in range(B):
            vals = []
            for r in range(R):
                vals.append(x["q_rand"][i, b, r] - Da * math.log(0.5))
            for r in range(R):
                qn = x["q_next_pi"][i, b, r] if lb is None else max(x["q_next_pi"][i, b, r], lb[b])
                vals.append(qn - x["logp_next_pi"][b, r])
            for r in range(R):
                qp = x["q_pi"][i, b, r] if lb is None else max(x["q_pi"][i, b, r], lb[b])
                vals.append(qp - x["logp_pi"][b, r])
            out[i] += torch.logsumexp(torch.stack(vals), 0) - x["q_data"][i, b]
    return out / B


def test_cql_penalty_matches_reference_formula():
    x = _cql_inputs()
    pen, _ = L.cql_penalty(**x, action_dim=2)
    torch.testing.assert_close(pen, _cql_reference(x, 2), rtol=1e-5, atol=1e-5)


def test_calql_bound_applies_only_to_policy_action_values():
    x = _cql_inputs()
    lb = torch.tensor([0.5, -10.0, 2.0, -math.inf])  # -inf: no known return (open online episode)
    pen, info = L.cql_penalty(**x, action_dim=2, mc_lower_bound=lb)
    torch.testing.assert_close(pen, _cql_reference(x, 2, lb), rtol=1e-5, atol=1e-5)
    assert 0 < float(info["calql_bound_rate"]) < 1
    # uniform-action and data values are never bounded: raising the bound far above them while
    # the policy values are huge changes nothing through the uniform/data terms
    y = {**x, "q_pi": x["q_pi"] + 100.0, "q_next_pi": x["q_next_pi"] + 100.0}
    pen_hi, info_hi = L.cql_penalty(**y, action_dim=2, mc_lower_bound=torch.full((4,), 50.0))
    pen_none, _ = L.cql_penalty(**y, action_dim=2)
    torch.testing.assert_close(pen_hi, pen_none)
    assert float(info_hi["calql_bound_rate"]) == 0.0
    # rows with an unknown return are exactly CQL
    pen_inf, _ = L.cql_penalty(**x, action_dim=2, mc_lower_bound=torch.full((4,), -math.inf))
    torch.testing.assert_close(pen_inf, L.cql_penalty(**x, action_dim=2)[0])


def test_td_target_bootstraps_through_truncation_not_termination():
    r, d, v = torch.tensor([1.0, 1.0]), torch.tensor([0.9, 0.81]), torch.tensor([10.0, 10.0])
    y = L.td_target(r, d, torch.tensor([0.0, 1.0]), v)
    torch.testing.assert_close(y, torch.tensor([1.0 + 9.0, 1.0]))


def test_subset_min_and_losses():
    q = torch.tensor([[1.0, 5.0], [3.0, 2.0], [0.0, 9.0]])
    torch.testing.assert_close(L.subset_min(q, torch.tensor([0, 1])), torch.tensor([1.0, 2.0]))
    torch.testing.assert_close(L.subset_min(q, torch.tensor([2])), torch.tensor([0.0, 9.0]))
    diff = torch.tensor([1.0, -1.0])
    assert float(L.expectile_loss(diff, 0.9)) == pytest.approx((0.9 + 0.1) / 2)
    assert float(L.critic_td_loss(q, torch.zeros(2))) == pytest.approx(13 + 6.5 + 40.5)


def test_tanh_gaussian_log_prob_matches_sample():
    torch.manual_seed(0)
    actor = TanhGaussianActor(5, 3, hidden=(16,))
    obs = torch.randn(64, 5)
    a, lp = actor.sample(obs, torch.Generator().manual_seed(1))
    assert a.abs().max() < 1
    torch.testing.assert_close(actor.log_prob(obs, a), lp, rtol=1e-3, atol=2e-3)


def _agent(algo="sac", **kw):
    return QLAgent(4, 2, obs_normalizer=ObservationNormalizer.identity(4), action_scaler=ActionScaler(-np.ones(2), np.ones(2)),
                   algo=algo, hidden=(32, 32), critic_hidden=(32, 32), num_critics=4, target_subset=2, **kw)


def _batch(B=32, seed=0, mc=None):
    g = torch.Generator().manual_seed(seed)
    return Batch(torch.randn(B, 4, generator=g), torch.rand(B, 2, generator=g) * 2 - 1, torch.randn(B, generator=g),
                 torch.randn(B, 4, generator=g), torch.zeros(B), torch.zeros(B), torch.full((B,), 0.99),
                 torch.full((B,), -100.0) if mc is None else mc)


def test_calql_agent_uses_mc_returns_and_cql_agent_ignores_them():
    losses = {}
    for algo in ("cql", "calql"):
        for name, mc in (("low", torch.full((32,), -1e6)), ("high", torch.full((32,), 50.0))):
            torch.manual_seed(0)
            a = _agent(algo, seed=0, cql_n_actions=3)
            losses[algo, name] = float(a.update(_batch(mc=mc), 0)["critic_loss"])
    assert losses["cql", "low"] == losses["cql", "high"]
    assert losses["calql", "high"] > losses["calql", "low"] + 1.0


def _returns_buffer(episodes=20, T=100, seed=0):
    """Episodes paying -5 per step (Cal-QL's 10r - 5 for a goal never reached) ending at T: MC returns -5..-316."""
    from robotrl.data.replay import ReplayBuffer

    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(episodes * T, 4, 2, gamma=0.99, seed=seed)
    for _ in range(episodes):
        obs = rng.normal(size=4).astype(np.float32)
        for t in range(T):
            nxt = (obs + 0.1 * rng.normal(size=4)).astype(np.float32)
            buf.add(obs, rng.uniform(-1, 1, 2), -5.0, nxt, t == T - 1, False)
            obs = nxt
    return buf


def test_critic_init_from_data_starts_q_at_the_returns_scale():
    """critic_init="data" sets the heads (and targets) to the data's mean MC return; the reference's zero
    start is still hundreds of reward units above the returns after the same Cal-QL updates."""
    buf = _returns_buffer()
    mean_mc = float(buf.mc_returns[: buf.size].mean())
    gaps = {}
    for init in ("zero", "data"):
        a = _agent("calql", seed=0, cql_n_actions=3, critic_init=init)
        set_to = a.init_from_data(buf)
        assert (set_to is None) == (init == "zero")
        if init == "data":
            assert set_to == pytest.approx(mean_mc)
            q0 = a.critic_target(torch.zeros(3, 4), torch.zeros(3, 2))
            assert q0.mean().item() == pytest.approx(mean_mc, abs=5.0)
        for step in range(150):
            a.update(buf.sample(32), step)
        gaps[init] = abs(a.q_minus_mc(buf.sample(500)))
    assert mean_mc < -100
    assert gaps["data"] < 0.25 * gaps["zero"] and gaps["zero"] > 100, gaps
    with pytest.raises(ValueError, match="critic_init"):
        _agent("calql", critic_init="mc")


def test_critic_warmup_updates_leave_the_actor_untouched():
    a = _agent(critic_warmup_updates=2)
    before = [p.clone() for p in a.actor.parameters()]
    for s in range(2):
        m = a.update(_batch(seed=s), s)
        assert "actor_loss" not in m
    assert all(torch.equal(p, q) for p, q in zip(before, a.actor.parameters()))
    assert "actor_loss" in a.update(_batch(seed=3), 3)
    assert not all(torch.equal(p, q) for p, q in zip(before, a.actor.parameters()))


def test_load_parts_policy_only_keeps_a_fresh_critic():
    src = _agent(seed=1)
    for s in range(3):
        src.update(_batch(seed=s), s)
    dst = _agent(seed=2)
    critic0 = {k: v.clone() for k, v in dst.critic.state_dict().items()}
    dst.load_parts(src.state_dict(), ["policy"])
    for k, v in src.policy.state_dict().items():
        assert torch.equal(dst.policy.state_dict()[k], v)
    for k, v in dst.critic.state_dict().items():
        assert torch.equal(v, critic0[k])
    with pytest.raises(ValueError, match="unknown part"):
        dst.load_parts(src.state_dict(), ["optimizer"])


def test_state_dict_round_trip_resumes_identically():
    a, b = _agent(seed=3), _agent(seed=4)
    a.update(_batch(seed=0), 0)
    b.load_state_dict(copy.deepcopy(a.state_dict()))  # as from disk: optimizer tensors not shared
    ma, mb = a.update(_batch(seed=1), 1), b.update(_batch(seed=1), 1)
    assert float(ma["critic_loss"]) == float(mb["critic_loss"])
    for p, q in zip(a.critic.parameters(), b.critic.parameters()):
        assert torch.equal(p, q)


def test_batch_split_keeps_an_exact_mix_in_every_minibatch():
    a = _agent(critic_utd=4)
    b = _batch(B=64)
    b.extras["offline"] = torch.cat([torch.ones(32), torch.zeros(32)])  # MixedSampler layout: offline first
    for i in range(4):
        mb = a._minibatch(b, torch.arange(i, 64, 4))
        assert len(mb) == 16 and float(mb.extras["offline"].sum()) == 8
    assert float(a.update(b, 0)["offline_frac"]) == 0.5


@pytest.mark.parametrize("algo", ["sac", "calql", "iql"])
def test_bfloat16_matmuls_track_float32(algo):
    """The bf16 autocast changes arithmetic precision only: same losses within a few percent, float32 state."""
    out = {}
    for dt in ("float32", "bfloat16"):
        a = _agent(algo, seed=5, cql_n_actions=3, matmul_dtype=dt)
        m = a.update(_batch(seed=7, mc=torch.full((32,), -1.0)), 0)
        out[dt] = {k: float(v) for k, v in m.items()}
        assert all(p.dtype == torch.float32 for p in a.critic.parameters())
        assert a.policy(torch.zeros(2, 4)).dtype == torch.float32
    for k in ("q_mean", "critic_loss", "actor_loss"):
        assert out["bfloat16"][k] == pytest.approx(out["float32"][k], rel=0.05, abs=0.02), k


def test_bfloat16_on_a_device_without_native_bf16_warns_with_the_way_out():
    """Emulated bf16 matmuls are several times slower than float32: the agent says so and names the setting."""
    import warnings

    from robotrl.utils import native_bf16

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _agent("sac", matmul_dtype="bfloat16")
        _agent("sac", matmul_dtype="float32")
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if native_bf16("cpu") is False:
        assert len(msgs) == 1 and "matmul_dtype=float32" in msgs[0]
    else:
        assert not any("bf16" in m for m in msgs)


def test_plain_sac_fine_tuning_a_pretrained_critic_without_layer_norm_warns_with_the_way_out():
    """WSRL's warm start from a critic without LayerNorm collapsed at the onset on Hopper
    (bench_wsrl_warmstart.py): the switch to online SAC and a SAC warm start of the critic say so."""
    import functools
    import warnings

    def ln_warnings(fn) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fn()
        return [str(w.message) for w in caught if "critic_layer_norm" in str(w.message)]

    for ln in (False, True):
        one_run = _agent("calql", online_algo="sac", critic_layer_norm=ln)  # WSRL in one run: Cal-QL, then SAC
        msgs = ln_warnings(one_run.start_online)
        assert (len(msgs) == 1 and "critic_layer_norm=true" in msgs[0]) if not ln else not msgs
        assert one_run.algo == "sac"
        pretrained = _agent("cql", critic_layer_norm=ln).state_dict()
        online = _agent("sac", critic_layer_norm=ln)  # experiment=wsrl: trainer.init_parts from a CQL run
        msgs = ln_warnings(functools.partial(online.load_parts, pretrained, ["policy", "critic", "temperature"]))
        assert len(msgs) == (0 if ln else 1)
    plain = _agent("cql", critic_layer_norm=False).state_dict()
    assert not ln_warnings(lambda: _agent("cql", critic_layer_norm=False).load_parts(plain, ["critic"]))  # stays conservative
    assert not ln_warnings(_agent("calql", critic_layer_norm=False).start_online)


# ---------------------------------------------------------------- fused float32 critic pass
def _plain_copy(critic: EnsembleCritic) -> EnsembleCritic:
    ref = copy.deepcopy(critic)
    ref.net.fused = False  # the module-by-module pass (baddbmm + ReLU modules, autograd backward)
    return ref


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("hidden,out_dim,shared,input_grad", [
    ((64, 64), 1, True, False), ((64, 64), 1, True, True), ((48,), 1, False, True),
    ((32, 32, 32), 3, False, True), ((64, 64), 2, True, False)])
def test_fused_ensemble_mlp_matches_plain_pass(hidden, out_dim, shared, input_grad, layer_norm):
    """The fused one-node forward/backward == the module-by-module pass: values, weight and input grads
    (LayerNorm: also its per-head affine's grads, with affine weights away from their 1/0 start).

    Repeated three times so that the recycled (pooled) buffers of earlier passes are exercised.
    """
    from robotrl.agents.qlearning.networks import EnsembleLayerNorm, EnsembleMLP

    torch.manual_seed(0)
    N, M, Din = 3, 700, 9  # N·M·H >= 2^16: the big buffers go through the pool
    net = EnsembleMLP(N, Din, out_dim, hidden, layer_norm=layer_norm)
    with torch.no_grad():
        for m in net.net:
            if isinstance(m, EnsembleLayerNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.3, 0.3)
    ref = copy.deepcopy(net)
    ref.fused = False
    for rep in range(3):
        x = torch.randn(M, Din) if shared else torch.randn(N, M, Din)
        w = torch.randn(N, M, out_dim)
        outs, grads = [], []
        for m in (net, ref):
            xi = x.clone().requires_grad_(input_grad)
            m.zero_grad(set_to_none=True)
            y = m(xi)
            (y * w).sum().backward()
            outs.append(y.detach())
            grads.append([p.grad for p in m.parameters()] + ([xi.grad] if input_grad else []))
        torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
        for a, b in zip(*grads):  # sums over M = 700 rows in another order: float32 rounding ~1e-5 (1.08e-5
            torch.testing.assert_close(a, b, rtol=1e-4, atol=5e-5)  # on the H200 machine's CPU); a wrong pass is O(0.1)


def test_fused_ensemble_backward_runs_once():
    critic = EnsembleCritic(4, 2, n=2, hidden=(16, 16))
    q = critic(torch.randn(8, 4), torch.rand(8, 2))
    q.sum().backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="once per forward"):
        q.sum().backward()


def test_fused_critic_is_used_only_for_float32_relu():
    x = torch.randn(2, 5, 6)
    assert EnsembleCritic(4, 2, n=2).net._fast_ok(x)
    assert EnsembleCritic(4, 2, n=2, layer_norm=True).net._fast_ok(x)
    assert not EnsembleCritic(4, 2, n=2, act="tanh").net._fast_ok(x)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not EnsembleCritic(4, 2, n=2).net._fast_ok(x)


@pytest.mark.parametrize("algo", ["sac", "cql", "calql", "iql", "sac-layernorm"])
def test_fused_updates_match_the_plain_critic_pass(algo):
    """Whole agent updates (losses, metrics, every parameter) with the fused critic == the plain pass.

    Same seed, same batches, same sampled actions (CQL: 3 uniform + 3 policy + 3 next-policy per
    state); only the critic's kernels differ, so everything agrees to float rounding (1e-5).
    """
    torch.manual_seed(0)
    algo, ln = algo.removesuffix("-layernorm"), algo.endswith("-layernorm")  # WSRL/RLPD's LayerNorm critics
    fused, plain = (_agent(algo, seed=11, cql_n_actions=3, critic_layer_norm=ln) for _ in range(2))
    for c in (plain.critic, plain.critic_target):
        c.net.fused = False
    for s in range(4):
        b = _batch(B=64, seed=s, mc=torch.randn(64))
        mf, mp = fused.update(b, s), plain.update(b, s)
        assert mf.keys() == mp.keys()
        for k in mf:
            torch.testing.assert_close(mf[k], mp[k], rtol=1e-5, atol=1e-5, msg=k)
    for part in ("critic", "critic_target", "actor") + (("value",) if algo == "iql" else ()):
        for (n, p), q in zip(getattr(fused, part).named_parameters(), getattr(plain, part).parameters()):
            torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-5, msg=f"{part}.{n}")


def test_iql_advantage_is_returned_by_the_critic_step_and_drives_the_awr_actor():
    """IQL's ``Q̄ - V`` comes out of the pure loss and into the actor step of the same minibatch
    (no advantage kept on the agent between calls)."""
    from robotrl.agents.qlearning import loss as L

    a = _agent("iql", seed=0)
    b = _batch()
    obs, act, nobs = a._normalize(b)
    losses = L.iql_critic_losses(a.critic, a.critic_target, a.value, obs, act, nobs, b.rewards, b.discounts,
                                 b.terminated, 0.7)
    with torch.no_grad():
        expect = a.critic_target(obs, act).min(0).values - a.value(obs)
    torch.testing.assert_close(losses.advantage, expect)
    metrics, adv, feats = a._iql_critic(b)
    assert adv.shape == (32,) and not adv.requires_grad and "value_loss" in metrics
    torch.testing.assert_close(feats, obs)  # the minibatch's normalised observations, for the actor step
    out = a._iql_actor(b, adv, feats)
    torch.testing.assert_close(out["adv_mean"], adv.mean())
    assert not any(k.startswith("_iql") for k in vars(a))


def test_polyak_update_and_squashed_gaussian_are_the_shared_pieces():
    from robotrl.networks import polyak_update_, squashed_gaussian

    src, dst = [torch.ones(3), torch.full((2, 2), 2.0)], [torch.zeros(3), torch.zeros(2, 2)]
    polyak_update_(dst, src, 0.25)
    assert torch.equal(dst[0], torch.full((3,), 0.25)) and torch.equal(dst[1], torch.full((2, 2), 0.5))
    mean, log_std = torch.zeros(5, 2), torch.zeros(5, 2)
    a, lp = squashed_gaussian(mean, log_std, torch.zeros(5, 2))  # the mode: tanh(0) = 0, log N(0; 0, 1) per dim
    assert torch.equal(a, torch.zeros(5, 2))
    torch.testing.assert_close(lp, torch.full((5,), -math.log(2 * math.pi)))


def test_q_minus_mc_reports_the_critic_scale_against_monte_carlo_returns():
    q = torch.tensor([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])        # (N=2, B=3): head means 2, 3, 4
    mc = torch.tensor([0.0, -float("inf"), 10.0])                # the middle row's return is unknown
    assert float(L.q_minus_mc(q, mc)) == pytest.approx(((2 - 0) + (4 - 10)) / 2)
    assert math.isnan(float(L.q_minus_mc(q, torch.full((3,), -float("inf")))))
    # a fresh Cal-QL critic (values near 0) sits far above returns of -100: the gap says so, every update
    m = _agent("calql", seed=0, cql_n_actions=3).update(_batch(mc=torch.full((32,), -100.0)), 0)
    assert float(m["q_minus_mc"]) > 90.0
    no_mc = dataclasses.replace(_batch(), mc_returns=None)
    assert "q_minus_mc" not in _agent("sac", seed=0).update(no_mc, 0)
    a = _agent("calql", seed=0, cql_n_actions=3)
    assert a.q_minus_mc(_batch(mc=torch.full((32,), -100.0))) > 90.0
    with pytest.raises(ValueError, match="mc_returns"):
        a.q_minus_mc(no_mc)
