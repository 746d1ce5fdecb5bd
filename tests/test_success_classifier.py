"""Issue 42 item 4: the camera success classifier (HIL-SERL's reward model) on the one observation frontend.

Real MuJoCo renders of the PointMaze twin (a 2x2 open room with the goal cell fixed, 48 px ``topdown`` camera), a real
frozen ResNet-10 whose weights the test writes to a local file exactly as a user brings pretrained weights
(``torch.save(trunk.state_dict(), path)``: no ImageNet weights can be downloaded here, so the trunk is a seeded random
initialisation; only the projection and head learn), the real online actor on the twin with cameras, and the real
``robotrl actor`` process for the refusal. Labels are the twin's own success rule (the ball within 0.45 m of the goal).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.envs import osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # small networks on a shared CPU: one torch thread

PX = 48
#: the open 2x2 room with the goal cell fixed (a task site, as on a real cell); the start is any free cell
GOAL_MAZE = [[1, 1, 1, 1], [1, 0, 0, 1], [1, 0, "g", 1], [1, 1, 1, 1]]
#: a 8-wide ResNet-10 (stages 8, 16, 32, 64): small enough for a shared 2-core CPU
WIDTH = 8

camera = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")




@pytest.fixture(scope="module")
def weights_file(tmp_path_factory) -> Path:
    """A local ResNet-10 weights file written the way robotrl's frozen encoder loads it (a ``state_dict``)."""
    from robotrl.vision.encoders import ResNet10

    path = tmp_path_factory.mktemp("weights") / "resnet10_w8.pt"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        torch.save(ResNet10(3, WIDTH).state_dict(), path)
    return path


def placed_frames(goals: int, per_goal: int, seed: int = 0):
    """Twin frames with the ball placed around each episode's goal: half within 0.4 m (success), half beyond 0.5 m
    (the 0.05 m band around the 0.45 m rule is left out so that a label is never a coin toss). One env reset (a new
    goal within the goal cell) per ``goal``; each frame is rendered after one physics step from the placed position
    with zero action, and labelled by the twin's rule on the observation it returned.

    Returns:
        ``LabelledFrames`` with ``pixels/topdown`` uint8 ``(M, 48, 48, 3)``, the flat state ``(M, 8)`` and the goal
        index as the episode.
    """
    from robotrl.envs import make_env
    from robotrl.real_robot.reward_classifier import LabelledFrames

    env = make_env("pointmaze-umaze", pixels=["topdown"], size=PX, env_kwargs={"maze_map": GOAL_MAZE})
    u = env.unwrapped
    rng = np.random.default_rng(seed)
    states, frames, labels, eps = [], [], [], []
    try:
        for g in range(goals):
            env.reset(seed=seed * 1000 + g)
            goal = np.asarray(u.goal[:2])
            for j in range(per_goal):
                while True:
                    pos = rng.uniform(-0.85, 0.85, 2)
                    d = np.linalg.norm(pos - goal)
                    if (d < 0.4) == (j % 2 == 0) and abs(d - 0.45) > 0.05:
                        break
                data = u.point_env.data
                data.qpos[:2], data.qvel[:] = pos, 0.0
                o, *_ = env.step(np.zeros(2, np.float32))
                s = np.concatenate([o["achieved_goal"], o["desired_goal"], o["observation"]]).astype(np.float32)
                states.append(s)
                frames.append(o["pixels"]["topdown"])
                labels.append(np.linalg.norm(s[0:2] - s[2:4]) < 0.45)
                eps.append(g)
    finally:
        env.close()
    return LabelledFrames(np.asarray(states), {"pixels/topdown": np.asarray(frames)}, np.asarray(labels),
                          np.asarray(eps, np.int64))


