"""TorchScript export of policies with camera inputs.

A pixel policy's ``forward(state (B, Ds), {camera: uint8 (B, H, W, C)})`` is traced with
``torch.jit.trace`` (dict inputs allowed, ``strict=False``) in eval mode, so the image scaling,
state normalisation and action scaling inside it are part of the exported graph (no random
shift: augmentation runs in training mode only). The file is written atomically and checked
by reloading it and comparing its actions with the eager policy's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from robotrl.files import atomic_write
from robotrl.errors import RobotRLError

__all__ = ["export_pixel_torchscript", "export_pixel_onnx"]


def _examples(image_shapes: Mapping[str, tuple[int, ...]], state_dim: int, batch: int, horizon: int,
              g: torch.Generator) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Random example inputs: state ``(B[, To], Ds)`` and frames ``{key: uint8 (B[, To], H, W, C)}`` (``To`` only when
    ``horizon > 1``)."""
    lead = (batch,) if horizon == 1 else (batch, horizon)
    state = torch.randn(*lead, state_dim, generator=g)
    return state, {k: torch.randint(0, 256, (*lead, *s), generator=g, dtype=torch.uint8) for k, s in image_shapes.items()}


def export_pixel_torchscript(policy: nn.Module, path: str | os.PathLike, image_shapes: Mapping[str, tuple[int, ...]],
                             state_dim: int, *, batch: int = 2, atol: float = 1e-5, horizon: int = 1) -> Path:
    """Trace ``policy`` with example inputs, save it to ``path`` (atomic) and verify the reloaded copy.

    Args:
        policy: ``forward(state (B, Ds) float32, {key: uint8 (B, H, W, C)}) -> (B, Da)``.
        path: the ``.pt`` TorchScript file to write.
        image_shapes: cameras ``{key: (H, W, C)}``.
        state_dim: ``Ds``.
        batch: batch size of the example inputs (the traced graph accepts any ``B``).
        atol: largest allowed difference between the eager and the reloaded actions.
        horizon: ``To``; above 1 the inputs are histories, state ``(B, To, Ds)`` and frames ``(B, To, H, W, C)``.

    Returns:
        ``path``. Load it with ``torch.jit.load(path)`` (no robotrl import needed).

    Raises:
        RobotRLError: the exported copy's actions differ from the policy's.
    """
    policy = policy.eval()
    device = next((p.device for p in policy.parameters()), torch.device("cpu"))
    state, images = _examples(image_shapes, state_dim, batch, horizon, torch.Generator().manual_seed(0))
    state, images = state.to(device), {k: v.to(device) for k, v in images.items()}
    with torch.no_grad():
        traced = torch.jit.trace(policy, (state, images), strict=False, check_trace=False)
        want = policy(state, images)
    path = Path(path)
    atomic_write(path, lambda f: torch.jit.save(traced, f))
    loaded = torch.jit.load(str(path), map_location=device)
    with torch.no_grad():
        got = loaded(state, images)
    if not torch.allclose(got, want, atol=atol, rtol=0):
        raise RobotRLError(f"TorchScript export of {type(policy).__name__} differs from the policy by "
                           f"{(got - want).abs().max().item():.3g} > {atol}; the policy has data-dependent control flow")
    return path


class _Positional(nn.Module):
    """``forward(state, frame_0, frame_1, ...)`` -> the policy's ``forward(state, {key_i: frame_i})`` (ONNX has no dict inputs)."""

    def __init__(self, policy: nn.Module, keys: list[str]):
        super().__init__()
        self.policy, self.keys = policy, list(keys)

    def forward(self, state: torch.Tensor, *frames: torch.Tensor) -> torch.Tensor:
        return self.policy(state, dict(zip(self.keys, frames)))


def export_pixel_onnx(policy: nn.Module, path: str | os.PathLike, image_shapes: Mapping[str, tuple[int, ...]],
                      state_dim: int, *, batch: int = 2, opset: int = 17, atol: float = 1e-4, horizon: int = 1) -> Path:
    """Export ``policy`` to ONNX with image inputs and check it with onnxruntime.

    Inputs (batch axis ``B`` dynamic): ``state`` float32 ``(B, Ds)`` and one uint8 input
    ``(B, H, W, C)`` per camera (with ``horizon = To > 1``: ``(B, To, Ds)`` and ``(B, To, H, W, C)``, the last
    ``To`` steps oldest first), named ``image_0``, ``image_1``, ... in ``image_shapes`` order
    (the order is also stored as the model's metadata ``image_keys``, comma-joined); output
    ``actions`` float32 ``(B, Da)`` in raw env units.

    Raises:
        RobotRLError: the export fails, or onnxruntime's actions differ from the policy's by more than ``atol``.
    """
    import numpy as np
    import onnx
    import onnxruntime as ort

    policy = policy.eval().cpu()
    keys = list(image_shapes)
    state, images = _examples(image_shapes, state_dim, batch, horizon, torch.Generator().manual_seed(0))
    frames = [images[k] for k in keys]
    names = [f"image_{i}" for i in range(len(keys))]
    wrapped = _Positional(policy, keys).eval()
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with torch.no_grad():
            want = wrapped(state, *frames).numpy()
            torch.onnx.export(wrapped, (state, *frames), str(tmp), input_names=["state", *names], output_names=["actions"],
                              dynamic_axes={n: {0: "B"} for n in ["state", *names, "actions"]}, opset_version=opset,
                              dynamo=False)
        model = onnx.load(str(tmp))
        entry = model.metadata_props.add()
        entry.key, entry.value = "image_keys", ",".join(keys)
        atomic_write(path, lambda f: f.write(model.SerializeToString()))
    except RobotRLError:
        raise
    except Exception as exc:
        raise RobotRLError(f"ONNX export of {type(policy).__name__} failed ({type(exc).__name__}: {exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = sess.run(["actions"], {"state": state.numpy(), **{n: f.numpy() for n, f in zip(names, frames)}})[0]
    if not np.allclose(got, want, atol=atol, rtol=0):
        raise RobotRLError(f"ONNX export of {type(policy).__name__} differs from the policy by {np.abs(got - want).max():.3g} > {atol}")
    return path
