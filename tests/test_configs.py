"""Every Hydra config composes, and the agent in each instantiates with derived sizes."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

import robotrl.configs

CONFIG_DIR = Path(robotrl.configs.__file__).parent


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))


def _compose(name: str, overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name=name, overrides=overrides)


@pytest.mark.parametrize("env", _options("env"))
def test_each_env_composes_with_its_default_dataset(env):
    cfg = _compose("train", [f"env={env}"])
    if env == "gym":  # any gymnasium env: taken from the user's dataset (dataset group gym: id required)
        assert cfg.env.name is None and cfg.dataset.id is None and not cfg.dataset.generate
    else:
        assert cfg.env.name == env
        assert cfg.dataset.id  # dataset group follows the env
    OmegaConf.to_container(cfg, resolve=True)


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
                if "reward_scale" in resolved["agent"] and experiment != "residual-offpolicy":
                    assert resolved["agent"]["reward_scale"] == resolved["env"]["reward_transform"]["scale"]


@pytest.mark.parametrize("agent", _options("agent"))
def test_each_agent_composes_and_instantiates(agent):
    import numpy as np
    from hydra.utils import instantiate

    from robotrl.data import ActionScaler, ObservationNormalizer

    cfg = _compose("train", [f"agent={agent}"])
    a = instantiate(cfg.agent.model, obs_dim=8, action_dim=2, obs_normalizer=ObservationNormalizer.identity(8),
                    action_scaler=ActionScaler(-np.ones(2), np.ones(2)), device="cpu", seed=0, _convert_="all")
    assert a.policy.obs_dim == 8 and a.policy.action_dim == 2


@pytest.mark.parametrize("experiment", _options("experiment"))
def test_each_experiment_composes(experiment):
    cfg = _compose("train", [f"experiment={experiment}"])
    OmegaConf.to_container(cfg, resolve=True)


@pytest.mark.parametrize("name", ["collect", "eval"])
def test_other_commands_compose(name):
    overrides = ["checkpoint=x"] if name == "eval" else []
    OmegaConf.to_container(_compose(name, overrides), resolve=True)


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
