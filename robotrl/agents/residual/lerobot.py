"""LeRobot-trained ACT and diffusion policies as frozen, chunk-executing robotrl bases (issue 42).

:class:`LeRobotPolicy` loads a policy that LeRobot saved (``PreTrainedPolicy.save_pretrained`` plus the
``policy_preprocessor`` / ``policy_postprocessor`` pipelines LeRobot >= 0.4 writes beside it) from a LOCAL
folder, through LeRobot's own library (the ``[lerobot]`` extra; never the Hugging Face hub), and serves it with
the deployable robotrl policy interface the residual agents and the bridge use:

- ``forward(obs (N, Do) raw[, {camera: uint8 (N, H, W, C)}]) -> action (N, Da) raw``, one call per env step:
  per-env histories of ``To`` observations (padded with the first one at an episode start, as LeRobot's
  ``populate_queues``) and per-env queues of ``Te`` actions; a chunk is predicted for the envs whose queue is
  empty, so the base executes its chunks as it was trained (one policy call every ``Te = n_action_steps`` env
  steps, LeRobot's ``select_action``), but per env (LeRobot's own queue is one for the whole batch, so one
  env's episode start would restart every env's chunk);
- ``predict_chunk(obs_hist (B, To, Do)[, frames]) -> (B, Te, Da)`` raw, stateless;
- ``reset(env_ids)``, ``spec()`` (``{"path", "n_action_steps", "seed"}``: rebuilt from the folder, weights from
  the residual checkpoint's ``base.`` entries).

Observation mapping (a run's :class:`~robotrl.spec.ObservationSpec`): the flat state ``(Do,)`` is split into the
policy's vector inputs in order (``state_keys``; default: its non-image input features in its config's order,
e.g. ``observation.state`` then ``observation.environment_state``, which is how ``robotrl convert`` names the
``state`` and ``environment_state`` entries of a ``Dict`` observation), in raw units: LeRobot's pre-processor
normalises them with the statistics saved with the policy. Each camera ``<key>`` of the run to ``observation.images.<name>`` with ``name`` the last ``/`` part of
the key (``pixels/front`` -> ``observation.images.front``; override with ``cameras={robotrl key: lerobot key}``)
as float ``(B, C, H, W)`` in ``[0, 1]``, LeRobot's convention. Actions come back through LeRobot's
post-processor (un-normalised, raw env units).

Chunk prediction uses LeRobot's own model calls: ACT ``predict_action_chunk`` (the first ``n_action_steps`` of
its ``chunk_size``), diffusion ``DiffusionModel.generate_actions`` on the stacked ``To`` history (what
``DiffusionPolicy.predict_action_chunk`` calls after stacking its internal queues; called directly here
because those queues are one per batch), with the initial noise drawn from this module's seeded generator.
LeRobot's processors run on the CPU; the model runs where the module was moved (``.to(device)``), and actions come
back on the caller's device.

Symbols: ``B``/``N`` batch / envs, ``To`` observation history (LeRobot ``n_obs_steps``), ``Te`` executed steps
per chunk (``n_action_steps``), ``Do`` state size, ``Da`` action size.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from torch import nn

from robotrl.errors import CheckpointError, ConfigError

EXTRA_HINT = "pip install 'robotrl[lerobot]'"
SUPPORTED = ("act", "diffusion")


def is_lerobot_policy_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a folder LeRobot saved a policy in (``config.json`` with a ``type`` and
    ``model.safetensors``). Reads only the JSON; imports nothing."""
    p = Path(path)
    if not (p.is_dir() and (p / "config.json").is_file() and (p / "model.safetensors").is_file()):
        return False
    try:
        return "type" in json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _import_lerobot():
    try:
        from lerobot.configs.policies import PreTrainedConfig
        from lerobot.policies.factory import get_policy_class, make_pre_post_processors
    except ImportError as exc:
        raise ConfigError(f"loading a LeRobot policy needs LeRobot: {EXTRA_HINT} ({exc})") from exc
    return PreTrainedConfig, get_policy_class, make_pre_post_processors