@pytest.fixture(scope="module")
def camera_classifier(weights_file):
    """A frames-only classifier (frozen ResNet-10 from ``weights_file``) fitted on 24 goals x 12 placed frames."""
    from robotrl.real_robot.reward_classifier import SuccessClassifier, fit_success_classifier

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    frames = placed_frames(24, 12)
    cams = frames.subset(np.arange(len(frames)))
    cams.state = cams.state[:, :0]  # the frames alone
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        clf = SuccessClassifier(0, 2, hidden=[64], image_shapes={"pixels/topdown": [PX, PX, 3]}, encoder="resnet10",
                                channels=WIDTH, encoder_weights=str(weights_file), pooling="spatial_softmax",
                                feature_dim=32)
    m = fit_success_classifier(clf, cams, steps=300, batch_size=64, holdout=0.34, seed=0)
    torch.set_num_threads(n)
    return clf, m, frames


# ----------------------------------------------------------------------------- metrics
def test_a_classifier_that_does_not_fit_its_labels_says_so_in_one_line(caplog):
    """Labels that no state predicts (random): the fit cannot reach the training AUC bar, and the trainer warns in
    one line that the classifier must not be used as a reward (a camera classifier that failed to train once paid a
    policy at the start state on the dead-end twin); learnable labels give no warning."""
    import logging

    from robotrl.real_robot.reward_classifier import train_success_classifier

    rng = np.random.default_rng(0)
    x = rng.normal(size=(1200, 4)).astype(np.float32)
    with caplog.at_level(logging.WARNING, logger="robotrl.real_robot.reward_classifier"):
        train_success_classifier(x, rng.random(1200) < 0.3, steps=30, hidden=(16,), seed=0)
    warned = [r.getMessage() for r in caplog.records if "did not fit" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0] and "agent.model.steps" in warned[0], warned
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="robotrl.real_robot.reward_classifier"):
        train_success_classifier(x, x[:, 0] > 0.5, steps=300, hidden=(32,), seed=0)
    assert not [r for r in caplog.records if "did not fit" in r.getMessage()]


def test_binary_metrics_count_and_rank_like_their_definitions():
    """Precision / recall / F1 from the confusion counts; AUC equals the fraction of (positive, negative) pairs
    ranked correctly (ties half), computed here pair by pair."""
    from robotrl.real_robot.reward_classifier import best_f1_threshold, binary_metrics

    rng = np.random.default_rng(0)
    y = rng.random(200) < 0.3
    p = np.clip(0.3 * y + rng.random(200) * 0.7, 0, 1).round(2)  # rounded: ties exist
    m = binary_metrics(p, y, 0.5)
    pred = p >= 0.5
    tp, fp, fn = np.sum(pred & y), np.sum(pred & ~y), np.sum(~pred & y)
    assert m["precision"] == pytest.approx(tp / (tp + fp)) and m["recall"] == pytest.approx(tp / (tp + fn))
    assert m["f1"] == pytest.approx(2 * tp / (2 * tp + fp + fn))
    pairs = (p[y][:, None] > p[~y][None, :]).mean() + 0.5 * (p[y][:, None] == p[~y][None, :]).mean()
    assert m["auc"] == pytest.approx(pairs)
    thr = best_f1_threshold(p, y)
    grid = max(binary_metrics(p, y, t)["f1"] for t in np.linspace(0.005, 0.995, 199))
    assert binary_metrics(p, y, thr)["f1"] >= grid - 1e-12


# ----------------------------------------------------------------------------- the camera classifier
@camera
def test_camera_classifier_reaches_the_heldout_bar_on_twin_frames(camera_classifier):
    """Held-out goals (whole episodes the classifier never trained on; the threshold chosen on other held-out goals):
    AUC >= 0.7, recall >= 0.7, precision >= 0.55 where chance is AUC 0.5 and precision 0.5 (balanced classes).

    The bar: with a seeded random (not ImageNet-pretrained) frozen trunk at 48 px, where the ball and goal are ~2 px,
    this set-up measured on the held-out goals, seeds 0 / 1 / 2 (frames, split and initialisation):
    AUC 0.847 / 0.745 / 0.858, precision 0.69 / 0.615 / 0.72, recall 0.833 / 1.0 / 0.75 (this test is seed 0). The
    bar sits under the lowest seed (4 held-out goals, 48 frames, are a noisy estimate), well above chance. On the
    training goals it fits (AUC 0.955-0.977), so the gap is generalisation to unseen goal positions."""
    clf, m, _ = camera_classifier
    h = m["heldout"]
    assert m["split"] == "episodes" and m["episodes"]["heldout"] >= 4 and h["positives"] >= 20 and h["negatives"] >= 20, m
    assert h["auc"] >= 0.7 and h["recall"] >= 0.7 and h["precision"] >= 0.55, m
    assert m["train"]["auc"] > 0.9, m


