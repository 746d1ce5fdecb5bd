"""Shortcut models (agents/flow/shortcut.py, loss.shortcut_loss): the loss against flow matching and a
closed-form self-consistency target, the training grid of (t, d), and the method's point — after the same
short training on a bimodal conditional target, a shortcut policy's 1-step chunk matches its 8-step chunk,
while a plain flow policy's 1-step chunk collapses to the mean of the modes."""

from __future__ import annotations

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
from robotrl.policy import build_policy, policy_state

NET = dict(obs_horizon=1, action_horizon=2, act_steps=1, denoiser="mlp", denoiser_kwargs={"hidden": [64, 64], "time_dim": 8})


@pytest.fixture
def one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


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
    (800 updates): 1-vs-8-step gap 0.13 (shortcut) vs 0.59 (flow, whose 1-step chunk is near the modes' mean)."""
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
