"""Residual agents against their references: ResFiT's noise on the SCALED residual, its target actor and
observation-std floor, its defaults (agent and composed experiment), and ResiP's composed defaults.

ResFiT (amazon-science/residual-offpolicy-rl): ``Actor.forward`` returns
``TruncatedNormal(action_scale · tanh(μ), std)`` with ``std`` "already in environment action
space", ``act`` samples it unclipped, the critic target samples the TARGET actor's distribution
with ``clip = stddev_clip`` (0.3), σ = 0.05; the state std is floored at ``min_state_std`` 0.1.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.agents.bc import BCPolicy
from robotrl.agents.residual import ResidualOffPolicyAgent
from robotrl.data import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer

DO, DA = 6, 3
SCALER = ActionScaler(-2 * np.ones(DA), 2 * np.ones(DA))  # raw bounds ±2: normalised = raw / 2


def _base() -> BCPolicy:
    """A deterministic base whose actions stay well inside the bounds (no clipping in the checks)."""
    torch.manual_seed(0)
    pol = BCPolicy(DO, DA, hidden=[8])
    with torch.no_grad():
        pol.actor.net.net[-1].weight.mul_(0.05)
        pol.actor.net.net[-1].bias.zero_()
    return pol.eval()


def _agent(**kw) -> ResidualOffPolicyAgent:
    args = dict(obs_normalizer=ObservationNormalizer(np.zeros(DO), np.ones(DO), clip=3.0), action_scaler=SCALER,
                base=_base(), hidden=[16], critic_hidden=[16], num_critics=4, residual_scale=0.1, base_noise_steps=0,
                critic_warmup_updates=0, seed=0)
    return ResidualOffPolicyAgent(DO, DA, **{**args, **kw})


def _obs(n: int) -> torch.Tensor:
    return torch.randn(1, DO, generator=torch.Generator().manual_seed(1)).expand(n, DO).contiguous()


def test_exploration_noise_std_is_sigma_in_normalised_action_units_not_alpha_sigma():
    agent = _agent(explore_std=0.05)
    obs = _obs(4000)
    base_n = SCALER.normalize(agent.policy.base(obs))
    assert base_n.abs().max() < 0.5  # no clipping at the bounds
    a_n = SCALER.normalize(torch.as_tensor(agent.explore(obs.numpy())))
    dev = a_n - base_n  # zero-initialised residual: all of it is exploration noise
    assert dev.mean().abs() < 0.005
    # ResFiT: σ on α·r in env action units (0.05); noise on r before scaling gave α·σ = 0.005
    assert 0.045 < float(dev.std()) < 0.055, float(dev.std())
    # the scale does not change the executed noise
    agent2 = _agent(explore_std=0.05, residual_scale=0.5)
    dev2 = SCALER.normalize(torch.as_tensor(agent2.explore(obs.numpy()))) - base_n
    assert 0.045 < float(dev2.std()) < 0.055


def _batch(obs: torch.Tensor, agent) -> Batch:
    n = obs.shape[0]
    actions = agent.policy.base(obs)
    return Batch(observations=obs, actions=actions, rewards=torch.zeros(n), next_observations=obs,
                 terminated=torch.zeros(n), truncated=torch.zeros(n), discounts=torch.full((n,), 0.99 ** 3))


def _target_actions(agent, batch) -> torch.Tensor:
    seen = []
    h = agent.critic_target.register_forward_hook(lambda m, args, out: seen.append(args[1].detach().clone()))
    agent.update(batch, 0)
    h.remove()
    assert len(seen) == 1
    return seen[0]


def test_target_action_uses_the_target_actor_and_smoothing_noise_on_the_scaled_residual():
    # the target actor, not the current one, gives a' (no noise here)
    agent = _agent(target_noise=0.0, actor_delay=10**6)
    with torch.no_grad():
        agent.policy.residual.net[-1].bias.fill_(2.0)      # current actor: r = tanh(2)
        agent.actor_target.net[-1].bias.fill_(-0.5)        # target actor: r' = tanh(-0.5)
    obs = _obs(64)
    base_n = SCALER.normalize(agent.policy.base(obs))
    a2 = _target_actions(agent, _batch(obs, agent))
    torch.testing.assert_close(a2, base_n + 0.1 * torch.tanh(torch.tensor(-0.5)), atol=1e-5, rtol=0)
    # smoothing noise: std σ in normalised action units on α·r' (not α·σ), clipped at ±target_noise_clip
    agent = _agent(target_noise=0.05, target_noise_clip=0.3, actor_delay=10**6)
    obs = _obs(4000)
    base_n = SCALER.normalize(agent.policy.base(obs))
    dev = _target_actions(agent, _batch(obs, agent)) - base_n
    assert 0.045 < float(dev.std()) < 0.055, float(dev.std())
    agent = _agent(target_noise=1.0, target_noise_clip=0.3, actor_delay=10**6)
    dev = _target_actions(agent, _batch(obs, agent)) - base_n
    assert float(dev.abs().max()) <= 0.3 + 1e-5 and float(dev.abs().max()) > 0.29


def test_target_actor_follows_the_actor_by_polyak_after_each_actor_step():
    agent = _agent(actor_delay=1, tau=0.5, actor_lr=1e-2)
    before = [p.detach().clone() for p in agent.actor_target.parameters()]
    agent.update(_batch(_obs(32) + torch.randn(32, DO), agent), 0)
    cur = list(agent.policy.residual.parameters())
    moved = False
    for b, t, c in zip(before, agent.actor_target.parameters(), cur):
        torch.testing.assert_close(t, b + 0.5 * (c - b))
        moved |= not torch.equal(t, b)
    assert moved
    # checkpoints carry it
    state = agent.state_dict()
    other = _agent()
    other.load_state_dict(state)
    for t, o in zip(agent.actor_target.parameters(), other.actor_target.parameters()):
        torch.testing.assert_close(t, o)


def test_observation_std_is_floored_before_normalising():
    std = np.array([1.0, 1.7e-4, 0.5, 0.02, 1.0, 1.0])  # a Fetch finger dimension barely moves in 20 demos
    agent = _agent(obs_normalizer=ObservationNormalizer(np.zeros(DO), std, clip=3.0))
    np.testing.assert_allclose(agent.policy.obs_normalizer.std.numpy(), np.maximum(std, 0.1), rtol=1e-6)
    o = torch.zeros(1, DO)
    o[0, 1] = 7 * 1.7e-4  # |z| = 7 under the raw std: clamped at 3 without the floor
    assert float(agent.policy.obs_normalizer(o)[0, 1]) == pytest.approx(7 * 1.7e-4 / 0.1, rel=1e-5)
    # the floor can be switched off; the deployable policy keeps the floored statistics
    raw = _agent(obs_normalizer=ObservationNormalizer(np.zeros(DO), std, clip=3.0), obs_std_floor=0.0)
    assert float(raw.policy.obs_normalizer.std[1]) == pytest.approx(1.7e-4)
    assert float(agent.policy.state_dict()["obs_normalizer.std"][1]) == pytest.approx(0.1)


def test_offpolicy_defaults_follow_resfit():
    a = ResidualOffPolicyAgent(DO, DA, obs_normalizer=ObservationNormalizer.identity(DO), action_scaler=SCALER)
    assert (a.explore_std, a.target_noise, a.target_noise_clip) == (0.05, 0.05, 0.3)
    assert a.actor_delay == 4 and a.critic.n == 10 and a.target_subset == 2 and a.tau == 0.005
    assert a.obs_std_floor == 0.1 and a.policy.residual_scale == 0.1 and a.actor == "td3"
    assert a.critic.net.layer_norm


def _compose(overrides):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_fetch_offpolicy_experiment_composes_resfit_schedule():
    cfg = _compose(["experiment=residual-offpolicy", "env=fetch-push", "dataset=fetch-push-noisy-20ep"])
    m, t = cfg.agent.model, cfg.trainer
    assert (t.utd, t.n_step, t.num_envs, t.batch_size, t.offline_ratio) == (4, 3, 1, 256, 0.5)
    assert (m.explore_std, m.target_noise, m.target_noise_clip, m.actor_delay, m.num_critics) == (0.05, 0.05, 0.3, 4, 10)
    assert m.obs_std_floor == 0.1 and m.critic_layer_norm
    assert cfg.agent.reward_bias == 1.0  # Fetch's sparse −1/0 reward becomes ResFiT's 0/1 success reward
    assert m.base_noise_steps == t.online_warmup_steps


def test_fetch_residual_ppo_experiment_composes_resip_defaults_scaled_to_the_cpu():
    cfg = _compose(["experiment=residual-ppo", "env=fetch-push", "dataset=fetch-push-noisy-20ep"])
    o, m = cfg.agent.onpolicy, cfg.agent.model
    # large batches per update: was 16-32 envs × 50 steps (800-1600 samples) over 10 epochs
    assert o.num_envs * o.steps_per_iter >= 6400 and m.batch_size >= 3200 and m.n_epochs == 50
    assert m.gamma == pytest.approx(1 - 1 / 50)  # fitted to Fetch's 50-step horizon, not 0.999
    assert (m.clip, m.gae_lambda, m.target_kl, m.max_grad_norm, m.vf_coef) == (0.2, 0.95, 0.1, 1.0, 1.0)
    assert (m.residual_scale, m.init_log_std, m.learn_log_std, m.obs_clip) == (0.1, -1.0, False, 3.0)
    from hydra.utils import instantiate

    agent = instantiate(m, obs_dim=DO, action_dim=DA, obs_normalizer=ObservationNormalizer.identity(DO),
                        action_scaler=SCALER, base=_base(), _convert_="all")
    obs = _obs(8)
    assert torch.equal(agent.policy(obs), agent.policy.base(obs))  # zero-initialised output: exactly the base
    assert not agent.policy.log_std.requires_grad and float(agent.policy.log_std.mean()) == -1.0


def test_success_termination_ends_training_episodes_at_success_only():
    from robotrl.agents.residual.room import ROOM_ENV as ENV
    from robotrl.agents.residual.room import ROOM_KW as KW
    from robotrl.agents.residual.room import biased_pd_base

    from robotrl.envs import make_env
    from robotrl.policy import act

    base = biased_pd_base(bias=0.0)  # reaches the goal (success 1.0 over 50 episodes)
    for wrapped in (True, False):
        envs = make_env(ENV, num_envs=2, seed=0, vectorization="sync", max_episode_steps=100, env_kwargs=KW,
                        terminate_on_success=wrapped)
        obs, _ = envs.reset(seed=0)
        first_success, first_term = None, None
        for t in range(100):
            obs, r, term, trunc, info = envs.step(act(base, obs))
            if first_success is None and info["success"][0]:
                first_success = t
            if first_term is None and term[0]:
                first_term = t
            if first_term is not None:
                break
        envs.close()
        assert first_success is not None and first_success < 99
        assert first_term == (first_success if wrapped else None)


def _offline(rewards, success):
    """One 5-step episode of a 2-d observation, 1-d action task, as :class:`OfflineData` (success per step or None)."""
    import gymnasium as gym

    from robotrl.data.dataset import OfflineData

    n = len(rewards)
    obs = np.arange(n, dtype=np.float32)[:, None].repeat(2, 1)
    return OfflineData(observations=obs, actions=np.zeros((n, 1), np.float32), rewards=np.asarray(rewards, np.float32),
                       next_observations=obs + 1, terminated=np.zeros(n, bool), truncated=np.arange(n) == n - 1,
                       episode_starts=np.array([0]), episode_ends=np.array([n]),
                       observation_space=gym.spaces.Box(-np.inf, np.inf, (2,)), action_space=gym.spaces.Box(-1, 1, (1,)),
                       success=None if success is None else np.asarray(success, bool), metadata={"dataset_id": "t/d-v0"})


def test_demos_that_go_on_after_success_end_there_in_the_terminating_mdp():
    """With ``terminate_on_success`` the demos' successful transitions are terminal, so n-step sums stop at the
    success (ResFiT's demos end there); without it, or for a task that never succeeds, the data is unchanged; a task
    that reports success with data that records none is refused (the MDPs would differ)."""
    from robotrl.data import ReplayBuffer
    from robotrl.errors import ConfigError
    from robotrl.task_mdp import terminate_data_at_success

    data = _offline([0.0, 0.0, 1.0, 1.0, 1.0], [False, False, True, True, True])  # reaches the goal at step 2, stays
    on, off = {"terminate_on_success": True}, {"terminate_on_success": False}
    assert terminate_data_at_success(data, off, True) is data
    cut = terminate_data_at_success(data, on, True)
    assert cut.terminated.tolist() == [False, False, True, True, True] and not data.terminated.any()
    for d, term, ret in ((data, False, 0.9 + 0.81), (cut, True, 0.9)):
        b = ReplayBuffer.from_offline(d, gamma=0.9, seed=0).sample(1, n_step=3, indices=np.array([1]))
        assert bool(b.terminated[0]) == term and float(b.rewards[0]) == pytest.approx(ret)
    unknown = _offline([0.0] * 5, None)
    assert terminate_data_at_success(unknown, on, False) is unknown  # locomotion: nothing ever succeeds
    with pytest.raises(ConfigError, match="train_terminate_on_success=false"):
        terminate_data_at_success(unknown, on, True)


def test_residual_experiments_end_training_episodes_and_demos_at_success(tmp_path, monkeypatch):
    """`robotrl train experiment=residual-offpolicy env=fetch-push` (ResFiT) trains in envs that end at success and on
    demos whose successful transitions are terminal; its evaluation env keeps Fetch's 50-step episodes;
    ``env.train_terminate_on_success=false`` keeps the task's episodes for both."""
    from robotrl.envs import SuccessTermination
    from robotrl.experiment import build_trainer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    data = ["dataset=fetch-push-noisy-20ep", "dataset.id=robotrl/fetch-push/noisy-3ep-term-test-v0",
            "dataset.recipe_args.num_episodes=3", "+dataset.recipe_args.ref_episodes=1", "trainer.progress=false"]
    build_trainer(_compose(["experiment=residual-base", "env=fetch-push", *data, "trainer.offline_steps=1", "trainer.batch_size=32",
                            "trainer.eval_episodes=1"]), tmp_path / "base").fit()
    assert _compose(["experiment=residual-ppo", "env=fetch-push"]).env.train_terminate_on_success
    for flag in (True, False):
        cfg = _compose(["experiment=residual-offpolicy", "env=fetch-push", *data, f"agent.model.base={tmp_path / 'base'}",
                        "trainer.online_steps=1", *([] if flag else ["env.train_terminate_on_success=false"])])
        tr = build_trainer(cfg, tmp_path / f"run{flag}")
        n = len(tr.offline)
        succ = tr.offline.rewards[:n] == 1.0  # Fetch's 0 at success, shifted to ResFiT's 0/1 by reward_bias 1
        assert succ.any() and (tr.offline.terminated[:n] == (succ if flag else False)).all()
        envs, ev = tr.make_train_envs(), tr.make_eval_env()
        assert any(isinstance(w, SuccessTermination) for w in _wrappers(envs.envs[0])) == flag
        assert not any(isinstance(w, SuccessTermination) for w in _wrappers(ev))
        envs.close()
        ev.close()


def _wrappers(env):
    out = []
    while hasattr(env, "env"):
        out.append(env)
        env = env.env
    return out


@pytest.mark.parametrize("floor", ["default", "null"])
def test_fetch_datasets_floor_the_bc_base_observation_std(tmp_path, monkeypatch, floor):
    """The Fetch dataset configs' ``obs_std_floor`` (0.1) reaches the normaliser `robotrl train` builds from real
    scripted demos, where the finger width barely varies; ``dataset.obs_std_floor=null`` keeps the raw statistics."""
    from robotrl.experiment import build_trainer

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    over = ["experiment=residual-base", "env=fetch-push", "dataset=fetch-push-noisy-20ep",
            "dataset.id=robotrl/fetch-push/noisy-3ep-floor-test-v0", "dataset.recipe_args.num_episodes=3",
            "+dataset.recipe_args.ref_episodes=1", "trainer.offline_steps=1", "trainer.progress=false"]
    cfg = _compose(over + ([] if floor == "default" else ["dataset.obs_std_floor=null"]))
    std = build_trainer(cfg, tmp_path / "run").agent.policy.obs_normalizer.std.cpu().numpy()
    if floor == "default":
        assert std.min() >= 0.1 - 1e-7
    else:
        assert std.min() < 0.01  # a finger dimension: the statistics the floor protects against
