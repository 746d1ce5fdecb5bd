"""DPPO: denoising-MDP log-probs against a direct Gaussian computation, the clip schedule and
denoising discount, rollout chains, and a fine-tuned checkpoint that evaluation rebuilds with K'."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

from robotrl.agents.dppo import DPPOAgent, DPPOPolicy
from robotrl.agents.dppo.loss import chunk_log_prob, clip_schedule, denoising_discount
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env
from robotrl.errors import ConfigError
from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer
from robotrl.policy import load_policy


def _agent(**kw) -> DPPOAgent:
    args = dict(obs_normalizer=ObservationNormalizer.identity(8), action_scaler=ActionScaler(-np.ones(2), np.ones(2)),
                action_horizon=4, act_steps=2, denoising_steps=10, denoiser_kwargs={"hidden": [32, 32]},
                ft_denoising_steps=4, critic_hidden=[32], batch_size=256, n_epochs=2, seed=0)
    args.update(kw)
    return DPPOAgent(8, 2, **args)


def _direct_logprob(agent: DPPOAgent, cond, x_prev, x_next, j: int, use_ddim: bool) -> torch.Tensor:
    """log N(x_next; μ, σ²) written out from the schedule's ᾱ with torch.distributions.Normal."""
    p = agent.policy
    K = p.K
    if use_ddim:
        step = K // p.ddim_steps
        ts = [t * step for t in range(p.ddim_steps)][::-1]
    else:
        ts = list(range(K - 1, -1, -1))
    n = len(ts)
    t = ts[n - agent.Kp + j]
    t_prev = ts[n - agent.Kp + j + 1] if n - agent.Kp + j + 1 < n else -1
    ac = p.schedule.alphas_cumprod.double()
    a = ac[t]
    a_prev = ac[t_prev] if t_prev >= 0 else torch.tensor(1.0, dtype=torch.float64)
    eps = p.denoiser_ft(x_prev, torch.full((x_prev.shape[0],), t), cond).double()
    x = x_prev.double()
    x0 = ((x - (1 - a).sqrt() * eps) / a.sqrt()).clamp(-1, 1)
    if use_ddim:  # eta = 1
        eps_c = (x - a.sqrt() * x0) / (1 - a).sqrt()
        sigma = ((1 - a_prev) / (1 - a) * (1 - a / a_prev)).sqrt()
        mean = a_prev.sqrt() * x0 + (1 - a_prev - sigma ** 2).sqrt() * eps_c
    else:
        beta = 1 - a / a_prev
        mean = a_prev.sqrt() * beta / (1 - a) * x0 + (a / a_prev).sqrt() * (1 - a_prev) / (1 - a) * x
        var = beta * (1 - a_prev) / (1 - a)  # 0 at t = 0 (DPPO clamps it to 1e-20): the floor decides
        sigma = var.sqrt()
    sigma = torch.clamp(torch.as_tensor(sigma, dtype=torch.float64), min=agent.min_logprob_std)
    return torch.distributions.Normal(mean, sigma).log_prob(x_next.double())


@pytest.mark.parametrize("use_ddim", [False, True])
def test_denoising_mdp_log_probs_match_direct_gaussian(use_ddim):
    torch.manual_seed(0)
    agent = _agent(use_ddim=use_ddim, ddim_steps=5, ft_denoising_steps=4 if use_ddim else 10)
    obs = np.random.default_rng(0).normal(size=(6, 1, 8)).astype(np.float32)
    _, ext = agent.rollout_act(obs)
    chain = ext["chains"]
    assert chain.shape == (6, agent.Kp + 1, 4, 2)
    cond = agent.policy.condition(torch.as_tensor(obs))
    for j in range(agent.Kp):
        i = torch.full((6,), j, dtype=torch.long)
        with torch.no_grad():
            got = agent.step_log_prob(cond, chain[:, j], chain[:, j + 1], i)
            ref = _direct_logprob(agent, cond, chain[:, j], chain[:, j + 1], j, use_ddim)
        torch.testing.assert_close(got.double(), ref, atol=1e-4, rtol=1e-4)
    # the reduction: element-wise clamp to [-5, 2], executed Te rows, mean over Te×Da
    lp = torch.randn(3, 4, 2) * 4
    torch.testing.assert_close(chunk_log_prob(lp, 2), lp.clamp(-5, 2)[:, :2].reshape(3, -1).mean(-1))


