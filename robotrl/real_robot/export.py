"""Export trained policies (with their normalisers) to TorchScript and ONNX, and load them to deploy.

The exporter works on anything that follows :class:`robotrl.policy.Policy`:

* MLP policies (``BCPolicy``): ``forward(obs (B, Do)) -> (B, Da)``;
* chunked policies: ``forward(obs (B, Do)) -> (B, Ta, Da)`` and attributes
  ``chunk_len`` (``Ta``) and ``act_steps`` (``Te``); a policy on the last ``To > 1`` observations
  (attribute ``To``) exports ``obs (B, To, Do)``, oldest first, with ``obs_horizon`` in the metadata;
* extension point for stochastic/iterative policies (diffusion with ``K`` DDIM steps):
  define ``export_module() -> nn.Module``, a deterministic module mapping ``obs (B, Do)``
  to ``(B, Ta, Da)`` with the number of denoising steps fixed and the noise fixed (or
  DDIM ``eta = 0``); the exporter traces that module instead of ``forward``.

Normalisers are buffers of the policy, so they are inside the traced graph: the deploy
side needs neither the training code nor the statistics. Every export writes
``policy_meta.json`` (``obs_dim``, ``action_dim``, ``chunk_len``, ``act_steps``, the
source class) next to ``policy.torchscript.pt`` and ``policy.onnx``.

Pixel policies (a :class:`robotrl.vision.frontend.ObservationFrontend` with cameras: ``PixelBCPolicy`` of
``experiment=bc obs=pixels``, ``QLPolicy`` of ``experiment=rlpd obs=pixels``) export through
:mod:`robotrl.vision.export` (TorchScript ``forward(state (B, Ds), {key: uint8 (B, H, W, C)})``,
ONNX inputs ``state`` and ``image_0 .. image_{N-1}``; the pixel diffusion policy, ``experiment=diffusion obs=pixels``,
through its ``export_module()``: the chunk ``(B, Ta, Da)`` with fixed noise, served ``Te`` actions per chunk as a
state diffusion bundle is). Their ``policy_meta.json`` adds
``"kind": "pixels"``, ``cameras`` (``[{"name", "key", "shape": [H, W, C]}]`` in the ONNX input
order; ``name`` is the robot camera the frames come from: the last ``/`` part of the key the
policy was trained on, ``"pixels/topdown"`` -> ``"topdown"``) and ``state`` (``{"dim": Ds,
"layout": {"keys", "shapes"} | null}``: the order of the entries of the flat state). A policy that stacks
frames (``frame_stack = k > 1``, :mod:`robotrl.vision.stack`) takes each camera as uint8 ``(B, H, W, k·C)``:
``frame_stack`` is in the metadata, ``cameras`` keep the robot's ``(H, W, C)``, and the
:class:`DeployPolicy` keeps the last ``k`` frames itself (:meth:`DeployPolicy.reset` at episode starts, which
:meth:`robotrl.real_robot.control.ChunkScheduler.reset` calls).

Deploy side: :func:`load_deploy_policy` runs an export with onnxruntime or
``torch.jit.load``, or a training checkpoint through :func:`robotrl.policy.load_policy`
(``weights_only`` loading). Only load TorchScript files you trust: unlike ONNX they hold
code. Every loader returns a :class:`DeployPolicy`: ``obs (Do,) -> chunk (Ta, Da)``, or for a
pixel policy ``Observation (state (Ds,), images {camera: uint8 (H, W, C)}) -> chunk (Ta, Da)`` (``Ta = 1`` but
for the pixel diffusion policy);
:func:`check_cameras` compares its cameras with a robot's before anything moves.
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

from robotrl.files import atomic_write
from robotrl.errors import CheckpointError, ConfigError, SpaceMismatchError
from robotrl.vision.stack import FrameHistory

META = "policy_meta.json"
TS_FILE = "policy.torchscript.pt"
ONNX_FILE = "policy.onnx"


def example_obs(obs_dim: int, horizon: int = 1, batch: int = 2) -> torch.Tensor:
    """Zeros shaped like a state export's input: ``(B, Do)`` for ``To = 1``, the history ``(B, To, Do)`` otherwise."""
    return torch.zeros(batch, obs_dim) if horizon == 1 else torch.zeros(batch, horizon, obs_dim)


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

    A pixel policy (a :class:`robotrl.vision.frontend.ObservationFrontend` with cameras) is exported with its
    image inputs (see the module doc); both files are checked against the policy on random inputs.

    Raises:
        ValueError: unknown format, the policy lacks ``obs_dim``/``action_dim``, or two of a pixel
            policy's cameras end in the same name.
        RuntimeError: tracing/export failed (the message names the format).
        RobotRLError: a pixel policy's export failed or differs from the policy
            (:func:`robotrl.vision.export.export_pixel_onnx`).
    """
    from robotrl.vision.frontend import ObservationFrontend

    bad = set(formats) - {"torchscript", "onnx"}
    if bad:
        raise ValueError(f"unknown export formats {sorted(bad)}; choose from 'torchscript', 'onnx'")
    if isinstance(policy, ObservationFrontend) and policy.has_cameras:
        return _export_pixel_policy(policy, Path(out_dir), formats, opset)
    if not hasattr(policy, "obs_dim") or not hasattr(policy, "action_dim"):
        raise ValueError("the policy must expose obs_dim and action_dim (the robotrl Policy protocol)")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    policy = policy.eval().cpu()
    module = policy.export_module() if hasattr(policy, "export_module") else policy
    wrapped = _ChunkOutput(module).eval()
    example = example_obs(int(policy.obs_dim), int(getattr(policy, "To", 1)))
    with torch.no_grad():
        ta = int(wrapped(example).shape[1])
    te = int(getattr(policy, "act_steps", ta) or ta)
    cls = type(policy)
    meta = {"obs_dim": int(policy.obs_dim), "action_dim": int(policy.action_dim), "chunk_len": ta, "act_steps": te,
            "obs_horizon": int(getattr(policy, "To", 1)),
            "source": f"{cls.__module__}.{cls.__qualname__}", "spec": policy.spec() if hasattr(policy, "spec") else {},
            "inputs": {"obs": ["B", *example.shape[1:]]}, "outputs": {"actions": ["B", ta, int(policy.action_dim)]}}
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
    _write_meta(out, meta)
    return paths


def _write_meta(out: Path, meta: dict) -> None:
    """Write ``policy_meta.json`` atomically (a reader never sees half of it)."""
    atomic_write(out / META, lambda f: f.write(json.dumps(meta, indent=2, default=str).encode()))


def camera_name(key: str) -> str:
    """The robot camera a pixel policy's image key reads: its last ``/`` part (``"pixels/topdown"`` -> ``"topdown"``;
    a policy trained on a robot recording already uses the camera's name)."""
    return key.rsplit("/", 1)[-1]


