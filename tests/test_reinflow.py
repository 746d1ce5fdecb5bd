"""ReinFlow: the noisy Euler chain's exact log-likelihood against torch.distributions, the bounded
noise std and its schedule, the warm start from a flow checkpoint, the PPO update's direction,
`experiment=reinflow` through build_trainer with `robotrl eval`'s entry point on its checkpoint, and a short
fine-tuning run that raises a deliberately weakened flow policy on DPPO's fine-tuning task.

Learning setting (reused from tests/test_dppo_finetune.py, sized down for a test budget):
PointMaze UMaze with a fixed reset cell and goal two cells apart, dense ``exp(-distance)``
reward, 50-step episodes; the flow policy is pretrained on noisy-planner demos (4,000 steps)
whose actions carry a +0.5 bias on both axes. Measured while designing (1 torch thread,
loaded 2-core machine): biased flow 10.3 / 9.7 on the two eval seed sets (20 episodes each) → 16.1 / 14.7
after 10 iterations (10,000 env steps, 2 of them critic-only); 8 iterations gave only +1.8 / +1.7.
"""

from __future__ import annotations

import dataclasses
import json
import sys

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from robotrl.agents.diffusion import DiffusionAgent
from robotrl.agents.flow import FlowAgent, FlowPolicy
from robotrl.agents.ppo.loss import normalize_advantages
from robotrl.agents.reinflow import ReinFlowAgent, ReinFlowPolicy
from robotrl.agents.reinflow.loss import bounded_std, chain_entropy, chain_log_prob, decayed_max_std, warmup_cosine_lr
from robotrl.checkpoint import save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env
from robotrl.errors import CheckpointError
from robotrl.onpolicy import RolloutCollector
from robotrl.policy import load_policy, policy_state

FLOW = dict(obs_horizon=1, action_horizon=4, act_steps=4, denoiser="mlp", denoiser_kwargs={"hidden": [32, 32], "time_dim": 8})


@pytest.fixture(scope="module")
def one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


def _norms(obs_dim: int = 8, action_dim: int = 2):
    return dict(obs_normalizer=ObservationNormalizer.identity(obs_dim),
                action_scaler=ActionScaler(-np.ones(action_dim), np.ones(action_dim)))


def _agent(obs_dim: int = 8, action_dim: int = 2, **kw) -> ReinFlowAgent:
    args = dict(flow_steps=3, critic_hidden=[16], noise_hidden=[16], batch_size=64, repeat_samples=1, n_epochs=1,
                seed=0)
    args.update(kw)
    return ReinFlowAgent(obs_dim, action_dim, **_norms(obs_dim, action_dim), **{**FLOW, **args})


def test_bounded_std_spans_the_bounds_and_the_schedule_decays_the_upper_one():
    raw = torch.tensor([-50.0, 0.0, 50.0])
    s = bounded_std(raw, 0.1, 0.24)
    assert s[0].item() == pytest.approx(0.1) and s[2].item() == pytest.approx(0.24)
    assert s[1].item() == pytest.approx((0.1 * 0.24) ** 0.5)  # midpoint in log-variance
    assert decayed_max_std(0, 100, 0.1, 0.24) == pytest.approx(0.24)
    assert decayed_max_std(35, 100, 0.1, 0.24) == pytest.approx(0.24)
    assert decayed_max_std(100, 100, 0.1, 0.24) == pytest.approx(0.1 * 0.3 + 0.24 * 0.7)
    assert 0.1 * 0.3 + 0.24 * 0.7 < decayed_max_std(60, 100, 0.1, 0.24) < 0.24
    assert decayed_max_std(500, None, 0.1, 0.24) == 0.24
    with pytest.raises(ValueError, match="std_min <= std_max"):
        ReinFlowPolicy(8, 2, std_min=0.3, std_max=0.2, **FLOW)


