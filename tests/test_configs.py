"""Every Hydra config composes, and the agent in each instantiates with derived sizes."""

from __future__ import annotations

import functools
import json
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence  # the annotations of the small agents below (read by model_schema)
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import robotrl.configs

ROOT = Path(__file__).resolve().parents[1]

CONFIG_DIR = Path(robotrl.configs.__file__).parent


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def _compose(name: str, overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


@functools.cache
def _composed_train(override: str):
    """``train`` composed with one override, once per test session (callers must not mutate it)."""
    return _compose("train", [override])


@pytest.mark.parametrize("env", _options("env"))
def test_each_env_composes_with_its_default_dataset(env):
    cfg = _compose("train", [f"env={env}"])
    if env == "gym":  # any gymnasium env: taken from the user's dataset (dataset group gym: id required)
        assert cfg.env.name is None and cfg.dataset.id is None and not cfg.dataset.generate
    else:
        assert cfg.env.name == env
        assert cfg.dataset.id  # dataset group follows the env
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert "${" not in json.dumps(resolved)  # every interpolation resolves (to a value, not a string of one)


@pytest.mark.parametrize("dataset", [d for d in _options("dataset") if d != "gym"])
def test_each_dataset_composes(dataset):
    cfg = _compose("train", [f"dataset={dataset}"])
    assert "/" in cfg.dataset.id
    assert (cfg.dataset.recipe is None) == (not cfg.dataset.generate)


def test_every_experiment_composes_with_each_env_family():
    """One experiment per algorithm, any env= (and its dataset): all resolve, and the dataset,
    the warm-start path and the reward transform follow the env, never another env's."""
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        for experiment in _options("experiment"):
            for env in ("pointmaze-umaze", "hopper", "fetch-push", "gym"):  # one per reward family, and yours
                extra = ["dataset.id=me/own-v0"] if env == "gym" else []
                cfg = compose(config_name="train", overrides=[f"experiment={experiment}", f"env={env}", *extra])
                resolved = OmegaConf.to_container(cfg, resolve=True)
                slug = cfg.dataset.id.replace("/", "-")
                for path in (resolved.get("run_dir"), resolved["trainer"].get("init_from"),
                             (resolved["agent"].get("onpolicy") or {}).get("init_from"),
                             resolved["agent"]["model"].get("base")):
                    if path:
                        assert f"/{slug}/seed0" in path, (experiment, env, path)
                if "reward_scale" in resolved["agent"] and experiment not in ("residual-offpolicy", "residual-offpolicy-cpu"):
                    assert resolved["agent"]["reward_scale"] == resolved["env"]["reward_transform"]["scale"]


@pytest.mark.parametrize("agent", _options("agent"))
def test_each_agent_composes_and_instantiates(agent):
    import numpy as np
    from hydra.utils import instantiate

    from robotrl.data import ActionScaler, ObservationNormalizer

    cfg = _composed_train(f"agent={agent}")
    sizes = {"state_dim": 8, "image_shapes": {"pixels/topdown": (16, 16, 3)}} if cfg.agent.get("pixels") else {"obs_dim": 8}
    a = instantiate(cfg.agent.model, **sizes, action_dim=2, obs_normalizer=ObservationNormalizer.identity(8),
                    action_scaler=ActionScaler(-np.ones(2), np.ones(2)), device="cpu", seed=0, _convert_="all")
    assert getattr(a.policy, "state_dim", getattr(a.policy, "obs_dim", None)) == 8 and a.policy.action_dim == 2


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_each_experiment_composes(experiment):
    """The experiment selects the agent it names, every trainer (and on-policy) key it sets is one the trainer
    knows and reaches the composed config, and the agent class it builds exists."""
    import dataclasses

    import yaml
    from hydra._internal.utils import _locate

    from robotrl.experiment import onpolicy_config, trainer_config

    cfg = _composed_train(f"experiment={experiment}")
    resolved = OmegaConf.to_container(cfg, resolve=True)
    own = yaml.safe_load((CONFIG_DIR / "experiment" / f"{experiment}.yaml").read_text())
    agents = [d["override /agent"] for d in own.get("defaults", []) if isinstance(d, dict) and "override /agent" in d]
    if agents:
        agent_yaml = yaml.safe_load((CONFIG_DIR / "agent" / f"{agents[0]}.yaml").read_text())
        assert cfg.agent.name == agent_yaml["name"], (experiment, cfg.agent.name)
    tcfg = trainer_config(cfg)  # an unknown trainer key raises ConfigError
    assert dataclasses.asdict(tcfg) == resolved["trainer"], experiment
    if cfg.agent.get("onpolicy") is not None:
        ocfg = onpolicy_config(cfg, tcfg)
        assert dataclasses.asdict(ocfg) == {**resolved["agent"]["onpolicy"], "progress": tcfg.progress}, experiment
    assert isinstance(_locate(cfg.agent.model._target_), type)
    for key, value in (own.get("trainer") or {}).items():
        if not (isinstance(value, str) and "${" in value):
            assert resolved["trainer"][key] == value, (experiment, key)


def test_other_commands_compose():
    from robotrl.collect import RECIPES

    ev = OmegaConf.to_container(_compose("eval", ["checkpoint=x", "episodes=7"]), resolve=True)
    assert ev["checkpoint"] == "x" and ev["episodes"] == 7 and ev["num_envs"] >= 1
    with pytest.raises(Exception, match="checkpoint"):  # eval without a checkpoint is refused (``???``)
        OmegaConf.to_container(_compose("eval", []), resolve=True, throw_on_missing=True)
    col = OmegaConf.to_container(_compose("collect", ["recipe=pointmaze-umaze", "num_episodes=3"]), resolve=True)
    assert col["recipe"] in RECIPES and col["num_episodes"] == 3 and col["list"] is False


def test_unknown_trainer_key_is_a_clear_error():
    from robotrl.errors import ConfigError
    from robotrl.experiment import trainer_config

    cfg = _compose("train", ["+trainer.ofline_steps=3"])
    with pytest.raises(ConfigError, match="unknown trainer settings.*ofline_steps"):
        trainer_config(cfg)


def test_a_mistyped_experiment_is_an_error_not_the_default_run():
    """``experiment=wrsl`` must not silently run the default experiment (it did with ``optional``)."""
    from hydra.errors import MissingConfigException

    with pytest.raises(MissingConfigException, match="experiment/wrsl"):
        _compose("train", ["experiment=wrsl"])


# The paper's UTD (critic updates per env step) of each off-policy experiment, all on critic minibatches of 256.
PAPER_UTD = {"wsrl": 4, "rlpd": 20, "porl": 4, "residual-offpolicy": 4, "calql-online": 1, "iql-online": 1}


def _schedule(resolved: dict):
    from robotrl.utd import update_schedule

    model, trainer = resolved["agent"]["model"], resolved["trainer"]
    return update_schedule(int(model.get("critic_utd", 1)), trainer["utd"], trainer["batch_size"])


def test_every_composed_config_has_one_utd_and_a_derived_batch():
    """Every agent × every experiment (and no experiment): an agent that splits its batch
    (``critic_utd``) takes the split from ``trainer.utd`` (one knob), and the sampled batch is
    ``split × trainer.batch_size`` with ``calls × split == utd``. Each config composes once; each
    agent's split is resolved against each experiment's trainer section (so no experiment may set
    the split itself: checked on the files)."""
    for experiment in _options("experiment"):
        assert "critic_utd" not in (CONFIG_DIR / "experiment" / f"{experiment}.yaml").read_text(), experiment
    seen = 0
    splits = {a: OmegaConf.to_container(_composed_train(f"agent={a}").agent.model).get("critic_utd")
              for a in _options("agent")}  # unresolved: ${trainer.utd} stays an interpolation; None: no split
    for experiment in ["seed=0", *(f"experiment={e}" for e in _options("experiment"))]:
        trainer = OmegaConf.to_container(_composed_train(experiment).trainer, resolve=True)
        for agent, split in splits.items():
            # the agent's split resolved against this experiment's trainer section
            model = {} if split is None else OmegaConf.to_container(
                OmegaConf.create({"trainer": trainer, "model": {"critic_utd": split}}), resolve=True)["model"]
            if split is not None:
                assert model["critic_utd"] == trainer["utd"], (experiment, agent)
            s = _schedule({"trainer": trainer, "agent": {"model": model}})
            assert s.calls_per_step * s.split == trainer["utd"], (experiment, agent)
            assert s.sampled_batch == s.split * trainer["batch_size"], (experiment, agent)
            seen += 1
    assert seen == (len(_options("experiment")) + 1) * len(_options("agent"))


@pytest.mark.parametrize("experiment", list(PAPER_UTD))
def test_off_policy_experiments_run_their_papers_utd_on_minibatches_of_256(experiment):
    resolved = OmegaConf.to_container(_composed_train(f"experiment={experiment}"), resolve=True)
    s = _schedule(resolved)
    assert (resolved["trainer"]["utd"], resolved["trainer"]["batch_size"]) == (PAPER_UTD[experiment], 256)
    assert s.sampled_batch == s.split * 256


def test_a_batch_split_that_does_not_divide_the_utd_is_a_config_error():
    from robotrl.errors import ConfigError
    from robotrl.utd import update_schedule

    assert update_schedule(4, 4, 256).sampled_batch == 1024
    assert update_schedule(1, 4, 256).calls_per_step == 4
    with pytest.raises(ConfigError, match="critic_utd=3 must divide trainer.utd=4"):
        update_schedule(3, 4, 256)


@pytest.mark.parametrize("tuning", _options("tuning"))
def test_each_tuning_file_applies_to_its_experiment_and_env(tuning):
    """``configs/tuning/<experiment>-<env>.yaml`` is picked up by ``experiment=<experiment> env=<env>`` alone:
    every value it sets, or a tuning file it includes sets, is in the composed config, and the agent instantiates
    with it."""
    import numpy as np
    from hydra.utils import instantiate

    from robotrl.data import ActionScaler, ObservationNormalizer

    experiment = next(e for e in sorted(_options("experiment"), key=len, reverse=True) if tuning.startswith(e + "-"))
    env = tuning.removeprefix(experiment + "-")
    assert env in _options("env"), (tuning, env)
    cfg = OmegaConf.to_container(_compose("train", [f"experiment={experiment}", f"env={env}"]), resolve=True)
    own = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "tuning" / f"{tuning}.yaml"))

    def check(want, got, path):
        for k, v in want.items():
            assert k in got, f"{tuning}: {path}{k} is not in the composed config"
            if isinstance(v, dict):
                check(v, got[k], f"{path}{k}.")
            else:
                assert got[k] == v, f"{tuning}: {path}{k} = {got[k]}, the file sets {v}"

    for included in own.pop("defaults", []):  # a tuning file may include another (the CPU-sized experiment's)
        if included != "_self_":
            check(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "tuning" / f"{included}.yaml")), cfg, "")
    check(own, cfg, "")
    model = {k: v for k, v in cfg["agent"]["model"].items() if k not in ("base",)}
    instantiate(model, obs_dim=8, action_dim=2, obs_normalizer=ObservationNormalizer.identity(8),
                action_scaler=ActionScaler(-np.ones(2), np.ones(2)), device="cpu", seed=0, _convert_="all")