@camera
def test_classifier_is_a_frontend_with_a_frozen_trunk_from_the_local_file(tmp_path, camera_classifier, weights_file):
    """The classifier reads through ``ObservationFrontend`` (the policies' class), its trunk stays the weights file's
    after training, the saved file holds the weights (its spec never points at the file) and reloads to the same
    probabilities; a state-only classifier is the same class without cameras."""
    from robotrl.real_robot.reward_classifier import SuccessClassifier, load_classifier, save_classifier
    from robotrl.vision.frontend import ObservationFrontend

    clf, m, frames = camera_classifier
    assert isinstance(clf, ObservationFrontend) and clf.has_cameras
    ref = torch.load(weights_file, weights_only=True)
    trunk = clf.encoder.trunks["cam0"].state_dict()
    assert all(torch.equal(trunk[k], ref[k]) for k in ref)
    assert not any(p.requires_grad for p in clf.encoder.trunks.parameters())
    save_classifier(tmp_path / "classifier.pt", clf, m["threshold"], m)
    clf2, thr = load_classifier(tmp_path)
    assert clf2.spec()["encoder_weights"] is None and thr == m["threshold"]
    sub = frames.subset(np.arange(20))
    np.testing.assert_array_equal(clf2.prob(sub.state[:, :0], sub.images), clf.prob(sub.state[:, :0], sub.images))
    state_only = SuccessClassifier(8)
    assert isinstance(state_only, ObservationFrontend) and not state_only.has_cameras and state_only.out_dim == 8


@camera
def test_actor_with_the_camera_classifier_ends_the_episode_on_success(tmp_path, camera_classifier):
    """``OnlineActor`` on the camera twin (which never ends an episode itself: ``continuing_task``) with the camera
    classifier as its reward: the scripted human drives to the goal, the classifier's verdict on each next frame is
    the recorded reward and success, and its first success ends the episode (terminated) before the step limit."""
    from robotrl.agents.qlearning.policy import QLPolicy
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.reward_classifier import ClassifierReward, RewardFunction
    from robotrl.real_robot.sim import MuJoCoTwin
    from robotrl.real_robot.teleop import ScriptedTeleop, pointmaze_controller

    clf, m, _ = camera_classifier
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=1000, cameras=("topdown",), image_size=PX,
                      env_kwargs={"maze_map": GOAL_MAZE, "continuing_task": True})
    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    ps = policy_state(QLPolicy(spec.observation.dim, spec.action.dim, (16,)))
    human = ScriptedTeleop(pointmaze_controller(), lambda ep, k: True, spec.action.low, spec.action.high)
    reward = ClassifierReward(clf, m["threshold"], end_on_success=True)
    assert isinstance(reward, RewardFunction)
    rec = EpisodeRecorder(tmp_path / "actor", spec)
    actor = OnlineActor(robot, None, rec, rate_hz=0, teleop=human, explore=False, max_steps=80, seed=3,
                        initial=Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0), reward_fn=reward)
    try:
        infos = [actor.run_episode() for _ in range(2)]
    finally:
        robot.close()
    for i, info in enumerate(infos):
        z = rec.load(i)
        assert info["success"] and info["steps"] < 80, info
        frames = {"pixels/topdown": z["frames_topdown"][1:]}
        p = clf.prob(z["observations"][1:, :0], frames)
        np.testing.assert_array_equal(z["rewards"], (p >= m["threshold"]).astype(np.float64))
        assert z["terminations"][-1] and not z["terminations"][:-1].any()
        assert p[-1] >= m["threshold"] and (p[:-1] < m["threshold"]).all()


