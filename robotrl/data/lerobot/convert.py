"""LeRobotDataset v3.0 <-> Minari: :func:`lerobot_to_minari` and :func:`minari_to_lerobot`."""

from __future__ import annotations

import json
import os
from pathlib import Path

import gymnasium as gym
import numpy as np

from robotrl.errors import DatasetFormatError
from robotrl.data.lerobot.format import _PROV_KEY, ConvertError, LeRobotEpisode, LeRobotInfo
from robotrl.data.lerobot.read import read_lerobot
from robotrl.data.lerobot.write import write_lerobot


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
    info, eps = read_lerobot(src, tolerance_s=tolerance_s)
    return episodes_to_minari(info, eps, dataset_id, source=str(src), root=root, data_format=data_format,
                              overwrite=overwrite)


def episodes_to_minari(info: LeRobotInfo, eps: list[LeRobotEpisode], dataset_id: str, *, source: str,
                       root: str | os.PathLike | None = None, data_format: str = "hdf5", overwrite: bool = False) -> Path:
    """Write LeRobot episodes (read by :func:`read_lerobot` or through LeRobot's own library,
    :func:`robotrl.data.lerobot.library.read_with_lerobot`) as Minari dataset ``dataset_id``; ``source`` is
    recorded in its provenance with the fps, tasks and feature names. Returns the Minari dataset folder.

    Raises:
        DatasetFormatError: no frames.
        ConvertError: observation features whose Minari keys collide, or an image feature that is not uint8 RGB.
    """
    from robotrl.data.writer import Episode, write_dataset

    src = source
    if not eps:
        raise DatasetFormatError(f"{src} holds no frames")
    keymap = {f: _minari_key(f) for f in eps[0].observations}
    if len(set(keymap.values())) != len(keymap):
        raise ConvertError(f"{src}: observation features {sorted(keymap)} collide after renaming to Minari keys {sorted(keymap.values())}")
    obs_spaces = {}
    for f, k in keymap.items():
        v = eps[0].observations[f]
        if info.features[f].get("dtype") in ("video", "image"):
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
        codec: ``"lossless"`` (libx265 gbrp lossless: bit-exact frames), ``"h264"`` (libx264
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
