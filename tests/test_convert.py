"""LeRobotDataset v3.0 <-> Minari conversion (robotrl.data.lerobot, ``robotrl convert``).

The LeRobotDataset here is written by this test's own code (pyarrow + PyAV, following the
v3.0 layout), not by robotrl's writer, so reader and writer are checked against an
independent implementation. Camera frames are real MuJoCo renders (OSMesa) of a small
scene driven by the actions.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

av = pytest.importorskip("av")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.data.lerobot import lerobot_to_minari, minari_to_lerobot, psnr, read_lerobot  # noqa: E402
from robotrl.errors import DatasetFormatError  # noqa: E402

FPS = 10
H = W = 32
CAM = "observation.images.front"
LENGTHS = (7, 5, 9)
XML = """
<mujoco>
  <worldbody>
    <light pos="0 0 3"/>
    <geom type="plane" size="2 2 0.1" rgba="0.3 0.5 0.3 1"/>
    <body name="box" pos="0 0 0.2">
      <joint name="x" type="slide" axis="1 0 0"/>
      <joint name="y" type="slide" axis="0 1 0"/>
      <geom type="box" size="0.2 0.2 0.2" rgba="0.9 0.2 0.1 1"/>
    </body>
    <camera name="front" pos="0 -2.5 1.5" xyaxes="1 0 0 0 0.5 0.86"/>
  </worldbody>
  <actuator><motor joint="x" gear="5"/><motor joint="y" gear="5"/></actuator>
</mujoco>
"""


def _render_episodes(seed: int = 0):
    """Episodes from a real MuJoCo scene: state = (qpos, qvel) float32 (4,), action (2,), frames uint8 (N, 32, 32, 3)."""
    import mujoco

    model = mujoco.MjModel.from_xml_string(XML)
    data = mujoco.MjData(model)
    renderer = mujoco.Renderer(model, H, W)
    rng = np.random.default_rng(seed)
    eps = []
    for e, n in enumerate(LENGTHS):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = rng.uniform(-0.5, 0.5, 2)
        states, frames, actions, rewards = [], [], [], []
        for t in range(n):
            mujoco.mj_forward(model, data)
            renderer.update_scene(data, camera="front")
            frames.append(renderer.render().copy())
            states.append(np.concatenate([data.qpos, data.qvel]).astype(np.float32))
            a = rng.uniform(-1, 1, 2).astype(np.float32)
            actions.append(a)
            data.ctrl[:] = a
            for _ in range(5):
                mujoco.mj_step(model, data)
            rewards.append(np.float32(-np.linalg.norm(data.qpos)))
        done = np.zeros(n, bool)
        done[-1] = e != 1  # episode 1 ends by a time limit (no termination)
        eps.append({"state": np.stack(states), "frames": np.stack(frames), "action": np.stack(actions),
                    "reward": np.array(rewards, np.float32), "done": done, "task_index": np.full(n, e % 2, np.int64)})
    renderer.close()
    return eps


def _write_lerobot_v3(root, eps, *, lossless: bool = True, version: str = "v3.0", codec: str | None = None):
    """A LeRobotDataset v3.0 written by the test's own code: one data file, one mp4 per camera."""
    lengths = [len(e["action"]) for e in eps]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    cat = {k: np.concatenate([e[k] for e in eps]) for k in eps[0]}
    fi = np.concatenate([np.arange(n) for n in lengths])
    (root / "data" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table({
        "observation.state": pa.array(list(cat["state"]), pa.list_(pa.float32())),
        "action": pa.array(list(cat["action"]), pa.list_(pa.float32())),
        "next.reward": pa.array(cat["reward"]),
        "next.done": pa.array(cat["done"]),
        "timestamp": pa.array((fi / FPS).astype(np.float32)),
        "frame_index": pa.array(fi.astype(np.int64)),
        "episode_index": pa.array(np.repeat(np.arange(len(eps)), lengths).astype(np.int64)),
        "index": pa.array(np.arange(sum(lengths), dtype=np.int64)),
        "task_index": pa.array(cat["task_index"]),
    }), root / "data/chunk-000/file-000.parquet")
    video = root / "videos" / CAM / "chunk-000" / "file-000.mp4"
    video.parent.mkdir(parents=True)
    with av.open(str(video), "w") as c:
        if codec == "av1":
            s = c.add_stream("libsvtav1", rate=FPS)
            s.pix_fmt, s.options = "yuv420p", {"crf": "30", "g": "2", "preset": "8"}
        else:
            s = c.add_stream("libx264rgb" if lossless else "libx264", rate=FPS)
            s.pix_fmt = "rgb24" if lossless else "yuv420p"
            s.options = {"qp": "0"} if lossless else {"crf": "23"}
        s.width, s.height = W, H
        for f in cat["frames"]:
            for p in s.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    (root / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
    pq.write_table(pa.table({
        "episode_index": pa.array(np.arange(len(eps), dtype=np.int64)),
        "length": pa.array(np.array(lengths, np.int64)),
        f"videos/{CAM}/chunk_index": pa.array(np.zeros(len(eps), np.int64)),
        f"videos/{CAM}/file_index": pa.array(np.zeros(len(eps), np.int64)),
        f"videos/{CAM}/from_timestamp": pa.array(starts / FPS),
        f"videos/{CAM}/to_timestamp": pa.array((starts + np.array(lengths)) / FPS),
    }), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task_index": pa.array([0, 1], pa.int64()), "task": ["push the box", "hold still"]}),
                   root / "meta/tasks.parquet")
    scalar = {"shape": [1], "names": None}
    info = {
        "codebase_version": version, "robot_type": "box2d", "fps": FPS,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": {
            "observation.state": {"dtype": "float32", "shape": [4], "names": ["x", "y", "vx", "vy"]},
            "action": {"dtype": "float32", "shape": [2], "names": ["fx", "fy"]},
            CAM: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"]},
            "next.reward": {"dtype": "float32", **scalar}, "next.done": {"dtype": "bool", **scalar},
            "timestamp": {"dtype": "float32", **scalar}, "frame_index": {"dtype": "int64", **scalar},
            "episode_index": {"dtype": "int64", **scalar}, "index": {"dtype": "int64", **scalar},
            "task_index": {"dtype": "int64", **scalar},
        },
    }
    (root / "meta" / "info.json").write_text(json.dumps(info))
    return root