# ----------------------------------------------------------------------------- labels from the recorder -> train
@camera
def test_operator_marks_are_recorded_and_robotrl_train_fits_a_camera_classifier(tmp_path, minari_root, weights_file):
    """The operator's marks (a scripted operator pressing ``y`` near the goal, ``n`` when giving up) end the episodes
    and are the recording's ``success``; ``robotrl train agent=reward-classifier obs=pixels`` (its config, composed as
    the CLI composes it) trains on them with HIL-SERL's ``success_last_k`` relabelling and writes the classifier, the
    report with held-out precision / recall / F1 / AUC, and TensorBoard scalars."""
    from hydra import compose, initialize_config_module

    from robotrl.agents.qlearning.policy import QLPolicy
    from robotrl.data.dataset import load_dataset
    from robotrl.policy import policy_state
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor
    from robotrl.real_robot.reward_classifier import LabelledFrames, load_classifier, run_train
    from robotrl.real_robot.sim import MuJoCoTwin
    from robotrl.real_robot.teleop import KeyboardTeleop, ScriptedTeleop, pointmaze_controller

    keys = KeyboardTeleop(open(os.devnull), np.zeros(2), -np.ones(2), np.ones(2))
    keys.press("y")
    assert keys.poll().label is True and keys.poll().label is None  # reported once
    keys.press("n")
    assert keys.poll().label is False

    def operator(ep: int, k: int, s: np.ndarray):
        if ep % 2 == 0 and np.linalg.norm(s[0:2] - s[2:4]) < 0.3:
            return True  # success seen
        return False if ep % 2 == 1 and k == 11 else None  # gives up

    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=1000, cameras=("topdown",), image_size=PX,
                      env_kwargs={"maze_map": GOAL_MAZE, "continuing_task": True})
    spec = twin.spec()
    robot = LocalRobot(twin, make_supervisor(None, spec))
    ps = policy_state(QLPolicy(spec.observation.dim, spec.action.dim, (16,)))
    human = ScriptedTeleop(pointmaze_controller(), lambda ep, k: ep % 2 == 0, spec.action.low, spec.action.high,
                           label=operator)
    rec = EpisodeRecorder(tmp_path / "actor", spec)
    actor = OnlineActor(robot, None, rec, rate_hz=0, teleop=human, explore=False, max_steps=60,
                        initial=Weights(0, ps["target"], ps["kwargs"], ps["state_dict"], 0.0, 0.0))
    try:
        infos = [actor.run_episode() for _ in range(8)]
    finally:
        robot.close()
    for i, info in enumerate(infos):
        z = rec.load(i)
        succ = z["info_success"][1:]
        s = z["observations"][:-1]  # what the operator saw when marking each step
        if i % 2 == 0:  # marked a success when the ball was within 0.3 m: that step ended the task
            assert info["success"] and succ[-1] and z["terminations"][-1] and info["steps"] < 60, info
            assert np.linalg.norm(s[-1, 0:2] - s[-1, 2:4]) < 0.3
        else:  # marked a failure at step 11: cut there, no success
            assert info["steps"] == 12 and not succ.any() and z["truncations"][-1] and not z["terminations"].any()
    rec.to_minari("robot/test/labelled-v0")
    data = load_dataset("robot/test/labelled-v0")
    marks = LabelledFrames.from_dataset(data)
    k3 = LabelledFrames.from_dataset(data, success_last_k=3)
    assert set(marks.images) == {"pixels/topdown"} and marks.images["pixels/topdown"].shape[1:] == (PX, PX, 3)
    for e in range(8):
        lab, lab3 = marks.labels[marks.episode == e], k3.labels[k3.episode == e]
        assert lab[-1] == (e % 2 == 0) and (lab3[-3:].all() if e % 2 == 0 else not lab3.any())
        assert (lab3 >= lab).all()

    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("train", overrides=["agent=reward-classifier", "obs=pixels", "agent.model.state=false", "dataset.id=robot/test/labelled-v0",
                                          "dataset.generate=false", f"agent.model.encoder_weights={weights_file}",
                                          f"agent.model.channels={WIDTH}", "agent.model.feature_dim=16",
                                          "agent.model.hidden=[16]", "agent.model.steps=60",
                                          "agent.model.batch_size=32", "agent.model.success_last_k=3",
                                          "agent.model.holdout=0.5", "seed=0"])
    out = run_train(cfg, tmp_path / "run")
    run = tmp_path / "run"
    clf, thr = load_classifier(run)
    assert clf.camera_shapes() == {"pixels/topdown": [PX, PX, 3]} and clf.obs_dim == 0 and 0 < thr < 1
    report = json.loads((run / "report.json").read_text())
    for key in ("precision", "recall", "f1", "auc"):
        assert np.isfinite(report["heldout"][key]), report
    assert report["threshold"] == out["threshold"] == thr and report["split"] == "episodes"
    assert report["episodes"] == {"train": 4, "threshold_set": 2, "heldout": 2}
    assert "| heldout" in (run / "report.md").read_text()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    ea = EventAccumulator(str(run / "tb"))
    ea.Reload()
    assert {"classifier/loss", "classifier/heldout_precision", "classifier/heldout_auc"} <= set(ea.Tags()["scalars"])