def pixel_cameras(policy: nn.Module) -> list[dict]:
    """``[{"name", "key", "shape": [H, W, C]}]`` of a pixel policy, in its image key order.

    Raises:
        ValueError: two keys end in the same camera name (the robot's frames could not be told apart).
    """
    shapes = policy.spec()["image_shapes"]
    cams = [{"name": camera_name(k), "key": k, "shape": [int(d) for d in v]} for k, v in shapes.items()]
    names = [c["name"] for c in cams]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"image keys {list(shapes)} name camera(s) {dup} twice; a robot sends one frame per camera name")
    return cams


def _export_pixel_policy(policy: nn.Module, out: Path, formats, opset: int) -> dict:
    """:func:`export_policy` for a pixel policy: TorchScript and ONNX with image inputs, the bundle's metadata."""
    from robotrl.vision.export import export_pixel_onnx, export_pixel_torchscript

    policy = policy.eval().cpu()
    cams = pixel_cameras(policy)
    spec = policy.spec()
    ds, da = int(policy.state_dim), int(policy.action_dim)
    stacked = policy.input_shapes()  # {key: (H, W, k·C)}: what forward takes
    shapes = {c["key"]: stacked[c["key"]] for c in cams}
    out.mkdir(parents=True, exist_ok=True)
    paths = {"meta": out / META}
    module = policy.export_module() if hasattr(policy, "export_module") else policy  # a chunk with fixed noise
    horizon = int(getattr(policy, "To", 1)) if hasattr(policy, "export_module") else 1  # the pixel diffusion policy's To
    lead = ["B"] if horizon == 1 else ["B", horizon]
    if "torchscript" in formats:
        paths["torchscript"] = export_pixel_torchscript(module, out / TS_FILE, shapes, ds, horizon=horizon)
    if "onnx" in formats:
        paths["onnx"] = export_pixel_onnx(module, out / ONNX_FILE, shapes, ds, opset=opset, horizon=horizon)
    ta, te = int(getattr(policy, "chunk_len", 1)), int(getattr(policy, "act_steps", 1))
    cls = type(policy)
    layout = spec.get("state_layout")
    meta = {"kind": "pixels", "obs_dim": ds, "action_dim": da, "chunk_len": ta, "act_steps": te,
            "source": f"{cls.__module__}.{cls.__qualname__}", "spec": spec, "cameras": cams,
            "frame_stack": int(policy.frame_stack), "obs_horizon": horizon,
            "state": {"dim": ds, "layout": json.loads(layout) if layout else None},
            "inputs": {"state": [*lead, ds], **{f"image_{i}": [*lead, *shapes[c["key"]]] for i, c in enumerate(cams)}},
            "outputs": {"actions": ["B", ta, da] if hasattr(policy, "export_module") else ["B", da]},
            "files": {k: v.name for k, v in paths.items() if k != "meta"}}
    _write_meta(out, meta)
    return paths


