"""PointMaze goal-reaching datasets recorded in the task's own MDP.

Recipe (planner after Farama's ``minari-dataset-generation-scripts/scripts/pointmaze``,
which recreated D4RL's maze2d datasets, and D4RL's ``pointmaze/waypoint_controller.py``):

* Task env (collection, online fine-tuning and evaluation alike): ``PointMaze_<Maze>-v3``
  with ``continuing_task=False, reset_target=False`` and the env id's default sparse
  reward and maze map (random start and goal cells per reset). Reaching the goal (within
  0.45 m) pays reward 1 and **terminates** the episode; every other step pays 0. Episodes
  otherwise end at the env id's ``max_episode_steps`` (UMaze 300, Medium 600, Large 800)
  as truncations. Each reset uses seed ``seed + k``. The recorded ``env_spec`` (id and
  kwargs) is exactly this env, and so is ``eval_env_spec``: ``robotrl train`` builds its
  online and evaluation envs from it, so the data's rewards are the rewards the agent is
  fine-tuned and scored on. (D4RL maze2d / Minari's ``D4RL/pointmaze`` record a continuing
  task with moving goals and evaluate a fixed-goal continuing task that pays reward on
  every step at the goal: two reward functions ~25x apart; this recipe avoids that.)
* Policy: a waypoint planner over the maze grid (Q-iteration on cells, reward 1 on
  entering the goal cell, discount 0.99) gives the next cell; a PD controller
  ``a = 10 (waypoint - xy) - 1 * velocity`` drives the ball to it, the waypoint
  advancing when the ball is within 0.1 m of it. Waypoints (not the final goal) are
  jittered by U(-0.1, 0.1) m per axis. The controller output, clipped to [-1, 1], is
  multiplied by ``action_scale`` (1: Minari's planner; < 1: a cautious, slow
  demonstrator whose data leaves room for online improvement) and Gaussian noise
  N(0, ``action_noise``^2) is added before clipping to [-1, 1] again (Minari: scale 1,
  noise 0.5).
* Reference scores: ``ref_min_score`` = mean return of uniform random actions,
  ``ref_max_score`` = mean return of the noise-free full-speed planner, each over
  ``ref_episodes`` (default 100, as Minari's ``num_episodes_average_score``) task-env
  episodes seeded ``123 + i``. Returns are 1 for a reached goal and 0 otherwise, so the
  return is the success rate.

Observations stay the env's Dict (``observation`` (4,) = xy, velocity;
``achieved_goal`` (2,); ``desired_goal`` (2,), meters). Per-step
``infos["success"]`` (T+1,) is the env's ``info["success"]``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from robotrl.collect._common import (
    base_provenance,
    camera_facts,
    collect_steps,
    make_env,
    mean_return,
    progress_bar,
    random_policy,
    task_spec,
    with_cameras,
)
from robotrl.data.writer import write_dataset
from robotrl.errors import ConfigError

__all__ = ["collect_pointmaze", "MazePlanner", "MAZES", "TASK_KWARGS"]

MAZES = {"umaze": "PointMaze_UMaze-v3", "medium": "PointMaze_Medium-v3", "large": "PointMaze_Large-v3"}
# The goal-reaching task: reward 1 and termination on arrival, the env id's random-goal maze map.
TASK_KWARGS = {"continuing_task": False, "reset_target": False}
_MOVES = ((-1, 0), (1, 0), (0, -1), (0, 1))


class MazePlanner:
    """Q-iteration waypoint planner + PD controller for the point mass (D4RL/Minari style).

    Args:
        maze: the env's ``unwrapped.maze`` (gymnasium-robotics ``Maze``).
        kp, kd: PD gains; action = ``kp * (waypoint - xy) - kd * velocity`` (Minari: 10, 1).
        waypoint_threshold: distance in meters at which a waypoint counts as reached.
        action_noise: std of Gaussian noise added to each action (0 for the reference expert).
        action_scale: factor on the controller's clipped action before the noise: the
            demonstrator's top speed as a fraction of the actuators' range (1: full speed).
        waypoint_jitter: half-width in meters of the uniform jitter of intermediate waypoints.
        hover_radius: once the ball reaches the goal (within ``waypoint_threshold``), keep moving around it: aim at
            points drawn uniformly in the disk of this radius (m) around the goal, a new one when reached or after
            ``hover_steps`` steps; points inside a wall press the ball against it. 0: hold the goal. For a success
            classifier's labelled recording on a ``continuing_task`` env: frames inside the success radius and near
            misses on every side of it, as HIL-SERL's operator records them.
        hover_steps: the most steps spent aiming at one hover point.
        rng: numpy Generator for noise, jitter and hover points.

    ``policy(obs) -> (2,) float32`` action in [-1, 1] for a PointMaze Dict observation.
    """

    def __init__(self, maze, *, kp=10.0, kd=1.0, waypoint_threshold=0.1, action_noise=0.0, action_scale=1.0,
                 waypoint_jitter=0.0, hover_radius=0.0, hover_steps=20, rng=None, gamma=0.99):
        self.maze = maze
        self.grid = np.asarray([[1 if c == 1 else 0 for c in row] for row in maze.maze_map], dtype=np.int8)
        self.kp, self.kd = kp, kd
        self.threshold = waypoint_threshold
        self.noise = action_noise
        self.scale = action_scale
        self.jitter = waypoint_jitter
        self.hover_radius, self.hover_steps = float(hover_radius), int(hover_steps)
        self._hover_left: int | None = None  # steps left on the current hover point (None: not hovering yet)
        self.gamma = gamma
        self.rng = rng if rng is not None else np.random.default_rng()
        self._next: dict[tuple, dict] = {}  # goal cell -> {cell: next cell}
        self._goal_xy = None
        self._wp_cell = None
        self._wp_xy = None

    # ---- planning on the grid -------------------------------------------------------
    def q_iteration(self, goal_cell: tuple[int, int]) -> np.ndarray:
        """Q-values ``(rows, cols, 4)`` for moves up/down/left/right; reward 1 on entering ``goal_cell``.

        Invalid moves (into walls or off the map) get ``-inf``. Iterates to convergence
        (rows*cols synchronous sweeps, enough for every shortest path).
        """
        rows, cols = self.grid.shape
        V = np.zeros((rows, cols))
        Q = np.full((rows, cols, 4), -np.inf)
        for _ in range(rows * cols):
            for r in range(rows):
                for c in range(cols):
                    if self.grid[r, c]:
                        continue
                    for a, (dr, dc) in enumerate(_MOVES):
                        nr, nc = r + dr, c + dc
                        if 0 <= nr < rows and 0 <= nc < cols and not self.grid[nr, nc]:
                            Q[r, c, a] = (1.0 if (nr, nc) == goal_cell else 0.0) + self.gamma * V[nr, nc]
            V = np.where(np.isfinite(Q).any(-1), np.max(Q, axis=-1), 0.0)
        return Q

    def next_cell(self, cell: tuple[int, int], goal_cell: tuple[int, int]) -> tuple[int, int]:
        """The greedy next cell from ``cell`` toward ``goal_cell`` (``goal_cell`` itself when there)."""
        if cell == goal_cell:
            return goal_cell
        table = self._next.get(goal_cell)
        if table is None:
            Q = self.q_iteration(goal_cell)
            table = {}
            for r, c in zip(*np.nonzero(self.grid == 0)):
                if np.isfinite(Q[r, c]).any():
                    dr, dc = _MOVES[int(np.argmax(np.where(np.isfinite(Q[r, c]), Q[r, c], -np.inf)))]
                    table[(int(r), int(c))] = (int(r + dr), int(c + dc))
            self._next[goal_cell] = table
        return table.get(cell, goal_cell)

    def _cell(self, xy) -> tuple[int, int]:
        r, c = self.maze.cell_xy_to_rowcol(np.asarray(xy))
        return int(r), int(c)

    def _set_waypoint(self, cell, goal_cell, goal_xy):
        self._wp_cell = cell
        if cell == goal_cell:
            self._wp_xy = np.asarray(goal_xy, dtype=np.float64)
        else:
            centre = np.asarray(self.maze.cell_rowcol_to_xy(np.array(cell)), dtype=np.float64)
            self._wp_xy = centre + (self.rng.uniform(-self.jitter, self.jitter, size=2) if self.jitter else 0.0)

    def reset(self) -> None:
        """Forget the current waypoint (call after an env reset)."""
        self._goal_xy = self._wp_cell = self._wp_xy = self._hover_left = None

    def __call__(self, obs) -> np.ndarray:
        xy = np.asarray(obs["achieved_goal"], dtype=np.float64)
        vel = np.asarray(obs["observation"][2:4], dtype=np.float64)
        goal_xy = np.asarray(obs["desired_goal"], dtype=np.float64)
        goal_cell, cell = self._cell(goal_xy), self._cell(xy)
        if self._goal_xy is None or np.linalg.norm(goal_xy - self._goal_xy) > 1e-6:
            self._goal_xy = goal_xy
            self._set_waypoint(self.next_cell(cell, goal_cell), goal_cell, goal_xy)
        elif self._wp_cell != goal_cell and np.linalg.norm(self._wp_xy - xy) <= self.threshold:
            self._set_waypoint(self.next_cell(self._wp_cell, goal_cell), goal_cell, goal_xy)
        elif self.hover_radius > 0 and self._wp_cell == goal_cell and (
                (self._hover_left is not None and self._hover_left <= 0) or np.linalg.norm(self._wp_xy - xy) <= self.threshold):
            r, a = self.hover_radius * np.sqrt(self.rng.uniform()), self.rng.uniform(0.0, 2.0 * np.pi)  # uniform in the disk
            self._wp_xy = goal_xy + r * np.array([np.cos(a), np.sin(a)])
            self._hover_left = self.hover_steps
        elif cell != self._wp_cell and self.next_cell(cell, goal_cell) != self._wp_cell:
            # pushed off the route (noise, collisions): replan from where the ball is
            self._set_waypoint(self.next_cell(cell, goal_cell), goal_cell, goal_xy)
        if self._hover_left is not None:
            self._hover_left -= 1
        action = self.kp * (self._wp_xy - xy) - self.kd * vel
        if self.scale != 1.0:  # a slower demonstrator: a fraction of the actuators' range (scale 1: Minari's planner)
            action = self.scale * np.clip(action, -1.0, 1.0)
        if self.noise:
            action = action + self.rng.normal(0.0, self.noise, size=2)
        return np.clip(action, -1.0, 1.0).astype(np.float32)


def _check_maze(maze: str) -> None:
    if maze not in MAZES:
        raise ConfigError(f"unknown maze {maze!r}; choose one of {sorted(MAZES)}")


def collect_pointmaze(
    maze: str = "umaze",
    num_steps: int = 1_000_000,
    seed: int = 0,
    dataset_id: str | None = None,
    data_format: str = "hdf5",
    root: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = True,
    *,
    action_noise: float = 0.5,
    action_scale: float = 1.0,
    max_episode_steps: int | None = None,
    env_kwargs: dict | None = None,
    ref_episodes: int = 100,
    hover_radius: float = 0.0,
    cameras: list[str] | None = None,
    image_size: int | None = None,
) -> Path:
    """Generate a PointMaze goal-reaching dataset with the waypoint planner and write it with Minari.

    Args:
        maze: ``"umaze"``, ``"medium"`` or ``"large"`` (``PointMaze_<Maze>-v3``).
        num_steps: total env steps to record (D4RL/Minari used 1e6); the last episode is
            cut (truncated) where the budget ends.
        seed: seeds the env resets (``seed + k`` for episode ``k``) and the noise.
        dataset_id: default ``robotrl/pointmaze/<maze>-v1`` (v0 was the moving-goal continuing task).
        data_format: ``"hdf5"`` or ``"arrow"``.
        root: datasets root (default ``$MINARI_DATASETS_PATH`` / ``~/.minari/datasets``).
        overwrite: replace an existing dataset of that id.
        progress: show a tqdm bar over collection steps.
        action_noise: std of the Gaussian action noise, normalised action units (Minari: 0.5).
        action_scale: factor on the PD controller's clipped action before the noise (1:
            Minari's planner; e.g. 0.1: a slow demonstrator, success ~0.7 on UMaze's 300 steps).
        max_episode_steps: the task's time limit (``None``: the env id's); recorded in the
            env spec, so fine-tuning and evaluation use it too.
        env_kwargs: ``gymnasium.make`` kwargs replacing the goal-reaching task's
            (:data:`TASK_KWARGS`), e.g. ``{"continuing_task": True, "reset_target": True}`` for
            D4RL maze2d's moving-goal collection; recorded in the env spec like every kwarg.
        ref_episodes: task-env episodes for each reference score (Minari default 100).
        hover_radius: the planner keeps moving within this radius (m) of the goal once there (:class:`MazePlanner`;
            0: it holds the goal). With ``env_kwargs={"continuing_task": True}`` the episode goes on past the
            success: a success classifier's labelled recording, e.g. ``robotrl collect recipe=pointmaze-umaze
            "+env_kwargs={continuing_task: true}" +hover_radius=1.0``.
        cameras: record camera frames too (e.g. ``["topdown"]``, see
            :class:`robotrl.envs.pixels.PixelObservation`): observations gain
            ``"pixels": {camera: uint8 (H, W, 3)}``, stored uint8 in the Minari dataset.
        image_size: frame size ``H = W`` in pixels (default 64).

    Returns:
        The dataset directory.

    Raises:
        ConfigError: unknown ``maze``, ``num_steps < 1`` or ``action_scale`` outside (0, 1].
        DatasetExistsError: id taken and not ``overwrite``.
    """
    _check_maze(maze)
    if num_steps < 1:
        raise ConfigError(f"num_steps must be >= 1, got {num_steps}")
    if not 0.0 < action_scale <= 1.0:
        raise ConfigError(f"action_scale must be in (0, 1], got {action_scale}")
    dataset_id = dataset_id or f"robotrl/pointmaze/{maze}-v1"
    env_id = MAZES[maze]
    task_kwargs = {**TASK_KWARGS, **(env_kwargs or {})}
    env = make_env(env_id, **task_kwargs, **({"max_episode_steps": int(max_episode_steps)} if max_episode_steps else {}))
    env = with_cameras(env, cameras, image_size)
    rng = np.random.default_rng(seed)
    planner = MazePlanner(env.unwrapped.maze, action_noise=action_noise, action_scale=action_scale,
                          waypoint_jitter=0.1, hover_radius=hover_radius, rng=rng)
    t0 = time.time()
    bar = progress_bar(num_steps, f"collect {dataset_id}", progress)
    episodes = collect_steps(env, planner, num_steps, seed, bar, success_key="success")
    bar.close()
    collect_s = time.time() - t0
    spec, obs_space, cams = task_spec(env), env.observation_space, camera_facts(env)
    env.close()

    t1 = time.time()
    rnd = mean_return(spec, random_policy, ref_episodes, success_key="success")
    exp = mean_return(spec, lambda e: MazePlanner(e.unwrapped.maze, rng=np.random.default_rng(seed)), ref_episodes,
                      success_key="success")
    reached = float(np.mean([ep.terminations.any() for ep in episodes]))
    prov = base_provenance(
        f"pointmaze-{maze}",
        env_id=env_id,
        env_kwargs=task_kwargs,
        policy="Q-iteration waypoint planner + PD controller (kp=10, kd=1, waypoint threshold 0.1 m)",
        action_noise_std=action_noise,
        action_scale=action_scale,
        waypoint_jitter_m=0.1,
        hover_radius_m=hover_radius,
        seed=seed,
        num_steps=num_steps,
        num_episodes=len(episodes),
        episodes_reaching_the_goal=reached,
        ref_episodes=ref_episodes,
        ref_random=rnd,
        ref_planner=exp,
        collect_seconds=round(collect_s, 2),
        ref_seconds=round(time.time() - t1, 2),
        follows="Farama minari-dataset-generation-scripts scripts/pointmaze (planner); task env terminates at the goal",
        **cams,
    )
    return write_dataset(
        dataset_id,
        episodes,
        env=spec,
        eval_env=spec,
        observation_space=obs_space,
        ref_min_score=rnd["mean"],
        ref_max_score=exp["mean"],
        algorithm_name="QIteration+PD",
        description=(
            f"{env_id} goal reaching (reward 1 and termination at the goal, random goals), {num_steps} steps "
            f"of a Q-iteration waypoint planner with a PD controller scaled by {action_scale} and "
            f"N(0,{action_noise}^2) action noise; sparse reward."
        ),
        provenance=prov,
        data_format=data_format,
        root=root,
        overwrite=overwrite,
    )
