"""Pixel policies in online RL on a robot (issue 17): ``robotrl learner agent=rlpd obs=pixels`` and ``robotrl actor`` on
the MuJoCo twin with a camera.

Real processes, real ZeroMQ sockets, real MuJoCo renders (24 px ``topdown``) and a Minari camera dataset the test
records: the actor streams every transition with its frames, the learner stores each frame once (uint8, bit-exact to
what the actor recorded), trains the pixel agent on demonstrations + robot steps and pushes the pixel policy (encoder
included); the actor rebuilds it and acts on the robot's frames + state with exactly the pushed weights. Cameras or
frame sizes that differ between robot, demonstrations, learner and actor are refused at start, naming the difference
and the way out; a state agent on the camera robot keeps learning from the state alone.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from online_procs import OPEN_MAZE, episode_lines, free_port, start, status, stop_all, wait  # noqa: E402

from robotrl.envs import osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

PX = 24
CAM = [f"+robot.env_kwargs.maze_map={OPEN_MAZE}", "robot.realtime=false", "robot.cameras=[topdown]"]
#: a tiny pixel RLPD (2 critics, 8-channel DrQ encoder, 16 features) for a shared 2-core CPU
SMALL_PIXELS = ["agent=rlpd", "obs=pixels", "agent.model.init_alpha=0.1", "agent.model.num_critics=2", "agent.model.hidden=[32,32]",
                "agent.model.critic_hidden=[32,32]", "agent.model.channels=8", "agent.model.feature_dim=16",
                "trainer.batch_size=16", "trainer.online_warmup_steps=32", "trainer.utd=0.25"]


def _demos(root: Path, px: int = PX, cameras=("topdown",)) -> Path:
    from robotrl.real_robot.online_eval import record_controller_demos

    return record_controller_demos(root / "demos", episodes=3, max_steps=30, maze="open", reward="dense", seed=500,
                                   cameras=list(cameras), image_size=px)


def _episodes(work: Path) -> list[dict]:
    from robotrl.checkpoint import load_arrays

    return [load_arrays(p) for p in sorted((work / "episodes").glob("ep_*.npz"))]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("online/learner", overrides=overrides)


# ----------------------------------------------------------------------------- link units
def test_batches_carry_each_frame_once_and_a_learner_of_states_gets_none():
    """Rows 0-2 are one episode's steps, row 3 starts the next episode (its frame is not row 2's next frame): the
    batch carries 4 frames plus the next frames of rows 2 and 3 only, and the learner rebuilds every row's next frame."""
    from robotrl.real_robot.interface import CameraSpec, ProtocolError
    from robotrl.real_robot.learner_link import (
        camera_link_limits,
        check_batch,
        frame_rows,
        link_limits,
        stack_transitions,
        with_next_frames,
        without_frames,
    )

    rng = np.random.default_rng(0)
    f = [rng.integers(0, 256, (PX, PX, 3), dtype=np.uint8) for _ in range(6)]
    frame_of = [(0, 1), (1, 2), (2, 3), (4, 5)]  # (observation frame, next observation frame) per row
    rows = [{"n": k, "episode": int(k == 3), "step": k % 3, "obs": np.zeros(2, np.float32),
             "next_obs": np.zeros(2, np.float32), "action": np.zeros(1, np.float32), "requested": np.zeros(1, np.float32),
             "policy_action": np.zeros(1, np.float32), "reward": 0.0, "terminated": k == 2, "truncated": False,
             "success": False, "intervention": False, "safety_modified": False, "held": False,
             "learner_connected": True, "weights_version": 0, "time": 0.0, "rtt_s": 0.0, "jitter_s": 0.0,
             "images": {"topdown": f[a].copy()}, "next_images": {"topdown": f[b].copy()}} for k, (a, b) in enumerate(frame_of)]
    cols = stack_transitions(rows)
    cols["count"] = 4
    cams = (CameraSpec("topdown", (PX, PX, 3), 10.0),)
    assert check_batch(cols, 2, 1, cams) == 4
    np.testing.assert_array_equal(cols["next_follows"], [True, True, False, False])
    np.testing.assert_array_equal(cols["frames/topdown"], np.stack([f[a] for a, _ in frame_of]))
    np.testing.assert_array_equal(cols["next_frames/topdown"], np.stack([f[3], f[5]]))  # 6 frames sent, not 8
    full = with_next_frames(cols, cams)
    np.testing.assert_array_equal(full["next_frames/topdown"], np.stack([f[b] for _, b in frame_of]))
    state_only = without_frames(cols)
    assert check_batch(state_only, 2, 1) == 4 and not any("frames" in k or "follows" in k for k in state_only)
    with pytest.raises(ProtocolError, match="'next_follows' must be bool"):
        check_batch(state_only, 2, 1, cams)  # a pixel learner needs them
    with pytest.raises(ProtocolError, match=r"'frames/topdown' must be uint8 \(4, 16, 16, 3\)"):
        check_batch(cols, 2, 1, (CameraSpec("topdown", (16, 16, 3), 10.0),))
    lying = {**cols, "next_follows": np.array([True, True, True, False])}  # claims 1 next frame, carries 2
    with pytest.raises(ProtocolError, match=r"'next_frames/topdown' must be uint8 \(1, "):
        check_batch(lying, 2, 1, cams)
    with pytest.raises(ProtocolError, match="last row False"):
        check_batch({**cols, "next_follows": np.array([True, True, False, True])}, 2, 1, cams)
    # the deliberate raise: with max_message_bytes=256 MiB a batch of a 480x640 camera's frames is one array of more
    # elements than the state defaults allow; the rows of a batch are cut so that its frames fit max_bytes
    base = link_limits(256 << 20)
    big = (CameraSpec("wrist", (480, 640, 3), 10.0),)
    raised = camera_link_limits(big, base)
    rows_fit = frame_rows(big, raised)
    assert raised.max_elems >= rows_fit * 480 * 640 * 3 > base.max_elems
    assert 2 * rows_fit * 480 * 640 * 3 <= raised.max_bytes // 2 and raised.max_bytes == base.max_bytes
    assert camera_link_limits((), base) is base


