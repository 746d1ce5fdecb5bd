"""Online RL on the robot (issue 16): the actor ↔ learner link, the actor, the learner, interventions.

Real sockets and real processes: a learner process is killed with SIGKILL mid-run and a
new one resumes from its checkpoint, while the actor keeps acting and recording; then
every recorded transition must be in the learner's buffer exactly once, interventions must
be stored as executed and flagged, and the actor must have acted with pushed weights.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from online_procs import free_port, start, status, wait

from robotrl.real_robot.learner_link import (
    ActorLink,
    Dedup,
    LearnerEndpoint,
    SpillQueue,
    arrays_to_state,
    check_batch,
    link_limits,
    stack_transitions,
    state_to_arrays,
)
from robotrl.real_robot.protocol import write_key_file
from robotrl.real_robot.teleop import ScriptedTeleop, SpaceMouseTeleop, pointmaze_controller

pytestmark = pytest.mark.usefixtures("one_thread")  # small networks on a shared CPU: one torch thread

SPEC = {"name": "toy", "observation": {"names": ["a", "b"], "units": ["1", "1"], "low": [None, None], "high": [None, None]},
        "action": {"names": ["u"], "units": ["1"], "low": [-1.0], "high": [1.0]}, "control_rate_hz": 10.0,
        "hold_action": [0.0], "gym_env_id": None, "episodic": True, "extra": {}}


def _row(n: int, episode: int, step: int, do: int = 2, da: int = 1) -> dict:
    return {"n": n, "episode": episode, "step": step, "obs": np.full(do, n, np.float32),
            "next_obs": np.full(do, n + 1, np.float32), "action": np.full(da, 0.5, np.float32),
            "requested": np.full(da, 0.5, np.float32), "policy_action": np.full(da, 0.5, np.float32),
            "reward": float(n), "terminated": False, "truncated": False, "success": False, "intervention": False,
            "safety_modified": False, "held": False, "learner_connected": True, "weights_version": 0,
            "time": time.time(), "rtt_s": 0.001, "jitter_s": 0.0}


# ----------------------------------------------------------------------------- link units
def test_weights_travel_as_named_arrays_bit_exact():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
    names, arrays = state_to_arrays(net.state_dict())
    assert all(isinstance(a, np.ndarray) for a in arrays)
    back = arrays_to_state(names, arrays)
    for k, v in net.state_dict().items():
        assert torch.equal(back[k], v)


def test_dedup_takes_each_episode_step_once():
    d = Dedup()
    keep = d.new_rows("a", np.array([0, 0, 0]), np.array([0, 1, 2]))
    assert keep.all()
    d.take("a", 0, 2, 2)
    keep = d.new_rows("a", np.array([0, 0, 1]), np.array([1, 2, 0]))  # a resend overlapping the held rows
    assert keep.tolist() == [False, False, True] and d.duplicates == 2
    assert d.new_rows("b", np.array([0]), np.array([0])).all()  # another actor's (0, 0) is its own
    assert Dedup(d.state()).have("a") == 2


def test_batch_validation_names_the_field():
    cols = stack_transitions([_row(0, 0, 0), _row(1, 0, 1)])
    cols["count"] = 2
    assert check_batch(cols, 2, 1) == 2
    cols["obs"] = cols["obs"][:, :1]
    with pytest.raises(ValueError, match="'obs'"):
        check_batch(cols, 2, 1)


def test_spill_survives_a_restart_and_drops_only_durable(tmp_path):
    q = SpillQueue(tmp_path / "spill", link_limits())
    for first in (0, 3):
        cols = stack_transitions([_row(n, 0, n) for n in range(first, first + 3)])
        cols["count"] = 3
        q.put(cols)
    q2 = SpillQueue(tmp_path / "spill", link_limits())  # a new actor process on the same directory
    assert len(q2) == 6 and q2.counters == {"next_n": 6, "next_episode": 1}
    assert q2.first_after(4)["n"].tolist() == [5]
    assert q2.drop_through(3) == 3 and len(q2) == 3  # batch 3..5 is not wholly durable: kept
    assert not list((tmp_path / "spill").glob("*.tmp"))


def test_link_refuses_a_peer_without_the_key(tmp_path):
    write_key_file(tmp_path / "a.key")
    write_key_file(tmp_path / "b.key")
    from robotrl.real_robot.protocol import load_key

    ep = LearnerEndpoint("tcp://127.0.0.1:0", load_key(tmp_path / "a.key"))
    link = ActorLink(ep.endpoint, load_key(tmp_path / "b.key"), "intruder", SPEC, tmp_path / "spill")
    try:
        got = []
        for _ in range(100):
            got += ep.recv(20)
            if ep.auth.rejected["unauthenticated"]:
                break
        assert got == [] and ep.auth.rejected["unauthenticated"] > 0 and not link.connected
    finally:
        link.close()
        ep.close()


def test_link_delivers_acknowledges_and_resends(tmp_path):
    """In-process learner end driven by hand: batches arrive in order, the ack moves the actor on,
    a batch never acknowledged is resent, durable acks delete the spill."""
    from robotrl.real_robot.protocol import load_key

    key = load_key(write_key_file(tmp_path / "k.key"))
    ep = LearnerEndpoint("tcp://127.0.0.1:0", key)
    link = ActorLink(ep.endpoint, key, "a0", SPEC, tmp_path / "spill", batch_size=4, flush_s=0.01, ack_timeout_s=0.3)
    dedup, seen, dropped_once = Dedup(), [], False
    try:
        for n in range(10):
            link.submit(_row(n, 0, n))
        end = time.monotonic() + 20
        while dedup.have("a0") < 9 and time.monotonic() < end:
            for _, msg in ep.recv(20):
                b = msg["body"]
                if msg["type"] == "hello":
                    ep.reply("a0", "welcome", {"have": -1, "version": 0})
                elif msg["type"] == "batch":
                    if not dropped_once:  # lose the first batch's ack: the actor must resend it
                        dropped_once = True
                        continue
                    keep = dedup.new_rows("a0", b["episode"], b["step"])
                    for i in np.flatnonzero(keep):
                        seen.append(int(b["n"][i]))
                        dedup.take("a0", int(b["episode"][i]), int(b["step"][i]), int(b["n"][i]))
                    ep.reply("a0", "ack", {"received": dedup.have("a0"), "durable": -1})
        assert seen == list(range(10)) and link.resent_batches >= 1
        assert len(link.spill) == 10  # nothing durable yet: all kept on disk
        ep.reply("a0", "ack", {"received": 9, "durable": 9})
        end = time.monotonic() + 10
        while len(link.spill) and time.monotonic() < end:
            time.sleep(0.02)
        assert len(link.spill) == 0 and not list((tmp_path / "spill").glob("*.msgpack"))
    finally:
        link.close()
        ep.close()


def _serve(ep, dedup: Dedup, seen: list, have: int, until, timeout: float = 20.0, durable_cap: int = 1 << 62) -> None:
    """Drive a learner end by hand until ``until()``: welcome with ``have``, take new rows, ack them
    (durable up to ``durable_cap``: the rows its last checkpoint holds)."""
    end = time.monotonic() + timeout
    while not until() and time.monotonic() < end:
        for _, msg in ep.recv(20):
            b = msg["body"]
            if msg["type"] == "hello":
                ep.reply("a0", "welcome", {"have": have, "version": 0})
            elif msg["type"] == "batch":
                for i in np.flatnonzero(dedup.new_rows("a0", b["episode"], b["step"])):
                    seen.append(int(b["n"][i]))
                    dedup.take("a0", int(b["episode"][i]), int(b["step"][i]), int(b["n"][i]))
                ep.reply("a0", "ack", {"received": dedup.have("a0"), "durable": min(dedup.have("a0"), durable_cap)})


def test_running_actor_resends_to_a_restarted_learner_from_its_checkpoint(tmp_path):
    """The learner dies after taking rows 0..9 but its checkpoint holds only 0..5: the running
    actor notices the silence, greets the new learner on the same endpoint and resends 6.. on."""
    from robotrl.real_robot.protocol import load_key

    key = load_key(write_key_file(tmp_path / "k.key"))
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    ep = LearnerEndpoint(endpoint, key)
    link = ActorLink(endpoint, key, "a0", SPEC, tmp_path / "spill", batch_size=5, flush_s=0.01, ack_timeout_s=0.2,
                     link_timeout_s=0.5)
    try:
        seen1: list = []
        d1 = Dedup()
        for n in range(10):
            link.submit(_row(n, n // 5, n % 5))
        _serve(ep, d1, seen1, -1, lambda: d1.have("a0") >= 9, durable_cap=5)
        ep.close()  # killed: what it took after its checkpoint (rows 6..9) is gone with it
        for n in range(10, 15):
            link.submit(_row(n, n // 5, n % 5))
        end = time.monotonic() + 20
        while link.connected and time.monotonic() < end:
            time.sleep(0.02)
        assert not link.connected
        ep = LearnerEndpoint(endpoint, key)
        seen2: list = []
        d2 = Dedup({"a0": (1, 0, 5)})  # the checkpoint: rows through n=5 (episode 1, step 0)
        _serve(ep, d2, seen2, 5, lambda: d2.have("a0") >= 14)
        assert seen1 == list(range(10)) and seen2 == list(range(6, 15)) and link.reconnects >= 1
        end = time.monotonic() + 10
        while len(link.spill) and time.monotonic() < end:
            time.sleep(0.02)
        assert len(link.spill) == 0
    finally:
        link.close()
        ep.close()


# ----------------------------------------------------------------------------- teleop
def test_scripted_human_overrides_at_its_steps():
    t = ScriptedTeleop(lambda o: np.array([2.0, -0.5]), lambda ep, k: ep == 0 and 1 <= k < 3, [-1, -1], [1, 1])
    t.new_episode(0)
    out = []
    for _ in range(4):
        t.observe(np.zeros(8))
        out.append(t.poll())
    assert [c.engaged for c in out] == [False, True, True, False]
    assert out[1].action.tolist() == [1.0, -0.5]  # clipped to the bounds


def test_spacemouse_needs_the_deadman_button():
    state = {"axes": [0.5, -1, 0, 0, 0, 0], "buttons": [False, False]}
    dev = SpaceMouseTeleop(lambda: (state["axes"], state["buttons"]), [0, 0], [-1, -1], [1, 1], axis_map=(1, 0),
                           gain=0.5, estop_button=1)
    assert not dev.poll().engaged
    state["buttons"] = [True, True]
    cmd = dev.poll()
    assert cmd.engaged and cmd.estop and cmd.action.tolist() == [-0.5, 0.25]


def test_pointmaze_controller_points_to_the_goal():
    obs = np.array([0, 0, 1, -1, 0, 0, 0, 0], np.float32)
    assert np.all(np.sign(pointmaze_controller()(obs)) == [1, -1])


# ----------------------------------------------------------------------------- processes
@pytest.mark.slow
def test_learner_and_actor_killed_mid_run_lose_and_duplicate_nothing(tmp_path):
    """Robot server + learner + actor as real processes. kill -9 the learner: the actor keeps
    acting and recording; a learner resumed from the checkpoint gets the rest. kill -9 the
    actor: the robot server's watchdog holds; a new actor (same id and work dir) closes the
    killed one's episode from its journal and resends what the learner lacks. Then every
    recorded transition is in the learner's buffer exactly once; interventions are stored as
    executed and flagged (also in the demonstration buffer); the actor acted with the weights
    the learner pushed."""
    from robotrl.checkpoint import load_arrays, load_checkpoint
    from robotrl.data.dataset import load_dataset
    from robotrl.policy import policy_class
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.launch import ServerProcess
    from robotrl.real_robot.protocol import load_key

    key = write_key_file(tmp_path / "online.key")
    env = {**os.environ, "MINARI_DATASETS_PATH": str(tmp_path / "minari"), "OMP_NUM_THREADS": "1"}
    port = free_port()
    run_dir, work, weights_dir = tmp_path / "learner", tmp_path / "actor", tmp_path / "pushed"
    common = [f"key_file={key}", "robot.realtime=false", "robot.task=pointmaze-umaze"]
    learner_args = ["learner", *common, f"endpoint=tcp://127.0.0.1:{port}", f"run_dir={run_dir}", "agent=sac",
                    "agent.model.num_critics=2", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
                    "trainer.batch_size=16", "trainer.online_warmup_steps=32", "trainer.utd=0.2",
                    "push_period_s=0.3", "checkpoint_every_s=1.0", f"pushed_weights_dir={weights_dir}"]
    logs = {n: tmp_path / f"{n}.log" for n in ("learner1", "actor1", "learner2", "actor2")}
    learner = start(learner_args, logs["learner1"], env)  # starts while the robot server does
    server = ServerProcess(key, overrides=["robot.realtime=false"]).start()
    actor_args = ["actor", *common, "robot_link=remote", f"robot_endpoint={server.endpoint}",
                  f"learner=tcp://127.0.0.1:{port}", "max_steps=50", "rate_hz=100", "teleop=scripted",
                  "scripted.every=2", "scripted.start=5", "scripted.length=10", "explore=false", f"work_dir={work}",
                  "link_timeout_s=1.0", "ack_timeout_s=0.5", "batch_size=16", "dataset_id=robot/test/online-v0",
                  "drain_timeout_s=100"]
    n_eps = lambda: len(list((work / "episodes").glob("ep_*.npz")))  # noqa: E731
    actor = start([*actor_args, "episodes=100000"], logs["actor1"], env)  # runs until it is killed
    procs = [(learner, logs["learner1"]), (actor, logs["actor1"])]
    learner2 = actor2 = None
    try:
        # 1. kill the learner once it holds robot data in a checkpoint and has pushed a trained version
        wait(lambda: (run_dir / "checkpoints" / "latest.pt").exists() and status(run_dir).get("ingested", 0) >= 100
              and status(run_dir).get("version", 0) >= 2, "the first learner to checkpoint robot data", procs)
        learner.send_signal(signal.SIGKILL)
        learner.wait()
        before = n_eps()

        def lost_steps() -> int:
            return sum(json.loads(line)["episode"]["lost"] for line in logs["actor1"].read_text().splitlines()
                       if line.startswith('{"episode"'))

        wait(lambda: lost_steps() > 0, "the actor to act and record without a learner", [(actor, logs["actor1"])])
        learner2 = start(learner_args, logs["learner2"], env)
        backlog = n_eps()
        # 2. kill the actor mid-episode once the new learner has taken the episodes recorded without it
        wait(lambda: status(run_dir).get("pid") == learner2.pid and status(run_dir).get("episodes", 0) > backlog,
              "the resumed learner to catch up", [(actor, logs["actor1"]), (learner2, logs["learner2"])])

        def frozen_mid_episode() -> bool:  # SIGSTOP, look, SIGCONT if between episodes: no race with the actor
            actor.send_signal(signal.SIGSTOP)
            wait(lambda: Path(f"/proc/{actor.pid}/stat").read_text().split(")")[-1].split()[0] == "T",
                  "the actor to stop", [])
            j = work / "current.journal"
            if j.exists() and j.stat().st_size > 0:
                return True
            actor.send_signal(signal.SIGCONT)
            return False

        wait(frozen_mid_episode, "the actor to be mid-episode", [(actor, logs["actor1"])])
        actor.send_signal(signal.SIGKILL)
        actor.wait()
        with RobotClient(server.endpoint, load_key(key)) as rc:
            assert wait(lambda: rc.status()["held"], "the robot server's watchdog to hold", [])
        # 3. a new actor on the same work dir: recovers the killed episode, resends, runs on
        actor2 = start([*actor_args, "episodes=1"], logs["actor2"], env)
        wait(lambda: actor2.poll() is not None, "the second actor to finish and drain", [(learner2, logs["learner2"])],
              timeout=150)
        assert actor2.returncode == 0, logs["actor2"].read_text()[-3000:]
        learner2.send_signal(signal.SIGTERM)
        assert learner2.wait(timeout=60) == 0, logs["learner2"].read_text()[-3000:]
    finally:
        for p in (learner, actor, learner2, actor2):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        server.stop()
    assert "resumed run" in logs["learner2"].read_text()
    s1 = json.loads((work / "summary.json").read_text())
    assert s1["drained"] and s1["recovered_steps"] > 0 and s1["link"]["welcomes"] >= 1
    ep_lines = [json.loads(line)["episode"] for line in logs["actor1"].read_text().splitlines() if line.startswith('{"episode"')]
    assert sum(e["lost"] for e in ep_lines) > 0  # actor 1 acted (and recorded) while no learner was there

    # the recording: the actor's episode files and the Minari dataset hold the same transitions
    eps = [load_arrays(p) for p in sorted((work / "episodes").glob("ep_*.npz"))]
    numbers = sorted(int(p.stem[3:]) for p in (work / "episodes").glob("ep_*.npz"))
    assert numbers == list(range(len(eps))) and len(eps) >= before + 2
    rec_keys = [(e, int(s)) for e, z in zip(numbers, eps) for s in z["info_step"][1:]]
    rec_obs = np.concatenate([z["observations"][:-1] for z in eps])
    rec_act = np.concatenate([z["actions"] for z in eps])
    data = load_dataset(str(tmp_path / "minari" / "robot" / "test" / "online-v0"))
    assert data.num_transitions == len(rec_keys)
    np.testing.assert_array_equal(data.actions, rec_act)

    # the learner's buffer: every recorded (episode, step) exactly once, with the same data
    ck = load_checkpoint(run_dir / "checkpoints" / "latest.pt")
    size = int(ck["online"]["size"])
    keys = [tuple(map(int, k)) for k in ck["online_keys"].numpy()[:size]]
    assert len(keys) == len(set(keys)) == len(rec_keys)
    assert sorted(keys) == sorted(rec_keys)
    order = {k: i for i, k in enumerate(keys)}
    idx = np.array([order[k] for k in rec_keys])
    np.testing.assert_array_equal(ck["online"]["observations"].numpy()[idx], rec_obs)
    np.testing.assert_array_equal(ck["online"]["actions"].numpy()[idx], rec_act)
    assert ck["ingested"] == len(rec_keys)
    # interventions: flagged, the executed (teleop) action stored, and copied into the demonstration buffer
    interv = np.concatenate([z["info_intervention"][1:] for z in eps])
    assert interv.dtype == bool
    requested = np.concatenate([z["info_requested_action"][1:] for z in eps])
    ctrl = pointmaze_controller(5.0)
    expect = np.stack([ctrl(o) for o in rec_obs[interv]])
    assert interv.sum() > 0 and eps[0]["info_intervention"].any()
    np.testing.assert_array_equal(requested[interv], expect)
    safe = ~np.concatenate([z["info_safety_modified"][1:] for z in eps])
    np.testing.assert_array_equal(rec_act[interv & safe], requested[interv & safe])
    assert int(ck["demos"]["size"]) == int(interv.sum()) == ck["interventions"]
    demo_act = ck["demos"]["actions"].numpy()[: int(interv.sum())]
    assert sorted(map(tuple, demo_act.tolist())) == sorted(map(tuple, rec_act[interv].tolist()))

    # weights: the actor acted with pushed versions, and its actions are those versions' outputs
    versions = np.concatenate([z["info_weights_version"][1:] for z in eps])
    pol_act = np.concatenate([z["info_policy_action"][1:] for z in eps])
    assert len(set(versions.tolist())) >= 2
    pol = policy_class(ck["policy"]["target"])(**ck["policy"]["kwargs"]).eval()
    checked = 0
    for v in sorted(set(versions.tolist())):
        w = load_arrays(weights_dir / f"v{v}.npz")
        pol.load_state_dict({k: torch.from_numpy(a) for k, a in w.items()})
        rows = np.flatnonzero((versions == v) & ~np.isnan(pol_act[:, 0]))
        with torch.no_grad():
            out = pol(torch.from_numpy(rec_obs[rows])).numpy()
        np.testing.assert_allclose(out, pol_act[rows], rtol=0, atol=1e-5)
        checked += rows.size
    assert checked > 0


@pytest.mark.parametrize("mode", ["hold", "continue"])
def test_actor_without_learner_holds_or_acts_and_keeps_recording(tmp_path, mode):
    """No learner ever answers: ``hold`` commands the robot's hold action, ``continue`` acts with
    the weights it has; either way every step is recorded and kept on disk for a later learner."""
    from robotrl.agents.qlearning.policy import QLPolicy
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.protocol import load_key
    from robotrl.real_robot.sim import MuJoCoTwin

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False)
    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    key = load_key(write_key_file(tmp_path / "k.key"))
    link = ActorLink(f"tcp://127.0.0.1:{free_port()}", key, "a0", spec.to_dict(), tmp_path / "spill", flush_s=0.01)
    ps = policy_state(QLPolicy(8, 2, (16,)))
    w = Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], time.time(), time.time())
    actor = OnlineActor(robot, link, EpisodeRecorder(tmp_path, spec), rate_hz=0, on_learner_lost=mode, explore=False,
                        max_steps=20, initial=w)
    try:
        info = actor.run_episode()
        assert not link.flush_and_sync(0.5)  # nobody to confirm: the data stays spilled
    finally:
        link.close()
        robot.close()
    assert info["steps"] == 20 and info["lost"] == 20
    z = actor.recorder.load(0)
    held = z["info_held"][1:]
    assert held.all() == (mode == "hold") and held.any() == (mode == "hold")
    if mode == "hold":
        np.testing.assert_array_equal(z["actions"], np.zeros((20, 2), np.float32))  # the twin's hold: zero force
        assert np.isnan(z["info_requested_action"][1:]).all()
    else:
        np.testing.assert_array_equal(z["actions"], z["info_policy_action"][1:])
    assert len(SpillQueue(tmp_path / "spill", link_limits())) == 20
    assert not (tmp_path / "current.journal").exists()


# ----------------------------------------------------------------------------- success classifier


@pytest.fixture(scope="module")
def maze_classifier():
    from robotrl.real_robot.reward_classifier import train_success_classifier

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    x, y = _maze_states(2000)
    clf, m = train_success_classifier(x, y, steps=300, batch_size=128, hidden=(32, 32), seed=0)
    torch.set_num_threads(n)
    return clf, m


def _maze_states(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """PointMaze-like flat states and the twin's success rule (achieved within 0.45 m of the goal)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-1.5, 1.5, (n, 8)).astype(np.float32)
    near = rng.random(n) < 0.3
    s[near, 0:2] = s[near, 2:4] + rng.uniform(-0.4, 0.4, (int(near.sum()), 2))
    s[:, 4:6] = s[:, 0:2]
    return s, np.linalg.norm(s[:, 0:2] - s[:, 2:4], axis=1) < 0.45


