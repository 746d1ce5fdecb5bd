"""Loading Minari datasets into contiguous transition arrays.

Symbols: ``M`` transitions, ``E`` episodes, ``Do`` flat observation size, ``Da`` action
size. Any Minari dataset loads here — by id from the local Minari directory
(``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``) or by path, stored as hdf5 or
arrow, with ``Box`` or (goal-conditioned) ``Dict`` observations — into one
:class:`OfflineData`. ``Dict`` observations are flattened with
:class:`~robotrl.data.spaces.FlatLayout` (recoverable key order, kept in ``obs_layout``).

Episode layout (Minari): ``observations`` has ``T+1`` rows; transition ``t`` is
``(obs[t], action[t], reward[t], obs[t+1], terminated[t], truncated[t])``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from robotrl.data.spaces import FlatLayout, flat_dim, get_key, layout_for_space, split_images
from robotrl.data.writer import datasets_root
from robotrl.errors import DatasetFormatError, DatasetNotFoundError, SpaceMismatchError

__all__ = ["OfflineData", "load_dataset", "resolve_dataset_path", "check_spaces"]


@dataclass
class OfflineData:
    """A whole dataset as contiguous arrays (episodes stored back to back).

    Attributes:
        observations: float32 ``(M, Do)``.
        actions: float32 ``(M, Da)``, raw env units.
        rewards: float32 ``(M,)``.
        next_observations: float32 ``(M, Do)``.
        terminated: bool ``(M,)`` — no bootstrap from ``next_observations``.
        truncated: bool ``(M,)`` — episode cut; bootstrap still valid.
        episode_starts: int64 ``(E,)`` index of each episode's first transition.
        episode_ends: int64 ``(E,)`` one past each episode's last transition.
        success: bool ``(M,)`` success reported after the step, if the data has it.
        obs_layout: key order of flattened ``Dict`` observations (``None`` for Box).
        images: cameras of a ``Dict`` observation space, ``{key: uint8 (M + E, H, W, C)}``:
            every observation's frame stored once (each episode's ``T+1`` frames back to
            back); the cameras are not part of the flat ``observations``. ``None`` without cameras.
        image_index: int64 ``(M,)`` row of ``images`` holding transition ``t``'s observation;
            its next observation's frame is row ``image_index[t] + 1`` (by index, never copied).
        observation_space, action_space: the dataset's raw spaces.
        metadata: Minari metadata (``dataset_id``, ``env_spec``, ``ref_min_score``, ...).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    episode_starts: np.ndarray
    episode_ends: np.ndarray
    observation_space: gym.Space
    action_space: gym.Space
    obs_layout: FlatLayout | None = None
    success: np.ndarray | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    images: dict[str, np.ndarray] | None = None
    image_index: np.ndarray | None = None

    @property
    def num_transitions(self) -> int:
        """``M``."""
        return int(self.rewards.shape[0])

    @property
    def num_episodes(self) -> int:
        """``E``."""
        return int(self.episode_starts.shape[0])

    @property
    def obs_dim(self) -> int:
        """``Do``."""
        return int(self.observations.shape[1])

    @property
    def action_dim(self) -> int:
        """``Da``."""
        return int(self.actions.shape[1])

    @property
    def ref_scores(self) -> tuple[float, float] | None:
        """``(ref_min_score, ref_max_score)`` for D4RL normalisation, if recorded."""
        lo, hi = self.metadata.get("ref_min_score"), self.metadata.get("ref_max_score")
        return None if lo is None or hi is None else (float(lo), float(hi))

    @property
    def env_id(self) -> str | None:
        """Gymnasium id of the env that produced the data (from ``env_spec``)."""
        spec = self.metadata.get("env_spec")
        return json.loads(spec).get("id") if spec else None

    def episode_returns(self) -> np.ndarray:
        """Undiscounted return of each episode, ``(E,)``."""
        c = np.concatenate([[0.0], np.cumsum(self.rewards, dtype=np.float64)])
        return (c[self.episode_ends] - c[self.episode_starts]).astype(np.float32)


def resolve_dataset_path(dataset: str | os.PathLike) -> Path:
    """The ``data/`` directory of a dataset given by id or path.

    Accepted: a Minari id (looked up under the local Minari directory), the dataset's
    directory, or its ``data/`` directory; ``lerobot:<repo_id or folder>``: a LeRobot dataset read through
    LeRobot's own library and kept as a Minari dataset (:mod:`robotrl.data.lerobot.library`).

    Raises:
        DatasetNotFoundError: nothing there; the message says how to generate it.
    """
    if str(dataset).startswith("lerobot:"):  # a LeRobot dataset, read by LeRobot's own library (the [lerobot] extra)
        from robotrl.data.lerobot.library import lerobot_dataset_path

        return lerobot_dataset_path(str(dataset)[len("lerobot:"):])
    candidates = []
    p = Path(dataset).expanduser()
    candidates += [p / "data", p]
    if not p.is_absolute():
        candidates.append(datasets_root() / str(dataset) / "data")
    for c in candidates:
        if (c / "metadata.json").is_file():
            return c
    hint = _recipe_hint(str(dataset))
    raise DatasetNotFoundError(
        f"dataset {str(dataset)!r} is not present (looked in {datasets_root()} and at that path). "
        f"{hint}Official datasets can be fetched elsewhere with `minari download <id>` and copied into "
        "$MINARI_DATASETS_PATH."
    )