@pytest.fixture(scope="module")
def episodes():
    return _render_episodes()


def _assert_same(eps, info_eps, frames_exact=True, min_psnr=None):
    assert len(info_eps) == len(eps)
    for e, r in zip(eps, info_eps):
        np.testing.assert_array_equal(r.observations["observation.state"], e["state"])
        np.testing.assert_array_equal(r.action, e["action"])
        np.testing.assert_array_equal(r.reward, e["reward"])
        np.testing.assert_array_equal(r.done, e["done"])
        np.testing.assert_array_equal(r.task_index, e["task_index"])
        got = r.observations[CAM]
        assert got.dtype == np.uint8 and got.shape == e["frames"].shape
        if frames_exact:
            np.testing.assert_array_equal(got, e["frames"])
        else:
            assert psnr(got, e["frames"]) >= min_psnr


@pytest.mark.parametrize("data_format", ["hdf5", "arrow"])
def test_round_trip_lerobot_minari_lerobot_exact(tmp_path, episodes, monkeypatch, data_format):
    """LeRobot -> Minari -> LeRobot keeps every frame, state, action, reward, done and task (lossless codec)."""
    import minari

    src = _write_lerobot_v3(tmp_path / "src", episodes)
    root = tmp_path / "minari"
    out = lerobot_to_minari(src, "box/push-v0", root=root, data_format=data_format)
    assert out == root / "box/push-v0"

    # The Minari dataset, read by minari itself: Dict observations with a uint8 camera.
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(root))
    ds = minari.load_dataset("box/push-v0")
    assert ds.total_episodes == 3 and ds.total_steps == sum(LENGTHS)
    assert ds.observation_space["front"].dtype == np.uint8 and ds.observation_space["front"].shape == (H, W, 3)
    for e, m in zip(episodes, ds.iterate_episodes()):
        n = len(e["action"])
        np.testing.assert_array_equal(m.observations["front"][:n], e["frames"])
        np.testing.assert_array_equal(m.observations["front"][n], e["frames"][-1])  # final observation: the last frame repeated
        np.testing.assert_array_equal(m.observations["state"][:n], e["state"])
        np.testing.assert_array_equal(m.actions, e["action"])
        np.testing.assert_array_equal(m.rewards.astype(np.float32), e["reward"])
        np.testing.assert_array_equal(m.terminations, e["done"])
        assert m.truncations[-1] == (not e["done"][-1]) and not m.truncations[:-1].any()

    # ... and by robotrl's data layer: frames stored once, exact in sampled batches
    from robotrl.data import ReplayBuffer, load_dataset

    data = load_dataset(root / "box/push-v0")
    buf = ReplayBuffer.from_offline(data)
    batch = buf.sample(data.num_transitions, indices=np.arange(data.num_transitions))
    frames = np.concatenate([e["frames"] for e in episodes])
    np.testing.assert_array_equal(batch.images()["front"].numpy(), frames)
    np.testing.assert_array_equal(batch.observations.numpy(), np.concatenate([e["state"] for e in episodes]))
    nxt = np.concatenate([np.concatenate([e["frames"][1:], e["frames"][-1:]]) for e in episodes])
    np.testing.assert_array_equal(batch.next_images()["front"].numpy(), nxt)

    back = minari_to_lerobot(root / "box/push-v0", tmp_path / "back")
    info, eps_back = read_lerobot(back)
    assert info.fps == FPS and info.tasks == ["push the box", "hold still"] and info.robot_type == "box2d"
    assert info.features["observation.state"]["names"] == ["x", "y", "vx", "vy"]
    _assert_same(episodes, eps_back)
    meta = json.loads((back / "meta/info.json").read_text())
    assert meta["codebase_version"] == "v3.0" and meta["total_frames"] == sum(LENGTHS)
    # the lossless pair LeRobot 0.6's encoder checks accept (its editing tools re-encode with it)
    assert (meta["features"][CAM]["info"]["video.codec"], meta["features"][CAM]["info"]["video.pix_fmt"]) == ("hevc", "gbrp")
    stats = json.loads((back / "meta/stats.json").read_text())
    assert np.asarray(stats[CAM]["mean"]).shape == np.asarray(stats[CAM]["q50"]).shape == (3, 1, 1)
    actions = np.concatenate([e["action"] for e in episodes])
    np.testing.assert_allclose(stats["action"]["max"], actions.max(0), rtol=1e-6)
    for q in ("q01", "q10", "q50", "q90", "q99"):  # LeRobot >= 0.4's quantiles (its QUANTILES normaliser needs them)
        np.testing.assert_allclose(stats["action"][q], np.quantile(actions, int(q[1:]) / 100, axis=0), rtol=1e-6)
    # per-episode stats in meta/episodes, as LeRobot keeps them
    import pyarrow.parquet as pq

    ep_meta = pq.read_table(back / "meta/episodes/chunk-000/file-000.parquet").to_pydict()
    for i, e in enumerate(episodes):
        np.testing.assert_allclose(ep_meta["stats/action/mean"][i], e["action"].mean(0), rtol=1e-5)
        assert ep_meta["stats/action/count"][i] == [len(e["action"])]
        assert np.asarray(ep_meta[f"stats/{CAM}/q99"][i]).shape == (3, 1, 1)