# ----------------------------------------------------------------------------- refusals at start
def test_mismatched_cameras_are_refused_at_start_by_learner_and_actor(tmp_path):
    """Learner start: demos of another frame size, demos without frames, a pixel agent on a robot without cameras.
    Actor start: a pixel policy for 24 px on a 16 px robot (before any step). Each names both and the way out."""
    from robotrl.agents.qlearning import QLPolicy
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_robot, make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.online_cli import build_learner
    from robotrl.real_robot.online_eval import record_controller_demos

    demos = _demos(tmp_path / "minari")
    flat = record_controller_demos(tmp_path / "minari" / "flat", episodes=2, max_steps=10, maze="open", reward="dense")
    base = [f"run_dir={tmp_path / 'l'}", "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}",
            *CAM, *SMALL_PIXELS]
    with pytest.raises(ConfigError) as e:
        build_learner(_compose([*base, "robot.image_size=16", f"demos={demos}"]))
    msg = str(e.value)
    assert "[24, 24, 3]" in msg and "[16, 16, 3]" in msg and "robot.image_size=N" in msg and "robotrl collect" in msg
    with pytest.raises(ConfigError, match="hold no camera frames"):
        build_learner(_compose([*base, f"robot.image_size={PX}", f"demos={flat}"]))
    with pytest.raises(ConfigError, match=r"has no camera.*robot.cameras=\[topdown\]"):
        build_learner(_compose([b for b in base if b != "robot.cameras=[topdown]"]))

    # the actor: the robot's cameras against the pixel policy it is given, before the first episode
    ps = policy_state(QLPolicy(8, 2, hidden=(16,), image_shapes={"pixels/topdown": [PX, PX, 3]}, channels=8, feature_dim=8))
    w = Weights(3, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0)
    robot_cfg = {"_target_": "robotrl.real_robot.sim.MuJoCoTwin", "task": "pointmaze-umaze", "realtime": False,
                 "cameras": ["topdown"], "image_size": 16}
    dev = make_robot(robot_cfg)
    robot = LocalRobot(dev, make_supervisor(None, dev.spec()))
    try:
        with pytest.raises(ConfigError) as e:
            OnlineActor(robot, None, EpisodeRecorder(tmp_path / "actor", robot.spec()), rate_hz=0, initial=w)
    finally:
        robot.close()
    msg = str(e.value)
    assert "{'pixels/topdown': [24, 24, 3]}" in msg and "{'pixels/topdown': [16, 16, 3]}" in msg
    assert "robot.image_size=N" in msg and not list((tmp_path / "actor" / "episodes").glob("*.npz"))


# ----------------------------------------------------------------------------- end to end
def _learner_args(tmp_path: Path, port: int, key: Path, agent: list[str], extra: list[str]) -> list[str]:
    return ["learner", f"key_file={key}", *CAM, f"robot.image_size={PX}", f"endpoint=tcp://127.0.0.1:{port}",
            f"run_dir={tmp_path / 'learner'}", *agent, "push_period_s=0.3", "checkpoint_every_s=1.0",
            f"pushed_weights_dir={tmp_path / 'pushed'}", *extra]


