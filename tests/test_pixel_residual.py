"""ResFiT on cameras (`robotrl train experiment=residual-offpolicy obs=pixels`): a residual on a frozen pixel BC or state BC
base, starting exactly at the base, the base frozen, the shared encoder's actor gradient stopped, the saved policy
acting on raw Dict observations (and `robotrl eval` / `robotrl export` with image inputs), bases that do not fit the
camera run refused.

Real processes, real MuJoCo renders (OSMesa) and real Minari datasets generated through the dataset configs (PointMaze
UMaze, the same recipe with a 32x32 top-down camera and without, 600 steps each); tiny networks and budgets.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from pixel_runs import compose_train, run_robotrl  # noqa: E402

from robotrl.agents.bc.policy import BCPolicy  # noqa: E402
from robotrl.agents.residual import ResidualOffPolicyAgent  # noqa: E402
from robotrl.checkpoint import load_arrays, load_checkpoint, save_checkpoint  # noqa: E402
from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer  # noqa: E402
from robotrl.envs import make_env_from_args, osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402
from robotrl.experiment import build_trainer  # noqa: E402
from robotrl.policy import act, load_policy, policy_state  # noqa: E402
from robotrl.vision.obs import pixel_layout  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

DATA = ["dataset.id=robotrl/pointmaze/umaze-slow-pixres-v1", "dataset.recipe_args.num_steps=600",
        "dataset.recipe_args.image_size=32", "+dataset.recipe_args.ref_episodes=2"]
RUN = ["trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.batch_size=16", "trainer.log_every=10",
       "trainer.progress=false", "torch_threads=1", "device=cpu"]
NETS = ["agent.model.channels=8", "agent.model.hidden=[32,32]"]
RES = ["experiment=residual-offpolicy", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *RUN, *NETS, "agent.model.critic_hidden=[32,32]",
       "agent.model.num_critics=2"]
# online from the first step, one actor update per critic update: the residual moves within a few steps
SHORT = ["trainer.online_warmup_steps=4", "agent.model.base_noise_steps=4", "agent.model.critic_warmup_updates=0",
         "agent.model.actor_delay=1", "agent.model.actor_lr=3e-3"]


@pytest.fixture(scope="module")
def pixel_base(minari_module_root, tmp_path_factory):
    """A bc-pixels run through `robotrl train` (its camera dataset generated on first use)."""
    run_dir = tmp_path_factory.mktemp("pixres") / "bc-pixels"
    res = run_robotrl(["train", "experiment=bc", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *RUN, *NETS, "trainer.offline_steps=20",
                       "trainer.eval_every=20", "trainer.checkpoint_every=20", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def state_base(minari_module_root, tmp_path_factory):
    """A residual-base (state BC) run on the same task's flat data (same recipe, no camera)."""
    run_dir = tmp_path_factory.mktemp("pixres") / "residual-base"
    res = run_robotrl(["train", "experiment=residual-base", "dataset.id=robotrl/pointmaze/umaze-slow-flatres-v1",
                       "dataset.recipe_args.num_steps=600", *RUN, "agent.model.hidden=[32,32]", "trainer.offline_steps=20",
                       "trainer.eval_every=20", "trainer.checkpoint_every=20", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir


def _camera_obs(ev: dict, n: int = 3, steps: int = 5) -> dict:
    """A batch of ``n`` raw camera observations of the run's env, a few random steps in."""
    envs = make_env_from_args(ev, num_envs=n, seed=7, vectorization="sync")
    try:
        obs, _ = envs.reset(seed=7)
        for _ in range(steps):
            obs, *_ = envs.step(envs.action_space.sample())
        return obs
    finally:
        envs.close()


@pytest.mark.slow
def test_residual_pixels_on_a_pixel_base_trains_checkpoints_and_evaluates(pixel_base, minari_module_root, tmp_path):
    run_dir = tmp_path / "res"
    res = run_robotrl(["train", *RES, *SHORT, f"agent.model.base={pixel_base}", "trainer.online_steps=16",
                       "trainer.eval_every=8", "trainer.checkpoint_every=8", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["gradient_updates"] == (16 - 4) * 2  # UTD 2 after the warmup

    ckpt, base = load_checkpoint(run_dir), load_checkpoint(pixel_base)["policy"]
    pol = ckpt["policy"]
    assert pol["target"] == "robotrl.agents.residual.policy.ResidualPolicy"  # the state residual's class
    assert pol["kwargs"]["base"]["target"] == "robotrl.agents.bc.policy.BCPolicy"
    assert pol["kwargs"]["state_layout"] and pol["kwargs"]["image_shapes"] == {"pixels/topdown": [32, 32, 3]}
    # the base's weights travel inside the residual policy, unchanged by training (frozen)
    for k, v in base["state_dict"].items():
        assert torch.equal(pol["state_dict"][f"base.{k}"], v), k
    assert set(pol["state_dict"]) >= {"obs_normalizer.std", "action_scaler.low", "encoder.project.0.weight"}
    assert pol["state_dict"]["residual.net.2.weight"].abs().sum() > 0  # the zero-initialised output layer learned
    frames = load_arrays(run_dir / "checkpoints" / "online_buffer.npz")["frames/pixels/topdown"]
    assert frames.dtype == np.uint8 and frames.shape == (16, 32, 32, 3) and frames.std() > 0

    out = run_robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and 0.0 <= metrics["success_rate"] <= 1.0
    # exported with image inputs (TorchScript and ONNX, each checked against the policy by the export itself)
    out = run_robotrl(["export", str(run_dir), str(tmp_path / "bundle")], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    meta = json.loads((tmp_path / "bundle" / "policy_meta.json").read_text())
    assert meta["kind"] == "pixels" and meta["obs_dim"] == 8 and meta["action_dim"] == 2
    assert (tmp_path / "bundle" / "policy.onnx").is_file() and (tmp_path / "bundle" / "policy.torchscript.pt").is_file()


def _base_actions(kind: str, source, obs: dict, space) -> np.ndarray:
    """The base run's own policy, loaded alone, on the raw camera observations (a state base on their flat state)."""
    base = load_policy(str(source))
    if kind == "pixel":
        return act(base, obs)
    state, _ = pixel_layout(space).split(obs)
    return act(base, state)


@pytest.mark.parametrize("kind", ["pixel", "state"])
def test_the_residual_starts_at_its_base_keeps_it_frozen_and_reloads(kind, pixel_base, state_base, tmp_path):
    source = pixel_base if kind == "pixel" else state_base
    runner = build_trainer(compose_train([*RES, *SHORT, f"agent.model.base={source}", "trainer.online_steps=12",
                                          "trainer.eval_every=100", "trainer.checkpoint_every=100",
                                          f"run_dir={tmp_path / kind}"]), tmp_path / kind)
    agent = runner.loop.agent
    ev = runner.run_config["derived"]["eval_env"]
    obs = _camera_obs(ev)
    space = make_env_from_args(ev).observation_space
    want = _base_actions(kind, source, obs, space)
    np.testing.assert_array_equal(agent.act(obs), want)  # r = 0 at the start: exactly the base's actions
    frozen = {k: v.clone() for k, v in agent.policy.base.state_dict().items()}
    encoder = {k: v.clone() for k, v in agent.policy.encoder.state_dict().items()}

    runner.fit()
    for k, v in agent.policy.base.state_dict().items():
        assert torch.equal(v, frozen[k]), k
    assert not all(torch.equal(v, encoder[k]) for k, v in agent.policy.encoder.state_dict().items())
    after = agent.act(obs)
    assert np.abs(after - want).max() > 0  # the residual acts now
    np.testing.assert_array_equal(_base_actions(kind, source, obs, space), want)
    # the saved policy, rebuilt alone, acts identically on the raw Dict observations
    np.testing.assert_array_equal(act(load_policy(str(tmp_path / kind)), obs), after)


# ---------------------------------------------------------------------------------------------- in-process pieces
SHAPES = {"pixels/cam": (16, 16, 3)}


def _pixel_bc(**kw) -> BCPolicy:
    return BCPolicy(kw.pop("state_dim", 3), 2, image_shapes={**SHAPES, **kw.pop("shapes", {})}, hidden=[16], channels=4,
                    feature_dim=8, pooling="spatial_softmax", **kw)


def _agent(base, **kw) -> ResidualOffPolicyAgent:
    return ResidualOffPolicyAgent(3, 2, image_shapes=SHAPES, obs_normalizer=ObservationNormalizer.identity(3),
                                  action_scaler=ActionScaler(-np.ones(2), np.ones(2)), base=base, hidden=[16],
                                  critic_hidden=[16], num_critics=2, channels=4, feature_dim=8, seed=0, **kw)


def _buffer(n: int = 24) -> ReplayBuffer:
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(n, 3, 2, image_shapes=SHAPES, seed=0)
    for t in range(n):
        img = {k: rng.integers(0, 256, (1, *s), dtype=np.uint8) for k, s in SHAPES.items()}
        nxt = {k: rng.integers(0, 256, (1, *s), dtype=np.uint8) for k, s in SHAPES.items()}
        buf.add(rng.normal(size=(1, 3)), rng.uniform(-1, 1, (1, 2)), [float(t % 3 == 0)], rng.normal(size=(1, 3)),
                [t % 8 == 7], [False], images=img, next_images=nxt)
    return buf


def test_the_actor_gradient_stops_at_the_shared_encoder_which_the_critic_trains():
    agent = _agent(_pixel_bc(), critic_warmup_updates=0, actor_delay=1)
    batch = _buffer().sample(8)
    state, images = batch.observations, batch.images()
    agent.policy.train()
    z = agent.policy.features(state, images)
    assert z.requires_grad
    agent.actor_loss(state, z, images)[0].backward()
    enc = list(agent.policy.encoder.parameters())
    assert all(p.grad is None for p in enc)  # the actor's loss never reaches the encoder
    assert agent.policy.residual.net[-1].weight.grad.abs().sum() > 0  # it reaches the residual
    assert all(p.grad is None for p in agent.policy.base.parameters())

    agent.policy.zero_grad(set_to_none=True)
    before = [p.detach().clone() for p in enc]
    metrics = agent.update(batch, 0)
    assert "actor_loss" in metrics
    assert any(not torch.equal(p, b) for p, b in zip(enc, before))  # the critic's loss trains it


def _saved(tmp_path, module, name: str):
    return save_checkpoint(tmp_path / f"{name}.pt", {"policy": policy_state(module)})


def test_bases_that_do_not_fit_the_camera_run_are_refused(pixel_base, tmp_path):
    run = [*RES, "trainer.online_steps=10"]
    state = load_checkpoint(pixel_base)
    state["policy"]["kwargs"]["image_shapes"] = {"pixels/front": [32, 32, 3]}
    other_cam = save_checkpoint(tmp_path / "front.pt", state)
    with pytest.raises(ConfigError, match=r"cameras \{'pixels/front': \[32, 32, 3\]\}.*'pixels/topdown'.*experiment=bc obs=pixels"):
        build_trainer(compose_train([*run, f"agent.model.base={other_cam}"]), tmp_path / "a")
    state["policy"]["kwargs"]["image_shapes"] = {"pixels/topdown": [16, 16, 3]}  # spatial softmax: the weights fit
    small = save_checkpoint(tmp_path / "small.pt", state)
    with pytest.raises(ConfigError, match=r"\[16, 16, 3\].*\[32, 32, 3\]"):
        build_trainer(compose_train([*run, f"agent.model.base={small}"]), tmp_path / "b")
    with pytest.raises(ConfigError, match="agent.model.base=.*missing.*cannot be loaded.*experiment=bc obs=pixels"):
        build_trainer(compose_train([*run, f"agent.model.base={tmp_path / 'missing'}"]), tmp_path / "c")
    assert not (tmp_path / "a" / "checkpoints").exists()

    with pytest.raises(ConfigError, match="states of size 4.*Ds=3"):
        _agent(_saved(tmp_path, BCPolicy(4, 2, hidden=[8]), "state4"))
    with pytest.raises(ConfigError, match="states of size 5.*Ds=3"):
        _agent(_pixel_bc(state_dim=5))
    with pytest.raises(ConfigError, match="cameras"):
        _agent(_pixel_bc(shapes={"pixels/wrist": (16, 16, 3)}))
    with pytest.raises(ConfigError, match="Da=3"):
        _agent(BCPolicy(3, 3, hidden=[8]))
    from robotrl.agents.diffusion import DiffusionPolicy

    chunked = _saved(tmp_path, DiffusionPolicy(3, 2, action_horizon=4, act_steps=4, denoising_steps=2,
                                               denoiser_kwargs={"hidden": [8]}), "chunked")
    with pytest.raises(ConfigError, match=r"executes chunks.*base_overrides=\{act_steps:1\}"):
        _agent(chunked)
    assert _agent(chunked, base_overrides={"act_steps": 1}).policy.base.Te == 1  # the way out works


def test_residual_ppo_refuses_cameras_with_the_way_out():
    from robotrl.agents.residual import ResidualPPOAgent

    with pytest.raises(ConfigError, match="residual PPO learns from states only.*agent=residual-offpolicy obs=pixels"):
        ResidualPPOAgent(3, 2, obs_normalizer=ObservationNormalizer.identity(3),
                         action_scaler=ActionScaler(-np.ones(2), np.ones(2)), image_shapes=SHAPES)
