"""Export to TorchScript and ONNX: outputs match the PyTorch policy, normalisers included, no training code needed."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from robotrl.agents.bc.policy import BCPolicy
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
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


def _bc():
    torch.manual_seed(0)
    p = BCPolicy(5, 3, hidden=(16, 16))
    rng = np.random.default_rng(0)
    p.set_normalizers(ObservationNormalizer(rng.normal(size=5), rng.uniform(0.5, 2, 5)),
                      ActionScaler(-rng.uniform(1, 3, 3), rng.uniform(1, 3, 3)))
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
    rng = np.random.default_rng(0)
    policy.set_normalizers(ObservationNormalizer(rng.normal(size=5), rng.uniform(0.5, 2, 5)),
                           ActionScaler(-rng.uniform(1, 3, 3), rng.uniform(1, 3, 3)))
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
