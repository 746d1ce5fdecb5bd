"""A MuJoCo twin: one of robotrl's MuJoCo tasks behind the :class:`Robot` interface.

The twin runs a task made by :func:`robotrl.envs.make_env` (e.g. ``pointmaze-umaze``:
``Do = 8`` = achieved goal x, y (m), desired goal x, y (m), ball x, y (m) and
vx, vy (m/s); ``Da = 2`` force commands in ``[-1, 1]``) in wall-clock real time: each
:meth:`MuJoCoTwin.send_action` advances the simulation by one env step of ``dt`` s
(PointMaze: 0.01 s, 100 Hz) and never lets simulated time run ahead of the wall clock,
like a robot whose controller executes a command per period. While held (watchdog,
e-stop) a background thread keeps stepping the physics with the hold action in real time.

Faults for testing the bridge (:class:`FaultInjection`): extra latency and jitter per
call (s), dropped commands (the command is lost; the previous one stays applied, as a
lost packet would leave it), and a simulated crash after a number of steps (every call
then raises :class:`RobotConnectionError`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from robotrl.real_robot.interface import ArraySpec, CameraSpec, Observation, RobotConnectionError, RobotSpec

_UNITS = {  # per-task names and SI units of the flat observation and the action
    "pointmaze": (["achieved_x", "achieved_y", "goal_x", "goal_y", "x", "y", "vx", "vy"],
                  ["m", "m", "m", "m", "m", "m", "m/s", "m/s"], ["fx", "fy"], ["1", "1"]),
}

#: A harder twin task (issue 42): PointMaze map (``maze_map`` env kwarg, 1 = wall, 0 = free, ``"r"`` the
#: start cell, ``"g"`` the goal cell; cells 1 m) of an L-shaped corridor one cell wide, the start at the
#: bottom of the vertical leg (4 cells) and the goal at the end of the horizontal one (5 cells), about
#: 6.5 m of path. With the sparse reward (1 within 0.45 m of the goal) random actions almost never reach
#: the goal within 200 steps (2 s), while the straight-to-goal controller
#: (:func:`robotrl.real_robot.teleop.pointmaze_controller`) slides along the walls and reaches it in about
#: 135 steps. ``robot=sim-lcorridor`` is this twin.
LCORRIDOR_MAP: list[list] = [[1, 1, 1, 1, 1, 1, 1],
                             [1, 0, 0, 0, 0, "g", 1],
                             [1, 0, 1, 1, 1, 1, 1],
                             [1, 0, 1, 1, 1, 1, 1],
                             [1, "r", 1, 1, 1, 1, 1],
                             [1, 1, 1, 1, 1, 1, 1]]

#: The twin task of issue 42 where interventions matter: a PointMaze map (as :data:`LCORRIDOR_MAP`) of a corridor one
#: cell wide with two turns, the start ``r`` at the left of the bottom leg, the goal ``g`` at the left of the top leg,
#: 2 m straight above the start behind a wall: right 3 cells, up 2, left 3 (about 8 m of path). The ball must reverse
#: its x direction, so no constant action reaches the goal (none of the 8 compass directions does from any of the 20
#: evaluation starts, where on :data:`LCORRIDOR_MAP` up-right does from 10), nor does the straight-to-goal controller
#: (:func:`robotrl.real_robot.teleop.pointmaze_controller`: it pushes into the wall above the start); the path-following
#: controller (:func:`robotrl.real_robot.teleop.maze_controller`) reaches it in about 145 steps. ``robot=sim-zcorridor``
#: is this twin (``tests/test_twin_zcorridor.py``).
ZCORRIDOR_MAP: list[list] = [[1, 1, 1, 1, 1, 1],
                             [1, "g", 0, 0, 0, 1],
                             [1, 1, 1, 1, 0, 1],
                             [1, "r", 0, 0, 0, 1],
                             [1, 1, 1, 1, 1, 1]]

#: The twin task of issue 42 where interventions matter **and** exploration alone does not find the goal: the path of
#: :data:`ZCORRIDOR_MAP` (start ``r`` at the left of the bottom leg, goal ``g`` at the left of the top leg, 2 m straight
#: above the start behind a wall; right 3 cells, up 2, left 3, about 8 m) with dead-end branches off it: the bottom
#: leg runs on past the turn into a room of 9 cells (2 × 4 and its entrance), the vertical leg runs on 1 cell past the
#: top leg, and 1-cell and 2-cell dead ends leave the top and bottom legs (22 free cells, 9 on the path). On the Z
#: corridor the step cost's optimism (``agent.reward_bias=-1``: untried actions look cheap) drove a policy that never
#: saw a reward to the corridor's one unvisited end, the goal; here the unvisited space is mostly the dead ends.
#: Neither a constant action nor the straight-to-goal controller reaches the goal; the path-following controller
#: (:func:`robotrl.real_robot.teleop.maze_controller`, which also leads back out of a dead end) does.
#: ``robot=sim-deadend`` is this twin (``tests/test_twin_deadend.py``).
DEADEND_MAP: list[list] = [[1, 1, 1, 1, 1, 1, 1, 1, 1],
                           [1, 1, 0, 1, 0, 1, 1, 1, 1],
                           [1, "g", 0, 0, 0, 1, 0, 0, 1],
                           [1, 1, 1, 1, 0, 1, 0, 0, 1],
                           [1, "r", 0, 0, 0, 0, 0, 0, 1],
                           [1, 1, 0, 1, 1, 1, 0, 0, 1],
                           [1, 1, 0, 1, 1, 1, 1, 1, 1],
                           [1, 1, 1, 1, 1, 1, 1, 1, 1]]


@dataclass
class FaultInjection:
    """Faults the twin injects.

    Attributes:
        latency_s: added delay per call (s).
        jitter_s: extra uniform random delay in ``[0, jitter_s]`` per call (s).
        drop_prob: probability that a command is lost (the previous command stays).
        crash_after_steps: after this many ``send_action`` calls every call raises
            :class:`RobotConnectionError` (``None``: never).
        seed: RNG seed of the faults.
    """

    latency_s: float = 0.0
    jitter_s: float = 0.0
    drop_prob: float = 0.0
    crash_after_steps: int | None = None
    seed: int = 0


class MuJoCoTwin:
    """A simulated robot running robotrl task ``task`` in real time.

    Args:
        task: robotrl env name (``"pointmaze-umaze"``, ``"hopper"``, ``"fetch-push"``...).
        realtime: pace the simulation to the wall clock (False for fast tests/benchmarks).
        faults: optional :class:`FaultInjection`.
        max_episode_steps: override the task's time limit (steps).
        env_kwargs: extra ``gymnasium.make`` kwargs.
        cameras: camera names rendered every control step (a MuJoCo camera of the task's
            model, ``"topdown"``/``"free"`` or a name of ``camera_views``, see
            :class:`robotrl.envs.pixels.PixelObservation`);
            frames arrive in :attr:`Observation.images` and are listed in
            :attr:`RobotSpec.cameras` (rate = the control rate). Needs headless GL (OSMesa).
        image_size: frame size ``H = W`` in pixels.
        camera_views: named free cameras of this twin (name -> ``{lookat: [x, y, z] m, distance: m, elevation: deg,
            azimuth: deg}``, :func:`robotrl.envs.pixels.check_views`), e.g. a camera over the task's goal region.

    Raises:
        ConfigError: unknown task (from :func:`robotrl.envs.make_env`), unknown camera or a malformed view.
        RobotConnectionError: a call while disconnected, or after the simulated crash.
    """

    def __init__(self, task: str = "pointmaze-umaze", *, realtime: bool = True, faults: FaultInjection | dict | None = None,
                 max_episode_steps: int | None = None, env_kwargs: dict | None = None,
                 cameras: list[str] | tuple[str, ...] = (), image_size: int = 64,
                 camera_views: Mapping[str, Mapping[str, Any]] | None = None):
        from robotrl.envs import env_info
        from robotrl.envs.pixels import check_views

        self.task, self.realtime = task, bool(realtime)
        self.faults = FaultInjection(**faults) if isinstance(faults, dict) else (faults or FaultInjection())
        self._max_steps, self._env_kwargs = max_episode_steps, dict(env_kwargs or {})
        self.cameras, self.image_size = tuple(str(c) for c in ([cameras] if isinstance(cameras, str) else cameras)), int(image_size)
        self.camera_views = check_views(camera_views)
        info = env_info(task, env_kwargs=self._env_kwargs)
        self._info = info
        self._dt_s = self._probe_dt(task, self._env_kwargs)
        self._env = None
        self._lock = threading.RLock()
        self._rng = np.random.default_rng(self.faults.seed)
        self._steps = 0
        self._held = threading.Event()
        self._hold_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._applied = np.asarray(self.spec().hold_action, np.float32)
        self._obs = None

    # ---- spec (no connection needed) -------------------------------------------------
    def spec(self) -> RobotSpec:
        """The twin's :class:`RobotSpec`; ``control_rate_hz = 1 / dt`` of the task."""
        if getattr(self, "_spec", None) is not None:
            return self._spec
        info = self._info
        family = (info.family or "").split("-")[0]
        names = _UNITS.get(family)
        if names and len(names[0]) == info.obs_dim and len(names[2]) == info.action_dim:
            obs = ArraySpec(tuple(names[0]), tuple(names[1]), (-np.inf,) * info.obs_dim, (np.inf,) * info.obs_dim)
            act = ArraySpec(tuple(names[2]), tuple(names[3]), tuple(map(float, info.action_low)), tuple(map(float, info.action_high)))
        else:
            obs = ArraySpec.unnamed("obs", info.obs_dim)
            act = ArraySpec.unnamed("act", info.action_dim, "1", info.action_low, info.action_high)
        hold = np.clip(np.zeros(info.action_dim), info.action_low, info.action_high)
        self._spec = RobotSpec(f"sim:{self.task}", obs, act, 1.0 / self._dt_s, tuple(map(float, hold)), gym_env_id=info.gym_id,
                         episodic=True, extra={"max_episode_steps": self._max_steps or info.max_episode_steps,
                                               "gym_env_kwargs": self._task_kwargs()},
                         cameras=tuple(CameraSpec(c, (self.image_size, self.image_size, 3), 1.0 / self._dt_s)
                                       for c in self.cameras))
        return self._spec

    def _task_kwargs(self) -> dict:
        """The ``gymnasium.make`` kwargs of the twin's task (robotrl's table, then ``env_kwargs``),
        so recordings name the MDP the episodes ran in, not only its id."""
        from robotrl.envs.registry import resolve_env

        _, kwargs = resolve_env(self.task)
        return {**kwargs, **{k: v for k, v in self._env_kwargs.items() if k != "render_mode"}}

    @staticmethod
    def _probe_dt(task: str, env_kwargs: dict) -> float:
        from robotrl.envs import make_env

        probe = make_env(task, env_kwargs=env_kwargs)
        try:
            u = probe.unwrapped
            return float(getattr(u, "dt", None) or u.point_env.dt)
        finally:
            probe.close()

    # ---- connection ---------------------------------------------------------------------
    @property
    def is_connected(self) -> bool:
        return self._env is not None

    def connect(self) -> None:
        """Make the env and reset it (seed 0)."""
        from robotrl.envs import make_env

        if self._env is None:
            env = make_env(self.task, max_episode_steps=self._max_steps, env_kwargs=self._env_kwargs)
            if self.cameras:  # the flat state stays as is; frames come beside it
                from robotrl.envs.pixels import PixelObservation

                env = PixelObservation(env, list(self.cameras), self.image_size, views=self.camera_views)
            self._env = env
            self._closing.clear()
            self.reset(seed=0)

    def disconnect(self) -> None:
        """Stop the hold thread and close the env (idempotent)."""
        self._closing.set()
        self._held.clear()
        if self._hold_thread is not None:
            self._hold_thread.join(timeout=2.0)
            self._hold_thread = None
        with self._lock:
            if self._env is not None:
                self._env.close()
                self._env = None

    def __enter__(self) -> MuJoCoTwin:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.disconnect()

    # ---- I/O ------------------------------------------------------------------------------
    def _check(self) -> None:
        if self._env is None:
            raise RobotConnectionError(f"{self.spec().name} is not connected; call connect() or use it as a context manager")
        f = self.faults
        if f.crash_after_steps is not None and self._steps >= f.crash_after_steps:
            raise RobotConnectionError(f"sim:{self.task} crashed (simulated crash after {f.crash_after_steps} steps)")

    def _delay(self) -> None:
        d = self.faults.latency_s + (self._rng.uniform(0, self.faults.jitter_s) if self.faults.jitter_s > 0 else 0.0)
        if d > 0:
            time.sleep(d)

    def reset(self, seed: int | None = None) -> Observation:
        """Reset the task (seed as in :func:`robotrl.evaluation.evaluate`) and the real-time clock.

        The new episode starts at rest and its clock starts with the first command (a
        hold in progress ends: nothing moves until then), so an episode run over the
        bridge matches the same episode run in-process step for step.
        """
        self._check()
        self._held.clear()
        with self._lock:
            obs, info = self._env.reset(seed=seed)
            state, images = self._split(obs)
            self._obs = Observation(state, time.time(), 0.0, False, False, bool(info.get("success", False)), images)
            self._origin, self._sim_t = time.monotonic(), 0.0
            return self._obs

    def get_observation(self) -> Observation:
        """The latest observation (float32 ``(Do,)``)."""
        self._check()
        self._delay()
        with self._lock:
            return self._obs

    def _pace(self) -> None:
        """Real time: the simulation may lead the wall clock by at most one step (``dt`` s)."""
        if not self.realtime:
            return
        now = time.monotonic()
        lead = (self._sim_t - (now - self._origin)) - self._dt_s
        if lead > 0:
            time.sleep(lead)
        elif lead < -5 * self._dt_s:  # fell behind (a stall): re-anchor instead of rushing to catch up
            self._origin = now - self._sim_t

    def _step(self, action: np.ndarray) -> None:
        obs, r, term, trunc, info = self._env.step(action)
        self._sim_t += self._dt_s
        succ = bool(info.get("success", info.get("is_success", False)))
        state, images = self._split(obs)
        self._obs = Observation(state, time.time(), float(r), bool(term), bool(trunc), succ, images)

    def _split(self, obs) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """Flat float32 state ``(Do,)`` and the camera frames (``None`` without cameras)."""
        if not self.cameras:
            return np.asarray(obs, np.float32), None
        return np.asarray(obs["state"], np.float32), dict(obs["pixels"])

    def send_action(self, action: np.ndarray) -> np.ndarray:
        """Apply ``action (Da,)`` for one step (``dt`` s); returns the action applied.

        A dropped command (fault injection) leaves the previous action applied and
        returns that one. Raises :class:`RobotConnectionError` when disconnected/crashed.
        """
        self._check()
        self._delay()
        was_held = self._held.is_set()
        self._held.clear()
        if was_held:  # a command stream (re)starts: re-anchor the real-time clock
            with self._lock:
                self._origin = time.monotonic() - self._sim_t
        a = np.clip(np.asarray(action, np.float32).reshape(-1), self._info.action_low, self._info.action_high).astype(np.float32)
        if self.faults.drop_prob > 0 and self._rng.random() < self.faults.drop_prob:
            a = self._applied
        self._pace()
        with self._lock:
            self._steps += 1
            self._step(a)
            self._applied = a
        return a.copy()

    def hold(self) -> np.ndarray:
        """Enter the safe hold: the physics keeps running in real time with the hold action."""
        self._check()
        hold = self._hold_a = np.asarray(self.spec().hold_action, np.float32)
        with self._lock:
            self._applied = hold
        if not self._held.is_set():
            self._held.set()
            if self._hold_thread is None or not self._hold_thread.is_alive():
                self._hold_thread = threading.Thread(target=self._hold_loop, name="twin-hold", daemon=True)
                self._hold_thread.start()
        return hold.copy()

    @property
    def held(self) -> bool:
        """Whether the twin is in safe hold."""
        return self._held.is_set()

    def _hold_loop(self) -> None:
        while self._held.is_set() and not self._closing.is_set():
            self._pace()
            with self._lock:
                if not self._held.is_set() or self._env is None:
                    break
                if not (self._obs.terminated or self._obs.truncated):
                    self._step(self._hold_a)
            if not self.realtime:
                time.sleep(self._dt_s)
