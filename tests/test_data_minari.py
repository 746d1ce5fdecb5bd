"""Minari round trips on disk: robotrl's writer, Minari's own writer, robotrl's loader, FlatLayout."""

from __future__ import annotations

import json

import gymnasium as gym
import minari
import numpy as np
import pytest
from minari.data_collector import EpisodeBuffer

from robotrl.data import FlatLayout, load_dataset, write_dataset
from robotrl.data.spaces import flat_dim, flat_observation_space, layout_for_space
from robotrl.data.writer import Episode
from robotrl.errors import SpaceMismatchError

POINTMAZE_KEYS = ("achieved_goal", "desired_goal", "observation")


def hopper_episodes(lengths=(5, 3, 7), ends=("term", "trunc", "term"), seed=0, success=True):
    rng = np.random.default_rng(seed)
    eps = []
    for T, end in zip(lengths, ends):
        te, tr = np.zeros(T, bool), np.zeros(T, bool)
        (te if end == "term" else tr)[-1] = True
        infos = {"success": rng.random(T + 1) < 0.5} if success else None
        eps.append(Episode(
            observations=rng.normal(size=(T + 1, 11)),
            actions=rng.uniform(-1, 1, (T, 3)).astype(np.float32),
            rewards=rng.normal(size=T),
            terminations=te, truncations=tr, infos=infos, seed=int(rng.integers(1000)),
        ))
    return eps


def pointmaze_episodes(lengths=(4, 6), seed=1):
    rng = np.random.default_rng(seed)
    eps = []
    for T in lengths:
        obs = {"achieved_goal": rng.normal(size=(T + 1, 2)), "desired_goal": rng.normal(size=(T + 1, 2)),
               "observation": rng.normal(size=(T + 1, 4))}
        tr = np.zeros(T, bool)
        tr[-1] = True
        eps.append(Episode(observations=obs, actions=rng.uniform(-1, 1, (T, 2)).astype(np.float32),
                           rewards=(rng.random(T) < 0.3).astype(np.float64), terminations=np.zeros(T, bool),
                           truncations=tr, infos={"success": rng.random(T + 1) < 0.5}))
    return eps


def flat_obs(ep, keys=None):
    if keys is None:
        return np.asarray(ep.observations, np.float32)
    return np.concatenate([np.asarray(ep.observations[k], np.float32) for k in keys], -1)


