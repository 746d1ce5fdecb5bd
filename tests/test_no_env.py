"""Training on a dataset with no env behind it (recorded on a robot that has no simulator): offline updates,
held-out validation instead of rollouts, a checkpoint that deploys.

The dataset is written with robotrl's Minari writer exactly as the robot recorder writes a physical robot's
episodes (no ``env_spec``: the spaces only); the episodes are a teleoperator's proportional controller
``a = clip(-K s + noise)`` on a drifting 3-D state, so a policy that learns the mapping has a held-out action error
well below the untrained policy's.
"""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hydra import compose, initialize_config_module

from robotrl.data.writer import Episode, write_dataset
from robotrl.errors import ConfigError
from robotrl.experiment import build_trainer
from robotrl.policy import load_policy
from robotrl.validation import split_episodes
from robotrl.data import load_dataset

K = np.array([[1.0, 0.0, 0.5], [0.0, -1.0, 0.5]], np.float32)


def _episodes(n: int, T: int, seed: int):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        s = np.zeros((T + 1, 3), np.float32)
        s[0] = rng.uniform(-1, 1, 3)
        a = np.zeros((T, 2), np.float32)
        for t in range(T):
            a[t] = np.clip(-(K @ s[t]) + 0.01 * rng.standard_normal(2), -1, 1)
            s[t + 1] = s[t] + 0.1 * np.array([a[t, 0], a[t, 1], 0.0]) + 0.05 * rng.standard_normal(3)
        r = -np.linalg.norm(s[1:, :2], axis=1).astype(np.float32)
        yield Episode(observations=s, actions=a, rewards=r, terminations=np.zeros(T, bool),
                      truncations=np.r_[np.zeros(T - 1, bool), True])


@pytest.fixture(scope="module")
def robot_data(tmp_path_factory):
    root = tmp_path_factory.mktemp("minari")
    path = write_dataset("robot/arm/teleop-v0", _episodes(20, 40, 0), env=None,
                         observation_space=gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                         action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32), root=root)
    return path


def _cfg(path, run_dir, *extra):
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("train", overrides=["env=gym", f"dataset.id={path}", f"run_dir={run_dir}", "trainer.progress=false",
                                           *extra])


def test_the_recorded_dataset_has_no_env(robot_data):
    assert load_dataset(robot_data).metadata.get("env_spec") is None


def test_split_holds_out_whole_episodes_seeded(robot_data):
    data = load_dataset(robot_data)
    train, held = split_episodes(data, 0.2, seed=3)
    assert (train.num_episodes, held.num_episodes) == (16, 4)
    assert train.num_transitions + held.num_transitions == data.num_transitions
    again, _ = split_episodes(data, 0.2, seed=3)
    np.testing.assert_array_equal(train.observations, again.observations)
    # whole episodes: every held-out episode is one of the data's, in order
    starts = {tuple(data.observations[s]) for s in data.episode_starts}
    assert all(tuple(held.observations[s]) in starts for s in held.episode_starts)


def test_bc_trains_offline_and_reports_held_out_action_error(robot_data, tmp_path):
    cfg = _cfg(robot_data, tmp_path, "agent=bc", "agent.model.hidden=[64,64]", "trainer.offline_steps=1500",
               "trainer.batch_size=64", "trainer.eval_every=500", "trainer.checkpoint_every=500")
    summary = build_trainer(cfg, tmp_path, overrides=[]).fit()
    report = json.loads((tmp_path / "report.json").read_text())
    hist = report["history"]
    assert all(h["evaluation"] == "validation" and h["val_episodes"] == 2 for h in hist)
    data = load_dataset(robot_data)
    zero_mse = float(np.mean(data.actions ** 2))  # the error of a policy that does nothing
    assert hist[-1]["val_action_mse"] < 0.05 * zero_mse, (hist[-1], zero_mse)  # the mapping, on unseen episodes
    assert summary["final_val_action_mse"] == pytest.approx(hist[-1]["val_action_mse"])
    assert "final_return" not in summary and summary["evaluation"].startswith("validation")
    assert (tmp_path / "learning_curve.png").exists()
    policy = load_policy(str(tmp_path))  # deploys as any checkpoint: the raw state in, raw actions out
    s = np.array([[0.5, -0.5, 0.2]], np.float32)
    a = policy(__import__("torch").as_tensor(s)).detach().numpy()[0]
    np.testing.assert_allclose(a, np.clip(-(K @ s[0]), -1, 1), atol=0.15)


def _critic_metrics_by_hand(agent, held, gamma: float) -> dict[str, float]:
    """The critic metrics of ``robotrl.validation`` recomputed in plain loops: the ensemble mean ``Q(s, a)`` of every
    held-out row (camera frames in ``batch.extras``, as the replay buffer samples them), the discounted return-to-go
    ``G`` of each episode, ``mean(Q - G)``, their correlation, and the SARSA TD error with the data's next action on
    every row that has a next row in its episode."""
    import torch

    from robotrl.data.replay import ReplayBuffer

    buf = ReplayBuffer.from_offline(held, gamma=gamma)
    with torch.no_grad():
        q = agent.batch_q_values(buf.sample(buf.size, indices=np.arange(buf.size), allow_small=True)).mean(0).numpy()
    g, td = np.zeros(len(q)), []
    for s, e in zip(held.episode_starts, held.episode_ends):
        ret = 0.0
        for t in range(e - 1, s - 1, -1):
            ret = float(held.rewards[t]) + gamma * ret
            g[t] = ret
        td += [(q[t] - held.rewards[t] - gamma * (1.0 - held.terminated[t]) * q[t + 1]) ** 2 for t in range(s, e - 1)]
    return {"val_q_minus_mc": float(np.mean(q - g)), "val_q_mc_corr": float(np.corrcoef(q, g)[0, 1]),
            "val_td_error": float(np.mean(td))}


