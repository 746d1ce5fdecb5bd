"""Writing episodes as a Minari dataset, atomically.

Online rollouts, robot recordings and the generated datasets of ``robotrl collect`` are
all written through :func:`write_dataset`. The result is a standard Minari dataset
(``minari.load_dataset(dataset_id)`` opens it) with the env spec, ``ref_min_score`` /
``ref_max_score`` and robotrl provenance in its metadata.

Atomicity: the dataset is built in a hidden sibling directory
(``<root>/<dataset_id>.tmp-<random>``) and moved to ``<root>/<dataset_id>`` with one
``os.replace`` after every file is closed. A killed or failed write leaves no dataset
under the final name (at worst a ``.tmp-*`` folder that the next write removes).

Layout of one episode (Minari's, see ``algorithms.md``): ``observations`` has ``T+1``
entries, ``actions``, ``rewards``, ``terminations``, ``truncations`` have ``T``.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.data.spaces import FlatLayout
from robotrl.errors import DatasetExistsError, DatasetFormatError

__all__ = ["Episode", "write_dataset", "datasets_root", "dataset_dir"]


@dataclass
class Episode:
    """One episode in raw environment units.

    Attributes:
        observations: ``(T+1, *obs_shape)`` array, or a (nested) dict of such arrays
            for ``Dict`` observation spaces.
        actions: ``(T, Da)`` in the env's action units.
        rewards: ``(T,)``.
        terminations: ``(T,)`` bool, true where the MDP terminated (no bootstrap).
        truncations: ``(T,)`` bool, true where the episode was cut (time limit, reset).
        infos: optional dict of per-step arrays with ``T+1`` entries (reset info first),
            e.g. ``{"success": (T+1,) bool}`` or robot timing/intervention flags.
        seed: the reset seed, if any.
    """

    observations: Any
    actions: np.ndarray
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    infos: dict | None = None
    seed: int | None = None
    options: dict | None = field(default=None)

    def __len__(self) -> int:
        return int(np.asarray(self.rewards).shape[0])


def datasets_root() -> Path:
    """Minari's local dataset directory (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``)."""
    env = os.environ.get("MINARI_DATASETS_PATH")
    return Path(env) if env else Path.home() / ".minari" / "datasets"


def dataset_dir(dataset_id: str, root: str | os.PathLike | None = None) -> Path:
    """Directory ``<root>/<dataset_id>`` that holds ``data/metadata.json`` and the data file."""
    return Path(root) if root is not None and Path(root).name == dataset_id else (Path(root) if root else datasets_root()) / dataset_id


def _check_episode(i: int, ep: Episode) -> None:
    T = len(ep)
    if T == 0:
        raise DatasetFormatError(f"episode {i} is empty (0 steps); drop it before writing")

    def first_len(x):
        if isinstance(x, Mapping):
            return first_len(next(iter(x.values())))
        return np.asarray(x).shape[0]

    if first_len(ep.observations) != T + 1:
        raise DatasetFormatError(
            f"episode {i}: observations must have T+1={T + 1} entries (the final observation included), got {first_len(ep.observations)}"
        )
    for name in ("actions", "terminations", "truncations"):
        n = np.asarray(getattr(ep, name)).shape[0]
        if n != T:
            raise DatasetFormatError(f"episode {i}: {name} has {n} entries, rewards has {T}; they must match")

    def finite(x, name):
        if isinstance(x, Mapping):
            for k, v in x.items():
                finite(v, f"{name}/{k}")
            return
        arr = np.asarray(x)
        if arr.dtype.kind == "f" and not np.isfinite(arr).all():
            raise DatasetFormatError(f"episode {i}: {name} holds NaN or inf values; clean the episode before writing")

    finite(ep.observations, "observations")
    finite(ep.actions, "actions")
    finite(ep.rewards, "rewards")


def _cast(x, space: gym.Space | None):
    """Arrays in the dtype of ``space`` (the arrow backend requires exact dtypes)."""
    if isinstance(x, Mapping):
        subs = space.spaces if isinstance(space, gym.spaces.Dict) else {}
        return {k: _cast(v, subs.get(k)) for k, v in x.items()}
    dtype = getattr(space, "dtype", None)
    return np.asarray(x, dtype=dtype) if dtype is not None else np.asarray(x)


def _infos_2d(x):
    """Per-step scalars as ``(T+1, 1)``: Minari 0.5.4's arrow reader cannot decode ``(T+1,)`` infos."""
    if isinstance(x, Mapping):
        return {k: _infos_2d(v) for k, v in x.items()}
    x = np.asarray(x)
    return x[:, None] if x.ndim == 1 else x


def _to_buffer(i: int, ep: Episode, observation_space: gym.Space, action_space: gym.Space, data_format: str):
    from minari.data_collector import EpisodeBuffer

    infos = _cast(ep.infos, None) if ep.infos else {}
    if data_format == "arrow":
        infos = _infos_2d(infos)

    return EpisodeBuffer(
        id=i,
        seed=ep.seed,
        options=ep.options,
        observations=_cast(ep.observations, observation_space),
        actions=_cast(ep.actions, action_space),
        rewards=np.asarray(ep.rewards, dtype=np.float64),
        terminations=np.asarray(ep.terminations, dtype=bool),
        truncations=np.asarray(ep.truncations, dtype=bool),
        infos=infos,
    )


def _resolve_env_spec(env) -> gym.envs.registration.EnvSpec | None:
    if env is None:
        return None
    if isinstance(env, gym.envs.registration.EnvSpec):
        return env
    if isinstance(env, str):
        return gym.spec(env)
    if isinstance(env, gym.Env):
        return env.spec
    raise TypeError(f"env must be an id, EnvSpec or gym.Env, got {type(env).__name__}")


