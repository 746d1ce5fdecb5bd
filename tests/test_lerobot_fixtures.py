"""LeRobot datasets written by LeRobot's own API, read by robotrl (issue 42, item 2).

``tests/data/lerobot/lerobot-<version>-{video,images}`` were written by ``tests/data/lerobot/make_fixtures.py``
with LeRobot's ``LeRobotDataset.create / add_frame / save_episode / finalize`` (LeRobot's default AV1 video,
or PNG images in parquet), with a 3-D state, a scalar (1-D) state, a 1-D action, 2 episodes at 10 fps;
``expected.npz`` holds the arrays given to LeRobot. Every CI run reads them with robotrl's own reader
(no LeRobot needed); with LeRobot installed (the ``[lerobot]`` extra) ``dataset.id=lerobot:<folder>`` reads
them through LeRobot's library, images included; without it, that answers with one line naming the extra.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from robotrl.data.lerobot import ConvertError, psnr, read_lerobot

FIXTURES = Path(__file__).resolve().parent / "data" / "lerobot"
VIDEO = sorted(FIXTURES.glob("lerobot-*-video"))
IMAGES = sorted(FIXTURES.glob("lerobot-*-images"))
HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None


def _expected(root: Path) -> dict[str, np.ndarray]:
    return dict(np.load(root / "expected.npz"))


def test_fixtures_are_present_and_small():
    assert VIDEO and IMAGES and len(VIDEO) == len(IMAGES)
    for root in [*VIDEO, *IMAGES]:
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        assert size < 1 << 20, f"{root.name}: {size} bytes"


def _check_lossy_frames(got: np.ndarray, want: np.ndarray) -> None:
    """LeRobot's default codec (AV1, crf 30) is lossy: every decoded frame is near its own frame (PSNR > 20 dB)
    and nearer to it than to any other frame of the fixture by 3 dB (the right frame, in the right order). Measured
    with PyAV on these fixtures: own frames 24 to 43 dB (the colour wraps are hard for AV1), any other frame <= 18.3 dB."""
    own = [psnr(g, w) for g, w in zip(got, want)]
    assert min(own) > 20, own
    for t, g in enumerate(got):
        assert max(psnr(g, w) for i, w in enumerate(want) if i != t) < own[t] - 3, f"frame {t} is closer to another frame"


@pytest.mark.parametrize("root", VIDEO, ids=[p.name for p in VIDEO])
def test_robotrl_reads_lerobots_own_video_dataset(root):
    exp = _expected(root)
    info, eps = read_lerobot(root)
    assert info.fps == 10 and info.codebase_version.startswith("v3") and info.tasks == ["task 0", "task 1"]
    assert [len(e) for e in eps] == exp["lengths"].tolist()  # episode boundaries and frame order kept
    cat = {k: np.concatenate([e.observations[k] for e in eps]) for k in eps[0].observations}
    np.testing.assert_array_equal(cat["observation.state"], exp["state"])
    np.testing.assert_array_equal(cat["observation.gripper"].reshape(-1, 1), exp["gripper"])  # LeRobot's 1-D feature
    np.testing.assert_array_equal(np.concatenate([e.action for e in eps]).reshape(-1, 1), exp["action"])
    np.testing.assert_array_equal(np.concatenate([e.reward for e in eps]), exp["reward"].reshape(-1))
    np.testing.assert_array_equal(np.concatenate([e.done for e in eps]), exp["done"].reshape(-1))
    np.testing.assert_array_equal(np.concatenate([e.task_index for e in eps]),
                                  np.repeat([0, 1], exp["lengths"]))
    frames = cat["observation.images.front"]
    assert frames.shape == exp["frames"].shape and frames.dtype == np.uint8
    _check_lossy_frames(frames, exp["frames"])


@pytest.mark.parametrize("root", IMAGES, ids=[p.name for p in IMAGES])
def test_image_dataset_refusal_names_lerobots_own_command(root):
    with pytest.raises(ConvertError) as e:
        read_lerobot(root)
    msg = str(e.value)
    assert "lerobot-edit-dataset" in msg and "--operation.type convert_image_to_video" in msg and "\n" not in msg
    assert "dataset.id=lerobot:" in msg


@pytest.mark.skipif(HAVE_LEROBOT, reason="checks the answer without LeRobot installed")
def test_lerobot_id_without_the_extra_says_how_to_install(tmp_path, monkeypatch):
    from robotrl.data.dataset import load_dataset

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    with pytest.raises(ConvertError, match=r"pip install 'robotrl\[lerobot\]'") as e:
        load_dataset(f"lerobot:{VIDEO[0]}")
    assert "\n" not in str(e.value)


@pytest.mark.skipif(not HAVE_LEROBOT, reason="needs the [lerobot] extra (LeRobot's own reader)")
@pytest.mark.parametrize("root", [*VIDEO, *IMAGES], ids=[p.name for p in [*VIDEO, *IMAGES]])
def test_lerobot_id_reads_through_lerobots_library(root, tmp_path, monkeypatch):
    from robotrl.data.dataset import load_dataset, resolve_dataset_path

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
    exp = _expected(root)
    data = load_dataset(f"lerobot:{root}")
    ends = np.cumsum(exp["lengths"])
    np.testing.assert_array_equal(data.episode_ends, ends)
    assert data.num_transitions == int(ends[-1])
    prov = data.metadata["robotrl_provenance"]
    prov = json.loads(prov) if isinstance(prov, str) else prov
    assert prov["lerobot"]["fps"] == 10.0 and prov["lerobot"]["tasks"] == ["task 0", "task 1"]
    frames = data.images["front"][data.image_index]
    if root in IMAGES:
        np.testing.assert_array_equal(frames, exp["frames"])  # PNG: exact
    else:
        _check_lossy_frames(frames, exp["frames"])
    np.testing.assert_array_equal(data.actions, exp["action"])
    # converted once, then reused until the source changes
    assert resolve_dataset_path(f"lerobot:{root}") == resolve_dataset_path(f"lerobot:{root}")
