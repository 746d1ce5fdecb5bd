"""Export to TorchScript and ONNX: outputs match the PyTorch policy, normalisers included, no training code needed."""

from __future__ import annotations

import subprocess
import time
import sys

import numpy as np
import pytest
import torch
from torch import nn

from robotrl.agents.bc.policy import BCPolicy
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.envs import osmesa_available
from robotrl.real_robot.export import export_policy, load_deploy_policy


class ChunkedPolicy(nn.Module):
    """A chunked policy (Ta = 6, Te = 3) built on a BC policy: ``(B, Do) -> (B, Ta, Da)``."""

    def __init__(self, base: BCPolicy, ta: int = 6, te: int = 3):
        super().__init__()
        self.base, self.obs_dim, self.action_dim, self.chunk_len, self.act_steps = base, base.obs_dim, base.action_dim, ta, te
        self.offsets = nn.Parameter(torch.randn(ta, base.action_dim) * 0.1)

    def forward(self, obs):
        return self.base(obs)[:, None, :] + self.offsets

    def spec(self):
        return {"ta": self.chunk_len}


def _with_norms(policy) -> np.random.Generator:
    """Give a ``Do = 5``, ``Da = 3`` policy non-trivial normalisers (the export must carry them); returns the
    generator that drew them (seed 0), for the test's further draws."""
    rng = np.random.default_rng(0)
    policy.set_normalizers(ObservationNormalizer(rng.normal(size=5), rng.uniform(0.5, 2, 5)),
                           ActionScaler(-rng.uniform(1, 3, 3), rng.uniform(1, 3, 3)))
    return rng


def _bc():
    torch.manual_seed(0)
    p = BCPolicy(5, 3, hidden=(16, 16))
    _with_norms(p)
    return p.eval()


@pytest.mark.parametrize("kind", ["mlp", "chunked"])
def test_exports_match_pytorch(tmp_path, kind):
    policy = _bc() if kind == "mlp" else ChunkedPolicy(_bc()).eval()
    paths = export_policy(policy, tmp_path / kind)
    obs = np.random.default_rng(1).normal(scale=3, size=(7, 5)).astype(np.float32)
    with torch.no_grad():
        want = policy(torch.as_tensor(obs)).numpy()
    want = want[:, None] if want.ndim == 2 else want
    for backend in ("onnx", "torchscript"):
        dp = load_deploy_policy(paths["meta"].parent, backend)
        assert dp.backend == backend and (dp.chunk_len, dp.act_steps) == ((1, 1) if kind == "mlp" else (6, 3))
        np.testing.assert_allclose(dp.batch_fn(obs), want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dp(obs[2]), want[2], rtol=1e-5, atol=1e-5)
    # the normalisers are inside the graph: the same weights with identity statistics give other actions
    plain = BCPolicy(5, 3, hidden=(16, 16))
    plain.actor.load_state_dict((policy if kind == "mlp" else policy.base).actor.state_dict())
    with torch.no_grad():
        assert not np.allclose(plain(torch.as_tensor(obs)).numpy(), want[:, 0], atol=1e-3)