def assert_loaded_equals(data, eps, keys=None, success=True):
    lengths = [len(e) for e in eps]
    ends = np.cumsum(lengths)
    assert data.num_episodes == len(eps) and data.num_transitions == sum(lengths)
    assert data.episode_starts.tolist() == (ends - lengths).tolist() and data.episode_ends.tolist() == ends.tolist()
    o = np.concatenate([flat_obs(e, keys)[:-1] for e in eps])
    no = np.concatenate([flat_obs(e, keys)[1:] for e in eps])
    np.testing.assert_array_equal(data.observations, o)
    np.testing.assert_array_equal(data.next_observations, no)
    np.testing.assert_array_equal(data.actions, np.concatenate([np.asarray(e.actions, np.float32) for e in eps]))
    np.testing.assert_array_equal(data.rewards, np.concatenate([np.asarray(e.rewards, np.float32) for e in eps]))
    np.testing.assert_array_equal(data.terminated, np.concatenate([e.terminations for e in eps]))
    np.testing.assert_array_equal(data.truncated, np.concatenate([e.truncations for e in eps]))
    assert data.terminated.dtype == bool and data.truncated.dtype == bool
    if success:
        # success after each step: infos[1:] (infos[0] is the reset info)
        np.testing.assert_array_equal(data.success, np.concatenate([np.asarray(e.infos["success"])[1:] for e in eps]))
    else:
        assert data.success is None
    rets = [float(np.sum(np.asarray(e.rewards, np.float32))) for e in eps]
    np.testing.assert_allclose(data.episode_returns(), rets, rtol=1e-5)


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_write_then_load_box_observations(minari_root, fmt):
    eps = hopper_episodes()
    path = write_dataset("robotrl/hopper/test-v0", eps, env="Hopper-v5", ref_min_score=-20.0,
                         ref_max_score=3000.0, provenance={"recipe": "unit", "noise": 0.1}, data_format=fmt)
    assert path == minari_root / "robotrl/hopper/test-v0"
    assert (path / "data" / "metadata.json").is_file()
    assert not list(path.parent.glob(".test-v0.tmp-*"))
    data = load_dataset("robotrl/hopper/test-v0")
    assert_loaded_equals(data, eps)
    assert data.obs_layout is None and data.obs_dim == 11 and data.action_dim == 3
    assert data.ref_scores == (-20.0, 3000.0) and data.env_id == "Hopper-v5"
    # by path, and by data/ path, gives the same
    np.testing.assert_array_equal(load_dataset(path).observations, data.observations)
    np.testing.assert_array_equal(load_dataset(path / "data").actions, data.actions)


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_write_then_load_dict_observations(minari_root, pointmaze_spaces, fmt):
    obs_space, act_space = pointmaze_spaces
    eps = pointmaze_episodes()
    write_dataset("robotrl/pointmaze/umaze-v0", eps, observation_space=obs_space, action_space=act_space,
                  data_format=fmt)
    data = load_dataset("robotrl/pointmaze/umaze-v0")
    assert data.obs_layout is not None and data.obs_layout.keys == POINTMAZE_KEYS
    assert data.obs_layout.shapes == ((2,), (2,), (4,)) and data.obs_dim == 8
    assert_loaded_equals(data, eps, POINTMAZE_KEYS)
    parts = data.obs_layout.unflatten(data.observations)
    np.testing.assert_array_equal(parts["desired_goal"],
                                  np.concatenate([e.observations["desired_goal"][:-1] for e in eps]).astype(np.float32))
    assert isinstance(data.observation_space, gym.spaces.Dict)


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_minari_opens_what_robotrl_writes(minari_root, fmt):
    eps = hopper_episodes(seed=5)
    write_dataset("robotrl/hopper/open-v0", eps, env="Hopper-v5", ref_min_score=-1.5, ref_max_score=42.0,
                  provenance={"recipe": "hopper-medium", "seed": 3}, data_format=fmt)
    ds = minari.load_dataset("robotrl/hopper/open-v0")
    assert ds.total_episodes == 3 and ds.total_steps == 15
    meta = ds.storage.metadata
    assert meta["ref_min_score"] == -1.5 and meta["ref_max_score"] == 42.0
    assert ds.env_spec.id == "Hopper-v5" and json.loads(meta["env_spec"])["id"] == "Hopper-v5"
    assert meta["dataset_id"] == "robotrl/hopper/open-v0"
    prov = json.loads(meta["robotrl_provenance"])
    assert prov["recipe"] == "hopper-medium" and prov["seed"] == 3 and "robotrl_version" in prov
    assert minari.get_normalized_score(ds, np.array([42.0]))[0] == pytest.approx(1.0)
    for got, ep in zip(ds.iterate_episodes(), eps):
        np.testing.assert_allclose(got.observations, ep.observations)
        np.testing.assert_array_equal(got.actions, ep.actions)
        np.testing.assert_allclose(got.rewards, ep.rewards)
        np.testing.assert_array_equal(got.terminations, ep.terminations)
        np.testing.assert_array_equal(got.truncations, ep.truncations)
    assert ds.observation_space == gym.spec("Hopper-v5").make().observation_space


def _minari_buffers_from(eps):
    return [EpisodeBuffer(id=i, observations=e.observations, actions=e.actions, rewards=list(e.rewards),
                          terminations=list(e.terminations), truncations=list(e.truncations),
                          infos=e.infos or {}) for i, e in enumerate(eps)]


@pytest.mark.parametrize("fmt", ["hdf5", "arrow"])
def test_dataset_created_by_minari_loads_box(minari_root, hopper_spaces, fmt):
    # Minari 0.5.4's arrow reader needs 2-D infos, so the arrow file is written without them
    eps = hopper_episodes(seed=9, success=(fmt == "hdf5"))
    minari.create_dataset_from_buffers("minari/hopper/own-v0", _minari_buffers_from(eps), env="Hopper-v5",
                                       algorithm_name="random", author="tests", author_email="t@localhost",
                                       code_permalink="https://example.org", description="unit",
                                       data_format=fmt)
    data = load_dataset("minari/hopper/own-v0")
    assert_loaded_equals(data, eps, success=(fmt == "hdf5"))
    assert data.env_id == "Hopper-v5" and data.ref_scores is None
    assert data.observation_space == hopper_spaces[0]


