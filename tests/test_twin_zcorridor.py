"""The Z-corridor twin of issue 42 (``robot=sim-zcorridor``), the task where interventions matter: the config composes
to :data:`robotrl.real_robot.sim.ZCORRIDOR_MAP`; on the real twin built through the driver factory no constant action
(the 8 compass directions) and not the straight-to-goal controller reach the goal from the benchmark's 20 evaluation
starts, the path-following controller (the demonstrator) reaches it from every one, and the scripted operator that
``robotrl actor teleop=scripted scripted.on_failure=true`` builds carries a policy that does not move to the goal."""

from __future__ import annotations

import numpy as np
import pytest
from twin_maze import (EVAL_STARTS, check_scripted_operator_carries_a_still_policy, compass_hits, maze_twin,
                       path_controller_episodes, straight_controller_hits)

from robotrl.real_robot.sim import ZCORRIDOR_MAP
from robotrl.real_robot.teleop import maze_controller, maze_path, pointmaze_controller


@pytest.fixture(scope="module")
def twin():
    yield from maze_twin("zcorridor", "sim-zcorridor", ZCORRIDOR_MAP)


def test_the_map_has_two_turns_and_the_goal_behind_a_wall_above_the_start(twin):
    pts = maze_path(ZCORRIDOR_MAP)
    assert pts.tolist() == [[-1.5, -1.0], [-0.5, -1.0], [0.5, -1.0], [1.5, -1.0], [1.5, 0.0], [1.5, 1.0], [0.5, 1.0],
                            [-0.5, 1.0], [-1.5, 1.0]]  # right 3, up 2, left 3: x goes up, then back down
    o = twin.reset(0)  # fixed cells with the env's noise of at most 0.25 m
    assert np.allclose(o.state[4:6], [-1.5, -1.0], atol=0.26) and np.allclose(o.state[2:4], [-1.5, 1.0], atol=0.26)


def test_no_constant_action_and_not_the_straight_controller_reach_the_goal(twin):
    hits = compass_hits(twin)  # the 8 compass directions at full force
    # on the L corridor up-right reaches it from 10 of 20
    assert len(hits) == 8 and all(n <= 0.1 * len(EVAL_STARTS) for n in hits.values()), hits
    assert straight_controller_hits(twin) == 0  # stuck under the wall


def test_the_path_controller_reaches_the_goal_from_every_evaluation_start_with_the_one_sparse_reward(twin):
    for ok, steps, ret, _ in path_controller_episodes(twin, ZCORRIDOR_MAP):
        assert ok and 100 < steps < 200 and ret == 1.0  # sparse: the one reward is at the goal, which ends the episode


def test_the_actors_scripted_operator_follows_the_path_and_carries_a_still_policy_to_the_goal():
    check_scripted_operator_carries_a_still_policy("zcorridor")


def test_maze_controller_without_fixed_cells_is_straight_to_the_goal_and_refuses_a_bad_lookahead():
    obs = np.array([0, 0, 1.0, -1.0, 0.9, -0.8, 0.1, 0.2], np.float32)
    assert np.allclose(maze_controller(None)(obs), pointmaze_controller()(obs))
    assert np.allclose(maze_controller([[1, 1, 1], [1, 0, 1], [1, 1, 1]])(obs), pointmaze_controller()(obs))
    with pytest.raises(ValueError, match="lookahead > 0"):
        maze_controller(ZCORRIDOR_MAP, lookahead=0.0)