def test_chain_log_prob_is_the_gaussian_likelihood_of_the_sampled_chain(one_thread):
    """The recorded chain follows x_{k+1} = μ_k + σ_k ε exactly (no noise clip), its log-prob equals
    torch.distributions.Normal over the same means/stds (computed here step by step from the nets),
    and the entropy equals Normal's."""
    torch.manual_seed(0)
    pol = ReinFlowPolicy(8, 2, flow_steps=3, noise_hidden=[16], std_min=0.05, std_max=0.5, **FLOW)
    cond = torch.randn(6, 1, 8)
    chain = pol.sample_noisy_chain(cond, eps_clip=None, generator=torch.Generator().manual_seed(7))
    assert chain.shape == (6, 4, 4, 2)
    gen = torch.Generator().manual_seed(7)
    x = torch.randn((6, 4, 2), generator=gen)
    torch.testing.assert_close(chain[:, 0], x)
    direct, ent, means, stds = Normal(0.0, 1.0).log_prob(x).sum((1, 2)), Normal(0.0, 1.0).entropy() * 8, [], []
    with torch.no_grad():
        for k in range(3):
            t = torch.full((6,), k / 3)
            mean = (chain[:, k] + pol.velocity(chain[:, k], t, cond) / 3).clamp(-1, 1)
            std = pol.noise_net(chain[:, k], t, cond)
            assert (std >= 0.05 - 1e-6).all() and (std <= 0.5 + 1e-6).all()
            eps = torch.randn(mean.shape, generator=gen)
            torch.testing.assert_close(chain[:, k + 1], mean + std * eps)
            direct = direct + Normal(mean, std).log_prob(chain[:, k + 1]).sum((1, 2))
            ent = ent + Normal(mean, std).entropy().sum((1, 2))
            means.append(mean)
            stds.append(std)
        m, s = pol.transitions(cond, chain)
    torch.testing.assert_close(m, torch.stack(means, 1))
    torch.testing.assert_close(s, torch.stack(stds, 1))
    torch.testing.assert_close(chain_log_prob(chain, m, s, normalize=False), direct)
    torch.testing.assert_close(chain_log_prob(chain, m, s), direct / (4 * 4 * 2))
    without_x0 = direct - Normal(0.0, 1.0).log_prob(x).sum((1, 2))
    torch.testing.assert_close(chain_log_prob(chain, m, s, include_initial=False, normalize=False), without_x0)
    torch.testing.assert_close(chain_entropy(s, normalize=False), ent)
    # a different chain scores differently (the check can fail)
    assert not torch.allclose(chain_log_prob(chain.flip(0), m, s), chain_log_prob(chain, m, s))


@pytest.mark.parametrize("early_std", [None, 0.0])
def test_noise_on_the_last_steps_only_keeps_the_likelihood_exact(early_std, one_thread):
    """``noise_steps = K' = 1`` of K = 3: the first two steps use a fixed std (σ_min, the reference's
    ``ft_denoising_steps``) or none (``early_std = 0``: exact Euler steps, left out of the score); the chain
    follows that, and its log-prob is the Gaussian likelihood of exactly the random factors."""
    torch.manual_seed(0)
    pol = ReinFlowPolicy(8, 2, flow_steps=3, noise_hidden=[16], std_min=0.05, std_max=0.5, noise_steps=1,
                         early_std=early_std, **FLOW)
    cond = torch.randn(6, 1, 8)
    chain = pol.sample_noisy_chain(cond, eps_clip=None, generator=torch.Generator().manual_seed(7))
    gen = torch.Generator().manual_seed(7)
    x = torch.randn((6, 4, 2), generator=gen)
    direct, n = Normal(0.0, 1.0).log_prob(x).sum((1, 2)), 1
    with torch.no_grad():
        for k in range(3):
            t = torch.full((6,), k / 3)
            mean = (chain[:, k] + pol.velocity(chain[:, k], t, cond) / 3).clamp(-1, 1)
            std = pol.noise_net(chain[:, k], t, cond) if k == 2 else torch.full_like(mean, early_std or 0.05)
            eps = torch.randn(mean.shape, generator=gen)
            if k < 2 and early_std == 0:
                torch.testing.assert_close(chain[:, k + 1], mean)  # deterministic Euler step
                continue
            torch.testing.assert_close(chain[:, k + 1], mean + std * eps)
            direct, n = direct + Normal(mean, std).log_prob(chain[:, k + 1]).sum((1, 2)), n + 1
        m, s = pol.transitions(cond, chain)
    assert m.shape == (6, 1 if early_std == 0 else 3, 4, 2)
    torch.testing.assert_close(s[:, -1], pol.noise_net(chain[:, 2], torch.full((6,), 2 / 3), cond).detach())
    torch.testing.assert_close(chain_log_prob(chain, m, s, normalize=False), direct)
    torch.testing.assert_close(chain_log_prob(chain, m, s), direct / (n * 4 * 2))
    for bad in ({"noise_steps": 0}, {"noise_steps": 4}, {"early_std": -0.1}):
        with pytest.raises(ValueError, match="noise_steps|early_std"):
            ReinFlowPolicy(8, 2, flow_steps=3, **{"noise_steps": 1, **bad}, **FLOW)


