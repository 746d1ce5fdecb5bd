"""Diffusion policy on cameras: `robotrl train experiment=diffusion obs=pixels` and `robotrl eval`, the saved policy acting
on raw Dict observations and reloading identically, learning a generated camera task, and serving as a residual base.

Real processes, real MuJoCo renders (OSMesa) and a real Minari camera dataset generated through the dataset config
(PointMaze UMaze, 32x32 top-down camera, 600 steps); the learning test writes and reads its own Minari dataset.
"""

from __future__ import annotations

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from pixel_runs import compose_train, run_robotrl  # noqa: E402
from test_pixel_agents import S, _space, square_task  # noqa: E402

from robotrl.agents.diffusion import DiffusionAgent, DiffusionPolicy  # noqa: E402
from robotrl.agents.residual import ResidualOffPolicyAgent  # noqa: E402
from robotrl.checkpoint import load_checkpoint  # noqa: E402
from robotrl.data import ActionScaler, Episode, ObservationNormalizer, ReplayBuffer, load_dataset, write_dataset  # noqa: E402
from robotrl.envs import make_env_from_args, osmesa_available  # noqa: E402
from robotrl.experiment import build_trainer  # noqa: E402
from robotrl.policy import act, load_policy, policy_state  # noqa: E402

needs_osmesa = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

DATA = ["dataset.id=robotrl/pointmaze/umaze-slow-pixdiff-v1", "dataset.recipe_args.num_steps=600",
        "dataset.recipe_args.image_size=32", "+dataset.recipe_args.ref_episodes=2"]
SMALL = ["trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.batch_size=16", "trainer.log_every=10",
         "trainer.progress=false", "torch_threads=1", "device=cpu", "agent.model.channels=8",
         "agent.model.denoiser_kwargs.hidden=[32,32]", "agent.model.denoising_steps=5"]
DP = ["experiment=diffusion", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL]