def _camera_name(key: str) -> str:
    return key.rsplit("/", 1)[-1]


class LeRobotPolicy(nn.Module):
    """A LeRobot ACT or diffusion policy (local folder) as a frozen robotrl base executing its chunks.

    Args:
        path: the folder ``save_pretrained`` wrote (``config.json``, ``model.safetensors``,
            ``policy_preprocessor.json``, ``policy_postprocessor.json`` and their statistics).
        n_action_steps: ``Te``, actions executed per chunk (default: the policy's ``n_action_steps``, as trained;
            at most ACT's ``chunk_size``, or the diffusion policy's ``n_action_steps``).
        cameras: ``{robotrl camera key: LeRobot image key}`` (default: ``observation.images.<last part of the
            key>`` for each of the policy's image features).
        state_keys: the policy's vector inputs in the order the run's flat state concatenates them (default:
            its non-image inputs in config order).
        seed: seed of the diffusion policy's initial noise.

    Attributes:
        obs_dim, action_dim: ``Do`` (the sum of the ``state_keys`` sizes), ``Da``; To, Te: history and executed chunk length;
        image_shapes: the policy's cameras ``{LeRobot key: (H, W, C)}``.

    Raises:
        ConfigError: LeRobot is not installed (names the extra), the folder is not a local LeRobot policy folder,
            its type is not ACT or diffusion, ``state_keys`` that are not its vector inputs, no saved processors, or
            ``n_action_steps`` is out of range.
    """

    def __init__(self, path: str | os.PathLike, *, n_action_steps: int | None = None,
                 cameras: Mapping[str, str] | None = None, state_keys: list[str] | None = None, seed: int = 0):
        super().__init__()
        folder = Path(path).expanduser().resolve()
        if not is_lerobot_policy_dir(folder):
            raise ConfigError(f"{path} is not a local folder with a policy saved by LeRobot (config.json with a type "
                              "and model.safetensors): pass the folder policy.save_pretrained wrote")
        PreTrainedConfig, get_policy_class, make_pre_post_processors = _import_lerobot()
        cfg = PreTrainedConfig.from_pretrained(str(folder), local_files_only=True)
        if cfg.type not in SUPPORTED:
            raise ConfigError(f"{folder}: LeRobot policy type {cfg.type!r} is not supported as a base; use one of "
                              f"{SUPPORTED} (the chunked policies whose chunks robotrl executes)")
        vectors = [k for k in cfg.input_features if k not in cfg.image_features]
        keys = list(state_keys) if state_keys is not None else vectors
        if not keys or sorted(keys) != sorted(vectors):
            raise ConfigError(f"{folder}: state_keys={keys} must order exactly the policy's vector inputs {vectors}")
        cfg.device = "cpu"
        policy = get_policy_class(cfg.type).from_pretrained(str(folder), config=cfg, local_files_only=True)
        try:
            pre, post = make_pre_post_processors(cfg, pretrained_path=str(folder),
                                                 preprocessor_overrides={"device_processor": {"device": "cpu"}})
        except (FileNotFoundError, OSError, ValueError) as exc:
            raise ConfigError(f"{folder}: no LeRobot pre/post-processors saved with the policy ({exc}); save them "
                              "with preprocessor.save_pretrained(folder) and postprocessor.save_pretrained(folder)") from exc
        self.kind = str(cfg.type)
        self.policy = policy.eval()
        self.preprocessor, self.postprocessor = pre, post
        self.state_keys = keys
        self.state_sizes = [int(cfg.input_features[k].shape[0]) for k in keys]
        self.obs_dim = int(sum(self.state_sizes))
        self.action_dim = int(cfg.output_features["action"].shape[0])
        self.To = int(getattr(cfg, "n_obs_steps", 1))
        trained_te = int(cfg.n_action_steps)
        most = int(cfg.chunk_size) if self.kind == "act" else trained_te
        te = trained_te if n_action_steps is None else int(n_action_steps)
        if not 1 <= te <= most:
            raise ConfigError(f"n_action_steps={te} is out of range for this {self.kind} policy: 1..{most}")
        self.Te = te
        self.image_keys = list(cfg.image_features)
        self.image_shapes = {k: (int(f.shape[1]), int(f.shape[2]), int(f.shape[0]))
                             for k, f in cfg.image_features.items()}
        self.cameras = dict(cameras) if cameras is not None else None
        self._spec = {"path": str(folder), "n_action_steps": int(te), "cameras": self.cameras,
                      "state_keys": None if state_keys is None else list(keys), "seed": int(seed)}
        self.gen = torch.Generator().manual_seed(int(seed))
        self.requires_grad_(False)
        self._hist: torch.Tensor | None = None
        self._frames: dict[str, torch.Tensor] | None = None
        self._queue: torch.Tensor | None = None
        self._qpos = np.zeros(0, np.int64)
        self._fresh = np.zeros(0, bool)

    # ------------------------------------------------------------------ descriptors
    def spec(self) -> dict:
        """Constructor kwargs (JSON-able): the folder, ``Te``, the camera map, the seed."""
        return dict(self._spec)

    @property
    def act_steps(self) -> int:
        """``Te`` (export metadata)."""
        return self.Te

    def _lerobot_images(self, images: Mapping[str, torch.Tensor] | None) -> dict[str, torch.Tensor]:
        """``{LeRobot key: float (B, [To,] C, H, W) in [0, 1]}`` from robotrl frames uint8 ``(B, [To,] H, W, C)``.

        Raises:
            ConfigError: the policy reads cameras the frames do not include.
        """
        if not self.image_keys:
            return {}
        images = dict(images or {})
        mapping = self.cameras or {k: f"observation.images.{_camera_name(k)}" for k in images}
        out = {lk: images[rk] for rk, lk in mapping.items() if rk in images}
        missing = [k for k in self.image_keys if k not in out]
        if missing:
            raise ConfigError(f"the LeRobot policy reads cameras {missing}, the run gives {sorted(images)}: name the "
                              "run's cameras as the policy's (observation.images.<name> <- <...>/<name>) or pass "
                              "cameras={robotrl key: LeRobot key}")
        return {k: v.float().movedim(-1, -3) / 255.0 for k, v in out.items()}

    def _lerobot_state(self, obs: torch.Tensor) -> dict[str, torch.Tensor]:
        """``{LeRobot vector input: (..., d)}`` split from the flat state ``(..., Do)`` in ``state_keys`` order."""
        return dict(zip(self.state_keys, obs.split(self.state_sizes, dim=-1)))

    # ------------------------------------------------------------------ stateless
    @torch.no_grad()
    def predict_chunk(self, obs_hist: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """Raw history ``(B, To, Do)`` (or ``(B, Do)``; frames ``{robotrl key: uint8 (B, To, H, W, C)}`` or
        ``(B, H, W, C)``) -> the raw actions the policy executes next, ``(B, Te, Da)``.

        Through LeRobot's pre-processor (normalisation), its model and its post-processor (un-normalisation).
        """
        obs_hist = torch.as_tensor(obs_hist, dtype=torch.float32)
        out_device = obs_hist.device
        obs_hist = obs_hist.cpu()  # LeRobot's processors (and their statistics) live on the CPU
        images = None if images is None else {k: torch.as_tensor(v).cpu() for k, v in images.items()}
        if obs_hist.ndim == 2:
            obs_hist = obs_hist[:, None].expand(-1, self.To, -1)
            images = None if images is None else {k: v[:, None].expand(-1, self.To, *v.shape[1:])
                                                  for k, v in images.items()}
        B = obs_hist.shape[0]
        dev = next(self.policy.parameters()).device
        if self.kind == "act":  # n_obs_steps is 1: the newest step
            batch = self.preprocessor({**self._lerobot_state(obs_hist[:, -1]), **self._lerobot_images(
                None if images is None else {k: v[:, -1] for k, v in images.items()})})
            chunk = self.policy.predict_action_chunk(_to(batch, dev))[:, : self.Te]
        else:
            batch = self.preprocessor({**self._lerobot_state(obs_hist), **self._lerobot_images(images)})
            batch = {k: v for k, v in batch.items() if k in self.state_keys or k in self.image_keys}
            if self.image_keys:  # DiffusionPolicy's stacking: (B, To, n_cameras, C, H, W)
                batch["observation.images"] = torch.stack([batch[k] for k in self.image_keys], dim=-4)
            cfg = self.policy.config
            noise = torch.randn((B, cfg.horizon, self.action_dim), generator=self.gen).to(dev)
            chunk = self.policy.diffusion.generate_actions(_to(batch, dev), noise=noise)[:, : self.Te]
        return self.postprocessor(chunk.cpu()).to(device=out_device, dtype=torch.float32)

    # ------------------------------------------------------------------ per-step acting
    def _restart(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None) -> None:
        N = obs.shape[0]
        self._hist = obs[:, None].repeat(1, self.To, 1).clone()
        self._frames = None if images is None else {k: v[:, None].repeat(1, self.To, *([1] * (v.ndim - 1))).clone()
                                                    for k, v in images.items()}
        self._queue = torch.zeros(N, self.Te, self.action_dim, device=obs.device)
        self._qpos = np.full(N, self.Te, np.int64)
        self._fresh = np.zeros(N, bool)

    @staticmethod
    def _roll(hist: torch.Tensor, new: torch.Tensor, fresh: np.ndarray) -> torch.Tensor:
        out = torch.cat([hist[:, 1:], new[:, None]], dim=1)
        if fresh.any():
            idx = torch.as_tensor(np.flatnonzero(fresh), device=new.device)
            out[idx] = new[idx][:, None].repeat(1, hist.shape[1], *([1] * (new.ndim - 1)))
        return out

    @torch.no_grad()
    def forward(self, obs: torch.Tensor, images: Mapping[str, torch.Tensor] | None = None) -> torch.Tensor:
        """One raw action ``(N, Da)`` per env for raw states ``(N, Do)`` (and frames ``{key: uint8 (N, H, W,
        C)}``); predicts a chunk for the envs whose queue is empty."""
        obs = torch.as_tensor(obs, dtype=torch.float32)
        if self._hist is None or self._hist.shape[0] != obs.shape[0] or self._hist.device != obs.device:
            self._restart(obs, images)
        else:
            self._hist = self._roll(self._hist, obs, self._fresh)
            if images is not None and self._frames is not None:
                self._frames = {k: self._roll(self._frames[k], v, self._fresh) for k, v in images.items()}
            self._fresh[:] = False
        assert self._queue is not None
        need = np.flatnonzero(self._qpos >= self.Te)
        if need.size:
            idx = torch.as_tensor(need, device=obs.device)
            frames = None if self._frames is None else {k: v[idx] for k, v in self._frames.items()}
            self._queue[idx] = self.predict_chunk(self._hist[idx], frames)
            self._qpos[need] = 0
        out = self._queue[torch.arange(obs.shape[0], device=obs.device), torch.as_tensor(self._qpos, device=obs.device)]
        self._qpos += 1
        return out

    def reset(self, env_ids: np.ndarray | None = None) -> None:
        """Clear the histories and queues of ``env_ids`` (``None``: all envs)."""
        if env_ids is None or self._hist is None:
            self._hist = None
            return
        ids = np.asarray(env_ids, np.int64).reshape(-1)
        if ids.size and ids.max() >= self._qpos.shape[0]:
            self._hist = None
            return
        self._fresh[ids] = True
        self._qpos[ids] = self.Te

    def train(self, mode: bool = True) -> LeRobotPolicy:
        """A frozen base: LeRobot's policy stays in eval mode (no dropout) whatever ``mode``."""
        super().train(False)
        return self


def _to(batch: dict, device: torch.device) -> dict:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def load_lerobot_policy(path: str | os.PathLike, **kwargs) -> LeRobotPolicy:
    """:class:`LeRobotPolicy` of a local folder; a :class:`~robotrl.errors.CheckpointError` for anything that
    is not one (as the other base loaders), naming the way out."""
    try:
        return LeRobotPolicy(path, **kwargs)
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from exc
