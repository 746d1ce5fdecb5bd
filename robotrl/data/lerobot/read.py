"""Reading a LeRobotDataset v3.0 folder: parquet frames and episodes, decoded videos (:func:`read_lerobot`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from robotrl.errors import DatasetFormatError, DatasetNotFoundError
from robotrl.data.lerobot.format import VIDEO_PATH, ConvertError, _need_av, LeRobotEpisode, LeRobotInfo


def _column(table, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A parquet column as a numpy array ``(rows, *shape)`` (lists and fixed-size lists flattened)."""
    import pyarrow as pa

    col = table.column(name).combine_chunks()
    n = len(col)
    while pa.types.is_list(col.type) or pa.types.is_fixed_size_list(col.type) or pa.types.is_large_list(col.type):
        col = col.flatten()
    arr = col.to_numpy(zero_copy_only=False)
    want = int(np.prod(shape)) if shape else 1
    if arr.size != n * want:
        raise DatasetFormatError(f"column {name!r} holds {arr.size} values for {n} rows; meta/info.json says shape {list(shape)}")
    return arr.reshape((n, *shape)) if shape and tuple(shape) != (1,) else arr.reshape(n)


def _read_parquets(root: Path, sub: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = sorted((root / sub).glob("chunk-*/file-*.parquet"))
    if not files:
        raise DatasetFormatError(f"{root} has no {sub}/chunk-*/file-*.parquet files; the LeRobotDataset is incomplete")
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def _decode_video(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """All frames of ``path``: uint8 ``(F, H, W, 3)`` RGB and their timestamps float64 ``(F,)`` in s."""
    av = _need_av()
    if not path.is_file():
        raise DatasetFormatError(f"video file {path} is missing; the LeRobotDataset is incomplete (download it again)")
    frames, times = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        for frame in container.decode(stream):
            frames.append(frame.to_ndarray(format="rgb24"))
            times.append(float(frame.pts * frame.time_base) if frame.pts is not None else float(frame.time))
    if not frames:
        raise DatasetFormatError(f"video file {path} holds no frames")
    order = np.argsort(times, kind="stable")
    return np.stack(frames)[order], np.asarray(times)[order]


def read_lerobot(root: str | os.PathLike, *, tolerance_s: float = 1e-4) -> tuple[LeRobotInfo, list[LeRobotEpisode]]:
    """Read a LeRobotDataset v3.0 folder (frames, actions, rewards and decoded camera frames).

    Args:
        root: the dataset folder (holding ``meta/``, ``data/``, ``videos/``).
        tolerance_s: largest allowed gap between a frame's timestamp and the decoded video
            frame matched to it (LeRobot's own default, 1e-4 s).

    Returns:
        ``(info, episodes)``, episodes in ``episode_index`` order.

    Raises:
        DatasetNotFoundError: ``root`` does not exist.
        DatasetFormatError: ``meta/info.json`` missing, unsupported ``codebase_version``, a
            missing file, or frames that do not line up with the videos.
    """
    import pyarrow.parquet as pq

    root = Path(root).expanduser()
    if not root.is_dir():
        raise DatasetNotFoundError(f"LeRobotDataset folder {root} does not exist; pass the folder holding meta/info.json")
    info_path = root / "meta" / "info.json"
    if not info_path.is_file():
        raise DatasetFormatError(
            f"{root} is not a LeRobotDataset: meta/info.json is missing. Pass the dataset's root folder "
            "(the one holding meta/, data/ and videos/), e.g. a snapshot of a Hugging Face dataset repo"
        )
    try:
        info = json.loads(info_path.read_text())
    except json.JSONDecodeError as exc:
        raise DatasetFormatError(f"{info_path} is not valid JSON ({exc}); the download is damaged") from exc
    version = str(info.get("codebase_version", "<missing>"))
    if not version.startswith("v3."):
        raise DatasetFormatError(
            f"{root}: LeRobotDataset codebase_version {version} is not supported (only v3.x). Upgrade it with "
            "lerobot's converter (python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id=...) first"
        )
    features: dict[str, dict] = info.get("features") or {}
    fps = float(info.get("fps") or 0)
    if fps <= 0 or not features:
        raise DatasetFormatError(f"{info_path} lacks 'fps' or 'features'; the dataset's metadata is damaged")
    for key in ("action", "episode_index", "frame_index", "timestamp"):
        if key not in features:
            raise DatasetFormatError(f"{info_path}: feature {key!r} is missing; robotrl needs it to build transitions")
    images = [k for k, f in features.items() if f.get("dtype") == "image"]
    if images:
        raise ConvertError(
            f"{root}: features {images} are stored as images in parquet (dtype 'image'); only video features are "
            "supported by robotrl's own reader. Read it through LeRobot (pip install 'robotrl[lerobot]', "
            "dataset.id=lerobot:<folder or repo_id>), or re-encode the images as videos with LeRobot first: "
            "lerobot-edit-dataset --repo_id <repo_id> --root <folder> --operation.type convert_image_to_video "
            "--operation.output_dir <new folder> (lerobot.datasets.dataset_tools.convert_image_to_video_dataset)"
        )
    video_keys = [k for k, f in features.items() if f.get("dtype") == "video"]
    obs_keys = [k for k, f in features.items() if k.startswith("observation.") and f.get("dtype") not in ("video", "image")]

    tasks: list[str] = []
    tasks_path = root / "meta" / "tasks.parquet"
    if tasks_path.is_file():
        t = pq.read_table(tasks_path)
        names = [n for n in t.column_names if n not in ("task_index",)]
        tcol = "task" if "task" in t.column_names else (names[0] if names else None)
        if tcol is not None and "task_index" in t.column_names:
            pairs = sorted(zip(t.column("task_index").to_pylist(), t.column(tcol).to_pylist()))
            tasks = [str(s) for _, s in pairs]

    data = _read_parquets(root, "data")
    ep_meta = _read_parquets(root, "meta/episodes") if video_keys else None

    def shape_of(k):
        return tuple(int(s) for s in features[k].get("shape", (1,)))

    ep_idx = _column(data, "episode_index", ())
    frame_idx = _column(data, "frame_index", ())
    ts = _column(data, "timestamp", ()).astype(np.float64)
    cols = {k: _column(data, k, shape_of(k)).reshape(len(ep_idx), *shape_of(k)) for k in [*obs_keys, "action"]}
    reward = _column(data, "next.reward", ()).astype(np.float32) if "next.reward" in data.column_names else None
    done = _column(data, "next.done", ()).astype(bool) if "next.done" in data.column_names else None
    task_idx = _column(data, "task_index", ()).astype(np.int64) if "task_index" in data.column_names else None

    video_rows: dict[int, dict[str, Any]] = {}
    if ep_meta is not None:
        rows = ep_meta.to_pylist()
        video_rows = {int(r["episode_index"]): r for r in rows}
    video_template = info.get("video_path") or VIDEO_PATH
    cache: dict[str, tuple[Path, np.ndarray, np.ndarray]] = {}

    episodes = []
    for e in np.unique(ep_idx):
        sel = np.flatnonzero(ep_idx == e)
        sel = sel[np.argsort(frame_idx[sel], kind="stable")]
        n = len(sel)
        if not np.array_equal(frame_idx[sel], np.arange(n)):
            raise DatasetFormatError(f"{root}: episode {int(e)} has frame_index values that are not 0..{n - 1}; frames are missing")
        obs = {k: np.ascontiguousarray(cols[k][sel]) for k in obs_keys}
        for key in video_keys:
            row = video_rows.get(int(e))
            if row is None or f"videos/{key}/from_timestamp" not in row:
                raise DatasetFormatError(f"{root}: meta/episodes has no video location of {key!r} for episode {int(e)}")
            path = root / video_template.format(video_key=key, chunk_index=int(row[f"videos/{key}/chunk_index"]),
                                                file_index=int(row[f"videos/{key}/file_index"]))
            if key not in cache or cache[key][0] != path:
                cache[key] = (path, *_decode_video(path))
            _, frames, times = cache[key]
            want = float(row[f"videos/{key}/from_timestamp"]) + ts[sel]
            j = np.clip(np.searchsorted(times, want), 1, len(times) - 1)
            j = np.where(np.abs(times[j - 1] - want) <= np.abs(times[j] - want), j - 1, j) if len(times) > 1 else np.zeros_like(j)
            gap = np.abs(times[j] - want)
            if gap.max() > tolerance_s:
                bad = int(np.argmax(gap))
                raise DatasetFormatError(
                    f"{root}: episode {int(e)} frame {bad} of {key!r} wants t={want[bad]:.6f} s in {path.name}, the nearest "
                    f"decoded frame is {gap[bad]:.6f} s away (> tolerance_s={tolerance_s}); the video and the parquet timestamps "
                    "disagree (pass a larger tolerance_s only if the video's timestamps are known to be jittery)"
                )
            obs[key] = frames[j]
        episodes.append(LeRobotEpisode(
            observations=obs,
            action=np.ascontiguousarray(cols["action"][sel], dtype=np.float32),
            reward=reward[sel] if reward is not None else np.zeros(n, np.float32),
            done=done[sel] if done is not None else np.zeros(n, bool),
            task_index=task_idx[sel] if task_idx is not None else np.zeros(n, np.int64),
        ))
    extra = {"missing": [k for k, v in (("next.reward", reward), ("next.done", done)) if v is None]}
    return LeRobotInfo(fps=fps, features=features, tasks=tasks, robot_type=info.get("robot_type"),
                       codebase_version=version, extra=extra), episodes
