"""Shared fixtures: real Minari dataset roots (per test or per module) and real env spaces."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

# Under pytest-xdist (one worker per core) every worker and the processes tests start use one
# torch/OpenMP thread: two workers x two threads on two cores would oversubscribe the CPU, which
# slows everything and starves the real-time tests (the robot server's watchdog).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    os.environ.setdefault("MKL_NUM_THREADS", "1")

import gymnasium as gym
import numpy as np
import pytest
import torch


@pytest.fixture(autouse=True)
def _seed_global_rngs():
    """Every test starts from the same global RNG state (``random``, NumPy, torch), whatever
    ran before it in the process: a result may not depend on the order tests run in."""
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        torch.set_num_threads(1)


@pytest.fixture
def one_thread():
    """One torch intra-op thread for the test (timing- or result-sensitive training loops); restored after."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


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


def _kill_after_checkpoint(cmd: list[str], env: dict, run_dir: Path, min_step: int = 200,
                           timeout: float = 240) -> int:
    """Start ``cmd`` (a real ``robotrl train`` process), SIGKILL it once ``run_dir``'s checkpoint
    reaches ``min_step``; returns the step of the checkpoint it left (whole: writes are atomic)."""
    from robotrl.checkpoint import load_checkpoint

    ckpt = Path(run_dir) / "checkpoints" / "latest.pt"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + timeout
    try:
        while time.time() < deadline and proc.poll() is None:
            if ckpt.exists() and load_checkpoint(ckpt)["step"] >= min_step:
                break
            time.sleep(0.3)
        assert proc.poll() is None, f"training exited before it could be killed: {proc.stderr.read()[-3000:]!r}"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stderr.close()
    return load_checkpoint(ckpt)["step"]


@pytest.fixture
def kill_after_checkpoint():
    """``kill_after_checkpoint(cmd, env, run_dir, min_step=200) -> step``: a training process killed mid-run."""
    return _kill_after_checkpoint


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


#: Test files that drive real robot-server / deploy / actor processes against the clock (watchdog periods,
#: deadlines, held steps): they run in a second, serial pass (`-m realtime -n 0`, the README's test command),
#: never beside another worker, whose load would starve their control loops.
#: The multi-actor learner test joins them: twice (CI of stop 49, a local run of stop 50) its actors' links, opened in
#: a pytest worker that had run ~400 tests, never reached the learner (no connection seen, no error), while it passes
#: alone and side by side under load; in the serial pass it runs in a fresh process.
REALTIME_FILES = ("test_robot_", "test_online_robot", "test_walkthrough", "test_multi_actor_episodes")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name.startswith(REALTIME_FILES):
            item.add_marker(pytest.mark.realtime)
