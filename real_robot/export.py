"""Export trained policies (with their normalisers) to TorchScript and ONNX, and load them to deploy.

The exporter works on anything that follows :class:`robotrl.policy.Policy`:

* MLP policies (``BCPolicy``): ``forward(obs (B, Do)) -> (B, Da)``;
* chunked policies: ``forward(obs (B, Do)) -> (B, Ta, Da)`` and attributes
  ``chunk_len`` (``Ta``) and ``act_steps`` (``Te``);
* extension point for stochastic/iterative policies (diffusion with ``K`` DDIM steps):
  define ``export_module() -> nn.Module``, a deterministic module mapping ``obs (B, Do)``
  to ``(B, Ta, Da)`` with the number of denoising steps fixed and the noise fixed (or
  DDIM ``eta = 0``); the exporter traces that module instead of ``forward``.

Normalisers are buffers of the policy, so they are inside the traced graph: the deploy
side needs neither the training code nor the statistics. Every export writes
``policy_meta.json`` (``obs_dim``, ``action_dim``, ``chunk_len``, ``act_steps``, the
source class) next to ``policy.torchscript.pt`` and ``policy.onnx``.

Deploy side: :func:`load_deploy_policy` runs an export with onnxruntime or
``torch.jit.load``, or a training checkpoint through :func:`robotrl.policy.load_policy`
(``weights_only`` loading). Only load TorchScript files you trust: unlike ONNX they hold
code. Every loader returns a :class:`DeployPolicy`: ``obs (Do,) -> chunk (Ta, Da)``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from robotrl.errors import CheckpointError

META = "policy_meta.json"
TS_FILE = "policy.torchscript.pt"
ONNX_FILE = "policy.onnx"


class _ChunkOutput(nn.Module):
    """``obs (B, Do) -> (B, Ta, Da)`` for any policy module (``Ta = 1`` for MLP policies)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.module = module

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        y = self.module(obs)
        return y.unsqueeze(1) if y.dim() == 2 else y