def _actor_args(tmp_path: Path, port: int, key: Path, px: int, work: Path, episodes: int, max_steps: int) -> list[str]:
    return ["actor", f"key_file={key}", *CAM, f"robot.image_size={px}", f"learner=tcp://127.0.0.1:{port}",
            f"episodes={episodes}", f"max_steps={max_steps}", "rate_hz=50", "explore=false", f"work_dir={work}",
            "wait_weights_s=60", "seed=7", f"dataset_id=robot/test/cams-{work.name}-v0"]


def _finish(tmp_path: Path, learner, actor, actor_log: Path, warmup: int, utd: float) -> None:
    """Wait for the actor, then for the updates the learner's schedule allows; stop the learner cleanly."""
    run_dir, llog = tmp_path / "learner", tmp_path / "learner.log"
    wait(lambda: actor.poll() is not None, "the actor to finish", [(learner, llog)], timeout=400)
    assert actor.returncode == 0, actor_log.read_text()[-3000:]
    held = status(run_dir)["ingested"]
    wait(lambda: status(run_dir).get("updates", 0) >= int((held - warmup + 1) * utd) - 1, "the learner's updates",
         [(learner, llog)], timeout=300)
    learner.send_signal(signal.SIGTERM)
    assert learner.wait(timeout=120) == 0, llog.read_text()[-3000:]


def _learn_online(tmp_path: Path, agent: list[str], episodes: int, max_steps: int, utd: float) -> Path:
    """A learner (``agent`` overrides, online data only) and a PX camera actor as real processes, run to the end
    (:func:`_finish`, 32 warm-up steps); returns the learner's log."""
    from robotrl.real_robot.protocol import write_key_file

    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    llog, actor_log = tmp_path / "learner.log", tmp_path / "actor.log"
    learner = start(_learner_args(tmp_path, port, key, agent, ["trainer.offline_ratio=0"]), llog, env)
    actor = None
    try:
        actor = start(_actor_args(tmp_path, port, key, PX, tmp_path / "actor", episodes, max_steps), actor_log, env)
        _finish(tmp_path, learner, actor, actor_log, 32, utd)
    finally:
        stop_all(learner, actor)
    return llog


