"""Pixel agents: BC learns a generated camera task through the real data path (Minari ->
buffer -> batch), preprocessing and normalisers live inside the saved and exported policy."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from robotrl.data import ActionScaler, Episode, ObservationNormalizer, ReplayBuffer, load_dataset, write_dataset
from robotrl.policy import build_policy, policy_state

S = 32


def square_task(n, rng):
    """Frames with a bright 6x6 square on a noisy background; the action is its centre in [-1, 1]^2
    and the state (one number) scaled: a = (x, y, 2 s)."""
    frames = rng.integers(0, 60, (n, S, S, 3), dtype=np.uint8)
    pos = rng.integers(0, S - 6, (n, 2))
    for i, (y, x) in enumerate(pos):
        frames[i, y:y + 6, x:x + 6] = 230
    centre = (pos + 3) / (S / 2) - 1.0
    state = rng.uniform(-1, 1, (n, 1)).astype(np.float32) * 3.0 + 5.0  # env units: normalisation matters
    actions = np.concatenate([centre[:, 1:2], centre[:, 0:1], (state - 5.0) / 3.0], 1).astype(np.float32)
    return frames, state, actions


def _space():
    return gym.spaces.Dict({"pixels": gym.spaces.Dict({"cam": gym.spaces.Box(0, 255, (S, S, 3), np.uint8)}),
                            "state": gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(0)
    root = tmp_path_factory.mktemp("ds")
    eps = []
    for e in range(40):
        f, s, a = square_task(11, rng)  # T+1 = 11 observations, T = 10 actions
        eps.append(Episode(observations={"pixels": {"cam": f}, "state": s}, actions=a[:-1], rewards=np.zeros(10),
                           terminations=np.zeros(10, bool), truncations=np.eye(10, dtype=bool)[-1]))
    write_dataset("gen/squares-v0", eps, observation_space=_space(),
                  action_space=gym.spaces.Box(-1, 1, (3,), np.float32), root=root)
    return load_dataset(root / "gen/squares-v0")


@pytest.mark.slow
def test_pixel_bc_learns_a_generated_pixel_task_and_exports(dataset, tmp_path):
    from robotrl.agents.bc import BCAgent
    from robotrl.vision.export import export_pixel_torchscript

    torch.manual_seed(0)
    data = dataset
    assert data.obs_dim == 1 and set(data.images) == {"pixels/cam"}
    buf = ReplayBuffer.from_offline(data, seed=0)
    shapes = {"pixels/cam": (S, S, 3)}
    agent = BCAgent(1, 3, image_shapes=shapes, obs_normalizer=ObservationNormalizer.from_data(data.observations),
                    action_scaler=ActionScaler(-np.ones(3), np.ones(3)), lr=2e-3, weight_decay=1e-4, channels=8,
                    feature_dim=32, hidden=(128, 128), pooling="spatial_softmax", augment_pad=2, seed=0)
    frames, state, target = square_task(256, np.random.default_rng(99))  # held out
    held = {"pixels/cam": frames}

    def test_mse():
        return float(((agent.act(state, held) - target) ** 2).mean())

    before = test_mse()
    for step in range(300):
        agent.update(buf.sample(32), step)
    after = test_mse()
    baseline = float(target.var(0).mean())  # predicting the mean action
    assert after < 0.15 * baseline and after < 0.2 * before, (before, after, baseline)

    # the saved policy carries the normalisers and the image preprocessing: rebuilt, it acts the same
    rebuilt = build_policy(policy_state(agent.policy))
    with torch.no_grad():
        s, im = torch.from_numpy(state), {"pixels/cam": torch.from_numpy(frames)}
        torch.testing.assert_close(rebuilt(s, im), agent.policy(s, im), rtol=0, atol=0)
    path = export_pixel_torchscript(agent.policy, tmp_path / "policy.pt", shapes, 1)
    scripted = torch.jit.load(str(path))
    with torch.no_grad():
        torch.testing.assert_close(scripted(s, im), agent.policy(s, im), rtol=0, atol=1e-5)


def _bandit_step(rng, n):
    """Frames, state and the reward function of a one-step camera task: reward -|a - centre|^2."""
    frames, state, target = square_task(n, rng)
    return frames, state, target[:, :2]


@pytest.mark.slow
def test_short_pixel_rlpd_run_improves_the_return():
    """RLPD on pixels (10 LayerNorm critics, min of 2, symmetric offline/online batches, random
    shift): the deterministic policy's reward on held-out frames rises well above its start."""
    from robotrl.agents.qlearning.pixels import PixelSACAgent
    from robotrl.data import MixedSampler

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    shapes = {"cam": (S, S, 3)}
    scaler = ActionScaler(-np.ones(2), np.ones(2))
    agent = PixelSACAgent(shapes, 1, 2, obs_normalizer=ObservationNormalizer(np.full(1, 5.0), np.full(1, 3.0)),
                          action_scaler=scaler, channels=8, feature_dim=32, critic_hidden=(128, 128), pooling="spatial_softmax",
                          hidden=(128, 128), augment_pad=2, num_critics=10, num_min_critics=2, actor_lr=1e-3,
                          critic_lr=1e-3, init_alpha=0.01, seed=0)

    def add(buf, frames, state, actions, target):
        rewards = -((actions - target) ** 2).sum(1)
        n = len(rewards)
        buf.add(state, actions, rewards, state, np.ones(n, bool), np.zeros(n, bool), env_ids=np.arange(n),
                images={"cam": frames}, next_images={"cam": frames})

    offline = ReplayBuffer(512, 1, 2, num_envs=64, image_shapes=shapes, seed=0)
    for _ in range(4):  # offline data: uniformly random actions
        f, s, t = _bandit_step(rng, 64)
        add(offline, f, s, rng.uniform(-1, 1, (64, 2)).astype(np.float32), t)
    online = ReplayBuffer(2048, 1, 2, num_envs=8, image_shapes=shapes, seed=1)
    sampler = MixedSampler(offline, online, 0.5)
    hf, hs, ht = _bandit_step(np.random.default_rng(7), 256)

    def held_out_reward():
        return float(-((agent.act(hs, {"cam": hf}) - ht) ** 2).sum(1).mean())

    before = held_out_reward()
    for it in range(60):
        f, s, t = _bandit_step(rng, 8)
        add(online, f, s, agent.explore(s, {"cam": f}).astype(np.float32), t)
        for _ in range(5):
            agent.update(sampler.sample(64, step=it), it)
    after = held_out_reward()
    print(f"pixel RLPD held-out reward: before {before:.3f}, after {after:.3f}")
    assert after > 0.5 * before and after - before > 0.1, (before, after)


