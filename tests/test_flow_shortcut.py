"""Shortcut models (agents/flow/shortcut.py, loss.shortcut_loss): the loss against flow matching and a
closed-form self-consistency target, the training grid of (t, d), and the method's point — after the same
short training on a bimodal conditional target, a shortcut policy's 1-step chunk matches its 8-step chunk,
while a plain flow policy's 1-step chunk collapses to the mean of the modes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from robotrl.agents.flow import FlowAgent, FlowPolicy
from robotrl.agents.flow.loss import consistency_target, flow_matching_loss, shortcut_loss
from robotrl.agents.flow.sampling import interpolate
from robotrl.agents.flow.shortcut import ShortcutVelocity, shortcut_times, step_level
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.errors import ConfigError
from robotrl.policy import build_policy, load_policy, policy_state

NET = dict(obs_horizon=1, action_horizon=2, act_steps=1, denoiser="mlp", denoiser_kwargs={"hidden": [64, 64], "time_dim": 8})


class _Decay(nn.Module):
    """A step-conditioned field ``s(x, t, d) = −x`` (ignores ``t``, ``d``): two half steps have a closed form."""

    step_conditioned = True

    def forward(self, x, t, cond, d):
        return -x


def _shortcut_net(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return FlowPolicy(3, 2, action_horizon=4, shortcut=True, shortcut_max_steps=8,
                      denoiser_kwargs={"hidden": [32, 32], "time_dim": 8}).velocity


def test_shortcut_loss_is_flow_matching_on_d0_rows_and_two_half_steps_on_the_others():
    net, ema = _shortcut_net(0), _shortcut_net(1)
    B = 12
    x0, x1 = torch.randn(B, 4, 2), torch.rand(B, 4, 2) * 2 - 1
    cond, t = torch.randn(B, 1, 3), torch.rand(B) * 0.5
    mask = torch.rand(B, 4) > 0.2
    assert net(x0, t, cond, torch.zeros(B)).shape == (B, 4, 2)
    # d = 0 everywhere: exactly the flow-matching loss of s(x_t, t, 0)
    zeros = torch.zeros(B)
    x_t, v = interpolate(x0, x1, t)
    want = flow_matching_loss(net(x_t, t, cond, zeros), v, mask)
    torch.testing.assert_close(shortcut_loss(net, ema, x0, x1, cond, t, zeros, mask), want)
    # mixed rows: flow-matching target on d = 0 rows, the target net's two half steps on d > 0 rows
    d = torch.tensor([0.0, 0.5] * (B // 2))
    sc = d > 0
    target = v.clone()
    target[sc] = consistency_target(ema, x_t[sc], t[sc], cond[sc], d[sc])
    got = shortcut_loss(net, ema, x0, x1, cond, t, d, mask)
    torch.testing.assert_close(got, flow_matching_loss(net(x_t, t, cond, d), target, mask))
    assert not torch.allclose(got, shortcut_loss(net, net, x0, x1, cond, t, d, mask))  # the targets are ema's
    got.backward()
    assert all(p.grad is None for p in ema.parameters())  # no gradient through the targets
    # closed form: s = -x gives x' = (1 - d/2) x, target = -(x + (1 - d/2) x)/2 = -(1 - d/4) x
    x, dd = torch.rand(5, 4, 2) * 0.5, torch.tensor([1.0, 0.5, 0.25, 0.125, 1.0])
    torch.testing.assert_close(consistency_target(_Decay(), x, torch.zeros(5), cond[:5], dd),
                               -(1 - dd / 4).view(-1, 1, 1) * x)


def test_training_grid_and_step_levels():
    t, d = shortcut_times(4000, 1000, 8, generator=torch.Generator().manual_seed(0))
    assert t.shape == d.shape == (4000,)
    assert (d[1000:] == 0).all() and set(d[:1000].tolist()) == {1.0, 0.5, 0.25}  # d in {1, ..., 2/M}
    steps = (t[:1000] / d[:1000])
    torch.testing.assert_close(steps, steps.round())  # t on the grid of multiples of d
    assert ((t[:1000] + d[:1000]) <= 1).all() and (t >= 0).all() and (t < 1).all()
    assert len(set(t[1000:].tolist())) > 2900  # flow rows: continuous t
    torch.testing.assert_close(step_level(torch.tensor([0.0, 1.0, 0.5, 1 / 8, 1 / 64]), 8),
                               torch.tensor([3.0, 0.0, 1.0, 3.0, 3.0]))
    with pytest.raises(ConfigError, match="power of two"):
        ShortcutVelocity(nn.Identity(), 12)
    # every denoiser option takes the step size: its output depends on d
    x, tt, cond = torch.randn(3, 4, 2), torch.rand(3), torch.randn(3, 1, 3)
    for kind, kw in (("plain_mlp", {"hidden": [16], "time_dim": 8}), ("unet", {"channels": [8, 16], "time_dim": 8})):
        net = FlowPolicy(3, 2, action_horizon=4, shortcut=True, denoiser=kind, denoiser_kwargs=kw).velocity
        one, half = net(x, tt, cond, torch.ones(3)), net(x, tt, cond, torch.full((3,), 0.5))
        assert one.shape == (3, 4, 2) and not torch.allclose(one, half)
    with pytest.raises(ConfigError, match="shortcut_fraction"):
        FlowAgent(3, 1, obs_normalizer=ObservationNormalizer.identity(3), action_scaler=ActionScaler(-np.ones(1), np.ones(1)),
                  shortcut=True, shortcut_fraction=1.5, **NET)


def _bimodal(B: int, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Observations ``(B, 1, 3)``; chunks ``(B, 2, 1)``: ±0.6 with equal odds, shifted by 0.2·s[0], small noise."""
    s = torch.randn(B, 1, 3, generator=g)
    mode = torch.where(torch.rand(B, generator=g) < 0.5, -1.0, 1.0)
    a = (0.6 * mode)[:, None, None] + 0.2 * s[:, :, :1] + 0.05 * torch.randn(B, 2, 1, generator=g)
    return s, a.clamp(-1, 1)


