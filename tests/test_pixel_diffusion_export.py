"""Export of the pixel diffusion policy (issue 17): the fixed-noise chunk with image inputs, TorchScript and ONNX,
equal to the policy's own chunk under the same noise, served by the deploy loader as chunks.

Real MuJoCo renders (OSMesa) of PointMaze UMaze's top-down camera at 32x32 as the image inputs (16x16 would leave DrQ a 1x1 map); a small untrained
policy with non-trivial normalisers (the export must carry them).
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.agents.diffusion import DiffusionPolicy  # noqa: E402
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer  # noqa: E402
from robotrl.envs import make_env, osmesa_available  # noqa: E402
from robotrl.real_robot.export import export_policy, load_deploy_policy  # noqa: E402
from robotrl.real_robot.interface import Observation  # noqa: E402
from robotrl.vision.obs import pixel_layout  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

KEY = "pixels/topdown"
TA, TE = 4, 2


@pytest.fixture(scope="module")
def renders():
    """``(state (4, Ds), frames uint8 (4, 32, 32, 3))`` from a real rollout, and the env's layout."""
    env = make_env("PointMaze_UMaze-v3", max_episode_steps=20, pixels=["topdown"], size=32)
    layout = pixel_layout(env.observation_space)
    obs, _ = env.reset(seed=0)
    states, frames = [], []
    try:
        for t in range(4):
            s, f = layout.split(obs)
            states.append(s)
            frames.append(f[KEY])
            obs, *_ = env.step(np.array([0.8, -0.5 + 0.3 * t], np.float32))
    finally:
        env.close()
    return np.stack(states).astype(np.float32), np.stack(frames), layout


def _policy(layout, sampler: str, To: int = 1) -> DiffusionPolicy:
    torch.manual_seed(0)
    p = DiffusionPolicy(layout.state_dim, 2, image_shapes=layout.image_shapes, obs_horizon=To, action_horizon=TA,
                        act_steps=TE, denoising_steps=5,
                        sampler=sampler, ddim_steps=3, denoiser_kwargs={"hidden": [32, 32], "time_dim": 8},
                        channels=4, feature_dim=8, pooling="spatial_softmax", state_layout=layout.state.to_json())
    Ds = layout.state_dim
    p.set_normalizers(ObservationNormalizer(np.linspace(-1, 1, Ds), np.full(Ds, 2.0)),
                      ActionScaler(np.array([-2.0, -0.5]), np.array([1.0, 0.5])))
    return p.eval()


def _own_chunk(policy: DiffusionPolicy, state: np.ndarray, frames: np.ndarray, seed: int) -> torch.Tensor:
    """The policy's own chunk ``(1, Ta, Da)`` for one observation, its noise drawn from ``seed``."""
    torch.manual_seed(seed)
    return policy.predict_chunk(torch.as_tensor(state)[None, None], {KEY: torch.as_tensor(frames)[None, None]})


@pytest.mark.parametrize("sampler", ["ddpm", "ddim"])
def test_chunk_export_equals_the_policys_own_chunk_under_the_same_noise(renders, sampler):
    states, frames, layout = renders
    policy = _policy(layout, sampler)
    module = policy.export_module(seed=7).eval()
    with torch.no_grad():
        got = module(torch.as_tensor(states), {KEY: torch.as_tensor(frames)})
    assert got.shape == (4, TA, 2)
    for b in range(4):  # every row runs the chain from the same fixed noise
        torch.testing.assert_close(got[b:b + 1], _own_chunk(policy, states[b], frames[b], 7), rtol=0, atol=1e-5)
    assert not torch.allclose(got[0], got[3], atol=1e-3)  # the frames and states condition the chunk
    other = policy.export_module(seed=8)(torch.as_tensor(states[:1]), {KEY: torch.as_tensor(frames[:1])})
    assert not torch.allclose(other, got[:1], atol=1e-3)  # another seed: other fixed noise


def test_exported_bundle_runs_in_torchscript_onnx_and_the_deploy_loader(renders, tmp_path):
    states, frames, layout = renders
    policy = _policy(layout, "ddim")
    paths = export_policy(policy, tmp_path / "bundle")
    meta = json.loads(paths["meta"].read_text())
    assert meta["kind"] == "pixels" and meta["chunk_len"] == TA and meta["act_steps"] == TE
    assert meta["outputs"]["actions"] == ["B", TA, 2] and meta["inputs"]["image_0"] == ["B", 32, 32, 3]
    with torch.no_grad():
        want = policy.export_module(seed=0)(torch.as_tensor(states), {KEY: torch.as_tensor(frames)}).numpy()
    ts = torch.jit.load(str(paths["torchscript"]))
    with torch.no_grad():
        np.testing.assert_allclose(ts(torch.as_tensor(states), {KEY: torch.as_tensor(frames)}).numpy(), want, atol=1e-5)
    for backend in ("onnx", "torchscript"):
        deploy = load_deploy_policy(tmp_path / "bundle", backend)
        assert (deploy.chunk_len, deploy.act_steps, deploy.cameras) == (TA, TE, (("topdown", (32, 32, 3)),))
        for b in range(4):
            chunk = deploy(Observation(states[b], 0.0, images={"topdown": frames[b]}))
            assert chunk.shape == (TA, 2)
            np.testing.assert_allclose(chunk, want[b], atol=1e-4)


def test_a_policy_on_two_steps_exports_histories_and_deploys_on_consecutive_observations(renders, tmp_path):
    """To = 2: the bundle takes ``(B, 2, Ds)`` states and ``(B, 2, H, W, C)`` frames, equals the policy's own chunk on
    the same history under the same noise, and the deploy policy takes the last two Observations, oldest first."""
    states, frames, layout = renders
    policy = _policy(layout, "ddim", To=2)
    paths = export_policy(policy, tmp_path / "bundle2")
    meta = json.loads(paths["meta"].read_text())
    assert meta["obs_horizon"] == 2 and meta["inputs"]["image_0"] == ["B", 2, 32, 32, 3]
    hist_s, hist_f = torch.as_tensor(states[None, 1:3]), {KEY: torch.as_tensor(frames[None, 1:3])}
    torch.manual_seed(0)
    want = policy.predict_chunk(hist_s, hist_f).numpy()[0]  # the policy's own chunk, its noise drawn from seed 0
    steps = [Observation(states[t], 0.0, images={"topdown": frames[t]}) for t in (1, 2)]
    for backend in ("onnx", "torchscript"):
        deploy = load_deploy_policy(tmp_path / "bundle2", backend)
        assert deploy.obs_horizon == 2
        np.testing.assert_allclose(deploy(steps), want, atol=1e-4)
        assert not np.allclose(deploy([steps[0], steps[0]]), want, atol=1e-3)  # the older step's frame is used
        with pytest.raises(ValueError, match="last To=2 observations"):
            deploy(steps[1])
