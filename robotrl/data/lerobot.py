"""LeRobotDataset (v3.0) ↔ Minari conversion, without the ``lerobot`` package.

``robotrl convert --from lerobot SRC --to minari DST`` and the reverse call
:func:`lerobot_to_minari` and :func:`minari_to_lerobot`. Needs PyAV (``av``) for the videos
and pyarrow for the parquet files: ``pip install robotrl[video]``.

LeRobotDataset v3.0 layout (as written by lerobot >= 0.4)::

    meta/info.json                                  codebase_version "v3.0", fps, features, path templates
    meta/stats.json                                 per-feature min/max/mean/std/count
    meta/tasks.parquet                              task string -> task_index
    meta/episodes/chunk-000/file-000.parquet        one row per episode: length, tasks, data and video locations
    data/chunk-000/file-000.parquet                 one row per frame (many episodes per file)
    videos/<camera key>/chunk-000/file-000.mp4      frames of many episodes back to back

A frame row holds ``observation.state`` float32 ``(Ds,)``, ``action`` float32 ``(Da,)``,
``next.reward`` float32, ``next.done`` bool, ``timestamp`` float32 (s from the episode's
start), ``frame_index``, ``episode_index``, ``index``, ``task_index`` int64. A camera
``observation.images.<cam>`` (feature dtype ``"video"``) is the frame of
``videos/<key>/chunk-C/file-F.mp4`` at time ``from_timestamp + timestamp``, where
``from_timestamp`` and the file's chunk/file index come from the episode's row in
``meta/episodes``.

Mapping to a Minari episode of ``T = N`` steps (``N`` frames):

- observations: ``Dict`` ``{"state": float32 (N+1, Ds), "<cam>": uint8 (N+1, H, W, 3), ...}``;
  ``observation.state`` -> ``"state"``, ``observation.images.<cam>`` -> ``"<cam>"``, any other
  ``observation.<name>`` -> ``"<name>"``. LeRobot stores no observation after the last
  action, so the final Minari observation repeats the last frame's (LeRobot's own replay
  buffer does the same); the Minari metadata records this.
- actions ``action``; rewards ``next.reward`` (zeros if absent); terminations ``next.done``
  (false if absent); truncations: true on the last step unless it terminated.
- infos ``{"task_index": int64 (N+1,)}``; the task strings, fps, robot type and feature
  names are kept in the dataset's ``robotrl_provenance`` metadata so that converting back
  restores them.

Minari -> LeRobot is the reverse: ``N = T`` frames from observations ``0..T-1`` (the final
observation has no place in a LeRobotDataset and is dropped), ``next.done`` =
terminations. Cameras are the ``uint8 (H, W, 3)`` entries of a ``Dict`` observation; a
``Box`` observation becomes ``observation.state``. Video codecs (``codec=``):

- ``"lossless"`` (default): H.264 in RGB (``libx264rgb``, ``qp=0``, pixel format ``rgb24``):
  frames decode bit-exactly; files are larger; any ffmpeg-based reader (PyAV, torchcodec)
  decodes them.
- ``"h264"``: H.264 ``libx264``/``yuv420p`` with ``crf`` (default 18): small, lossy
  (chroma subsampled), the most widely playable; H and W must be even.
- ``"av1"``: AV1 ``libsvtav1``/``yuv420p``, keyframe every 2 frames, with ``crf``: what
  lerobot itself writes (it uses crf 30); lossy; H and W must be even.

Reading decodes whatever the file holds (AV1, H.264, HEVC, ... through PyAV's FFmpeg).

Everything is written atomically: into a hidden sibling folder, moved into place with one
``os.replace`` when complete.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.errors import DatasetExistsError, DatasetFormatError, DatasetNotFoundError, RobotRLError

__all__ = ["LeRobotEpisode", "read_lerobot", "write_lerobot", "lerobot_to_minari", "minari_to_lerobot", "CODECS"]

CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
#: codec name -> (PyAV encoder, pixel format, encoder options); ``crf`` is filled in for the lossy ones.
CODECS: dict[str, tuple[str, str, dict[str, str]]] = {
    "lossless": ("libx264rgb", "rgb24", {"qp": "0", "preset": "veryfast"}),
    "h264": ("libx264", "yuv420p", {"preset": "veryfast"}),
    "av1": ("libsvtav1", "yuv420p", {"g": "2", "preset": "8"}),  # LeRobot's own default (keyframe every 2 frames)
}
_CODEC_NAME = {"libx264rgb": "h264", "libx264": "h264", "libsvtav1": "av1"}
_PROV_KEY = "lerobot"


class ConvertError(RobotRLError, ValueError):
    """A dataset that cannot be converted (wrong layout, unsupported version or feature)."""


def _need_av():
    try:
        import av
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConvertError("converting videos needs PyAV: pip install 'robotrl[video]' (or pip install av)") from exc
    return av


@dataclass
class LeRobotEpisode:
    """One LeRobotDataset episode of ``N`` frames.

    Attributes:
        observations: ``{feature name: array (N, ...)}``, e.g. ``"observation.state"``
            float32 ``(N, Ds)`` and ``"observation.images.front"`` uint8 ``(N, H, W, 3)``.
        action: float32 ``(N, Da)``.
        reward: float32 ``(N,)`` (``next.reward``).
        done: bool ``(N,)`` (``next.done``).
        task_index: int64 ``(N,)``.
    """

    observations: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    task_index: np.ndarray

    def __len__(self) -> int:
        return int(self.action.shape[0])


@dataclass
class LeRobotInfo:
    """What a LeRobotDataset says about itself besides its frames."""

    fps: float
    features: dict[str, dict]
    tasks: list[str]
    robot_type: str | None = None
    codebase_version: str = CODEBASE_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


# ------------------------------------------------------------------ reading LeRobot


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
            "supported. Re-encode them as videos with lerobot (convert_dataset_to_videos) first"
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


# ------------------------------------------------------------------ writing LeRobot


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


def _fixed_list(values: np.ndarray):
    import pyarrow as pa

    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    return pa.FixedSizeListArray.from_arrays(flat, int(np.prod(values.shape[1:])))


def _stats(x: np.ndarray, image: bool) -> dict[str, list | int]:
    if image:  # LeRobot: per channel, in [0, 1], shape (C, 1, 1)
        x = x.reshape(-1, x.shape[-1]).astype(np.float64) / 255.0
        agg = {"min": x.min(0), "max": x.max(0), "mean": x.mean(0), "std": x.std(0)}
        return {**{k: v.reshape(-1, 1, 1).tolist() for k, v in agg.items()}, "count": [int(x.shape[0])]}
    x = x.reshape(x.shape[0], -1).astype(np.float64)
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(), "std": x.std(0).tolist(),
            "count": [int(x.shape[0])]}


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


def _commit_dir(tmp: Path, final: Path) -> None:
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


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
    ``codec``: ``"lossless"`` (libx264rgb, qp 0, bit-exact), ``"h264"`` (libx264 yuv420p, ``crf``)
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
            columns[k] = _fixed_list(v) if v.ndim > 1 else pa.array(v)
        features["action"] = {"dtype": "float32", "shape": list(action.shape[1:]),
                              "names": info.features.get("action", {}).get("names")}
        columns["action"] = _fixed_list(action)
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
        ep_cols["meta/episodes/chunk_index"] = pa.array(np.zeros(len(episodes), np.int64))
        ep_cols["meta/episodes/file_index"] = pa.array(np.zeros(len(episodes), np.int64))
        (tmp / "meta" / "episodes" / "chunk-000").mkdir(parents=True)
        pq.write_table(pa.table(ep_cols), tmp / EPISODES_PATH.format(chunk_index=0, file_index=0))
        pq.write_table(_tasks_table(tasks), tmp / "meta" / "tasks.parquet")

        stats = {k: _stats(cat[k], k in cams) for k in first.observations}
        stats.update({"action": _stats(action, False), "next.reward": _stats(reward[:, None], False),
                      "next.done": _stats(done[:, None], False)})
        (tmp / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
        meta = {
            "codebase_version": CODEBASE_VERSION, "robot_type": info.robot_type,
            "total_episodes": len(episodes), "total_frames": total, "total_tasks": len(tasks),
            "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
            "fps": int(fps) if float(fps).is_integer() else fps, "splits": {"train": f"0:{len(episodes)}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH if cams else None, "features": features,
        }
        (tmp / "meta" / "info.json").write_text(json.dumps(meta, indent=4))
        _commit_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


# ------------------------------------------------------------------ Minari side


def _minari_key(feature: str) -> str:
    if feature == "observation.state":
        return "state"
    if feature.startswith("observation.images."):
        return feature[len("observation.images."):]
    return feature[len("observation."):] if feature.startswith("observation.") else feature


def lerobot_to_minari(
    src: str | os.PathLike,
    dataset_id: str,
    *,
    root: str | os.PathLike | None = None,
    data_format: str = "hdf5",
    overwrite: bool = False,
    tolerance_s: float = 1e-4,
) -> Path:
    """Convert the LeRobotDataset v3.0 at ``src`` into Minari dataset ``dataset_id``.

    Observations become ``Dict`` ``{"state": float32 (Ds,), "<cam>": uint8 (H, W, 3), ...}``
    (see the module docstring for the full mapping). Returns the Minari dataset folder.
    """
    from robotrl.data.writer import Episode, write_dataset

    info, eps = read_lerobot(src, tolerance_s=tolerance_s)
    if not eps:
        raise DatasetFormatError(f"{src} holds no frames")
    keymap = {f: _minari_key(f) for f in eps[0].observations}
    if len(set(keymap.values())) != len(keymap):
        raise ConvertError(f"{src}: observation features {sorted(keymap)} collide after renaming to Minari keys {sorted(keymap.values())}")
    obs_spaces = {}
    for f, k in keymap.items():
        v = eps[0].observations[f]
        if info.features[f].get("dtype") == "video":
            obs_spaces[k] = gym.spaces.Box(0, 255, v.shape[1:], np.uint8)
        else:
            obs_spaces[k] = gym.spaces.Box(-np.inf, np.inf, v.shape[1:], v.dtype if v.dtype.kind == "f" else np.float32)
    observation_space = gym.spaces.Dict(obs_spaces)
    action_space = gym.spaces.Box(-np.inf, np.inf, eps[0].action.shape[1:], np.float32)
    minari_eps = []
    for ep in eps:
        n = len(ep)
        obs = {keymap[f]: np.concatenate([v, v[-1:]]) for f, v in ep.observations.items()}
        trunc = np.zeros(n, bool)
        trunc[-1] = not bool(ep.done[-1])
        minari_eps.append(Episode(observations=obs, actions=ep.action, rewards=ep.reward, terminations=ep.done.copy(),
                                  truncations=trunc, infos={"task_index": np.concatenate([ep.task_index, ep.task_index[-1:]])}))
    prov = {_PROV_KEY: {"fps": info.fps, "robot_type": info.robot_type, "tasks": info.tasks, "source": str(src),
                        "codebase_version": info.codebase_version, "keys": keymap,
                        "names": {f: info.features.get(f, {}).get("names") for f in [*keymap, "action"]},
                        "final_observation": "repeats the last frame's (LeRobot stores none)", "missing": info.extra.get("missing", [])}}
    return write_dataset(dataset_id, minari_eps, observation_space=observation_space, action_space=action_space,
                         provenance=prov, data_format=data_format, root=root, overwrite=overwrite,
                         description=f"converted from the LeRobotDataset at {src}")


def _flatten_obs(obs, prefix: str = "") -> dict[str, np.ndarray]:
    if isinstance(obs, dict):
        out: dict[str, np.ndarray] = {}
        for k, v in obs.items():
            out.update(_flatten_obs(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1] or "state": np.asarray(obs)}


def minari_to_lerobot(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    fps: float | None = None,
    codec: str = "lossless",
    crf: int = 18,
    task: str | None = None,
    robot_type: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write the Minari dataset ``src`` (id or path) as a LeRobotDataset v3.0 folder ``dst``.

    Args:
        fps: frame rate; default the one recorded when the data came from a LeRobotDataset.
        codec: ``"lossless"`` (libx264rgb qp 0: bit-exact frames), ``"h264"`` (libx264
            yuv420p, ``crf``) or ``"av1"`` (libsvtav1 yuv420p, ``crf``): see the module docstring.
        task: task string of every frame when the dataset records none (default: its id).

    Raises:
        ConvertError: no ``fps`` known, or observations that cannot be mapped.
    """
    from minari.dataset.minari_storage import MinariStorage

    from robotrl.data.dataset import resolve_dataset_path

    path = resolve_dataset_path(src)
    try:
        storage = MinariStorage.read(path)
        meta = storage.metadata
        raw = storage.get_episodes(range(storage.total_episodes))
    except Exception as exc:
        raise DatasetFormatError(f"Minari dataset at {path} cannot be read ({type(exc).__name__}: {exc})") from exc
    prov = json.loads(meta.get("robotrl_provenance") or "{}").get(_PROV_KEY, {})
    fps = fps or prov.get("fps")
    if not fps:
        raise ConvertError(f"the frame rate of {src} is unknown (it did not come from a LeRobotDataset): pass fps (--fps)")
    back = {k: f for f, k in (prov.get("keys") or {}).items()}
    names = prov.get("names") or {}
    tasks = list(prov.get("tasks") or [task or str(meta.get("dataset_id", src))])
    episodes = []
    for ep in raw:
        flat = _flatten_obs(ep["observations"])
        obs = {}
        for k, v in flat.items():
            is_cam = v.dtype == np.uint8 and v.ndim == 4
            name = back.get(k) or (f"observation.images.{k}" if is_cam else ("observation.state" if k == "state" else f"observation.{k}"))
            obs[name] = v[:-1]
        T = len(ep["rewards"])
        ti = (ep.get("infos") or {}).get("task_index")
        ti = np.asarray(ti).reshape(-1)[:T].astype(np.int64) if ti is not None and prov.get("tasks") else np.zeros(T, np.int64)
        episodes.append(LeRobotEpisode(observations=obs, action=np.asarray(ep["actions"], np.float32).reshape(T, -1),
                                       reward=np.asarray(ep["rewards"], np.float32), done=np.asarray(ep["terminations"], bool),
                                       task_index=ti))
    features = {f: {"dtype": "video" if (v.dtype == np.uint8 and v.ndim == 4) else str(v.dtype), "names": names.get(f)}
                for f, v in episodes[0].observations.items()}
    features["action"] = {"names": names.get("action")}
    info = LeRobotInfo(fps=float(fps), features=features, tasks=tasks, robot_type=robot_type or prov.get("robot_type"))
    return write_lerobot(dst, episodes, info, codec=codec, crf=crf, overwrite=overwrite)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 arrays of one shape (``inf`` when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)