def test_warm_start_converts_a_flow_checkpoint_and_evaluation_is_the_noise_free_flow(tmp_path, one_thread):
    torch.manual_seed(0)
    flow = FlowAgent(8, 2, **_norms(), flow_steps=3, **FLOW)
    for p in flow.policy.velocity.parameters():
        p.data.normal_()
    flow.policy.obs_normalizer.mean.fill_(0.5)
    path = tmp_path / "flow.pt"
    save_checkpoint(path, {"policy": policy_state(flow.policy)})
    agent = _agent()
    agent.load_pretrained(str(path))
    for a, b, c in zip(agent.policy.velocity.parameters(), flow.policy.velocity.parameters(),
                       agent.ref_velocity.parameters()):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(c, b)
    torch.testing.assert_close(agent.policy.obs_normalizer.mean, flow.policy.obs_normalizer.mean)
    obs = torch.randn(5, 1, 8)
    torch.manual_seed(3)
    a1 = agent.policy.predict_chunk(obs)
    torch.manual_seed(3)
    torch.testing.assert_close(a1, flow.policy.predict_chunk(obs))  # deterministic flow: the noise net is off
    # mismatching flow networks and other policy kinds are refused
    with pytest.raises(CheckpointError, match="denoiser_kwargs"):
        _agent(denoiser_kwargs={"hidden": [64, 64], "time_dim": 8}).load_pretrained(str(path))
    diff = DiffusionAgent(8, 2, **_norms(), denoising_steps=5, **FLOW)
    save_checkpoint(tmp_path / "diff.pt", {"policy": policy_state(diff.policy)})
    with pytest.raises(CheckpointError, match="flow-policy checkpoint"):
        agent.load_pretrained(str(tmp_path / "diff.pt"))
    # resume: a ReinFlow checkpoint loads whole (noise net and optimizer included)
    agent.policy.noise_net.set_bounds(0.1, 0.2)
    save_checkpoint(tmp_path / "rf.pt", {"policy": policy_state(agent.policy), "agent": agent.state_dict()})
    again = _agent()
    again.load_pretrained(str(tmp_path / "rf.pt"))
    assert float(again.policy.noise_net.std_max) == pytest.approx(0.2)
    for a, b in zip(again.policy.parameters(), agent.policy.parameters()):
        torch.testing.assert_close(a, b)


def _rollout(agent, n_envs: int = 4, T: int = 8):
    envs = make_env("pointmaze-umaze", num_envs=n_envs, seed=0, vectorization="sync", action_chunk=agent.policy.Te,
                    max_episode_steps=40)
    try:
        return RolloutCollector(envs, 1, reward_scaling=False, seed=0).collect(agent, T)
    finally:
        envs.close()