@dataclass
class DeployPolicy:
    """A policy ready for the control loop: ``obs (Do,) -> chunk (Ta, Da)`` float32.

    A pixel policy (``cameras`` not empty) takes the robot's
    :class:`~robotrl.real_robot.interface.Observation` instead: ``state (Do,)`` (``Do = Ds``, the
    policy's state size) and ``images {camera name: uint8 (H, W, C)}``, one frame per camera of
    ``cameras`` (other cameras of the robot are ignored); ``Ta = Te = 1`` but for a pixel diffusion export. With ``frame_stack = k > 1`` it keeps
    the last ``k`` frames of each camera itself and hands ``batch_fn`` the stacks ``(1, H, W, k·C)``;
    :meth:`reset` starts them afresh (an episode's first stack repeats its first frame).

    Attributes:
        obs_dim, action_dim, chunk_len, act_steps: ``Do``, ``Da``, ``Ta``, ``Te``.
        backend: ``"onnx"``, ``"torchscript"`` or ``"torch"``.
        batch_fn: ``(B, Do) -> (B, Ta, Da)``; for a pixel policy
            ``(state (B, Do), {camera name: uint8 (B, H, W, k·C)}) -> (B, Ta, Da)``.
        cameras: ``((name, (H, W, C)), ...)`` the policy reads (empty: a state policy).
        frame_stack: ``k``, frames per camera a pixel policy reads.
        reset_fn: what :meth:`reset` also calls (a training checkpoint's ``policy.reset``).
        obs_horizon: ``To``, observations a state chunk policy conditions on (diffusion, DPPO, flow, ReinFlow
            exports with ``obs_horizon > 1``): it is then called with the last ``To`` states, oldest first
            (``(To, Do)`` or a sequence of them; a pixel diffusion export: a sequence of ``To`` Observations), which
            :class:`~robotrl.real_robot.control.ObservationHistory` keeps step by step (the
            :class:`~robotrl.real_robot.control.ChunkScheduler` does so); ``batch_fn`` takes ``(B, To, ...)`` inputs.
    """

    obs_dim: int
    action_dim: int
    chunk_len: int
    act_steps: int
    backend: str
    batch_fn: Callable[..., np.ndarray]
    cameras: tuple[tuple[str, tuple[int, ...]], ...] = ()
    frame_stack: int = 1
    reset_fn: Callable[[], None] | None = None
    obs_horizon: int = 1

    def __post_init__(self) -> None:
        self._history = FrameHistory(self.frame_stack)

    def reset(self) -> None:
        """An episode starts: a frame-stacking pixel policy's history and a checkpoint policy's own per-episode
        state (``reset_fn``: chunk queues of ``backend="torch"``) start afresh (no-op otherwise)."""
        self._history.reset()
        if self.reset_fn is not None:
            self.reset_fn()

    def __call__(self, obs) -> np.ndarray:
        """One observation -> chunk ``(Ta, Da)``.

        Args:
            obs: state ``(Do,)`` (or an ``Observation``, whose ``state`` is used) for a state policy; an
                ``Observation`` (anything with ``state`` and ``images``) for a pixel policy.

        Raises:
            ValueError / SpaceMismatchError: the state has another size than ``Do``; a pixel policy got no
                frames, or a camera's frame is missing or not uint8 of the policy's shape.
        """
        if self.cameras and self.obs_horizon > 1:  # the last To observations, each (state, frames)
            steps = list(obs) if isinstance(obs, (list, tuple)) else [obs]
            if len(steps) != self.obs_horizon:
                raise ValueError(f"this pixel policy conditions on the last To={self.obs_horizon} observations: pass "
                                 f"a sequence of {self.obs_horizon} Observations, oldest first, not {len(steps)} "
                                 "(ChunkScheduler and robotrl deploy keep that history)")
            parts = [self._pixel_inputs(o) for o in steps]
            state = np.stack([p[0] for p in parts], axis=1)  # (1, To, Ds)
            images = {n: np.stack([p[1][n] for p in parts], axis=1) for n, _ in self.cameras}  # (1, To, H, W, C)
            return self.batch_fn(state, images)[0]
        if self.cameras:
            state, images = self._pixel_inputs(obs)
            if self.frame_stack > 1:
                stacks = self._history.push({k: torch.as_tensor(v) for k, v in images.items()})
                images = {k: v.numpy() for k, v in stacks.items()}
            return self.batch_fn(state, images)[0]
        if self.obs_horizon > 1:
            return self.batch_fn(self._history_input(obs))[0]
        obs = np.asarray(getattr(obs, "state", obs), np.float32).reshape(1, -1)
        if obs.shape[1] != self.obs_dim:
            raise ValueError(f"observation has {obs.shape[1]} entries, the policy takes Do={self.obs_dim}")
        return self.batch_fn(obs)[0]

    def _history_input(self, obs) -> np.ndarray:
        """The last ``To`` states, oldest first (an array ``(To, Do)`` or a sequence of ``To`` states or
        ``Observation`` s) -> ``(1, To, Do)`` float32.

        Raises:
            ValueError: not ``To`` observations of ``Do`` entries.
        """
        rows = obs if isinstance(obs, (list, tuple)) else [obs] if hasattr(obs, "state") else obs
        hist = np.asarray([np.asarray(getattr(o, "state", o), np.float32).reshape(-1) for o in rows], np.float32)
        if hist.shape != (self.obs_horizon, self.obs_dim):
            raise ValueError(f"this policy conditions on the last To={self.obs_horizon} observations: pass them as "
                             f"({self.obs_horizon}, {self.obs_dim}), oldest first, not {hist.shape} (ChunkScheduler and "
                             "robotrl deploy keep that history: robotrl.real_robot.control.ObservationHistory)")
        return hist[None]

    def _pixel_inputs(self, obs) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """``Observation`` -> ``(state (1, Do), {camera: uint8 (1, H, W, C)})`` (checked)."""
        frames = getattr(obs, "images", None)
        if frames is None:
            raise SpaceMismatchError(f"this pixel policy reads cameras {[n for n, _ in self.cameras]} but the observation "
                                     "carries no frames; pass the robot's Observation from a robot with those cameras")
        state = np.asarray(obs.state, np.float32).reshape(1, -1)
        if self.obs_dim == 0:
            state = np.zeros((1, 0), np.float32)
        elif state.shape[1] != self.obs_dim:
            raise SpaceMismatchError(f"observation state has {state.shape[1]} entries, the policy takes Ds={self.obs_dim}")
        images = {}
        for name, shape in self.cameras:
            if name not in frames:
                raise SpaceMismatchError(f"the observation has no frame of camera {name!r} (it has {sorted(frames)}); "
                                         "the robot must send every camera the policy was trained on")
            f = np.asarray(frames[name])
            if f.dtype != np.uint8 or f.shape != tuple(shape):
                raise SpaceMismatchError(f"camera {name!r} sent {f.dtype} {f.shape}, the policy takes uint8 {tuple(shape)}")
            images[name] = f[None]
        return state, images