def test_dataset_created_by_minari_loads_dict(minari_root, pointmaze_spaces):
    obs_space, act_space = pointmaze_spaces
    eps = pointmaze_episodes(seed=11)
    minari.create_dataset_from_buffers("minari/pointmaze/own-v0", _minari_buffers_from(eps),
                                       observation_space=obs_space, action_space=act_space,
                                       algorithm_name="random", author="tests", author_email="t@localhost",
                                       code_permalink="https://example.org", description="unit",
                                       data_format="hdf5")
    data = load_dataset("minari/pointmaze/own-v0")
    assert data.obs_layout.keys == POINTMAZE_KEYS
    assert_loaded_equals(data, eps, POINTMAZE_KEYS)


# --------------------------------------------------------------------------- FlatLayout


def test_flat_layout_round_trip_with_recoverable_key_order(pointmaze_spaces):
    obs_space, _ = pointmaze_spaces
    layout = layout_for_space(obs_space)
    assert layout.keys == POINTMAZE_KEYS == tuple(obs_space.spaces.keys())
    assert layout.size == flat_dim(obs_space) == 8
    assert {k: (s.start, s.stop) for k, s in layout.slices.items()} == {
        "achieved_goal": (0, 2), "desired_goal": (2, 4), "observation": (4, 8)}
    rng = np.random.default_rng(0)
    batch = {k: rng.normal(size=(5, 3, *obs_space[k].shape)).astype(np.float32) for k in POINTMAZE_KEYS}
    flat = layout.flatten(batch)
    assert flat.shape == (5, 3, 8) and flat.dtype == np.float32
    back = layout.unflatten(flat)
    assert tuple(back) == POINTMAZE_KEYS
    for k in POINTMAZE_KEYS:
        np.testing.assert_array_equal(back[k], batch[k])
    np.testing.assert_array_equal(layout.flatten(obs_space.sample()).shape, (8,))
    assert FlatLayout.from_json(layout.to_json()) == layout
    assert flat_observation_space(obs_space).shape == (8,)
    # nested dicts are walked depth first, named with '/'; the Dict space's own key order is kept
    nested = gym.spaces.Dict({"z": gym.spaces.Box(-1, 1, (1,)),
                              "a": gym.spaces.Dict({"q": gym.spaces.Box(-1, 1, (2, 2)), "p": gym.spaces.Box(-1, 1, (3,))})})
    nl = layout_for_space(nested)
    assert nl.keys == tuple(k for k in ("a/p", "a/q", "z")) and nl.shapes == ((3,), (2, 2), (1,))
    s = nested.sample()
    v = nl.flatten(s)
    assert v.shape == (8,)
    np.testing.assert_array_equal(nl.unflatten(v)["a/q"], s["a"]["q"])
    assert FlatLayout.from_json(nl.to_json()) == nl
    assert layout_for_space(gym.spaces.Box(-1, 1, (11,))) is None


def test_flat_layout_rejects_mismatched_observations(pointmaze_spaces):
    layout = layout_for_space(pointmaze_spaces[0])
    with pytest.raises(SpaceMismatchError, match=r"no key 'desired_goal'.*different environment"):
        layout.flatten({"achieved_goal": np.zeros(2), "observation": np.zeros(4)})
    with pytest.raises(SpaceMismatchError, match=r"'observation' has shape \(3,\).*matches the environment"):
        layout.flatten({"achieved_goal": np.zeros(2), "desired_goal": np.zeros(2), "observation": np.zeros(3)})
    with pytest.raises(SpaceMismatchError, match=r"size 7, layout expects 8"):
        layout.unflatten(np.zeros(7))
    with pytest.raises(SpaceMismatchError, match=r"Box or Dict-of-Box"):
        layout_for_space(gym.spaces.Discrete(3))