def test_learning_rates_follow_the_reference_cosine_schedule_with_warmup_and_restarts():
    """ReinFlow's CosineAnnealingWarmupRestarts as its configs use it (cycle 100, warmup 10): the first iteration at
    min_lr, max_lr after the linear warmup, half-way down the cosine at 55, min_lr again at the restart (100); the
    actor's schedule counts from the end of the critic warm-up."""
    lo, hi = 2e-5, 4.5e-5
    got = [warmup_cosine_lr(i, hi, lo) for i in (0, 5, 10, 55, 100, 105)]
    assert got == pytest.approx([lo, (lo + hi) / 2, hi, (lo + hi) / 2, lo, (lo + hi) / 2], rel=1e-9)
    assert warmup_cosine_lr(99, hi, lo) == pytest.approx(lo, rel=1e-3) and warmup_cosine_lr(7, hi, None) == hi
    with pytest.raises(ValueError, match="warmup < cycle"):
        warmup_cosine_lr(0, hi, lo, cycle=10, warmup=10)
    agent = _agent(actor_lr=hi, actor_lr_min=lo, critic_lr=6.5e-4, critic_lr_min=3e-4, critic_warmup_iters=2)
    rates = agent.set_learning_rates(7)
    assert rates["critic_lr"] == pytest.approx(3e-4 + 3.5e-4 * 0.7) and rates["actor_lr"] == pytest.approx(lo + 2.5e-5 / 2)
    assert agent.actor_opt.param_groups[0]["lr"] == rates["actor_lr"]
    assert agent.critic_opt.param_groups[0]["lr"] == rates["critic_lr"]


@pytest.mark.parametrize("clamped", [True, False])
def test_the_final_sample_is_stored_clamped_to_the_action_box_as_the_reference_scores_it(one_thread, clamped):
    """With wide noise many final samples leave the box: stored (and scored) clamped by default, unclamped with
    ``score_clamped_final=False``; the executed actions are the clamped samples either way, and the share of
    entries outside the box is reported."""
    torch.manual_seed(0)
    agent = _agent(std_min=0.6, std_max=0.8, score_clamped_final=clamped)
    obs = torch.randn(64, 1, 8).numpy()
    actions, extras = agent.rollout_act(obs)
    final = extras["chains"][:, -1]
    outside = float(extras["saturated"].mean())
    assert outside > 0.1
    assert (final.abs().max() <= 1.0) == clamped
    np.testing.assert_allclose(actions, final.clamp(-1, 1).numpy(), atol=1e-6)  # identity action scaler


def test_straight_through_clip_scores_the_same_chain_and_gives_clamped_entries_a_gradient(one_thread):
    """With the velocity net's output bias pushed far out, every Euler mean sits at the clamp. The reference clamp
    gives those entries no gradient, so the chain's log-prob has none through the velocity net;
    ``straight_through_clip`` keeps the same log-prob values and passes the unclamped mean's gradient."""
    grads, values = {}, {}
    for st in (False, True):
        torch.manual_seed(0)  # the same networks and condition for both
        agent = _agent(straight_through_clip=st)
        last = [m for m in agent.policy.velocity.modules() if isinstance(m, torch.nn.Linear)][-1]
        with torch.no_grad():
            last.bias.fill_(40.0)  # v·Δt >> 1: every mean clamped at +1
        cond = torch.randn(16, 1, 8)
        chain = agent.policy.sample_noisy_chain(cond, generator=torch.Generator().manual_seed(1))
        chain[:, -1] = chain[:, -1].clamp(-1.0, 1.0)
        logp = agent.log_prob(cond, chain)[0]
        agent.policy.velocity.zero_grad()
        logp.sum().backward()
        values[st] = logp.detach()
        grads[st] = float(last.bias.grad.abs().sum())
    torch.testing.assert_close(values[True], values[False])
    assert grads[False] == 0.0 and grads[True] > 0.0