def test_success_classifier_learns_labelled_states_and_saves_without_pickle(tmp_path, maze_classifier):
    from robotrl.real_robot.reward_classifier import ClassifierReward, load_classifier, save_classifier

    clf, m = maze_classifier
    assert m["heldout"]["balanced_accuracy"] > 0.9, m
    save_classifier(tmp_path / "classifier.pt", clf, 0.6, m)
    clf2, thr = load_classifier(tmp_path)  # the run directory
    xt, yt = _maze_states(500, seed=1)
    np.testing.assert_array_equal(clf2.prob(xt), clf.prob(xt))
    rew = ClassifierReward(clf2, thr)
    r, ok, p = rew(xt[0])
    assert thr == 0.6 and ok == (p >= 0.6) and r == float(ok)


def test_actor_rewards_from_the_classifier_and_ends_on_success(tmp_path, minari_root, maze_classifier):
    """The actor's reward is the classifier's verdict on the state each step led to; a success
    ends the episode; the recording then trains a classifier through ``robotrl train``'s path."""
    from omegaconf import OmegaConf

    from robotrl.agents.qlearning.policy import QLPolicy
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.reward_classifier import ClassifierReward, load_classifier, run_train
    from robotrl.real_robot.sim import MuJoCoTwin

    clf, _ = maze_classifier
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=400)
    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    ps = policy_state(QLPolicy(8, 2, (16,)))
    human = ScriptedTeleop(pointmaze_controller(), lambda ep, k: ep % 2 == 0, spec.action.low, spec.action.high)
    rec = EpisodeRecorder(tmp_path / "actor", spec)
    actor = OnlineActor(robot, None, rec, rate_hz=0, teleop=human, explore=False, max_steps=150,
                        initial=Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0),
                        reward_fn=ClassifierReward(clf, 0.5, end_on_success=True))
    try:
        infos = [actor.run_episode() for _ in range(4)]
    finally:
        robot.close()
    assert infos[0]["success"]  # the scripted human drives to the goal: the classifier calls it
    for i in range(4):
        z = rec.load(i)
        p = clf.prob(z["observations"][1:])
        np.testing.assert_array_equal(z["rewards"], (p >= 0.5).astype(np.float64))
        ended = z["terminations"][-1]
        assert ended == bool(p[-1] >= 0.5) and not z["terminations"][:-1].any()
    rec.to_minari("robot/test/classifier-v0")
    cfg = OmegaConf.create({"seed": 0, "torch_threads": 1, "dataset": {"id": "robot/test/classifier-v0", "generate": False},
                            "agent": {"name": "reward-classifier", "model": {"hidden": [16], "steps": 50, "batch_size": 64,
                                                                            "lr": 1e-3, "holdout": 0.2, "threshold": 0.7}}})
    out = run_train(cfg, tmp_path / "run")
    n = sum(out["frames"].values())
    positives = sum(out[k]["positives"] for k in ("train", "threshold_set", "heldout"))
    assert n == sum(i["steps"] for i in infos) and 0 < positives < n and out["threshold"] == 0.7
    _, thr = load_classifier(tmp_path / "run")
    assert thr == 0.7