@pytest.mark.slow
def test_pixel_rlpd_learner_and_actor_on_the_camera_twin(tmp_path):
    """A 16 px actor is refused by the 24 px pixel learner (exit 2, naming both); then the 24 px actor runs: the
    learner's buffer holds the frames it recorded bit for bit, and every action it took is the output of the pushed
    pixel policy (encoder and all) of the version it recorded, on the recorded state and frame."""
    from robotrl.checkpoint import load_arrays, load_checkpoint
    from robotrl.data.replay import ReplayBuffer
    from robotrl.real_robot.learner_link import load_weights
    from robotrl.real_robot.online_eval import pushed_policy
    from robotrl.real_robot.protocol import write_key_file

    torch.set_num_threads(1)
    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    demos = _demos(tmp_path / "minari")
    port = free_port()
    llog = tmp_path / "learner.log"
    learner = start(_learner_args(tmp_path, port, key, SMALL_PIXELS, [f"demos={demos}", "trainer.offline_ratio=0.5"]),
                    llog, env)
    bad_log, actor_log = tmp_path / "actor16.log", tmp_path / "actor.log"
    actor = bad = None
    try:
        # an actor whose robot renders 16 px: the learner refuses its hello, the actor stops before any step
        bad = start(_actor_args(tmp_path, port, key, 16, tmp_path / "actor16", 2, 10), bad_log, env)
        wait(lambda: bad.poll() is not None, "the 16 px actor to be refused", [(learner, llog)], timeout=240)
        err = bad_log.read_text()
        assert bad.returncode == 2, err[-3000:]
        assert "spec_mismatch" in err and "[16, 16, 3]" in err and "[24, 24, 3]" in err and "robot.image_size=N" in err
        assert not list((tmp_path / "actor16" / "episodes").glob("*.npz"))
        actor = start(_actor_args(tmp_path, port, key, PX, tmp_path / "actor", 4, 40), actor_log, env)
        _finish(tmp_path, learner, actor, actor_log, 32, 0.25)
    finally:
        stop_all(learner, actor, bad)
    assert "QLAgent" in llog.read_text()
    st = status(tmp_path / "learner")
    steps = sum(e["steps"] for e in episode_lines(actor_log))
    from robotrl.data import load_dataset

    assert st["ingested"] == steps >= 100 and st["updates"] > 0 and st["demos"] == load_dataset(str(demos)).num_transitions

    # 1. the learner's online buffer: each transition's frame and next frame, bit-exact to the actor's recording
    eps = _episodes(tmp_path / "actor")
    ck = load_checkpoint(tmp_path / "learner" / "checkpoints" / "latest.pt")
    on = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in ck["online"].items()}
    n = int(on["size"])
    keys = ck["online_keys"].numpy()
    buf = ReplayBuffer(n, 8, 2, num_envs=4, image_shapes={"pixels/topdown": (PX, PX, 3)})
    buf.load_state_dict(on)
    batch = buf.sample(n, indices=np.arange(n))
    got, got_next = batch.images()["pixels/topdown"].numpy(), batch.next_images()["pixels/topdown"].numpy()
    assert got.dtype == np.uint8 and got.shape == (n, PX, PX, 3)
    want = np.stack([eps[e]["frames_topdown"][s] for e, s in keys])
    want_next = np.stack([eps[e]["frames_topdown"][s + 1] for e, s in keys])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_next, want_next)
    np.testing.assert_array_equal(batch.observations.numpy(), np.stack([eps[e]["observations"][s] for e, s in keys]))
    assert len(on["final_slots"]) == len(eps)  # one frame per transition (+ each episode's last): stored once
    assert not np.array_equal(want[0], want[-1])  # the ball moved in the pictures

    # 2. the actor acted with the pushed pixel policies: every recorded action is its version's output on the
    #    recorded state and frame; the kept weights are the last version's bit for bit, encoder included
    target, kwargs = ck["policy"]["target"], ck["policy"]["kwargs"]
    assert target.endswith("QLPolicy") and kwargs["image_shapes"] == {"pixels/topdown": [PX, PX, 3]}
    versions = np.concatenate([z["info_weights_version"][1:] for z in eps])
    states = np.concatenate([z["observations"][:-1] for z in eps])
    frames = np.concatenate([z["frames_topdown"][:-1] for z in eps])
    pol_act = np.concatenate([z["info_policy_action"][1:] for z in eps])
    used = sorted(set(versions.tolist()))
    assert len(used) >= 2 and np.isfinite(pol_act).all()
    blind = 0.0
    for v in used:
        pol = pushed_policy(tmp_path / "pushed", v, target, kwargs)
        for i in np.flatnonzero(versions == v):  # one observation at a time, as the actor acted
            with torch.no_grad():
                out = pol(torch.from_numpy(states[i:i + 1]), {"pixels/topdown": torch.from_numpy(frames[i:i + 1])})
                blank = pol(torch.from_numpy(states[i:i + 1]), {"pixels/topdown": torch.zeros(1, PX, PX, 3, dtype=torch.uint8)})
            np.testing.assert_array_equal(out[0].numpy(), pol_act[i])
            blind = max(blind, float((blank - out).abs().max()))
    assert blind > 1e-4  # blank frames change the actions: the comparison above sees the frames
    first, last = load_arrays(tmp_path / "pushed" / f"v{used[0]}.npz"), load_arrays(tmp_path / "pushed" / f"v{used[-1]}.npz")
    enc = [k for k in first if k.startswith("encoder.")]
    assert enc and any(not np.array_equal(first[k], last[k]) for k in enc)  # the critic trained the encoder
    kept = load_weights(tmp_path / "actor" / "weights.npz")
    top = load_arrays(tmp_path / "pushed" / f"v{kept.version}.npz")
    assert kept.version >= used[-1] and set(kept.state) == set(top)
    for k, a in top.items():
        np.testing.assert_array_equal(kept.state[k].numpy(), a)
    summary = json.loads((tmp_path / "actor" / "summary.json").read_text())
    assert summary["drained"]

    # 3. a learner started again on the run directory resumes with the same frames and the pixel agent's weights
    from robotrl.real_robot.online_cli import build_learner

    again, resumed, _ = build_learner(_compose([a for a in _learner_args(tmp_path, 0, key, SMALL_PIXELS, [f"demos={demos}"])[1:]
                                                if not a.startswith("endpoint=")] + ["endpoint=tcp://127.0.0.1:0"]))
    try:
        assert resumed and again.online.size == n and again.pixels
        np.testing.assert_array_equal(again.online.frames["pixels/topdown"][:n], on["frames/pixels/topdown"])
        saved = ck["policy"]["state_dict"]
        assert any(k.startswith("encoder.") for k in saved)
        for k, v in again.agent.policy.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), saved[k].numpy())
    finally:
        again.close()