# ----------------------------------------------------------------------------- refusals
def test_a_classifier_for_other_cameras_or_state_is_refused_naming_the_fix():
    from robotrl.real_robot.reward_classifier import SuccessClassifier

    clf = SuccessClassifier(0, 2, hidden=[8], image_shapes={"pixels/topdown": [PX, PX, 3]}, encoder="drq", channels=4,
                            feature_dim=8)
    for cams in ({"pixels/topdown": [32, 32, 3]}, {"pixels/front": [PX, PX, 3]}, {}):
        with pytest.raises(ConfigError) as e:
            clf.check_inputs(cams, 8, "robot sim:pointmaze")
        msg = str(e.value)
        assert "\n" not in msg and "robot.cameras=" in msg and "robot.image_size=" in msg, msg
    clf.check_inputs({"pixels/topdown": [PX, PX, 3]}, 8, "robot")  # cameras only: any state size
    clf.check_inputs({"pixels/topdown": [PX, PX, 3], "pixels/wrist": [32, 32, 3]}, 8, "robot")  # an extra camera
    state = SuccessClassifier(8, 2, hidden=[8])
    with pytest.raises(ConfigError, match="Do=8 .* Do=4: train it on a recording of this robot"):
        state.check_inputs({}, 4, "robot")
    with pytest.raises(ConfigError, match="needs cameras or a state"):
        SuccessClassifier(0, 2)
    from omegaconf import OmegaConf

    from robotrl.real_robot.reward_classifier import LabelledFrames, build_classifier

    frames = LabelledFrames(np.zeros((4, 0), np.float32), {"pixels/topdown": np.zeros((4, PX, PX, 3), np.uint8)},
                            np.array([0, 1, 0, 1], bool), np.arange(4))
    with pytest.raises(ConfigError) as e:  # the pretrained encoder without its local weights file
        build_classifier(OmegaConf.create({"hidden": [8], "encoder": "resnet10", "encoder_weights": None}), frames, 2, 0)
    assert "\n" not in str(e.value) and "agent.model.encoder_weights=" in str(e.value)