def _recipe_hint(dataset: str) -> str:
    """How to generate ``dataset``: from the dataset config (``configs/dataset/*.yaml``) whose ``id`` it is.

    The configs name each id's recipe, so the data layer reads them instead of importing the
    collectors (:mod:`robotrl.collect`, a higher layer). A config with ``recipe_args`` writes a variant
    id that ``robotrl collect recipe=<name>`` alone would not: the hint then names the config.
    """
    from importlib import resources

    import yaml

    for f in sorted((resources.files("robotrl") / "configs" / "dataset").iterdir(), key=lambda f: f.name):
        if not f.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(f.read_text()) or {}
        if doc.get("id") != dataset or not doc.get("recipe"):
            continue
        if doc.get("recipe_args"):
            return f"Train with dataset={f.name[:-5]} to generate it on first use. "
        return f"Generate it with `robotrl collect recipe={doc['recipe']}`. "
    return "Generate a dataset with `robotrl collect recipe=<name>` (`robotrl collect --help` lists recipes). "


def _read_storage(path: Path):
    from minari.dataset.minari_storage import MinariStorage

    try:
        storage = MinariStorage.read(path)
        n = storage.total_episodes
    except Exception as exc:  # h5py/arrow/json errors from a damaged file
        raise DatasetFormatError(
            f"dataset at {path} cannot be read ({type(exc).__name__}: {exc}); the file is empty, "
            "truncated or corrupt: delete it and generate or download it again"
        ) from exc
    if n == 0:
        raise DatasetFormatError(f"dataset at {path} holds no episodes; generate it again with more steps")
    return storage


def _leading_len(obs) -> int:
    """Rows of an observation array or of the first leaf of a (nested) dict of arrays."""
    while isinstance(obs, dict):
        obs = next(iter(obs.values()))
    return len(obs)


def _stack_obs(obs_list: list, layout: FlatLayout | None) -> np.ndarray:
    if layout is not None and not layout.keys:  # cameras only: no flat part
        return np.zeros((sum(_leading_len(o) for o in obs_list), 0), np.float32)
    if layout is None:
        return np.concatenate([np.asarray(o, dtype=np.float32).reshape(len(o), -1) for o in obs_list])
    return np.concatenate([layout.flatten(o) for o in obs_list])


