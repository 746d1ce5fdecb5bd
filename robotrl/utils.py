"""Small shared utilities: device choice, seeding, RNG state (pickle-free) and the config section check.
Atomic file writes are :mod:`robotrl.files` (no torch there).

Importing this module does not import torch (the command line's non-training commands import it and
start in well under a second): the functions that need torch import it when called. The headless-rendering
choice the command line makes first thing (:func:`prefer_headless_rendering`) lives here too, not in
:mod:`robotrl.envs.video` (which re-exports it): the ``robotrl.envs`` package imports gymnasium and torch."""

from __future__ import annotations

import ctypes.util
import dataclasses
import hashlib
import os
import random
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from robotrl.errors import ConfigError

if TYPE_CHECKING:
    import torch

_T = TypeVar("_T")


def osmesa_available() -> bool:
    """True when the OSMesa shared library (Debian ``libosmesa6``) can be found."""
    return ctypes.util.find_library("OSMesa") is not None


def has_display() -> bool:
    """True when an X11 (``DISPLAY``) or Wayland (``WAYLAND_DISPLAY``) display is set."""
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def prefer_headless_rendering() -> str | None:
    """Choose OSMesa for MuJoCo before its GL backend is chosen, on a machine without a display.

    The ``robotrl`` command line calls this first thing, so camera recording (``cameras=[...]``,
    ``video_dir=...``) works headless with no environment variable set by hand. It sets
    ``MUJOCO_GL=osmesa`` and ``PYOPENGL_PLATFORM=osmesa`` only when ``MUJOCO_GL`` is unset, no
    display (``DISPLAY``/``WAYLAND_DISPLAY``) is present, mujoco is not imported yet and libOSMesa
    is installed; otherwise it changes nothing (a display's GLFW, or the user's choice, stays).

    Returns:
        the backend set (``"osmesa"``), or ``None`` when nothing was changed.
    """
    if os.environ.get("MUJOCO_GL", "").strip() or has_display() or "mujoco" in sys.modules:
        return None
    if not osmesa_available():
        return None
    os.environ["MUJOCO_GL"] = "osmesa"
    os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")
    return "osmesa"


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """``"auto"`` → CUDA when present, else CPU; anything else is passed to ``torch.device``.

    Raises:
        ValueError: ``"cuda"`` requested but no GPU is visible.
    """
    import torch

    if str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device=cuda was requested but no CUDA GPU is visible; use device=auto or device=cpu")
    return dev


def native_bf16(device: str | torch.device = "cpu") -> bool | None:
    """Whether ``device`` multiplies bfloat16 matrices natively (``None``: cannot tell).

    CUDA: ``torch.cuda.is_bf16_supported()``. CPU: the AVX512-BF16 or AMX-BF16 flag in
    ``/proc/cpuinfo`` (Linux only). Without them PyTorch emulates bf16 matmuls: on an
    AVX2 EPYC here a (7936, 64) x (64, 64) product took 66 ms in bf16 against 15 ms in
    float32, so ``matmul_dtype=bfloat16`` slows the Q-learning update instead of speeding it.
    """
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type != "cpu":
        return None
    try:
        with open("/proc/cpuinfo") as f:
            flags = f.read()
    except OSError:
        return None
    return "avx512_bf16" in flags or "amx_bf16" in flags


def set_seed(seed: int) -> None:
    """Seed Python, NumPy and torch (CPU and CUDA)."""
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def get_rng_state() -> dict:
    """Python, NumPy and torch RNG states as tensors/lists (loadable with ``weights_only=True``)."""
    import torch

    py = random.getstate()
    np_state = np.random.get_state()
    out = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": {"keys": torch.from_numpy(np_state[1].astype(np.int64)), "pos": int(np_state[2]),
                  "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])},
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_generator_state(gen: torch.Generator, state: torch.Tensor) -> None:
    """Restore a ``torch.Generator`` (any device's) from its ``get_state()`` byte tensor.

    ``state`` may sit on any device: a checkpoint read with ``map_location="cuda"`` (a resume on a GPU)
    carries it there, while ``Generator.set_state`` takes only a CPU byte tensor.

    A state written by a generator of the other device kind (a run checkpointed on a GPU, Philox, 16 bytes,
    resumed on a CPU, Mersenne Twister, 5056 bytes, or the reverse) cannot be carried over: ``gen`` is then
    seeded from the state's bytes (deterministic: the same checkpoint resumes the same way), with a warning.

    Raises:
        TypeError: ``state`` is not a byte tensor (torch's own error).
    """
    state, size = state.cpu(), gen.get_state().numel()
    if state.numel() != size:
        seed = int.from_bytes(hashlib.sha256(state.numpy().tobytes()).digest()[:8], "little")
        gen.manual_seed(seed)
        warnings.warn(f"a {state.numel()}-byte generator state does not fit this {gen.device.type} generator "
                      f"({size} bytes; written on another device kind): reseeded from it", stacklevel=2)
        return
    gen.set_state(state)