def test_ppo_update_starts_at_ratio_one_and_moves_log_probs_with_the_advantage_sign(one_thread):
    """First minibatch: ratio exactly 1 (the stored chains are scored by the policy that sampled them).
    One small actor step (clip off, no entropy) with advantage +1 on half the chains and -1 on the other
    half raises the first half's log-probs and lowers the second's."""
    torch.manual_seed(0)
    agent = _agent(clip=10.0, ent_coef=0.0, actor_lr=1e-4, logprob_min=-100.0, logprob_max=100.0)
    ro = _rollout(agent)
    assert ro.extras["chains"].shape == (8, 4, 4, 4, 2)
    d = agent._prepare(ro)
    S = d["cond"].shape[0]
    sign = torch.where(torch.arange(S) % 2 == 0, 1.0, -1.0)
    d["adv"] = sign.clone()
    assert torch.equal(normalize_advantages(d["adv"]).sign(), sign)
    out = agent._minibatch(d, torch.arange(S), train_actor=True)
    assert float(out["ratio"]) == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        new = agent.log_prob(d["cond"], d["chains"])[0]
    delta = new - d["logp"]
    assert float(delta[sign > 0].mean()) > 0 > float(delta[sign < 0].mean())


@pytest.mark.parametrize("bc_coef", [0.0, 0.5])
def test_repeated_samples_run_once_through_the_networks_with_the_duplicated_batchs_loss_and_gradient(one_thread,
                                                                                                   bc_coef):
    """A minibatch of repeat_samples' copies (each step 1-3 times, in random order): the de-duplicated loss
    runs the networks on the distinct steps only, and its loss, metrics and gradients equal those of running
    every copy through the networks."""
    torch.manual_seed(0)
    agent = _agent(bc_coef=bc_coef, ent_coef=0.03)
    d = agent._prepare(_rollout(agent, n_envs=2, T=4))
    S = d["cond"].shape[0]
    d["adv"] = torch.randn(S)
    with torch.no_grad():  # move the policy off the one that sampled, so ratios, KL and W2 are not trivial
        for p in agent.policy.velocity.parameters():
            p.add_(0.01 * torch.randn_like(p))
    s = torch.cat([torch.arange(S), torch.arange(S)[::2], torch.arange(S)[::3]])[torch.randperm(S + (S + 1) // 2 + (S + 2) // 3)]
    params = [*agent.policy.parameters(), *agent.critic.parameters()]
    grads, outs, calls = [], [], []
    hook = agent.policy.velocity.register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))
    for dedup in (True, False):
        calls.clear()
        loss, out = agent.minibatch_loss(d, s, True, dedup=dedup)
        g = torch.autograd.grad(loss, [p for p in params if p.requires_grad], allow_unused=True)
        grads.append([torch.zeros(1) if x is None else x for x in g])
        outs.append({k: float(v) for k, v in out.items()} | {"loss": float(loss.detach()), "rows": calls[0]})
    hook.remove()
    K = agent.policy.K
    assert outs[0]["rows"] == S * K and outs[1]["rows"] == len(s) * K  # the velocity net saw each step once
    assert outs[0]["approx_kl"] > 0 and (bc_coef == 0 or outs[0]["bc_loss"] > 0)
    for k in outs[1]:
        if k != "rows":
            assert outs[0][k] == pytest.approx(outs[1][k], rel=1e-5, abs=1e-7), k
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_w2_regulariser_pulls_the_fine_tuned_flow_back_to_the_pretrained_one(one_thread):
    """bc_coef > 0: zero W2 loss while the fine-tuned velocity net equals the frozen reference; after a
    perturbation, steps with zero advantages (no policy-gradient signal) shrink it."""
    torch.manual_seed(0)
    agent = _agent(bc_coef=1.0, ent_coef=0.0, actor_lr=3e-3)
    d = agent._prepare(_rollout(agent, n_envs=2, T=4))
    S = d["cond"].shape[0]
    assert float(agent._minibatch(d, torch.arange(S), train_actor=True)["bc_loss"]) < 1e-10
    with torch.no_grad():
        for p in agent.policy.velocity.parameters():
            p.add_(0.1 * torch.randn_like(p))
    d["adv"] = torch.zeros(S)
    losses = [float(agent._minibatch(d, torch.arange(S), train_actor=True)["bc_loss"]) for _ in range(15)]
    assert losses[0] > 1e-4 and losses[-1] < 0.7 * losses[0], losses


