"""Knowledge retention (robotrl.agents.retention) in ReinFlow, the residual agents and the camera Q-learning agent.

Per agent: the kl term equals the weighted KL to the frozen snapshot computed here independently (from the
snapshot's own networks, step by step), it is zero at the online start and grows once updates move the policy,
an agent without retention (or with zero weights) updates exactly as before, the terms that do not apply are
refused in one line, and a resume keeps the pretrained snapshot.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch.distributions import Normal, kl_divergence

from robotrl.agents.bc.policy import BCPolicy
from robotrl.agents.flow.sampling import euler_mean, euler_times
from robotrl.agents.qlearning import QLAgent
from robotrl.agents.reinflow import ReinFlowAgent
from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPPOAgent
from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer
from robotrl.errors import ConfigError
from robotrl.onpolicy import Rollout

DO, DA = 8, 2
KL = {"kl": {"weight": 2.0}}


@pytest.fixture(autouse=True)
def one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _norms(do: int = DO):
    return dict(obs_normalizer=ObservationNormalizer.identity(do), action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)))


def _jitter(*modules: torch.nn.Module, scale: float = 0.1, seed: int = 3) -> None:
    """Move every parameter of ``modules`` (a stand-in for online updates)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in modules:
            for p in m.parameters():
                p.add_(scale * torch.randn(p.shape, generator=g))


def _same(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))


def _one_line_refusal(make, words: str) -> None:
    with pytest.raises(ConfigError, match=words) as err:
        make()
    assert "\n" not in str(err.value)


def _off_zero_on(make, on: dict, run) -> tuple:
    """The same updates (``run(agent) -> [metrics, ...]``) on an agent without retention, one with a zero weight and
    one with ``on``: checks the first two end bit-identical and the plain one carries no retention state or
    metrics; returns ``(plain, kept, the kept agent's metrics)``."""
    plain, zero, kept = make(None), make({"kl": {"weight": 0.0}}), make(on)
    outs = []
    for a in (plain, zero, kept):
        a.start_online()
        outs.append(run(a))
    assert _same(plain.policy, zero.policy) and _same(plain.critic, zero.critic)
    assert "retention" not in plain.state_dict() and all("retention_kl" not in o for o in outs[0])
    return plain, kept, outs[2]


def _resumed(make, kept, seed: int):
    """A new agent (``make(KL-like settings, seed=seed)``) loaded from ``kept``'s state, online again as the loop does
    on resume: checks its snapshot is ``kept``'s (the online start's) with the same retention step; returns it."""
    frozen = copy.deepcopy(kept.retention.reference)
    resumed = make(kept.retention.cfg, seed=seed)
    resumed.load_state_dict(kept.state_dict())
    resumed.start_online()  # the loop calls it again on resume
    assert _same(resumed.retention.reference, frozen) and resumed.retention.steps == kept.retention.steps
    return resumed


def _rollout(agent, T: int = 4, N: int = 4, To: int = 1, seed: int = 0) -> Rollout:
    """A rollout of the agent's own samples on random observations ``(T+1, N, To, Do)`` (rewards: the first entry)."""
    obs = np.random.default_rng(seed).standard_normal((T + 1, N, To, DO)).astype(np.float32)
    extras = [agent.rollout_act(obs[t])[1] for t in range(T)]
    flags = np.zeros((T, N), bool)
    rewards = obs[1:, :, -1, 0].astype(np.float64)
    return Rollout(obs[:T], obs[1:], rewards, rewards.astype(np.float32), flags, flags, ~flags,
                   {k: torch.stack([e[k] for e in extras]) for k in extras[0]}, T * N)


# ---------------------------------------------------------------------- ReinFlow
def _reinflow(retention=None, seed: int = 0, **kw) -> ReinFlowAgent:
    torch.manual_seed(seed)  # the networks come from the global generator
    return ReinFlowAgent(DO, DA, **_norms(), obs_horizon=1, action_horizon=4, act_steps=4, flow_steps=3,
                         denoiser_kwargs={"hidden": [32, 32], "time_dim": 8}, critic_hidden=[16], noise_hidden=[16],
                         batch_size=8, repeat_samples=2, n_epochs=2, seed=seed, actor_lr_min=None,
                         retention=retention, **kw)