def test_one_step_shortcut_sample_matches_its_eight_step_sample_and_plain_flow_does_not(one_thread):
    """Same data, updates, network and optimiser for both; only the shortcut option differs. Measured
    (800 updates): 1-vs-8-step gap 0.13 (shortcut) vs 0.56 (flow, whose 1-step chunk is near the modes' mean)."""
    gaps, one_step, agents = {}, {}, {}
    for sc in (True, False):
        torch.manual_seed(0)
        agent = FlowAgent(3, 1, obs_normalizer=ObservationNormalizer.identity(3),
                          action_scaler=ActionScaler(-np.ones(1), np.ones(1)), lr=3e-3, ema_start=10**6,
                          max_grad_norm=None, seed=0, flow_steps=1, shortcut=sc, shortcut_max_steps=8,
                          shortcut_fraction=0.5, **NET)
        g = torch.Generator().manual_seed(1)
        for u in range(800):
            s, a = _bimodal(128, g)
            agent.update(SimpleNamespace(observations=s, actions=a, mask=None), u)
        s, _ = _bimodal(512, torch.Generator().manual_seed(2))
        cond = agent.policy.condition(s)
        x0 = torch.randn(512, 2, 1, generator=torch.Generator().manual_seed(3))
        a1, a8 = (agent.policy.sample_normalized(cond, steps=k, x0=x0) for k in (1, 8))
        gaps[sc], one_step[sc] = float((a1 - a8).abs().mean()), float(a1.abs().mean())
        agents[sc] = agent
    assert gaps[True] < 0.25 and gaps[False] > 0.4 and gaps[True] < 0.4 * gaps[False], gaps
    assert one_step[True] > 0.45 > 0.3 > one_step[False], one_step  # the 1-step shortcut chunk reaches the modes
    # the shortcut policy rebuilds from its checkpointed description (the step-conditioned network included)
    pol = agents[True].policy
    again = build_policy(policy_state(pol))
    assert again.spec()["shortcut"] is True and isinstance(again.velocity, ShortcutVelocity)
    torch.testing.assert_close(again.sample_normalized(cond, steps=1, x0=x0), pol.sample_normalized(cond, steps=1, x0=x0))