def set_rng_state(state: dict) -> None:
    """Inverse of :func:`get_rng_state`.

    The state's tensors may sit on any device: a checkpoint read with ``map_location="cuda"``
    (a resume on a GPU) carries them there, while torch takes RNG states only as CPU byte tensors.
    CUDA generators are restored for the devices both the state and this machine have.
    """
    import torch

    py = state["python"]
    random.setstate((py[0], tuple(py[1]), py[2]))
    n = state["numpy"]
    np.random.set_state(("MT19937", n["keys"].cpu().numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        for i, gen_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(gen_state.cpu(), i)


def check_schedule(obj, section: str, positive: tuple[str, ...] = (), non_negative: tuple[str, ...] = (),
                   fractions: tuple[str, ...] = ()) -> None:
    """Validate the counts of a schedule dataclass (``TrainerConfig``, ``OnPolicyConfig``).

    Args:
        obj: the dataclass instance.
        section: its config prefix for the message (``"trainer"``, ``"agent.onpolicy"``).
        positive: fields that must be integers >= 1 (batch sizes, intervals, env counts).
        non_negative: fields that must be integers >= 0 (step budgets, warmups); ``None`` allowed.
        fractions: fields that must lie in [0, 1].

    Raises:
        ConfigError: the first bad field, its value and the allowed range.
    """
    def integral(v) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

    for name in positive:
        v = getattr(obj, name)
        if not integral(v) or v < 1:
            raise ConfigError(f"{section}.{name}={v!r} must be a whole number >= 1")
    for name in non_negative:
        v = getattr(obj, name)
        if v is not None and (not integral(v) or v < 0):
            raise ConfigError(f"{section}.{name}={v!r} must be a whole number >= 0")
    for name in fractions:
        v = getattr(obj, name)
        if not isinstance(v, (int, float, np.number)) or isinstance(v, bool) or not 0.0 <= float(v) <= 1.0:
            raise ConfigError(f"{section}.{name}={v!r} must lie in [0, 1]")


def config_dataclass(cls: type[_T], given: Mapping[str, Any] | None, section: str) -> _T:
    """Build the dataclass ``cls`` (a schedule or settings class) from a config section, refusing unknown keys.

    Args:
        cls: a dataclass (``TrainerConfig``, ``OnPolicyConfig``, ``RayCollectorConfig``, ...).
        given: the section as a plain mapping (``OmegaConf.to_container(cfg.trainer, resolve=True)``);
            ``None``: no keys (the defaults).
        section: the section's config path for the message (``"trainer"``, ``"agent.onpolicy"``).

    Returns:
        ``cls(**given)``.

    Raises:
        ConfigError: keys that are not fields of ``cls``: one line naming them and the known keys.
    """
    given = dict(given or {})
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = set(given) - known
    if unknown:
        raise ConfigError(f"unknown {section} settings {sorted(unknown)}; known: {sorted(known)}")
    return cls(**given)


def _flat(cfg: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in cfg.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat(v, key + "."))
        else:
            out[key] = v
    return out


def log_run_config(writer, config: dict, metrics: dict, step: int = 0) -> None:
    """Write a run's composed config and hyper-parameters into ``writer``'s OWN event file.

    TensorBoard gets the config as text (tag ``config``, YAML in a code block) and, in its
    HPARAMS tab, every config leaf (dotted keys; lists and ``None`` as text) against the run's
    ``metrics`` (e.g. ``{"summary/final_return": 12.3}``), which are also logged as scalars at
    ``step``. Unlike ``SummaryWriter.add_hparams``, which opens a second event file in a
    sub-directory, everything goes into the writer's one file.

    Args:
        writer: a ``torch.utils.tensorboard.SummaryWriter``.
        config: the resolved config as plain containers (``OmegaConf.to_container(cfg, resolve=True)``).
        metrics: name -> finite float.
        step: the step of the metric scalars.
    """
    import yaml
    from torch.utils.tensorboard.summary import hparams

    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False)
    writer.add_text("config", "    " + text.replace("\n", "\n    "), step)  # indented: a code block in TensorBoard
    hp = {k: (v if isinstance(v, (bool, int, float, str)) else str(v)) for k, v in _flat(config).items()}
    exp, ssi, sei = hparams(hp, dict(metrics))
    fw = writer._get_file_writer()
    for s in (exp, ssi, sei):
        fw.add_summary(s)
    for k, v in metrics.items():
        writer.add_scalar(k, float(v), step)
    writer.flush()
