"""The data's MDP: the environment arguments of a run's training and evaluation envs.

A dataset records the env it was collected in (``env_spec``: gymnasium id, kwargs, time limit); online
fine-tuning and evaluation run in exactly that env unless told otherwise (:func:`task_env_args`), evaluation
may follow a dataset's own ``eval_env_spec`` (:func:`eval_env_args`), and training envs may end episodes at
success, with the offline data made the same MDP (:func:`train_env_args`, :func:`terminate_data_at_success`).
Used by :func:`robotrl.experiment.build_trainer` and the camera runs' builder.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import gymnasium as gym
from omegaconf import DictConfig, OmegaConf

from robotrl.data.dataset import OfflineData
from robotrl.envs.registry import resolve_env
from robotrl.errors import ConfigError


#: ``gymnasium.make`` kwargs that change how an env is rendered, never its rewards or dynamics.
RENDER_KWARGS = frozenset({"render_mode", "width", "height", "camera_id", "camera_name", "default_camera_config"})


def _full_kwargs(gym_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Every constructor argument ``gym.make(gym_id, **kwargs)`` ends up with: the env class's
    defaults, overlaid with the registered kwargs, overlaid with ``kwargs``; render settings
    dropped; values JSON-canonical (so recorded and configured specs compare equal)."""
    import inspect

    full: dict[str, Any] = {}
    if gym_id in gym.registry:
        spec = gym.spec(gym_id)
        if isinstance(spec.entry_point, str) or callable(spec.entry_point):
            try:
                creator = gym.envs.registration.load_env_creator(spec.entry_point) \
                    if isinstance(spec.entry_point, str) else spec.entry_point
                full = {k: p.default for k, p in inspect.signature(creator).parameters.items()
                        if p.default is not inspect.Parameter.empty}
            except (ImportError, AttributeError, TypeError, ValueError):
                full = {}
        full.update(spec.kwargs)
    full.update(kwargs or {})
    return {k: json.loads(json.dumps(v, default=str)) for k, v in full.items() if k not in RENDER_KWARGS}