def test_rollout_chain_is_sampled_with_the_exploration_floor():
    torch.manual_seed(1)
    agent = _agent(ft_denoising_steps=10, min_sampling_std=0.1)
    obs = np.zeros((512, 1, 8), np.float32)
    actions, ext = agent.rollout_act(obs)
    chain = ext["chains"]
    assert actions.shape == (512, 2, 2) and (np.abs(actions) <= 1).all()
    # last step: x_final = mean + 0.1·clip(ε, ±3) (σ_0 ≈ 0, the exploration floor decides)
    p, k = agent.policy, torch.zeros(512, dtype=torch.long)
    with torch.no_grad():
        mean, _ = p.schedule.ddpm_step(chain[:, -2], k, p.denoiser_ft(chain[:, -2], k, p.condition(torch.as_tensor(obs))))
    resid = chain[:, -1] - mean
    sigma = 0.1
    assert float(resid.std()) == pytest.approx(sigma, rel=0.1) and float(resid.abs().max()) <= 3 * sigma + 1e-5
    np.testing.assert_allclose(actions, chain[:, -1, :2].clamp(-1, 1).numpy(), atol=1e-6)


@pytest.mark.parametrize("K", [5, 20])
def test_final_denoising_step_std_is_the_floor(K):
    """DPPO clamps the final step's posterior variance near 0 (``ddpm_logvar_clipped``), so the
    0.1 exploration / log-prob floors set its std — for K=5 (the benchmark's policy) the copied
    β̃_1 had given 0.283, for K=20 0.076 (below the floor, so the floor hid it there)."""
    torch.manual_seed(0)
    agent = _agent(denoising_steps=K, ft_denoising_steps=K, min_sampling_std=0.1, min_logprob_std=0.1)
    p = agent.policy
    assert float(p.schedule.post_logvar[0].mul(0.5).exp()) < 1e-6
    # sampling: the final step's noise has std 0.1
    obs = np.zeros((2048, 1, 8), np.float32)
    chain = agent.rollout_act(obs)[1]["chains"]
    cond = p.condition(torch.as_tensor(obs))
    k0 = torch.zeros(2048, dtype=torch.long)
    with torch.no_grad():
        mean, std = p.schedule.ddpm_step(chain[:, -2], k0, p.denoiser_ft(chain[:, -2], k0, cond))
    assert float(std.clamp(min=agent.min_sampling_std).max()) == pytest.approx(0.1)
    assert float((chain[:, -1] - mean).std()) == pytest.approx(0.1, rel=0.03)
    # log-prob: the final pair is scored under N(mean, 0.1²)
    last = torch.full((2048,), agent.Kp - 1, dtype=torch.long)
    with torch.no_grad():
        got = agent.step_log_prob(cond, chain[:, -2], chain[:, -1], last)
    torch.testing.assert_close(got, torch.distributions.Normal(mean, 0.1).log_prob(chain[:, -1]), atol=1e-4, rtol=1e-4)


def test_checkpoint_with_the_old_final_step_variance_loads_the_dppo_one(tmp_path):
    """A diffusion checkpoint written when k=0 carried β̃_1 is fine-tuned with DPPO's final-step variance."""
    from robotrl.agents.diffusion import DiffusionPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.policy import policy_state

    dp = DiffusionPolicy(8, 2, action_horizon=4, act_steps=2, denoising_steps=5, denoiser_kwargs={"hidden": [32, 32]})
    dp.set_normalizers(ObservationNormalizer.identity(8), ActionScaler(-np.ones(2), np.ones(2)))
    state = policy_state(dp)
    old = state["state_dict"]["schedule.post_logvar"].clone()
    old[0] = old[1]  # what checkpoints before the fix hold
    state["state_dict"]["schedule.post_logvar"] = old
    save_checkpoint(tmp_path / "old.pt", {"policy": state})
    agent = _agent(denoising_steps=5, ft_denoising_steps=5)
    agent.load_pretrained(str(tmp_path / "old.pt"))
    assert float(agent.policy.schedule.post_logvar[0].mul(0.5).exp()) < 1e-6
    assert float(load_policy(str(tmp_path / "old.pt")).schedule.post_logvar[0].mul(0.5).exp()) < 1e-6