def export_policy(policy: nn.Module, out_dir: str | os.PathLike, formats=("torchscript", "onnx"), opset: int = 17) -> dict:
    """Export ``policy`` to ``out_dir``; returns ``{"meta": path, "torchscript": path, "onnx": path}``.

    Raises:
        ValueError: unknown format, or the policy lacks ``obs_dim``/``action_dim``.
        RuntimeError: tracing/export failed (the message names the format).
    """
    bad = set(formats) - {"torchscript", "onnx"}
    if bad:
        raise ValueError(f"unknown export formats {sorted(bad)}; choose from 'torchscript', 'onnx'")
    if not hasattr(policy, "obs_dim") or not hasattr(policy, "action_dim"):
        raise ValueError("the policy must expose obs_dim and action_dim (the robotrl Policy protocol)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    policy = policy.eval().cpu()
    module = policy.export_module() if hasattr(policy, "export_module") else policy
    wrapped = _ChunkOutput(module).eval()
    example = torch.zeros(2, int(policy.obs_dim))
    with torch.no_grad():
        ta = int(wrapped(example).shape[1])
    te = int(getattr(policy, "act_steps", ta) or ta)
    cls = type(policy)
    meta = {"obs_dim": int(policy.obs_dim), "action_dim": int(policy.action_dim), "chunk_len": ta, "act_steps": te,
            "source": f"{cls.__module__}.{cls.__qualname__}", "spec": policy.spec() if hasattr(policy, "spec") else {},
            "inputs": {"obs": ["B", int(policy.obs_dim)]}, "outputs": {"actions": ["B", ta, int(policy.action_dim)]}}
    paths = {"meta": out / META}
    with torch.no_grad():
        if "torchscript" in formats:
            try:
                traced = torch.jit.trace(wrapped, example, check_trace=True)
            except Exception as exc:
                raise RuntimeError(f"TorchScript export failed: {exc}; give the policy an export_module()") from exc
            traced.save(str(out / TS_FILE))
            paths["torchscript"] = out / TS_FILE
        if "onnx" in formats:
            try:
                torch.onnx.export(wrapped, (example,), str(out / ONNX_FILE), input_names=["obs"], output_names=["actions"],
                                  dynamic_axes={"obs": {0: "B"}, "actions": {0: "B"}}, opset_version=opset, dynamo=False)
            except Exception as exc:
                raise RuntimeError(f"ONNX export failed: {exc}; give the policy an export_module()") from exc
            paths["onnx"] = out / ONNX_FILE
    meta["files"] = {k: v.name for k, v in paths.items() if k != "meta"}
    (out / META).write_text(json.dumps(meta, indent=2, default=str))
    return paths


@dataclass
class DeployPolicy:
    """A policy ready for the control loop: ``obs (Do,) -> chunk (Ta, Da)`` float32.

    Attributes:
        obs_dim, action_dim, chunk_len, act_steps: ``Do``, ``Da``, ``Ta``, ``Te``.
        backend: ``"onnx"``, ``"torchscript"`` or ``"torch"``.
        batch_fn: ``(B, Do) -> (B, Ta, Da)``.
    """

    obs_dim: int
    action_dim: int
    chunk_len: int
    act_steps: int
    backend: str
    batch_fn: Callable[[np.ndarray], np.ndarray]

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        obs = np.asarray(obs, np.float32).reshape(1, -1)
        if obs.shape[1] != self.obs_dim:
            raise ValueError(f"observation has {obs.shape[1]} entries, the policy takes Do={self.obs_dim}")
        return self.batch_fn(obs)[0]


def load_deploy_policy(path: str | os.PathLike, backend: str = "auto") -> DeployPolicy:
    """Load a policy for deployment.

    Args:
        path: an export directory (with ``policy_meta.json``), a ``.onnx`` /
            ``.torchscript.pt`` file inside one, or a robotrl training checkpoint / run dir.
        backend: ``"auto"`` (ONNX if exported, else TorchScript), ``"onnx"``,
            ``"torchscript"`` or ``"torch"`` (training checkpoint).

    Raises:
        CheckpointError: nothing loadable at ``path`` or the requested backend is missing.
    """
    p = Path(path)
    export_dir = p if (p / META).is_file() else (p.parent if (p.parent / META).is_file() else None)
    if export_dir is None or backend == "torch":
        return _from_checkpoint(p)
    meta = json.loads((export_dir / META).read_text())
    if p.suffix == ".onnx":
        backend = "onnx"
    elif p.name.endswith(".torchscript.pt"):
        backend = "torchscript"
    if backend == "auto":
        backend = "onnx" if (export_dir / ONNX_FILE).is_file() else "torchscript"
    if backend == "onnx":
        fn = _onnx_fn(export_dir / ONNX_FILE)
    elif backend == "torchscript":
        fn = _ts_fn(export_dir / TS_FILE)
    else:
        raise CheckpointError(f"unknown backend {backend!r}; use auto, onnx, torchscript or torch")
    return DeployPolicy(int(meta["obs_dim"]), int(meta["action_dim"]), int(meta["chunk_len"]), int(meta["act_steps"]), backend, fn)


def _onnx_fn(path: Path):
    if not path.is_file():
        raise CheckpointError(f"no ONNX file at {path}; export with formats=('onnx',)")
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return lambda obs: sess.run(["actions"], {"obs": np.asarray(obs, np.float32)})[0]


def _ts_fn(path: Path):
    if not path.is_file():
        raise CheckpointError(f"no TorchScript file at {path}; export with formats=('torchscript',)")
    mod = torch.jit.load(str(path), map_location="cpu").eval()

    def fn(obs):
        with torch.no_grad():
            return mod(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    return fn


def _from_checkpoint(p: Path) -> DeployPolicy:
    from robotrl.policy import load_policy

    policy = load_policy(str(p))
    wrapped = _ChunkOutput(policy).eval()

    def fn(obs):
        with torch.no_grad():
            return wrapped(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    ta = int(fn(np.zeros((1, policy.obs_dim), np.float32)).shape[1])
    return DeployPolicy(int(policy.obs_dim), int(policy.action_dim), ta, int(getattr(policy, "act_steps", ta) or ta), "torch", fn)