def test_one_step_export_equals_the_eager_sampler(tmp_path, one_thread):
    """TorchScript and ONNX (through ONNX Runtime) exports of the 1-step shortcut sampler equal the eager one."""
    import onnxruntime as ort

    from robotrl.real_robot.export import ONNX_FILE, TS_FILE, export_policy

    pol = FlowPolicy(3, 2, action_horizon=4, flow_steps=1, shortcut=True, shortcut_max_steps=8,
                     denoiser_kwargs={"hidden": [32, 32], "time_dim": 8})
    pol.set_normalizers(ObservationNormalizer(np.ones(3), 2 * np.ones(3)), ActionScaler(-2 * np.ones(2), 2 * np.ones(2)))
    _check_one_step_export(pol, tmp_path, export_policy, ort, TS_FILE, ONNX_FILE)


def _check_one_step_export(pol: FlowPolicy, out, export_policy, ort, ts_file: str, onnx_file: str) -> None:
    """Export ``pol`` with ``K = 1``; the files' chunks equal ``export_module()``'s and the eager 1-step sampler's."""
    pol.K = 1
    obs = torch.randn(5, pol.obs_dim)
    mod = pol.export_module()
    eager = pol.action_scaler.unnormalize(pol.sample_normalized(pol.condition(obs[:, None]), steps=1,
                                                                x0=mod.x0.expand(5, -1, -1)))
    with torch.no_grad():
        torch.testing.assert_close(mod(obs), eager, atol=1e-5, rtol=0)
    export_policy(pol, out)
    ts = torch.jit.load(str(out / ts_file))
    torch.testing.assert_close(ts(obs), eager, atol=1e-5, rtol=0)
    sess = ort.InferenceSession(str(out / onnx_file), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"obs": obs.numpy()})[0], eager.numpy(), atol=1e-5, rtol=0)


DATASET_ID = "robotrl/pointmaze/umaze-shortcut-test-v0"


