"""The online learner with the off-policy residual (ResFiT) on a frozen BC base (issue 16).

Real processes: ``robotrl learner agent=residual-offpolicy agent.model.base=<BC checkpoint>``
and ``robotrl actor`` on the PointMaze twin. The actor acts with the pushed residual
policies; every pushed version carries the base's weights unchanged while the residual
learns; the actor's actions are those versions' outputs; every transition reaches the learner.
"""

from __future__ import annotations

import json
import os
import signal

import numpy as np
import pytest
import torch
from online_procs import OPEN_MAZE, episode_lines, free_port, start, status, stop_all, wait

from robotrl.errors import ConfigError


def _bc_base(path) -> dict:
    """A small BC policy fitted to the P-D "human" on random open-room states, saved as a checkpoint."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.policy import policy_state
    from robotrl.real_robot.teleop import pointmaze_controller

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    s = rng.uniform(-1, 1, (2000, 8)).astype(np.float32)
    s[:, 4:6] = s[:, 0:2]
    ctrl = pointmaze_controller(2.0)
    y = torch.from_numpy(np.stack([ctrl(o) for o in s]))
    bc = BCPolicy(8, 2, (32, 32))
    opt = torch.optim.Adam(bc.parameters(), lr=3e-3)
    x = torch.from_numpy(s)
    for _ in range(300):
        loss = ((bc(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ps = policy_state(bc.eval())
    save_checkpoint(path, {"policy": ps})
    return ps


@pytest.mark.slow
def test_learner_trains_a_residual_on_a_frozen_bc_base(tmp_path):
    from robotrl.checkpoint import load_arrays, load_checkpoint
    from robotrl.real_robot.online_eval import pushed_policy
    from robotrl.real_robot.protocol import write_key_file

    torch.set_num_threads(1)
    base = _bc_base(tmp_path / "bc.pt")
    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    run_dir, work, wdir = tmp_path / "learner", tmp_path / "actor", tmp_path / "pushed"
    robot = ["robot.realtime=false", f"+robot.env_kwargs.maze_map={OPEN_MAZE}"]
    learner_args = ["learner", f"key_file={key}", *robot, f"endpoint=tcp://127.0.0.1:{port}", f"run_dir={run_dir}",
                    "agent=residual-offpolicy", f"agent.model.base={tmp_path / 'bc.pt'}", "agent.model.hidden=[32,32]",
                    "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2", "agent.model.actor_delay=1",
                    "agent.model.critic_warmup_updates=0", "agent.model.base_noise_steps=0",
                    "agent.model.actor_lr=1e-3", "trainer.batch_size=32", "trainer.online_warmup_steps=64",
                    "trainer.utd=0.5", "trainer.offline_ratio=0", "push_period_s=0.3",
                    "checkpoint_every_s=2", f"pushed_weights_dir={wdir}"]
    learner = start(learner_args, tmp_path / "learner.log", env)
    actor_log = tmp_path / "actor.log"
    actor = start(["actor", f"key_file={key}", *robot, f"learner=tcp://127.0.0.1:{port}", "episodes=16",
                   "max_steps=60", "rate_hz=50", "explore=false", f"work_dir={work}",
                   "dataset_id=robot/test/residual-v0"], actor_log, env)
    try:
        wait(lambda: actor.poll() is not None, "the actor to finish", [(learner, tmp_path / "learner.log")],
             timeout=300)
        assert actor.returncode == 0, actor_log.read_text()[-3000:]
        held = status(run_dir)["ingested"]  # then the updates its schedule allows for what it holds
        wait(lambda: status(run_dir).get("updates", 0) >= int((held - 64 + 1) * 0.5) - 1, "residual updates",
             [(learner, tmp_path / "learner.log")])
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0, (tmp_path / "learner.log").read_text()[-3000:]
    finally:
        stop_all(learner, actor)
    assert "ResidualOffPolicyAgent" in (tmp_path / "learner.log").read_text()
    steps = sum(e["steps"] for e in episode_lines(actor_log))
    assert status(run_dir)["ingested"] == steps > 64 and status(run_dir)["updates"] > 0
    ck = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    target, kwargs = ck["policy"]["target"], ck["policy"]["kwargs"]
    assert target.endswith("ResidualPolicy") and kwargs["base"]["target"] == base["target"]

    # every pushed version carries the frozen base unchanged; the residual moves
    eps = [load_arrays(p) for p in sorted((work / "episodes").glob("ep_*.npz"))]
    versions = np.concatenate([z["info_weights_version"][1:] for z in eps])
    obs = np.concatenate([z["observations"][:-1] for z in eps])
    pol_act = np.concatenate([z["info_policy_action"][1:] for z in eps])
    used = sorted(set(versions.tolist()))
    assert len(used) >= 2
    first, last = load_arrays(wdir / f"v{used[0]}.npz"), load_arrays(wdir / f"v{max(used)}.npz")
    for k, v in base["state_dict"].items():
        np.testing.assert_array_equal(first[f"base.{k}"], v.numpy())
        np.testing.assert_array_equal(last[f"base.{k}"], v.numpy())
    moved = [k for k in first if k.startswith("residual.") and not np.array_equal(first[k], last[k])]
    assert moved, "the residual did not change between the first and the last version the actor used"
    # the actor's actions are exactly the pushed residual policies' outputs (base + scaled residual)
    for v in used:
        pol = pushed_policy(wdir, v, target, kwargs)
        rows = np.flatnonzero(versions == v)
        with torch.no_grad():
            out = pol(torch.from_numpy(obs[rows])).numpy()
        np.testing.assert_allclose(out, pol_act[rows], rtol=0, atol=1e-5)
    assert json.loads((work / "summary.json").read_text())["drained"]


def test_residual_learner_without_a_base_is_refused(tmp_path):
    from hydra import compose, initialize_config_module

    from robotrl.real_robot.online_cli import build_learner

    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/learner", overrides=["agent=residual-offpolicy", f"run_dir={tmp_path}",
                                                   "endpoint=tcp://127.0.0.1:0", "key_create=true",
                                                   f"key_file={tmp_path / 'k.key'}"])
    with pytest.raises(ConfigError, match="agent.model.base="):
        build_learner(cfg)
