"""Write the LeRobot fixture datasets of ``tests/data/lerobot/`` with LeRobot's own API (issue 42).

Run in an environment with LeRobot installed (its own venv, not robotrl's), e.g.::

    /work/venv-lerobot/bin/python tests/data/lerobot/make_fixtures.py tests/data/lerobot

Writes ``lerobot-<version>-video`` (camera as a video, LeRobot's default AV1 codec) and
``lerobot-<version>-images`` (camera as PNG images in parquet), each with a 3-D state, a 1-D (scalar) state
feature, a 1-D action, reward and done, 2 episodes of 5 and 7 frames at 10 fps, and ``expected.npz`` beside
them: the arrays given to LeRobot, which ``tests/test_lerobot_fixtures.py`` compares robotrl's reading with.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np

LENGTHS, FPS, H, W = (5, 7), 10, 64, 64


def arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(42)
    n = sum(LENGTHS)
    yy, xx = np.mgrid[0:H, 0:W]
    frames = np.stack([np.stack([(xx * 4 + 9 * t) % 256, (yy * 4 + 5 * t) % 256, np.full_like(xx, 20 * t % 256)], -1)
                       for t in range(n)]).astype(np.uint8)  # smooth gradients: a lossy codec keeps them well
    done = np.concatenate([np.arange(k) == k - 1 for k in LENGTHS])
    return {"state": rng.normal(size=(n, 3)).astype(np.float32), "gripper": rng.uniform(0, 1, (n, 1)).astype(np.float32),
            "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32), "reward": rng.normal(size=(n, 1)).astype(np.float32),
            "done": done[:, None], "frames": frames, "lengths": np.asarray(LENGTHS)}


def write(root: Path, use_videos: bool, a: dict[str, np.ndarray]) -> Path:
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    cam = {"dtype": "video" if use_videos else "image", "shape": (H, W, 3), "names": ["height", "width", "channels"]}
    features = {"observation.state": {"dtype": "float32", "shape": (3,), "names": ["x", "y", "z"]},
                "observation.gripper": {"dtype": "float32", "shape": (1,), "names": ["gripper"]},
                "observation.images.front": cam,
                "action": {"dtype": "float32", "shape": (1,), "names": ["vel"]},
                "next.reward": {"dtype": "float32", "shape": (1,), "names": None},
                "next.done": {"dtype": "bool", "shape": (1,), "names": None}}
    if root.exists():
        shutil.rmtree(root)
    ds = LeRobotDataset.create(repo_id=f"robotrl/{root.name}", fps=FPS, features=features, root=root,
                               robot_type="toy", use_videos=use_videos)
    i = 0
    for e, n in enumerate(LENGTHS):
        for _ in range(n):
            ds.add_frame({"observation.state": a["state"][i], "observation.gripper": a["gripper"][i],
                          "observation.images.front": a["frames"][i], "action": a["action"][i],
                          "next.reward": a["reward"][i], "next.done": a["done"][i], "task": f"task {e % 2}"})
            i += 1
        ds.save_episode()
    ds.finalize()
    return root


def main(out: str) -> None:
    import lerobot

    version = getattr(lerobot, "__version__", None)
    if version is None:
        from importlib.metadata import version as v

        version = v("lerobot")
    a = arrays()
    for use_videos, kind in ((True, "video"), (False, "images")):
        root = write(Path(out) / f"lerobot-{version}-{kind}", use_videos, a)
        np.savez_compressed(root / "expected.npz", **a)
        size = sum(f.stat().st_size for f in root.rglob("*") if f.is_file())
        print(f"{root}: {size / 1024:.0f} KiB")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).parent))