def _reinflow_kl(frozen_velocity, frozen_noise, policy, cond, chain) -> torch.Tensor:
    """Mean over (env step, Euler transition) of KL(N(μ₀, σ₀²) ‖ N(μ, σ²)) of x_{k+1} | x_k, step by step."""
    K = policy.K
    ts = euler_times(K, cond.device)
    kls = []
    for k in range(K):
        x, t = chain[:, k], ts[k].expand(cond.shape[0])
        m0 = euler_mean(frozen_velocity, x, t, cond, 1.0 / K, policy.x_clip)
        m = euler_mean(policy.velocity, x, t, cond, 1.0 / K, policy.x_clip)
        kls.append(kl_divergence(Normal(m0, frozen_noise(x, t, cond)), Normal(m, policy.noise_net(x, t, cond)))
                   .flatten(1).sum(1))
    return torch.stack(kls, 1)  # (M, K)


def test_reinflow_kl_term_is_the_per_transition_kl_to_the_frozen_chain():
    agent = _reinflow({"kl": {"weight": 3.0}})
    agent.start_online()
    p = agent.policy
    frozen_v, frozen_n = copy.deepcopy(p.velocity), copy.deepcopy(p.noise_net)
    cond = torch.randn(5, 1, DO)
    chain = p.sample_noisy_chain(cond, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        loss, info = agent._retention_term(cond, chain)
    assert float(loss) == 0.0 and float(info["retention_kl"]) == 0.0  # the snapshot is the policy at the start
    # the noise bounds are a schedule, not learned: the snapshot reads the live ones (no KL from the schedule)
    p.noise_net.set_bounds(0.10, 0.18)
    assert float(agent._retention_term(cond, chain)[0].detach()) == 0.0
    _jitter(p.velocity, p.noise_net, scale=0.05)
    frozen_n.set_bounds(0.10, 0.18)
    with torch.no_grad():
        per = _reinflow_kl(frozen_v, frozen_n, p, cond, chain)
        loss, info = agent._retention_term(cond, chain)
    assert float(per.mean()) > 1e-4
    assert float(loss) == pytest.approx(3.0 * float(per.mean()), rel=1e-4)
    assert float(info["retention_kl"]) == pytest.approx(float(per.mean()), rel=1e-4)
    assert float(info["retention_kl_w"]) == 3.0
    # a minibatch with repeated env steps (dedup): the mean of the duplicated rows
    index = torch.tensor([0, 0, 0, 4, 2])
    with torch.no_grad():
        loss, _ = agent._retention_term(cond, chain, index)
    assert float(loss) == pytest.approx(3.0 * float(per[index].mean()), rel=1e-4)
    # penalty l2: the squared distance of the transition means
    l2 = _reinflow({"kl": {"weight": 1.0}, "penalty": "l2"})
    l2.start_online()
    _jitter(l2.policy.velocity, scale=0.05)
    ts, K = euler_times(3, cond.device), 3
    with torch.no_grad():
        loss, _ = l2._retention_term(cond, chain)
        d = [(euler_mean(l2.policy.velocity, chain[:, k], ts[k].expand(5), cond, 1 / K, p.x_clip)
              - euler_mean(l2.retention.reference.velocity, chain[:, k], ts[k].expand(5), cond, 1 / K, p.x_clip))
             .pow(2).flatten(1).sum(1) for k in range(K)]
    assert float(loss) == pytest.approx(float(torch.stack(d, 1).mean()), rel=1e-4) and float(loss) > 0


def test_reinflow_retention_refuses_data_terms_in_one_line():
    _one_line_refusal(lambda: _reinflow({"bc": {"weight": 1.0}}), "kl_states=online")
    _one_line_refusal(lambda: _reinflow({"kl": {"weight": 1.0}, "kl_states": "offline"}), "not built for flow")


def test_reinflow_off_is_unchanged_on_grows_and_a_resume_keeps_the_snapshot():
    ro = _rollout(_reinflow(None))  # sampled by another agent: the three generators start alike
    plain, kept, (first, second) = _off_zero_on(_reinflow, {"kl": {"weight": 1.0}},
                                                lambda a: [a.update_rollout(ro, i) for i in range(2)])
    assert not _same(plain.policy, kept.policy)  # the term changed the updates
    assert 0 < first["retention_kl"] < second["retention_kl"]  # 0 on the first minibatch, then growing
    assert kept.retention.steps == 2
    cond = torch.randn(4, 1, DO)
    chain = kept.policy.sample_noisy_chain(cond, generator=torch.Generator().manual_seed(2))
    assert float(kept._retention_term(cond, chain)[0]) > 0
    # resume: the snapshot stays the chain of the online start, not the policy of the checkpoint
    resumed = _resumed(_reinflow, kept, seed=4)
    assert not _same(resumed.retention.reference.velocity, resumed.policy.velocity)
    torch.testing.assert_close(resumed._retention_term(cond, chain)[0], kept._retention_term(cond, chain)[0])


# ---------------------------------------------------------------------- residual PPO
def _base() -> BCPolicy:
    torch.manual_seed(0)
    base = BCPolicy(DO, DA, hidden=[8])
    base.set_normalizers(ObservationNormalizer.identity(DO), ActionScaler(-np.ones(DA), np.ones(DA)))
    return base.eval()


def _residual_ppo(retention=None, seed: int = 0) -> ResidualPPOAgent:
    torch.manual_seed(seed)
    return ResidualPPOAgent(DO, DA, **_norms(), base=_base(), hidden=[16], critic_hidden=[16], learn_log_std=True,
                            n_epochs=2, batch_size=8, reward_scaling=False, seed=seed, retention=retention)


def test_residual_ppo_kl_term_is_the_kl_of_the_residual_gaussians():
    agent = _residual_ppo(KL)
    agent.start_online()
    x = torch.randn(12, DO + DA)
    loss, info = agent._retention_term(x)
    assert float(loss) == 0.0
    frozen = copy.deepcopy(agent.policy)
    _jitter(agent.policy.residual)
    with torch.no_grad():
        agent.policy.log_std.add_(torch.tensor([0.3, -0.2]))
        m, ls = agent.policy.residual_params(x)
        m0, ls0 = frozen.residual_params(x)
        want = kl_divergence(Normal(m0, ls0.exp()), Normal(m, ls.exp())).sum(-1).mean()
        loss, info = agent._retention_term(x)
    assert float(want) > 1e-3
    assert float(loss) == pytest.approx(2.0 * float(want), rel=1e-5)
    assert float(info["retention_kl"]) == pytest.approx(float(want), rel=1e-5)
    # the snapshot holds the residual head only, not the frozen base
    assert set(agent.retention.reference.state_dict()) == {"log_std", *("residual." + k for k in
                                                                        agent.policy.residual.state_dict())}
    _one_line_refusal(lambda: _residual_ppo({"bc": {"weight": 1.0}}), "combined actions, not residuals")
    _one_line_refusal(lambda: _residual_ppo({"kl": {"weight": 1.0}, "kl_states": "offline"}), "kl_states=offline")


def test_residual_ppo_off_is_unchanged_on_grows_and_a_resume_keeps_the_snapshot():
    ro = _rollout(_residual_ppo(None), To=2)
    _, kept, (first, second) = _off_zero_on(_residual_ppo, KL, lambda a: [a.update_rollout(ro, i) for i in range(2)])
    assert 0 < first["retention_kl"] < second["retention_kl"] and second["retention_kl_w"] == 2.0
    assert kept.retention.steps == 2
    resumed = _resumed(_residual_ppo, kept, seed=5)
    assert not _same(resumed.retention.reference.residual, resumed.policy.residual)


# ---------------------------------------------------------------------- off-policy residual (ResFiT)
def _resfit(retention=None, actor: str = "sac", seed: int = 0, **kw) -> ResidualOffPolicyAgent:
    torch.manual_seed(seed)  # a state agent's networks come from the global generator
    return ResidualOffPolicyAgent(DO, DA, **_norms(), base=_base(), actor=actor, hidden=[16], critic_hidden=[16],
                                  num_critics=2, actor_delay=1, seed=seed, retention=retention, **kw)


def _resfit_batch(n: int = 32, seed: int = 0):
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n, DO, DA, seed=seed)
    for t in range(n):
        o, o2 = rng.standard_normal((1, DO)), rng.standard_normal((1, DO))
        buf.add(o, rng.uniform(-1, 1, (1, DA)), [float(o[0, 0])], o2, [t % 7 == 6], [False])
    return buf