def test_export_runs_without_the_training_code(tmp_path):
    paths = export_policy(_bc(), tmp_path / "exp")
    code = ("import sys, numpy as np, onnxruntime as ort; sys.modules['robotrl'] = None; sys.modules['torch'] = None\n"
            f"s = ort.InferenceSession(r'{paths['onnx']}', providers=['CPUExecutionProvider'])\n"
            "print(s.run(['actions'], {'obs': np.ones((2, 5), np.float32)})[0].shape)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "(2, 1, 3)"


def test_bad_inputs_are_explained(tmp_path):
    with pytest.raises(ValueError, match="unknown export formats"):
        export_policy(_bc(), tmp_path, formats=("tflite",))
    with pytest.raises(ValueError, match="obs_dim"):
        export_policy(nn.Linear(2, 2), tmp_path)
    dp = load_deploy_policy(export_policy(_bc(), tmp_path / "e")["meta"].parent)
    with pytest.raises(ValueError, match="Do=5"):
        dp(np.zeros(4))


@pytest.mark.parametrize("sampler", ["ddim", "ddpm"])
def test_diffusion_policy_exports_its_fixed_noise_chain(tmp_path, sampler):
    """A diffusion policy (DDIM with a fixed number of steps, or DDPM) exports with its normalisers;
    the export equals the policy's own sampler run with the same seeded noise."""
    from robotrl.agents.diffusion.policy import DiffusionPolicy
    from robotrl.agents.diffusion.sampling import sample_chain

    torch.manual_seed(0)
    policy = DiffusionPolicy(5, 3, action_horizon=4, act_steps=2, denoising_steps=10, sampler=sampler, ddim_steps=4,
                             denoiser_kwargs={"hidden": [32, 32]})
    rng = _with_norms(policy)
    policy.eval()
    paths = export_policy(policy, tmp_path / sampler)
    obs = rng.normal(scale=2, size=(1, 5)).astype(np.float32)
    with torch.no_grad():
        cond = policy.condition(torch.as_tensor(obs)[:, None])
        x, _ = sample_chain(policy.schedule, policy.net_for_step, cond, (4, 3), sampler=sampler, ddim_steps=4,
                            eta=policy.ddim_eta, min_std=policy.eval_min_std if sampler == "ddpm" else 0.0,
                            eps_clip=policy.eps_clip, generator=torch.Generator().manual_seed(0))
        want = policy.action_scaler.unnormalize(x).numpy()
    for backend in ("onnx", "torchscript"):
        dp = load_deploy_policy(paths["meta"].parent, backend)
        assert (dp.chunk_len, dp.act_steps) == (4, 2)
        np.testing.assert_allclose(dp.batch_fn(obs), want, rtol=1e-4, atol=1e-4)
    batch = np.repeat(obs, 3, axis=0)  # fixed noise: identical rows give identical chunks, batch size is dynamic
    out = load_deploy_policy(paths["meta"].parent, "onnx").batch_fn(batch)
    assert out.shape == (3, 4, 3) and np.allclose(out, want, atol=1e-4)


def _twin_observations(px: int = 32, n: int = 6):
    """Observations (state (8,), topdown uint8 (px, px, 3)) of the PointMaze twin, rendered here (OSMesa)."""
    from robotrl.real_robot.sim import MuJoCoTwin

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=px)
    rng = np.random.default_rng(5)
    with twin:
        out = [twin.reset(seed=3)]
        for _ in range(n - 1):
            twin.send_action(rng.uniform(-1, 1, 2).astype(np.float32))
            out.append(twin.get_observation())
    return out, twin.spec()


@pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")
def test_pixel_bundle_matches_the_policy_on_rendered_frames_and_refuses_other_cameras(tmp_path):
    """A pixel BC policy's bundle (TorchScript, ONNX) and its checkpoint act on the twin's Observations
    (state + real rendered frames) as the policy does; the metadata names the cameras and the state layout."""
    import json
    import os

    os.environ.setdefault("MUJOCO_GL", "osmesa")
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.errors import ConfigError, SpaceMismatchError
    from robotrl.policy import policy_state
    from robotrl.real_robot.export import check_cameras
    from robotrl.real_robot.interface import CameraSpec, Observation

    layout = json.dumps({"keys": ["achieved_goal", "desired_goal", "observation"], "shapes": [[2], [2], [4]]})
    torch.manual_seed(0)
    policy = BCPolicy(8, 2, image_shapes={"pixels/topdown": (32, 32, 3)}, hidden=(32,), channels=8, feature_dim=16, state_layout=layout)
    rng = np.random.default_rng(0)
    policy.set_normalizers(ObservationNormalizer(rng.normal(size=8), rng.uniform(0.5, 2, 8)),
                           ActionScaler(np.array([-1.0, -0.5]), np.array([1.0, 0.5])))
    policy.eval()
    paths = export_policy(policy, tmp_path / "bundle")
    meta = json.loads(paths["meta"].read_text())
    assert meta["kind"] == "pixels" and meta["cameras"] == [{"name": "topdown", "key": "pixels/topdown", "shape": [32, 32, 3]}]
    assert meta["state"] == {"dim": 8, "layout": json.loads(layout)} and (meta["obs_dim"], meta["action_dim"]) == (8, 2)
    ckpt = tmp_path / "policy.pt"
    save_checkpoint(ckpt, {"policy": policy_state(policy)})

    observations, spec = _twin_observations()
    assert not np.array_equal(observations[0].images["topdown"], observations[-1].images["topdown"])
    with torch.no_grad():
        want = np.stack([policy(torch.as_tensor(o.state)[None], {"pixels/topdown": torch.as_tensor(o.images["topdown"])[None]})
                         .numpy()[0] for o in observations])
    assert np.ptp(want, axis=0).min() > 1e-3  # the frames and states change the actions: a real comparison
    for backend, where in (("onnx", paths["meta"].parent), ("torchscript", paths["meta"].parent), ("torch", ckpt)):
        dp = load_deploy_policy(where, backend)
        assert dp.backend == backend and dp.cameras == (("topdown", (32, 32, 3)),) and (dp.chunk_len, dp.act_steps) == (1, 1)
        got = np.stack([dp(o) for o in observations])
        assert got.shape == (len(observations), 1, 2)
        np.testing.assert_allclose(got[:, 0], want, atol=1e-4, rtol=0)
        check_cameras(dp, spec)  # the twin's 32 px topdown camera: accepted
        with pytest.raises(SpaceMismatchError, match="carries no frames"):
            dp(Observation(observations[0].state, 0.0))
        with pytest.raises(SpaceMismatchError, match=r"uint8 \(32, 32, 3\)"):
            dp(Observation(observations[0].state, 0.0, images={"topdown": np.zeros((64, 64, 3), np.uint8)}))
    import dataclasses

    other = dataclasses.replace(spec, cameras=(CameraSpec("topdown", (64, 64, 3), 100.0), CameraSpec("wrist", (32, 32, 3), 100.0)))
    with pytest.raises(ConfigError, match=r"'topdown' sends \(64, 64, 3\), the policy takes \(32, 32, 3\).*robot.image_size=32"):
        check_cameras(dp, other)
    with pytest.raises(ConfigError, match=r"'topdown' \(32, 32, 3\) is missing.*robot.cameras=\[topdown\]"):
        check_cameras(dp, dataclasses.replace(spec, cameras=()))
    check_cameras(load_deploy_policy(export_policy(_bc(), tmp_path / "state")["meta"].parent), other)  # state policy: any robot


def test_torchscript_deploy_runs_the_export_optimised_for_this_machine_or_as_saved(tmp_path):
    """The TorchScript backend freezes and optimises the loaded module where it runs (same outputs to 1e-5); a
    module the optimiser refuses (here: one in training mode, which torch.jit.freeze rejects) runs as saved."""
    from robotrl.real_robot.export import optimized_for_this_machine

    policy = ChunkedPolicy(_bc()).eval()
    paths = export_policy(policy, tmp_path / "e", formats=("torchscript",))
    saved = torch.jit.load(str(paths["torchscript"])).eval()
    example = torch.zeros(1, 5)
    opt = optimized_for_this_machine(saved, example)
    assert opt is not saved and not list(opt.parameters())  # frozen: the weights are constants of the graph
    obs = torch.as_tensor(np.random.default_rng(2).normal(scale=3, size=(4, 5)).astype(np.float32))
    with torch.no_grad():
        torch.testing.assert_close(opt(obs), saved(obs), rtol=1e-5, atol=1e-5)
    training = torch.jit.load(str(paths["torchscript"])).train()
    assert optimized_for_this_machine(training, example) is training


