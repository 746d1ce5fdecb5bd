"""Knowledge retention (robotrl.agents.retention) and the forgetting metric (robotrl.evaluation.forgetting_report).

The terms on hand-computed tensors, the schedules, the bad settings, the hooks of the Q-learning and PPO agents
(off: the updates unchanged; on: the snapshot taken at the online start and kept through a resume), the
mechanism the method exists for (online updates on one region of the state space leave the policy on another
region where it was, with retention, and move it without), and the metric on real PointMaze resets.
"""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch

from robotrl.agents.ppo import PPOAgent
from robotrl.agents.qlearning import QLAgent
from robotrl.agents.retention import gaussian_kl
from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer
from robotrl.data.batch import Batch
from robotrl.errors import ConfigError
from robotrl.evaluation import evaluate, forgetting_report, visit_distance
from robotrl.schema import RetentionConfig, RetentionTerm

DO, DA = 3, 2


def _ql(retention=None, seed=0, **kw) -> QLAgent:
    return QLAgent(DO, DA, obs_normalizer=ObservationNormalizer(np.zeros(DO), np.ones(DO)),
                   action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)), hidden=(32, 32), critic_hidden=(32, 32),
                   num_critics=2, critic_layer_norm=True, seed=seed, retention=retention, **kw)


def _buffer(center: float, n: int = 512, seed: int = 0, action: float = 0.5) -> ReplayBuffer:
    """Transitions around ``obs = center`` with actions near ``action`` and reward 0 (one long episode)."""
    rng = np.random.default_rng(seed)
    buf = ReplayBuffer(n, DO, DA, seed=seed)
    for _ in range(n):
        o = (center + 0.1 * rng.standard_normal(DO)).astype(np.float32)[None]
        a = np.clip(action + 0.05 * rng.standard_normal(DA), -0.99, 0.99).astype(np.float32)[None]
        buf.add(o, a, np.zeros(1, np.float32), o, np.zeros(1, bool), np.zeros(1, bool))
    return buf


# ---------------------------------------------------------------------- the pieces
def test_gaussian_kl_matches_hand_computed_values():
    # KL(N(0,1) || N(1,2²)) = log 2 + (1 + 1)/8 - 1/2 ; KL(N(1, 0.5²) || N(1, 0.5²)) = 0
    ref = (torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.5]]))
    cur = (torch.tensor([[1.0, 1.0]]), torch.tensor([[2.0, 0.5]]))
    assert gaussian_kl(ref, cur).item() == pytest.approx(math.log(2) + 0.25 - 0.5, abs=1e-6)
    m0, s0, m, s = torch.randn(5, 4), torch.rand(5, 4) + 0.1, torch.randn(5, 4), torch.rand(5, 4) + 0.1
    want = torch.distributions.kl_divergence(torch.distributions.Normal(m0, s0), torch.distributions.Normal(m, s)).sum(-1)
    torch.testing.assert_close(gaussian_kl((m0, s0), (m, s)), want)


def test_schedules_decay_as_documented():
    lin, half = RetentionTerm(2.0, "linear", 10), RetentionTerm(2.0, "exp", 10)
    assert [lin.at(t) for t in (0, 5, 10, 50)] == [2.0, 1.0, 0.0, 0.0]
    assert [half.at(t) for t in (0, 10, 20)] == [2.0, 1.0, 0.5]
    assert RetentionTerm(3.0).at(10**6) == 3.0


