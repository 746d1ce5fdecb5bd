"""Issue 42 item 5: the success classifiers of the dead-end twin's intervention arms (``robot=sim-deadend``).

Their data is a labelled recording made on the real twin (``online_eval.record_classifier_episodes``): controller
episodes to the goal and held there, and episodes steered into the dead ends, each step labelled by the twin's success
flag, as HIL-SERL's operator records successes and failures. The same episodes with and without the ``topdown`` camera
(OSMesa): the state and the camera classifier of a seed learn from one recording. The state classifier trained on it
(``train_twin_classifier``) scores the state at the goal above states in the dead-end room and the dead end below the
bottom leg, and only the goal is a success at its threshold (the earlier classifier, trained on controller successes
only, called 21-30 of 40 training episodes a success). The bench's ``human-clf-cam`` arm: its actor renders the camera
classifier's camera at its frame size and gets that classifier as its reward, the learner stays a state learner; a real
``robotrl learner`` and ``robotrl actor`` pair runs one episode so, and the recorded rewards are the camera
classifier's verdicts on the recorded frames.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.envs import osmesa_available  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")  # small networks on a shared CPU: one torch thread
camera = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")


def _frame_at(twin, policy, steps: int, seed: int):
    """The twin's observation after ``policy`` drove ``steps`` steps (or reached the goal) from reset ``seed``."""
    o = twin.reset(seed)
    for _ in range(steps):
        twin.send_action(policy(o.state))
        o = twin.get_observation()
        if o.success:
            break
    return o


def test_camera_views_are_checked_with_a_message_that_names_the_fix():
    from robotrl.envs.pixels import check_views
    from robotrl.errors import ConfigError

    assert check_views({"goal": {"lookat": [-3, 1.5, 0]}}) == {
        "goal": {"lookat": [-3.0, 1.5, 0.0], "distance": 2.0, "elevation": -90.0, "azimuth": 90.0}}
    for bad, words in (({"topdown": {"lookat": [0, 0, 0]}}, "built-in free camera"),
                       ({"goal": {"lookat": [0, 0, 0], "zoom": 2}}, "unknown keys ['zoom']"),
                       ({"goal": {"lookat": [0, 0]}}, "lookat: [x, y, z]"),
                       ({"goal": {"lookat": [0, 0, 0], "distance": 0}}, "distance must be > 0")):
        with pytest.raises(ConfigError, match=words.replace("[", r"\[").replace("]", r"\]")):
            check_views(bad)


@camera
def test_the_deadend_goal_view_sees_the_ball_only_near_the_goal():
    """``robot=sim-deadend robot.cameras=[goal]``, built by the driver factory from its config: the goal camera shows the
    goal marker (red) in every frame and the ball (green) only in the last metre of the path, so the start, the dead-end
    room and the bottom leg are out of its view (the views a camera classifier of this twin reads)."""
    from omegaconf import OmegaConf

    from robotrl.real_robot.factory import make_robot
    from robotrl.real_robot.online_eval import _steer_to_cell, camera_views
    from robotrl.real_robot.sim import DEADEND_MAP
    from robotrl.real_robot.teleop import maze_controller
    from twin_maze import twin_cfg

    rc = OmegaConf.to_container(twin_cfg("deadend", "robot.cameras=[goal]", "robot.image_size=48").robot, resolve=True)
    assert rc["camera_views"] == camera_views("deadend") and set(camera_views("deadend")) == {"goal"}

    def colour(img, c):  # pixels of the ball (green) or the goal marker (red)
        r, g, b = (img[..., k].astype(int) for k in range(3))
        return int(((g > 120) & (g > r + 40) & (g > b + 40)).sum() if c == "ball" else
                   ((r > 150) & (r > g + 80) & (r > b + 80)).sum())

    with make_robot(rc) as twin:
        assert [c.name for c in twin.spec().cameras] == ["goal"] and twin.spec().cameras[0].shape == (48, 48, 3)
        start = twin.reset(10_000)
        at_goal = _frame_at(twin, maze_controller(DEADEND_MAP), 300, 10_000)
        in_room = _frame_at(twin, _steer_to_cell("deadend", (5, 6)), 200, 10_000)
    assert at_goal.success and not in_room.success
    for o in (start, at_goal, in_room):
        assert colour(o.images["goal"], "goal") > 0
    assert colour(start.images["goal"], "ball") == 0 and colour(in_room.images["goal"], "ball") == 0
    assert colour(at_goal.images["goal"], "ball") > 0


def test_the_camera_arm_gives_the_actor_the_classifiers_camera_and_keeps_the_learner_on_states():
    from robotrl.bench.tasks import online_robot as bench

    assert bench.arm_settings("human-clf") == ("human", {})  # the state classifier: no camera anywhere
    mode, opts = bench.arm_settings("human-clf-cam")
    assert mode == "human" and opts["cameras"] == ("goal",) and opts["image_size"] > 0  # sim-deadend's goal view
    assert opts["encoder"] == "drq" and "freeze_encoder" not in opts  # trained with the head: no pretrained weights here
    assert bench.arm_settings("human") == ("human", None)
    assert bench.ORDER.index("human-clf") + 1 == bench.ORDER.index("human-clf-cam")