def test_resfit_kl_term_is_the_kl_of_the_residual_and_td3_has_the_action_distance():
    agent = _resfit(KL)
    agent.start_online()
    x = torch.randn(10, DO + DA)
    assert float(agent._retention_term(x)[0]) == 0.0
    frozen = copy.deepcopy(agent.policy.residual)
    _jitter(agent.policy.residual)
    with torch.no_grad():
        m, ls = agent.policy.residual_params(x)
        m0, ls0 = frozen(x).split(DA, -1)
        want = kl_divergence(Normal(m0, ls0.clamp(-5, 2).exp()), Normal(m, ls.exp())).sum(-1).mean()
        loss, info = agent._retention_term(x)
    assert float(want) > 1e-3 and float(loss) == pytest.approx(2.0 * float(want), rel=1e-5)
    td3 = _resfit({"kl": {"weight": 0.5}, "penalty": "l2"}, actor="td3")
    td3.start_online()
    frozen = copy.deepcopy(td3.policy.residual)
    _jitter(td3.policy.residual)
    with torch.no_grad():
        want = (torch.tanh(td3.policy.residual(x)) - torch.tanh(frozen(x))).pow(2).sum(-1).mean()
        loss, _ = td3._retention_term(x)
    assert float(want) > 1e-3 and float(loss) == pytest.approx(0.5 * float(want), rel=1e-5)