@pytest.mark.slow
@needs_osmesa
def test_diffusion_pixels_trains_checkpoints_and_evaluates_in_the_datas_camera_env(minari_module_root, tmp_path):
    run_dir = tmp_path / "dp"
    res = run_robotrl(["train", *DP, "trainer.offline_steps=20", "trainer.eval_every=20", "trainer.checkpoint_every=20",
                       f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    ckpt = load_checkpoint(run_dir)
    assert ckpt["updates"] == 20 and ckpt["config"]["derived"]["image_shapes"] == {"pixels/topdown": [32, 32, 3]}
    pol = ckpt["policy"]
    assert pol["target"] == "robotrl.agents.diffusion.policy.DiffusionPolicy"
    assert pol["kwargs"]["state_layout"] and pol["kwargs"]["encoder_weights"] is None
    assert set(pol["state_dict"]) >= {"obs_normalizer.mean", "obs_normalizer.std", "action_scaler.low",
                                      "action_scaler.high", "encoder.project.0.weight"}
    assert any(k.startswith("denoiser.") for k in pol["state_dict"])

    policy = load_policy(str(run_dir))
    env = make_env_from_args(ckpt["config"]["derived"]["eval_env"], seed=3)
    try:
        obs, _ = env.reset(seed=3)
        policy.reset()
        a = act(policy, obs)
        assert a.shape == (2,) and np.all(np.abs(a) <= 1.0 + 1e-6)
    finally:
        env.close()

    out = run_robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and metrics["step"] == 20 and 0.0 <= metrics["success_rate"] <= 1.0


@needs_osmesa
def test_a_trained_diffusion_pixels_policy_reloads_and_acts_identically_on_raw_observations(minari_module_root, tmp_path):
    runner = build_trainer(compose_train([*DP, "trainer.offline_steps=6", "trainer.eval_every=100",
                                          "trainer.checkpoint_every=100", "agent.model.ema_start=2"]), tmp_path / "dp")
    runner.fit()
    agent = runner.loop.agent
    assert agent.num_updates == 6
    envs = make_env_from_args(runner.run_config["derived"]["eval_env"], num_envs=3, seed=5, vectorization="sync")
    try:
        obs, _ = envs.reset(seed=5)
        obs, *_ = envs.step(envs.action_space.sample())
    finally:
        envs.close()
    rebuilt = load_policy(str(tmp_path / "dp"))
    actions = []
    for policy in (agent.policy, rebuilt):
        policy.reset()
        torch.manual_seed(11)  # the same diffusion noise for both
        actions.append(np.stack([act(policy, obs) for _ in range(3)]))  # one chunk of Te=4 actions served per env
    np.testing.assert_array_equal(actions[0], actions[1])
    assert not np.array_equal(actions[0][0], actions[0][1])  # served from the queue, step by step


# ---------------------------------------------------------------------------------------------- learning
SHAPES = {"pixels/cam": (S, S, 3)}


@pytest.fixture(scope="module")
def squares(tmp_path_factory) -> ReplayBuffer:
    """A generated camera task as a real Minari dataset (written, read, buffered): the action is the bright square's
    centre and a scaled state value, a = (x, y, 2 s) (tests/test_pixel_agents.py)."""
    rng, root, eps = np.random.default_rng(0), tmp_path_factory.mktemp("squares"), []
    for _ in range(30):
        f, s, a = square_task(11, rng)
        eps.append(Episode(observations={"pixels": {"cam": f}, "state": s}, actions=a[:-1], rewards=np.zeros(10),
                           terminations=np.zeros(10, bool), truncations=np.eye(10, dtype=bool)[-1]))
    write_dataset("gen/dp-squares-v0", eps, observation_space=_space(),
                  action_space=gym.spaces.Box(-1, 1, (3,), np.float32), root=root)
    return ReplayBuffer.from_offline(load_dataset(root / "gen/dp-squares-v0"), seed=0)


def _agent(buf: ReplayBuffer, **kw) -> DiffusionAgent:
    return DiffusionAgent(1, 3, image_shapes=SHAPES, obs_normalizer=ObservationNormalizer.from_data(buf.observations[: len(buf)]),
                          action_scaler=ActionScaler(-np.ones(3), np.ones(3)), channels=8, feature_dim=32,
                          denoising_steps=10, denoiser_kwargs={"hidden": [128, 128, 128]}, sampler="ddim",
                          ddim_steps=5, seed=0, **kw)


@pytest.mark.slow
def test_pixel_diffusion_learns_a_generated_camera_task(squares, one_thread):
    # Ta = 1: in this task the next action belongs to a new random frame (chunks: the reload test above)
    agent = _agent(squares, lr=2e-3, augment_pad=2, action_horizon=1, act_steps=1)
    fixed = agent.sample_batch(squares, 128)  # training observations, (B, To=1, ...) windows
    target = fixed.actions[:, 0].numpy()

    def loss() -> float:  # the same noise and timesteps every time, no random shift
        agent.model.eval()
        saved = agent.gen.get_state()
        agent.gen.manual_seed(123)
        with torch.no_grad():
            out = agent.loss(fixed).item()
        agent.gen.set_state(saved)
        return out

    def action_error() -> float:  # the deployed (EMA) policy's deterministic DDIM chunk against the data's
        torch.manual_seed(5)
        chunk = agent.policy.predict_chunk(fixed.observations, fixed.images())
        return float(((chunk[:, 0].numpy() - target) ** 2).mean())

    loss0, err0 = loss(), action_error()
    for step in range(300):
        agent.update(agent.sample_batch(squares, 32), step)
    loss1, err1 = loss(), action_error()
    baseline = float(target.var(0).mean())  # predicting the mean action
    assert loss1 < 0.5 * loss0, (loss0, loss1)
    assert err1 < 0.2 * baseline and err1 < 0.1 * err0, (err0, err1, baseline)


def test_a_pixel_diffusion_policy_is_a_residual_base_that_the_residual_starts_at(squares):
    dp = _agent(squares, action_horizon=2, act_steps=2).policy
    residual = ResidualOffPolicyAgent(1, 3, image_shapes=SHAPES, obs_normalizer=ObservationNormalizer.identity(1),
                                      action_scaler=ActionScaler(-np.ones(3), np.ones(3)), base=policy_state(dp),
                                      base_overrides={"act_steps": 1}, hidden=[16], critic_hidden=[16], num_critics=2,
                                      channels=4, feature_dim=8)
    base = residual.policy.base
    assert isinstance(base, DiffusionPolicy) and base.has_cameras and (base.To, base.Te) == (1, 1)
    batch = squares.sample(8)
    state, images = batch.observations, batch.images()
    torch.manual_seed(3)
    combined = residual.policy(state, images)
    torch.manual_seed(3)
    want = dp.predict_chunk(state[:, None], {k: v[:, None] for k, v in images.items()})[:, 0]
    torch.testing.assert_close(combined, want, rtol=0, atol=0)


def test_checkpoints_of_the_former_pixel_classes_load_into_the_merged_ones(squares):
    """A policy saved as ``PixelBCPolicy`` / ``PixelDiffusionPolicy`` (``state_dim`` kwarg; the diffusion chunk model's
    weights under ``head.``, with its identity normaliser and a copy of the action scaler) rebuilds as the merged
    class and acts as it did."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.policy import build_policy

    def old(policy, target: str, keys=lambda k: k, extra=None) -> dict:
        kwargs = {("state_dim" if k == "obs_dim" else k): v for k, v in policy.spec().items()}
        sd = {keys(k): v for k, v in policy.state_dict().items()}
        return {"target": target, "kwargs": kwargs, "state_dict": {**sd, **(extra or {})}}

    batch = squares.sample(8)
    state, images = batch.observations, batch.images()
    torch.manual_seed(0)
    bc = BCPolicy(1, 3, image_shapes=SHAPES, hidden=[16], channels=4, feature_dim=8, pooling="spatial_softmax").eval()
    rebuilt = build_policy(old(bc, "robotrl.agents.bc.pixels.PixelBCPolicy"))
    assert type(rebuilt) is BCPolicy and rebuilt.has_cameras
    torch.testing.assert_close(rebuilt(state, images), bc(state, images), rtol=0, atol=0)

    dp = _agent(squares, action_horizon=2, act_steps=2).policy
    head = {"head.obs_normalizer.mean": torch.zeros(dp.out_dim), "head.obs_normalizer.std": torch.ones(dp.out_dim),
            "head.action_scaler.low": dp.action_scaler.low.clone(), "head.action_scaler.high": dp.action_scaler.high.clone()}
    saved = old(dp, "robotrl.agents.diffusion.pixels.PixelDiffusionPolicy",
                lambda k: "head." + k if k.startswith(("denoiser.", "schedule.")) else k, head)
    assert any(k.startswith("head.denoiser.") for k in saved["state_dict"])
    rebuilt = build_policy(saved)
    assert type(rebuilt) is DiffusionPolicy and rebuilt.has_cameras
    outs = []
    for policy in (dp, rebuilt):
        torch.manual_seed(4)
        outs.append(policy.predict_chunk(state, images))
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