@camera
def test_the_labelled_recording_is_the_same_episodes_with_and_without_the_camera(tmp_path):
    from robotrl.data.dataset import load_dataset
    from robotrl.real_robot.online_eval import record_classifier_episodes
    from robotrl.real_robot.online_pixels import with_policy_cameras

    kw = {"episodes": 2, "max_steps": 30, "maze": "deadend", "reward": "sparse", "seed": 7_000_000, "hold_steps": 5}
    flat = load_dataset(str(record_classifier_episodes(tmp_path / "flat", **kw)))
    cams = load_dataset(str(record_classifier_episodes(tmp_path / "cams", cameras=("topdown",), image_size=32, **kw)))
    np.testing.assert_array_equal(flat.next_observations, cams.next_observations)  # one recording for both arms
    np.testing.assert_array_equal(flat.actions, cams.actions)
    assert flat.images is None or not flat.images
    (img,) = with_policy_cameras(cams).images.values()  # every observation's frame, the camera's size
    assert img.shape[1:] == (32, 32, 3) and len(img) == cams.num_transitions + cams.num_episodes == (30 + 5) + 30 + 2  # the goal one may hold 5 more
    # two episodes of their own reset seeds and noise (to the goal, to the first dead end), not one repeated
    assert not np.allclose(cams.next_observations[:30], cams.next_observations[-30:])


def test_the_state_classifier_on_the_labelled_recording_scores_the_goal_above_the_dead_ends(tmp_path):
    from robotrl.real_robot.online_eval import _steer_to_cell, env_kwargs, train_twin_classifier
    from robotrl.real_robot.reward_classifier import ClassifierReward
    from robotrl.real_robot.sim import DEADEND_MAP, MuJoCoTwin
    from robotrl.real_robot.teleop import maze_controller

    os.environ.setdefault("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    path, m = train_twin_classifier(tmp_path, episodes=8, max_steps=200, maze="deadend", reward="sparse",
                                    seed=7_000_000, steps=500)
    rec = m["recording"]
    assert rec["episodes"] == 8 and rec["success_episodes"] == 4 and 4 * 15 < rec["positive_frames"] < rec["frames"] / 4
    assert m["inputs"] == {"cameras": {}, "state_dim": 8}
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=300, env_kwargs=env_kwargs("deadend", "sparse"))
    twin.connect()
    try:
        reward = ClassifierReward.from_file(path, twin.spec().observation.dim, {}, "the twin")
        seed = 10_000  # an evaluation start: never recorded for the classifier
        goal = _frame_at(twin, maze_controller(DEADEND_MAP), 300, seed)
        ends = [_frame_at(twin, _steer_to_cell("deadend", c), 200, seed) for c in ((3, 7), (5, 6), (6, 2), (1, 4))]
    finally:
        twin.disconnect()
    assert goal.success and not any(o.success for o in ends)
    v_goal, v_ends = reward(goal.state), [reward(o.state) for o in ends]
    assert v_goal.success and v_goal.p > max(v.p for v in v_ends), (v_goal, v_ends)
    assert not any(v.success for v in v_ends), v_ends


@camera
@pytest.mark.slow
def test_a_real_learner_and_actor_run_with_a_camera_classifier_as_the_reward(tmp_path):
    from robotrl.checkpoint import load_arrays
    from robotrl.real_robot.online_eval import run_twin_trial
    from robotrl.real_robot.reward_classifier import SuccessClassifier, load_classifier, save_classifier

    px = 32
    clf = SuccessClassifier(0, 2, hidden=[8], image_shapes={"pixels/topdown": [px, px, 3]}, encoder="drq", channels=4,
                            pooling="flatten", feature_dim=8)
    path = save_classifier(tmp_path / "classifier.pt", clf, 0.5)
    r = run_twin_trial(tmp_path / "run", mode="human", seed=0, episodes=1, max_steps=40, maze="deadend", reward="sparse",
                       warmup=10, hidden=16, batch=16, catch_up_s=20, operator="on-failure", reward_classifier=path,
                       cameras=("topdown",), image_size=px)
    assert {"reward=classifier", f"reward_classifier={path}", "robot.cameras=[topdown]", f"robot.image_size={px}",
            "+robot.env_kwargs.continuing_task=true"} <= set(r["actor_args"])  # only the classifier ends at the goal
    (ep,) = r["episode_log"]
    assert isinstance(ep["robot_success"], bool)  # the twin's own flag, kept beside the classifier's verdicts
    assert not any(a.startswith(("robot.cameras", "robot.image_size", "reward")) for a in r["learner_args"])
    assert r["summary"]["episodes"] == 1 and r["status"]["ingested"] == r["summary"]["steps"] > 0  # states arrived
    z = load_arrays(next((tmp_path / "run" / "actor").rglob("ep_*.npz")))
    assert z["frames_topdown"].shape == (len(z["rewards"]) + 1, px, px, 3)  # it recorded the frames the classifier read
    clf, thr = load_classifier(path)  # the recorded rewards are its verdicts on the frames each step led to
    p = clf.prob(z["observations"][1:, :0], {"pixels/topdown": z["frames_topdown"][1:]})
    np.testing.assert_array_equal(z["rewards"], (p >= thr).astype(np.float64))