@pytest.mark.parametrize("retention, actor, words", [
    ({"kl": {"weight": 1.0}}, "td3", "set agent.model.retention.penalty=l2 or agent.model.actor=sac"),
    ({"bc": {"weight": 1.0}}, "sac", "combined actions, not residuals"),
    ({"replay": {"weight": 0.5}}, "sac", "trainer.offline_ratio"),
])
def test_resfit_refuses_what_does_not_apply_in_one_line(retention, actor, words):
    _one_line_refusal(lambda: _resfit(retention, actor=actor), words.replace(".", r"\."))


def _camera_resfit(retention=None, seed: int = 0) -> ResidualOffPolicyAgent:
    """A camera ResFiT agent on a state base (given the flat state ``(B, 1)``)."""
    torch.manual_seed(0)
    base = BCPolicy(1, DA, hidden=[8])
    base.set_normalizers(ObservationNormalizer.identity(1), ActionScaler(-np.ones(DA), np.ones(DA)))
    return ResidualOffPolicyAgent(1, DA, obs_normalizer=ObservationNormalizer(np.full(1, 0.5), np.full(1, 2.0)),
                                  action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)), base=base.eval(), actor="sac",
                                  image_shapes=SHAPES, channels=4, feature_dim=8, augment_pad=2, hidden=[8],
                                  critic_hidden=[8], num_critics=2, actor_delay=1, seed=seed, retention=retention)


def test_camera_resfit_kl_term_runs_the_snapshot_through_its_own_encoder():
    agent = _camera_resfit(KL)
    agent.start_online()
    p = agent.policy
    frozen = copy.deepcopy(p)
    b = _camera_buffer().sample(16)
    images, obs = b.images(), b.observations
    base = agent.base_actions(obs, images)
    with torch.no_grad():
        assert float(agent._retention_term((images, obs, base))[0]) == 0.0
    _jitter(p.encoder, scale=0.05)
    _jitter(p.residual, scale=0.1, seed=6)
    with torch.no_grad():
        m, ls = p.eval().residual_params(p.inputs(obs, base, images))
        m0, ls0 = frozen.eval().residual_params(frozen.inputs(obs, base, images))
        want = kl_divergence(Normal(m0, ls0.exp()), Normal(m, ls.exp())).sum(-1).mean()
        p.train()  # as in an update: the term must read the frames unshifted
        loss, _ = agent._retention_term((images, obs, base))
    assert p.training and float(want) > 1e-4
    assert float(loss) == pytest.approx(2.0 * float(want), rel=1e-4)
    out = agent.update(b, 0)  # one critic + actor update with the term
    assert out["retention_kl"] > 0 and agent.retention.steps == 1
    assert _same(agent.retention.reference.encoder, frozen.encoder)
    resumed = _camera_resfit(KL, seed=2)
    resumed.load_state_dict(agent.state_dict())
    assert _same(resumed.retention.reference.encoder, frozen.encoder)
    assert _same(resumed.retention.reference.residual, frozen.residual)


