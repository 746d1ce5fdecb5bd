"""Flow-matching policy: the rectified-flow path, Euler sampling against what the ODE theory
gives, the chunk export, the deployable policy's rebuild, and `robotrl train experiment=flow`
→ checkpoint → `robotrl eval` as real processes on a generated PointMaze dataset."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from robotrl.agents.flow import FlowAgent, FlowPolicy
from robotrl.agents.flow.sampling import euler_sample, euler_times, interpolate
from robotrl.checkpoint import load_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.policy import build_policy, load_policy, policy_state

TINY = dict(obs_horizon=1, action_horizon=4, act_steps=2, denoiser="mlp", denoiser_kwargs={"hidden": [32, 32], "time_dim": 8})


class _Straight(nn.Module):
    """The exact rectified-flow velocity towards a single point ``a``: ``v(x, t) = (a − x)/(1 − t)``."""

    def __init__(self, a: torch.Tensor):
        super().__init__()
        self.a = a

    def forward(self, x, t, cond):
        return (self.a - x) / (1 - t).view(-1, 1, 1)


class _Decay(nn.Module):
    """``v(x, t) = −x``: a curved (non-rectified) flow, ``x(1) = x(0)/e`` exactly."""

    def forward(self, x, t, cond):
        return -x


def test_interpolation_path_ends_and_velocity():
    x0, x1 = torch.randn(5, 4, 2), torch.rand(5, 4, 2) * 2 - 1
    t = torch.tensor([0.0, 1.0, 0.5, 0.25, 0.75])
    xt, v = interpolate(x0, x1, t)
    torch.testing.assert_close(xt[0], x0[0])
    torch.testing.assert_close(xt[1], x1[1])
    torch.testing.assert_close(xt[2], 0.5 * (x0[2] + x1[2]))
    torch.testing.assert_close(v, x1 - x0)
    # moving along v for the remaining time lands on the action
    torch.testing.assert_close(xt + (1 - t).view(-1, 1, 1) * v, x1)
    assert euler_times(4).tolist() == [0.0, 0.25, 0.5, 0.75]
    with pytest.raises(ValueError, match="flow_steps"):
        euler_times(0)


def test_euler_on_a_straight_field_is_exact_for_every_k_and_converges_on_a_curved_one():
    cond = torch.zeros(6, 1, 3)
    a = torch.rand(1, 4, 2) * 1.6 - 0.8
    x0 = torch.randn(6, 4, 2)
    # rectified (straight) flow: 1 step and K steps land exactly on the target
    for K in (1, 2, 4, 8):
        torch.testing.assert_close(euler_sample(_Straight(a), cond, x0, K, x_clip=None), a.expand(6, -1, -1),
                                   atol=1e-5, rtol=0)
    # a curved field: K-step Euler is x0·(1 − 1/K)^K, converging to x0/e with error O(1/K)
    x0 = torch.rand(6, 4, 2) * 0.9
    errs = []
    for K in (1, 2, 4, 16, 256):
        got = euler_sample(_Decay(), cond, x0, K, x_clip=None)
        torch.testing.assert_close(got, x0 * (1 - 1 / K) ** K)
        errs.append(float((got - x0 / math.e).abs().max()))
    assert all(e2 < e1 for e1, e2 in zip(errs, errs[1:])) and errs[-1] < 2e-3


def test_a_flow_trained_on_one_action_chunk_samples_it_at_1_and_4_steps(one_thread):
    """Rectified flow to a single point is straight, so 1-step and K-step sampling agree (theory: exactly;
    here up to the fit of a tiny net after 500 updates)."""
    torch.manual_seed(0)
    agent = FlowAgent(3, 1, obs_normalizer=ObservationNormalizer.identity(3), action_scaler=ActionScaler(-np.ones(1), np.ones(1)),
                      lr=3e-3, ema_start=10_000, max_grad_norm=None, seed=0, flow_steps=4,
                      **{**TINY, "action_horizon": 2, "act_steps": 1, "denoiser_kwargs": {"hidden": [64, 64], "time_dim": 8}})
    target = torch.tensor([[0.5], [-0.3]])
    obs = torch.randn(64, 1, 3)

    def errors():
        torch.manual_seed(1)
        one, four = agent.policy.predict_chunk(obs, steps=1), agent.policy.predict_chunk(obs, steps=4)
        return [float(e.abs().mean()) for e in (one - target, four - target, one - four)]

    assert errors()[0] > 0.3  # untrained: far from the target
    for u in range(500):
        batch = SimpleNamespace(observations=torch.randn(64, 1, 3), actions=target.expand(64, -1, -1), mask=None)
        agent.update(batch, u)
    e1, e4, e14 = errors()
    assert e1 < 0.12 and e4 < 0.05 and e14 < 0.12, (e1, e4, e14)


def test_export_equals_the_policy_for_the_same_start_noise_and_the_policy_rebuilds():
    torch.manual_seed(0)
    pol = FlowPolicy(3, 2, flow_steps=3, **TINY)
    pol.set_normalizers(ObservationNormalizer(np.ones(3), 2 * np.ones(3)), ActionScaler(-2 * np.ones(2), 2 * np.ones(2)))
    exp = pol.export_module(seed=5)
    obs = torch.randn(7, 3)
    got = exp(obs)
    want = pol.action_scaler.unnormalize(pol.sample_normalized(pol.condition(obs[:, None]), x0=exp.x0.expand(7, -1, -1)))
    torch.testing.assert_close(got, want)
    assert got.shape == (7, 4, 2) and got.abs().max() <= 2.0
    traced = torch.jit.trace(exp, obs)
    torch.testing.assert_close(traced(obs), got)
    # the checkpointed description rebuilds the same policy (kwargs JSON-able, weights, normalisers)
    state = policy_state(pol)
    json.dumps(state["kwargs"])
    again = build_policy(state)
    torch.manual_seed(1)
    a = again.predict_chunk(obs)
    torch.manual_seed(1)
    torch.testing.assert_close(a, pol.predict_chunk(obs))
    # per-step acting executes Te = 2 actions of a chunk, then replans
    pol.reset()
    acts = [pol(obs[:2]) for _ in range(4)]
    assert all(x.shape == (2, 2) for x in acts)
    with pytest.raises(ValueError, match="act_steps"):
        FlowPolicy(3, 2, **{**TINY, "act_steps": 5})


DATASET_ID = "robotrl/pointmaze/umaze-flow-test-v0"


@pytest.mark.slow
def test_robotrl_train_experiment_flow_then_robotrl_eval(tmp_path):
    """Real processes: pretraining writes runs/pretrain/flow/<dataset>/seed0 (the ReinFlow warm-start path);
    its checkpoint rebuilds the EMA flow policy; `robotrl eval` evaluates it; `experiment=flow-distill`
    distils it into a one-step flow policy."""
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "PYTHONWARNINGS": "ignore"}
    common = ["env=pointmaze-umaze", "dataset=pointmaze-umaze-planner", f"dataset.id={DATASET_ID}",
              "dataset.recipe_args.num_steps=1500", "+dataset.recipe_args.ref_episodes=2", "trainer.eval_episodes=2",
              "trainer.eval_envs=2", "trainer.progress=false", "torch_threads=1"]
    args = ["experiment=flow", *common, "trainer.offline_steps=100", "trainer.eval_every=100",
            "trainer.checkpoint_every=100", "agent.model.denoiser_kwargs.hidden=[32,32]", "agent.model.flow_steps=2",
            "agent.model.ema_start=20"]
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "pretrain" / "flow" / DATASET_ID.replace("/", "-") / "seed0"
    pol = load_policy(str(run))
    assert isinstance(pol, FlowPolicy) and pol.K == 2 and pol.Te == 4
    assert pol.spec()["denoiser_kwargs"]["hidden"] == [32, 32]
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={run}", "episodes=2", "num_envs=1",
                          f"output={tmp_path / 'eval.json'}"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads((tmp_path / "eval.json").read_text())
    # it evaluated this run's checkpoint on the run's evaluation env, scored against the run's reference scores
    assert out["episodes"] == 2.0 and out["step"] == 100 and out["checkpoint"] == str(run)
    lo, hi = load_checkpoint(run)["config"]["derived"]["ref_scores"]
    assert out["normalized_score"] == pytest.approx(100.0 * (out["return_mean"] - lo) / (hi - lo), rel=1e-6, abs=1e-6)
    assert 0 < out["length_mean"] <= load_checkpoint(run)["config"]["derived"]["eval_env"]["max_episode_steps"]
    # one-step distillation finds the pretraining run by the experiments' default path and takes its network
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", "experiment=flow-distill", *common,
                          "trainer.offline_steps=50", "trainer.eval_every=50", "trainer.checkpoint_every=50"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "architecture taken from the checkpoint" in res.stdout
    student = load_policy(str(tmp_path / "runs" / "pretrain" / "flow-distill" / DATASET_ID.replace("/", "-") / "seed0"))
    assert isinstance(student, FlowPolicy) and student.K == 1 and student.spec()["denoiser_kwargs"]["hidden"] == [32, 32]