def test_clip_schedule_for_one_and_many_fine_tuned_steps():
    one = clip_schedule(1, clip=0.01, clip_base=0.001)
    assert one.tolist() == pytest.approx([0.01]) and torch.isfinite(one).all()
    many = clip_schedule(10, clip=0.01, clip_base=0.001, rate=3.0)
    assert many[0].item() == pytest.approx(0.001) and many[-1].item() == pytest.approx(0.01)
    assert (many[1:] > many[:-1]).all()
    i = 4
    expected = 0.001 + (0.01 - 0.001) * (math.exp(3 * i / 9) - 1) / (math.exp(3) - 1)
    assert many[i].item() == pytest.approx(expected, rel=1e-5)
    d = denoising_discount(4, 0.9)
    assert d.tolist() == pytest.approx([0.9 ** 3, 0.9 ** 2, 0.9, 1.0])
    assert _agent(ft_denoising_steps=1).clip_i.tolist() == pytest.approx([0.01])
    for bad in (lambda: clip_schedule(0, 0.01, 0.001), lambda: denoising_discount(0, 0.99),
                lambda: _agent(ft_denoising_steps=50)):  # K' outside [1, K]: named, with the way out
        with pytest.raises(ConfigError, match="ft_denoising_steps"):
            bad()


@pytest.mark.slow
def test_fine_tuned_checkpoint_records_k_prime_and_eval_runs_the_fine_tuned_network(tmp_path):
    torch.manual_seed(0)
    agent = _agent(actor_lr=1e-2, critic_warmup_iters=0, n_epochs=1, target_kl=None)
    ev = {"name": "pointmaze-umaze", "env_kwargs": {}, "max_episode_steps": 40}
    cfg = OnPolicyConfig(iterations=2, steps_per_iter=10, num_envs=2, eval_every=2, eval_episodes=2, eval_envs=2,
                         checkpoint_every=2, progress=False)
    tr = OnPolicyTrainer(agent, tmp_path / "run", cfg,
                         make_train_envs=lambda: make_env("pointmaze-umaze", num_envs=2, seed=0, vectorization="sync",
                                                          action_chunk=2, max_episode_steps=40),
                         make_eval_env=lambda: make_env("pointmaze-umaze", max_episode_steps=40), seed=0,
                         run_config={"derived": {"eval_env": ev}})
    summary = tr.fit()
    assert summary["iterations"] == 2 and summary["online_steps"] == 2 * 10 * 2 * 2
    pol = load_policy(str(tmp_path / "run"))
    assert isinstance(pol, DPPOPolicy) and pol.ft_steps == 4 and pol.spec()["ft_denoising_steps"] == 4
    # the fine-tuned weights moved away from the frozen ones, and the rebuilt policy carries them
    ft = dict(pol.denoiser_ft.named_parameters())
    assert any(not torch.equal(ft[n], b) for n, b in pol.denoiser.named_parameters())
    for n, w in agent.policy.denoiser_ft.named_parameters():
        torch.testing.assert_close(ft[n], w)
    obs = torch.randn(5, 1, 8)
    torch.manual_seed(3)
    a1 = pol.predict_chunk(obs)
    torch.manual_seed(3)
    a2 = agent.policy.predict_chunk(obs)
    torch.testing.assert_close(a1, a2)
    # and the chain uses denoiser_ft for exactly the last K' steps
    n = pol.chain_length()
    assert [pol.net_for_step(k) is pol.denoiser_ft for k in range(n - 1, -1, -1)] == [False] * (n - 4) + [True] * 4
    # `robotrl eval` of the fine-tuned checkpoint (a real process)
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={tmp_path / 'run'}", "episodes=2",
                          "num_envs=1", f"output={tmp_path / 'eval.json'}"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"] == 2.0


def _perturb(net: torch.nn.Module, scale: float = 0.5, seed: int = 0) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w in net.parameters():
            w.add_(torch.randn(w.shape, generator=g) * scale)


@pytest.mark.parametrize("use_ddim", [False, True])
def test_fine_tuned_copy_is_chosen_by_timestep_and_reached_from_another_chain(use_ddim):
    """DPPO's ``p_mean_var``: the fine-tuned copy serves ``t < K'`` (DDPM) or the last ``K'`` DDIM indices. A
    DDPM-fine-tuned policy sampled on a shorter DDIM chain still runs its fine-tuned copy at the low timesteps
    (by chain position it never did: positions 0..4 of a 5-step chain are all below ``n − K' = 6``)."""
    torch.manual_seed(0)
    pol = _agent(use_ddim=use_ddim, ddim_steps=5, ft_denoising_steps=2 if use_ddim else 4).policy
    ks = [8, 6, 4, 2, 0] if use_ddim else list(range(9, -1, -1))
    ft = {2, 0} if use_ddim else {3, 2, 1, 0}
    assert [pol.net_for_step(k) is pol.denoiser_ft for k in ks] == [k in ft for k in ks]
    if use_ddim:
        return
    _perturb(pol.denoiser_ft)
    cond = torch.randn(6, 1, 8)
    x_init = torch.randn(6, 4, 2, generator=torch.Generator().manual_seed(1))
    tuned = pol.sample_normalized(cond, sampler="ddim", x_init=x_init)
    pol.sync_ft_from_base()
    assert not torch.allclose(pol.sample_normalized(cond, sampler="ddim", x_init=x_init), tuned, atol=1e-3)