def test_resfit_off_is_unchanged_on_grows_and_a_resume_keeps_the_snapshot():
    buf = _resfit_batch()
    batches = [buf.sample(16) for _ in range(6)]
    _, kept, outs = _off_zero_on(_resfit, KL, lambda a: [a.update(b, 0) for b in batches])
    kls = [float(o["retention_kl"]) for o in outs]
    assert kls[0] == 0.0 and kls[-1] > 0 and kept.retention.steps == 6
    resumed = _resumed(_resfit, kept, seed=7)
    assert not _same(resumed.retention.reference.residual, resumed.policy.residual)


# ---------------------------------------------------------------------- Q-learning on cameras
SHAPES = {"cam": (16, 16, 3)}


def _camera_ql(retention=None, **kw) -> QLAgent:
    args = dict(hidden=(16,), critic_hidden=(16,), num_critics=2, critic_layer_norm=True, channels=4, feature_dim=8,
                augment_pad=2, seed=0)
    args.update(kw)
    return QLAgent(1, DA, obs_normalizer=ObservationNormalizer(np.full(1, 0.5), np.full(1, 2.0)),
                   action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)), image_shapes=SHAPES, retention=retention,
                   **args)


def _camera_buffer(n: int = 64, seed: int = 0, frame_stack: int = 1, same: bool = False) -> ReplayBuffer:
    """Random frames and states (``same``: every row the same transition)."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n, 1, DA, image_shapes=SHAPES, frame_stack=frame_stack, seed=seed)
    one = None
    for t in range(n):
        row = (rng.normal(size=(1, 1)), rng.uniform(-0.9, 0.9, (1, DA)), rng.normal(size=(1, 1)),
               rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8), rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8))
        one = one if (same and one is not None) else row
        s, a, s2, im, im2 = one
        buf.add(s, a, [1.0], s2, [t % 9 == 8], [False], images={"cam": im}, next_images={"cam": im2})
    return buf


def _own_encoder_kl(live, frozen, b) -> torch.Tensor:
    """KL(π₀(·|enc₀(o)) ‖ π(·|enc(o))) of the batch, each policy through its own encoder, in eval mode."""
    with torch.no_grad():
        z0 = frozen.eval().encoder(b.images(), frozen.normalized_state(b.observations))
        training = live.training
        z = live.eval().encoder(b.images(), live.normalized_state(b.observations))
        live.train(training)
        (m0, ls0), (m, ls) = frozen.actor(z0), live.actor(z)
    return kl_divergence(Normal(m0, ls0.exp()), Normal(m, ls.exp())).sum(-1).mean()


@pytest.mark.parametrize("frame_stack", [1, 2])
def test_camera_q_learning_kl_term_runs_the_snapshot_through_its_own_encoder(frame_stack):
    agent = _camera_ql({"kl": {"weight": 0.7}}, frame_stack=frame_stack)
    buf = _camera_buffer(frame_stack=frame_stack)
    agent.start_online()
    frozen = copy.deepcopy(agent.policy)
    b = buf.sample(16)
    assert b.images()["cam"].shape[-1] == 3 * frame_stack
    feats = agent.policy.features(b.observations, b.images())
    assert float(agent._retention_loss(feats, b)[0]) == 0.0
    _jitter(agent.policy.encoder, scale=0.05)  # the critic trains the encoder ...
    _jitter(agent.policy.actor, scale=0.05, seed=4)  # ... and the actor its head
    want = _own_encoder_kl(agent.policy, frozen, b)
    agent.policy.train()  # as in an update: the term must still read the frames unshifted
    loss, info = agent._retention_loss(feats, b)
    assert agent.policy.encoder.training  # the live encoder's mode is restored
    assert float(want) > 1e-4
    assert float(loss) == pytest.approx(0.7 * float(want), rel=1e-4)
    # the encoder's own change counts: with the live actor head back at the snapshot's, the KL stays > 0
    agent.policy.actor.load_state_dict(frozen.actor.state_dict())
    assert float(agent._retention_loss(feats, b)[0]) > 0
    # one update with the term: trained, logged, ticked; the snapshot's encoder untouched
    metrics = agent.update(buf.sample(16), 0)
    assert metrics["retention_kl"] > 0 and float(metrics["retention_kl_w"]) == pytest.approx(0.7)
    assert agent.retention.steps == 1 and _same(agent.retention.reference, frozen)
    # resume keeps the pretrained snapshot, encoder included
    resumed = _camera_ql({"kl": {"weight": 0.7}}, frame_stack=frame_stack, seed=3)
    resumed.load_state_dict(agent.state_dict())
    resumed.start_online()
    assert _same(resumed.retention.reference, frozen)


def test_camera_q_learning_kl_term_with_the_feature_cache():
    """A frozen trunk's cached stems serve the snapshot's pass too: the term equals the full passes'."""
    agent = _camera_ql({"kl": {"weight": 1.0}}, freeze_encoder=True, augment_pad=0, cache_features=True)
    buf = _camera_buffer()
    agent.start_online()
    frozen = copy.deepcopy(agent.policy)
    b = buf.sample(16)
    assert "obs_uid" in b.extras
    _jitter(agent.policy.encoder.project, scale=0.05)  # the trunk is frozen, the projection trains
    _jitter(agent.policy.actor, scale=0.05, seed=5)
    feats = agent.policy.features(b.observations, b.images())
    loss, _ = agent._retention_loss(feats, b)
    assert agent.feature_cache.hits > 0  # the second pass read the stems the first one cached
    want = _own_encoder_kl(agent.policy, frozen, b)
    assert float(want) > 1e-4 and float(loss) == pytest.approx(float(want), rel=1e-4)