@pytest.mark.parametrize("env", ["fetch-push", "fetch-pickandplace", "pointmaze-umaze"])
def test_cpu_sized_resfit_is_resfit_with_the_measured_sizing_only(env):
    """``experiment=residual-offpolicy-cpu`` is ``experiment=residual-offpolicy`` (its task tuning included)
    with exactly the sizing the README's FetchPush table measured (2 critic heads, UTD 1, actor delay 2, 180k env
    steps, evaluations and checkpoints every 10k) and, on fetch-push only, the settings measured there (α 0.5,
    Fetch's own episodes, HER 0.8, γ 0.98); nothing else differs."""
    sizing = ["agent.model.num_critics=2", "agent.model.actor_delay=2", "trainer.utd=1", "trainer.online_steps=180000",
              "trainer.eval_every=10000", "trainer.checkpoint_every=10000"]
    push = ["agent.model.residual_scale=0.5", "env.train_terminate_on_success=false", "trainer.her_ratio=0.8",
            "agent.gamma=0.98"]
    cpu = OmegaConf.to_container(_compose("train", ["experiment=residual-offpolicy-cpu", f"env={env}"]), resolve=True)
    ref = OmegaConf.to_container(_compose("train", ["experiment=residual-offpolicy", f"env={env}", *sizing,
                                                    *(push if env == "fetch-push" else [])]), resolve=True)
    assert cpu["agent"]["reward_bias"] == ref["agent"]["reward_bias"] == (1.0 if env.startswith("fetch") else 0.0)
    assert cpu == ref
    if env != "fetch-push":
        assert cpu["agent"]["model"]["residual_scale"] == 0.1 and cpu["agent"]["gamma"] == 0.99