def load_dataset(
    dataset: str | os.PathLike,
    *,
    check_finite: bool = True,
    split_discontinuous: bool = False,
) -> OfflineData:
    """Load a Minari dataset (hdf5 or arrow, Box or Dict observations) as :class:`OfflineData`.

    Args:
        dataset: Minari id, dataset directory, or its ``data/`` directory.
        check_finite: raise on NaN/inf in observations, actions or rewards.
        split_discontinuous: also end an episode wherever ``next_obs[t] != obs[t+1]``
            (needed for some D4RL ports before computing returns).

    Raises:
        DatasetNotFoundError: no dataset under that id or path.
        DatasetFormatError: empty, truncated or corrupt file, inconsistent episode
            lengths, or NaN/inf values.
    """
    path = resolve_dataset_path(dataset)
    storage = _read_storage(path)
    obs_space, act_space = storage.observation_space, storage.action_space
    low_space, image_shapes = split_images(obs_space)
    layout = layout_for_space(low_space if image_shapes else obs_space)  # cameras stay out of the flat vector
    frames: dict[str, list[np.ndarray]] = {k: [] for k in image_shapes}
    try:
        episodes = list(storage.get_episodes(range(storage.total_episodes)))  # reads lazily: force it here
    except Exception as exc:
        raise DatasetFormatError(
            f"dataset at {path} is truncated or corrupt while reading episodes ({type(exc).__name__}: {exc}); "
            "generate or download it again"
        ) from exc

    obs, nxt, acts, rews, terms, truncs, succ, lengths = [], [], [], [], [], [], [], []
    has_success = True
    for i, ep in enumerate(episodes):
        T = int(np.asarray(ep["rewards"]).shape[0])
        o = ep["observations"]
        n_obs = _leading_len(o)
        if T == 0 or n_obs != T + 1:
            raise DatasetFormatError(
                f"episode {i} of {path} has {T} steps and {n_obs} observations (expected T+1); the file is damaged"
            )
        flat = _stack_obs([o], layout)
        for k, shape in image_shapes.items():
            f = np.asarray(get_key(o, k))
            if f.dtype != np.uint8 or f.shape != (T + 1, *shape):
                raise DatasetFormatError(f"episode {i} of {path}: camera {k!r} holds {f.dtype} {f.shape}, the space says "
                                         f"uint8 {(T + 1, *shape)}; the file is damaged")
            frames[k].append(f)
        obs.append(flat[:-1])
        nxt.append(flat[1:])
        acts.append(np.asarray(ep["actions"], dtype=np.float32).reshape(T, -1))
        rews.append(np.asarray(ep["rewards"], dtype=np.float32))
        terms.append(np.asarray(ep["terminations"], dtype=bool))
        truncs.append(np.asarray(ep["truncations"], dtype=bool))
        lengths.append(T)
        info_s = (ep.get("infos") or {}).get("success", (ep.get("infos") or {}).get("is_success"))
        if info_s is None:
            has_success = False
        elif has_success:
            succ.append(np.asarray(info_s).reshape(T + 1, -1)[1:, 0].astype(bool))

    lengths_a = np.asarray(lengths, dtype=np.int64)
    ends = np.cumsum(lengths_a)
    starts = ends - lengths_a
    data = OfflineData(
        observations=np.concatenate(obs),
        actions=np.concatenate(acts),
        rewards=np.concatenate(rews),
        next_observations=np.concatenate(nxt),
        terminated=np.concatenate(terms),
        truncated=np.concatenate(truncs),
        episode_starts=starts,
        episode_ends=ends,
        observation_space=obs_space,
        action_space=act_space,
        obs_layout=layout,
        success=np.concatenate(succ) if has_success and succ else None,
        metadata=dict(storage.metadata),
    )
    if image_shapes:
        data.images = {k: np.concatenate(v) for k, v in frames.items()}
        data.image_index = np.arange(data.num_transitions, dtype=np.int64) + np.repeat(np.arange(len(lengths)), lengths_a)
    if layout is None and data.metadata.get("robotrl_obs_layout"):
        # stored flat, but the flattening of a Dict env space (e.g. a robot recording)
        data.obs_layout = FlatLayout.from_json(data.metadata["robotrl_obs_layout"])
        if data.obs_layout.size != data.obs_dim:
            raise DatasetFormatError(f"dataset at {path} records an observation layout of size {data.obs_layout.size} "
                                     f"but stores Do={data.obs_dim}; the metadata is damaged")
    if check_finite:
        for name in ("observations", "actions", "rewards", "next_observations"):
            arr = getattr(data, name)
            if not np.isfinite(arr).all():
                bad = int((~np.isfinite(arr)).reshape(arr.shape[0], -1).any(axis=1).sum())
                raise DatasetFormatError(
                    f"dataset at {path} has NaN/inf in {name} ({bad} transitions); clean or regenerate it, "
                    "or load with check_finite=False and filter yourself"
                )
    if split_discontinuous:
        from robotrl.data.returns import split_discontinuous as split

        data.episode_starts, data.episode_ends = split(
            data.observations, data.next_observations, data.episode_starts, data.episode_ends
        )
    return data


def check_spaces(data: OfflineData, observation_space: gym.Space, action_space: gym.Space) -> None:
    """Check that a dataset fits an environment's raw spaces.

    Raises:
        SpaceMismatchError: flat observation size, Dict keys, or action size differ; the
            message names both and the way out.
    """
    env_layout = layout_for_space(observation_space)
    if (env_layout is None) != (data.obs_layout is None) or (
        env_layout is not None and env_layout.keys != data.obs_layout.keys
    ):
        raise SpaceMismatchError(
            f"dataset observation keys {getattr(data.obs_layout, 'keys', 'Box')} do not match the environment's "
            f"{getattr(env_layout, 'keys', 'Box')}; pick the dataset recorded on this env (see its env_spec: {data.env_id})"
        )
    if flat_dim(observation_space) != data.obs_dim:
        raise SpaceMismatchError(
            f"dataset observations have Do={data.obs_dim} but the environment's have Do={flat_dim(observation_space)}; "
            f"the dataset was recorded on {data.env_id!r}: train in that env (`env=gym` takes the dataset's env; "
            f"`env=gym env.name={data.env_id}` names it) or pick a dataset recorded on this env (`dataset.id=...`)"
        )
    if flat_dim(action_space) != data.action_dim:
        raise SpaceMismatchError(
            f"dataset actions have Da={data.action_dim} but the environment's have Da={flat_dim(action_space)}; "
            f"the dataset was recorded on {data.env_id!r}: train in that env (`env=gym` takes the dataset's env; "
            f"`env=gym env.name={data.env_id}` names it) or pick a dataset recorded on this env (`dataset.id=...`)"
        )