@pytest.mark.parametrize("which", ["bc", "sac"])
def test_pixel_policies_export_to_torchscript_and_onnx_with_image_inputs(which, tmp_path):
    import onnxruntime as ort

    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.agents.qlearning.pixels import PixelSACPolicy
    from robotrl.vision.export import export_pixel_onnx, export_pixel_torchscript

    torch.manual_seed(0)
    shapes = {"front": (32, 32, 3), "wrist": (24, 24, 3)}
    if which == "bc":
        policy = BCPolicy(3, 2, image_shapes=shapes, hidden=(32,), channels=8, feature_dim=16, pooling="spatial_softmax")
    else:
        policy = PixelSACPolicy(shapes, 3, 2, hidden=(32,), channels=8, feature_dim=16, pooling="spatial_embedding")
    policy.set_normalizers(ObservationNormalizer(np.full(3, 2.0), np.full(3, 0.5)), ActionScaler(np.array([-2.0, 0.0]), np.array([2.0, 1.0])))
    g = np.random.default_rng(3)
    state = g.normal(size=(5, 3)).astype(np.float32)  # a batch size the export never saw
    frames = {k: g.integers(0, 256, (5, *s), dtype=np.uint8) for k, s in shapes.items()}
    with torch.no_grad():
        want = policy.eval()(torch.from_numpy(state), {k: torch.from_numpy(v) for k, v in frames.items()}).numpy()
    assert want[:, 1].min() >= 0.0 and want[:, 0].min() >= -2.0  # raw env units (the scaler is inside)
    ts = torch.jit.load(str(export_pixel_torchscript(policy, tmp_path / "p.pt", shapes, 3)))
    got_ts = ts(torch.from_numpy(state), {k: torch.from_numpy(v) for k, v in frames.items()}).detach().numpy()
    np.testing.assert_allclose(got_ts, want, atol=1e-5, rtol=0)
    sess = ort.InferenceSession(str(export_pixel_onnx(policy, tmp_path / "p.onnx", shapes, 3)))
    assert sess.get_modelmeta().custom_metadata_map["image_keys"] == "front,wrist"
    got_onnx = sess.run(["actions"], {"state": state, "image_0": frames["front"], "image_1": frames["wrist"]})[0]
    np.testing.assert_allclose(got_onnx, want, atol=1e-4, rtol=0)