@pytest.mark.parametrize("given, words", [
    ({"bc_weight": 1.0}, "retention.bc_weight is not a retention setting"),
    ({"bc": {"weight": -1.0}}, "retention.bc.weight=-1.0 must be"),
    ({"kl": {"weight": 1.0, "decay": "linear"}}, "needs agent.model.retention.kl.decay_steps > 0"),
    ({"replay": {"weight": 1.5}}, "is a batch fraction"),
    ({"penalty": "js"}, "penalty='js' is unknown"),
    ({"kl": {"wieght": 1.0}}, "retention.kl.wieght is not a term setting"),
])
def test_bad_settings_are_one_line_config_errors(given, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")) as err:
        RetentionConfig.from_mapping(given)
    assert "\n" not in str(err.value)


def test_defaults_are_off_and_reading_data_follows_the_terms():
    assert not RetentionConfig.from_mapping(None).enabled
    assert not RetentionConfig.from_mapping({"kl": {"weight": 1.0}}).reads_data
    assert RetentionConfig.from_mapping({"kl": {"weight": 1.0}, "kl_states": "offline"}).reads_data
    assert RetentionConfig.from_mapping({"bc": {"weight": 0.1}}).reads_data


# ---------------------------------------------------------------------- the Q-learning hook
def _online_batch(n=64, seed=1) -> Batch:
    return _buffer(2.0, n, seed).sample(n)


def test_off_leaves_the_q_learning_updates_unchanged():
    plain, zero = _ql(None), _ql({"bc": {"weight": 0.0}, "kl": {"weight": 0.0}})
    for a in (plain, zero):
        a.attach_offline_data(_buffer(-2.0))
        a.start_online()
        torch.manual_seed(0)
        for _ in range(5):
            a.update(_online_batch(), 0)
    for p, q in zip(plain.policy.parameters(), zero.policy.parameters()):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert "retention" not in plain.state_dict()


def test_q_learning_kl_term_is_the_weighted_kl_to_the_snapshot():
    agent = _ql({"kl": {"weight": 0.7}})
    agent.start_online()
    with torch.no_grad():  # move the live actor away from the snapshot
        for p in agent.actor.parameters():
            p.add_(0.1 * torch.randn_like(p))
    obs = torch.randn(16, DO)
    loss, info = agent._retention_loss(obs)
    m, ls = agent.actor(obs)
    m0, ls0 = agent.retention.reference.actor(obs)
    want = torch.distributions.kl_divergence(torch.distributions.Normal(m0, ls0.exp()),
                                             torch.distributions.Normal(m, ls.exp())).sum(-1).mean()
    assert float(want) > 1e-3
    assert float(loss) == pytest.approx(0.7 * float(want), rel=1e-5)
    assert float(info["retention_kl"]) == pytest.approx(float(want), rel=1e-5)


def test_q_learning_bc_term_is_the_dataset_nll():
    agent = _ql({"bc": {"weight": 2.0}, "batch_size": 8})
    data = _buffer(-2.0, 64)
    agent.attach_offline_data(data)
    agent.start_online()
    torch.manual_seed(3)
    np_state = data.rng.bit_generator.state
    loss, info = agent._retention_loss(torch.zeros(4, DO))
    data.rng.bit_generator.state = np_state  # the same 8 rows again
    b = data.sample(8)
    want = -agent.actor.log_prob(b.observations, b.actions.clamp(-1, 1)).mean()
    assert float(loss) == pytest.approx(2.0 * float(want), rel=1e-5)
    assert float(info["retention_bc"]) == pytest.approx(float(want), rel=1e-5)


def test_replay_replaces_the_scheduled_share_of_rows():
    agent = _ql({"replay": {"weight": 0.5, "decay": "linear", "decay_steps": 2}})
    agent.attach_offline_data(_buffer(-2.0))
    agent.start_online()
    seen = []
    step = agent._sac_critic
    agent._sac_critic = lambda mb: (seen.append(mb.observations.mean(1)), step(mb))[1]
    for _ in range(3):
        agent.update(_online_batch(64), 0)
    shares = [float((o < 0).float().mean()) for o in seen]  # offline rows sit near -2, online near +2
    assert shares == [0.5, 0.25, 0.0]


def test_retention_without_its_data_names_the_way_out():
    with pytest.raises(ConfigError, match="reads the pretraining data"):
        _ql({"bc": {"weight": 1.0}}).start_online()


def test_the_snapshot_is_the_pretrained_policy_also_after_a_resume():
    agent = _ql({"kl": {"weight": 1.0}, "bc": {"weight": 1.0, "decay": "linear", "decay_steps": 100}})
    agent.attach_offline_data(_buffer(-2.0))
    pretrained = copy.deepcopy(agent.policy.state_dict())
    agent.start_online()
    for _ in range(20):
        agent.update(_online_batch(), 0)
    assert agent.retention.steps == 20
    state = agent.state_dict()
    resumed = _ql({"kl": {"weight": 1.0}, "bc": {"weight": 1.0, "decay": "linear", "decay_steps": 100}}, seed=5)
    resumed.load_state_dict(state)
    resumed.attach_offline_data(_buffer(-2.0))
    resumed.start_online()  # the loop calls it again on resume: the snapshot stays the pretrained one
    for k, v in resumed.retention.reference.state_dict().items():
        torch.testing.assert_close(v, pretrained[k])
    assert any(not torch.equal(v, pretrained[k]) for k, v in resumed.policy.state_dict().items())
    assert resumed.retention.steps == 20 and resumed.retention.weights()["bc"] == pytest.approx(0.8)


def _drift(retention) -> float:
    """Mean change of the deterministic action on FAR states (obs ≈ -2) after 60 SAC updates on NEAR data
    (obs ≈ +2) whose reward pays for action -0.8, with the same initial networks."""
    agent = _ql(retention, seed=0, actor_lr=3e-3, critic_lr=3e-3, fixed_alpha=0.01)
    far = _buffer(-2.0, 256, seed=2)
    agent.attach_offline_data(far)
    near = _buffer(2.0, 512, seed=3)
    rng = np.random.default_rng(0)
    acts = rng.uniform(-1, 1, (512, DA)).astype(np.float32)
    near.actions[:512] = acts
    near.rewards[:512] = -np.abs(acts + 0.8).sum(1)
    x_far = torch.as_tensor(far.observations[:256])
    with torch.no_grad():
        before = agent.actor.mode(x_far)
    agent.start_online()
    torch.manual_seed(0)
    for _ in range(60):
        agent.update(near.sample(64), 0)
    with torch.no_grad():
        return float((agent.actor.mode(x_far) - before).abs().mean())


def test_retention_keeps_the_policy_on_states_the_online_phase_does_not_visit():
    plain = _drift(None)
    kept = _drift({"kl": {"weight": 10.0}, "kl_states": "offline"})
    print(f"action drift on far states: plain {plain:.3f}, with retention {kept:.3f}")
    assert plain > 0.1  # the plain fine-tuning moved the far-state actions (the forgetting)
    assert kept < 0.3 * plain


# ---------------------------------------------------------------------- the PPO hook
def _ppo(retention=None) -> PPOAgent:
    return PPOAgent(DO, DA, obs_normalizer=ObservationNormalizer(np.zeros(DO), np.ones(DO)),
                    action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)), hidden=(32, 32), critic_hidden=(32,),
                    retention=retention)