def _history_policy(kind: str):
    """A diffusion (DDIM) or flow chunk policy on the last To = 2 observations (Do = 5, Ta = 4, Te = 2, Da = 3)."""
    from robotrl.agents.diffusion.policy import DiffusionPolicy
    from robotrl.agents.flow.policy import FlowPolicy

    torch.manual_seed(0)
    kw = dict(obs_horizon=2, action_horizon=4, act_steps=2, denoiser_kwargs={"hidden": [32, 32]})
    policy = (DiffusionPolicy(5, 3, denoising_steps=10, sampler="ddim", ddim_steps=4, **kw) if kind == "diffusion"
              else FlowPolicy(5, 3, flow_steps=3, **kw))
    _with_norms(policy)
    return policy.eval()


@pytest.mark.parametrize("kind", ["diffusion", "flow"])
def test_chunk_policies_on_an_observation_history_export_and_deploy_with_it(tmp_path, kind):
    """To = 2: the export takes ``(B, To, Do)`` histories and equals the policy's own chain with the export's fixed
    noise; the older observation changes the chunk; a single observation is refused with the way out."""
    policy = _history_policy(kind)
    paths = export_policy(policy, tmp_path / kind)
    hist = np.random.default_rng(1).normal(scale=2, size=(1, 2, 5)).astype(np.float32)
    with torch.no_grad():
        cond = policy.condition(torch.as_tensor(hist))
        if kind == "diffusion":
            from robotrl.agents.diffusion.sampling import sample_chain

            x, _ = sample_chain(policy.schedule, policy.net_for_step, cond, (4, 3), sampler="ddim", ddim_steps=4,
                                eta=policy.ddim_eta, min_std=0.0, eps_clip=policy.eps_clip,
                                generator=torch.Generator().manual_seed(0))
        else:
            x0 = torch.randn((1, 4, 3), generator=torch.Generator().manual_seed(0))
            x = policy.sample_normalized(cond, x0=x0).clamp(-1, 1)
        want = policy.action_scaler.unnormalize(x).numpy()
    older = hist.copy()
    older[:, 0] += 1.0
    for backend in ("onnx", "torchscript"):
        dp = load_deploy_policy(paths["meta"].parent, backend)
        assert (dp.obs_horizon, dp.chunk_len, dp.act_steps) == (2, 4, 2)
        np.testing.assert_allclose(dp(hist[0]), want[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dp(list(hist[0])), want[0], rtol=1e-4, atol=1e-4)  # a sequence of To states
        assert not np.allclose(dp(older[0]), want[0], atol=1e-3)  # the history is used, not only the latest state
        with pytest.raises(ValueError, match="last To=2 observations"):
            dp(hist[0, 1])
    import json

    assert json.loads(paths["meta"].read_text())["inputs"]["obs"] == ["B", 2, 5]


def test_chunk_scheduler_hands_a_history_policy_consecutive_steps_and_restarts_it_per_episode(tmp_path):
    """The scheduler pushes every tick's state (not only those where a chunk is requested): the chunk requested at
    tick k is the policy's on (state k−1, state k), the episode's first padded with itself; reset starts over."""
    from robotrl.real_robot.control import ChunkScheduler

    dp = load_deploy_policy(export_policy(_history_policy("diffusion"), tmp_path / "d")["meta"].parent, "onnx")
    states = np.random.default_rng(2).normal(size=(7, 5)).astype(np.float32)
    sched = ChunkScheduler(dp, act_steps=2)
    try:
        for episode in range(2):
            sched.reset()
            got = [sched.next_action(s, k, time.monotonic() + 10) for k, s in enumerate(states)]
            for k in range(0, 7):
                start = k - k % 2  # Te = 2: chunks are requested at even ticks
                hist = states[[max(start - 1, 0), start]][None]
                np.testing.assert_allclose(got[k], dp.batch_fn(hist)[0][k % 2], rtol=1e-5, atol=1e-5)
    finally:
        sched.close()
