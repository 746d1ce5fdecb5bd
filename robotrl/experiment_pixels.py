"""`robotrl train` on cameras: pixel BC (pretraining) and pixel SAC / RLPD (online) through the off-policy trainer.

Agents whose config says ``pixels: true`` (``configs/agent/bc-pixels.yaml``, ``rlpd-pixels.yaml``) are built here
instead of :func:`robotrl.experiment.build_trainer`'s flat path. Everything is derived from the dataset and the env,
never typed in:

* the task (gymnasium id, kwargs, time limit) is the dataset's recorded env spec (:func:`robotrl.task_mdp.task_env_args`);
* the cameras and the frame size are the dataset's (``pixels/<camera>`` entries of its observation space, written by
  :class:`robotrl.envs.pixels.PixelObservation` in the recipes): the training and evaluation envs render exactly those.
  ``env.cameras`` / ``env.image_size`` (``null``: the data's) must agree with the data, else :class:`ConfigError`;
* ``Ds`` (the flat state beside the frames), the camera shapes ``{key: (H, W, C)}`` and ``Da`` come from the env's
  spaces, checked against the dataset's; the state normaliser from the data, the action bounds from the env.

The saved policy holds the encoder, the normaliser, the action scaler and the state layout, so
``robotrl eval checkpoint=<run>`` rebuilds the same camera env (recorded under ``derived.eval_env``) and runs it on
raw ``Dict`` observations. Online (pixel RLPD, pixel WSRL), the trainer's loop splits the env's observations with
the same :class:`~robotrl.vision.obs.PixelLayout` and stores each frame once in the online buffer.

Warm starts (pixel WSRL from pixel Cal-QL/CQL: ``trainer.init_from``, ``trainer.init_parts``): the pretraining run
must have seen the same cameras at the same frame size, with the same state/action sizes and networks
(:data:`PIXEL_ARCHITECTURE_KEYS`); :func:`check_pixel_warm_start` refuses any other with a :class:`ConfigError`
that names each difference and the way out, before training starts.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from robotrl.data import check_spaces, load_dataset
from robotrl.data.dataset import OfflineData
from robotrl.data.spaces import flat_dim, split_images
from robotrl.errors import ConfigError, RobotRLError
from robotrl.experiment_parts import action_scaler_for, observation_normalizer, offline_buffer, reward_transform
from robotrl.runner import Runner
from robotrl.utils import resolve_device, set_seed

_PREFIX = "pixels/"  # PixelObservation's key of the frames


def _size(value: Any) -> list[int]:
    """``image_size`` as ``[H, W]`` (an int ``N`` is ``[N, N]``)."""
    if isinstance(value, (int, float)):
        return [int(value), int(value)]
    return [int(v) for v in value]


def _data_cameras(data: OfflineData) -> tuple[list[str], list[int]]:
    """The cameras and ``[H, W]`` the dataset was recorded with.

    Raises:
        ConfigError: no cameras, cameras not under ``pixels/`` (not a robotrl camera env), or cameras of two sizes.
    """
    name = data.metadata.get("dataset_id")
    if not data.images:
        raise ConfigError(f"dataset {name!r} records no camera frames, and pixel agents learn from them: pick a camera "
                          "dataset (dataset=pointmaze-umaze-topdown) or record one, e.g. `robotrl collect "
                          "recipe=pointmaze-umaze cameras=[topdown] image_size=64`")
    keys = list(data.images)
    if not all(k.startswith(_PREFIX) for k in keys):
        raise ConfigError(f"dataset {name!r} has cameras {keys}, not recorded by robotrl's camera envs (keys "
                          f"{_PREFIX}<camera>); robotrl train can only rebuild those for online steps and evaluation")
    sizes = {tuple(v.shape[1:3]) for v in data.images.values()}
    if len(sizes) != 1:
        raise ConfigError(f"dataset {name!r} has cameras of several sizes {sorted(sizes)}; the camera env renders "
                          "every camera at one size")
    return [k[len(_PREFIX):] for k in keys], list(sizes.pop())


def camera_args(env_cfg: DictConfig, data: OfflineData | None) -> dict[str, Any]:
    """The cameras of the run's envs: ``{"pixels": [camera, ...], "size": [H, W]}`` (keyword arguments of
    :func:`robotrl.envs.make_env_from_args`).

    With a dataset, its cameras and frame size; ``env.cameras`` / ``env.image_size``, when set, must equal them
    (a policy trained on one view cannot act on another). Without a dataset, the configured ones.

    Raises:
        ConfigError: the configured cameras or size differ from the data's (names the override to drop), the
            dataset has no usable cameras, or there is neither a dataset nor ``env.cameras``.
    """
    want, want_size = env_cfg.get("cameras"), env_cfg.get("image_size")
    want = None if want is None else [str(c) for c in ([want] if isinstance(want, str) else want)]
    if data is None:
        if not want:
            raise ConfigError("a pixel agent without a dataset needs the cameras to render: set env.cameras=[topdown] "
                              "(and env.image_size=64)")
        return {"pixels": want, "size": _size(want_size or 64)}
    cams, size = _data_cameras(data)
    name = data.metadata.get("dataset_id")
    fix = ("drop the override (null takes the dataset's), or record a dataset with those cameras: `robotrl collect "
           "recipe=<recipe> cameras=[...] image_size=N` and pass dataset.id=<its id>")
    if want is not None and want != cams:
        raise ConfigError(f"env.cameras={want} differs from the cameras dataset {name!r} was recorded with ({cams}): "
                          f"the policy would see other images than it learns from. Set env.cameras=[{','.join(cams)}] or "
                          + fix)
    if want_size is not None and _size(want_size) != size:
        raise ConfigError(f"env.image_size={want_size} differs from the frame size {size} (H, W) of dataset {name!r}: "
                          f"set env.image_size={size[0]} or " + fix)
    return {"pixels": cams, "size": size}


#: ``agent.model`` keys that shape a pixel Q-learning agent's networks: a warm start needs them equal.
PIXEL_ARCHITECTURE_KEYS = ("encoder", "pooling", "feature_dim", "channels", "hidden", "act", "critic_hidden",
                           "num_critics", "critic_layer_norm", "obs_clip", "frame_stack")
#: the value of an architecture key a run written before the key existed had
_ARCHITECTURE_DEFAULTS = {"frame_stack": 1}


def check_pixel_warm_start(source: str | Path, agent_target: str, model: dict[str, Any],
                           image_shapes: dict[str, list[int]], state_dim: int, action_dim: int) -> None:
    """Refuse a pixel warm start whose pretraining run differs from this run in what the weights depend on.

    Args:
        source: ``trainer.init_from`` (a run directory or checkpoint file written by ``robotrl train``).
        agent_target: this run's ``agent.model._target_`` (the pretraining run's must be the same class).
        model: this run's resolved ``agent.model``.
        image_shapes: this run's cameras ``{key: [H, W, C]}`` (from its dataset).
        state_dim, action_dim: this run's ``Ds`` and ``Da``.

    Raises:
        ConfigError: another agent class, other cameras or frame size, other ``Ds``/``Da``, or an
            architecture key of :data:`PIXEL_ARCHITECTURE_KEYS` that differs; the message names each
            difference (pretraining run, this run) and the way out.
        CheckpointError: the checkpoint cannot be read (a missing one is left to the warm start's own error).
    """
    from robotrl.checkpoint import load_checkpoint

    path = Path(str(source))
    if not path.exists():
        return  # the runner's warm start names the missing checkpoint
    recorded = load_checkpoint(path).get("config") or {}
    theirs = (recorded.get("agent") or {}).get("model") or {}
    derived = recorded.get("derived") or {}
    if theirs.get("_target_") != agent_target:
        raise ConfigError(f"trainer.init_from={source} was trained by {theirs.get('_target_')!r}, not {agent_target!r}: "
                          "pixel WSRL warm-starts from a pixel Cal-QL/CQL run (experiment=calql-pixels)")
    diff: dict[str, tuple[Any, Any]] = {}
    have_cams = {k: list(v) for k, v in (derived.get("image_shapes") or {}).items()}
    if have_cams != image_shapes:
        diff["cameras {key: [H, W, C]}"] = (have_cams, image_shapes)
    for name, mine in (("state size Ds", state_dim), ("action size Da", action_dim)):
        key = "obs_dim" if name.startswith("state") else "action_dim"
        if derived.get(key) != mine:
            diff[name] = (derived.get(key), mine)
    arch = {}
    for k in PIXEL_ARCHITECTURE_KEYS:
        old, new = theirs.get(k, _ARCHITECTURE_DEFAULTS.get(k)), model.get(k, _ARCHITECTURE_DEFAULTS.get(k))
        if old != new:
            arch[k] = (old, new)
    if diff or arch:
        shown = {**diff, **{f"agent.model.{k}": v for k, v in arch.items()}}
        fixes = []
        if diff:
            fixes.append("fine-tune on the pretraining run's camera dataset (its cameras, frame size and env): "
                         f"dataset.id={(recorded.get('dataset') or {}).get('id')}")
        if arch:
            fixes.append("set " + " ".join(f"agent.model.{k}={_override(v[0])}" for k, v in arch.items())
                         + " (the pretraining run's)")
        fixes.append("or pretrain again with this run's settings (experiment=calql-pixels) and point trainer.init_from at it")
        raise ConfigError(f"trainer.init_from={source} was pretrained with other cameras/networks than this run; "
                          f"differences (pretraining run, this run): {shown}. Its weights cannot be loaded: "
                          + "; ".join(fixes))


def _override(value: Any) -> str:
    """A value as a Hydra command-line override writes it (lists without spaces)."""
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(v) for v in value) + "]"
    return "null" if value is None else str(value)


def _instantiate_agent(model: DictConfig, **kwargs: Any) -> Any:
    """``hydra.utils.instantiate(model, **kwargs)``; a robotrl error raised by the agent's constructor (a residual's
    base that does not fit the run: :func:`robotrl.agents.residual.pixels.check_base_fits`) comes out as itself, not
    wrapped in Hydra's ``InstantiationException``.

    Raises:
        RobotRLError: the constructor's own (``ConfigError``, ``CheckpointError``, ...).
    """
    import inspect

    from hydra.errors import InstantiationException
    from hydra.utils import get_class, instantiate

    if "state_dim" in kwargs and "obs_dim" in inspect.signature(get_class(str(model._target_))).parameters:
        kwargs["obs_dim"] = kwargs.pop("state_dim")  # transitional (issue 41): merged agents name Ds obs_dim
    try:
        return instantiate(model, **kwargs, _convert_="all")
    except InstantiationException as exc:
        if isinstance(exc.__cause__, RobotRLError):
            raise exc.__cause__ from None
        raise


def build_pixel_trainer(cfg: DictConfig, run_dir: Path) -> Runner:
    """Dataset, camera envs, normalisers, pixel agent, buffers and the off-policy trainer of a camera run.

    The agent is built with ``hydra.utils.instantiate`` from ``cfg.agent.model`` with explicit arguments only:
    ``image_shapes`` ``{key: (H, W, C)}``, ``state_dim`` (``Ds``), ``action_dim`` (``Da``), ``obs_normalizer``,
    ``action_scaler``, ``state_layout`` (JSON), ``device``, ``seed``.

    Returns:
        a :class:`~robotrl.runner.Runner` over :class:`~robotrl.trainer.OffPolicyLoop` (``fit() -> summary``).

    Raises:
        ConfigError: as :func:`camera_args` and :func:`robotrl.task_mdp.task_env_args`; an on-policy pixel run,
            or a warm start of an agent without ``load_parts`` (pixel BC) or from an incompatible pretraining run
            (:func:`check_pixel_warm_start`); online steps for an agent without ``explore`` (pixel BC).
        DatasetNotFoundError, SpaceMismatchError: the dataset is missing or does not fit the env.
    """
    from hydra.utils import get_class

    from robotrl.envs import env_info, make_env_from_args
    from robotrl.experiment import ensure_dataset, needs_dataset, trainer_config
    from robotrl.task_mdp import eval_env_args, task_env_args, terminate_data_at_success, train_env_args
    from robotrl.trainer import Trainer
    from robotrl.vision.obs import pixel_layout

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    set_seed(int(cfg.seed))
    device, tcfg = resolve_device(cfg.device), trainer_config(cfg)
    if cfg.agent.get("onpolicy") is not None:
        raise ConfigError(f"agent={cfg.agent.name} trains off-policy from scratch or from its dataset: drop the "
                          "onpolicy section (on-policy pixel agents are not built yet)")
    if tcfg.her_ratio > 0:
        raise ConfigError("trainer.her_ratio (HER) relabels goals in flat state observations; camera runs do not "
                          "relabel what the frames show: set trainer.her_ratio=0")
    data = load_dataset(ensure_dataset(cfg.dataset)) if needs_dataset(cfg, tcfg) else None
    task = task_env_args(cfg.env, data)  # the data's MDP
    cams = camera_args(cfg.env, data)
    ev = {**eval_env_args(cfg.env, data, task), **cams}
    task = {**task, **cams}
    train_env = train_env_args(cfg.env, task)
    probe = make_env_from_args(task)
    space, action_space = probe.observation_space, probe.action_space
    probe.close()
    if data is not None:
        check_spaces(data, split_images(space)[0], action_space)
    data = terminate_data_at_success(data, train_env, env_info(task["name"], task["env_kwargs"] or None).reports_success)
    layout = pixel_layout(space)
    state_dim, action_dim = layout.state_dim, flat_dim(action_space)
    obs_norm = observation_normalizer(data, state_dim, cfg.agent.model.get("obs_clip"),
                                      cfg.dataset.get("obs_std_floor")) if state_dim else None
    # transitional (issue 41): agents merged into their state class take the state size as obs_dim, Pixel* ones
    # as state_dim
    merged = "obs_dim" in inspect.signature(get_class(str(cfg.agent.model._target_))).parameters
    agent = _instantiate_agent(cfg.agent.model, image_shapes={k: list(v) for k, v in layout.image_shapes.items()},
                               **{"obs_dim" if merged else "state_dim": state_dim}, action_dim=action_dim,
                               obs_normalizer=obs_norm,
                               action_scaler=action_scaler_for(action_space, data),
                               state_layout=layout.state.to_json() if layout.state is not None else None,
                               device=device, seed=int(cfg.seed))
    if tcfg.init_from:
        if not hasattr(agent, "load_parts"):
            raise ConfigError(f"agent={cfg.agent.name} cannot be warm-started (trainer.init_from): pixel warm starts "
                              "are pixel WSRL's (experiment=wsrl-pixels from experiment=calql-pixels); drop trainer.init_from")
        check_pixel_warm_start(tcfg.init_from, str(cfg.agent.model._target_),
                               OmegaConf.to_container(cfg.agent.model, resolve=True),  # type: ignore[arg-type]
                               {k: list(v) for k, v in layout.image_shapes.items()}, state_dim, action_dim)
    if tcfg.online_steps > 0 and not hasattr(agent, "explore"):
        raise ConfigError(f"agent={cfg.agent.name} learns offline only (it has no exploration): set "
                          "trainer.online_steps=0, or learn online from cameras with experiment=rlpd-pixels")
    r_scale, r_bias, fill = reward_transform(cfg.agent)
    ref_scores = data.ref_scores if data is not None else None
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": state_dim, "action_dim": action_dim,
                           "image_shapes": {k: list(v) for k, v in layout.image_shapes.items()},
                           "train_env": train_env, "eval_env": ev, "device": str(device),
                           "dataset_transitions": data.num_transitions if data is not None else 0,
                           "ref_scores": list(ref_scores) if ref_scores else None}
    return Trainer(agent, run_dir, tcfg, offline_buffer=offline_buffer(cfg.agent, data, tcfg, device, int(cfg.seed)),
                   make_eval_env=lambda: make_env_from_args(ev),
                   make_train_envs=lambda: make_env_from_args(train_env, num_envs=tcfg.num_envs, seed=int(cfg.seed),
                                                              vectorization="sync"),
                   ref_scores=ref_scores, seed=int(cfg.seed), run_config=resolved,
                   title=f"{cfg.agent.name} on {cfg.env.name or task['name']} ({', '.join(cams['pixels'])})",
                   reward_scale=r_scale, reward_bias=r_bias, mc_sparse_fill=fill,
                   gamma=float(cfg.agent.get("gamma", 0.99)), obs_layout=layout)
