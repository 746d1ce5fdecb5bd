"""ObservationNormalizer and ActionScaler: statistics from data, round trips, bounds, state_dict."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer


def test_from_data_gives_zero_mean_unit_std():
    rng = np.random.default_rng(0)
    obs = rng.normal(loc=[5.0, -3.0, 100.0], scale=[0.1, 4.0, 30.0], size=(2000, 3)).astype(np.float32)
    norm = ObservationNormalizer.from_data(obs)
    x = norm(torch.from_numpy(obs)).double()
    np.testing.assert_allclose(x.mean(0).numpy(), 0.0, atol=1e-5)
    np.testing.assert_allclose(x.std(0, unbiased=False).numpy(), 1.0, atol=1e-5)
    np.testing.assert_allclose(norm.mean.numpy(), obs.astype(np.float64).mean(0), rtol=1e-6)
    # (B, To, Do) inputs normalise over the last dimension; unnormalize inverts
    seq = torch.from_numpy(obs[:12].reshape(4, 3, 3))
    torch.testing.assert_close(norm.unnormalize(norm(seq)), seq, rtol=1e-5, atol=1e-4)


def test_constant_features_do_not_blow_up():
    obs = np.zeros((100, 3), np.float32)
    obs[:, 0] = 7.0  # constant
    obs[:, 1] = np.linspace(-1, 1, 100)
    obs[:, 2] = 1e-9 * np.arange(100)  # numerically constant
    norm = ObservationNormalizer.from_data(obs)
    assert norm.std[0].item() == 1.0 and norm.std[2].item() == 1.0
    x = norm(torch.from_numpy(obs))
    assert torch.isfinite(x).all()
    assert torch.all(x[:, 0] == 0.0)
    # an unseen value of a constant feature stays finite and moderate
    probe = torch.tensor([[8.0, 0.0, 1.0]])
    assert torch.isfinite(norm(probe)).all() and norm(probe)[0, 0].item() == pytest.approx(1.0)
    # an explicit zero std is floored at eps (1e-6), never divides by zero
    zero = ObservationNormalizer([0.0], [0.0])
    assert zero.std.item() == pytest.approx(1e-6) and zero(torch.tensor([[1e-6]])).item() == pytest.approx(1.0)


def test_clip_and_identity():
    norm = ObservationNormalizer([0.0, 0.0], [1.0, 1.0], clip=5.0)
    assert norm(torch.tensor([[100.0, -100.0]])).tolist() == [[5.0, -5.0]]
    ident = ObservationNormalizer.identity(4)
    x = torch.randn(3, 4)
    assert torch.equal(ident(x), x)


def test_action_scaler_round_trip_and_range():
    low, high = np.array([-2.0, 0.0, -1.0], np.float32), np.array([2.0, 10.0, 3.0], np.float32)
    sc = ActionScaler(low, high)
    rng = np.random.default_rng(0)
    a = torch.from_numpy(rng.uniform(low, high, (500, 3)).astype(np.float32))
    n = sc.normalize(a)
    assert n.min() >= -1.0 and n.max() <= 1.0
    torch.testing.assert_close(sc.unnormalize(n), a, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(sc.normalize(torch.from_numpy(low)), -torch.ones(3))
    torch.testing.assert_close(sc.normalize(torch.from_numpy(high)), torch.ones(3))
    # network outputs beyond [-1, 1] are clipped to the raw bounds
    torch.testing.assert_close(sc.unnormalize(torch.tensor([[-3.0, 7.0, 0.0]])), torch.tensor([[-2.0, 10.0, 1.0]]))


def test_action_scaler_from_space_and_data(hopper_spaces):
    sc = ActionScaler.from_space(hopper_spaces[1])
    assert sc.low.tolist() == [-1.0] * 3 and sc.high.tolist() == [1.0] * 3
    acts = np.array([[0.0, 1.0], [2.0, 1.0]], np.float32)  # second dim constant
    sd = ActionScaler.from_data(acts, margin=0.5)
    np.testing.assert_allclose(sd.low.numpy(), [-0.5, 0.5])
    np.testing.assert_allclose(sd.high.numpy(), [2.5, 1.5])
    torch.testing.assert_close(sd.unnormalize(sd.normalize(torch.from_numpy(acts))), torch.from_numpy(acts))


def test_action_scaler_bounds_errors():
    with pytest.raises(ValueError, match=r"action bounds must be finite; pass data min/max via ActionScaler.from_data"):
        ActionScaler([-np.inf, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"action bounds must be finite"):
        ActionScaler([0.0], [np.nan])
    with pytest.raises(ValueError, match=r"action high must exceed low in every dimension"):
        ActionScaler([0.0, 1.0], [1.0, 1.0])
    import gymnasium as gym

    with pytest.raises(ValueError, match=r"finite"):
        ActionScaler.from_space(gym.spaces.Box(-np.inf, np.inf, (2,)))


class _Policy(nn.Module):
    def __init__(self, do, da):
        super().__init__()
        self.obs_norm = ObservationNormalizer.identity(do)
        self.act_scale = ActionScaler(-np.ones(da), np.ones(da))
        self.net = nn.Linear(do, da)

    def forward(self, obs):
        return self.act_scale.unnormalize(torch.tanh(self.net(self.obs_norm(obs))))


def test_statistics_travel_in_state_dict_and_checkpoint(tmp_path):
    rng = np.random.default_rng(1)
    obs = rng.normal(3.0, 2.0, (300, 4)).astype(np.float32)
    trained = _Policy(4, 2)
    trained.obs_norm = ObservationNormalizer.from_data(obs)
    trained.act_scale = ActionScaler([-3.0, 0.0], [3.0, 5.0])
    sd = trained.state_dict()
    assert {"obs_norm.mean", "obs_norm.std", "act_scale.low", "act_scale.high"} <= set(sd)
    save_checkpoint(tmp_path / "policy.pt", {"policy": sd})
    deployed = _Policy(4, 2)  # fresh: identity stats, unit bounds
    x = torch.from_numpy(obs[:16])
    assert not torch.allclose(deployed.obs_norm(x), trained.obs_norm(x))
    deployed.load_state_dict(load_checkpoint(tmp_path / "policy.pt")["policy"])
    assert torch.equal(deployed.obs_norm.mean, trained.obs_norm.mean)
    assert torch.equal(deployed.act_scale.high, trained.act_scale.high)
    torch.testing.assert_close(deployed(x), trained(x), rtol=0, atol=0)
