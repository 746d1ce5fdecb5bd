"""From a resolved Hydra config to a running :class:`~robotrl.runner.Runner`: the one build path.

This is where sizes are derived, never typed in: the run's :class:`~robotrl.spec.ObservationSpec`
(``Do``, ``Da`` and, for a camera run, the cameras and the state layout) comes from the
environment and is checked against the dataset; observation statistics come from the
dataset; action bounds from the env's action space. The agent is built by :func:`build_agent`
from ``cfg.agent.model`` with explicit arguments only (never the whole config) — the same
function builds the agents of simulation runs (states or cameras, ``obs=pixels``), of the
robot learner (:mod:`robotrl.real_robot.online_cli`) and of Ray workers
(:mod:`robotrl.distributed.collector`). Cameras are an option of the observation spec, not
an agent of their own.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from omegaconf import DictConfig, OmegaConf

from robotrl.agent import OffPolicyAgent
from robotrl.data import ReplayBuffer, check_spaces, load_dataset
from robotrl.data.dataset import resolve_dataset_path
from robotrl.data.dataset import OfflineData
from robotrl.data.spaces import split_images
from robotrl.errors import ConfigError, DatasetNotFoundError
from robotrl.experiment_parts import (
    action_scaler_for,
    build_agent,
    check_warm_start_spec,
    observation_normalizer,
    offline_buffer,
    retention_reads_data,
    reward_transform,
)
from robotrl.progress import emit
from robotrl.spec import CAMERA_PREFIX, ObservationSpec
from robotrl.task_mdp import eval_env_args, task_env_args, terminate_data_at_success, train_env_args  # the data's MDP
from robotrl.trainer import Trainer, TrainerConfig
from robotrl.utils import config_dataclass, resolve_device, set_seed

if TYPE_CHECKING:
    from robotrl.onpolicy import OnPolicyConfig
    from robotrl.runner import Runner


def local_dataset_ids(root: str | Path | None = None) -> list[str]:
    """Ids of the datasets present under the local Minari directory (``root`` or
    ``$MINARI_DATASETS_PATH`` / ``~/.minari/datasets``), sorted."""
    from robotrl.data import datasets_root

    base = Path(root) if root is not None else datasets_root()
    if not base.is_dir():
        return []
    return sorted(str(m.parent.parent.relative_to(base)) for m in base.glob("**/data/metadata.json"))


def _missing_dataset(ds_id: str, recipe: str | None, why: str) -> DatasetNotFoundError:
    """The error for a dataset id that is neither present nor generated: the closest local
    and recipe names, every local dataset, and the ways out."""
    import difflib

    from robotrl.collect import RECIPES

    local = local_dataset_ids()
    known = sorted(set(local) | {r.dataset_id for r in RECIPES.values()})
    close = difflib.get_close_matches(ds_id, known, n=3, cutoff=0.6)
    parts = [f"dataset {ds_id!r} is not present locally and {why}; nothing was generated."]
    if close:
        parts.append(f"Closest names: {', '.join(close)}.")
    parts.append(f"Local datasets: {', '.join(local) if local else 'none'}.")
    parts.append("Fix dataset.id (a Minari id or a dataset directory), pick a dataset config (dataset=<name>), "
                 "or generate one with `robotrl collect recipe=<name>` (`robotrl collect list=true` lists recipes).")
    return DatasetNotFoundError(" ".join(parts))


def ensure_dataset(ds_cfg: DictConfig) -> str:
    """The dataset id (or path) of ``ds_cfg``, generating it with its recipe on first use.

    A recipe generates only what it really produces under its own name
    (:func:`robotrl.collect.registry.recipe_writes`): its own id, or a variant id when the
    config gives recipe arguments. Any other missing id is an error, never a new dataset
    written under a mistyped name.

    Raises:
        ConfigError: ``dataset.id`` is not set.
        DatasetNotFoundError: missing and not generated; the message lists the closest
            names and the local datasets.
    """
    from robotrl.collect.registry import recipe_writes

    ds_id = ds_cfg.get("id")
    if not ds_id:
        raise ConfigError("dataset.id is not set: give your dataset's Minari id or directory, "
                          "e.g. dataset.id=me/reacher/expert-v0 (README: Train on your own data)")
    ds_id = str(ds_id)
    recipe = ds_cfg.get("recipe")
    raw_args = ds_cfg.get("recipe_args")
    args = OmegaConf.to_container(raw_args, resolve=True) if isinstance(raw_args, DictConfig) else dict(raw_args or {})
    try:
        resolve_dataset_path(ds_id)
    except DatasetNotFoundError:
        pass
    else:
        if recipe:  # made by this recipe: with these arguments (its recorded provenance), or refused with the way out
            from robotrl.collect.registry import check_recipe_provenance

            check_recipe_provenance(ds_id, recipe, args, args.get("root"))
        return ds_id
    if not recipe:
        raise _missing_dataset(ds_id, None, "its dataset config names no recipe to generate it with")
    if not ds_cfg.get("generate", True):
        raise _missing_dataset(ds_id, recipe, "the dataset config says generate: false")
    if not recipe_writes(recipe, ds_id, bool(args)):
        from robotrl.collect import recipe_dataset_id

        raise _missing_dataset(ds_id, recipe, f"recipe {recipe!r} writes {recipe_dataset_id(recipe)!r}"
                               + (" (or variants of it)" if args else "") + ", not that id")
    from robotrl.collect import ensure_dataset as generate_once

    emit(f"dataset {ds_id} not found locally: generating it with recipe {recipe} (cached for later runs)")
    return generate_once(recipe, **{**args, "dataset_id": ds_id})  # one generator at a time


def trainer_config(cfg: DictConfig) -> TrainerConfig:
    """:class:`TrainerConfig` from ``cfg.trainer`` (unknown keys raise ConfigError)."""
    return config_dataclass(TrainerConfig, OmegaConf.to_container(cfg.trainer, resolve=True), "trainer")


def onpolicy_config(cfg: DictConfig, tcfg: TrainerConfig) -> "OnPolicyConfig":
    """:class:`~robotrl.onpolicy.OnPolicyConfig` from ``cfg.agent.onpolicy`` (``progress`` from the trainer's).

    Raises:
        ConfigError: an unknown key; ``agent.onpolicy.init_from`` names the single warm-start key;
            ``trainer.eval_seed`` set (the on-policy loop's is ``agent.onpolicy.eval_seed``).
    """
    from robotrl.onpolicy import OnPolicyConfig

    given = dict(OmegaConf.to_container(cfg.agent.onpolicy, resolve=True))  # type: ignore[arg-type]
    if tcfg.eval_seed is not None:
        raise ConfigError(f"trainer.eval_seed={tcfg.eval_seed} sets the off-policy loop's evaluation resets; an on-policy "
                          f"run (agent={cfg.agent.name}) evaluates with agent.onpolicy.eval_seed: pass that instead")
    if given.pop("init_from", None) is not None:
        raise ConfigError("agent.onpolicy.init_from is now trainer.init_from (one warm-start key for every agent): "
                          "pass trainer.init_from=<checkpoint or run dir>")
    return config_dataclass(OnPolicyConfig, {**given, "progress": tcfg.progress}, "agent.onpolicy")


def needs_dataset(cfg: DictConfig, tcfg: TrainerConfig) -> bool:
    """Whether a phase of this run reads the dataset: on-policy, its ``pretrain_steps`` of behaviour
    cloning; off-policy, offline updates, offline rows mixed into online batches, or a warm start
    (evaluated like its pretraining: the dataset's eval spec and reference scores)."""
    onpolicy = cfg.agent.get("onpolicy")
    if onpolicy is not None:
        return bool(onpolicy.get("pretrain_steps")) or retention_reads_data(cfg.agent)
    return tcfg.offline_steps > 0 or tcfg.offline_ratio > 0 or bool(tcfg.init_from)


def _size(value: Any) -> list[int]:
    """``image_size`` as ``[H, W]`` (an int ``N`` is ``[N, N]``)."""
    if isinstance(value, (int, float)):
        return [int(value), int(value)]
    return [int(v) for v in value]


def env_name_none(cfg: DictConfig) -> bool:
    """Whether the run says ``env.name=none`` (the string; ``null`` means "the dataset's env"): train the dataset
    without an env even when it records one (a twin's recording trained as a physical robot's)."""
    name = cfg.env.get("name")
    return isinstance(name, str) and name.lower() == "none"


def wants_cameras(cfg: DictConfig) -> bool:
    """Whether the run observes cameras: ``obs.cameras`` is not ``[]`` (``obs=pixels``: ``null``, the
    dataset's cameras; or a list of names)."""
    obs = cfg.get("obs") or {}
    cams = obs.get("cameras", [])
    return cams is None or len(cams) > 0


def _data_cameras(data: OfflineData) -> tuple[list[str], list[int]]:
    """The cameras and ``[H, W]`` the dataset was recorded with.

    Raises:
        ConfigError: no cameras, cameras not under ``pixels/`` (not a robotrl camera env), or cameras of two sizes.
    """
    name = data.metadata.get("dataset_id")
    if not data.images:
        raise ConfigError(f"dataset {name!r} records no camera frames, and obs=pixels learns from them: pick a camera "
                          "dataset (dataset=pointmaze-umaze-topdown) or record one, e.g. `robotrl collect "
                          "recipe=pointmaze-umaze cameras=[topdown] image_size=64`; or train on states (obs=state)")
    keys = list(data.images)
    if not all(k.startswith(CAMERA_PREFIX) for k in keys):
        raise ConfigError(f"dataset {name!r} has cameras {keys}, not recorded by robotrl's camera envs (keys "
                          f"{CAMERA_PREFIX}<camera>); robotrl train can only rebuild those for online steps and evaluation")
    sizes = {tuple(v.shape[1:3]) for v in data.images.values()}
    if len(sizes) != 1:
        raise ConfigError(f"dataset {name!r} has cameras of several sizes {sorted(sizes)}; the camera env renders "
                          "every camera at one size")
    return [k[len(CAMERA_PREFIX):] for k in keys], list(sizes.pop())


def camera_args(cfg: DictConfig, data: OfflineData | None) -> dict[str, Any]:
    """The cameras of the run's envs: ``{"pixels": [camera, ...], "size": [H, W]}`` (keyword arguments of
    :func:`robotrl.envs.make_env_from_args`); ``{}`` for a state run.

    With a dataset, its cameras and frame size; ``obs.cameras`` / ``obs.image_size``, when set, must equal
    them (a policy trained on one view cannot act on another). Without a dataset, the configured ones.

    Raises:
        ConfigError: the configured cameras or size differ from the data's (names the override to drop), the
            dataset has no usable cameras, or there is neither a dataset nor ``obs.cameras``.
    """
    if not wants_cameras(cfg):
        return {}
    obs = cfg.get("obs") or {}
    want, want_size = obs.get("cameras"), obs.get("image_size")
    want = None if want is None else [str(c) for c in ([want] if isinstance(want, str) else want)]
    if data is None:
        if not want:
            raise ConfigError("a camera run without a dataset needs the cameras to render: set obs.cameras=[topdown] "
                              "(and obs.image_size=64)")
        return {"pixels": want, "size": _size(want_size or 64)}
    cams, size = _data_cameras(data)
    name = data.metadata.get("dataset_id")
    fix = ("drop the override (null takes the dataset's), or record a dataset with those cameras: `robotrl collect "
           "recipe=<recipe> cameras=[...] image_size=N` and pass dataset.id=<its id>")
    if want is not None and want != cams:
        raise ConfigError(f"obs.cameras={want} differs from the cameras dataset {name!r} was recorded with ({cams}): "
                          f"the policy would see other images than it learns from. Set obs.cameras=[{','.join(cams)}] or "
                          + fix)
    if want_size is not None and _size(want_size) != size:
        raise ConfigError(f"obs.image_size={want_size} differs from the frame size {size} (H, W) of dataset {name!r}: "
                          f"set obs.image_size={size[0]} or " + fix)
    return {"pixels": cams, "size": size}


def frame_stack_of(cfg: DictConfig) -> int:
    """``k`` frames per camera: ``obs.frame_stack`` (1 by default), part of the observation spec (the one knob:
    ``agent.model.frame_stack`` is no agent setting, refused when the config composes)."""
    return int((cfg.get("obs") or {}).get("frame_stack") or 1)


def _explicit_model_keys(overrides: list[str] | None) -> set[str]:
    """``agent.model`` keys set on the command line (``agent.model.hidden=[64,64]``, ``+``/``++`` forms)."""
    keys = set()
    for o in overrides or []:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith("agent.model."):
            keys.add(key[len("agent.model."):].split(".", 1)[0])
    return keys


def architecture_keys(model: DictConfig) -> tuple[str, ...]:
    """The ``ARCHITECTURE_KEYS`` of the agent class ``model`` (``cfg.agent.model``) instantiates (``_target_``):
    the settings a warm start adopts from its checkpoint; ``()`` for a class that is no
    :class:`~robotrl.agent.AgentBase` (a reward model)."""
    from hydra.utils import get_class

    from robotrl.agent import AgentBase

    cls = get_class(str(model._target_))
    return cls.ARCHITECTURE_KEYS if issubclass(cls, AgentBase) else ()


def warm_start_architecture(cfg: DictConfig, overrides: list[str] | None = None,
                            run_dir: Path | None = None, source: str | Path | None = None) -> DictConfig:
    """``cfg`` with the network architecture of the checkpoint it warm-starts from.

    A warm start (``trainer.init_from``, for every agent: :func:`robotrl.warmstart.warm_start`)
    loads weights, so the fine-tuning run must build the networks the pretraining run
    built: every key of the fine-tuning agent class's ``ARCHITECTURE_KEYS``
    (:attr:`robotrl.agent.AgentBase.ARCHITECTURE_KEYS`, declared by each agent class) that the
    checkpoint's recorded ``agent.model`` holds is taken from the checkpoint (normalisers come
    with the loaded policy). Nothing has to be repeated on the command line.

    A run that resumes (``run_dir`` holds ``checkpoints/latest.pt``) is never warm-started
    again, so its architecture comes from its own checkpoint, which recorded the one it was
    built with: the warm-start source may since have been moved or deleted.

    Args:
        cfg: the composed run config.
        overrides: the command-line overrides (Hydra's ``overrides.task``); a key set there
            to another value than the checkpoint's is a conflict. ``None``: none known.
        run_dir: the run's directory; ``None``: a fresh run.
        source: the warm-start checkpoint (``None``: ``cfg.trainer.init_from``; the robot learner's
            ``init_from``).

    Returns:
        ``cfg`` itself when nothing changes, else a merged copy.

    Raises:
        ConfigError: an explicit override conflicts with the checkpoint (both values named).
        CheckpointError: the checkpoint cannot be read.
    """
    from robotrl.checkpoint import load_checkpoint

    if source is None:
        source = (cfg.get("trainer") or {}).get("init_from")
    own = Path(run_dir) / "checkpoints" / "latest.pt" if run_dir is not None else None
    if source and own is not None and own.is_file():
        source = own  # a resume: the run's own recorded architecture, the source is not read again
    if not source or not Path(str(source)).exists():
        return cfg  # missing: the trainer's own warm start raises the clear error
    recorded = (load_checkpoint(source).get("config") or {}).get("agent", {}).get("model") or {}
    explicit, adopt = _explicit_model_keys(overrides), {}
    model = OmegaConf.to_container(cfg.agent.model, resolve=True)
    for key in architecture_keys(cfg.agent.model):
        if key not in recorded or key not in model:
            continue
        mine = model[key]
        if mine == recorded[key]:
            continue
        if key in explicit:
            raise ConfigError(
                f"agent.model.{key}={mine} conflicts with the warm-start checkpoint {source}, whose networks were "
                f"built with agent.model.{key}={recorded[key]}; drop the override (a warm start takes the "
                f"architecture from its checkpoint) or pretrain again with agent.model.{key}={mine}")
        adopt[key] = recorded[key]
    if not adopt:
        return cfg
    emit(f"warm start from {source}: architecture taken from the checkpoint: "
          + ", ".join(f"{k}={v}" for k, v in adopt.items()))
    return OmegaConf.merge(cfg, {"agent": {"model": adopt}})


def _ray_parts(cfg: DictConfig, agent, task: dict, ev: dict, num_envs: int, spec: ObservationSpec, tcfg: TrainerConfig):
    """``(make_collector, evaluator)`` of the on-policy loop from ``cfg.collector``: ``(None, None)``
    for ``collector=local`` (the default); Ray rollout and evaluation workers for ``collector=ray``
    (:mod:`robotrl.distributed`), whose agents :func:`build_agent` builds from the same spec.

    Raises:
        ConfigError: an unknown collector kind or setting.
    """
    given = OmegaConf.to_container(cfg.collector, resolve=True) if cfg.get("collector") is not None else {}
    kind = given.get("kind", "local")
    if kind == "local":
        return None, None
    if kind != "ray":
        raise ConfigError(f"collector.kind={kind!r}: choose local (default) or ray (collector=ray)")
    from robotrl.distributed.collector import RayCollectorConfig, ray_collector_factory

    ccfg = config_dataclass(RayCollectorConfig, given, "collector")
    wspec = worker_agent_spec(cfg, spec, tcfg)
    make_collector = ray_collector_factory(ccfg, agent, agent_spec=wspec, env_args=task, num_envs=num_envs, seed=int(cfg.seed))
    evaluator = None
    if ccfg.eval_workers > 0:
        from robotrl.distributed.evaluation import ray_evaluator

        evaluator = ray_evaluator(lambda: agent.policy, ev, workers=ccfg.eval_workers, address=ccfg.address,
                                  get_actors=make_collector.actors)
    return make_collector, evaluator


def worker_agent_spec(cfg: DictConfig, spec: ObservationSpec, tcfg: TrainerConfig) -> dict:
    """What a Ray worker needs to build the run's agent with :func:`build_agent` (JSON-able): the resolved
    ``agent.model``, the observation spec, the seed and the warm start."""
    return {"model": OmegaConf.to_container(cfg.agent.model, resolve=True), "observation": spec.to_dict(),
            "obs_dim": spec.obs_dim, "action_dim": spec.action_dim, "seed": int(cfg.seed),
            "init_from": str(tcfg.init_from) if tcfg.init_from else None, "init_parts": tcfg.init_parts}


def run_spec(cfg: DictConfig, data: OfflineData | None) -> tuple[dict, dict, ObservationSpec, Any]:
    """The task, the camera arguments, the :class:`~robotrl.spec.ObservationSpec` and the ``EnvInfo`` of a
    simulation run, derived from the env and checked against the dataset.

    Returns:
        ``(task, cams, spec, info)``: ``task`` the env arguments of the data's MDP (cameras included),
        ``cams`` :func:`camera_args`, ``spec`` the run's spec, ``info`` :func:`robotrl.envs.env_info`.

    Raises:
        ConfigError, SpaceMismatchError: as :func:`camera_args`, :func:`robotrl.task_mdp.task_env_args`,
            :func:`robotrl.data.check_spaces`.
    """
    from robotrl.envs import env_info, make_env_from_args

    task = task_env_args(cfg.env, data)  # the data's MDP: online and evaluation envs alike
    info = env_info(task["name"], task["env_kwargs"] or None)
    cams = camera_args(cfg, data)
    if cams:
        task = {**task, **cams}
        probe = make_env_from_args(task)
        space, action_space = probe.observation_space, probe.action_space
        probe.close()
        spec = ObservationSpec.from_spaces(space, action_space, frame_stack_of(cfg))
        if data is not None:
            check_spaces(data, split_images(space)[0], action_space)
    else:
        spec = ObservationSpec(info.obs_dim, info.action_dim)
        if data is not None:
            check_spaces(data, info.observation_space, info.action_space)
    return task, cams, spec, info


def build_trainer(cfg: DictConfig, run_dir: Path, overrides: list[str] | None = None) -> "Runner":
    """Dataset, envs, observation spec, normalisers, agent, buffer and loop of one run: the one build path.

    ``overrides``: the command-line overrides, to tell an explicit network setting from a
    default when warm-starting (:func:`warm_start_architecture`); ``None``: read Hydra's
    when it runs, else none.

    Returns a :class:`~robotrl.runner.Runner` (``fit() -> summary``). Agents whose config has
    an ``onpolicy`` section (DPPO, ReinFlow, Gaussian PPO, residual PPO) get the on-policy loop
    (:class:`robotrl.onpolicy.OnPolicyLoop`); the others the offline/online
    :class:`~robotrl.trainer.OffPolicyLoop`. Cameras (``obs=pixels``) are an option of the
    observation spec on either.

    Raises:
        ConfigError: a setting that cannot work (named with the way out); DatasetNotFoundError,
            SpaceMismatchError: the dataset is missing or does not fit the env.
    """
    from robotrl.envs import make_env, make_env_from_args

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    set_seed(int(cfg.seed))
    device = resolve_device(cfg.device)
    tcfg = trainer_config(cfg)
    if overrides is None:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    cfg = warm_start_architecture(cfg, overrides, run_dir)

    data = load_dataset(ensure_dataset(cfg.dataset)) if needs_dataset(cfg, tcfg) else None
    no_env = env_name_none(cfg)  # env.name=none: the dataset's recorded env is not used either
    if data is not None and (no_env or (cfg.env.name is None and not data.metadata.get("env_spec"))):
        return _build_without_env(cfg, run_dir, tcfg, data, device)  # recorded on a robot: offline, held-out validation
    task, cams, spec, info = run_spec(cfg, data)
    train_env = train_env_args(cfg.env, task)
    data = terminate_data_at_success(data, train_env, info.reports_success)
    if tcfg.init_from:
        check_warm_start_spec(tcfg.init_from, spec)

    obs_norm = (observation_normalizer(data, spec.obs_dim, cfg.agent.model.get("obs_clip"), cfg.dataset.get("obs_std_floor"))
                if spec.obs_dim else None)
    agent = build_agent(cfg.agent.model, spec, obs_normalizer=obs_norm, action_scaler=action_scaler_for(info.action_space, data),
                        device=device, seed=int(cfg.seed))

    ev = {**eval_env_args(cfg.env, data, task), **cams}
    ref_scores = data.ref_scores if data is not None else None

    def make_eval_env():
        if cams:
            return make_env_from_args(ev)
        return make_env(ev["name"], env_kwargs=ev["env_kwargs"], max_episode_steps=ev["max_episode_steps"])

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": spec.obs_dim, "action_dim": spec.action_dim, "observation": spec.to_dict(),
                           "train_env": train_env, "eval_env": ev, "device": str(device),
                           "dataset_transitions": data.num_transitions if data is not None else 0,
                           "ref_scores": list(ref_scores) if ref_scores else None}
    if cams:
        resolved["derived"]["image_shapes"] = {k: list(v) for k, v in spec.image_shapes.items()}
    title = f"{cfg.agent.name} on {cfg.env.name or task['name']}" + (f" ({', '.join(spec.cameras)})" if cams else "")

    if cfg.agent.get("onpolicy") is not None:  # DPPO / ReinFlow / Gaussian PPO / residual PPO: the on-policy loop
        from robotrl.onpolicy import OnPolicyTrainer

        if tcfg.her_ratio > 0:
            raise ConfigError(f"trainer.her_ratio relabels the goals of replayed transitions; agent={cfg.agent.name} "
                              "learns on-policy from fresh rollouts: set trainer.her_ratio=0")
        ocfg = onpolicy_config(cfg, tcfg)

        def make_chunk_envs():
            return make_env_from_args(train_env, num_envs=ocfg.num_envs, seed=int(cfg.seed),
                                      vectorization=ocfg.vectorization, action_chunk=int(agent.policy.Te))

        demos = None
        if ocfg.pretrain_steps > 0 or retention_reads_data(cfg.agent):  # BC pretraining, knowledge retention
            if data is None:
                raise ConfigError("agent.onpolicy.pretrain_steps > 0 needs a dataset (it pretrains on it)")
            demos = ReplayBuffer.from_offline(data, gamma=float(cfg.agent.get("gamma", 0.99)), device=device,
                                              seed=int(cfg.seed))
        make_collector, evaluator = _ray_parts(cfg, agent, train_env, ev, ocfg.num_envs, spec, tcfg)
        return OnPolicyTrainer(agent, run_dir, ocfg, make_train_envs=make_chunk_envs, make_eval_env=make_eval_env,
                               ref_scores=ref_scores, seed=int(cfg.seed), run_config=resolved, title=title,
                               offline_buffer=demos, init_from=tcfg.init_from, init_parts=tcfg.init_parts,
                               make_collector=make_collector, evaluator=evaluator)
    if (cfg.get("collector") or {}).get("kind", "local") != "local":
        raise ConfigError(f"collector={cfg.collector.kind} collects on-policy rollouts (agent=dppo, ppo, bc-ppo, reinflow, "
                          f"residual-ppo); agent={cfg.agent.name} is off-policy: drop collector={cfg.collector.kind}")
    if cams and tcfg.her_ratio > 0:
        raise ConfigError("trainer.her_ratio (HER) relabels goals in flat state observations; camera runs do not "
                          "relabel what the frames show: set trainer.her_ratio=0")

    # reward scale/bias: applied once, here to the offline data and by the trainer to online rewards,
    # so the buffers' MC returns (Cal-QL's bound) and the sparse fill are in the same units
    r_scale, r_bias, fill = reward_transform(cfg.agent)
    buffer = offline_buffer(cfg.agent, data, tcfg, device, int(cfg.seed), frame_stack=spec.frame_stack)
    if tcfg.online_steps > 0 and not (isinstance(agent, OffPolicyAgent) and agent.explores_online):
        why = "from cameras" if isinstance(agent, OffPolicyAgent) else "(it has no exploration)"
        raise ConfigError(f"agent={cfg.agent.name} learns offline only {why}: set "
                          "trainer.online_steps=0, or learn online with an off-policy agent (experiment=rlpd)")
    if cfg.get("reset_free") is not None:  # experiment=reset-free: forward and backward agents on one scene (RoboFuME)
        from robotrl.reset_free import reset_free_runner

        return reset_free_runner(cfg, run_dir, tcfg, agent, buffer, spec, info, train_env, make_eval_env, ref_scores,
                                 resolved, title)

    def make_train_envs():
        return make_env_from_args(train_env, num_envs=tcfg.num_envs, seed=int(cfg.seed), vectorization="sync")

    relabeler = None
    if tcfg.her_ratio > 0:  # HER: the task's own goal functions recompute rewards for relabelled goals
        from robotrl.data.her import GoalRelabeler

        relabeler = GoalRelabeler(make_env_from_args(task), info.layout, ratio=tcfg.her_ratio, reward_scale=r_scale,
                                  reward_bias=r_bias, terminate_on_success=train_env["terminate_on_success"],
                                  seed=int(cfg.seed) + 2)
    return Trainer(agent, run_dir, tcfg, offline_buffer=buffer, make_eval_env=make_eval_env,
                   make_train_envs=make_train_envs, ref_scores=ref_scores,
                   seed=int(cfg.seed), run_config=resolved, title=title,
                   reward_scale=r_scale, reward_bias=r_bias, mc_sparse_fill=fill,
                   gamma=float(cfg.agent.get("gamma", 0.99)), goal_relabeler=relabeler, obs_layout=spec.layout())


def _build_without_env(cfg: DictConfig, run_dir: Path, tcfg: TrainerConfig, data: OfflineData, device) -> "Runner":
    """A run on a dataset with no env behind it (no ``env_spec``, no ``env.name``: recorded on a robot, or converted
    from LeRobot; or ``env.name=none``: a dataset that records its env, such as a twin's recording, trained as a
    physical robot's would be): offline updates on most episodes, evaluation on the held-out rest
    (:mod:`robotrl.validation`) instead of rollouts. The checkpoint deploys through the bridge as any other.

    Raises:
        ConfigError: online steps or an on-policy agent (both need an env to act in), HER, too few episodes.
    """
    from robotrl.validation import Validator, split_episodes

    name = data.metadata.get("dataset_id")
    if cfg.agent.get("onpolicy") is not None or tcfg.online_steps > 0:
        raise ConfigError(f"dataset {name!r} records no env and env.name is not set, so there is nothing to act in: "
                          "train offline (an offline agent such as agent=bc, or trainer.online_steps=0), or name the "
                          "env it was recorded in (env.name=<gymnasium id>); online learning on a robot is `robotrl "
                          "learner` + `robotrl actor`")
    if tcfg.her_ratio > 0:
        raise ConfigError("trainer.her_ratio relabels goals with the env's goal functions, and this run has no env: "
                          "set trainer.her_ratio=0")
    if wants_cameras(cfg):
        if not data.images:
            _data_cameras(data)  # raises the no-cameras error
        spec = ObservationSpec(data.obs_dim, data.action_dim, {k: tuple(v.shape[1:]) for k, v in data.images.items()},
                               data.obs_layout.to_json() if data.obs_layout is not None else None, frame_stack_of(cfg))
    else:
        spec = ObservationSpec(data.obs_dim, data.action_dim)
        if data.images:
            import dataclasses

            data = dataclasses.replace(data, images=None, image_index=None)  # obs=state reads the state only
    train, held_out = split_episodes(data, tcfg.validation_fraction, int(cfg.seed))
    r_scale, r_bias, fill = reward_transform(cfg.agent)
    gamma = float(cfg.agent.get("gamma", 0.99))
    obs_norm = (observation_normalizer(train, spec.obs_dim, cfg.agent.model.get("obs_clip"), cfg.dataset.get("obs_std_floor"))
                if spec.obs_dim else None)
    agent = build_agent(cfg.agent.model, spec, obs_normalizer=obs_norm,
                        action_scaler=action_scaler_for(data.action_space, train), device=device, seed=int(cfg.seed))
    from robotrl.experiment_parts import transformed_rewards

    validator = Validator(transformed_rewards(cfg.agent, held_out), gamma=gamma, mc_sparse_fill=fill)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": spec.obs_dim, "action_dim": spec.action_dim, "observation": spec.to_dict(),
                           "train_env": None, "eval_env": None, "device": str(device),
                           "evaluation": "validation on held-out episodes (no env)",
                           "dataset_transitions": train.num_transitions, "validation_episodes": held_out.num_episodes,
                           "validation_transitions": held_out.num_transitions, "ref_scores": None}
    if spec.has_cameras:
        resolved["derived"]["image_shapes"] = {k: list(v) for k, v in spec.image_shapes.items()}
    how = "is trained without its env (env.name=none)" if env_name_none(cfg) else "records no env"
    emit(f"dataset {name!r} {how}: training offline on {train.num_episodes} episodes, measuring on "
          f"{held_out.num_episodes} held-out episodes (trainer.validation_fraction={tcfg.validation_fraction})")
    return Trainer(agent, run_dir, tcfg, offline_buffer=offline_buffer(cfg.agent, train, tcfg, device, int(cfg.seed),
                                                                       frame_stack=spec.frame_stack),
                   make_eval_env=None, validator=validator, seed=int(cfg.seed), run_config=resolved,
                   title=f"{cfg.agent.name} on {name} (no env: held-out validation)", reward_scale=r_scale,
                   reward_bias=r_bias, mc_sparse_fill=fill, gamma=gamma, obs_layout=spec.layout())

