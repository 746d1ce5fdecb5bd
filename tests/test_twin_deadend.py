"""The dead-end twin of issue 42 (``robot=sim-deadend``): the Z corridor's path with dead-end branches off it, the task
where interventions matter and exploration alone should not find the goal. The config composes to
:data:`robotrl.real_robot.sim.DEADEND_MAP`; on the real twin built through the driver factory no constant action (the 8
compass directions) and not the straight-to-goal controller reach the goal from the benchmark's 20 evaluation starts,
the path-following controller (the demonstrator and the scripted operator) reaches it from every one within the
episode's 200 steps and leads the ball back out of every dead end, and the scripted operator that
``robotrl actor teleop=scripted scripted.on_failure=true`` builds carries a policy that does not move to the goal."""

from __future__ import annotations

import numpy as np
import pytest
from twin_maze import (EVAL_STARTS, check_scripted_operator_carries_a_still_policy, compass_hits, maze_twin,
                       path_controller_episodes, straight_controller_hits)

from robotrl.real_robot.sim import DEADEND_MAP, ZCORRIDOR_MAP
from robotrl.real_robot.teleop import maze_cell, maze_controller, maze_path


@pytest.fixture(scope="module")
def twin():
    yield from maze_twin("deadend", "sim-deadend", DEADEND_MAP)


def test_the_map_is_the_z_path_with_dead_ends_off_it(twin):
    pts = maze_path(DEADEND_MAP)
    assert pts.tolist() == [[-3.0, -0.5], [-2.0, -0.5], [-1.0, -0.5], [0.0, -0.5], [0.0, 0.5], [0.0, 1.5], [-1.0, 1.5],
                            [-2.0, 1.5], [-3.0, 1.5]]  # right 3, up 2, left 3: the Z corridor's path
    assert np.allclose(np.diff(pts, axis=0), np.diff(maze_path(ZCORRIDOR_MAP), axis=0))
    free = {(i, j) for i, row in enumerate(DEADEND_MAP) for j, v in enumerate(row) if v != 1}
    assert len(free) == 22 and len(free - {maze_cell(DEADEND_MAP, p) for p in pts}) == 13  # 13 dead-end cells beside the 9 of the path
    o = twin.reset(0)  # fixed cells with the env's noise of at most 0.25 m
    assert np.allclose(o.state[4:6], [-3.0, -0.5], atol=0.26) and np.allclose(o.state[2:4], [-3.0, 1.5], atol=0.26)


def test_no_constant_action_and_not_the_straight_controller_reach_the_goal(twin):
    hits = compass_hits(twin)  # the 8 compass directions at full force
    assert len(hits) == 8 and all(n == 0 for n in hits.values()), hits
    assert straight_controller_hits(twin) == 0  # stuck under the wall


def test_the_path_controller_reaches_the_goal_from_every_evaluation_start_with_the_one_sparse_reward(twin):
    for ok, steps, ret, _ in path_controller_episodes(twin, DEADEND_MAP):
        assert ok and 100 < steps < 200 and ret == 1.0  # sparse: the one reward is at the goal, which ends the episode


@pytest.mark.parametrize("push", [[(1, 0)] * 100 + [(0, 1)] * 80,  # the room's top right
                                  [(1, 0)] * 100 + [(0, -1)] * 80,  # the room's bottom right
                                  [(1, 1)] * 150,  # the vertical leg's end above the top leg
                                  [(0.3, -1)] * 60])  # the dead end below the bottom leg
def test_the_path_controller_leads_back_out_of_a_dead_end(twin, push):
    path_cells = {maze_cell(DEADEND_MAP, p) for p in maze_path(DEADEND_MAP)}
    ctrl = maze_controller(DEADEND_MAP)
    for s in list(EVAL_STARTS)[:3]:
        o = twin.reset(s)
        for a in push:
            twin.send_action(np.asarray(a, np.float32))
        o = twin.get_observation()
        assert maze_cell(DEADEND_MAP, o.state[4:6]) not in path_cells  # pushed into a dead end
        for _ in range(300):
            twin.send_action(ctrl(o.state))
            o = twin.get_observation()
            if o.success:
                break
        assert o.success, (s, push[0])


def test_the_actors_scripted_operator_follows_the_path_and_carries_a_still_policy_to_the_goal():
    check_scripted_operator_carries_a_still_policy("deadend")


def test_the_route_back_is_only_off_the_path():
    """On maps whose free cells are all on the path (the corridors) the controller is unchanged: the same action as
    the path logic anywhere; in a dead-end cell of DEADEND_MAP it heads for the next cell towards the goal."""
    obs = np.array([0, 0, -3.0, 1.5, 2.0, -0.5, 0.0, 0.0], np.float32)  # the ball in the room's entrance row, at rest
    a = maze_controller(DEADEND_MAP)(obs)
    assert a[0] == -1.0 and abs(a[1]) < 1e-6  # left, towards (1.0, -0.5), not up through the wall
    z = np.array([0, 0, -1.5, 1.0, 0.3, -1.0, 0.2, 0.0], np.float32)
    assert np.allclose(maze_controller(ZCORRIDOR_MAP)(z), np.clip(5 * (np.array([1.3, -1.0]) - z[4:6]) - 0.5 * z[6:8], -1, 1),
                       atol=1e-5)  # 1 m further along the path, as before the route back existed
