"""Bad input to the data layer: the right robotrl error, with a message naming the problem and the fix."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest

from robotrl.data import ReplayBuffer, check_spaces, load_dataset, write_dataset
from robotrl.data.writer import Episode
from robotrl.errors import (
    BatchSizeError,
    DatasetExistsError,
    DatasetFormatError,
    DatasetNotFoundError,
    RobotRLError,
    SpaceMismatchError,
)

ID = "robotrl/hopper/err-v0"


def episodes(seed=0, lengths=(4, 3)):
    rng = np.random.default_rng(seed)
    out = []
    for T in lengths:
        te = np.zeros(T, bool)
        te[-1] = True
        out.append(Episode(observations=rng.normal(size=(T + 1, 11)), actions=rng.uniform(-1, 1, (T, 3)),
                           rewards=rng.normal(size=T), terminations=te, truncations=np.zeros(T, bool)))
    return out


def leftovers(root):
    return sorted(p.name for p in root.rglob(".*") if ".tmp-" in p.name or ".old-" in p.name)


def test_missing_dataset_id_says_how_to_generate_it(minari_root):
    with pytest.raises(DatasetNotFoundError, match=r"'robotrl/hopper/nope-v0' is not present.*robotrl collect") as ei:
        load_dataset("robotrl/hopper/nope-v0")
    assert isinstance(ei.value, FileNotFoundError) and isinstance(ei.value, RobotRLError)
    assert str(minari_root) in str(ei.value)
    with pytest.raises(DatasetNotFoundError, match=r"minari download"):
        load_dataset(minari_root / "no" / "such" / "dir")


def test_space_mismatch_names_both_sides(minari_root, hopper_spaces, pointmaze_spaces):
    write_dataset(ID, episodes(), env="Hopper-v5")
    data = load_dataset(ID)
    check_spaces(data, *hopper_spaces)  # the right env passes
    with pytest.raises(SpaceMismatchError, match=r"observation keys Box do not match.*'achieved_goal'.*Hopper-v5"):
        check_spaces(data, *pointmaze_spaces)
    with pytest.raises(SpaceMismatchError, match=r"actions have Da=3 but the environment's have Da=4.*'Hopper-v5'"):
        check_spaces(data, hopper_spaces[0], gym.spaces.Box(-1, 1, (4,)))
    with pytest.raises(SpaceMismatchError, match=r"observations have Do=11 but the environment's have Do=17"):
        check_spaces(data, gym.spaces.Box(-np.inf, np.inf, (17,)), hopper_spaces[1])


@pytest.mark.parametrize("damage", ["empty", "half"])
def test_damaged_hdf5_raises_format_error(minari_root, damage):
    path = write_dataset(ID, episodes(lengths=(40, 30, 50)), env="Hopper-v5")
    f = path / "data" / "main_data.hdf5"
    size = f.stat().st_size
    assert size > 0
    with open(f, "r+b") as fh:
        fh.truncate(0 if damage == "empty" else size // 2)
    with pytest.raises(DatasetFormatError, match=r"truncated or corrupt.*(generate|download) it again"):
        load_dataset(ID)


@pytest.mark.parametrize("where", ["observations", "actions", "rewards", "dict"])
def test_nan_or_inf_is_refused_and_nothing_is_written(minari_root, pointmaze_spaces, where):
    eps = episodes()
    kw = {"env": "Hopper-v5"}
    if where == "dict":
        T = 3
        obs = {"achieved_goal": np.zeros((T + 1, 2)), "desired_goal": np.zeros((T + 1, 2)),
               "observation": np.zeros((T + 1, 4))}
        obs["desired_goal"][2, 1] = np.nan
        eps = [Episode(obs, np.zeros((T, 2)), np.zeros(T), np.zeros(T, bool), np.ones(T, bool))]
        kw = {"observation_space": pointmaze_spaces[0], "action_space": pointmaze_spaces[1]}
    else:
        arr = np.asarray(getattr(eps[1], where), dtype=np.float64).copy()
        arr.flat[1] = np.inf if where == "rewards" else np.nan
        setattr(eps[1], where, arr)
    name = "observations/desired_goal" if where == "dict" else where
    with pytest.raises(DatasetFormatError, match=rf"episode \d: {name} holds NaN or inf values; clean the episode"):
        write_dataset(ID, eps, **kw)
    assert not (minari_root / ID).exists()
    assert leftovers(minari_root) == []


def test_inconsistent_or_empty_episodes_are_refused(minari_root):
    ep = episodes()[0]
    ep.observations = ep.observations[:-1]  # final observation missing
    with pytest.raises(DatasetFormatError, match=r"observations must have T\+1=5 entries.*got 4"):
        write_dataset(ID, [ep], env="Hopper-v5")
    with pytest.raises(DatasetFormatError, match=r"no episodes to write"):
        write_dataset(ID, [], env="Hopper-v5")
    assert not (minari_root / ID).exists()


def test_existing_id_without_overwrite_leaves_old_dataset_untouched(minari_root):
    path = write_dataset(ID, episodes(seed=1), env="Hopper-v5")
    before = load_dataset(ID)
    stamps = {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*") if p.is_file()}
    with pytest.raises(DatasetExistsError, match=r"already exists.*choose another id or version.*overwrite=True") as ei:
        write_dataset(ID, episodes(seed=2), env="Hopper-v5")
    assert isinstance(ei.value, FileExistsError)
    assert {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in path.rglob("*") if p.is_file()} == stamps
    np.testing.assert_array_equal(load_dataset(ID).observations, before.observations)


class _DiskFull(OSError):
    pass


def _fail_update_episodes(self, episodes):
    list(episodes)  # consume like the real one, then crash mid-write
    raise _DiskFull("simulated crash while writing episodes")


def _crash_storage_writes(monkeypatch):
    """Make every Minari storage backend crash in update_episodes (simulated crash mid-write)."""
    from minari.dataset._storages import get_storage_keys
    from minari.dataset._storages import _registry

    for key in get_storage_keys():
        monkeypatch.setattr(_registry[key](), "update_episodes", _fail_update_episodes)


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_failed_write_leaves_no_dataset_and_no_temp_dir(minari_root, monkeypatch, fmt):
    _crash_storage_writes(monkeypatch)
    with pytest.raises(_DiskFull, match="simulated crash"):
        write_dataset(ID, episodes(), env="Hopper-v5", data_format=fmt)
    assert not (minari_root / ID).exists()
    assert leftovers(minari_root) == []
    with pytest.raises(DatasetNotFoundError):
        load_dataset(ID)


def test_failed_overwrite_keeps_old_dataset(minari_root, monkeypatch):
    write_dataset(ID, episodes(seed=1), env="Hopper-v5")
    before = load_dataset(ID)
    _crash_storage_writes(monkeypatch)
    with pytest.raises(_DiskFull):
        write_dataset(ID, episodes(seed=2, lengths=(9,)), env="Hopper-v5", overwrite=True)
    after = load_dataset(ID)
    np.testing.assert_array_equal(after.observations, before.observations)
    assert leftovers(minari_root) == []


def test_overwrite_replaces_atomically(minari_root):
    write_dataset(ID, episodes(seed=1), env="Hopper-v5")
    new_eps = episodes(seed=2, lengths=(6,))
    path = write_dataset(ID, new_eps, env="Hopper-v5", overwrite=True, data_format="arrow")
    data = load_dataset(ID)
    assert data.num_episodes == 1 and data.num_transitions == 6
    np.testing.assert_array_equal(data.observations, new_eps[0].observations[:-1].astype(np.float32))
    assert not (path / "data" / "main_data.hdf5").exists()  # nothing of the old copy mixed in
    assert leftovers(minari_root) == []
    assert sorted(os.listdir(path.parent)) == ["err-v0"]


def test_stale_temp_dirs_of_crashed_writes_are_removed(minari_root):
    parent = minari_root / "robotrl" / "hopper"
    stale, fresh = parent / ".err-v0.tmp-old", parent / ".err-v0.tmp-new"
    for d in (stale, fresh):
        d.mkdir(parents=True)
    os.utime(stale, (0, 0))
    write_dataset(ID, episodes(), env="Hopper-v5")
    assert not stale.exists() and fresh.exists()  # a concurrent (recent) write is left alone


def test_bad_writer_arguments(minari_root):
    with pytest.raises(ValueError, match=r"data_format must be 'hdf5' or 'arrow'"):
        write_dataset(ID, episodes(), env="Hopper-v5", data_format="zarr")
    with pytest.raises(ValueError, match=r"both ref_min_score and ref_max_score"):
        write_dataset(ID, episodes(), env="Hopper-v5", ref_min_score=0.0)
    assert not (minari_root / ID).exists()


def test_batch_larger_than_loaded_data_raises(minari_root):
    write_dataset(ID, episodes(lengths=(4, 3)), env="Hopper-v5")
    buf = ReplayBuffer.from_offline(load_dataset(ID))
    with pytest.raises(BatchSizeError, match=r"batch size 8 is larger than the 7 transitions stored; lower the batch size"):
        buf.sample(8)
    with pytest.raises(BatchSizeError, match=r"dataset has 7 transitions but the buffer holds 5; raise the buffer capacity"):
        ReplayBuffer.from_offline(load_dataset(ID), capacity=5)
