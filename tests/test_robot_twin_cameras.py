"""The MuJoCo twin's cameras: RobotSpec lists them, observations carry their frames, and the
frames equal the ones ``make_env(..., pixels=...)`` renders for the same seed and commands;
through a live ``robotrl robot-server`` process and a :class:`RobotClient` over loopback
ZeroMQ they arrive bit-exact, and limits too small for them are a clear error, never a hang."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.envs import make_env, osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402
from robotrl.real_robot.interface import CameraSpec, RobotSpec  # noqa: E402
from robotrl.real_robot.sim import MuJoCoTwin  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")


def test_twin_cameras_in_spec_and_observations_match_the_pixel_env():
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=32)
    spec = twin.spec()
    assert spec.cameras == (CameraSpec("topdown", (32, 32, 3), spec.control_rate_hz),)
    assert RobotSpec.from_dict(spec.to_dict()) == spec  # what the bridge sends in its hello
    actions = [np.array([0.8, -0.3], np.float32), np.array([-0.5, 0.9], np.float32)] * 4
    with twin:
        first = twin.reset(seed=11)
        got = [first.images["topdown"]]
        for a in actions:
            twin.send_action(a)
            obs = twin.get_observation()
            assert obs.state.shape == (8,) and obs.images["topdown"].dtype == np.uint8
            got.append(obs.images["topdown"])
    env = make_env("pointmaze-umaze", pixels=["topdown"], size=32)
    o, _ = env.reset(seed=11)
    want = [o["pixels"]["topdown"]]
    for a in actions:
        o, *_ = env.step(a)
        want.append(o["pixels"]["topdown"])
    env.close()
    np.testing.assert_array_equal(np.stack(got), np.stack(want))
    assert not np.array_equal(got[0], got[-1])


def test_twin_without_cameras_is_unchanged_and_bad_camera_is_refused():
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False)
    assert twin.spec().cameras == () and "cameras" not in twin.spec().to_dict()
    with twin:
        assert twin.reset(seed=0).images is None
    with pytest.raises(ConfigError, match="unknown camera"):
        with MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["wrist"]):
            pass


def test_camera_frames_over_the_bridge_codec_need_the_raised_limits():
    from robotrl.real_robot.client import body_obs
    from robotrl.real_robot.handlers import obs_body
    from robotrl.real_robot.interface import ProtocolError
    from robotrl.real_robot.protocol import VERSION, Limits, camera_limits, decode, encode

    twin = MuJoCoTwin("fetch-push", realtime=False, cameras=["external_camera_0", "gripper_camera_rgb"], image_size=128)
    with twin:
        obs = twin.reset(seed=4)
    payload = encode({"v": VERSION, "type": "observe", "dir": "rep", "src": "robot", "dst": "client", "epoch": "e",
                      "seq": 1, "ts": 1.0, "body": obs_body(obs)})
    with pytest.raises(ProtocolError, match="exceeds"):
        decode(payload, Limits())  # the state-sized defaults refuse two 128 px frames
    limits = camera_limits(twin.spec().cameras)
    assert limits.max_bytes >= 2 * 128 * 128 * 3 and limits.max_elems >= 128 * 128 * 3
    assert camera_limits((), Limits()) == Limits()  # a state-only robot keeps the defaults
    back = body_obs(decode(payload, limits)["body"])
    np.testing.assert_array_equal(back.state, obs.state)
    for k in obs.images:
        np.testing.assert_array_equal(back.images[k], obs.images[k])


PX = 128  # one 128 px RGB frame (49 152 bytes and elements) exceeds the state-sized default limits (16 384 elements)


def cam_server_args(px: int = PX) -> list[str]:
    """``robot-server`` overrides of the PointMaze twin with one ``px`` px ``topdown`` camera.

    The twin steps as fast as asked (no wall-clock pacing), a 0.5 s step window (10 periods at 20 Hz) and a watchdog
    that never fires between two steps of the test: the server's episode is then exactly the commands the client sent.
    """
    return ["robot.cameras=[topdown]", f"robot.image_size={px}", "robot.realtime=false", "robot.safety.rate_hz=20",
            "robot.safety.watchdog_s=30", "deadline_periods=10"]


CAM_SERVER = cam_server_args()


@contextmanager
def camera_server(tmp_path_factory, px: int = PX):
    """A real ``robotrl robot-server`` process serving the PointMaze twin with a ``px`` px ``topdown`` camera;
    yields ``(ServerProcess, key bytes)``."""
    from robotrl.real_robot.launch import ServerProcess
    from robotrl.real_robot.protocol import load_key, write_key_file

    key_file = write_key_file(tmp_path_factory.mktemp("key") / "robot.key")
    with ServerProcess(key_file, cam_server_args(px)) as srv:
        yield srv, load_key(key_file)


@pytest.fixture(scope="module")
def cam_server(tmp_path_factory):
    """:func:`camera_server` at 128 px."""
    with camera_server(tmp_path_factory) as served:
        yield served


def test_camera_frames_through_a_live_server_match_the_twin_rendered_locally(cam_server):
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.protocol import camera_limits

    srv, key = cam_server
    actions = [np.array([0.8, -0.3], np.float32), np.array([-0.5, 0.9], np.float32), np.array([0.2, 0.2], np.float32)] * 3
    with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:
        spec = c.hello()
        assert spec.cameras == (CameraSpec("topdown", (PX, PX, 3), spec.control_rate_hz),)
        limits = camera_limits(spec.cameras)
        assert c.server_limits["max_bytes"] >= limits.max_bytes > 65536  # the server raised its own from the spec
        c.use_limits(limits)
        first = c.reset(seed=11)
        states, frames, applied = [first.state], [first.images["topdown"]], []
        for a in actions:
            ans = c.step(a)
            applied.append(ans["applied"])
            states.append(ans["obs"].state)
            frames.append(ans["obs"].images["topdown"])
        watched = c.observe()  # any client may observe: the same latest frame
        assert c.status()["steps"] >= len(actions) and c.auth.rejected["oversized"] == 0
    np.testing.assert_array_equal(watched.images["topdown"], frames[-1])
    assert all(f.dtype == np.uint8 and f.shape == (PX, PX, 3) for f in frames)

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=PX)
    with twin:
        o = twin.reset(seed=11)
        want_s, want_f = [o.state], [o.images["topdown"]]
        for a in applied:
            twin.send_action(a)
            o = twin.get_observation()
            want_s.append(o.state)
            want_f.append(o.images["topdown"])
    np.testing.assert_array_equal(np.stack(frames), np.stack(want_f))
    np.testing.assert_array_equal(np.stack(states), np.stack(want_s))
    assert not np.array_equal(frames[0], frames[-1])  # the ball moved in the pictures


def test_default_limits_are_a_clear_error_naming_camera_limits_on_both_ends(cam_server):
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.protocol import Limits, camera_limits
    from robotrl.real_robot.server import RobotServer

    srv, key = cam_server
    with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:  # state-sized default limits
        c.hello()
        for request in (lambda: c.reset(seed=0), c.observe, lambda: c.step(np.zeros(2, np.float32))):
            with pytest.raises(ConfigError, match="camera_limits") as exc:
                request()
            assert "topdown" in str(exc.value) and "max_bytes" in str(exc.value)
        assert not c.lease_held and c.timeouts == 0  # refused before sending: no lease taken, nothing waited for

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=PX)
    sup = make_supervisor({}, twin.spec())
    with pytest.raises(ConfigError, match="camera_limits"):
        RobotServer(twin, sup, key, limits=Limits())  # the server refuses to start with limits its frames exceed
    RobotServer(twin, sup, key, limits=camera_limits(twin.spec().cameras)).close()


def _reset_frames(seeds, px: int = PX):
    """The twin's first observation (state, topdown frame) for each seed, rendered in this process."""
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=px)
    with twin:
        return [(o.state, o.images["topdown"]) for o in (twin.reset(seed=s) for s in seeds)]