@pytest.mark.slow
def test_experiment_reinflow_warm_starts_from_the_flow_path_and_robotrl_eval_runs_the_fine_tuned_flow(tmp_path):
    """`experiment=reinflow` composed and built by build_trainer, warm-started from a flow checkpoint;
    the run's checkpoint rebuilds a ReinFlowPolicy with the fine-tuned velocity net; `robotrl eval`'s
    entry point evaluates it (a real `robotrl eval` process: tests/test_flow.py)."""
    from hydra import compose, initialize_config_module

    from robotrl.experiment import build_trainer

    torch.manual_seed(0)
    flow = FlowAgent(8, 2, **_norms(), flow_steps=2,
                     **{**FLOW, "denoiser_kwargs": {"hidden": [32, 32], "time_dim": 8, "act": "mish"}})
    save_checkpoint(tmp_path / "flow.pt", {"policy": policy_state(flow.policy)})
    overrides = ["experiment=reinflow", "env=pointmaze-umaze", f"trainer.init_from={tmp_path / 'flow.pt'}",
                 "agent.model.denoiser_kwargs.hidden=[32,32]", "agent.model.denoiser_kwargs.time_dim=8",
                 "agent.model.flow_steps=2", "agent.model.critic_hidden=[16]", "agent.model.batch_size=16",
                 "agent.model.repeat_samples=2", "agent.model.actor_lr=1e-2", "agent.onpolicy.iterations=2",
                 "agent.onpolicy.steps_per_iter=6", "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=2",
                 "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2", "agent.onpolicy.checkpoint_every=2",
                 "trainer.progress=false", "env.max_episode_steps=30", "env.match_dataset=false",
                 "torch_threads=1", f"run_dir={tmp_path / 'run'}"]
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    assert cfg.agent.model.noise_decay_iters == 2 and cfg.trainer.init_from == str(tmp_path / "flow.pt")
    trainer = build_trainer(cfg, tmp_path / "run", overrides=overrides)
    summary = trainer.fit()
    assert summary["iterations"] == 2
    pol = load_policy(str(tmp_path / "run"))
    assert isinstance(pol, ReinFlowPolicy) and isinstance(pol, FlowPolicy) and pol.K == 2
    moved = [not torch.equal(a, b) for a, b in zip(pol.velocity.parameters(), flow.policy.velocity.parameters())]
    assert any(moved)
    for a, b in zip(pol.velocity.parameters(), trainer.agent.policy.velocity.parameters()):  # load_policy: on the CPU
        torch.testing.assert_close(a, b.cpu())
    assert float(pol.noise_net.std_max) < 0.24  # the learn_decay schedule reached the end of its 2 iterations
    # `robotrl eval` on the checkpoint (its Hydra entry point, in this process: a second interpreter costs ~10 s)
    from robotrl.cli import eval_main

    mp = pytest.MonkeyPatch()
    mp.setattr(sys, "argv", ["robotrl", f"checkpoint={tmp_path / 'run'}", "episodes=2", "num_envs=1",
                             f"output={tmp_path / 'eval.json'}"])
    try:
        eval_main()
    finally:
        mp.undo()
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"] == 2.0


# ---------------------------------------------------------------------- learning (DPPO's fine-tuning task)
EVAL_SEEDS = (0, 1000)
EVAL_EPISODES = 20


@pytest.fixture(scope="module")
def weakened_flow(tmp_path_factory, one_thread):
    """(dataset, path of a flow-BC checkpoint trained on +0.5-biased actions) on DPPO's test task."""
    import test_dppo_finetune as task
    from robotrl.collect import collect_pointmaze
    from robotrl.data import ReplayBuffer, load_dataset

    root = tmp_path_factory.mktemp("minari")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(root))
    try:
        path = collect_pointmaze("umaze", num_steps=4000, seed=0, dataset_id="robotrl/pointmaze/umaze-reinflow-test-v0",
                                 root=root, progress=False, ref_episodes=2,
                                 env_kwargs={"continuing_task": True, "reset_target": True})
        data = load_dataset(str(path))
    finally:
        mp.undo()
    biased = dataclasses.replace(data, actions=np.clip(data.actions + np.float32(task.BIAS), -1, 1).astype(np.float32))
    torch.manual_seed(0)
    agent = FlowAgent(data.obs_dim, data.action_dim,
                      obs_normalizer=ObservationNormalizer.from_data(data.observations, clip=10.0),
                      action_scaler=ActionScaler.from_space(data.action_space), lr=1e-3, ema_start=300, seed=0,
                      flow_steps=4, **{**FLOW, "denoiser_kwargs": {"hidden": [64, 64], "time_dim": 8}})
    buf = ReplayBuffer.from_offline(biased, seed=0)
    for u in range(600):
        agent.update(agent.sample_batch(buf, 128), u)
    ckpt = tmp_path_factory.mktemp("pretrained") / "flow.pt"
    save_checkpoint(ckpt, {"policy": policy_state(agent.policy)})
    return data, ckpt


