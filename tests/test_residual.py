"""Residual policies on a frozen base: exact equality with the base at initialisation (BC run
trained on a generated Minari dataset, diffusion chunks, stable-baselines3 models), checkpoints
that rebuild without the base file, and chunk queues across episode resets in real vector envs."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.agents.diffusion import DiffusionPolicy
from robotrl.agents.residual import ResidualPolicy, ResidualPPOAgent, load_base
from robotrl.checkpoint import save_checkpoint
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env
from robotrl.experiment import build_trainer
from robotrl.onpolicy import RolloutCollector
from robotrl.policy import load_policy, policy_state

DATASET_ID = "robotrl/pointmaze/umaze-residual-test-v0"
TINY = ["agent=bc", "dataset=pointmaze-umaze-planner", f"dataset.id={DATASET_ID}", "dataset.recipe_args.num_steps=2000", "+dataset.recipe_args.ref_episodes=2",
        "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.progress=false", "torch_threads=1",
        "trainer.offline_steps=50", "trainer.eval_every=50", "trainer.checkpoint_every=50"]




def _obs(n: int, seed: int = 0) -> torch.Tensor:
    envs = make_env("pointmaze-umaze", num_envs=n, seed=seed, vectorization="sync")
    obs, _ = envs.reset(seed=seed)
    envs.close()
    return torch.as_tensor(np.asarray(obs, np.float32))


def _diffusion_base(te: int = 3) -> DiffusionPolicy:
    torch.manual_seed(0)
    return DiffusionPolicy(8, 2, action_horizon=4, act_steps=te, denoising_steps=5, denoiser_kwargs={"hidden": [32, 32]},
                           sampler="ddim", ddim_steps=3).eval()


def test_bc_run_base_residual_equals_base_and_checkpoint_rebuilds_without_base_file(minari_module_root, tmp_path):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=TINY)
    bc_dir = tmp_path / "bc"
    build_trainer(cfg, bc_dir).fit()
    base = load_base(bc_dir)
    assert not any(p.requires_grad for p in base.parameters())
    obs = _obs(6)
    pol = ResidualPolicy(8, 2, base, hidden=[64, 64], residual_scale=0.1)
    pol.set_normalizers(ObservationNormalizer(obs.mean(0).numpy(), obs.std(0).numpy() + 1, clip=3.0),
                        ActionScaler(-np.ones(2), np.ones(2)))
    assert torch.equal(pol(obs), base(obs))  # exactly the base at initialisation
    # an agent given no dataset statistics (identity normaliser) adopts the base's observation statistics
    ppo = ResidualPPOAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8),
                           action_scaler=ActionScaler(-np.ones(2), np.ones(2)), base=bc_dir, hidden=[16], critic_hidden=[16])
    torch.testing.assert_close(ppo.policy.obs_normalizer.std, base.obs_normalizer.std)
    assert ppo.policy.obs_normalizer.clip == 3.0 and torch.equal(ppo.policy(obs), base(obs))
    # the residual moves the action once its output layer is non-zero; the combined action is clipped
    with torch.no_grad():
        pol.residual.net[-1].bias.fill_(50.0)
    moved = pol(obs)
    assert torch.equal(moved, torch.clamp(base(obs) + 0.1 * 50.0, max=1.0)) and (moved <= 1.0).all()
    save_checkpoint(tmp_path / "res.pt", {"policy": policy_state(pol)})
    # ResFiT through `robotrl train` machinery: demonstrations mixed in at offline_ratio 0.5
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        rcfg = compose(config_name="train", overrides=[*TINY, "agent=residual-offpolicy", f"agent.model.base={bc_dir}",
                                                       "agent.model.hidden=[32]", "agent.model.critic_hidden=[32]",
                                                       "agent.model.num_critics=3", "agent.model.base_noise_steps=20",
                                                       "agent.model.critic_warmup_updates=10", "trainer.offline_steps=0",
                                                       "trainer.online_steps=60", "trainer.online_warmup_steps=20",
                                                       "trainer.n_step=3", "trainer.batch_size=32",
                                                       "trainer.eval_every=60", "trainer.checkpoint_every=60",
                                                       "device=cpu"])  # compared with the CPU base below
    trainer = build_trainer(rcfg, tmp_path / "resfit")
    assert torch.equal(trainer.agent.policy(obs), base(obs))  # starts exactly at the base
    summary = trainer.fit()
    assert summary["gradient_updates"] == 40 and trainer.agent.num_updates == 40
    shutil.rmtree(bc_dir)  # the residual checkpoint holds the base: the BC run is not needed any more
    again = load_policy(tmp_path / "res.pt")
    assert type(again.base).__name__ == "BCPolicy"
    assert torch.equal(again(obs), moved)
    resfit = load_policy(tmp_path / "resfit")  # the trained residual rebuilds with its base inside
    assert type(resfit).__name__ == "ResidualPolicy" and torch.equal(resfit.base(obs), base(obs))


def test_diffusion_chunk_queue_matches_base_across_episode_resets(tmp_path):
    base = _diffusion_base(te=3)
    twin = _diffusion_base(te=3)  # same weights: steps in lockstep as the reference
    pol = ResidualPolicy(8, 2, base, hidden=[32], head="tanh")
    obs = _obs(2)
    for t in range(8):
        if t == 4:  # env 1 starts a new episode mid-chunk; env 0 continues its queue
            pol.reset(np.array([1]))
            twin.reset(np.array([1]))
        torch.manual_seed(100 + t)
        a = pol(obs + 0.01 * t)
        torch.manual_seed(100 + t)
        b = twin(obs + 0.01 * t)
        assert torch.equal(a, b)
    assert pol.base._qpos.tolist() == [2, 1]  # env 0: 8 steps of 3-chunks; env 1: restarted at t=4 -> 4 steps
    # saved with its base: rebuilds as a diffusion-based residual with the same chunk settings
    save_checkpoint(tmp_path / "d.pt", {"policy": policy_state(pol)})
    again = load_policy(tmp_path / "d.pt")
    assert isinstance(again.base, DiffusionPolicy) and again.base.Te == 3
    fresh = _diffusion_base(te=3)
    torch.manual_seed(7)
    x = again(obs)
    torch.manual_seed(7)
    assert torch.equal(x, fresh(obs))
    # overrides rebuild the base with other settings, e.g. re-planning every step (off-policy residual)
    state = policy_state(fresh)
    assert load_base(state, {"act_steps": 1}).Te == 1


def test_rollout_collector_resets_the_base_queue_at_episode_starts():
    base = _diffusion_base(te=3)
    agent = ResidualPPOAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8),
                             action_scaler=ActionScaler(-np.ones(2), np.ones(2)), base=base, hidden=[32],
                             critic_hidden=[32], reward_scaling=False)
    qpos = []
    act = agent.rollout_act

    def recording(obs_hist):
        out = act(obs_hist)
        qpos.append(agent.rollout_base._qpos.copy())
        return out

    agent.rollout_act = recording
    envs = make_env("pointmaze-umaze", num_envs=2, seed=0, vectorization="sync", max_episode_steps=7)
    try:
        ro = RolloutCollector(envs, agent.policy.To, reward_scaling=False, seed=0).collect(agent, 17)
    finally:
        envs.close()
    q = np.stack(qpos)[:, 0]
    # episode 1: t=0..6 (queue 1,2,3,1,2,3,1), t=7 reset-only step (2), episode 2 restarts its chunk at t=8
    assert q[:8].tolist() == [1, 2, 3, 1, 2, 3, 1, 2]
    assert q[8:17].tolist() == [1, 2, 3, 1, 2, 3, 1, 2, 1]
    # the executed action is the base action plus the scaled sampled residual, clipped
    assert ro.extras["features"].shape == (17, 2, 10)
    # the residual's input carries the base action it was served (normalised; bounds are [-1, 1] here)
    torch.testing.assert_close(ro.extras["features"][..., 8:], ro.extras["base"].clamp(-1, 1))


def _sb3_models(tmp_path):
    from stable_baselines3 import PPO, SAC, TD3

    env = make_env("pointmaze-umaze")
    paths = {}
    for cls in (PPO, SAC, TD3):
        model = cls("MlpPolicy", env, seed=0, device="cpu", policy_kwargs={"net_arch": [32, 32]})
        paths[cls.__name__] = tmp_path / f"{cls.__name__}.zip"
        model.save(paths[cls.__name__])
    env.close()
    return paths


def test_sb3_model_base_matches_predict_and_rebuilds_without_sb3_file(tmp_path):
    from stable_baselines3 import PPO, SAC, TD3

    obs = _obs(5)
    for name, path in _sb3_models(tmp_path).items():
        model = {"PPO": PPO, "SAC": SAC, "TD3": TD3}[name].load(path, device="cpu")  # SB3's loader: the reference
        ref, _ = model.predict(obs.numpy(), deterministic=True)
        base = load_base(path)
        np.testing.assert_allclose(base(obs).numpy(), ref, atol=1e-6)
        pol = ResidualPolicy(8, 2, base, hidden=[16])
        pol.set_normalizers(ObservationNormalizer.identity(8), ActionScaler(-np.ones(2), np.ones(2)))
        assert torch.equal(pol(obs), base(obs))
        save_checkpoint(tmp_path / f"res_{name}.pt", {"policy": policy_state(pol)})
        path.unlink()
        np.testing.assert_allclose(load_policy(tmp_path / f"res_{name}.pt")(obs).numpy(), ref, atol=1e-6)


def test_sb3_base_reads_vecnormalize_npz_and_needs_act_for_custom_activations(tmp_path):
    import torch.nn as tnn
    from stable_baselines3 import PPO

    from robotrl.agents.residual.base import load_sb3_base
    from robotrl.errors import CheckpointError

    env = make_env("pointmaze-umaze")
    model = PPO("MlpPolicy", env, seed=0, device="cpu", policy_kwargs={"net_arch": [16], "activation_fn": tnn.ReLU})
    model.save(tmp_path / "relu.zip")
    env.close()
    with pytest.raises(CheckpointError, match="custom activation_fn; pass act="):
        load_sb3_base(tmp_path / "relu.zip")
    mean, var = np.arange(8, dtype=np.float32), np.full(8, 4.0, np.float32)
    np.savez(tmp_path / "vn.npz", mean=mean, var=var, clip_obs=5.0)
    base = load_sb3_base(tmp_path / "relu.zip", vecnormalize=tmp_path / "vn.npz", act="relu")
    obs = torch.as_tensor(np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32))
    norm = ((obs.numpy() - mean) / np.sqrt(var + 1e-8)).clip(-5, 5)
    ref, _ = model.predict(norm, deterministic=True)
    np.testing.assert_allclose(base(obs).numpy(), ref, atol=1e-6)
