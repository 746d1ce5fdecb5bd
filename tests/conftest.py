"""Shared fixtures: real Minari dataset roots (per test or per module) and real env spaces."""

from __future__ import annotations

import gymnasium as gym
import pytest


@pytest.fixture
def minari_root(tmp_path, monkeypatch):
    """A fresh, empty Minari dataset root; ``$MINARI_DATASETS_PATH`` points at it."""
    root = tmp_path / "minari_datasets"
    root.mkdir()
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    return root


@pytest.fixture(scope="module")
def minari_module_root(tmp_path_factory):
    """One Minari dataset root per test module (datasets generated once, shared by its tests);
    ``$MINARI_DATASETS_PATH`` points at it while the module runs."""
    root = tmp_path_factory.mktemp("minari")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(root))
    yield root
    mp.undo()


@pytest.fixture(scope="session")
def hopper_spaces():
    """``(observation_space, action_space)`` of the real Hopper-v5 env: Box(11,), Box(3,)."""
    env = gym.make("Hopper-v5")
    spaces = (env.observation_space, env.action_space)
    env.close()
    return spaces


@pytest.fixture(scope="session")
def pointmaze_spaces():
    """``(observation_space, action_space)`` of the real PointMaze_UMaze-v3 env (Dict observations)."""
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)
    env = gym.make("PointMaze_UMaze-v3")
    spaces = (env.observation_space, env.action_space)
    env.close()
    return spaces
