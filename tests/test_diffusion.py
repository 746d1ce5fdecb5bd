"""Diffusion policy: schedule and DDPM/DDIM steps, chunk-queue acting, and pretraining through
`robotrl train agent=diffusion` machinery (build_trainer) on a generated PointMaze Minari dataset."""

from __future__ import annotations


import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.agents.diffusion import DiffusionPolicy
from robotrl.agents.diffusion.networks import build_denoiser
from robotrl.agents.diffusion.schedule import DiffusionSchedule, cosine_betas, ddim_timesteps
from robotrl.experiment import build_trainer
from robotrl.policy import load_policy

DATASET_ID = "robotrl/pointmaze/umaze-diffusion-test-v0"
TINY = ["dataset=pointmaze-umaze-planner", f"dataset.id={DATASET_ID}", "dataset.recipe_args.num_steps=3000", "+dataset.recipe_args.ref_episodes=3",
        "trainer.eval_episodes=4", "trainer.eval_envs=4", "trainer.progress=false", "torch_threads=1",
        "agent=diffusion", "agent.model.denoising_steps=10", "agent.model.denoiser_kwargs.hidden=[128,128]",
        "agent.model.ema_start=50", "agent.model.lr=1e-3"]




def _compose(overrides):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def test_cosine_schedule_and_ddim_timesteps():
    b = cosine_betas(20)
    assert b.shape == (20,) and (b > 0).all() and (b < 1).all()
    s = DiffusionSchedule(20)
    assert (s.alphas_cumprod[1:] < s.alphas_cumprod[:-1]).all() and s.alphas_cumprod[-1] < 1e-2
    assert ddim_timesteps(20, 5).tolist() == [16, 12, 8, 4, 0]
    with pytest.raises(ValueError):
        ddim_timesteps(20, 21)


def test_ddim_with_eta_one_on_consecutive_steps_is_the_ddpm_posterior():
    s = DiffusionSchedule(10, x0_clip=None)
    g = torch.Generator().manual_seed(0)
    x, eps = torch.randn(6, 4, 3, generator=g), torch.randn(6, 4, 3, generator=g)
    k = torch.tensor([9, 7, 5, 3, 1, 0])  # k = 0 too: the final step is noise-free in both (DPPO's clamped β̃_0)
    m1, s1 = s.ddpm_step(x, k, eps)
    m2, s2 = s.ddim_step(x, k, k - 1, eps, eta=1.0)
    torch.testing.assert_close(m1, m2, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(s1, s2, atol=1e-6, rtol=1e-4)
    # eta=0 is deterministic, and the last DDIM step (k_prev=-1) returns x0
    m0, s0 = s.ddim_step(x, torch.zeros(6, dtype=torch.long), torch.full((6,), -1), eps, eta=0.0)
    assert (s0 == 0).all()
    torch.testing.assert_close(m0, s.predict_x0(x, torch.zeros(6, dtype=torch.long), eps))


@pytest.mark.parametrize("kind,kw", [("mlp", {"hidden": [32, 32]}), ("plain_mlp", {"hidden": [32]}),
                                     ("unet", {"channels": [16, 32]})])
def test_denoisers_map_shapes(kind, kw):
    net = build_denoiser(kind, 5, 2, 3, 8, **kw)
    out = net(torch.randn(7, 8, 2), torch.randint(0, 10, (7,)), torch.randn(7, 3, 5))
    assert out.shape == (7, 8, 2)


def test_chunk_queue_acts_te_steps_per_chunk_and_reset_replans_one_env():
    torch.manual_seed(0)
    p = DiffusionPolicy(3, 2, obs_horizon=2, action_horizon=4, act_steps=3, denoising_steps=5,
                        denoiser_kwargs={"hidden": [16, 16]}).eval()
    calls = []
    orig = p.predict_chunk

    def counted(hist, **kw):
        calls.append((hist.shape[0], hist.clone()))
        return orig(hist, **kw)

    p.predict_chunk = counted
    obs = [torch.randn(2, 3) for _ in range(7)]
    outs = [p(o) for o in obs]
    assert [c[0] for c in calls] == [2, 2, 2]  # chunks sampled at steps 0, 3, 6 for both envs
    # history at step 3 holds observations 2 and 3; at step 0 the first obs is repeated
    torch.testing.assert_close(calls[0][1], torch.stack([obs[0], obs[0]], 1))
    torch.testing.assert_close(calls[1][1], torch.stack([obs[2], obs[3]], 1))
    assert all(o.shape == (2, 2) and (o.abs() <= 1).all() for o in outs)
    p.reset(np.array([1]))
    fresh = torch.randn(2, 3)
    p(fresh)
    assert calls[-1][0] == 1  # only env 1 replans
    torch.testing.assert_close(calls[-1][1], torch.stack([fresh[1:], fresh[1:]], 1))
    p.reset()
    p(torch.randn(2, 3))
    assert calls[-1][0] == 2


def test_ddim5_and_ddpm_chunks_stay_in_action_bounds():
    p = DiffusionPolicy(4, 2, denoising_steps=20, denoiser_kwargs={"hidden": [32, 32]}, sampler="ddim").eval()
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 1.0])
    p.action_scaler.low.copy_(low)
    p.action_scaler.high.copy_(high)
    for sampler in ("ddim", "ddpm"):
        c = p.predict_chunk(torch.randn(16, 1, 4) * 5, sampler=sampler)
        assert c.shape == (16, 4, 2) and (c >= low).all() and (c <= high).all()


@pytest.mark.slow
def test_pretraining_through_sequence_sampling_learns_the_demonstrations(minari_module_root, tmp_path):
    run = tmp_path / "diff"
    cfg = _compose([*TINY, "trainer.offline_steps=1500", "trainer.eval_every=1500", "trainer.checkpoint_every=1500",
                    "agent.model.obs_horizon=2", f"run_dir={run}"])
    trainer = build_trainer(cfg, run)
    agent = trainer.agent
    batch = agent.sample_batch(trainer.offline, 64)
    assert batch.observations.shape == (64, 2, 8) and batch.actions.shape == (64, 4, 2) and batch.mask.shape == (64, 4)
    torch.manual_seed(0)
    with torch.no_grad():
        before = float(agent.loss(batch))
    summary = trainer.fit()
    torch.manual_seed(0)
    with torch.no_grad():
        after = float(agent.loss(batch))
    assert after < 0.5 * before
    assert summary["gradient_updates"] == 1500
    # the trained policy reaches the goal in the PointMaze task (the planner demos do, ~always)
    assert summary["final_success_rate"] >= 0.5
    # the checkpoint rebuilds the deployable EMA policy with its settings
    pol = load_policy(str(run))
    assert isinstance(pol, DiffusionPolicy) and pol.To == 2 and pol.Te == 4 and pol.K == 10
    for a, b in zip(pol.denoiser.parameters(), agent.policy.denoiser.parameters()):  # load_policy: on the CPU
        torch.testing.assert_close(a, b.cpu())
    torch.testing.assert_close(pol.obs_normalizer.mean, agent.policy.obs_normalizer.mean.cpu())