def test_a_link_whose_thread_stops_says_why_and_the_actor_keeps_the_episode_journal(tmp_path):
    """The link's thread stops on a row it cannot send (here one missing every transition field): the link says why
    (``error``, ``alive`` false) instead of going silent, and the actor's end of episode then keeps the journal (the
    next start recovers and resends it) and stops with that reason rather than run on with nothing reaching the
    learner."""
    from robotrl.errors import RobotRLError
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.protocol import load_key
    from robotrl.real_robot.sim import MuJoCoTwin

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False)
    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    key = load_key(write_key_file(tmp_path / "k.key"))
    link = ActorLink(f"tcp://127.0.0.1:{free_port()}", key, "a0", spec.to_dict(), tmp_path / "spill", flush_s=0.01)
    actor = OnlineActor(robot, link, EpisodeRecorder(tmp_path, spec), rate_hz=0, on_learner_lost="hold", explore=False,
                        max_steps=20)
    try:
        assert link.alive and link.status()["alive"]
        link.submit({"n": 0})  # not a transition
        end = time.monotonic() + 10
        while link.alive and time.monotonic() < end:
            time.sleep(0.01)
        assert not link.alive and "link thread stopped: KeyError" in link.status()["error"]
        with pytest.raises(RobotRLError, match="link thread stopped.*stay in .*current.journal.*starts again"):
            actor.run_episode()
    finally:
        link.close()
        robot.close()
    assert (tmp_path / "current.journal").exists() and actor.recorder.episodes_done() == []