@pytest.mark.slow
def test_robotrl_train_experiment_flow_shortcut_then_eval_at_1_and_4_steps_and_export(tmp_path):
    """Real processes: `robotrl train experiment=flow-shortcut` (tiny budgets) writes a checkpoint whose policy
    is a shortcut flow policy; `robotrl eval flow_steps=K` evaluates it at K = 1 and 4 (K = 0 is refused);
    its 1-step sampler exports to TorchScript and ONNX equal to the eager one; ReinFlow takes its architecture."""
    import onnxruntime as ort

    from robotrl.real_robot.export import ONNX_FILE, TS_FILE, export_policy

    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "PYTHONWARNINGS": "ignore"}
    args = ["experiment=flow-shortcut", "env=pointmaze-umaze", "dataset=pointmaze-umaze-planner",
            f"dataset.id={DATASET_ID}", "dataset.recipe_args.num_steps=1500", "+dataset.recipe_args.ref_episodes=2",
            "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.progress=false", "torch_threads=1",
            "trainer.offline_steps=60", "trainer.eval_every=60", "trainer.checkpoint_every=60",
            "agent.model.denoiser_kwargs.hidden=[32,32]", "agent.model.shortcut_max_steps=8", "agent.model.ema_start=20"]
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    run = tmp_path / "runs" / "pretrain" / "flow-shortcut" / DATASET_ID.replace("/", "-") / "seed0"
    pol = load_policy(str(run))
    assert isinstance(pol, FlowPolicy) and isinstance(pol.velocity, ShortcutVelocity) and pol.K == 1
    assert pol.spec()["shortcut"] is True and pol.velocity.max_steps == 8
    for k in (1, 4):
        out = tmp_path / f"eval{k}.json"
        res = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={run}", "episodes=2",
                              "num_envs=1", f"flow_steps={k}", f"output={out}"], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=300)
        assert res.returncode == 0, res.stderr[-3000:]
        got = json.loads(out.read_text())
        assert got["flow_steps"] == k and got["episodes"] == 2.0 and got["step"] == 60
        assert got["checkpoint"] == str(run) and 0 < got["length_mean"]
    # flow_steps changes the sampler the evaluation runs: K = 1 and K = 4 give other chunks from the same noise
    from robotrl.cli import _set_flow_steps

    cond = pol.condition(torch.randn(32, pol.To, pol.obs_dim, generator=torch.Generator().manual_seed(0)))
    x0 = torch.randn(32, pol.Ta, pol.action_dim, generator=torch.Generator().manual_seed(1))
    chunks = {}
    for k in (1, 4):
        _set_flow_steps(pol, k)
        chunks[k] = pol.sample_normalized(cond, x0=x0)
    _set_flow_steps(pol, 1)
    assert not torch.allclose(chunks[1], chunks[4], atol=1e-4)
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={run}", "flow_steps=0"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0 and "flow_steps" in res.stdout + res.stderr
    _check_one_step_export(pol, tmp_path / "export", export_policy, ort, TS_FILE, ONNX_FILE)
    _check_reinflow_takes_the_shortcut_architecture(run)