def test_one_dimensional_features_are_scalar_columns(tmp_path):
    """A 1-DoF action and a scalar state are written as scalar columns (LeRobot cannot cast a one-element list
    column to its float feature) and read back unchanged."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from robotrl.data.lerobot import LeRobotEpisode, LeRobotInfo, write_lerobot

    rng = np.random.default_rng(0)
    eps = [LeRobotEpisode({"observation.state": rng.normal(size=(n, 1)).astype(np.float32)},
                          rng.uniform(-1, 1, (n, 1)).astype(np.float32), rng.normal(size=n).astype(np.float32),
                          np.arange(n) == n - 1, np.zeros(n, np.int64)) for n in (5, 7)]
    out = write_lerobot(tmp_path / "one_d", eps, LeRobotInfo(fps=10.0, features={}, tasks=["t"]))
    schema = pq.read_schema(out / "data/chunk-000/file-000.parquet")
    assert schema.field("action").type == pa.float32() and schema.field("observation.state").type == pa.float32()
    feats = json.loads((out / "meta/info.json").read_text())["features"]
    assert feats["action"]["shape"] == feats["observation.state"]["shape"] == [1]
    _, back = read_lerobot(out)
    for a, b in zip(eps, back):
        np.testing.assert_array_equal(a.action, b.action)
        np.testing.assert_array_equal(a.observations["observation.state"], b.observations["observation.state"])


def test_lossy_h264_within_psnr(tmp_path, episodes):
    """A yuv420p source decodes within 30 dB PSNR of the renders; robotrl's h264 output keeps >= 30 dB of them."""
    src = _write_lerobot_v3(tmp_path / "src", episodes, lossless=False)
    _, eps = read_lerobot(src)
    _assert_same(episodes, eps, frames_exact=False, min_psnr=30.0)
    lerobot_to_minari(tmp_path / "src", "box/lossy-v0", root=tmp_path / "m")
    back = minari_to_lerobot(tmp_path / "m/box/lossy-v0", tmp_path / "back", codec="h264", crf=18)
    _, eps2 = read_lerobot(back)
    _assert_same(episodes, eps2, frames_exact=False, min_psnr=28.0)


