"""Atomic, pickle-free checkpoints.

A checkpoint is a ``dict`` of tensors, numbers, strings, lists and dicts written with
``torch.save`` to a temporary file in the same directory, flushed to disk, then moved
over the final name with ``os.replace`` (:func:`robotrl.files.atomic_write`; owner-only
files) — a kill at any moment leaves either the old or the new file, never half of one. Loading always uses ``torch.load(weights_only=True)``:
nothing in a checkpoint is unpickled into arbitrary objects.

NumPy arrays (replay buffers) go to ``.npz`` files the same way and are read with
``allow_pickle=False``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from robotrl.errors import CheckpointError
from robotrl.files import atomic_write


def save_checkpoint(path: str | os.PathLike, state: dict) -> Path:
    """Write ``state`` to ``path`` atomically (see module doc). Returns the path."""
    return atomic_write(Path(path), lambda f: torch.save(state, f))


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Read a checkpoint with ``weights_only=True``.

    Raises:
        CheckpointError: missing file, or a file that is truncated/corrupt or holds
            objects that are not plain tensors and containers.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoints" / "latest.pt" if (path / "checkpoints" / "latest.pt").exists() else path / "latest.pt"
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}; pass a run directory or a .pt file written by robotrl train")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {path} cannot be read safely ({type(exc).__name__}: {str(exc)[:200]}); it is truncated, "
            "corrupt, or holds pickled objects robotrl refuses to load"
        ) from exc


def save_arrays(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> Path:
    """Write NumPy arrays as ``.npz`` atomically."""
    return atomic_write(Path(path), lambda f: np.savez(f, **{k: np.asarray(v) for k, v in arrays.items()}))


def load_arrays(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read an ``.npz`` written by :func:`save_arrays` (``allow_pickle=False``).

    Raises:
        CheckpointError: missing or corrupt file.
    """
    try:
        with np.load(Path(path), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception as exc:
        raise CheckpointError(f"array file {path} cannot be read ({type(exc).__name__}: {exc})") from exc
