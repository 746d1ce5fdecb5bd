"""Writing a LeRobotDataset v3.0 folder atomically: parquet files, encoded videos, stats (:func:`write_lerobot`)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from robotrl.data.writer import commit_dir
from robotrl.errors import DatasetExistsError
from robotrl.data.lerobot.format import (CODEBASE_VERSION, CODECS, DATA_PATH, EPISODES_PATH, QUANTILES, VIDEO_PATH,
                                        _CODEC_NAME, ConvertError, LeRobotEpisode, LeRobotInfo, _need_av)


def _encode_video(path: Path, frames: np.ndarray, fps: float, codec: str, crf: int) -> dict[str, Any]:
    """Encode uint8 ``(F, H, W, 3)`` RGB frames at ``fps`` into ``path`` (mp4); returns LeRobot's video info."""
    av = _need_av()
    from fractions import Fraction

    if codec not in CODECS:
        raise ConvertError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)}")
    enc, pix_fmt, opts = CODECS[codec]
    F, H, W, C = frames.shape
    if pix_fmt == "yuv420p" and (H % 2 or W % 2):
        raise ConvertError(f"codec {codec!r} (yuv420p) needs even image sizes, got {H}x{W}; use codec='lossless'")
    opts = dict(opts, **({"crf": str(crf)} if codec != "lossless" else {}))
    rate = Fraction(fps).limit_denominator(1001)
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(enc, rate=rate)
        stream.width, stream.height, stream.pix_fmt = W, H, pix_fmt
        stream.options = opts
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return {"video.height": H, "video.width": W, "video.codec": _CODEC_NAME[enc], "video.pix_fmt": pix_fmt,
            "video.is_depth_map": False, "video.fps": fps, "video.channels": C, "has_audio": False}


def _column(values: np.ndarray):
    """A frame column: a scalar column for one value per frame (LeRobot's layout of shape ``[1]`` features), else
    a fixed-size list of the flattened values."""
    import pyarrow as pa

    v = np.ascontiguousarray(values)
    width = int(np.prod(v.shape[1:]))
    if width == 1:
        return pa.array(v.reshape(-1))
    return pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), width)


def _stats(x: np.ndarray, image: bool) -> dict[str, list]:
    """LeRobot's stats of one feature's frames ``x (N, ...)``: ``min``/``max``/``mean``/``std``, the quantiles
    ``q01``..``q99`` (:data:`QUANTILES`) and ``count``; images per channel in ``[0, 1]``, each ``(C, 1, 1)``."""
    if image:  # LeRobot: per channel, in [0, 1], shape (C, 1, 1)
        x = x.reshape(-1, x.shape[-1]).astype(np.float64) / 255.0
    else:
        x = x.reshape(x.shape[0], -1).astype(np.float64)
    agg = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
    agg.update({f"q{round(q * 100):02d}": np.quantile(x, q, axis=0) for q in QUANTILES})
    shape = (-1, 1, 1) if image else (-1,)
    return {**{k: v.reshape(shape).tolist() for k, v in agg.items()}, "count": [int(x.shape[0])]}


def _tasks_table(tasks: list[str]):
    """``meta/tasks.parquet``: a pandas-readable table indexed by the task string, column ``task_index``."""
    import pyarrow as pa

    table = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "task": pa.array(tasks, pa.string())})
    pandas_meta = {
        "index_columns": ["task"], "column_indexes": [],
        "columns": [
            {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64", "metadata": None},
            {"name": "task", "field_name": "task", "pandas_type": "unicode", "numpy_type": "object", "metadata": None},
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__}, "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _atomic_dir(final: Path, overwrite: bool):
    if final.exists() and not overwrite:
        raise DatasetExistsError(f"{final} already exists; choose another destination, pass overwrite (--overwrite), or delete it")
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))


