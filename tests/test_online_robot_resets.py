"""Episode resets and limits of the online actor (issue 16), on the MuJoCo twin.

The scripted reset drives the real twin home between episodes; the human reset holds the
robot server's twin until a confirmation file appears (a real robot server, learner and actor
process); the robot config's episode limits end episodes; bad reset settings are refused.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from online_procs import OPEN_MAZE, SMALL_SAC, episode_lines, free_port, start, status, stop_all, wait

from robotrl.errors import ConfigError
from robotrl.real_robot.resets import EpisodeLimits, HomeTarget, RobotReset, ScriptedReset, make_limits, make_reset

pytestmark = pytest.mark.usefixtures("one_thread")  # small networks on a shared CPU: one torch thread

HOME = {"indices": [4, 5], "target": [0.0, 0.0], "action_indices": [0, 1], "velocity_indices": [6, 7],
        "gain": 5.0, "damping": 0.5, "tolerance": 0.1, "max_steps": 600}




def _open_twin(**kw):
    from robotrl.real_robot.sim import MuJoCoTwin

    maze = json.loads(OPEN_MAZE)
    return MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=100000, env_kwargs={"maze_map": maze}, **kw)


def _actor(tmp_path, twin, **kw):
    from robotrl.agents.qlearning.policy import QLPolicy
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor

    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    ps = policy_state(QLPolicy(8, 2, (16,)))
    actor = OnlineActor(robot, None, EpisodeRecorder(tmp_path, spec), rate_hz=0, explore=False,
                        initial=Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0), **kw)
    return actor, robot


def test_scripted_reset_drives_the_twin_home_between_episodes(tmp_path):
    """A scripted "human" pushes the ball away during every episode; the scripted reset brings
    it back: every episode starts within the tolerance of home, its reset steps unrecorded."""
    from robotrl.real_robot.teleop import ScriptedTeleop

    twin = _open_twin()
    spec = twin.spec()
    reset = make_reset({"routine": "scripted", "scripted": {"home": HOME}}, spec)
    assert isinstance(reset, ScriptedReset)
    push = ScriptedTeleop(lambda o: np.array([1.0, 0.6]) * (1 if o[0] < 0.5 else -1), lambda ep, k: True,
                          spec.action.low, spec.action.high)
    actor, robot = _actor(tmp_path, twin, teleop=push, reset=reset, max_steps=40)
    try:
        infos = [actor.run_episode() for _ in range(3)]
    finally:
        robot.close()
    for i, info in enumerate(infos):
        z = actor.recorder.load(i)
        start, end = z["observations"][0], z["observations"][-1]
        assert info["steps"] == 40 and z["actions"].shape[0] == 40 and z["truncations"][-1]
        assert np.max(np.abs(start[4:6])) <= 0.1, start  # home reached before the episode began
        assert np.max(np.abs(end[4:6])) > 0.3, end  # the episode moved it away again
        assert info["reset_steps"] > 0
    # each episode continues the physics from where the reset left it: no task reset in between
    assert reset.steps == sum(i["reset_steps"] for i in infos)


def test_scripted_waypoints_are_commanded_in_turn(tmp_path):
    twin = _open_twin()
    spec = twin.spec()
    reset = ScriptedReset(spec, [[0.5, 0.0], [0.0, -0.5]], steps_per_waypoint=5)
    actor, robot = _actor(tmp_path, twin, reset=reset, max_steps=3)
    try:
        actor.run_episode()
        assert reset.steps == 10
        z = actor.recorder.load(0)
        assert z["observations"][0][6] > 0  # the first waypoint pushed the ball along +x
    finally:
        robot.close()


def test_robot_reset_is_the_twins_seeded_reset(tmp_path):
    twin = _open_twin()
    actor, robot = _actor(tmp_path, twin, reset=make_reset(None, twin.spec()), max_steps=5)
    try:
        actor.run_episode()
        actor.next_episode = 0  # the same seed again: the same start
        actor.recorder.dir = tmp_path / "again"
        actor.recorder.dir.mkdir()
        actor.run_episode()
    finally:
        robot.close()
    from robotrl.checkpoint import load_arrays

    a, b = load_arrays(tmp_path / "episodes" / "ep_000000.npz"), load_arrays(tmp_path / "again" / "ep_000000.npz")
    np.testing.assert_array_equal(a["observations"][0], b["observations"][0])
    assert isinstance(actor.reset, RobotReset)


def test_episode_duration_limit_truncates(tmp_path):
    twin = _open_twin()
    limits = make_limits({"max_steps": None, "max_duration_s": 0.3})
    actor, robot = _actor(tmp_path, twin, max_steps=limits.max_steps, max_duration_s=limits.max_duration_s)
    actor.period = 0.02  # paced at 50 Hz
    try:
        info = actor.run_episode()
    finally:
        robot.close()
    z = actor.recorder.load(0)
    # no step limit and a task limit of 100000 steps: only the duration limit can have ended it
    assert z["truncations"][-1] and not z["truncations"][:-1].any() and 1 < info["steps"] < 100000


def test_bad_reset_settings_are_refused():
    from robotrl.real_robot.sim import MuJoCoTwin

    spec = MuJoCoTwin("pointmaze-umaze", realtime=False).spec()
    with pytest.raises(ConfigError, match="routine must be one of"):
        make_reset({"routine": "magic"}, spec)
    with pytest.raises(ConfigError, match="waypoints"):
        make_reset({"routine": "scripted", "scripted": {"waypoints": [[0.0, 0.0, 0.0]]}}, spec)
    with pytest.raises(ConfigError, match="within the robot's bounds"):
        make_reset({"routine": "scripted", "scripted": {"waypoints": [[3.0, 0.0]]}}, spec)
    with pytest.raises(ConfigError, match="needs reset.scripted"):
        make_reset({"routine": "scripted"}, spec)
    with pytest.raises(ConfigError, match="confirm_file"):
        make_reset({"routine": "human", "human": {"confirm": "file"}}, spec)
    with pytest.raises(ConfigError, match="one entry each"):
        HomeTarget([4, 5], [0.0], [0, 1])
    with pytest.raises(ConfigError, match="max_steps"):
        EpisodeLimits(0)


def test_human_reset_holds_the_robot_server_until_confirmed(tmp_path):
    """Real robot server (twin), learner and actor processes; the robot config says
    ``reset.routine=human`` with a confirmation file and ``episode.max_steps=25``. The actor
    holds the robot until the test confirms; every episode's first step comes after its
    confirmation; every transition reaches the learner."""
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.launch import ServerProcess
    from robotrl.real_robot.protocol import load_key, write_key_file

    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    run_dir, work, confirm = tmp_path / "learner", tmp_path / "actor", tmp_path / "reset.ok"
    maze = f"+robot.env_kwargs.maze_map={OPEN_MAZE}"
    robot = ["robot.realtime=false", "robot.max_episode_steps=100000", maze]
    learner = start(["learner", f"key_file={key}", *robot, f"endpoint=tcp://127.0.0.1:{port}", f"run_dir={run_dir}",
                     *SMALL_SAC, "push_period_s=0.5"], tmp_path / "learner.log", env)
    server = ServerProcess(key, overrides=robot).start()
    actor_log = tmp_path / "actor.log"
    actor = start(["actor", f"key_file={key}", *robot, "robot_link=remote", f"robot_endpoint={server.endpoint}",
                   f"learner=tcp://127.0.0.1:{port}", "episodes=3", "rate_hz=50", f"work_dir={work}",
                   "robot.episode.max_steps=25", "robot.reset.routine=human", "robot.reset.human.confirm=file",
                   f"robot.reset.human.confirm_file={confirm}", "dataset_id=robot/test/human-reset-v0"], actor_log, env)
    procs = [(learner, tmp_path / "learner.log"), (actor, actor_log)]
    confirmed_at = []
    try:
        with RobotClient(server.endpoint, load_key(key)) as rc:
            for i in range(3):
                wait(lambda i=i: actor_log.read_text().count("reset: reset the scene") > i, f"reset prompt {i}", procs)
                wait(lambda: rc.status()["held"], "the robot to hold while the human resets", procs)
                assert len(episode_lines(actor_log)) == i  # nothing runs before the confirmation
                confirmed_at.append(time.time())
                confirm.touch()
        wait(lambda: actor.poll() is not None, "the actor to finish", [(learner, tmp_path / "learner.log")])
        assert actor.returncode == 0, actor_log.read_text()[-3000:]
        learner.send_signal(signal.SIGTERM)
        assert learner.wait(timeout=60) == 0
    finally:
        stop_all(learner, actor)
        server.stop()
    assert "reset human" in actor_log.read_text()
    eps = episode_lines(actor_log)
    assert [e["steps"] for e in eps] == [25, 25, 25]
    from robotrl.checkpoint import load_arrays

    for i in range(3):
        z = load_arrays(work / "episodes" / f"ep_{i:06d}.npz")
        assert z["info_time"][1] > confirmed_at[i]  # the episode began after its confirmation
        assert z["truncations"][-1] and not z["terminations"].any()
    assert status(run_dir)["ingested"] == 75 and not confirm.exists()
    assert json.loads((work / "summary.json").read_text())["drained"]
    assert Path(tmp_path / "minari" / "robot" / "test" / "human-reset-v0").exists()