def test_ppo_retention_terms_and_its_refusal_of_replay():
    with pytest.raises(ConfigError, match="use agent.model.retention.bc"):
        _ppo({"replay": {"weight": 0.5}})
    agent = _ppo({"bc": {"weight": 0.5}, "kl": {"weight": 2.0}, "batch_size": 16})
    data = _buffer(-2.0, 64)
    agent.attach_offline_data(data)
    agent.start_online()
    with torch.no_grad():
        agent.policy.log_std.add_(0.3)
    obs = torch.randn(8, DO)
    state = data.rng.bit_generator.state
    loss, info = agent._retention_term(obs)
    data.rng.bit_generator.state = state
    b = data.sample(16)
    mean, std = agent.policy.distribution(b.observations)
    bc = -torch.distributions.Normal(mean, std).log_prob(b.actions).sum(-1).mean()
    m, s = agent.policy.distribution(obs)
    m0, s0 = agent.retention.reference.distribution(obs)
    kl = torch.distributions.kl_divergence(torch.distributions.Normal(m0, s0), torch.distributions.Normal(m, s)).sum(-1)
    assert float(kl.mean()) > 1e-3
    assert float(loss) == pytest.approx(0.5 * float(bc) + 2.0 * float(kl.mean()), rel=1e-5)
    state = agent.state_dict()
    assert set(state["retention"]) == {"steps", "reference"}
    assert "retention" not in _ppo().state_dict()


# ---------------------------------------------------------------------- the forgetting metric
def test_visit_distance_is_the_kth_neighbour_in_std_units():
    visited = np.array([[0.0], [1.0], [2.0], [3.0]])  # std = sqrt(1.25)
    d = visit_distance(np.array([[0.0], [10.0]]), visited, k=2)
    np.testing.assert_allclose(d, np.array([1.0, 8.0]) / math.sqrt(1.25))
    with pytest.raises(ValueError, match="must be"):
        visit_distance(np.zeros((2, 3)), np.zeros((0, 3)))