def _eval_means(policy) -> list[float]:
    import test_dppo_finetune as task
    from robotrl.evaluation import evaluate
    from robotrl.policy import act

    out = []
    for s in EVAL_SEEDS:
        torch.manual_seed(s)
        res = evaluate(lambda o: act(policy, o), task._eval_env, EVAL_EPISODES, seed=s, num_envs=10,
                       reset_policy=policy.reset)
        out.append(res["return_mean"])
    return out


@pytest.mark.slow
def test_reinflow_fine_tuning_raises_return_of_weakened_flow_policy(weakened_flow, tmp_path):
    """Paired over the same evaluation seed sets (same resets, same start noise seeds), every set gains
    clearly; for a test budget the trust region is wider than the reference's (constant lr 1e-3, clip 0.1, no KL
    stop, wide log-prob clamp, 2 critic warm-up iterations)."""
    import test_dppo_finetune as task
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

    data, ckpt = weakened_flow
    torch.manual_seed(0)
    agent = ReinFlowAgent(data.obs_dim, data.action_dim,
                          obs_normalizer=ObservationNormalizer.from_data(data.observations, clip=10.0),
                          action_scaler=ActionScaler.from_space(data.action_space), flow_steps=4,
                          **{**FLOW, "denoiser_kwargs": {"hidden": [64, 64], "time_dim": 8}},
                          gamma=0.95, clip=0.1, actor_lr=1e-3, critic_lr=1e-3, actor_lr_min=None, critic_lr_min=None,
                          critic_hidden=[64, 64], n_epochs=5,
                          batch_size=500, repeat_samples=1, target_kl=None, critic_warmup_iters=2, ent_coef=0.0,
                          logprob_min=-10.0, logprob_max=10.0, seed=0)
    agent.load_pretrained(str(ckpt))
    before = _eval_means(agent.policy)
    assert max(before) < 11.8, f"the biased pretrained flow policy is not weakened: {before}"
    cfg = OnPolicyConfig(iterations=10, steps_per_iter=28, num_envs=10, eval_every=1000, eval_episodes=10,
                         eval_envs=10, checkpoint_every=1000, progress=False)
    summary = OnPolicyTrainer(agent, tmp_path / "run", cfg, make_train_envs=task._train_envs(10, 0),
                              make_eval_env=task._eval_env, seed=0).fit()
    assert summary["online_steps"] == 10 * 10 * 2 * task.HORIZON
    after = _eval_means(agent.policy)
    gains = [a - b for a, b in zip(after, before)]
    print(f"ReinFlow fine-tuning: return per eval seed set {before} -> {after} (gains {gains})")
    assert min(gains) > 0.1 * float(np.mean(before)), (before, after)