def test_camera_q_learning_bc_term_is_the_nll_through_the_live_encoder():
    """BC on camera pretraining data: ``−log π(a | enc(o))`` of the dataset rows (all rows one transition here,
    so the sampled rows are known)."""
    agent = _camera_ql({"bc": {"weight": 0.5}}, augment_pad=2)
    data = _camera_buffer(n=32, seed=2, same=True)
    agent.attach_offline_data(data)
    agent.start_online()
    _jitter(agent.policy.actor, scale=0.05)
    b = data.sample(4)
    with torch.no_grad():
        z = agent.policy.eval().encoder(b.images(), agent.policy.normalized_state(b.observations))
        want = -agent.actor.log_prob(z, agent.policy.action_scaler.normalize(b.actions).clamp(-1, 1)).mean()
    agent.policy.train()
    online = _camera_buffer(seed=9).sample(16)
    loss, info = agent._retention_loss(agent.policy.features(online.observations, online.images()), online)
    assert float(loss) == pytest.approx(0.5 * float(want), rel=1e-4)
    assert float(info["retention_bc"]) == pytest.approx(float(want), rel=1e-4)


def test_off_leaves_the_camera_q_learning_updates_unchanged():
    buf = _camera_buffer()
    plain, zero = _camera_ql(None), _camera_ql({"kl": {"weight": 0.0}})
    batches = [buf.sample(16) for _ in range(3)]
    for a in (plain, zero):
        a.start_online()
        torch.manual_seed(0)  # DrQ's random shift draws from the global generator
        for b in batches:
            a.update(b, 0)
    assert _same(plain.policy, zero.policy) and _same(plain.critic, zero.critic)


def test_camera_q_learning_replay_carries_the_frames_of_the_replayed_rows():
    agent = _camera_ql({"replay": {"weight": 0.25}})
    data = _camera_buffer(n=32, seed=2, same=True)  # every pretraining row the same transition
    agent.attach_offline_data(data)
    agent.start_online()
    online = _camera_buffer(seed=9).sample(16)
    mixed = agent.retention.replay(online)
    one = data.sample(1)
    assert mixed.extras["offline"].tolist() == [1.0] * 4 + [0.0] * 12
    for key, frames in (("obs/cam", one.images()["cam"]), ("next_obs/cam", one.next_images()["cam"])):
        assert torch.equal(mixed.extras[key][:4], frames.expand(4, -1, -1, -1))
        assert torch.equal(mixed.extras[key][4:], online.extras[key][4:])
    assert "obs_uid" not in mixed.extras  # the two buffers' frame ids are not comparable
    assert float(agent.update(online, 0)["offline_frac"]) == 0.25
