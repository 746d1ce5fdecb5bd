"""LeRobot datasets read through LeRobot's own library: ``dataset.id=lerobot:<repo_id or folder>``.

:func:`read_with_lerobot` opens the dataset with ``lerobot.datasets.lerobot_dataset.LeRobotDataset`` (the
``[lerobot]`` extra: ``pip install 'robotrl[lerobot]'``), from a local folder (``root=<folder>``) or from
LeRobot's local cache by ``repo_id`` (``$HF_LEROBOT_HOME/<repo_id>``; LeRobot fetches a missing one from the
Hugging Face hub where the machine reaches it). Every frame comes from LeRobot's ``__getitem__``, the same
path its training dataloader takes: states and actions as LeRobot returns them, cameras (``video`` features
decoded by LeRobot's video backend, ``image`` features from the parquet files) turned back from LeRobot's
float ``(C, H, W)`` in ``[0, 1]`` into uint8 ``(H, W, C)`` frames (exactly: LeRobot divides uint8 by 255).
Episode boundaries (``episode_index``), frame order (``frame_index``), fps and task strings are kept.

:func:`lerobot_dataset_path` keeps what it read as a Minari dataset (``lerobot/<name>-<digest>-v0`` in the
local Minari directory, made again when the source's files change) with the mapping of
:mod:`robotrl.data.lerobot` (``observation.state`` → ``state``, cameras by name, the final observation
repeating the last frame's), so ``dataset.id=lerobot:...`` loads exactly as ``robotrl convert --from lerobot``
followed by loading would, and every loader (``load_dataset``, ``robotrl train``) takes it as any dataset.

Versions: LeRobot >= 0.4 reads codebase v3.0 datasets; a v2.1 dataset must first be converted with LeRobot's
own ``python -m lerobot.datasets.v30.convert_dataset_v21_to_v30`` (the message says so). Decoding every
frame through ``__getitem__`` costs one video seek per frame and camera (LeRobot's own training cost).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from robotrl.data.lerobot.format import ConvertError, LeRobotEpisode, LeRobotInfo
from robotrl.errors import DatasetNotFoundError

PREFIX = "lerobot:"
_EXTRA = "pip install 'robotrl[lerobot]'"


def _dataset_class():
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError as exc:
        raise ConvertError(f"dataset.id=lerobot:... reads LeRobot datasets through LeRobot's own library, which is not "
                           f"installed ({exc}): {_EXTRA}; or convert the v3.0 folder without it: robotrl convert --from "
                           "lerobot <folder> --to minari <id>") from None
    return LeRobotDataset


def _frame_array(x) -> np.ndarray:
    return x.numpy() if hasattr(x, "numpy") else np.asarray(x)


def read_with_lerobot(ref: str | os.PathLike, *, tolerance_s: float = 1e-4,
                      video_backend: str | None = None) -> tuple[LeRobotInfo, list[LeRobotEpisode]]:
    """Read a LeRobot dataset with LeRobot's ``LeRobotDataset``.

    Args:
        ref: a dataset folder (holding ``meta/info.json``) or a ``repo_id`` of LeRobot's local cache.
        tolerance_s: LeRobot's timestamp tolerance (s) when matching video frames.
        video_backend: LeRobot's video decoder (``None``: its default, e.g. ``torchcodec`` or ``pyav``).

    Returns:
        ``(info, episodes)`` as :func:`robotrl.data.lerobot.read_lerobot` returns them: episodes in
        ``episode_index`` order, observations ``{feature: (N, ...)}`` with cameras uint8 ``(N, H, W, C)``.

    Raises:
        ConvertError: LeRobot is not installed, or the dataset's codebase version is older than LeRobot reads.
        DatasetNotFoundError: neither a folder nor a dataset LeRobot can open under that repo_id.
    """
    LeRobotDataset = _dataset_class()
    path = Path(ref).expanduser()
    if path.is_dir():
        repo_id, root = f"local/{path.name}", path
        info_path = path / "meta" / "info.json"
        version = json.loads(info_path.read_text()).get("codebase_version", "") if info_path.is_file() else ""
        if version and not str(version).startswith("v3"):
            raise ConvertError(f"{path} is a LeRobotDataset {version}; the installed LeRobot reads v3.0: convert it with "
                               f"LeRobot first (python -m lerobot.datasets.v30.convert_dataset_v21_to_v30 --repo-id=<id> "
                               f"--root={path.parent})")
    else:
        repo_id, root = str(ref), None
    kwargs: dict = {"root": root, "tolerance_s": tolerance_s}
    if video_backend:
        kwargs["video_backend"] = video_backend
    try:
        ds = LeRobotDataset(repo_id, **kwargs)
    except (FileNotFoundError, OSError, ValueError) as exc:
        where = f"folder {path}" if root is not None else f"repo_id {ref!r} (LeRobot's cache: $HF_LEROBOT_HOME)"
        raise DatasetNotFoundError(f"LeRobot cannot open the dataset at {where}: {type(exc).__name__}: "
                                   f"{str(exc).splitlines()[0] if str(exc) else ''}") from None
    features = {k: dict(v) for k, v in ds.meta.features.items()}
    cams = list(ds.meta.camera_keys)
    lows = [k for k, f in features.items() if k.startswith("observation.") and k not in cams
            and f.get("dtype") not in ("string",)]
    keys = [*lows, *cams]
    rows: dict[str, list] = {k: [] for k in [*keys, "action", "next.reward", "next.done", "episode_index",
                                             "frame_index", "task_index"]}
    for i in range(len(ds)):
        item = ds[i]
        for k in rows:
            if k in item:
                rows[k].append(_frame_array(item[k]))
    ep_idx = np.asarray(rows["episode_index"]).reshape(-1).astype(np.int64)
    frame_idx = np.asarray(rows["frame_index"]).reshape(-1).astype(np.int64)
    n = ep_idx.shape[0]

    def column(k: str) -> np.ndarray:
        shape = tuple(int(d) for d in features[k].get("shape", (1,)))
        if k in cams:  # LeRobot: float (C, H, W) in [0, 1] -> uint8 (H, W, C)
            x = np.stack(rows[k]).astype(np.float32)
            return np.clip(np.rint(x * 255.0), 0, 255).astype(np.uint8).transpose(0, 2, 3, 1)
        return np.stack(rows[k]).reshape(n, *shape)

    cols = {k: column(k) for k in [*keys, "action"]}
    reward = np.asarray(rows["next.reward"], np.float32).reshape(n) if rows["next.reward"] else np.zeros(n, np.float32)
    done = np.asarray(rows["next.done"], bool).reshape(n) if rows["next.done"] else np.zeros(n, bool)
    task = np.asarray(rows["task_index"], np.int64).reshape(n) if rows["task_index"] else np.zeros(n, np.int64)
    episodes = []
    for e in np.unique(ep_idx):
        sel = np.flatnonzero(ep_idx == e)
        sel = sel[np.argsort(frame_idx[sel], kind="stable")]
        episodes.append(LeRobotEpisode(observations={k: np.ascontiguousarray(cols[k][sel]) for k in keys},
                                       action=np.ascontiguousarray(cols["action"][sel], np.float32),
                                       reward=reward[sel], done=done[sel], task_index=task[sel]))
    tasks_df = ds.meta.tasks
    tasks = [str(t) for t, _ in sorted(zip(tasks_df.index, tasks_df["task_index"]), key=lambda p: int(p[1]))] \
        if tasks_df is not None else []
    extra = {"missing": [k for k in ("next.reward", "next.done") if not rows[k]], "reader": "lerobot",
             "lerobot_version": _lerobot_version()}
    return LeRobotInfo(fps=float(ds.meta.fps), features=features, tasks=tasks, robot_type=ds.meta.robot_type,
                       codebase_version=str(ds.meta.info.get("codebase_version", "")), extra=extra), episodes


def _lerobot_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lerobot")
    except PackageNotFoundError:
        return "unknown"


def _source_folder(ref: str) -> Path | None:
    """The folder LeRobot reads for ``ref``: the folder itself, or ``$HF_LEROBOT_HOME/<repo_id>`` (None: absent)."""
    path = Path(ref).expanduser()
    if path.is_dir():
        return path.resolve()
    try:
        from lerobot.utils.constants import HF_LEROBOT_HOME
    except ImportError:
        return None
    cached = Path(HF_LEROBOT_HOME) / ref
    return cached.resolve() if cached.is_dir() else None


def _fingerprint(ref: str) -> str:
    """A digest of ``ref`` and its files' sizes and modification times: a changed dataset is converted again."""
    import hashlib

    h = hashlib.sha1(ref.encode())
    folder = _source_folder(ref)
    if folder is not None:
        h.update(str(folder).encode())
        for f in sorted(p for p in folder.rglob("*") if p.is_file() and ".cache" not in p.parts):
            st = f.stat()
            h.update(f"{f.relative_to(folder)}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:12]


def lerobot_dataset_path(ref: str) -> Path:
    """The Minari ``data/`` folder of ``dataset.id=lerobot:<ref>``: read with :func:`read_with_lerobot` on first
    use and kept as a Minari dataset ``lerobot/<name>-<digest>-v0`` under the local Minari directory (converted
    again when the dataset's files change), so ``robotrl train`` and every loader read it as any other dataset.

    Raises:
        ConvertError, DatasetNotFoundError: as :func:`read_with_lerobot`.
    """
    import re

    from robotrl.data.lerobot.convert import episodes_to_minari
    from robotrl.data.writer import datasets_root

    _dataset_class()  # the extra is needed even for a converted copy: say so before anything else
    name = re.sub(r"[^A-Za-z0-9_]+", "_", Path(ref).name or "dataset").strip("_").lower() or "dataset"
    dataset_id = f"lerobot/{name}-{_fingerprint(ref)}-v0"
    out = datasets_root() / dataset_id / "data"
    if (out / "metadata.json").is_file():
        return out
    info, eps = read_with_lerobot(ref)
    folder = episodes_to_minari(info, eps, dataset_id, source=f"{PREFIX}{ref}")
    return folder / "data" if (folder / "data" / "metadata.json").is_file() else folder