def test_cpu_sized_resfit_on_fetch_push_is_the_recorded_runs_agent():
    """The FetchPush runs of ``studies/residual-fetch-push/offpolicy_cpu.json`` (recorded as overrides of
    ``experiment=residual-offpolicy``) ran the agent and schedule ``experiment=residual-offpolicy-cpu env=fetch-push``
    composes: only where the runs wrote checkpoints, their base and data (paths, the 200-demo dataset), seed and
    run settings may differ."""
    doc = json.loads((ROOT / "benchmarks/results/studies/residual-fetch-push/offpolicy_cpu.json").read_text())
    runs = [r for r in doc["runs"] if r["method"].startswith("CPU-sized ResFiT, gamma 0.98")]
    assert len(runs) >= 3
    cpu = OmegaConf.to_container(_compose("train", ["experiment=residual-offpolicy-cpu", "env=fetch-push"]), resolve=True)
    for r in runs:
        ov = shlex.split(r["command"])[2:]
        keep = [o for o in ov if not o.startswith(("dataset", "+dataset", "agent.model.base=", "run_dir=", "seed=",
                                                  "torch_threads=", "trainer.progress=", "trainer.checkpoint_every="))]
        rec = OmegaConf.to_container(_compose("train", keep), resolve=True)
        assert rec["agent"] == cpu["agent"]
        for key in ("online_steps", "utd", "her_ratio", "n_step", "batch_size", "offline_ratio", "eval_every"):
            assert rec["trainer"][key] == cpu["trainer"][key], key
        assert rec["env"] == cpu["env"]