def _check_reinflow_takes_the_shortcut_architecture(run) -> None:
    """`experiment=reinflow trainer.init_from=<shortcut run>` adopts the shortcut network settings from the run's
    recorded config, and the agent it configures loads the run's policy."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from robotrl.agents.reinflow import ReinFlowAgent
    from robotrl.experiment import warm_start_architecture

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=["experiment=reinflow", "env=pointmaze-umaze",
                                                      f"trainer.init_from={run}"])
    assert cfg.agent.model.shortcut is False
    model = OmegaConf.to_container(warm_start_architecture(cfg).agent.model, resolve=True)
    assert model["shortcut"] is True and model["shortcut_max_steps"] == 8 and model["denoiser_kwargs"]["hidden"] == [32, 32]
    pol = load_policy(str(run))
    keys = ("obs_horizon", "action_horizon", "act_steps", "denoiser", "denoiser_kwargs", "shortcut", "shortcut_max_steps")
    agent = ReinFlowAgent(pol.obs_dim, pol.action_dim, obs_normalizer=pol.obs_normalizer, action_scaler=pol.action_scaler,
                          flow_steps=2, noise_hidden=[16], **{k: model[k] for k in keys})
    agent.load_pretrained(str(run))
    cond, x0 = torch.randn(4, 1, pol.obs_dim), torch.randn(4, pol.Ta, pol.action_dim)
    torch.testing.assert_close(agent.policy.sample_normalized(cond, x0=x0), pol.sample_normalized(cond, steps=2, x0=x0))


def test_reinflow_warm_starts_from_a_shortcut_policy_and_its_chain_steps_use_d_1_over_k(tmp_path, one_thread):
    """A ReinFlow agent with ``shortcut=True`` loads a shortcut checkpoint; its deterministic policy is the shortcut
    policy's K-step sampler and its noisy chain's step means call the network with ``d = 1/K``. A plain-flow
    ReinFlow config refuses the checkpoint; a flow checkpoint written before the option existed still loads."""
    from robotrl.agents.reinflow import ReinFlowAgent
    from robotrl.checkpoint import save_checkpoint
    from robotrl.errors import CheckpointError

    net = dict(action_horizon=4, act_steps=4, denoiser_kwargs={"hidden": [32, 32], "time_dim": 8})
    torch.manual_seed(0)
    sc = FlowPolicy(3, 2, flow_steps=1, shortcut=True, shortcut_max_steps=8, **net)
    for p in sc.velocity.parameters():
        p.data.normal_(0.0, 0.3)
    save_checkpoint(tmp_path / "sc.pt", {"policy": policy_state(sc)})
    norms = dict(obs_normalizer=ObservationNormalizer.identity(3), action_scaler=ActionScaler(-np.ones(2), np.ones(2)))
    agent = ReinFlowAgent(3, 2, **norms, flow_steps=2, shortcut=True, shortcut_max_steps=8, noise_hidden=[16], **net)
    agent.load_pretrained(str(tmp_path / "sc.pt"))
    cond, x0 = torch.randn(6, 1, 3), torch.randn(6, 4, 2)
    torch.testing.assert_close(agent.policy.sample_normalized(cond, x0=x0), sc.sample_normalized(cond, steps=2, x0=x0))
    chain = agent.policy.sample_noisy_chain(cond, generator=torch.Generator().manual_seed(0))
    mean, _ = agent.policy.transitions(cond, chain)
    with torch.no_grad():
        want = (chain[:, 0] + 0.5 * sc.velocity(chain[:, 0], torch.zeros(6), cond, torch.full((6,), 0.5))).clamp(-1, 1)
        other = (chain[:, 0] + 0.5 * sc.velocity(chain[:, 0], torch.zeros(6), cond, torch.zeros(6))).clamp(-1, 1)
    torch.testing.assert_close(mean[:, 0], want)
    assert not torch.allclose(mean[:, 0], other)  # the step size reaches the network
    with pytest.raises(CheckpointError, match="shortcut"):
        ReinFlowAgent(3, 2, **norms, flow_steps=2, noise_hidden=[16], **net).load_pretrained(str(tmp_path / "sc.pt"))
    old = policy_state(FlowPolicy(3, 2, **net))
    for k in ("shortcut", "shortcut_max_steps"):
        del old["kwargs"][k]
    save_checkpoint(tmp_path / "old.pt", {"policy": old})
    ReinFlowAgent(3, 2, **norms, flow_steps=2, noise_hidden=[16], **net).load_pretrained(str(tmp_path / "old.pt"))


def test_a_resumed_shortcut_agent_continues_exactly(tmp_path, one_thread):
    """The agent state (trained and EMA networks, optimizer, update count, time/step generator) round-trips
    through a checkpoint file: an agent loaded from it takes the same next updates as the original."""
    from robotrl.checkpoint import load_checkpoint, save_checkpoint

    def make() -> FlowAgent:
        return FlowAgent(3, 1, obs_normalizer=ObservationNormalizer.identity(3), action_scaler=ActionScaler(-np.ones(1),
                         np.ones(1)), lr=3e-3, ema_start=5, shortcut=True, shortcut_max_steps=8, seed=3, **NET)

    g = torch.Generator().manual_seed(0)
    batches = [SimpleNamespace(observations=s, actions=a, mask=None) for s, a in (_bimodal(32, g) for _ in range(15))]
    a = make()
    for u, b in enumerate(batches[:10]):
        a.update(b, u)
    save_checkpoint(tmp_path / "a.pt", {"agent": a.state_dict()})
    b_ = make()
    b_.load_state_dict(load_checkpoint(tmp_path / "a.pt")["agent"])
    for u, b in enumerate(batches[10:], start=10):
        la, lb = a.update(b, u)["loss"], b_.update(b, u)["loss"]
        torch.testing.assert_close(la, lb, rtol=0, atol=0)
    for pa, pb in zip([*a.model.parameters(), *a.policy.parameters()], [*b_.model.parameters(), *b_.policy.parameters()]):
        torch.testing.assert_close(pa, pb, rtol=0, atol=0)
    assert b_.num_updates == 15
