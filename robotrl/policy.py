"""The deployable policy: normalisers + actor, separate from every training-only part.

LeRobot's habit: what runs on a robot (or in evaluation) is a small ``nn.Module`` that
maps raw flat observations ``(B, Do)`` to raw env actions ``(B, Da)``, with its
normalisers inside; critics, target networks and optimizers stay in the agent.

A policy is saved as ``{"target": "robotrl.agents.<...>.Class", "kwargs": {...},
"state_dict": {...}}``. :func:`build_policy` rebuilds it; only classes under
``robotrl.agents.`` may be named, so a checkpoint cannot make robotrl import arbitrary
code.

:func:`save_pretrained` / :func:`from_pretrained` keep a policy as a directory of safetensors
weights and a JSON config, loadable without Hydra, the run directory or torch's pickle format.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch
from torch import nn

from robotrl.errors import CheckpointError, SpaceMismatchError

_ALLOWED_PREFIX = "robotrl.agents."

@runtime_checkable
class Policy(Protocol):
    """What evaluation, deployment and export need from a policy.

    ``forward(obs (B, Do) raw) -> action (B, Da) raw`` with no gradient needed;
    ``reset()`` clears internal state (chunk queues) at episode starts;
    ``spec()`` returns the JSON-able constructor kwargs.
    """

    obs_dim: int
    action_dim: int

    def forward(self, obs: torch.Tensor) -> torch.Tensor: ...

    def reset(self, env_ids: np.ndarray | None = None) -> None: ...

    def spec(self) -> dict: ...


@torch.no_grad()
def act(policy: nn.Module, obs: np.ndarray | Mapping) -> np.ndarray:
    """Run ``policy`` on NumPy observations ``(B, Do)`` or ``(Do,)``; returns float32 actions.

    A camera observation (a ``Dict``: :class:`robotrl.envs.pixels.PixelObservation`) goes to the pixel
    policy's own ``act_observation`` (:class:`robotrl.vision.frontend.ObservationFrontend`), which splits
    it into the state and the frames with the layout saved in the policy.

    Raises:
        SpaceMismatchError: a ``Dict`` observation for a policy that takes flat ones.
    """
    if isinstance(obs, Mapping):
        if not hasattr(policy, "act_observation"):
            raise SpaceMismatchError(f"{type(policy).__name__} takes flat observations (B, Do), not a Dict with "
                                     f"keys {sorted(obs)}; make the env without pixels=[...]")
        return policy.act_observation(obs)
    device = next((p.device for p in policy.parameters()), torch.device("cpu"))
    x = torch.as_tensor(np.asarray(obs, np.float32), device=device)
    single = x.ndim == 1
    y = policy(x[None] if single else x)
    y = y.cpu().numpy()
    return y[0] if single else y


def policy_state(policy: nn.Module) -> dict:
    """Serialisable description of ``policy`` (class path, kwargs, weights)."""
    cls = type(policy)
    return {"target": f"{cls.__module__}.{cls.__qualname__}", "kwargs": policy.spec(), "state_dict": policy.state_dict()}


#: policy classes merged into another (issue 41: cameras are an option of one class per algorithm), so that
#: checkpoints naming the old class keep loading: old class path -> (new class path, constructor kwargs the old
#: class fixed, added where the saved kwargs lack them). The saved ``state_dim`` becomes ``obs_dim``.
_RENAMED: dict[str, tuple[str, dict[str, Any]]] = {
    "robotrl.agents.qlearning.pixels.PixelSACPolicy": ("robotrl.agents.qlearning.policy.QLPolicy", {}),
    "robotrl.agents.residual.pixels.PixelResidualPolicy": ("robotrl.agents.residual.policy.ResidualPolicy",
                                                           {"head": "tanh"}),
    "robotrl.agents.bc.pixels.PixelBCPolicy": ("robotrl.agents.bc.policy.BCPolicy", {}),
    "robotrl.agents.diffusion.pixels.PixelDiffusionPolicy": ("robotrl.agents.diffusion.policy.DiffusionPolicy", {}),
}


def renamed_policy(target: str, kwargs: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The class path and constructor kwargs that rebuild a policy saved as ``(target, kwargs)``: unchanged, or,
    for a class merged into another (:data:`_RENAMED`), the new class with the kwargs renamed (``state_dim`` ->
    ``obs_dim``) and completed."""
    if target not in _RENAMED:
        return target, dict(kwargs)
    new, fixed = _RENAMED[target]
    out = {("obs_dim" if k == "state_dim" else k): v for k, v in kwargs.items()}
    return new, {**fixed, **out}