def check_cameras(policy: DeployPolicy, spec) -> None:
    """Refuse a robot whose cameras differ from a pixel policy's, before anything moves.

    Every camera of ``policy.cameras`` must be in ``spec.cameras`` (a
    :class:`~robotrl.real_robot.interface.RobotSpec`) with the same ``(H, W, C)``; cameras the
    policy does not read are fine (their frames are only recorded). A state policy accepts any robot.

    Raises:
        ConfigError: names each missing camera and each shape that differs, and the way out.
    """
    if not policy.cameras:
        return
    robot = {c.name: tuple(int(d) for d in c.shape) for c in spec.cameras}
    problems = []
    for name, shape in policy.cameras:
        if name not in robot:
            problems.append(f"camera {name!r} {tuple(shape)} is missing")
        elif robot[name] != tuple(shape):
            problems.append(f"camera {name!r} sends {robot[name]}, the policy takes {tuple(shape)}")
    if problems:
        want = [n for n, _ in policy.cameras]
        sizes = sorted({s[0] for _, s in policy.cameras})
        hint = f" (the MuJoCo twin: robot.cameras=[{','.join(want)}]" + (f" robot.image_size={sizes[0]})" if len(sizes) == 1 else ")")
        have = ", ".join(f"{n} {s}" for n, s in robot.items()) or "none"
        raise ConfigError(f"the policy's cameras differ from robot {spec.name}'s ({have}): {'; '.join(problems)}. "
                          f"Give the robot the cameras and frame sizes the policy was trained on{hint}, "
                          "or deploy a policy trained on this robot's cameras; nothing was moved")


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
    pixels = meta.get("kind") == "pixels"
    if p.suffix == ".onnx":
        backend = "onnx"
    elif p.name.endswith(".torchscript.pt"):
        backend = "torchscript"
    if backend == "auto":
        backend = "onnx" if (export_dir / ONNX_FILE).is_file() else "torchscript"
    if backend not in ("onnx", "torchscript"):
        raise CheckpointError(f"unknown backend {backend!r}; use auto, onnx, torchscript or torch")
    cams: tuple[tuple[str, tuple[int, ...]], ...] = ()
    horizon = int(meta.get("obs_horizon", 1))
    if pixels:
        cams = tuple((str(c["name"]), tuple(int(d) for d in c["shape"])) for c in meta["cameras"])
        keys = [str(c["key"]) for c in meta["cameras"]]
        fn = (_onnx_pixel_fn(export_dir / ONNX_FILE, keys) if backend == "onnx"
              else _ts_pixel_fn(export_dir / TS_FILE, keys))
    else:
        fn = (_onnx_fn(export_dir / ONNX_FILE) if backend == "onnx"
              else _ts_fn(export_dir / TS_FILE, example_obs(int(meta["obs_dim"]), horizon, batch=1)))
    return DeployPolicy(int(meta["obs_dim"]), int(meta["action_dim"]), int(meta["chunk_len"]), int(meta["act_steps"]), backend,
                        fn, cams, int(meta.get("frame_stack", 1)), obs_horizon=horizon)


