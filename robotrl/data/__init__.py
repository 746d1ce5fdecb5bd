"""The shared data layer: Minari I/O, one batch type, one replay buffer, normalisers.

Symbols used throughout: ``M`` transitions, ``E`` episodes, ``B`` batch, ``Do``/``Da``
observation/action size, ``To`` observation history, ``Ta`` action chunk length.

The torch-free parts (spaces, the dataset writer) are imported here; the torch-based ones
(batch, dataset loading, replay, normalisers, returns, mixing) on first use, so that
``robotrl collect list=true`` and the dataset recipes' bookkeeping do not import torch.
"""

from typing import TYPE_CHECKING

from robotrl.data.spaces import FlatLayout, flat_dim, flat_observation_space, layout_for_space
from robotrl.data.writer import Episode, datasets_root, write_dataset

if TYPE_CHECKING:
    from robotrl.data.batch import Batch
    from robotrl.data.dataset import OfflineData, check_spaces, load_dataset, resolve_dataset_path
    from robotrl.data.mixing import LinearSchedule, MixedSampler
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
    from robotrl.data.replay import ReplayBuffer
    from robotrl.data.returns import discounted_return_to_go, mc_returns, split_discontinuous

_LAZY = {
    "Batch": "batch",
    "OfflineData": "dataset", "check_spaces": "dataset", "load_dataset": "dataset", "resolve_dataset_path": "dataset",
    "LinearSchedule": "mixing", "MixedSampler": "mixing",
    "ActionScaler": "normalizer", "ObservationNormalizer": "normalizer",
    "ReplayBuffer": "replay",
    "discounted_return_to_go": "returns", "mc_returns": "returns", "split_discontinuous": "returns",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"robotrl.data.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'robotrl.data' has no attribute {name!r}")


__all__ = [
    "Batch", "OfflineData", "load_dataset", "check_spaces", "resolve_dataset_path",
    "LinearSchedule", "MixedSampler", "ActionScaler", "ObservationNormalizer", "ReplayBuffer",
    "discounted_return_to_go", "mc_returns", "split_discontinuous",
    "FlatLayout", "flat_dim", "flat_observation_space", "layout_for_space",
    "Episode", "datasets_root", "write_dataset",
]