@pytest.mark.slow
def test_state_agent_on_the_camera_robot_ignores_the_frames(tmp_path):
    """SAC on the camera twin: the actor records its frames, the learner receives and stores the state only."""
    from robotrl.checkpoint import load_checkpoint

    from online_procs import SMALL_SAC

    llog, actor_log = _learn_online(tmp_path, SMALL_SAC, 2, 30, 0.2), tmp_path / "actor.log"
    assert "QLAgent" in llog.read_text()
    steps = sum(e["steps"] for e in episode_lines(actor_log))
    assert status(tmp_path / "learner")["ingested"] == steps > 32
    ck = load_checkpoint(tmp_path / "learner" / "checkpoints" / "latest.pt")
    assert not any("frames" in k for k in ck["online"]) and "image_shapes" not in ck["policy"]["kwargs"]
    eps = _episodes(tmp_path / "actor")
    assert [z["frames_topdown"].shape for z in eps] == [(len(z["observations"]), PX, PX, 3) for z in eps]


@pytest.mark.slow
def test_pixel_residual_on_a_frozen_pixel_base_through_the_online_path(tmp_path):
    """``agent=residual-offpolicy obs=pixels`` on a frozen pixel BC base (its own encoder of the 24 px frames): every
    pushed version carries the base unchanged, the residual and its encoder move, and the actor's actions are the
    pushed versions' outputs on the recorded state and frame."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.checkpoint import load_arrays, load_checkpoint, save_checkpoint
    from robotrl.policy import policy_state
    from robotrl.real_robot.online_eval import pushed_policy

    torch.set_num_threads(1)
    torch.manual_seed(0)
    base = policy_state(BCPolicy(8, 2, image_shapes={"pixels/topdown": [PX, PX, 3]}, hidden=(16,), channels=8,
                                 feature_dim=8).eval())
    save_checkpoint(tmp_path / "pixbc.pt", {"policy": base})
    agent = ["agent=residual-offpolicy", "obs=pixels", f"agent.model.base={tmp_path / 'pixbc.pt'}", "agent.model.hidden=[32,32]",
             "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2", "agent.model.channels=8",
             "agent.model.feature_dim=16", "agent.model.actor_delay=1", "agent.model.critic_warmup_updates=0",
             "agent.model.base_noise_steps=0", "agent.model.actor_lr=1e-3", "trainer.batch_size=16",
             "trainer.online_warmup_steps=32", "trainer.utd=0.25"]
    llog = _learn_online(tmp_path, agent, 4, 40, 0.25)
    assert "ResidualOffPolicyAgent" in llog.read_text()
    ck = load_checkpoint(tmp_path / "learner" / "checkpoints" / "latest.pt")
    target, kwargs = ck["policy"]["target"], ck["policy"]["kwargs"]
    assert target.endswith("ResidualPolicy") and kwargs["image_shapes"] and kwargs["base"]["target"] == base["target"]
    eps = _episodes(tmp_path / "actor")
    versions = np.concatenate([z["info_weights_version"][1:] for z in eps])
    states = np.concatenate([z["observations"][:-1] for z in eps])
    frames = np.concatenate([z["frames_topdown"][:-1] for z in eps])
    pol_act = np.concatenate([z["info_policy_action"][1:] for z in eps])
    used = sorted(set(versions.tolist()))
    assert len(used) >= 2 and status(tmp_path / "learner")["ingested"] == len(versions)
    first, last = load_arrays(tmp_path / "pushed" / f"v{used[0]}.npz"), load_arrays(tmp_path / "pushed" / f"v{used[-1]}.npz")
    for k, v in base["state_dict"].items():  # the frozen base (its encoder too) travels unchanged
        np.testing.assert_array_equal(first[f"base.{k}"], v.numpy())
        np.testing.assert_array_equal(last[f"base.{k}"], v.numpy())
    for part in ("residual.", "encoder."):
        assert any(not np.array_equal(first[k], last[k]) for k in first if k.startswith(part)), part
    for v in used:
        pol = pushed_policy(tmp_path / "pushed", v, target, kwargs)
        for i in np.flatnonzero(versions == v):
            with torch.no_grad():
                out = pol(torch.from_numpy(states[i:i + 1]), {"pixels/topdown": torch.from_numpy(frames[i:i + 1])})
            np.testing.assert_array_equal(out[0].numpy(), pol_act[i])