def commit_dir(tmp: Path, final: Path) -> None:
    """Move the finished folder ``tmp`` to ``final`` with ``os.replace``; an existing ``final`` (an overwrite) is
    kept aside until the new one is in place, then deleted. ``tmp`` and ``final`` share a parent (one filesystem)."""
    if final.exists():
        old = final.parent / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)


def write_dataset(
    dataset_id: str,
    episodes: Iterable[Episode],
    *,
    env: str | gym.envs.registration.EnvSpec | gym.Env | None = None,
    eval_env: str | gym.envs.registration.EnvSpec | None = None,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    algorithm_name: str = "robotrl",
    description: str = "",
    author: str = "robotrl",
    author_email: str = "robotrl@localhost",
    code_permalink: str = "https://github.com/robotrl/robotrl",
    provenance: Mapping[str, Any] | None = None,
    obs_layout: FlatLayout | None = None,
    data_format: str = "hdf5",
    root: str | os.PathLike | None = None,
    overwrite: bool = False,
) -> Path:
    """Write ``episodes`` as Minari dataset ``dataset_id`` under ``root``, atomically.

    Args:
        dataset_id: Minari id ``(namespace/)(env_name/)name-v<N>``.
        episodes: the episodes (raw env units, Minari layout, see :class:`Episode`).
        env: env id/spec/instance that produced the data (stored as ``env_spec``);
            if ``None``, both spaces must be given.
        eval_env: env for evaluation if it differs from ``env`` (Minari's ``eval_env_spec``).
        observation_space, action_space: default to the env's spaces.
        ref_min_score, ref_max_score: D4RL normalisation references (average return of a
            random and of an expert policy on ``eval_env``); both or neither.
        provenance: free-form facts (recipe, policy, noise, seeds, versions) stored as
            JSON under the metadata key ``robotrl_provenance``.
        obs_layout: for observations stored already flat (``Box(Do)``) that are the
            flattening of a ``Dict`` env space (robot recordings of a goal-conditioned
            twin): its :class:`~robotrl.data.spaces.FlatLayout`, stored as
            ``robotrl_obs_layout`` so the data is recognised as that env's.
        data_format: ``"hdf5"`` (fast to create) or ``"arrow"``.
        root: dataset directory root; default Minari's (``$MINARI_DATASETS_PATH``).
        overwrite: replace an existing dataset of that id (the old one is removed only
            after the new one is complete).

    Returns:
        The dataset directory ``<root>/<dataset_id>``.

    Raises:
        DatasetExistsError: the id is taken and ``overwrite`` is false.
        DatasetFormatError: an episode is empty, inconsistent or holds NaN/inf.
        ValueError: unknown ``data_format`` or only one reference score given.
    """
    from minari import __version__ as minari_version
    from minari.dataset.minari_storage import MinariStorage

    if data_format not in ("hdf5", "arrow"):
        raise ValueError(f"data_format must be 'hdf5' or 'arrow', got {data_format!r}")
    if (ref_min_score is None) != (ref_max_score is None):
        raise ValueError("give both ref_min_score and ref_max_score, or neither")
    final = (Path(root) if root is not None else datasets_root()) / dataset_id
    if final.exists() and not overwrite:
        raise DatasetExistsError(
            f"dataset {dataset_id!r} already exists at {final}; choose another id or version, "
            "pass overwrite=True, or delete the folder"
        )
    episodes = list(episodes)
    if not episodes:
        raise DatasetFormatError(f"no episodes to write for {dataset_id!r}")
    for i, ep in enumerate(episodes):
        _check_episode(i, ep)

    spec = _resolve_env_spec(env)
    if observation_space is None or action_space is None:
        if spec is None:
            raise ValueError("pass env=..., or both observation_space and action_space")
        probe = gym.make(spec) if not isinstance(env, gym.Env) else env
        observation_space = observation_space or probe.observation_space
        action_space = action_space or probe.action_space
        if probe is not env:
            probe.close()

    final.parent.mkdir(parents=True, exist_ok=True)
    for stale in final.parent.glob(f".{final.name}.tmp-*"):
        if time.time() - stale.stat().st_mtime > 3600:  # a crashed write from long ago
            shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        storage = MinariStorage.new(
            tmp / "data",
            observation_space=observation_space,
            action_space=action_space,
            env_spec=spec,
            data_format=data_format,
            jpeg_encoding=False,
        )
        meta: dict[str, Any] = {
            "dataset_id": dataset_id,
            "algorithm_name": algorithm_name,
            "author": {author},
            "author_email": {author_email},
            "code_permalink": code_permalink,
            "description": description or f"{dataset_id} written by robotrl",
            "minari_version": minari_version,
            "dataset_size": 0,
        }
        eval_spec = _resolve_env_spec(eval_env)
        if eval_spec is not None:
            meta["eval_env_spec"] = eval_spec.to_json()
        if ref_min_score is not None:
            meta["ref_min_score"] = float(ref_min_score)
            meta["ref_max_score"] = float(ref_max_score)
        prov = {
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(),
            "robotrl_version": _robotrl_version(),
            **dict(provenance or {}),
        }
        meta["robotrl_provenance"] = json.dumps(prov, default=str, sort_keys=True)
        if obs_layout is not None:
            meta["robotrl_obs_layout"] = obs_layout.to_json()
        storage.update_metadata(meta)
        storage.update_episodes([_to_buffer(i, ep, observation_space, action_space, data_format) for i, ep in enumerate(episodes)])
        size_mb = sum(f.stat().st_size for f in (tmp / "data").rglob("*") if f.is_file()) / 2**20
        storage.update_metadata({"dataset_size": round(size_mb, 3)})
        commit_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _robotrl_version() -> str:
    from robotrl import __version__

    return __version__