# ----------------------------------------------------------------------------- agent settings: one default, a type
def _agent_yaml(agent: str) -> dict:
    import yaml

    return yaml.safe_load((CONFIG_DIR / "agent" / f"{agent}.yaml").read_text()) or {}


def _parent(own: dict) -> str | None:
    """The agent config ``own`` extends (its defaults list's other agent config), ``None`` for a root config."""
    parents = [d for d in own.get("defaults", []) if isinstance(d, str) and d != "_self_" and not d.startswith("/")]
    assert len(parents) <= 1, parents
    return parents[0] if parents else None


@pytest.mark.parametrize("agent", _options("agent"))
def test_each_agent_setting_has_one_default_and_a_type(agent):
    """``agent.model`` of every agent config is its class's schema (:func:`robotrl.schema.model_schema`) holding
    exactly the constructor's settings (defaults and types from the constructor), and the YAML writes only
    presets: no value it would inherit from its parent config, or from the constructor (root configs, which
    extend ``/schema/model/<ClassName>@model`` and name no ``_target_``); the same for ``onpolicy``'s schedule."""
    import dataclasses

    from hydra.utils import get_class

    from robotrl.configs import agent_classes
    from robotrl.schema import OnPolicyConfig, agent_settings, model_schema

    cfg = _composed_train(f"agent={agent}")
    cls = get_class(cfg.agent.model._target_)
    assert cls in agent_classes()
    schema = model_schema(cls)  # the registered node is its copy from the settings table (test below)
    assert OmegaConf.get_type(cfg.agent.model).__name__ == schema.__name__
    settings = agent_settings(cls)
    assert set(cfg.agent.model) == {"_target_", *settings}
    fresh = OmegaConf.structured(schema)  # the constructor's defaults, as typed nodes
    kinds = {f.name: f.type for f in dataclasses.fields(schema)}
    for name, param in settings.items():
        default = list(param.default) if isinstance(param.default, tuple) else param.default
        node = next((a for a in getattr(kinds[name], "__args__", ()) if dataclasses.is_dataclass(a)), None)
        if default is None and node is not None:  # a settings block: None means the block's defaults
            default = OmegaConf.to_container(OmegaConf.structured(node))
        assert OmegaConf.to_container(fresh)[name] == default, (cls.__name__, name)

    own = _agent_yaml(agent)
    parent = _parent(own)
    model = own.get("model") or {}
    assert "_target_" not in model, f"{agent}.yaml names _target_: the schema gives it"
    if parent is None:
        assert f"/schema/model/{cls.__name__}@model" in own["defaults"], agent
        inherited = OmegaConf.to_container(fresh)
        schedule = dataclasses.asdict(OnPolicyConfig()) if "onpolicy" in own else {}
    else:
        base = _composed_train(f"agent={parent}").agent
        assert base.model._target_ == cfg.agent.model._target_  # a subclass would extend its own schema
        inherited = OmegaConf.to_container(base.model)
        schedule = OmegaConf.to_container(base.onpolicy) if base.get("onpolicy") is not None else {}
    repeated = [k for k, v in model.items() if k in inherited and inherited[k] == v]
    repeated += [f"onpolicy.{k}" for k, v in (own.get("onpolicy") or {}).items() if k in schedule and schedule[k] == v]
    assert not repeated, f"{agent}.yaml repeats values it inherits ({parent or 'the constructor'}'s): {repeated}"