def policy_class(target: str) -> Callable[..., nn.Module]:
    """The policy class named ``target`` (``"robotrl.agents.<module>.<Class>"``); for the old name of a merged
    class (:data:`_RENAMED`) a constructor of the class it became that takes the old keyword arguments.

    Raises:
        CheckpointError: ``target`` is not under ``robotrl.agents.`` (a checkpoint may not
            make robotrl import arbitrary code) or does not exist in this version.
    """
    if not target.startswith(_ALLOWED_PREFIX):
        raise CheckpointError(f"refusing to build policy class {target!r}: only classes under {_ALLOWED_PREFIX} are allowed")
    if target in _RENAMED:
        new = policy_class(_RENAMED[target][0])
        return lambda **kwargs: new(**renamed_policy(target, kwargs)[1])
    module, _, name = target.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise CheckpointError(f"policy class {target!r} named by the checkpoint does not exist in this robotrl version") from exc


def build_policy(state: dict, device: str | torch.device = "cpu") -> nn.Module:
    """Rebuild a policy saved by :func:`policy_state`.

    Raises:
        CheckpointError: the class is not a robotrl agent class, cannot be imported, or
            the weights do not fit it.
    """
    target, kwargs = renamed_policy(state.get("target", ""), state["kwargs"])
    policy = policy_class(target)(**kwargs)
    try:
        policy.load_state_dict(state["state_dict"])
    except RuntimeError as exc:
        raise CheckpointError(f"checkpoint weights do not fit {target}: {exc}") from exc
    return policy.to(device).eval()


def load_policy(checkpoint: str, device: str | torch.device = "cpu") -> nn.Module:
    """The deployable policy stored in a robotrl checkpoint (file or run directory)."""
    from robotrl.checkpoint import load_checkpoint

    state = load_checkpoint(checkpoint)
    if "policy" not in state:
        raise CheckpointError(f"{checkpoint} holds no policy; is it a robotrl training checkpoint?")
    return build_policy(state["policy"], device)


WEIGHTS_FILE = "model.safetensors"
CONFIG_FILE = "config.json"


def save_pretrained(policy: nn.Module, path) -> Path:
    """Save a deployable policy as a directory that loads without Hydra, torch pickles or the run.

    Writes ``path/model.safetensors`` (every weight and buffer, normalisers included, as
    safetensors: no code runs when it is read) and ``path/config.json``
    (``{"target": "robotrl.agents.<...>.Class", "kwargs": policy.spec(), "robotrl_version": ...}``),
    each atomically (temporary sibling, then ``os.replace``), the weights first.

    Args:
        policy: a robotrl policy (``Policy``: a class under ``robotrl.agents.`` with ``spec()``).
        path: the directory (created).

    Returns:
        The directory.

    Raises:
        CheckpointError: ``policy`` is not a robotrl policy class.
    """
    import json
    import os

    from safetensors.torch import save_model

    import robotrl

    state = policy_state(policy)
    policy_class(state["target"])  # only robotrl.agents classes: what from_pretrained will accept
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{WEIGHTS_FILE}.tmp{os.getpid()}"
    save_model(policy, str(tmp))
    os.replace(tmp, out / WEIGHTS_FILE)
    cfg = {"target": state["target"], "kwargs": state["kwargs"], "robotrl_version": robotrl.__version__, "format": 1}
    tmp = out / f".{CONFIG_FILE}.tmp{os.getpid()}"
    tmp.write_text(json.dumps(cfg, indent=2, sort_keys=True))
    os.replace(tmp, out / CONFIG_FILE)
    return out


def from_pretrained(path, device: str | torch.device = "cpu") -> nn.Module:
    """Load a policy saved by :func:`save_pretrained` (a directory), or the policy of a robotrl
    training checkpoint (a run directory or ``.pt`` file, as :func:`load_policy`).

    Returns:
        The policy in eval mode on ``device``: raw observations ``(B, Do)`` in, raw actions
        ``(B, Da)`` out (use :func:`act` for NumPy).

    Raises:
        CheckpointError: a missing or unreadable directory, a class outside ``robotrl.agents.``,
            or weights that do not fit the class.
    """
    import json

    from safetensors.torch import load_model

    p = Path(path)
    if not (p / CONFIG_FILE).is_file():
        if (p / WEIGHTS_FILE).exists():
            raise CheckpointError(f"{p} holds {WEIGHTS_FILE} but no {CONFIG_FILE}; save it again with save_pretrained")
        return load_policy(str(p), device)
    try:
        cfg = json.loads((p / CONFIG_FILE).read_text())
        target, kwargs = cfg["target"], cfg["kwargs"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{p / CONFIG_FILE} is not a robotrl policy config ({exc}); save it again with "
                              "save_pretrained") from None
    policy = policy_class(target)(**kwargs)
    try:
        load_model(policy, str(p / WEIGHTS_FILE), strict=True)
    except (OSError, RuntimeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"the weights in {p / WEIGHTS_FILE} do not fit {target}: {first}") from None
    return policy.to(device).eval()
