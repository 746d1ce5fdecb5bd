"""The run schedules and the agents' settings as Hydra structured configs: the one source of their defaults and types.

:class:`TrainerConfig` (``trainer.*`` of ``robotrl train``) and :class:`OnPolicyConfig`
(``agent.onpolicy.*`` of the on-policy agents) are registered in Hydra's ``ConfigStore`` as
``schema/trainer`` and ``schema/onpolicy`` (:func:`register`); ``configs/train.yaml`` and the
on-policy agent configs extend them through their defaults lists. An agent's settings
(``agent.model.*``) are the keyword arguments of its constructor: :func:`model_schema` turns them
into a dataclass (each setting with the constructor's default, typed from its annotation), which
:mod:`robotrl.configs` registers as ``schema/model/<ClassName>`` for every agent class the agent
configs instantiate. So a wrong type (``trainer.utd=fast``, ``agent.model.num_critics=2.5``) or an
unknown key (``trainer.ofline_steps=100``) fails when Hydra composes the config, before anything is
built (one line from :func:`wrong_type_line` / :func:`build_argument_hint` in the CLI), and no YAML
repeats a default (Hydra's structured configs; SB3's habit of one meaning per knob).
"""

from __future__ import annotations

import collections.abc
import copy
import dataclasses
import functools
import importlib
import inspect
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, List, Optional, Union  # noqa: UP035  (OmegaConf reads typing's List and Optional)

from robotrl.errors import ConfigError
from robotrl.utils import check_schedule

__all__ = ["BUILD_ARGUMENTS", "TrainerConfig", "OnPolicyConfig", "RetentionConfig", "RetentionTerm", "agent_target",
           "build_argument_hint", "model_schema", "register", "register_agents", "wrong_type_line"]


