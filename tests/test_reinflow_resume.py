"""A killed ReinFlow run resumes from its checkpoint: a real `robotrl train experiment=reinflow` process,
warm-started from a flow checkpoint, SIGKILLed after a mid-run checkpoint, then resumed by a second process,
ends in the same state as an uninterrupted run of the same length (velocity net, noise net with its decayed
std bound, critic, reward scaler, env steps).

Exactness needs episodes that end at iteration boundaries: 20-step PointMaze episodes are 5 chunks of 4 steps,
plus the reset step = 6 steps per iteration (as tests/test_train.py's on-policy resume test does with Pendulum).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import torch
from hydra import compose, initialize_config_module

from robotrl.agents.flow import FlowAgent
from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer
from robotrl.experiment import build_trainer
from robotrl.policy import policy_state

ITERS_PER_RUN = 100_000


def _base(flow_ckpt) -> list[str]:
    return ["experiment=reinflow", "env=pointmaze-umaze", f"trainer.init_from={flow_ckpt}",
            "agent.model.denoiser_kwargs.hidden=[32,32]", "agent.model.denoiser_kwargs.time_dim=8",
            "agent.model.flow_steps=2", "agent.model.critic_hidden=[16]", "agent.model.noise_hidden=[16]",
            "agent.model.batch_size=12", "agent.model.repeat_samples=2", "agent.model.n_epochs=2",
            "agent.model.critic_warmup_iters=1", "agent.model.noise_decay_iters=12",
            "agent.onpolicy.steps_per_iter=6", "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_every=100000",
            "agent.onpolicy.eval_episodes=1", "agent.onpolicy.eval_envs=1", "agent.onpolicy.checkpoint_every=1",
            "trainer.progress=false", "env.max_episode_steps=20", "env.match_dataset=false", "device=cpu",
            "torch_threads=1"]


def test_killed_reinflow_run_resumes_exactly(tmp_path, kill_after_checkpoint):
    torch.manual_seed(0)
    flow = FlowAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8),
                     action_scaler=ActionScaler(-np.ones(2), np.ones(2)), flow_steps=2, obs_horizon=1,
                     action_horizon=4, act_steps=4, denoiser="mlp",
                     denoiser_kwargs={"hidden": [32, 32], "time_dim": 8, "act": "mish"})
    save_checkpoint(tmp_path / "flow.pt", {"policy": policy_state(flow.policy)})
    base = _base(tmp_path / "flow.pt")
    run_dir = tmp_path / "killed"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "robotrl.cli", "train", *base, f"agent.onpolicy.iterations={ITERS_PER_RUN}",
           f"run_dir={run_dir}"]
    kill_after_checkpoint(cmd, env, run_dir, min_step=100)
    killed = load_checkpoint(run_dir)
    iterations = killed["updates"] + 2  # the resumed run does two more iterations
    assert 1 <= killed["updates"] < ITERS_PER_RUN
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", *base, f"agent.onpolicy.iterations={iterations}",
                          f"run_dir={run_dir}"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads((run_dir / "report.json").read_text())["summary"]["resumed"] is True

    overrides = [*base, f"agent.onpolicy.iterations={iterations}", f"run_dir={tmp_path / 'straight'}"]
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    straight = build_trainer(cfg, tmp_path / "straight", overrides=overrides)
    straight.fit()
    resumed = load_checkpoint(run_dir)
    assert resumed["updates"] == straight.loop.updates == iterations
    assert resumed["step"] == straight.step
    want = straight.agent.state_dict()
    assert {"policy", "critic"} <= set(want) and any("noise" in k for k in want["policy"])  # the noise net too
    for part in ("policy", "critic"):
        a, b = want[part], resumed["agent"][part]
        assert set(a) == set(b)
        for k in a:
            assert torch.equal(a[k], b[k]), (part, k)
    assert resumed["collector"]["scaler"]["count"] == straight.loop.collector.scaler.count
    # the fine-tuned velocity net moved away from the pretrained flow (the runs did learn something)
    pre = flow.policy.state_dict()
    assert any(not torch.equal(pre[k], want["policy"][k]) for k in pre if k in want["policy"] and "velocity" in k)