def test_a_trunk_from_scratch_trains_and_a_pretrained_one_stays_frozen(weights_file):
    """``freeze_encoder`` unset: a DrQ trunk from scratch learns with the head (it was kept at its random weights until
    2026-12-02, so the twin's DrQ classifiers could not fit their own training frames), a ResNet-10 from a weights file
    stays fixed (HIL-SERL), and a frozen trunk without weights is refused from the config in one line."""
    from omegaconf import OmegaConf

    from robotrl.real_robot.reward_classifier import (LabelledFrames, SuccessClassifier, build_classifier,
                                                      fit_success_classifier)

    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 255, (16, PX, PX, 3), dtype=np.uint8)
    frames = LabelledFrames(np.zeros((16, 0), np.float32), {"pixels/topdown": imgs}, np.arange(16) % 2 == 0,
                            np.arange(16) // 2)
    shapes = {"pixels/topdown": [PX, PX, 3]}
    for kw, trained in (({"encoder": "drq", "channels": 4}, True),
                        ({"encoder": "resnet10", "channels": 8, "encoder_weights": str(weights_file)}, False)):
        clf = SuccessClassifier(0, 2, hidden=[8], image_shapes=shapes, feature_dim=8, **kw)
        before = [p.detach().clone() for p in clf.encoder.trunks.parameters()]
        fit_success_classifier(clf, frames, steps=3, batch_size=8, holdout=0.25)
        moved = any(not torch.equal(a, b) for a, b in zip(before, clf.encoder.trunks.parameters()))
        assert moved is trained, kw
    cfg = OmegaConf.create({"hidden": [8], "encoder": "drq", "encoder_weights": None, "freeze_encoder": True})
    with pytest.raises(ConfigError, match="no encoder_weights keeps a randomly initialised trunk fixed") as e:
        build_classifier(cfg, frames, 2, 0)
    assert "\n" not in str(e.value)


@camera
def test_robotrl_actor_refuses_a_classifier_for_another_frame_size_in_one_line(tmp_path):
    """The real ``robotrl actor`` process: a 48 px classifier on a 32 px camera twin exits 2 with one
    ``robotrl: error:`` line naming both camera sets and the fix, before any step or connection."""
    from robotrl.real_robot.protocol import write_key_file
    from robotrl.real_robot.reward_classifier import SuccessClassifier, save_classifier

    clf = SuccessClassifier(0, 2, hidden=[8], image_shapes={"pixels/topdown": [PX, PX, 3]}, encoder="drq", channels=4,
                            feature_dim=8)
    save_classifier(tmp_path / "clf" / "classifier.pt", clf, 0.5)
    write_key_file(tmp_path / "online.key")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    r = subprocess.run([sys.executable, "-m", "robotrl.real_robot.online_cli", "actor", "robot.realtime=false",
                        "robot.cameras=[topdown]", "robot.image_size=32", "reward=classifier",
                        f"reward_classifier={tmp_path / 'clf'}", f"work_dir={tmp_path / 'actor'}", "episodes=1",
                        f"key_file={tmp_path / 'online.key'}"],
                       capture_output=True, text=True, timeout=120, env=env)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and lines[0].startswith("robotrl: error:"), r.stderr
    assert "[48, 48, 3]" in lines[0] and "[32, 32, 3]" in lines[0] and "robot.image_size=N" in lines[0]


@camera
def test_the_deploy_loop_records_the_operators_marks_as_labels(tmp_path, minari_root):
    """``robotrl deploy``'s control loop over a real robot server (a thread with the camera twin, real ZeroMQ): the
    operator's ``y`` ends an episode as a success, ``n`` cuts one as a failure, and the recording written by
    :func:`robotrl.real_robot.recording.record_dataset` carries them as the labels the classifier trains on."""
    import yaml

    import robotrl.configs
    from robotrl.data.dataset import load_dataset
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.control import ChunkScheduler, ControlLoop
    from robotrl.real_robot.factory import make_supervisor
    from robotrl.real_robot.launch import ServerThread
    from robotrl.real_robot.protocol import camera_limits
    from robotrl.real_robot.recording import record_dataset
    from robotrl.real_robot.reward_classifier import LabelledFrames
    from robotrl.real_robot.sim import MuJoCoTwin
    from robotrl.real_robot.teleop import ScriptedTeleop

    safety = yaml.safe_load((Path(robotrl.configs.__file__).parent / "robot" / "sim.yaml").read_text())["safety"]
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, cameras=("topdown",), image_size=24,
                      env_kwargs={"maze_map": GOAL_MAZE, "continuing_task": True})
    spec = twin.spec()
    key = bytes(range(32))
    marks = {(0, 5): True, (1, 4): False}  # the operator's keys: episode 0's 6th poll, episode 1's 5th
    human = ScriptedTeleop(lambda s: np.zeros(2, np.float32), lambda ep, k: False, spec.action.low, spec.action.high,
                           label=lambda ep, k, s: marks.get((ep, k)))
    with ServerThread(twin, make_supervisor({**safety, "rate_hz": 20, "watchdog_s": 30}, spec), key) as srv:
        with RobotClient(srv.endpoint, key, timeout_s=10.0, link_timeout_s=30.0) as c:
            c.use_limits(camera_limits(spec.cameras))
            loop = ControlLoop(c, ChunkScheduler(lambda o: np.array([[0.3, -0.2]], np.float32)), rate_hz=20,
                               hold_action=spec.hold_action, teleop=human, deadline_frac=0.9)
            logs = [loop.run_episode(seed=s, max_steps=30) for s in (1, 2)]
    assert [len(log.steps) for log in logs] == [6, 5] and [log.stopped for log in logs] == ["episode_end"] * 2
    assert logs[0].steps[-1].terminated and logs[0].steps[-1].success and not logs[0].steps[-1].truncated
    assert logs[1].steps[-1].truncated and not any(s.success or s.terminated for s in logs[1].steps)
    record_dataset("robot/test/deploy-marks-v0", logs, spec)
    frames = LabelledFrames.from_dataset(load_dataset("robot/test/deploy-marks-v0"))
    assert frames.labels.tolist() == [False] * 5 + [True] + [False] * 5
    assert frames.images["pixels/topdown"].shape == (11, 24, 24, 3)


