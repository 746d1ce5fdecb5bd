"""Scaling out on Ray (optional extra ``robotrl[ray]``): rollout workers, evaluation workers, sweeps.

- :mod:`robotrl.distributed.collector`: :class:`RayRolloutCollector`, the on-policy loop's
  rollouts from ``W`` Ray actors, each stepping a vector env with a copy of the policy
  (weights sent as NumPy arrays every iteration). ``collector=ray collector.workers=W``.
- :mod:`robotrl.distributed.evaluation`: :func:`evaluate_on_ray`, evaluation episodes split
  over Ray workers (``robotrl eval ray_workers=W``, ``collector.eval_workers=W`` in training).
- :mod:`robotrl.distributed.study`: the study summary of a Hydra multirun (IQM and 95 %
  bootstrap CI per configuration), written at the end of ``robotrl train -m`` by a Hydra
  callback whatever the launcher (basic, joblib, Ray).

Ray is imported lazily: without the extra, everything else in robotrl works and these entry
points raise :class:`RayUnavailableError` with the install command.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from robotrl.errors import RobotRLError


class RayUnavailableError(RobotRLError, ImportError):
    """Ray is not installed (``pip install 'robotrl[ray]'``)."""


class WorkerFailedError(RobotRLError, RuntimeError):
    """A Ray rollout or evaluation worker died (or timed out) and the failure policy does not continue."""


def require_ray():
    """The ``ray`` module.

    Raises:
        RayUnavailableError: ray is not installed; the message gives the install command.
    """
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - exercised where ray is missing
        raise RayUnavailableError("collector=ray / evaluation on Ray / the Ray sweep need Ray: "
                                  "pip install 'robotrl[ray]' (or drop collector=ray: local vector envs)") from exc
    return ray


def init_ray(address: str | None = None, num_cpus: int | None = None) -> Any:
    """Connect to a Ray cluster unless this process is connected already.

    Args:
        address: ``None``: ``$RAY_ADDRESS`` if set, else a new local cluster on this machine
            (``num_cpus`` CPUs, no dashboard, on 127.0.0.1 only: :func:`loopback_only`); ``"auto"``: the cluster started with
            ``ray start --head`` on this node; ``"host:port"``: that cluster's head.
        num_cpus: CPUs of a new local cluster (``None``: all of this machine's).

    Returns:
        the ``ray`` module.
    """
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        loopback_only()
    ray = require_ray()
    if ray.is_initialized():
        return ray
    if address:
        ray.init(address=address)
    else:
        ray.init(address="local", num_cpus=num_cpus, include_dashboard=False)
    return ray


def loopback_only() -> None:
    """Make a Ray cluster started by this process (and its children) single-node on 127.0.0.1.

    Ray picks the node's routable address even for a local cluster (``_node_ip_address="127.0.0.1"``
    is turned back into it); with ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` it uses the loopback
    address for every server it starts (GCS, raylet, object manager, workers). Usage-stats
    reporting is switched off (``RAY_USAGE_STATS_ENABLED=0``): nothing leaves the machine.
    Existing settings of these variables are kept.
    """
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import sys

    constants = sys.modules.get("ray._private.ray_constants")
    if constants is not None and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        constants.ENABLE_RAY_CLUSTER = False  # ray imported before: its constant was read at import


def state_to_arrays(state: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """A module's ``state_dict`` as NumPy arrays on the CPU (what is sent to workers: never a pickled module)."""
    return {k: v.detach().cpu().numpy() for k, v in state.items()}


def arrays_to_state(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Inverse of :func:`state_to_arrays` (copies: arrays from Ray's object store are read-only)."""
    return {k: torch.from_numpy(np.array(v, copy=True)) for k, v in arrays.items()}


def split_envs(num_envs: int, workers: int) -> list[tuple[int, int]]:
    """``(offset, count)`` of each worker's envs: ``num_envs`` split as evenly as possible, in order.

    Raises:
        ValueError: fewer envs than workers, or a count below 1.
    """
    if workers < 1 or num_envs < workers:
        raise ValueError(f"{num_envs} envs cannot be split over {workers} workers: each worker needs at least one env "
                         "(raise agent.onpolicy.num_envs or lower collector.workers)")
    base, extra = divmod(num_envs, workers)
    out, off = [], 0
    for k in range(workers):
        n = base + (1 if k < extra else 0)
        out.append((off, n))
        off += n
    return out
