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
    shift, UTD 5: five critic updates and one actor update per env step): the deterministic policy's
    reward on held-out frames rises well above its start."""
    from robotrl.agents.qlearning import QLAgent
    from robotrl.data import MixedSampler

    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    shapes = {"cam": (S, S, 3)}
    scaler = ActionScaler(-np.ones(2), np.ones(2))
    utd = 5
    agent = QLAgent(1, 2, image_shapes=shapes, obs_normalizer=ObservationNormalizer(np.full(1, 5.0), np.full(1, 3.0)),
                    action_scaler=scaler, channels=8, feature_dim=32, critic_hidden=(128, 128), pooling="spatial_softmax",
                    hidden=(128, 128), augment_pad=2, num_critics=10, target_subset=2, critic_layer_norm=True,
                    backup_entropy=True, actor_q="mean", actor_lr=1e-3, critic_lr=1e-3, init_alpha=0.01,
                    critic_utd=utd, seed=0)

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
        agent.update(sampler.sample(utd * 64, step=it), it)  # robotrl.utd: one call of utd minibatches of 64
    after = held_out_reward()
    print(f"pixel RLPD held-out reward: before {before:.3f}, after {after:.3f}")
    assert after > 0.5 * before and after - before > 0.1, (before, after)


@pytest.mark.parametrize("which", ["bc", "sac"])
def test_pixel_policies_export_to_torchscript_and_onnx_with_image_inputs(which, tmp_path):
    import onnxruntime as ort

    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.agents.qlearning import QLPolicy
    from robotrl.vision.export import export_pixel_onnx, export_pixel_torchscript

    torch.manual_seed(0)
    shapes = {"front": (32, 32, 3), "wrist": (24, 24, 3)}
    if which == "bc":
        policy = BCPolicy(3, 2, image_shapes=shapes, hidden=(32,), channels=8, feature_dim=16, pooling="spatial_softmax")
    else:
        policy = QLPolicy(3, 2, hidden=(32,), image_shapes=shapes, channels=8, feature_dim=16, pooling="spatial_embedding")
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


@pytest.mark.parametrize("utd", [1, 3])
def test_state_and_camera_q_learning_are_one_class_with_one_utd_meaning(utd):
    """A state run and a camera run build the same class; per env step the trainer's UTD schedule
    (robotrl.utd) gives the camera agent ``utd`` critic updates (each training the encoder) and ONE
    actor update, exactly as the state agent (the former pixel twin did ``utd`` actor updates)."""
    from robotrl.agents.qlearning import QLAgent
    from robotrl.utd import batch_split, update_schedule

    shapes = {"cam": (16, 16, 3)}
    kw = dict(action_scaler=ActionScaler(-np.ones(2), np.ones(2)), hidden=(16,), critic_hidden=(16,),
              num_critics=2, critic_utd=utd, seed=0)
    state_agent = QLAgent(1, 2, obs_normalizer=ObservationNormalizer.identity(1), **kw)
    camera_agent = QLAgent(1, 2, obs_normalizer=ObservationNormalizer.identity(1), image_shapes=shapes, channels=4,
                           feature_dim=8, augment_pad=2, **kw)
    assert type(state_agent) is type(camera_agent) is QLAgent
    assert type(state_agent.policy) is type(camera_agent.policy)
    assert not state_agent.has_cameras and camera_agent.has_cameras
    assert (state_agent.frame_stack, camera_agent.frame_stack) == (1, 1)
    assert not any(k.startswith("encoder.") for k in state_agent.policy.state_dict())

    rng = np.random.default_rng(0)
    state_buf = ReplayBuffer(64, 1, 2, seed=0)
    camera_buf = ReplayBuffer(64, 1, 2, image_shapes=shapes, seed=0)
    for t in range(64):
        s, a, s2 = rng.normal(size=(1, 1)), rng.uniform(-1, 1, (1, 2)), rng.normal(size=(1, 1))
        state_buf.add(s, a, [1.0], s2, [t % 9 == 8], [False])
        camera_buf.add(s, a, [1.0], s2, [t % 9 == 8], [False],
                       images={"cam": rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)},
                       next_images={"cam": rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)})

    for agent, buf in ((state_agent, state_buf), (camera_agent, camera_buf)):
        steps = {"critic": 0, "actor": 0}

        def count(name, steps=steps):
            return lambda *_: steps.__setitem__(name, steps[name] + 1)

        agent.critic_opt.register_step_post_hook(count("critic"))
        agent.actor_opt.register_step_post_hook(count("actor"))
        schedule = update_schedule(batch_split(agent), utd, 8)  # one env step's updates, as the trainer does them
        assert schedule.calls_per_step == 1 and schedule.sampled_batch == utd * 8
        encoder = {k: v.clone() for k, v in agent.policy.state_dict().items() if k.startswith("encoder.")}
        for _ in range(schedule.calls_per_step):
            agent.update(buf.sample(schedule.sampled_batch), 0)
        assert steps == {"critic": utd, "actor": 1}, (agent.has_cameras, steps)
        after = agent.policy.state_dict()
        assert bool(encoder) == agent.has_cameras
        assert all(not torch.equal(after[k], v) for k, v in encoder.items() if "trunks" in k)  # the critic trains it
    # both act through the one interface: flat states, and for the camera agent its frames
    assert state_agent.act(np.zeros((3, 1), np.float32)).shape == (3, 2)
    frames = {"cam": rng.integers(0, 256, (3, 16, 16, 3), dtype=np.uint8)}
    assert camera_agent.explore(np.zeros((3, 1), np.float32), frames).shape == (3, 2)


def test_checkpoints_of_the_former_pixel_classes_load_as_the_merged_classes():
    """A policy saved under the deleted camera-only classes (target PixelSACPolicy / PixelResidualPolicy, kwarg
    state_dim, the TD3 residual without log_std) rebuilds as QLPolicy / ResidualPolicy and acts identically."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.agents.qlearning import QLPolicy
    from robotrl.agents.residual import ResidualPolicy

    shapes = {"cam": (16, 16, 3)}
    rng = np.random.default_rng(0)
    s = torch.as_tensor(rng.normal(size=(4, 3)).astype(np.float32))
    im = {"cam": torch.as_tensor(rng.integers(0, 256, (4, 16, 16, 3), dtype=np.uint8))}
    torch.manual_seed(0)
    ql = QLPolicy(3, 2, hidden=(16,), image_shapes=shapes, channels=4, feature_dim=8).eval()
    res = ResidualPolicy(3, 2, BCPolicy(3, 2, hidden=[8]), hidden=[16], head="tanh", image_shapes=shapes, channels=4,
                         feature_dim=8).eval()
    with torch.no_grad():
        res.residual.net[-1].weight.normal_()  # a trained residual: not the base alone
    for policy, old in ((ql, "robotrl.agents.qlearning.pixels.PixelSACPolicy"),
                        (res, "robotrl.agents.residual.pixels.PixelResidualPolicy")):
        state = policy_state(policy)
        kwargs = {("state_dim" if k == "obs_dim" else k): v for k, v in state["kwargs"].items()
                  if k not in ("head", "init_log_std", "learn_log_std")}  # what the old classes saved
        weights = {k: v for k, v in state["state_dict"].items() if k != "log_std"}
        rebuilt = build_policy({"target": old, "kwargs": kwargs, "state_dict": weights})
        assert type(rebuilt) is type(policy)
        with torch.no_grad():
            torch.testing.assert_close(rebuilt(s, im), policy(s, im), rtol=0, atol=0)