def task_env_args(env_cfg: DictConfig, data: OfflineData | None) -> dict[str, Any]:
    """Arguments of :func:`robotrl.envs.make_env` for the online and evaluation envs: the data's MDP.

    The dataset's recorded ``env_spec`` (gymnasium id, kwargs, time limit) is the task:
    online fine-tuning and evaluation run in exactly that env, so the rewards the agent
    meets online are the rewards it was pretrained on (a critic pretrained on one reward
    function and fine-tuned on another sees its targets jump and collapses). The
    configured env must describe the same MDP; render settings (``render_mode``,
    ``width``, ...) may differ. ``env.match_dataset: false`` opts out: the configured env
    is used as given (evaluation then follows :func:`eval_env_args`).

    Args:
        env_cfg: the ``env`` config group (``name``, ``kwargs``, ``max_episode_steps``,
            ``match_dataset``, ``eval_from_dataset``).
        data: the offline dataset, or ``None`` (online from scratch: the configured env).

    Returns:
        ``{"name": gym id or robotrl name, "env_kwargs": dict, "max_episode_steps": int | None}``.

    Raises:
        ConfigError: the configured env (id, kwargs or time limit) or the dataset's own
            ``eval_env_spec`` describes another MDP than the one the data was recorded in.
    """
    kwargs = OmegaConf.to_container(env_cfg.kwargs, resolve=True) or {}
    configured = {"name": env_cfg.name, "env_kwargs": kwargs, "max_episode_steps": env_cfg.max_episode_steps}
    spec_json = data.metadata.get("env_spec") if data is not None else None
    user_kwargs = kwargs
    if env_cfg.name is None:  # env=gym: the dataset's env (id and kwargs; configured kwargs are checked below)
        if not spec_json:
            raise ConfigError("env.name is not set and there is no dataset env_spec to take it from: name a "
                              "registered gymnasium id (env.name=InvertedPendulum-v5) or a robotrl env (env=hopper)")
        recorded = json.loads(spec_json)
        env_cfg = OmegaConf.merge(env_cfg, {"name": recorded["id"]})
        kwargs = {**{k: v for k, v in (recorded.get("kwargs") or {}).items() if k not in RENDER_KWARGS}, **kwargs}
        configured = {"name": recorded["id"], "env_kwargs": kwargs,
                      "max_episode_steps": env_cfg.max_episode_steps or recorded.get("max_episode_steps")}
    if not spec_json or not env_cfg.get("match_dataset", True):
        return configured
    spec = json.loads(spec_json)
    data_id, data_kwargs, data_limit = spec["id"], spec.get("kwargs") or {}, spec.get("max_episode_steps")
    fix = ("or set env.match_dataset=false to fine-tune and evaluate in another MDP on purpose")
    cfg_id, table_kwargs = resolve_env(env_cfg.name)
    want, have = _full_kwargs(data_id, data_kwargs), _full_kwargs(cfg_id, {**table_kwargs, **kwargs})
    diff = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
    if cfg_id != data_id or diff:
        shown = {k: (have.get(k), want.get(k)) for k in diff[:6]}
        raise ConfigError(
            f"env {env_cfg.name!r} ({cfg_id}) is not the MDP dataset {data.metadata.get('dataset_id')!r} was recorded "
            f"in ({data_id}); differing kwargs (configured, recorded): {shown}. Its rewards would differ from the "
            f"data's. {_env_fix(data_id, want, cfg_id)} {fix}")
    if env_cfg.max_episode_steps is not None and data_limit is not None and int(env_cfg.max_episode_steps) != int(data_limit):
        raise ConfigError(f"env.max_episode_steps={env_cfg.max_episode_steps} differs from the dataset's time limit "
                          f"{data_limit}: drop the override (or set env.max_episode_steps={data_limit}), {fix}")
    eval_json = data.metadata.get("eval_env_spec")
    if eval_json:
        ev = json.loads(eval_json)
        if ev["id"] != data_id or _full_kwargs(ev["id"], ev.get("kwargs")) != want:
            raise ConfigError(
                f"dataset {data.metadata.get('dataset_id')!r} records an evaluation env ({ev['id']}, "
                f"{ev.get('kwargs')}) that pays other rewards than the env its data comes from ({data_id}, "
                f"{data_kwargs}); robotrl evaluates and fine-tunes in the data's MDP. Set env.match_dataset=false "
                "to train on this data and evaluate in its eval env anyway")
    render = {k: v for k, v in user_kwargs.items() if k in RENDER_KWARGS}
    return {"name": data_id, "env_kwargs": {**{k: v for k, v in data_kwargs.items() if k not in RENDER_KWARGS}, **render},
            "max_episode_steps": data_limit if env_cfg.max_episode_steps is None else env_cfg.max_episode_steps}


def _env_groups() -> dict[str, tuple[str, dict[str, Any]]]:
    """``configs/env`` groups that name a fixed env: group -> (gym id, full constructor kwargs)."""
    from importlib import resources

    import yaml

    out = {}
    for f in sorted((resources.files("robotrl") / "configs" / "env").iterdir(), key=lambda f: f.name):
        if not f.name.endswith(".yaml"):
            continue
        doc = yaml.safe_load(f.read_text()) or {}
        if not doc.get("name"):
            continue
        try:
            gid, table = resolve_env(doc["name"])
        except ConfigError:
            continue
        out[f.name[:-5]] = (gid, _full_kwargs(gid, {**table, **(doc.get("kwargs") or {})}))
    return out