def test_forgetting_report_on_pointmaze_resets():
    gym = pytest.importorskip("gymnasium")
    pytest.importorskip("gymnasium_robotics")
    gym.register_envs(__import__("gymnasium_robotics"))

    def make_env():
        return gym.wrappers.FlattenObservation(gym.make("PointMaze_UMaze-v3", max_episode_steps=60))

    def toward_goal(o):  # obs = [achieved (2), desired (2), observation (4)]: push toward the goal
        o = np.asarray(o)
        return np.clip(3.0 * (o[:, 2:4] - o[:, 0:2]), -1, 1)

    def still(o):
        return np.zeros((np.asarray(o).shape[0], 2))

    env = make_env()
    visited = []
    for s in range(20):  # "online data": the first observations of seeds 0..19 and a few steps after
        o, _ = env.reset(seed=s)
        for _ in range(5):
            visited.append(o)
            o = env.step(still(o[None])[0])[0]
    env.close()
    same = forgetting_report(toward_goal, toward_goal, make_env, np.stack(visited), num_starts=8, far_fraction=0.25,
                             num_envs=4)
    assert same["num_far"] == 2 and same["forgetting"] == 0.0 and same["forgetting_near"] == 0.0
    worse = forgetting_report(toward_goal, still, make_env, np.stack(visited), num_starts=8, far_fraction=0.25,
                              num_envs=4)
    assert worse["far_seeds"] == same["far_seeds"]
    direct = evaluate(still, make_env, 2, seeds=worse["far_seeds"], num_envs=2)
    assert worse["far"]["finetuned"]["return_mean"] == direct["return_mean"]
    assert worse["forgetting"] == worse["far"]["pretrained"]["return_mean"] - direct["return_mean"]
    assert worse["far"]["pretrained"]["return_mean"] > direct["return_mean"]  # moving to the goal pays, standing still not


# ---------------------------------------------------------------------- through the one build path
def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


MAZE = ["dataset.id=robotrl/pointmaze/umaze-slow-test-v0", "dataset.recipe_args.num_steps=3000",
        "+dataset.recipe_args.ref_episodes=3", "+dataset.recipe_args.max_episode_steps=50", "trainer.eval_episodes=2",
        "trainer.eval_envs=2", "trainer.progress=false", "trainer.eval_every=100000", "trainer.checkpoint_every=100000",
        "torch_threads=1", "device=cpu"]
QSMALL = ["agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
          "agent.model.target_subset=null", "agent.model.cql_n_actions=4"]


def _recording(agent, key):
    seen: list[dict] = []
    inner = getattr(agent, key)

    def wrapped(*args):
        out = inner(*args)
        seen.append({k: float(v) for k, v in out.items()})
        return out

    setattr(agent, key, wrapped)
    return seen


@pytest.mark.slow
def test_wsrl_with_retention_keeps_the_data_aside_and_pulls_toward_the_warm_start(minari_module_root, tmp_path):
    """`experiment=wsrl agent=wsrl-retain`: the dataset is held (for the KL on its states) while the online
    batches stay WSRL's (no offline rows); π₀ is the warm-started policy; the penalty is logged and acts."""
    from robotrl.experiment import build_trainer

    pre = tmp_path / "pre"
    build_trainer(_compose(["experiment=calql", *MAZE, *QSMALL, "trainer.offline_steps=60", f"run_dir={pre}"]),
                  pre).fit()
    over = ["experiment=wsrl", "agent=wsrl-retain", *MAZE, *QSMALL, f"trainer.init_from={pre}", "trainer.online_steps=150",
            "trainer.online_warmup_steps=50", "trainer.batch_size=32", "trainer.utd=1", "trainer.forgetting_starts=6",
            f"run_dir={tmp_path / 'run'}"]
    trainer = build_trainer(_compose(over), tmp_path / "run")
    agent = trainer.agent
    batches = []
    update = agent.update
    agent.update = lambda batch, step: (batches.append(set(batch.extras)), update(batch, step))[1]
    seen = _recording(agent, "_sac_actor")
    summary = trainer.fit()
    assert trainer.offline is not None and trainer.cfg.offline_ratio == 0.0
    assert batches and all("offline" not in keys for keys in batches)  # WSRL's batches: online rows only
    pretrained = _checkpoint_policy(pre)
    for k, v in agent.retention.reference.state_dict().items():
        torch.testing.assert_close(v, pretrained[k])
    kl = [m["retention_kl"] for m in seen]
    assert len(kl) == 100 and kl[0] < 1e-6 < max(kl)  # zero at the warm start, then the policy moves and is pulled
    # the forgetting metric in the run's report: the policy at the online start vs the final one
    detail = summary["forgetting_detail"]
    assert detail["num_far"] == 2 and detail["num_near"] == 4 and detail["score"] == "normalized_score"
    far = detail["far"]
    assert summary["forgetting"] == far["pretrained"]["normalized_score"] - far["finetuned"]["normalized_score"]
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert report["summary"]["forgetting"] == summary["forgetting"]
    assert report["summary"]["forgetting_detail"]["far_seeds"] == detail["far_seeds"]
    # the reference is the warm-started policy, kept in the checkpoint for a resume
    from robotrl.checkpoint import load_checkpoint

    kept = load_checkpoint(tmp_path / "run")["forgetting_reference"]["state_dict"]
    for k, v in pretrained.items():
        torch.testing.assert_close(kept[k], v)