def test_av1_source_and_output(tmp_path, episodes):
    """AV1 (libsvtav1, what lerobot writes by default) decodes within 30 dB; robotrl's av1 output too."""
    src = _write_lerobot_v3(tmp_path / "src", episodes, codec="av1")
    _, eps = read_lerobot(src)
    _assert_same(episodes, eps, frames_exact=False, min_psnr=30.0)
    lerobot_to_minari(src, "box/av1-v0", root=tmp_path / "m")
    back = minari_to_lerobot(tmp_path / "m/box/av1-v0", tmp_path / "back", codec="av1", crf=30)
    assert json.loads((back / "meta/info.json").read_text())["features"][CAM]["info"]["video.codec"] == "av1"
    _, eps2 = read_lerobot(back)
    _assert_same(episodes, eps2, frames_exact=False, min_psnr=28.0)


def test_minari_to_lerobot_needs_fps_and_drops_final_obs(tmp_path, episodes):
    """A Minari dataset not from LeRobot: fps must be given; frames 0..T-1 written exactly."""
    from robotrl.data.lerobot import ConvertError
    from robotrl.data.writer import Episode, write_dataset
    import gymnasium as gym

    space = gym.spaces.Dict({"state": gym.spaces.Box(-np.inf, np.inf, (4,), np.float32),
                             "wrist": gym.spaces.Box(0, 255, (H, W, 3), np.uint8)})
    eps = [Episode(observations={"state": np.concatenate([e["state"], e["state"][-1:] + 1]),
                                 "wrist": np.concatenate([e["frames"], 255 - e["frames"][-1:]])},
                   actions=e["action"], rewards=e["reward"], terminations=e["done"], truncations=~e["done"] & False)
           for e in episodes]
    write_dataset("box/own-v0", eps, observation_space=space, action_space=gym.spaces.Box(-1, 1, (2,), np.float32),
                  root=tmp_path / "m")
    with pytest.raises(ConvertError, match="pass fps"):
        minari_to_lerobot(tmp_path / "m/box/own-v0", tmp_path / "lr")
    out = minari_to_lerobot(tmp_path / "m/box/own-v0", tmp_path / "lr", fps=15, task="push")
    info, back = read_lerobot(out)
    assert info.fps == 15 and info.tasks == ["push"]
    for e, r in zip(episodes, back):
        np.testing.assert_array_equal(r.observations["observation.images.wrist"], e["frames"])
        np.testing.assert_array_equal(r.observations["observation.state"], e["state"])
        np.testing.assert_array_equal(r.action, e["action"])


def test_malformed_datasets_name_the_problem(tmp_path, episodes):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetFormatError, match="meta/info.json is missing"):
        read_lerobot(tmp_path / "empty")
    old = _write_lerobot_v3(tmp_path / "old", episodes[:1], version="v2.1")
    with pytest.raises(DatasetFormatError, match=r"codebase_version v2.1 is not supported.*convert_dataset_v21_to_v30"):
        read_lerobot(old)
    src = _write_lerobot_v3(tmp_path / "novideo", episodes[:1])
    (src / "videos" / CAM / "chunk-000" / "file-000.mp4").unlink()
    with pytest.raises(DatasetFormatError, match="video file .* is missing"):
        read_lerobot(src)


def _cli(*args):
    """``robotrl convert ...`` in this process (a subprocess would pay ~8 s of imports per call); its exit status."""
    from robotrl.cli import main

    try:
        main(["convert", *map(str, args)])
    except SystemExit as exc:
        return exc.code
    return 0


def test_cli_convert(tmp_path, episodes, monkeypatch, capsys):
    src = _write_lerobot_v3(tmp_path / "src", episodes[:2])
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "m"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    assert _cli("--from", "lerobot", src, "--to", "minari", "box/cli-v0") == 0
    assert (tmp_path / "m/box/cli-v0/data/metadata.json").is_file()
    assert _cli("--from", "minari", "box/cli-v0", "--to", "lerobot", tmp_path / "lr") == 0
    _, back = read_lerobot(tmp_path / "lr")
    _assert_same(episodes[:2], back)
    assert _cli("--from", "minari", "box/cli-v0", "--to", "lerobot", tmp_path / "lr") == 2  # exists: nothing overwritten
    assert "already exists" in capsys.readouterr().err
    assert _cli("--from", "lerobot", tmp_path / "nothing", "--to", "minari", "box/x-v0") == 2
    err = capsys.readouterr().err
    assert err.startswith("robotrl: error:") and "does not exist" in err