def test_calql_reports_critic_calibration_on_held_out_episodes(robot_data, tmp_path):
    """The reported ``val_q_minus_mc`` / ``val_q_mc_corr`` / ``val_td_error`` are the held-out episodes' values of the
    final critic (recomputed here by hand), and training moves the critic towards the held-out returns."""
    cfg = _cfg(robot_data, tmp_path, "agent=calql", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
               "agent.model.num_critics=2", "agent.model.cql_n_actions=4", "trainer.offline_steps=200",
               "trainer.batch_size=32", "trainer.eval_every=100", "trainer.checkpoint_every=100")
    trainer = build_trainer(cfg, tmp_path, overrides=[])
    trainer.fit()
    hist = json.loads((tmp_path / "report.json").read_text())["history"]
    assert [h["step"] for h in hist] == [100, 200] and all(h["val_episodes"] == 2 for h in hist)
    _, held = split_episodes(load_dataset(robot_data), 0.1, seed=0)  # the run's split (validation_fraction, seed)
    want = _critic_metrics_by_hand(trainer.agent, held, gamma=0.99)  # Cal-QL: rewards unscaled, no sparse fill here
    for k, v in want.items():
        assert hist[-1][k] == pytest.approx(v, rel=1e-4, abs=1e-5), (k, hist[-1][k], v)
    # the untrained critic (Q ~ 0) overestimates the negative returns by ~46; every 100 updates bring it closer
    assert hist[-1]["val_q_minus_mc"] < hist[0]["val_q_minus_mc"] - 0.2, hist


def test_online_steps_without_an_env_are_refused_with_the_way_out(robot_data, tmp_path):
    with pytest.raises(ConfigError, match="nothing to act in.*trainer.online_steps=0.*env.name"):
        build_trainer(_cfg(robot_data, tmp_path, "experiment=rlpd"), tmp_path, overrides=[])


def test_a_camera_critic_is_validated_on_the_held_out_frames(tmp_path):
    """A Cal-QL agent reading a camera (``obs=pixels``) beside the state, on a recording with no env: its critic is
    scored on the held-out episodes' own frames (the critic's encoder reads them), not on the state alone."""
    def frames(s: np.ndarray) -> np.ndarray:  # a bright square where the state's first two coordinates put it
        img = np.zeros((len(s), 24, 24, 3), np.uint8)
        for t, (x, y) in enumerate(np.clip(((s[:, :2] + 2) / 4 * 20).astype(int), 0, 20)):
            img[t, y:y + 4, x:x + 4] = 255
        return img

    eps = [Episode(observations={"state": e.observations, "cam": frames(e.observations)}, actions=e.actions,
                   rewards=e.rewards, terminations=e.terminations, truncations=e.truncations)
           for e in _episodes(10, 20, 1)]
    space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (3,), np.float32),
                             "cam": gym.spaces.Box(0, 255, (24, 24, 3), np.uint8)})
    path = write_dataset("robot/arm/teleop-cam-v0", eps, env=None, observation_space=space,
                         action_space=gym.spaces.Box(-1.0, 1.0, (2,), np.float32), root=tmp_path / "minari")
    cfg = _cfg(path, tmp_path / "run", "agent=calql", "obs=pixels", "agent.model.hidden=[16,16]",
               "agent.model.critic_hidden=[16,16]", "agent.model.num_critics=2", "agent.model.cql_n_actions=2",
               "agent.model.feature_dim=8", "agent.model.channels=4", "trainer.offline_steps=40", "trainer.batch_size=16",
               "trainer.eval_every=40", "trainer.checkpoint_every=40")
    trainer = build_trainer(cfg, tmp_path / "run", overrides=[])
    assert trainer.agent.policy.has_cameras
    trainer.fit()
    last = json.loads((tmp_path / "run" / "report.json").read_text())["history"][-1]
    assert last["evaluation"] == "validation" and last["val_episodes"] == 1
    _, held = split_episodes(load_dataset(path), 0.1, seed=0)
    assert set(held.images) == {"cam"}
    # the reported values are the critic's on the held-out rows with their own frames ...
    for k, v in _critic_metrics_by_hand(trainer.agent, held, gamma=0.99).items():
        assert last[k] == pytest.approx(v, rel=1e-4, abs=1e-5), (k, last[k], v)
    # ... which it cannot score without them (the state alone is not its input)
    import dataclasses

    with pytest.raises(ValueError, match="expects camera 'cam'"):
        _critic_metrics_by_hand(trainer.agent, dataclasses.replace(held, images=None, image_index=None), gamma=0.99)