def test_the_schema_of_an_agent_follows_its_constructor_and_its_base_class():
    """:func:`robotrl.schema.model_schema` on small agent classes: settings typed from the annotations (scalars,
    optional scalars, lists of scalars, anything else ``Any``), the build arguments left out, a subclass's schema a
    subclass of its base's (Hydra merges it into the base's node), a wrong type refused when merged, and a subclass
    that drops a setting of its base refused."""
    import dataclasses
    from typing import Any, List, Optional  # noqa: UP035

    from omegaconf.errors import ValidationError

    from robotrl.agent import OffPolicyAgentBase
    from robotrl.schema import model_schema

    class Small(OffPolicyAgentBase):
        def __init__(self, obs_dim: int, action_dim: int, *, obs_normalizer=None, action_scaler=None,
                     hidden: Sequence[int] = (8, 8), lr: float = 1e-3, clip: float | None = None, steps: int = 3,
                     layer_norm: bool = False, act: str = "relu", extra: Mapping | None = None, base=None,
                     device: str = "cpu", seed: int = 0, image_shapes=None, state_layout=None, frame_stack: int = 1):
            pass

    class Base(OffPolicyAgentBase):
        def __init__(self, obs_dim: int, action_dim: int, *, steps: int = 3, lr: float = 1e-3, seed: int = 0):
            pass

    class Larger(Base):
        def __init__(self, obs_dim: int, action_dim: int, *, steps: int = 5, lr: float = 1e-3, width: int = 4,
                     seed: int = 0):
            pass

    class Drops(Base):
        def __init__(self, obs_dim: int, action_dim: int, *, lr: float = 1e-3):
            pass

    small, base, larger = model_schema(Small), model_schema(Base), model_schema(Larger)
    assert model_schema(Small) is small  # one schema per class
    types = {f.name: f.type for f in dataclasses.fields(small)}
    assert types == {"_target_": str, "hidden": List[int], "lr": float, "clip": Optional[float],  # noqa: UP006,UP045
                     "steps": int, "layer_norm": bool, "act": str, "extra": Any, "base": Any}
    assert OmegaConf.to_container(OmegaConf.structured(small))["hidden"] == [8, 8]
    assert issubclass(larger, base) and not issubclass(small, base)
    merged = OmegaConf.merge(OmegaConf.structured(base), OmegaConf.structured(larger))
    assert OmegaConf.get_type(merged) is larger and (merged.steps, merged.width, merged.lr) == (5, 4, 1e-3)
    with pytest.raises(ValidationError):
        OmegaConf.merge(OmegaConf.structured(small), {"steps": 2.5})
    with pytest.raises(TypeError, match="drops settings of its base Base"):
        model_schema(Drops)


def _cli_error_line(capsys, args: list[str]) -> str:
    """The one error line of ``robotrl <args>`` run by the CLI's ``main`` (exit status 2, no traceback)."""
    from robotrl.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("robotrl: error: ") and "Traceback" not in err, err
    return lines[0].removeprefix("robotrl: error: ")