def _onnx_fn(path: Path):
    if not path.is_file():
        raise CheckpointError(f"no ONNX file at {path}; export with formats=('onnx',)")
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return lambda obs: sess.run(["actions"], {"obs": np.asarray(obs, np.float32)})[0]


def _onnx_pixel_fn(path: Path, keys: list[str]):
    """``(state (B, Ds), {camera: uint8 (B, H, W, C)}) -> (B, 1, Da)`` through onnxruntime (inputs ``state``, ``image_i``)."""
    if not path.is_file():
        raise CheckpointError(f"no ONNX file at {path}; export with formats=('onnx',)")
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    stored = sess.get_modelmeta().custom_metadata_map.get("image_keys")
    if stored is not None and stored.split(",") != keys:
        raise CheckpointError(f"{path} takes images {stored.split(',')} but {META} lists {keys}; export the bundle again")
    names = [camera_name(k) for k in keys]

    def fn(state, images):
        feed = {"state": np.asarray(state, np.float32), **{f"image_{i}": np.asarray(images[n], np.uint8) for i, n in enumerate(names)}}
        return _as_chunks(sess.run(["actions"], feed)[0])

    return fn


def _ts_pixel_fn(path: Path, keys: list[str]):
    """``(state (B, Ds), {camera: uint8 (B, H, W, C)}) -> (B, 1, Da)`` through ``torch.jit.load``."""
    if not path.is_file():
        raise CheckpointError(f"no TorchScript file at {path}; export with formats=('torchscript',)")
    mod = torch.jit.load(str(path), map_location="cpu").eval()
    names = [camera_name(k) for k in keys]

    def fn(state, images):
        with torch.no_grad():
            frames = {k: torch.as_tensor(np.asarray(images[n], np.uint8)) for k, n in zip(keys, names)}
            return _as_chunks(mod(torch.as_tensor(np.asarray(state, np.float32)), frames).numpy())

    return fn