def test_per_step_ratio_scores_each_transition_like_dppo_and_moves_with_the_advantage_sign(one_thread):
    """``per_step_ratio``: one log-prob per scored Euler transition, the mean of its executed entries' Gaussian
    log-likelihoods (clamped to [-5, 2]); the first minibatch's ratios are exactly 1, and a small actor step with
    advantage +1 on half the env steps and -1 on the other half raises the first half's transitions' log-probs and
    lowers the second's."""
    torch.manual_seed(0)
    agent = _agent(per_step_ratio=True, clip=10.0, ent_coef=0.0, actor_lr=1e-4)
    ro = _rollout(agent)
    d = agent._prepare(ro)
    S = d["cond"].shape[0]
    K = agent.policy.K
    assert d["logp"].shape == (S, K)
    mean, std = agent.policy.transitions(d["cond"], d["chains"])
    direct = Normal(mean, std).log_prob(d["chains"][:, 1:]).clamp(-5.0, 2.0)[:, :, : agent.policy.Te].mean(dim=(-1, -2))
    torch.testing.assert_close(d["logp"], direct)
    sign = torch.where(torch.arange(S) % 2 == 0, 1.0, -1.0)
    d["adv"] = sign.clone()
    out = agent._minibatch(d, torch.arange(S), train_actor=True)
    assert float(out["ratio"]) == pytest.approx(1.0, abs=1e-6)
    with torch.no_grad():
        new = agent.log_prob(d["cond"], d["chains"])[0]
    delta = (new - d["logp"]).mean(dim=1)
    assert float(delta[sign > 0].mean()) > 0 > float(delta[sign < 0].mean())


def test_clip_schedule_over_transitions_clips_each_ratio_at_its_own_bound(one_thread):
    """``clip_base`` (with ``per_step_ratio``): transition ``i`` of ``K_s`` is clipped at DPPO's schedule
    ``clip_schedule(K_s, clip, clip_base)[i]``; the clip fraction of a shifted policy is the share of ratios past
    their own bound, and the option without ``per_step_ratio`` is refused."""
    from robotrl.agents.dppo.loss import clip_schedule
    from robotrl.errors import ConfigError

    agent = _agent(per_step_ratio=True, clip=0.05, clip_base=0.001)
    logp = torch.zeros(6, agent.policy.K)
    eps = agent._clip(logp).view(6, agent.policy.K)
    torch.testing.assert_close(eps[0], clip_schedule(agent.policy.K, 0.05, 0.001))
    assert float(eps[0, 0]) == pytest.approx(0.001) and float(eps[0, -1]) == pytest.approx(0.05)
    assert torch.equal(eps, eps[:1].expand_as(eps))
    ro = _rollout(agent)
    d = agent._prepare(ro)
    d["logp"] = d["logp"] - 0.01  # every current ratio is exp(0.01) ≈ 1.01: past 0.001, inside 0.05
    out = agent._minibatch(d, torch.arange(d["cond"].shape[0]), train_actor=True)
    inside = clip_schedule(agent.policy.K, 0.05, 0.001) > 0.0101
    assert float(out["clipfrac"]) == pytest.approx(1.0 - float(inside.float().mean()))
    with pytest.raises(ConfigError, match="per_step_ratio"):
        _agent(clip_base=0.001)


def test_noise_lr_gives_the_noise_net_its_own_rate_under_the_actor_schedule(one_thread):
    """``noise_lr``: the noise net is a second AdamW group whose rate is the actor's schedule times
    ``noise_lr / actor_lr`` at every iteration; without it there is one group (the reference), so older
    checkpoints' optimiser states still load."""
    from robotrl.errors import ConfigError

    agent = _agent(noise_lr=1e-3, actor_lr=4e-5, actor_lr_min=2e-5, lr_cycle_iters=10, lr_warmup_iters=2)
    g_flow, g_noise = agent.actor_opt.param_groups
    assert {id(q) for q in g_noise["params"]} == {id(q) for q in agent.policy.noise_net.parameters()}
    assert len(g_flow["params"]) + len(g_noise["params"]) == len(list(agent.policy.parameters()))
    for it in (0, 1, 5, 9, 12):
        rates = agent.set_learning_rates(it)
        assert g_flow["lr"] == pytest.approx(rates["actor_lr"])
        assert g_noise["lr"] == pytest.approx(rates["actor_lr"] * 1e-3 / 4e-5)
    assert len(_agent().actor_opt.param_groups) == 1
    with pytest.raises(ConfigError, match="noise_lr"):
        _agent(noise_lr=0.0)