def test_a_wrong_agent_setting_is_one_line_at_composition(capsys, tmp_path):
    """A value of the wrong type for an agent setting fails when the config composes, in one line naming the default
    and the way out; an unknown setting gets the closest one; ``agent.model.frame_stack`` names the one knob
    (``obs.frame_stack``). The first case runs a real ``robotrl train`` process."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", "agent=sac", "agent.model.num_critics=2.5"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 2, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("robotrl: error: ")]
    assert errors == ["robotrl: error: agent.model.num_critics=2.5 is not a whole number (default 10): give a whole "
                      "number, e.g. agent.model.num_critics=10"], res.stderr[-2000:]
    assert "Traceback" not in res.stderr and not (tmp_path / "runs").exists()

    assert _cli_error_line(capsys, ["train", "agent=bc", "agent.model.layer_norm=maybe"]) == (
        "agent.model.layer_norm=maybe is not true or false (default false): give true or false, "
        "e.g. agent.model.layer_norm=false")
    assert _cli_error_line(capsys, ["train", "agent=ppo", "agent.model.actor_lr=fast"]) == (
        "agent.model.actor_lr=fast is not a number (default 0.0001): give a number, e.g. agent.model.actor_lr=0.0001")
    assert _cli_error_line(capsys, ["train", "agent=bc", "agent.model.hidden=[64,wide]"]) == (
        "agent.model.hidden=[64,wide] is not a list of whole numbers (default [256, 256]): give a list of whole "
        "numbers, e.g. agent.model.hidden=[256,256]")
    assert _cli_error_line(capsys, ["train", "agent=sac", "obs=pixels", "agent.model.frame_stack=2"]) == (
        "agent.model.frame_stack=2 is not an agent setting: set obs.frame_stack=2 instead")
    line = _cli_error_line(capsys, ["train", "agent=iql", "agent.model.num_critic=3"])
    assert "no config key 'agent.model.num_critic'; did you mean agent.model.num_critics?" in line


def test_each_agent_declares_its_architecture_among_its_settings():
    """``ARCHITECTURE_KEYS`` (:attr:`robotrl.agent.AgentBase.ARCHITECTURE_KEYS`, what a warm start adopts from its
    checkpoint) of every agent class are constructor settings of that class, without repeats, and every camera
    agent (one taking ``encoder``) declares the front end's (:data:`robotrl.agent.FRONTEND_ARCHITECTURE`)."""
    from robotrl.agent import FRONTEND_ARCHITECTURE, AgentBase
    from robotrl.configs import agent_classes
    from robotrl.schema import agent_settings

    assert AgentBase.ARCHITECTURE_KEYS == ()
    declared = 0
    for cls in agent_classes():
        if not issubclass(cls, AgentBase):
            continue
        keys, settings = cls.ARCHITECTURE_KEYS, agent_settings(cls)
        assert keys and len(set(keys)) == len(keys), cls.__name__
        assert set(keys) <= set(settings), (cls.__name__, sorted(set(keys) - set(settings)))
        if "encoder" in settings:
            assert set(FRONTEND_ARCHITECTURE) <= set(keys), cls.__name__
        declared += 1
    assert declared == len(agent_classes()) - 1  # all but the reward classifier (a reward model, never warm-started)


def test_a_warm_start_adopts_the_fine_tuning_classes_architecture(tmp_path):
    """``warm_start_architecture`` takes from the checkpoint exactly the recorded keys the fine-tuning class declares
    (PPO's ``hidden``, ``act``, ``critic_act``), not a recorded setting PPO lacks (BC's ``gaussian``) nor one that is
    no architecture key (``actor_lr``, ``clip``); an explicit override of a declared key that differs is refused."""
    from robotrl.checkpoint import save_checkpoint
    from robotrl.errors import ConfigError
    from robotrl.experiment import warm_start_architecture

    recorded = {"_target_": "robotrl.agents.ppo.PPOAgent", "hidden": [16, 16], "act": "tanh", "critic_act": "relu",
                "gaussian": True, "obs_clip": 10.0, "actor_lr": 0.5, "clip": 0.9}
    save_checkpoint(tmp_path / "pre.pt", {"config": {"agent": {"model": recorded}}})
    ov = ["agent=ppo", f"trainer.init_from={tmp_path / 'pre.pt'}"]
    cfg = _compose("train", ov)
    taken = OmegaConf.to_container(warm_start_architecture(cfg, overrides=ov).agent.model)
    mine = OmegaConf.to_container(cfg.agent.model)
    adopted = {k: v for k, v in taken.items() if mine[k] != v}
    assert adopted == {"hidden": [16, 16], "act": "tanh", "critic_act": "relu"}
    with pytest.raises(ConfigError, match=r"agent.model.act=elu conflicts with the warm-start checkpoint"):
        warm_start_architecture(_compose("train", [*ov, "agent.model.act=elu"]), overrides=[*ov, "agent.model.act=elu"])