def test_load_pretrained_refuses_a_checkpoint_that_leaves_weights_unloaded(tmp_path):
    from robotrl.agents.diffusion import DiffusionPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.errors import CheckpointError
    from robotrl.policy import policy_state

    dp = DiffusionPolicy(8, 2, action_horizon=4, act_steps=2, denoising_steps=10, denoiser_kwargs={"hidden": [32, 32]})
    dp.set_normalizers(ObservationNormalizer.identity(8), ActionScaler(-np.ones(2), np.ones(2)))
    state = policy_state(dp)
    save_checkpoint(tmp_path / "whole.pt", {"policy": state})
    agent = _agent()
    agent.load_pretrained(str(tmp_path / "whole.pt"))  # a whole checkpoint loads, both copies equal to it
    for (n, w), wf in zip(dp.denoiser.named_parameters(), agent.policy.denoiser_ft.parameters()):
        torch.testing.assert_close(dict(agent.policy.denoiser.named_parameters())[n], w)
        torch.testing.assert_close(wf, w)
    dropped = next(k for k in state["state_dict"] if k.startswith("denoiser.") and k.endswith("weight"))
    del state["state_dict"][dropped]
    save_checkpoint(tmp_path / "partial.pt", {"policy": state})
    with pytest.raises(CheckpointError, match=dropped.replace(".", r"\.")):
        _agent().load_pretrained(str(tmp_path / "partial.pt"))


def test_final_sample_is_stored_unclamped_by_default_and_clamped_with_final_action_clip_value():
    """DPPO's reference default (``final_action_clip_value=None``) stores and scores the unclamped final sample;
    with the value set the clamp precedes the chain's record, so the clamped sample is stored and scored."""
    obs = np.zeros((512, 1, 8), np.float32)
    chains = {}
    for clip in (None, 1.0):
        torch.manual_seed(0)
        agent = _agent(ft_denoising_steps=10, min_sampling_std=0.5, final_action_clip_value=clip)
        actions, ext = agent.rollout_act(obs)
        chains[clip] = ext["chains"]
        np.testing.assert_allclose(actions, ext["chains"][:, -1, :2].clamp(-1, 1).numpy(), atol=1e-6)
    raw, clamped = chains[None], chains[1.0]
    assert float(raw[:, -1].abs().max()) > 1.0  # some samples leave the box
    torch.testing.assert_close(clamped[:, :-1], raw[:, :-1])
    torch.testing.assert_close(clamped[:, -1], raw[:, -1].clamp(-1, 1))


def test_load_pretrained_checks_the_architecture_keys_the_diffusion_policy_declares(tmp_path):
    """The keys a conversion must match are declared once, on the policy class (``DiffusionPolicy.ARCH_KEYS``):
    a camera DPPO refuses a state checkpoint (naming ``image_shapes``) and a state DPPO refuses other horizons."""
    from robotrl.agents.diffusion import DiffusionPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.errors import CheckpointError
    from robotrl.policy import policy_state

    assert {"image_shapes", "encoder", "denoising_steps", "action_horizon"} <= set(DiffusionPolicy.ARCH_KEYS)
    dp = DiffusionPolicy(8, 2, action_horizon=4, act_steps=2, denoising_steps=10, denoiser_kwargs={"hidden": [32, 32]})
    dp.set_normalizers(ObservationNormalizer.identity(8), ActionScaler(-np.ones(2), np.ones(2)))
    save_checkpoint(tmp_path / "state.pt", {"policy": policy_state(dp)})
    with pytest.raises(CheckpointError, match="image_shapes"):
        _agent(image_shapes={"pixels/cam": (16, 16, 3)}, feature_dim=16, channels=8).load_pretrained(str(tmp_path / "state.pt"))
    with pytest.raises(CheckpointError, match="denoising_steps"):
        _agent(denoising_steps=5).load_pretrained(str(tmp_path / "state.pt"))