def _env_fix(data_id: str, data_kwargs: dict[str, Any], cfg_id: str) -> str:
    """Which overrides resolve an env/dataset mismatch: the env config of the data's MDP
    (or ``env=gym``, which takes the dataset's env) and the env config of the configured id
    (its own dataset comes with it)."""
    groups = _env_groups()
    data_group = next((g for g, (gid, kw) in groups.items() if gid == data_id and kw == data_kwargs), None)
    own = f"env={data_group}" if data_group else "env=gym"
    cfg_groups = [g for g, (gid, _) in groups.items() if gid == cfg_id]
    other = (f"env={cfg_groups[0]} (selects its own dataset too)" if cfg_groups
             else f"env=gym env.name={cfg_id} dataset.id=<a dataset recorded on {cfg_id}>")
    return (f"To train on this dataset in its own env: {own} (env=gym takes the dataset's env: id "
            f"{data_id}, its kwargs and time limit). To train on {cfg_id}: {other}, or dataset.id=<a dataset "
            f"recorded on {cfg_id}>;")


def train_env_args(env_cfg: DictConfig, task: dict[str, Any]) -> dict[str, Any]:
    """The training envs' :func:`robotrl.envs.make_env_from_args` arguments: the task (:func:`task_env_args`) plus
    ``terminate_on_success`` from ``env.train_terminate_on_success`` (ResiP/ResFiT: success ends TRAINING episodes;
    evaluation keeps the task's own, see :func:`eval_env_args`)."""
    return {**task, "terminate_on_success": bool(env_cfg.get("train_terminate_on_success", False))}


def terminate_data_at_success(data: OfflineData | None, train_env: dict[str, Any], reports_success: bool) -> OfflineData | None:
    """The offline data in the training envs' MDP: with ``train_env["terminate_on_success"]`` every transition whose
    step succeeded (``data.success``) is ``terminated``, as the online envs then end there; unchanged otherwise.

    Demonstrations recorded in envs that go on after a success (Fetch) would otherwise give the critic two targets for
    reaching the goal (``r`` online, ``r + γ Q(s', a')`` offline) and let n-step sums run past it. Transitions after
    the first success stay: each is a valid transition of the terminating MDP (its ``terminated`` is a function of
    its next state).

    Args:
        reports_success: whether the task reports success at all (:attr:`robotrl.envs.EnvInfo.reports_success`);
            a task that never succeeds (locomotion) has nothing to end.

    Raises:
        ConfigError: the task reports success but the dataset records no per-step success to end its episodes at.
    """
    if data is None or not train_env.get("terminate_on_success"):
        return data
    if data.success is None:
        if not reports_success:
            return data
        raise ConfigError(f"env.train_terminate_on_success=true ends training episodes at success, but dataset "
                          f"{data.metadata.get('dataset_id')!r} records no per-step success (infos 'success' / "
                          "'is_success') to end its episodes at too, so offline and online data would be different "
                          "MDPs: record the data with robotrl collect (it stores success), or set "
                          "env.train_terminate_on_success=false")
    return replace(data, terminated=data.terminated | data.success.astype(bool))


def eval_env_args(env_cfg: DictConfig, data: OfflineData | None, task: dict[str, Any] | None = None) -> dict[str, Any]:
    """Arguments of :func:`robotrl.envs.make_env` for evaluation: the data's MDP
    (:func:`task_env_args`); with ``env.match_dataset: false`` the configured env, or the
    dataset's ``eval_env_spec`` when ``env.eval_from_dataset`` (as Minari's D4RL datasets intend).

    ``task``: :func:`task_env_args`'s answer when the caller has it already.

    Raises:
        ConfigError: as :func:`task_env_args`.
    """
    configured = task if task is not None else task_env_args(env_cfg, data)
    if data is None or env_cfg.get("match_dataset", True):
        return configured
    spec_json = data.metadata.get("eval_env_spec")
    if not (env_cfg.get("eval_from_dataset", True) and spec_json):
        return configured
    spec = json.loads(spec_json)
    return {"name": spec["id"], "env_kwargs": {**(spec.get("kwargs") or {}), **configured["env_kwargs"]},
            "max_episode_steps": env_cfg.max_episode_steps or spec.get("max_episode_steps")}