def _as_chunks(actions: np.ndarray) -> np.ndarray:
    """A pixel export's output as chunks ``(B, Ta, Da)``: actions ``(B, Da)`` are chunks of one."""
    return actions if actions.ndim == 3 else actions[:, None]


def optimized_for_this_machine(mod: torch.jit.ScriptModule, example: torch.Tensor) -> torch.jit.ScriptModule:
    """A TorchScript policy frozen and optimised for inference where it runs (``torch.jit.optimize_for_inference``:
    weights folded in as constants, ops fused and laid out for this CPU's kernels), when that works and gives
    the outputs of ``mod`` on ``example`` to 1e-5; else ``mod`` itself. Done at load time, on the robot computer,
    so the exported file stays portable (a file optimised on one machine may carry kernels another lacks).
    Measured at batch 1 (3x512 one-step flow policy, 1 thread, 2-core machine): 0.26 ms vs 0.28 ms traced when quiet,
    0.77 ms vs 1.21 ms when loaded (``benchmarks/bench_reinflow.py latency``).

    Args:
        mod: a loaded TorchScript module in eval mode; example: a valid input (e.g. zeros ``(1, Do)``).
    """
    try:
        with torch.no_grad():
            opt = torch.jit.optimize_for_inference(torch.jit.freeze(mod))
            same = torch.allclose(opt(example), mod(example), rtol=1e-5, atol=1e-5)
    except Exception:  # an op the optimiser cannot handle: run the module as saved
        return mod
    return opt if same else mod


def _ts_fn(path: Path, example: torch.Tensor):
    """``obs (B, Do)`` (or histories ``(B, To, Do)``) ``-> (B, Ta, Da)`` through ``torch.jit.load``; ``example``: a
    valid input for :func:`optimized_for_this_machine`."""
    if not path.is_file():
        raise CheckpointError(f"no TorchScript file at {path}; export with formats=('torchscript',)")
    mod = optimized_for_this_machine(torch.jit.load(str(path), map_location="cpu").eval(), example)

    def fn(obs):
        with torch.no_grad():
            return mod(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    return fn


def _from_checkpoint(p: Path) -> DeployPolicy:
    from robotrl.policy import load_policy

    from robotrl.vision.frontend import ObservationFrontend

    policy = load_policy(str(p))
    if isinstance(policy, ObservationFrontend) and policy.has_cameras:
        cams = pixel_cameras(policy)
        pairs = [(c["key"], c["name"]) for c in cams]

        def pixel_fn(state, images):
            with torch.no_grad():
                frames = {k: torch.as_tensor(np.asarray(images[n], np.uint8)) for k, n in pairs}
                return policy(torch.as_tensor(np.asarray(state, np.float32)), frames).numpy()[:, None]

        return DeployPolicy(int(policy.state_dim), int(policy.action_dim), 1, 1, "torch", pixel_fn,
                            tuple((c["name"], tuple(c["shape"])) for c in cams), int(policy.frame_stack),
                            lambda: policy.reset())
    wrapped = _ChunkOutput(policy).eval()

    def fn(obs):
        with torch.no_grad():
            return wrapped(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    ta = int(fn(np.zeros((1, policy.obs_dim), np.float32)).shape[1])
    return DeployPolicy(int(policy.obs_dim), int(policy.action_dim), ta, int(getattr(policy, "act_steps", ta) or ta), "torch", fn,
                        reset_fn=getattr(policy, "reset", None))