def _schema_fields(schema: type) -> tuple[list, list[str]]:
    """A schema's fields as ``(name, type, default)`` (a settings node's default as its name and values) and its
    bases' names."""
    import dataclasses

    out = []
    for f in dataclasses.fields(schema):
        d = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "MISSING")
        if dataclasses.is_dataclass(d):
            d = (type(d).__name__, dataclasses.asdict(d))
        out.append((f.name, repr(f.type), repr(d)))
    return out, [b.__name__ for b in schema.__bases__]


def test_the_agent_settings_table_is_the_constructors():
    """``robotrl/configs/agent_settings.json``, from which composing a config registers the agent schemas without
    importing an agent, holds what :func:`robotrl.schema.model_schema` derives from the constructors today, and
    rebuilds each schema field for field (types, defaults, settings nodes, base schemas)."""
    import json

    from robotrl.configs import TABLE, agent_classes
    from robotrl.schema import model_schema, schemas_from_table, settings_table

    table = json.loads(TABLE.read_text(encoding="utf-8"))
    now = json.loads(json.dumps(settings_table(agent_classes())))
    assert table == now, ("robotrl/configs/agent_settings.json is not the agent constructors' settings: "
                          "rewrite it with `python -m robotrl.configs`")
    built = schemas_from_table(table)
    assert set(built) == {c.__name__ for c in agent_classes()}
    for cls in agent_classes():
        assert _schema_fields(built[cls.__name__]) == _schema_fields(model_schema(cls)), cls.__name__


def test_composing_a_config_imports_no_agent_and_no_torch():
    """Hydra composes every robotrl config (train, collect, the robot server) with the schemas registered from the
    table: no agent module and no torch is imported for it (a fresh process)."""
    code = ("import sys\n"
            "from hydra import compose, initialize_config_module\n"
            "with initialize_config_module(config_module='robotrl.configs', version_base='1.3'):\n"
            "    for name, ov in (('train', ['agent=sung', 'agent.model.sung.topk=7']), ('collect', []),\n"
            "                     ('robot_server', [])):\n"
            "        compose(config_name=name, overrides=ov)\n"
            "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('robotrl.agents')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_a_settings_block_is_typed_at_composition():
    """``agent.model.sung`` and ``agent.model.retention`` are typed nodes (:func:`robotrl.schema.config_node`) in
    every agent config that takes them: one setting is set without ``+``, a misspelt one is refused, a wrong type
    is refused, and the composed block builds the settings dataclass the agent reads."""
    from hydra.errors import ConfigCompositionException

    from robotrl.agents.qlearning.sung import SungConfig
    from robotrl.schema import RetentionConfig

    cfg = _compose("train", ["agent=wsrl", "agent.model.sung.topk=7", "agent.model.retention.bc.weight=0.5"])
    assert SungConfig.from_mapping(cfg.agent.model.sung) == SungConfig(topk=7)
    ret = RetentionConfig.from_mapping(cfg.agent.model.retention)
    assert ret.bc.weight == 0.5 and ret.kl.weight == 0.0 and ret.enabled
    assert not RetentionConfig.from_mapping(_composed_train("agent=bc-ppo").agent.model.retention).enabled
    retain = RetentionConfig.from_mapping(_composed_train("agent=wsrl-retain").agent.model.retention)
    assert (retain.kl.weight, retain.bc.weight, retain.replay.weight, retain.kl_states) == (1.0, 0.0, 0.0, "offline")
    for bad in ("agent.model.sung.topkk=7", "agent.model.sung.topk=many", "agent.model.retention.kl.weight=big"):
        with pytest.raises(ConfigCompositionException):
            _compose("train", ["agent=sung", bad])
