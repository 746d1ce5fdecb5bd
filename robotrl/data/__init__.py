"""The shared data layer: Minari I/O, one batch type, one replay buffer, normalisers.

Symbols used throughout: ``M`` transitions, ``E`` episodes, ``B`` batch, ``Do``/``Da``
observation/action size, ``To`` observation history, ``Ta`` action chunk length.
"""

from robotrl.data.batch import Batch
from robotrl.data.dataset import OfflineData, check_spaces, load_dataset, resolve_dataset_path
from robotrl.data.mixing import LinearSchedule, MixedSampler
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.data.replay import ReplayBuffer
from robotrl.data.returns import discounted_return_to_go, mc_returns, split_discontinuous
from robotrl.data.spaces import FlatLayout, flat_dim, flat_observation_space, layout_for_space
from robotrl.data.writer import Episode, datasets_root, write_dataset

__all__ = [
    "Batch", "OfflineData", "load_dataset", "check_spaces", "resolve_dataset_path",
    "LinearSchedule", "MixedSampler", "ActionScaler", "ObservationNormalizer", "ReplayBuffer",
    "discounted_return_to_go", "mc_returns", "split_discontinuous",
    "FlatLayout", "flat_dim", "flat_observation_space", "layout_for_space",
    "Episode", "datasets_root", "write_dataset",
]