def test_robotrl_learner_with_the_classifier_reward_relabels_its_demonstrations(tmp_path):
    """``robotrl learner reward=classifier`` (its :func:`build_learner`, bound to a real loopback socket): the
    demonstrations enter the buffer with the classifier's verdicts on their next observations as rewards (through
    the agent's reward transform), as the actor rewards its online steps; terminations are kept."""
    from hydra import compose, initialize_config_module

    from robotrl.data.dataset import load_dataset
    from robotrl.real_robot.online_cli import build_learner
    from robotrl.real_robot.online_eval import record_controller_demos, robot_overrides
    from robotrl.real_robot.reward_classifier import SuccessClassifier, save_classifier

    demos = record_controller_demos(tmp_path / "demos", episodes=3, max_steps=40, maze="open", reward="sparse", seed=3)
    data = load_dataset(demos)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        clf = SuccessClassifier(data.obs_dim, data.action_dim, hidden=[8])  # untrained: its own verdicts
    p = clf.prob(data.next_observations)
    thr = float(np.median(p))
    save_classifier(tmp_path / "clf" / "classifier.pt", clf, thr)
    want = (p >= thr).astype(np.float64)
    assert (want != data.rewards).any()  # the relabelling is visible
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/learner", overrides=[
            *robot_overrides("open", "sparse", 40), "agent=rlpd", "agent.model.num_critics=2", "agent.model.hidden=[16]",
            "agent.model.critic_hidden=[16]", f"demos={demos}", f"run_dir={tmp_path / 'learner'}",
            "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}", "trainer.batch_size=16",
            "reward=classifier", f"reward_classifier={tmp_path / 'clf'}"])
    learner, _, _ = build_learner(cfg)
    try:
        n = data.num_transitions
        scale, bias = float(cfg.agent.get("reward_scale", 1.0)), float(cfg.agent.get("reward_bias", 0.0))
        np.testing.assert_allclose(learner.demos.rewards[:n], scale * want + bias, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(learner.demos.terminated[:n], bool), data.terminated)
    finally:
        learner.close()