@dataclass
class TrainerConfig:
    """Schedule of a run (all counts in gradient updates offline, env steps online).

    Attributes:
        offline_steps: gradient updates on the dataset before going online.
        online_steps: env steps online (0: offline only).
        batch_size: transitions per critic (or policy) update; the sampled batch is ``utd × batch_size``
            for agents that split it (:mod:`robotrl.utd`).
        n_step: n-step returns of the TD target.
        eval_every, checkpoint_every, log_every: cadences in the loop's clock (updates offline, env steps online).
        eval_episodes, eval_envs: evaluation episodes per point and the envs running them.
        eval_seed: evaluation episode ``i`` resets with ``eval_seed + i``; ``None`` (default): ``seed + 10000 + i``,
            the resets every earlier run evaluated on. Set it to report on resets never used while choosing
            settings (e.g. ``trainer.eval_seed=200000``, past ``robotrl eval``'s held-out 100000..).
        num_envs: online training envs.
        online_buffer_size: capacity of the online replay buffer (transitions).
        online_warmup_steps: env steps collected before the first online update.
        utd: critic updates per env step (the one meaning of UTD, :mod:`robotrl.utd`).
        offline_ratio: share of each online batch drawn from the offline buffer (RLPD 0.5).
        progress: show a progress display.
        init_from: warm start of every agent (off- and on-policy): checkpoint file or run dir (ignored on resume).
        init_parts: parts to load via ``agent.load_parts`` (e.g. ``[policy]``); ``None``: the whole agent (or
            ``agent.load_pretrained``).
        warmup_updates: updates run once on the online buffer when online warmup ends (PORL's pre-sample).
        her_ratio: off-policy goal tasks (Fetch, PointMaze): share of each batch relabelled with a future
            achieved goal (HER 0.8).
        keep_best: also keep ``checkpoints/best.pt``, the policy of the best evaluation so far (selected on the
            run's own evaluation episodes: report it with ``robotrl eval checkpoint=<run>/checkpoints/best.pt
            episodes=50`` on held-out episodes).
        validation_fraction: a run without an env (a dataset with no ``env_spec`` and no ``env.name``, e.g.
            recorded on a robot): the share of episodes held out of training to measure the policy on
            (:mod:`robotrl.validation`); unused when there is an env.
        forgetting_starts: held-out resets of the forgetting metric (:func:`robotrl.evaluation.forgetting_report`:
            the policy at the online start vs the final policy from the resets farthest from the online data),
            computed when an off-policy run's online phase ends and written to its report (``forgetting``,
            ``forgetting_near``, ``forgetting_detail``); 0: off. State observations only.
    """

    offline_steps: int = 20_000
    online_steps: int = 0
    batch_size: int = 256
    n_step: int = 1
    eval_every: int = 5_000
    eval_episodes: int = 20
    eval_envs: int = 10
    eval_seed: int | None = None
    checkpoint_every: int = 5_000
    log_every: int = 250
    num_envs: int = 1
    online_buffer_size: int = 1_000_000
    online_warmup_steps: int = 1_000
    utd: int = 1
    offline_ratio: float = 0.5
    progress: bool = True
    init_from: str | None = None
    init_parts: list[str] | None = None
    warmup_updates: int = 0
    her_ratio: float = 0.0
    validation_fraction: float = 0.1
    keep_best: bool = False
    forgetting_starts: int = 0

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (negative budgets, zero batch, ...)."""
        check_schedule(self, "trainer", positive=("batch_size", "n_step", "eval_every", "eval_episodes", "eval_envs",
                                                  "checkpoint_every", "log_every", "num_envs", "online_buffer_size",
                                                  "utd"),
                       non_negative=("offline_steps", "online_steps", "online_warmup_steps", "warmup_updates",
                                     "forgetting_starts", "eval_seed"),
                       fractions=("offline_ratio", "her_ratio", "validation_fraction"))


@dataclass
class OnPolicyConfig:
    """Schedule of an on-policy fine-tuning run (budgets in iterations and env steps).

    Attributes:
        iterations: rollout-and-update iterations.
        steps_per_iter: ``T``, chunk steps per env per iteration.
        num_envs: rollout envs.
        eval_every, checkpoint_every: cadences in iterations.
        eval_episodes, eval_envs: evaluation episodes per point and the envs running them.
        eval_seed: evaluation episode ``i`` resets with ``eval_seed + i``; ``None`` (default): ``seed + 10000 + i``
            (as ``trainer.eval_seed``).
        max_env_steps: stop once this many env steps were collected (``None``: the iterations' budget).
        pretrain_steps: behaviour-cloning updates on the dataset before going online (``agent.bc_update``).
        pretrain_batch_size: their batch size.
        vectorization: ``sync`` or ``async`` vector envs.
        progress: show a progress display (the trainer's setting).
        keep_best: also keep ``checkpoints/best.pt``, the policy of the best evaluation so far
            (:meth:`robotrl.runner.Runner.keep_best`), as ``trainer.keep_best`` does for the off-policy runs.
    """

    iterations: int = 100
    steps_per_iter: int = 500
    num_envs: int = 40
    eval_every: int = 10
    eval_episodes: int = 20
    eval_envs: int = 10
    eval_seed: int | None = None
    checkpoint_every: int = 10
    max_env_steps: int | None = None
    pretrain_steps: int = 0
    pretrain_batch_size: int = 256
    vectorization: str = "sync"
    progress: bool = True
    keep_best: bool = False

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (zero envs, negative budgets, ...)."""
        check_schedule(self, "agent.onpolicy", positive=("iterations", "steps_per_iter", "num_envs", "eval_every",
                                                         "eval_episodes", "eval_envs", "checkpoint_every",
                                                         "pretrain_batch_size"),
                       non_negative=("max_env_steps", "pretrain_steps", "eval_seed"))


def register() -> None:
    """Store :class:`TrainerConfig` as ``schema/trainer`` and :class:`OnPolicyConfig` as ``schema/onpolicy`` in
    Hydra's ``ConfigStore`` (idempotent; done when :mod:`robotrl.configs` is imported, which Hydra does before
    composing any robotrl config)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(group="schema", name="trainer", node=TrainerConfig)
    cs.store(group="schema", name="onpolicy", node=OnPolicyConfig)


# ---------------------------------------------------------------------- agent settings (agent.model.*)
#: The agent constructor's arguments that the build path gives (:func:`robotrl.experiment_parts.build_agent`): the
#: observation spec's sizes, cameras and frame stack (:meth:`robotrl.spec.ObservationSpec.agent_kwargs`), the
#: normalisers, ``device`` and ``seed``. They are derived or set elsewhere, so they are not ``agent.model`` settings.
BUILD_ARGUMENTS = ("obs_dim", "action_dim", "image_shapes", "state_layout", "frame_stack", "obs_normalizer",
                   "action_scaler", "device", "seed")

#: Where each build argument is set instead: a key of the run config, or ``None`` (derived, never set).
_BUILD_ARGUMENT_KEYS = {"frame_stack": "obs.frame_stack", "device": "device", "seed": "seed"}
_SCALARS = (int, float, bool, str)


def _setting_type(annotation: Any) -> Any:
    """The structured-config type of a constructor annotation: ``int``/``float``/``bool``/``str``, optional ones,
    lists of scalars (``Sequence[int]``, ``list[float]``, ``tuple[int, ...]``); anything else ``Any``."""
    if annotation in _SCALARS:
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    nested = [a for a in args if isinstance(a, type) and dataclasses.is_dataclass(a)]
    if origin in (Union, types.UnionType) and nested:  # a settings block (RetentionConfig | Mapping | None)
        return Optional[config_node(nested[0])]  # noqa: UP045
    if origin in (Union, types.UnionType) and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        inner = _setting_type(rest[0]) if len(rest) == 1 else Any
        return Any if inner is Any else Optional[inner]  # noqa: UP045  (OmegaConf reads typing's Optional)
    if origin in (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence):
        item = args[0] if args else Any
        if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
            return Any
        return List[item] if item in _SCALARS else Any  # type: ignore[valid-type]  # noqa: UP006
    return Any


def _annotation(param: inspect.Parameter, namespace: dict) -> Any:
    """``param``'s annotation evaluated in the constructor's module (``Any`` when absent or not evaluable, such as a
    name imported only for type checking)."""
    a = param.annotation
    if a is inspect.Parameter.empty:
        return Any
    if isinstance(a, str):
        try:
            return eval(a, namespace)  # noqa: S307  (the constructor's own annotation, from its source)
        except Exception:  # noqa: BLE001
            return Any
    return a


@functools.cache
def config_node(cls: type) -> type:
    """The structured-config node of a settings dataclass ``cls`` (:class:`RetentionConfig`,
    :class:`~robotrl.agents.qlearning.sung.SungConfig`): a mutable dataclass ``<Name>Node`` with its fields, types
    (:func:`_setting_type`, nested settings dataclasses as nodes too) and defaults, so ``agent.model.sung.topk=10``
    is typed and checked at composition. A copy rather than ``cls`` itself: OmegaConf makes a frozen dataclass's
    node read-only, and a YAML preset could not be merged into it."""
    hints = typing.get_type_hints(cls)
    spec: list[tuple[str, Any, Any]] = []
    for f in fields(cls):
        t = hints[f.name]
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            spec.append((f.name, config_node(t), field(default_factory=config_node(t))))
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
        spec.append((f.name, _setting_type(t), _default_field(default)))
    node = dataclasses.make_dataclass(f"{cls.__name__}Node", spec)
    node.__module__ = __name__
    node.__doc__ = f"The structured-config node of :class:`{cls.__module__}.{cls.__qualname__}` (:func:`config_node`)."
    return node


def _default_field(default: Any, kind: Any = None) -> Any:
    """A dataclass field holding ``default`` (tuples become lists, containers a fresh copy per instance); a settings
    block ``kind`` (``Optional[<Name>Node]``) whose default is ``None`` holds the block's defaults instead."""
    if default is inspect.Parameter.empty:
        return field(default=dataclasses.MISSING)
    node = next((a for a in typing.get_args(kind) if dataclasses.is_dataclass(a)), None)
    if default is None and node is not None:
        return field(default_factory=node)
    if isinstance(default, tuple):
        default = list(default)
    if isinstance(default, (list, dict, set)):
        return field(default_factory=functools.partial(copy.deepcopy, default))
    return field(default=default)


def agent_settings(cls: type) -> dict[str, inspect.Parameter]:
    """The settings of agent class ``cls``: its constructor's keyword arguments but :data:`BUILD_ARGUMENTS`
    (``**kwargs`` is no setting: give the settings as keyword arguments)."""
    params = inspect.signature(cls.__init__).parameters
    return {n: p for n, p in params.items() if n != "self" and n not in BUILD_ARGUMENTS
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def agent_target(cls: type) -> str:
    """The ``_target_`` of agent class ``cls``: ``<package>.<Class>`` when its package exports it (as
    ``robotrl.agents.qlearning.QLAgent``), else ``<module>.<Class>``."""
    package = cls.__module__.rpartition(".")[0]
    if package and getattr(importlib.import_module(package), cls.__name__, None) is cls:
        return f"{package}.{cls.__name__}"
    return f"{cls.__module__}.{cls.__name__}"


@functools.cache
def model_schema(cls: type) -> type:
    """The structured config of ``agent.model`` for agent class ``cls``, derived from its constructor.

    One field per setting (:func:`agent_settings`) with the constructor's default, typed from its annotation
    (:func:`_setting_type`: scalars, optional scalars, lists of scalars; anything else ``Any``), and ``_target_``
    (:func:`agent_target`). The schema of a subclass agent (its nearest base class with a constructor of its own)
    is a subclass of that base's schema, so Hydra merges it into a node of the base's type.

    Args:
        cls: an agent class (as ``configs/agent/*.yaml`` instantiate).

    Returns:
        A dataclass named ``<ClassName>Settings`` (cached: one class per agent class).

    Raises:
        TypeError: a subclass constructor that drops a setting of its base's (it could not stand in its node).
    """
    settings = agent_settings(cls)
    namespace = getattr(cls.__init__, "__globals__", {})
    base = next((b for b in cls.__mro__[1:] if b is not object and "__init__" in vars(b)), None)
    bases: tuple[type, ...] = ()
    if base is not None:
        missing = sorted(set(agent_settings(base)) - set(settings))
        if missing:
            raise TypeError(f"{cls.__name__}'s constructor drops settings of its base {base.__name__}: {missing}")
        bases = (model_schema(base),)
    spec = [("_target_", str, field(default=agent_target(cls)))]
    for n, p in settings.items():
        kind = _setting_type(_annotation(p, namespace))
        spec.append((n, kind, _default_field(p.default, kind)))
    schema = dataclasses.make_dataclass(f"{cls.__name__}Settings", spec, bases=bases)
    schema.__module__ = __name__
    schema.__doc__ = (f"``agent.model`` of :class:`{cls.__module__}.{cls.__qualname__}`: its constructor's settings "
                      "and defaults (:func:`robotrl.schema.model_schema`).")
    return schema


def register_agents(schemas: Mapping[str, type]) -> None:
    """Store each agent schema (``{ClassName: <ClassName>Settings}``, :func:`schemas_from_table`) as
    ``schema/model/<ClassName>`` in Hydra's ``ConfigStore`` (idempotent; :mod:`robotrl.configs` does it)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for name, schema in schemas.items():
        cs.store(group="schema/model", name=name, node=schema)


# ---------------------------------------------------------------------- the agent settings table
# ``robotrl/configs/agent_settings.json`` holds :func:`model_schema` of every agent class as data, so that composing
# a config registers the schemas without importing the agent classes (and torch, ~3 s, with them): ``robotrl collect``
# and the robot server compose configs too. ``tests/test_configs.py`` keeps the file equal to the constructors;
# ``python -m robotrl.configs`` rewrites it.

def _type_code(t: Any) -> Any:
    """A JSON form of a schema field type (:func:`_setting_type`'s types and settings nodes)."""
    if t is Any:
        return "Any"
    if t in _SCALARS:
        return t.__name__
    if dataclasses.is_dataclass(t):
        return {"node": t.__name__}
    origin, args = typing.get_origin(t), typing.get_args(t)
    if origin is Union:
        return {"optional": _type_code(next(a for a in args if a is not type(None)))}
    if origin is list:
        return {"list": _type_code(args[0])}
    raise TypeError(f"no JSON form for the schema type {t!r}")


def _type_of(code: Any, node: typing.Callable[[str], type]) -> Any:
    """The inverse of :func:`_type_code`; ``node(name)`` gives the settings node of that name."""
    if isinstance(code, str):
        return Any if code == "Any" else {c.__name__: c for c in _SCALARS}[code]
    if "node" in code:
        return node(code["node"])
    if "optional" in code:
        return Optional[_type_of(code["optional"], node)]  # noqa: UP045
    return List[_type_of(code["list"], node)]  # type: ignore[misc]  # noqa: UP006


def _fields_code(schema: type, nodes: dict[str, Any]) -> list:
    """``[[name, type, default], ...]`` of a schema's own spec (every field it declares, inherited ones included),
    its settings nodes described into ``nodes``; ``default`` is ``{"value": v}``, ``{"node": name}`` or ``{}``."""
    out = []
    for f in fields(schema):
        inner = next((a for a in (f.type, *typing.get_args(f.type)) if dataclasses.is_dataclass(a)), None)
        if inner is not None and inner.__name__ not in nodes:  # a settings node (Node or Optional[Node])
            nodes[inner.__name__] = _fields_code(inner, nodes)
        if f.default is not dataclasses.MISSING:
            default: dict = {"value": f.default}
        elif f.default_factory is not dataclasses.MISSING:
            made = f.default_factory()
            default = {"node": type(made).__name__} if dataclasses.is_dataclass(made) else {"value": made}
        else:
            default = {}
        out.append([f.name, _type_code(f.type), default])
    return out


def settings_table(classes: typing.Iterable[type]) -> dict:
    """The agent settings table of ``classes``: ``{"agents": {ClassName: {"base": ClassName | None, "fields": ...}},
    "nodes": {NodeName: fields}}`` (:func:`_fields_code`), JSON-ready; :func:`schemas_from_table` rebuilds
    :func:`model_schema` of each class from it without importing the class."""
    nodes: dict[str, Any] = {}
    agents = {}
    for cls in classes:
        schema = model_schema(cls)
        base = next((b.__name__[: -len("Settings")] for b in schema.__bases__ if b is not object), None)
        agents[cls.__name__] = {"base": base, "fields": _fields_code(schema, nodes)}
    return {"agents": agents, "nodes": nodes}


def schemas_from_table(table: Mapping[str, Any]) -> dict[str, type]:
    """``{ClassName: <ClassName>Settings}`` rebuilt from :func:`settings_table`'s form: the same dataclasses, field
    for field (types, defaults, base schemas), as :func:`model_schema` derives from the constructors."""
    nodes: dict[str, type] = {}

    def spec(code: list) -> list:
        out = []
        for name, t, default in code:
            if "node" in default:
                d = field(default_factory=node(default["node"]))
            elif "value" in default:
                d = _default_field(default["value"])
            else:
                d = field(default=dataclasses.MISSING)
            out.append((name, _type_of(t, node), d))
        return out

    def node(name: str) -> type:
        if name not in nodes:
            made = dataclasses.make_dataclass(name, spec(table["nodes"][name]))
            made.__module__ = __name__
            nodes[name] = made
        return nodes[name]

    schemas: dict[str, type] = {}

    def schema(name: str) -> type:
        if name not in schemas:
            entry = table["agents"][name]
            bases = (schema(entry["base"]),) if entry["base"] else ()
            made = dataclasses.make_dataclass(f"{name}Settings", spec(entry["fields"]), bases=bases)
            made.__module__ = __name__
            made.__doc__ = f"``agent.model`` of the agent class {name} (:func:`robotrl.schema.model_schema`)."
            schemas[name] = made
        return schemas[name]

    for name in table["agents"]:
        schema(name)
    return schemas


def build_argument_hint(key: str, value: Any) -> str | None:
    """The one line for ``agent.model.<build argument>=value`` (:data:`BUILD_ARGUMENTS` are no settings): where it
    is set instead (``agent.model.frame_stack=2``: set obs.frame_stack=2 instead), or that it is derived.
    ``None`` for any other key."""
    prefix = "agent.model."
    name = key.lstrip("+~")[len(prefix):] if key.lstrip("+~").startswith(prefix) else None
    if name not in BUILD_ARGUMENTS:
        return None
    where = _BUILD_ARGUMENT_KEYS.get(name)
    if where is not None:
        return f"{prefix}{name}={value} is not an agent setting: set {where}={value} instead"
    return (f"{prefix}{name} is not an agent setting: the build path derives it (the observation spec from the env "
            "and dataset, the normalisers from the dataset); choose obs=, env= or dataset= instead")


def wrong_type_line(key: str, value: str, default: Any, reason: str) -> str | None:
    """The one line for a value of the wrong type at composition, naming the default: ``agent.model.num_critics=2.5
    is not a whole number (default 10): give a whole number, e.g. agent.model.num_critics=10``.

    Args:
        key, value: the override as typed (``agent.model.num_critics``, ``2.5``).
        default: the setting's value before the override (``None``: null).
        reason: OmegaConf's validation message (it names the type the value could not become).

    Returns:
        The line, or ``None`` when ``reason`` is not a refusal of a whole number, number or boolean.
    """
    import json

    kinds = {"converted to Integer": ("a whole number", 1), "converted to Float": ("a number", 1.0),
             "valid bool": ("true or false", True)}
    kind = next((k for k in kinds if k in reason), None)
    if kind is None:
        return None
    what, example = kinds[kind]
    if isinstance(default, (list, tuple)) or "reference_type=List" in reason:  # an item of a list of scalars
        what = {"a whole number": "a list of whole numbers", "a number": "a list of numbers"}.get(what, "a list of true/false")
        example = [example]
    shown = "null" if default is None else json.dumps(default if not isinstance(default, tuple) else list(default))
    eg = json.dumps(example if default is None else default, separators=(",", ":"))
    return f"{key}={value} is not {what} (default {shown}): give {what}, e.g. {key}={eg}"


# ---------------------------------------------------------------------- knowledge retention
DECAYS = ("none", "linear", "exp")
PENALTIES = ("kl", "l2")
KL_STATES = ("online", "offline")

@dataclass(frozen=True)
class RetentionTerm:
    """One knowledge-retention term (:mod:`robotrl.agents.retention`): its weight and the decay of that weight.

    Args:
        weight: ``w ≥ 0`` (``bc``/``kl``: loss coefficient; ``replay``: batch fraction ``ρ ∈ [0, 1]``).
        decay: ``"none"``, ``"linear"`` (to 0 at ``decay_steps``) or ``"exp"`` (half-life ``decay_steps``).
        decay_steps: ``T`` in retention steps (:mod:`robotrl.agents.retention`); must be > 0 unless
            ``decay="none"``.
    """

    weight: float = 0.0
    decay: str = "none"
    decay_steps: int = 0

    def at(self, step: int) -> float:
        """The weight after ``step`` retention steps."""
        if self.weight == 0.0 or self.decay == "none":
            return float(self.weight)
        if self.decay == "linear":
            return float(self.weight) * max(0.0, 1.0 - step / self.decay_steps)
        return float(self.weight) * 0.5 ** (step / self.decay_steps)


@dataclass(frozen=True)
class RetentionConfig:
    """Knowledge-retention settings (``agent.model.retention``; :mod:`robotrl.agents.retention`). Defaults: all off.

    Declared here, beside the run schedules, so that the build parts (:func:`robotrl.experiment_parts.offline_buffer`)
    know whether a run must keep its pretraining data without importing an agent.

    Args:
        bc: behaviour cloning on the pretraining data (dataset actions' negative log-likelihood).
        kl: penalty toward the frozen pretrained policy (``penalty``, ``kl_states``).
        replay: offline replay, fraction of each Q-learning batch (Q-learning family only).
        penalty: ``"kl"`` (``KL(π₀ ‖ π)``, closed form) or ``"l2"`` (``‖μ − μ₀‖²``).
        kl_states: ``"online"`` (the actor's minibatch: kickstarting) or ``"offline"`` (dataset states).
        batch_size: rows sampled from the pretraining data per retention step for ``bc`` and offline
            ``kl`` (``None``: the actor minibatch's size).
    """

    bc: RetentionTerm = field(default_factory=RetentionTerm)
    kl: RetentionTerm = field(default_factory=RetentionTerm)
    replay: RetentionTerm = field(default_factory=RetentionTerm)
    penalty: str = "kl"
    kl_states: str = "online"
    batch_size: int | None = None

    @classmethod
    def from_mapping(cls, given: Mapping[str, Any] | RetentionConfig | None) -> RetentionConfig:
        """A config from ``agent.model.retention`` (a mapping, e.g. Hydra's ``DictConfig``; ``None``: all off).

        Raises:
            ConfigError: an unknown key, a negative weight, a replay fraction above 1, an unknown
                ``decay``/``penalty``/``kl_states``, or a decay without ``decay_steps > 0`` (one line
                naming the setting).
        """
        if isinstance(given, RetentionConfig):
            given.check()
            return given
        raw = dict(given or {})
        known = {f.name for f in fields(cls)}
        for k in raw:
            if k not in known:
                raise ConfigError(f"agent.model.retention.{k} is not a retention setting; choose from {sorted(known)}")
        terms = {}
        for name in ("bc", "kl", "replay"):
            sub = dict(raw.pop(name, None) or {})
            bad = set(sub) - {"weight", "decay", "decay_steps"}
            if bad:
                raise ConfigError(f"agent.model.retention.{name}.{sorted(bad)[0]} is not a term setting; "
                                  "choose from weight, decay, decay_steps")
            terms[name] = RetentionTerm(float(sub.get("weight", 0.0)), str(sub.get("decay", "none")),
                                        int(sub.get("decay_steps", 0)))
        cfg = cls(**terms, **raw)
        cfg.check()
        return cfg

    def check(self) -> None:
        """Raises :class:`~robotrl.errors.ConfigError` on a setting that cannot work (:meth:`from_mapping`)."""
        for name in ("bc", "kl", "replay"):
            t: RetentionTerm = getattr(self, name)
            key = f"agent.model.retention.{name}"
            if not math.isfinite(t.weight) or t.weight < 0:
                raise ConfigError(f"{key}.weight={t.weight} must be a finite number >= 0 (0: off)")
            if t.decay not in DECAYS:
                raise ConfigError(f"{key}.decay={t.decay!r} is unknown; choose from {DECAYS}")
            if t.decay != "none" and t.decay_steps <= 0:
                raise ConfigError(f"{key}.decay={t.decay} needs {key}.decay_steps > 0 (retention steps), "
                                  f"got {t.decay_steps}")
        if self.replay.weight > 1:
            raise ConfigError(f"agent.model.retention.replay.weight={self.replay.weight} is a batch fraction: "
                              "choose it in [0, 1]")
        if self.penalty not in PENALTIES:
            raise ConfigError(f"agent.model.retention.penalty={self.penalty!r} is unknown; choose from {PENALTIES}")
        if self.kl_states not in KL_STATES:
            raise ConfigError(f"agent.model.retention.kl_states={self.kl_states!r} is unknown; choose from {KL_STATES}")
        if self.batch_size is not None and self.batch_size <= 0:
            raise ConfigError(f"agent.model.retention.batch_size={self.batch_size} must be > 0 (or null)")

    @property
    def enabled(self) -> bool:
        """Whether any term has a weight."""
        return any(getattr(self, n).weight > 0 for n in ("bc", "kl", "replay"))

    @property
    def reads_data(self) -> bool:
        """Whether a term samples the pretraining data (``bc``, ``replay``, or ``kl`` on offline states)."""
        return self.bc.weight > 0 or self.replay.weight > 0 or (self.kl.weight > 0 and self.kl_states == "offline")
