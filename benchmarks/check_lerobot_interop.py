"""Check robotrl's LeRobotDataset output against LeRobot itself (issue 42): reader, editing tools, QUANTILES
normaliser, dataloader. Run it on every change to ``robotrl/data/lerobot/``.

Two environments, because LeRobot pins its own torch and cannot live beside robotrl's pins in every version::

    python3 -m venv /work/venv-lerobot && /work/venv-lerobot/bin/pip install lerobot==0.4.4   # Python 3.11
    python3.12 -m venv /work/venv-lerobot06 && /work/venv-lerobot06/bin/pip install 'lerobot[dataset]==0.6.1'
    PYTHONPATH=$PWD python3 benchmarks/check_lerobot_interop.py --lerobot-python /work/venv-lerobot/bin/python \\
        --lerobot-python /work/venv-lerobot06/bin/python

Phase 1 (robotrl's environment) writes small datasets with :func:`robotrl.data.lerobot.write_lerobot`, the writer
``robotrl convert --to lerobot`` uses: each codec (``lossless``, ``h264``, ``av1``), a 3-D state, a scalar
state, a 1-D action, one camera, 3 episodes; the arrays it gave go to ``expected.npz``. Phase 2 runs this
file again under each ``--lerobot-python`` (``--check DIR``: imports LeRobot, numpy and torch only) and, per
dataset: opens it with ``LeRobotDataset``; compares every frame's state, action and camera with the
expected arrays (bit-exact for ``lossless``, PSNR for the lossy codecs); normalises actions with LeRobot's
``NormalizerProcessorStep`` in ``QUANTILES`` mode (it needs q01/q99); deletes episode 1 with
``dataset_tools.delete_episodes`` and splits with ``dataset_tools.split_dataset``, reopening the results and
checking their frames; iterates a ``torch.utils.data.DataLoader`` over it. One line per check; exit status 1
when any failed.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np

LENGTHS, FPS, H, W = (4, 6, 5), 10, 32, 32
CODECS = ("lossless", "h264", "av1")


# ----------------------------------------------------------------------------- phase 1: robotrl writes
def write_datasets(out: Path) -> list[Path]:
    from robotrl.data.lerobot import LeRobotEpisode, LeRobotInfo, write_lerobot

    rng = np.random.default_rng(0)
    n = sum(LENGTHS)
    yy, xx = np.mgrid[0:H, 0:W]
    frames = np.stack([np.stack([xx * 6 + 2 * t, yy * 6 + t, np.full_like(xx, 14 * t)], -1)  # smooth, below 256
                       for t in range(n)]).astype(np.uint8)
    a = {"state": rng.normal(size=(n, 3)).astype(np.float32), "gripper": rng.uniform(0, 1, (n, 1)).astype(np.float32),
         "action": rng.uniform(-1, 1, (n, 1)).astype(np.float32), "reward": rng.normal(size=n).astype(np.float32),
         "frames": frames, "lengths": np.asarray(LENGTHS)}
    starts = np.concatenate([[0], np.cumsum(LENGTHS)[:-1]])
    eps = [LeRobotEpisode({"observation.state": a["state"][s:s + k], "observation.gripper": a["gripper"][s:s + k],
                           "observation.images.front": a["frames"][s:s + k]}, a["action"][s:s + k], a["reward"][s:s + k],
                          np.arange(k) == k - 1, np.zeros(k, np.int64)) for s, k in zip(starts, LENGTHS)]
    info = LeRobotInfo(fps=FPS, features={"observation.images.front": {"dtype": "video"}}, tasks=["reach"],
                       robot_type="toy")
    paths = []
    for codec in CODECS:
        p = write_lerobot(out / f"robotrl_{codec}", eps, info, codec=codec, crf=18, overwrite=True)
        np.savez(p.parent / f"{p.name}.expected.npz", **a)
        paths.append(p)
    return paths


# ----------------------------------------------------------------------------- phase 2: LeRobot reads
def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def check(root: Path) -> bool:
    import torch
    from importlib.metadata import version

    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    lossless = root.name.endswith("lossless")
    exp = dict(np.load(root.parent / f"{root.name}.expected.npz"))
    tag = f"lerobot {version('lerobot')} | {root.name}"
    ok = True

    def report(name: str, fn) -> None:
        nonlocal ok
        try:
            detail = fn()
            print(f"PASS {tag} | {name}" + (f": {detail}" if detail else ""))
        except Exception as exc:  # one line per failed check; the traceback's last frame names the place
            ok = False
            where = traceback.extract_tb(exc.__traceback__)[-1]
            print(f"FAIL {tag} | {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''} "
                  f"({Path(where.filename).name}:{where.lineno})")

    ds_box: dict = {}

    def frames_of(ds) -> dict[str, np.ndarray]:
        items = [ds[i] for i in range(len(ds))]
        out = {k: np.stack([np.asarray(it[k]) for it in items]) for k in
               ("observation.state", "observation.gripper", "action", "episode_index", "frame_index")}
        cam = np.stack([it["observation.images.front"].numpy() for it in items])
        out["frames"] = np.clip(np.rint(cam * 255.0), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
        return out

    def open_and_compare() -> str:
        ds = LeRobotDataset(f"robotrl/{root.name}", root=root)
        ds_box["ds"] = ds
        got = frames_of(ds)
        assert len(ds) == sum(exp["lengths"]) and ds.meta.total_episodes == len(exp["lengths"]), "frame/episode counts"
        np.testing.assert_array_equal(got["observation.state"], exp["state"])
        np.testing.assert_array_equal(got["observation.gripper"].reshape(-1, 1), exp["gripper"])
        np.testing.assert_array_equal(got["action"].reshape(-1, 1), exp["action"])
        np.testing.assert_array_equal(got["frame_index"].reshape(-1),
                                      np.concatenate([np.arange(k) for k in exp["lengths"]]))
        p = _psnr(got["frames"], exp["frames"])
        if lossless:
            np.testing.assert_array_equal(got["frames"], exp["frames"])
        else:
            assert p > 30, f"PSNR {p:.1f} dB"
        return f"{len(ds)} frames, states/actions exact, camera {'bit-exact' if lossless else f'PSNR {p:.1f} dB'}"

    def quantiles() -> str:
        from lerobot.configs.types import FeatureType, NormalizationMode, PolicyFeature
        from lerobot.processor.normalize_processor import NormalizerProcessorStep

        ds = ds_box["ds"]
        stats = ds.meta.stats
        missing = [q for q in ("q01", "q10", "q50", "q90", "q99") if q not in stats["action"]]
        assert not missing, f"stats.json lacks {missing}"
        step = NormalizerProcessorStep(features={"action": PolicyFeature(FeatureType.ACTION, (1,))},
                                       norm_map={FeatureType.ACTION: NormalizationMode.QUANTILES}, stats=stats)
        act = torch.from_numpy(exp["action"])
        y = step._normalize_action(act, inverse=False)
        q01, q99 = (float(np.asarray(stats["action"][k]).reshape(-1)[0]) for k in ("q01", "q99"))
        np.testing.assert_allclose(y.numpy(), 2 * (exp["action"] - q01) / (q99 - q01) - 1, rtol=1e-4, atol=1e-5)
        return f"QUANTILES normaliser: q01={q01:.3f} q99={q99:.3f}"

    def edit(tmp: Path) -> str:
        from lerobot.datasets import dataset_tools

        ds = ds_box["ds"]
        out = dataset_tools.delete_episodes(ds, episode_indices=[1], output_dir=tmp / "deleted",
                                            repo_id=f"robotrl/{root.name}_deleted")
        got = frames_of(LeRobotDataset(out.repo_id, root=out.root))
        keep = np.concatenate([np.arange(0, 4), np.arange(10, 15)])
        np.testing.assert_array_equal(got["action"].reshape(-1, 1), exp["action"][keep])
        p = _psnr(got["frames"], exp["frames"][keep])
        assert p > 30, f"frames after delete_episodes: PSNR {p:.1f} dB"
        parts = dataset_tools.split_dataset(ds, splits={"train": [0, 2], "val": [1]}, output_dir=tmp / "split")
        sizes = {k: len(v) for k, v in parts.items()}
        assert sizes == {"train": 9, "val": 6}, sizes
        val = frames_of(LeRobotDataset(parts["val"].repo_id, root=parts["val"].root))
        np.testing.assert_array_equal(val["action"].reshape(-1, 1), exp["action"][4:10])
        return f"delete_episodes([1]): 9 frames kept (camera PSNR {p:.1f} dB); split_dataset: {sizes}"

    def loader() -> str:
        dl = torch.utils.data.DataLoader(ds_box["ds"], batch_size=4, shuffle=True, num_workers=0)
        n = 0
        for batch in dl:
            assert batch["observation.images.front"].shape[1:] == (3, H, W)
            n += batch["action"].shape[0]
        assert n == sum(exp["lengths"])
        return f"DataLoader: {n} frames in batches of 4"

    report("LeRobotDataset reads it", open_and_compare)
    if "ds" in ds_box:
        report("stats quantiles", quantiles)
        with tempfile.TemporaryDirectory() as tmp:
            report("editing tools", lambda: edit(Path(tmp)))
        report("dataloader", loader)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lerobot-python", action="append", default=[],
                    help="python of an environment with LeRobot installed (repeat for several versions)")
    ap.add_argument("--out", default=None, help="where phase 1 writes (default: a temporary folder)")
    ap.add_argument("--check", nargs="+", default=None, help=argparse.SUPPRESS)  # phase 2, in LeRobot's environment
    args = ap.parse_args()
    if args.check:
        results = [check(Path(p)) for p in args.check]
        return 0 if all(results) else 1
    if not args.lerobot_python:
        ap.error("give --lerobot-python (an environment with LeRobot installed)")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(args.out or tmp)
        paths = write_datasets(out)
        status = 0
        for py in args.lerobot_python:
            r = subprocess.run([py, __file__, "--check", *map(str, paths)], text=True, capture_output=True)
            lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("PASS", "FAIL"))]
            print("\n".join(lines))
            if r.returncode != 0:
                status = 1
                if not lines:
                    print(f"FAIL {py}: {r.stderr.strip().splitlines()[-1] if r.stderr.strip() else r.returncode}")
        print(json.dumps({"checked": [str(p.name) for p in paths], "ok": status == 0}))
        return status


if __name__ == "__main__":
    sys.exit(main())