def test_control_loop_recording_keeps_the_frames_and_loads_into_the_replay_buffer(cam_server, tmp_path):
    from robotrl.data import ReplayBuffer, load_dataset
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.control import ChunkScheduler, ControlLoop
    from robotrl.real_robot.protocol import camera_limits
    from robotrl.real_robot.recording import record_dataset

    srv, key = cam_server
    push = np.array([0.6, -0.4], np.float32)
    seeds = [21, 22]
    with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:
        spec = c.hello()
        c.use_limits(camera_limits(spec.cameras))
        loop = ControlLoop(c, ChunkScheduler(lambda o: push[None]), rate_hz=5, hold_action=spec.hold_action, deadline_frac=0.9)
        logs = [loop.run_episode(seed=s, max_steps=n) for s, n in zip(seeds, (6, 4))]
    assert [log.stopped for log in logs] == ["max_steps", "max_steps"]
    path = record_dataset("robot/cams/loop-v0", logs, spec, root=tmp_path)

    # what went over the wire, per episode: every step's frame and the final observation's
    want = [np.stack([s.images["topdown"] for s in log.steps] + [log.final_obs.images["topdown"]]) for log in logs]
    want_s = [np.stack([s.obs for s in log.steps] + [log.final_obs.state]) for log in logs]
    data = load_dataset(path)
    M = data.num_transitions
    assert data.obs_layout.keys == ("state",) and data.obs_dim == 8  # the frames stay out of the flat vector
    assert data.images["topdown"].dtype == np.uint8 and data.images["topdown"].shape == (M + 2, PX, PX, 3)
    np.testing.assert_array_equal(data.images["topdown"], np.concatenate(want))
    np.testing.assert_array_equal(data.observations, np.concatenate([w[:-1] for w in want_s]))
    np.testing.assert_array_equal(data.actions, np.stack([s.applied for log in logs for s in log.steps]))
    batch = ReplayBuffer.from_offline(data).sample(M, indices=np.arange(M))
    np.testing.assert_array_equal(batch.images()["topdown"].numpy(), np.concatenate([w[:-1] for w in want]))
    np.testing.assert_array_equal(batch.next_images()["topdown"].numpy(), np.concatenate([w[1:] for w in want]))
    # each episode starts from the frame the twin renders for its seed here, whatever the timing of the loop
    for w, ws, (s0, f0) in zip(want, want_s, _reset_frames(seeds)):
        np.testing.assert_array_equal(w[0], f0)
        np.testing.assert_array_equal(ws[0], s0)
    assert not np.array_equal(want[0][0], want[0][-1])