def write_lerobot(
    dst: str | os.PathLike,
    episodes: list[LeRobotEpisode],
    info: LeRobotInfo,
    *,
    codec: str = "lossless",
    crf: int = 18,
    overwrite: bool = False,
) -> Path:
    """Write ``episodes`` as a LeRobotDataset v3.0 folder ``dst`` (one data file, one video file per camera).

    Camera features are the ``uint8 (N, H, W, 3)`` entries of ``episode.observations``
    whose ``info.features`` dtype is ``"video"`` (or, if absent there, any 4-D uint8 entry).
    ``codec``: ``"lossless"`` (libx265 gbrp, x265 lossless mode, bit-exact; declared ``hevc``/``gbrp``), ``"h264"`` (libx264 yuv420p, ``crf``)
    or ``"av1"`` (libsvtav1 yuv420p, ``crf``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not episodes:
        raise ConvertError("no episodes to write")
    final = Path(dst).expanduser()
    first = episodes[0]
    cams = [k for k, v in first.observations.items()
            if info.features.get(k, {}).get("dtype") == "video" or (k not in info.features and v.dtype == np.uint8 and v.ndim == 4)]
    for k in cams:
        if first.observations[k].shape[-1] != 3:
            raise ConvertError(f"camera {k!r} has {first.observations[k].shape[-1]} channels; only RGB (H, W, 3) frames can be written")
    lows = [k for k in first.observations if k not in cams]
    fps = float(info.fps)
    tmp = _atomic_dir(final, overwrite)
    try:
        lengths = np.array([len(ep) for ep in episodes])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        total = int(lengths.sum())
        cat = {k: np.concatenate([ep.observations[k] for ep in episodes]) for k in first.observations}
        action = np.concatenate([ep.action for ep in episodes]).astype(np.float32)
        reward = np.concatenate([ep.reward for ep in episodes]).astype(np.float32)
        done = np.concatenate([ep.done for ep in episodes]).astype(bool)
        task_index = np.concatenate([ep.task_index for ep in episodes]).astype(np.int64)
        frame_index = np.concatenate([np.arange(n) for n in lengths]).astype(np.int64)
        episode_index = np.repeat(np.arange(len(episodes)), lengths).astype(np.int64)
        tasks = list(info.tasks) or ["robotrl"]
        if task_index.max(initial=0) >= len(tasks):
            raise ConvertError(f"task_index {int(task_index.max())} has no task string (only {len(tasks)} tasks given)")

        features: dict[str, dict] = {}
        columns: dict[str, Any] = {}
        for k in lows:
            v = cat[k].astype(np.float32) if cat[k].dtype.kind == "f" else cat[k]
            names = info.features.get(k, {}).get("names")
            features[k] = {"dtype": str(v.dtype), "shape": list(v.shape[1:]) or [1], "names": names}
            columns[k] = _column(v)
        features["action"] = {"dtype": "float32", "shape": list(action.shape[1:]),
                              "names": info.features.get("action", {}).get("names")}
        columns["action"] = _column(action)
        features["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
        features["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
        columns["next.reward"] = pa.array(reward)
        columns["next.done"] = pa.array(done)
        columns["timestamp"] = pa.array((frame_index / fps).astype(np.float32))
        columns["frame_index"] = pa.array(frame_index)
        columns["episode_index"] = pa.array(episode_index)
        columns["index"] = pa.array(np.arange(total, dtype=np.int64))
        columns["task_index"] = pa.array(task_index)
        for k, dt in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"), ("index", "int64"),
                      ("task_index", "int64")):
            features[k] = {"dtype": dt, "shape": [1], "names": None}
        (tmp / "data" / "chunk-000").mkdir(parents=True)
        pq.write_table(pa.table(columns), tmp / DATA_PATH.format(chunk_index=0, file_index=0))

        ep_cols: dict[str, Any] = {
            "episode_index": pa.array(np.arange(len(episodes), dtype=np.int64)),
            "tasks": pa.array([sorted({tasks[i] for i in np.unique(ep.task_index)}) for ep in episodes], pa.list_(pa.string())),
            "length": pa.array(lengths.astype(np.int64)),
            "data/chunk_index": pa.array(np.zeros(len(episodes), np.int64)),
            "data/file_index": pa.array(np.zeros(len(episodes), np.int64)),
            "dataset_from_index": pa.array(starts.astype(np.int64)),
            "dataset_to_index": pa.array((starts + lengths).astype(np.int64)),
        }
        for k in cams:
            vinfo = _encode_video(tmp / VIDEO_PATH.format(video_key=k, chunk_index=0, file_index=0), cat[k], fps, codec, crf)
            H, W, C = cat[k].shape[1:]
            features[k] = {"dtype": "video", "shape": [H, W, C], "names": ["height", "width", "channels"], "info": vinfo}
            ep_cols[f"videos/{k}/chunk_index"] = pa.array(np.zeros(len(episodes), np.int64))
            ep_cols[f"videos/{k}/file_index"] = pa.array(np.zeros(len(episodes), np.int64))
            ep_cols[f"videos/{k}/from_timestamp"] = pa.array(starts / fps)
            ep_cols[f"videos/{k}/to_timestamp"] = pa.array((starts + lengths) / fps)
        per_frame = {**{k: cat[k] for k in first.observations}, "action": action, "next.reward": reward[:, None],
                     "next.done": done[:, None], "timestamp": (frame_index / fps)[:, None], "frame_index": frame_index[:, None],
                     "episode_index": episode_index[:, None], "index": np.arange(total)[:, None],
                     "task_index": task_index[:, None]}
        for k, x in per_frame.items():  # each episode's own stats, as LeRobot keeps them (stats/<feature>/<stat>)
            ep_stats = [_stats(x[s0:s0 + n], k in cams) for s0, n in zip(starts, lengths)]
            for stat in ep_stats[0]:
                ep_cols[f"stats/{k}/{stat}"] = pa.array([e[stat] for e in ep_stats])
        ep_cols["meta/episodes/chunk_index"] = pa.array(np.zeros(len(episodes), np.int64))
        ep_cols["meta/episodes/file_index"] = pa.array(np.zeros(len(episodes), np.int64))
        (tmp / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
        pq.write_table(pa.table(ep_cols), tmp / EPISODES_PATH.format(chunk_index=0, file_index=0))
        pq.write_table(_tasks_table(tasks), tmp / "meta" / "tasks.parquet")

        stats = {k: _stats(x, k in cams) for k, x in per_frame.items()}
        (tmp / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
        meta = {
            "codebase_version": CODEBASE_VERSION, "robot_type": info.robot_type,
            "total_episodes": len(episodes), "total_frames": total, "total_tasks": len(tasks),
            "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
            "fps": int(fps) if float(fps).is_integer() else fps, "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if cams else None, "features": features,
        }
        (tmp / "meta" / "info.json").write_text(json.dumps(meta, indent=4))
        commit_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
