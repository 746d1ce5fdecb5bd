"""Checkpoints: atomic torch/npz round trips; corrupt or pickled content is refused with CheckpointError.
The one atomic file write (:mod:`robotrl.files`) and the config section check (:func:`robotrl.utils.config_dataclass`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from robotrl.checkpoint import load_arrays, load_checkpoint, save_arrays, save_checkpoint
from robotrl.errors import CheckpointError, ConfigError, RobotRLError
from robotrl.files import atomic_path, atomic_write
from robotrl.utils import config_dataclass


@dataclass
class _Custom:
    x: int = 1


def _state():
    return {
        "step": 1234,
        "config": {"agent": "iql", "gamma": 0.99, "layers": [256, 256], "name": "hopper"},
        "model": {"w": torch.randn(5, 3), "b": torch.arange(3, dtype=torch.float64)},
        "flags": torch.tensor([True, False]),
        "none": None,
    }


def _equal(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def test_checkpoint_round_trip_and_no_temp_files(tmp_path):
    st = _state()
    p = save_checkpoint(tmp_path / "run" / "checkpoints" / "latest.pt", st)
    assert p.is_file()
    assert _equal(load_checkpoint(p), st)
    # a run directory resolves to its checkpoints/latest.pt
    assert _equal(load_checkpoint(tmp_path / "run"), st)
    assert sorted(x.name for x in p.parent.iterdir()) == ["latest.pt"]
    # overwriting replaces the content
    st2 = dict(st, step=99)
    save_checkpoint(p, st2)
    assert load_checkpoint(p)["step"] == 99


def test_atomic_write_replaces_whole_files_with_the_asked_mode_and_leaves_nothing_on_failure(tmp_path):
    p = tmp_path / "sub" / "result.json"
    assert atomic_write(p, '{"a": 1}', mode=0o666) == p and p.read_text() == '{"a": 1}'
    assert p.stat().st_mode & 0o777 == 0o666 & ~_umask()
    atomic_write(p, b"raw bytes")
    assert p.read_bytes() == b"raw bytes" and p.stat().st_mode & 0o777 == 0o600  # the new file's mode (default)

    def half_then_fail(f):
        f.write(b"half of a new file")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(p, half_then_fail)
    assert p.read_bytes() == b"raw bytes" and sorted(x.name for x in p.parent.iterdir()) == ["result.json"]
    # a writer that wants a path (a video encoder) gets a temporary one ending in the final suffix
    with atomic_path(tmp_path / "clip.mp4", mode=0o666) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".clip.mp4.") and tmp.suffix == ".mp4"
        tmp.write_bytes(b"frames")
        assert not (tmp_path / "clip.mp4").exists()
    assert (tmp_path / "clip.mp4").read_bytes() == b"frames" and not tmp.exists()


def _umask() -> int:
    import os

    old = os.umask(0)
    os.umask(old)
    return old


def test_config_dataclass_refuses_unknown_keys_in_one_line():
    @dataclass
    class Schedule:
        steps: int = 10
        rate: float = 0.5

    assert config_dataclass(Schedule, {"steps": 3}, "trainer") == Schedule(steps=3)
    assert config_dataclass(Schedule, None, "trainer") == Schedule()
    with pytest.raises(ConfigError, match=r"^unknown trainer settings \['stpes'\]; known: \['rate', 'steps'\]$"):
        config_dataclass(Schedule, {"stpes": 3}, "trainer")


def test_missing_checkpoint_raises(tmp_path):
    with pytest.raises(CheckpointError, match=r"no checkpoint at .*pass a run directory or a \.pt file"):
        load_checkpoint(tmp_path / "nope.pt")


@pytest.mark.parametrize("keep", [0.5, 0.0])
def test_truncated_checkpoint_raises(tmp_path, keep):
    p = save_checkpoint(tmp_path / "ck.pt", _state())
    data = p.read_bytes()
    p.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=r"cannot be read safely.*truncated.*corrupt") as ei:
        load_checkpoint(p)
    assert isinstance(ei.value, RobotRLError) and isinstance(ei.value, ValueError)


def test_pickled_custom_object_is_refused(tmp_path):
    p = tmp_path / "evil.pt"
    torch.save({"model": {"w": torch.ones(2)}, "obj": _Custom(3)}, p)  # plain torch.save, a pickled object inside
    assert torch.load(p, weights_only=False)["obj"] == _Custom(3)  # the file itself is fine
    with pytest.raises(CheckpointError, match=r"holds pickled objects robotrl refuses to load"):
        load_checkpoint(p)
    # same through save_checkpoint: writing is allowed, reading back refuses it
    save_checkpoint(tmp_path / "evil2.pt", {"obj": _Custom()})
    with pytest.raises(CheckpointError, match=r"pickled objects"):
        load_checkpoint(tmp_path / "evil2.pt")


def test_save_arrays_round_trip(tmp_path):
    rng = np.random.default_rng(0)
    arrs = {"obs": rng.normal(size=(10, 3)).astype(np.float32), "idx": np.arange(5, dtype=np.int64),
            "flags": rng.random(7) < 0.5, "ptr": 3}
    p = save_arrays(tmp_path / "sub" / "replay.npz", arrs)
    got = load_arrays(p)
    assert set(got) == set(arrs)
    for k, v in arrs.items():
        np.testing.assert_array_equal(got[k], np.asarray(v))
        assert got[k].dtype == np.asarray(v).dtype
    assert sorted(x.name for x in p.parent.iterdir()) == ["replay.npz"]


def test_load_arrays_refuses_corrupt_missing_and_pickled(tmp_path):
    p = save_arrays(tmp_path / "a.npz", {"x": np.arange(1000)})
    p.write_bytes(p.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"array file .*a\.npz cannot be read"):
        load_arrays(p)
    with pytest.raises(CheckpointError, match=r"cannot be read"):
        load_arrays(tmp_path / "missing.npz")
    obj = tmp_path / "obj.npz"
    np.savez(obj, x=np.array([_Custom()], dtype=object))
    with pytest.raises(CheckpointError, match=r"cannot be read.*(pickle|Object arrays)"):
        load_arrays(obj)


def _draws():
    import random

    return random.random(), float(np.random.rand()), float(torch.rand(())), \
        float(torch.rand((), device="cuda")) if torch.cuda.is_available() else None


@pytest.mark.parametrize("map_location", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="a resume on a GPU: the checkpoint's RNG tensors load onto CUDA"))])
def test_rng_state_round_trips_through_a_checkpoint_read_onto_any_device(tmp_path, map_location):
    """Python, NumPy, torch (and CUDA) generators continue where the checkpoint left them, also when the
    checkpoint is read with ``map_location="cuda"`` as a resume on a GPU does (torch takes RNG states only
    as CPU byte tensors: that resume failed with 'RNG state must be a torch.ByteTensor')."""
    from robotrl.utils import get_rng_state, set_rng_state, set_seed

    set_seed(3)
    save_checkpoint(tmp_path / "rng.pt", {"rng": get_rng_state()})
    expected = _draws()
    set_seed(4)
    assert _draws() != expected
    set_rng_state(load_checkpoint(tmp_path / "rng.pt", map_location=map_location)["rng"])
    assert _draws() == expected
    # an agent's own generator (on its device), as the agents' load_state_dict restore it
    from robotrl.utils import set_generator_state

    gen = torch.Generator(device=map_location).manual_seed(5)
    save_checkpoint(tmp_path / "gen.pt", {"gen": gen.get_state()})
    expected = torch.rand(3, generator=gen, device=map_location)
    set_generator_state(gen, load_checkpoint(tmp_path / "gen.pt", map_location=map_location)["gen"])
    assert torch.equal(torch.rand(3, generator=gen, device=map_location), expected)


def test_a_generator_state_from_the_other_device_kind_reseeds_deterministically():
    """A run checkpointed on a GPU resumes on a CPU: the agent's CUDA generator state (Philox, 16 bytes) does not
    fit a CPU generator (Mersenne Twister, 5056 bytes), so the generator is seeded from it, the same way each time,
    with a warning (the resume failed with 'Expected a CPUGeneratorImplState of size 5056')."""
    from robotrl.utils import set_generator_state

    cuda_like = torch.arange(16, dtype=torch.uint8)
    draws = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(7)
        with pytest.warns(UserWarning, match="16-byte generator state does not fit this cpu generator"):
            set_generator_state(gen, cuda_like)
        draws.append(torch.rand(4, generator=gen))
    assert torch.equal(draws[0], draws[1])
    assert not torch.equal(draws[0], torch.rand(4, generator=torch.Generator().manual_seed(7)))
    with pytest.raises(TypeError):
        set_generator_state(torch.Generator(), torch.zeros(5056, dtype=torch.float32))
