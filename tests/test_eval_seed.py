"""``trainer.eval_seed`` / ``agent.onpolicy.eval_seed``: where a run's own evaluation episodes reset.

A run's evaluations reset episode ``i`` with ``seed + 10000 + i`` by default (every earlier result, and the resets
on which settings such as DPPO's γ 0.95 on FetchPush were chosen: seeds 0-2, 50 episodes, so ``10000..10051``).
The knob moves them to a held-out range. Real runs built by ``robotrl.experiment`` (Pendulum, no dataset), real
envs; a recording wrapper keeps each reset's seed.
"""

from __future__ import annotations

import gymnasium as gym
import pytest
from hydra import compose, initialize_config_module

from robotrl.errors import ConfigError
from robotrl.experiment import build_trainer

#: the resets earlier results were measured (and settings chosen) on: seeds 0..2 x 50 episodes from seed + 10000
USED_RESETS = set(range(10_000, 10_000 + 2 + 50))
HELD_OUT = 200_000

ONPOLICY = ["agent=ppo", "env=gym", "env.name=Pendulum-v1", "env.max_episode_steps=5", "trainer.offline_steps=0",
            "trainer.offline_ratio=0.0", "trainer.progress=false", "agent.onpolicy.steps_per_iter=6",
            "agent.onpolicy.num_envs=1", "agent.onpolicy.iterations=1", "agent.onpolicy.eval_episodes=4",
            "agent.onpolicy.eval_envs=2", "agent.model.hidden=[8]", "agent.model.critic_hidden=[8]", "device=cpu",
            "torch_threads=1"]
OFFPOLICY = ["agent=sac", "env=gym", "env.name=Pendulum-v1", "env.max_episode_steps=5", "trainer.offline_steps=0",
             "trainer.offline_ratio=0.0", "trainer.online_steps=10", "trainer.online_warmup_steps=5",
             "trainer.progress=false", "trainer.eval_episodes=4", "trainer.eval_envs=2", "device=cpu",
             "torch_threads=1"]


class RecordResets(gym.Wrapper):
    """Appends the seed of every ``reset`` to ``log``."""

    def __init__(self, env: gym.Env, log: list):
        super().__init__(env)
        self.log = log

    def reset(self, *, seed=None, options=None):
        self.log.append(seed)
        return self.env.reset(seed=seed, options=options)


def _eval_resets(overrides: list[str], run_dir) -> list[int]:
    """The reset seeds of one evaluation of the run that ``robotrl train <overrides>`` builds."""
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    runner = build_trainer(cfg, run_dir)
    make, log = runner.make_eval_env, []
    runner.make_eval_env = lambda: RecordResets(make(), log)
    runner.evaluate("online")
    return sorted(log)


@pytest.mark.parametrize("base,key", [(ONPOLICY, "agent.onpolicy.eval_seed"), (OFFPOLICY, "trainer.eval_seed")],
                         ids=["onpolicy", "offpolicy"])
def test_eval_seed_moves_the_evaluation_resets_off_the_range_settings_were_chosen_on(base, key, tmp_path):
    default = _eval_resets([*base, "seed=1"], tmp_path / "default")
    assert default == [10_001, 10_002, 10_003, 10_004]  # unchanged: seed + 10000 + i, earlier results stay valid
    held_out = _eval_resets([*base, "seed=1", f"{key}={HELD_OUT}"], tmp_path / "held_out")
    assert held_out == [HELD_OUT + i for i in range(4)]
    assert not USED_RESETS & set(held_out)


def test_a_negative_eval_seed_is_refused_with_the_key_named(tmp_path):
    with pytest.raises(ConfigError, match=r"agent\.onpolicy\.eval_seed=-1"):
        _eval_resets([*ONPOLICY, "agent.onpolicy.eval_seed=-1"], tmp_path / "bad")


def test_trainer_eval_seed_on_an_on_policy_run_is_refused_naming_its_key(tmp_path):
    """An on-policy run's evaluations follow agent.onpolicy.eval_seed; trainer.eval_seed would do nothing there."""
    with pytest.raises(ConfigError, match=r"trainer\.eval_seed=200000 .* agent\.onpolicy\.eval_seed"):
        _eval_resets([*ONPOLICY, f"trainer.eval_seed={HELD_OUT}"], tmp_path / "wrong_key")
