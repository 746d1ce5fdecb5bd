"""The L-corridor twin of issue 42 (``robot=sim-lcorridor``): the config composes to the map of
:data:`robotrl.real_robot.sim.LCORRIDOR_MAP`, the twin built from it through the driver factory runs
the sparse-reward corridor, the scripted "human" reaches the goal, and random actions do not."""

from __future__ import annotations

import numpy as np
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from robotrl.real_robot.factory import make_robot
from robotrl.real_robot.online_eval import robot_overrides
from robotrl.real_robot.sim import LCORRIDOR_MAP
from robotrl.real_robot.teleop import pointmaze_controller


def _robot_cfg() -> dict:
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/actor", overrides=[*robot_overrides("lcorridor", "sparse", 200), "key_file=k.key"])
    return OmegaConf.to_container(cfg.robot, resolve=True)


def _episode(twin, seed: int, policy) -> tuple[bool, int, float]:
    o = twin.reset(seed)
    ret = 0.0
    for k in range(200):
        twin.send_action(policy(o.state))
        o = twin.get_observation()
        ret += o.reward
        if o.success or o.terminated or o.truncated:
            return bool(o.success), k + 1, ret
    return False, 200, ret


def test_lcorridor_config_is_the_map_and_the_controller_reaches_the_goal():
    rc = _robot_cfg()
    assert rc["name"] == "sim-lcorridor" and rc["env_kwargs"]["maze_map"] == LCORRIDOR_MAP
    assert rc["env_kwargs"]["reward_type"] == "sparse" and rc["max_episode_steps"] == 200 and rc["realtime"] is False
    twin = make_robot(rc)
    ctrl = pointmaze_controller()
    rng = np.random.default_rng(0)
    with twin:
        o = twin.reset(0)
        # fixed cells: start in the bottom of the vertical leg (x = -2, y = -1.5), goal at the end of the
        # horizontal one (x = 2, y = 1.5), each with the env's noise of at most 0.25 m
        assert np.allclose(o.state[4:6], [-2.0, -1.5], atol=0.26) and np.allclose(o.state[2:4], [2.0, 1.5], atol=0.26)
        for s in range(3):
            ok, steps, ret = _episode(twin, s, ctrl)
            assert ok and 100 < steps < 200 and ret == 1.0  # sparse: the one reward is at the goal
        random_hits = [_episode(twin, s, lambda _: rng.uniform(-1, 1, 2))[0] for s in range(3)]
    assert not any(random_hits)