def _checkpoint_policy(run_dir):
    from robotrl.checkpoint import load_checkpoint

    return load_checkpoint(run_dir)["agent"]["policy"]


@pytest.mark.slow
def test_bc_ppo_with_retention_freezes_the_bc_policy(minari_module_root, tmp_path):
    """`agent=bc-ppo-retain`: π₀ is the policy right after BC pretraining; every PPO minibatch adds the KL."""
    from robotrl.experiment import build_trainer

    over = ["agent=bc-ppo-retain", *MAZE, "agent.onpolicy.pretrain_steps=100", "agent.onpolicy.iterations=1",
            "agent.onpolicy.steps_per_iter=40", "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=1",
            "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2", "agent.model.batch_size=40",
            "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.retention.batch_size=32"]
    trainer = build_trainer(_compose(over), tmp_path / "run")
    agent = trainer.agent
    snap = {}
    start = agent.start_online
    agent.start_online = lambda: (snap.update(copy.deepcopy(agent.policy.state_dict())), start())[1]
    metrics = _recording(agent, "update_rollout")
    trainer.fit()
    for k, v in agent.retention.reference.state_dict().items():
        torch.testing.assert_close(v, snap[k])
    assert len(metrics) == 1 and "retention_kl" in metrics[0] and metrics[0]["retention_kl_w"] == 1.0
    assert agent.retention.steps == 1


# ---------------------------------------------------------------------- the DPPO hook
def test_dppo_retention_is_the_reverse_step_kl_to_the_frozen_denoiser():
    from robotrl.agents.diffusion.sampling import step_mean_std
    from robotrl.agents.dppo import DPPOAgent

    def dppo(retention):
        return DPPOAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8),
                         action_scaler=ActionScaler(-np.ones(2), np.ones(2)), action_horizon=4, act_steps=2,
                         denoising_steps=10, denoiser_kwargs={"hidden": [32, 32]}, ft_denoising_steps=4,
                         critic_hidden=[32], batch_size=64, n_epochs=1, seed=0, retention=retention)

    with pytest.raises(ConfigError, match="kl_states=online"):
        dppo({"bc": {"weight": 1.0}})
    agent = dppo({"kl": {"weight": 3.0}})
    agent.start_online()
    frozen = copy.deepcopy(agent.policy.denoiser_ft)
    with torch.no_grad():
        for p in agent.policy.denoiser_ft.parameters():
            p.add_(0.05 * torch.randn_like(p))
    cond, x_prev, i = torch.randn(6, 1, 8), torch.randn(6, 4, 2), torch.tensor([0, 1, 2, 3, 0, 3])
    loss, info = agent._retention_term(cond, x_prev, i)
    p = agent.policy
    m, s = step_mean_std(p.schedule, p.denoiser_ft, x_prev, agent.ft_k[i], agent.ft_k_prev[i], cond, agent.sampler, 1.0)
    m0, _ = step_mean_std(p.schedule, frozen, x_prev, agent.ft_k[i], agent.ft_k_prev[i], cond, agent.sampler, 1.0)
    s = s.clamp(min=agent.min_logprob_std).expand_as(m)
    want = torch.distributions.kl_divergence(torch.distributions.Normal(m0, s), torch.distributions.Normal(m, s))
    want = want.flatten(1).sum(1).mean()
    assert float(want) > 1e-4
    assert float(loss) == pytest.approx(3.0 * float(want), rel=1e-4)
    state = agent.state_dict()
    resumed = dppo({"kl": {"weight": 3.0}})
    resumed.load_state_dict(state)
    for k, v in resumed.retention.reference.state_dict().items():
        torch.testing.assert_close(v, frozen.state_dict()[k])
    # one PPO iteration on a rollout the agent sampled: the term is in every minibatch's loss and logged
    from robotrl.onpolicy import Rollout

    T, N = 3, 4
    obs = np.random.default_rng(0).standard_normal((T + 1, N, 1, 8)).astype(np.float32)
    extras = [agent.rollout_act(obs[t])[1] for t in range(T)]
    flags = np.zeros((T, N), bool)
    ro = Rollout(obs[:T], obs[1:], np.ones((T, N)), np.ones((T, N), np.float32), flags, flags, ~flags,
                 {k: torch.stack([e[k] for e in extras]) for k in extras[0]}, T * N)
    metrics = agent.update_rollout(ro, 0)
    assert metrics["retention_kl"] > 0 and metrics["retention_kl_w"] == 3.0 and agent.retention.steps == 1