def test_robotrl_deploy_raises_its_limits_and_records_the_frames(cam_server, tmp_path):
    import subprocess
    import sys

    import torch

    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.checkpoint import save_checkpoint
    from robotrl.data import ReplayBuffer, load_dataset
    from robotrl.policy import policy_state

    srv, _ = cam_server
    torch.manual_seed(0)
    ckpt = tmp_path / "policy.pt"
    save_checkpoint(ckpt, {"policy": policy_state(BCPolicy(8, 2, hidden=(16, 16)))})
    res = subprocess.run([sys.executable, "-m", "robotrl.real_robot.cli", "deploy", f"checkpoint={ckpt}",
                          f"endpoint={srv.endpoint}", f"key_file={srv.key_file}", "episodes=2", "seed=40", "max_steps=5",
                          "rate_hz=5", "deadline_frac=0.9", "link_timeout_s=30", "dataset_id=robot/cams/deploy-v0",
                          f"dataset_root={tmp_path / 'minari'}"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    data = load_dataset(tmp_path / "minari" / "robot/cams/deploy-v0")
    M, E = data.num_transitions, data.num_episodes
    assert E == 2 and data.images["topdown"].shape == (M + E, PX, PX, 3) and data.images["topdown"].dtype == np.uint8
    batch = ReplayBuffer.from_offline(data).sample(M, indices=np.arange(M))
    assert batch.images()["topdown"].shape == (M, PX, PX, 3)
    starts = data.image_index[data.episode_starts]
    for row, t0, (s0, f0) in zip(starts, data.episode_starts, _reset_frames([40, 41])):
        np.testing.assert_array_equal(data.images["topdown"][row], f0)  # the recorded frames are the twin's renders
        np.testing.assert_array_equal(data.observations[t0], s0)


# ---- a pixel policy deployed end to end: camera dataset -> pixel BC -> `robotrl export` -> `robotrl deploy` ----------
PIX = 32  # the policy's frames: 32 px top-down renders
PIX_TRAIN = ["experiment=bc", "obs=pixels", "dataset=pointmaze-umaze-topdown", "dataset.id=robotrl/pointmaze/umaze-slow-pixdeploy-v1",
             "dataset.recipe_args.num_steps=1500", f"dataset.recipe_args.image_size={PIX}", "+dataset.recipe_args.ref_episodes=2",
             "trainer.offline_steps=300", "trainer.eval_every=100000", "trainer.checkpoint_every=300", "trainer.eval_episodes=1",
             "trainer.eval_envs=1", "trainer.batch_size=16", "trainer.progress=false", "torch_threads=1",
             "agent.model.channels=8", "agent.model.hidden=[64,64]", "device=cpu",
             "agent.model.pooling=flatten"]  # after 300 updates its actions depend on the frames ~100x more than spatial softmax's


def _robotrl(*args: str, timeout: float = 300):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "robotrl.cli", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pixel_bundle(minari_module_root, tmp_path_factory):
    """A pixel BC run (300 updates on a generated 1 500-step PointMaze camera dataset, 32 px) and its
    deploy bundle written by a ``robotrl export`` process: ``(run_dir, bundle_dir)``."""
    from hydra import compose, initialize_config_module

    from robotrl.experiment import build_trainer

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=PIX_TRAIN)
    run_dir = tmp_path_factory.mktemp("pixbc")
    build_trainer(cfg, run_dir).fit()
    bundle = run_dir / "bundle"
    res = _robotrl("export", str(run_dir), str(bundle))
    assert res.returncode == 0, res.stderr[-3000:]
    assert '"name": "topdown"' in res.stdout and (bundle / "policy.onnx").is_file() and (bundle / "policy.torchscript.pt").is_file()
    again = _robotrl("export", str(run_dir), str(bundle))  # an existing bundle is never overwritten silently
    assert again.returncode == 2 and "--overwrite" in again.stderr
    return run_dir, bundle


def _deploy(bundle, srv, *extra: str):
    return _robotrl("deploy", f"checkpoint={bundle}", f"endpoint={srv.endpoint}", f"key_file={srv.key_file}", "rate_hz=5",
                    "deadline_frac=0.9", "link_timeout_s=30", *extra)


def test_robotrl_deploy_runs_a_pixel_bundle_on_the_frames_the_robot_sent(pixel_bundle, minari_module_root, tmp_path_factory,
                                                                         tmp_path):
    """`robotrl deploy` of the exported pixel BC bundle (ONNX) on a robot-server twin with the 32 px camera it was
    trained on: every action the policy chose is the in-process policy's on the recorded state and frame of that step,
    and the robot applied it."""
    import minari
    import torch

    from robotrl.policy import load_policy

    run_dir, bundle = pixel_bundle
    with camera_server(tmp_path_factory, PIX) as (srv, _):
        res = _deploy(bundle, srv, "episodes=2", "seed=60", "max_steps=8", "dataset_id=robot/cams/pixdeploy-v0",
                      f"dataset_root={minari_module_root}", f"output={tmp_path / 'summary.json'}")
    assert res.returncode == 0, res.stderr[-3000:]
    ds = minari.load_dataset("robot/cams/pixdeploy-v0")
    assert ds.total_episodes == 2
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["backend"] == "onnx" and summary["policy_cameras"] == ["topdown"] and summary["stopped"] == "max_steps"
    policy = load_policy(str(run_dir))
    chosen, blind = 0, []
    for ep, (s0, f0) in zip(ds.iterate_episodes(), _reset_frames([60, 61], PIX)):
        state, frames = ep.observations["state"][:-1], ep.observations["topdown"][:-1]
        assert frames.dtype == np.uint8 and frames.shape[1:] == (PIX, PIX, 3)
        np.testing.assert_array_equal(frames[0], f0)  # the twin's renders, sent over the bridge
        np.testing.assert_array_equal(state[0], s0)
        pol = ep.infos["policy_action"][1:]
        live = np.isfinite(pol).all(axis=1)  # the steps whose action the policy had ready in time
        with torch.no_grad():
            want = policy(torch.as_tensor(state[live]), {"pixels/topdown": torch.as_tensor(frames[live])}).numpy()
            blank = policy(torch.as_tensor(state[live]), {"pixels/topdown": torch.zeros_like(torch.as_tensor(frames[live]))}).numpy()
        np.testing.assert_allclose(pol[live], want, atol=1e-5, rtol=0)  # onnxruntime vs torch: float rounding only
        blind.append(np.abs(blank - want).max(initial=0.0))
        unchanged = live & ~ep.infos["safety_modified"][1:].astype(bool) & ~ep.infos["held"][1:].astype(bool)
        np.testing.assert_allclose(ep.actions[unchanged], pol[unchanged], atol=1e-6, rtol=0)  # what the robot applied
        np.testing.assert_allclose(ep.infos["requested_action"][1:][live], pol[live], atol=1e-6, rtol=0)
        chosen += int(live.sum())
        assert not np.array_equal(frames[0], frames[-1])  # the ball moved in the pictures
    assert chosen > 0
    assert max(blind) > 1e-4  # blank frames change the actions 10x the tolerance: the comparison above sees the frames


def test_robotrl_deploy_refuses_a_pixel_bundle_on_other_cameras_before_any_step(pixel_bundle, cam_server, tmp_path):
    """The 32 px bundle on the 128 px camera robot: exit 2 naming the camera, both shapes and the fix; the robot
    server counted no step, and nothing was recorded."""
    from robotrl.real_robot.client import RobotClient

    _, bundle = pixel_bundle
    srv, key = cam_server

    def server_steps():
        with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:
            c.hello()
            return c.status()["steps"]

    before = server_steps()
    res = _deploy(bundle, srv, "episodes=1", "max_steps=5", "dataset_id=robot/cams/refused-v0", f"dataset_root={tmp_path}")
    assert res.returncode == 2, (res.returncode, res.stderr[-3000:])
    err = res.stderr
    assert "camera 'topdown' sends (128, 128, 3), the policy takes (32, 32, 3)" in err, err[-3000:]
    assert "robot.cameras=[topdown] robot.image_size=32" in err and "nothing was moved" in err
    assert server_steps() == before  # not one step
    assert not (tmp_path / "robot").exists()


def test_online_actor_records_the_frames_through_a_live_server_and_recovers_them_from_its_journal(cam_server, tmp_path):
    """The online actor on the 128 px camera server (RemoteRobot raises its limits after hello): its episode files
    and Minari dataset hold every frame the server sent, bit-exact to the twin replayed here with the applied
    actions; an episode left in the journal (the actor died before writing it) is recovered with its frames."""
    from robotrl.agents.bc.policy import BCPolicy
    from robotrl.data import ReplayBuffer, load_dataset
    from robotrl.policy import policy_state
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, OnlineActor, RemoteRobot

    srv, key = cam_server
    ps = policy_state(BCPolicy(8, 2, hidden=(16,)))
    robot = RemoteRobot(RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0), step_timeout_s=10.0)
    spec = robot.spec()
    rec = EpisodeRecorder(tmp_path / "actor", spec)
    actor = OnlineActor(robot, None, rec, rate_hz=0, explore=True, max_steps=5, seed=30,
                        initial=Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0))
    died = RuntimeError("the actor died before writing its episode")

    def dead_write(*args, **kw):
        raise died

    try:
        actor.run_episode()  # episode 0: written at its end
        rec.write = dead_write  # episode 1: only the journal is left behind
        with pytest.raises(RuntimeError, match="died"):
            actor.run_episode()
    finally:
        robot.close()
    assert rec.journal_path.exists()
    again = EpisodeRecorder(tmp_path / "actor", spec)  # a restarted actor
    assert len(again.recover()) == 5 and again.episodes_done() == [0, 1]

    for ep, seed in ((0, 30), (1, 31)):
        z = again.load(ep)
        frames = z["frames_topdown"]
        assert frames.dtype == np.uint8 and frames.shape == (6, PX, PX, 3) and z["observations"].shape == (6, 8)
        twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=["topdown"], image_size=PX)
        with twin:  # the server's episode is exactly the applied commands: replay them here
            o = twin.reset(seed=seed)
            want_f, want_s = [o.images["topdown"]], [o.state]
            for a in z["actions"]:
                twin.send_action(a)
                o = twin.get_observation()
                want_f.append(o.images["topdown"])
                want_s.append(o.state)
        np.testing.assert_array_equal(frames, np.stack(want_f))
        np.testing.assert_array_equal(z["observations"], np.stack(want_s))
        assert not np.array_equal(frames[0], frames[-1])

    data = load_dataset(again.to_minari("robot/cams/online-v0", root=tmp_path / "minari"))
    M = data.num_transitions
    assert data.obs_layout.keys == ("state",) and data.images["topdown"].shape == (M + 2, PX, PX, 3)
    np.testing.assert_array_equal(data.images["topdown"], np.concatenate([again.load(i)["frames_topdown"] for i in (0, 1)]))
    batch = ReplayBuffer.from_offline(data).sample(M, indices=np.arange(M))
    np.testing.assert_array_equal(batch.next_images()["topdown"].numpy(),
                                  np.concatenate([again.load(i)["frames_topdown"][1:] for i in (0, 1)]))
