"""The control loop: a fixed-rate loop with asynchronous, chunk-aware policy inference.

Per tick ``k`` (period ``1 / rate_hz`` s, scheduled at ``t0 + k / rate_hz``):

1. poll the teleop device (takeover, e-stop, re-arm);
2. get the policy's action (from the state, or for a pixel policy the state and the camera
   frames of the same observation; a policy on the last ``To`` observations gets their
   :class:`ObservationHistory`) from the :class:`ChunkScheduler` without ever waiting past
   the inference deadline (``deadline_frac`` of the period): a slow policy makes the
   loop hold, never stall;
3. choose the command by mode: ``autonomous`` (the policy's), ``scaled``
   (``hold + scale · (a − hold)``), ``shadow`` (the policy runs and is logged, the robot
   holds); a human takeover overrides all three and flags the step;
4. one ``step`` round trip to the robot server (applied action + next observation);
5. record requested vs applied actions, flags, round-trip latency and tick jitter.

Symbols: ``Do``, ``Da``; ``Ta`` predicted chunk length; ``Te`` executed steps per chunk.
Sources: LeRobot's asynchronous inference (a policy server predicts the next chunk while
the robot executes the current one); Diffusion Policy (execute ``Te`` of ``Ta``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.client import DeadlineExceeded, RobotClient
from robotrl.real_robot.interface import Observation
from robotrl.real_robot.teleop import TeleopCommand, TeleopDevice

MODES = ("autonomous", "scaled", "shadow")


def latency_stats(values_s) -> dict:
    """``{n, mean_ms, p50_ms, p90_ms, p99_ms, max_ms}`` of durations in seconds."""
    v = np.asarray(list(values_s), np.float64) * 1000
    if v.size == 0:
        return {"n": 0}
    return {"n": int(v.size), "mean_ms": float(v.mean()), "p50_ms": float(np.percentile(v, 50)),
            "p90_ms": float(np.percentile(v, 90)), "p99_ms": float(np.percentile(v, 99)), "max_ms": float(v.max())}


class ObservationHistory:
    """The last ``To`` observations of an episode, oldest first, for a policy that conditions on them.

    :meth:`push` takes every control step's observation (not only those at which a chunk is requested: the
    history is of consecutive steps, as in training) and returns a snapshot list of ``To`` of them; before the
    episode has ``To`` steps its first observation is repeated, as the policies pad their histories in training
    and evaluation (:meth:`robotrl.agents.diffusion.policy.DiffusionPolicy.forward`). :meth:`reset` at episode starts.

    Args:
        horizon: ``To >= 1``.

    Raises:
        ValueError: ``horizon < 1``.
    """

    def __init__(self, horizon: int):
        if int(horizon) < 1:
            raise ValueError(f"obs_horizon must be >= 1, got {horizon}")
        self.horizon = int(horizon)
        self._items: list = []

    def reset(self) -> None:
        """The next push starts an episode."""
        self._items = []

    def push(self, obs) -> list:
        """Add this step's observation; returns the last ``To`` (padded with the episode's first), oldest first."""
        self._items = (self._items + [obs])[-self.horizon:]
        return [self._items[0]] * (self.horizon - len(self._items)) + self._items


class ChunkScheduler:
    """Runs ``infer(obs (Do,)) -> chunk (Ta, Da)`` on a worker thread and serves actions on schedule.

    A chunk requested at tick ``k0`` and ready at tick ``k`` contributes its actions
    ``k - k0 .. Te - 1`` (those whose time has not passed). The next chunk is requested
    when at most ``prefetch`` actions remain, so with ``prefetch >= ceil(inference
    time / period)`` the robot never waits.

    Args:
        infer: the policy, one observation → ``(Ta, Da)`` (``Ta = 1`` for MLP policies): the state
            ``(Do,)`` float32, or with ``images`` the whole :class:`Observation` (state and camera frames).
        act_steps: ``Te``, actions executed per chunk (default: all ``Ta``).
        prefetch: remaining actions at which the next inference starts.
        images: hand ``infer`` the :class:`Observation` (a pixel policy); default: whether ``infer``
            has non-empty ``cameras`` (a pixel :class:`~robotrl.real_robot.export.DeployPolicy`).

    Attributes:
        late: ticks where no action was ready in time (the loop held).
    """

    def __init__(self, infer: Callable[..., np.ndarray], act_steps: int | None = None, prefetch: int = 0,
                 images: bool | None = None):
        self.infer, self.act_steps, self.prefetch = infer, act_steps, int(prefetch)
        self.images = bool(getattr(infer, "cameras", ())) if images is None else bool(images)
        self.history = ObservationHistory(int(getattr(infer, "obs_horizon", 1) or 1))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="policy")
        self._queue: list[np.ndarray] = []
        self._pending: tuple[int, Future] | None = None
        self.late = 0

    def _input(self, obs: Observation | np.ndarray):
        """What ``infer`` takes: the :class:`Observation` itself (``images``) or its state float32 ``(Do,)``.

        Raises:
            TypeError: ``images`` is set and ``obs`` is a bare state (the frames are needed).
        """
        if self.images:
            if not isinstance(obs, Observation):
                raise TypeError("this policy reads camera frames: pass the robot's Observation, not its state alone")
            return obs
        return np.asarray(obs.state if isinstance(obs, Observation) else obs, np.float32)

    def warmup(self, obs: Observation | np.ndarray, n: int = 3) -> None:
        """Run the policy ``n`` times on the worker thread (first calls are slow: allocation, thread start)."""
        x = self._input(obs)
        x = [x] * self.history.horizon if self.history.horizon > 1 else x
        for _ in range(n):
            self._pool.submit(self.infer, x).result()

    def reset(self) -> None:
        """Forget queued actions (a pending inference is left to finish and discarded); a policy with per-episode
        state (``infer.reset``: a frame-stacking pixel policy) is reset on the worker thread, after that inference."""
        self._queue, self._pending = [], None
        self.history.reset()
        reset = getattr(self.infer, "reset", None)
        if reset is not None:
            self._pool.submit(reset)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _accept(self, k0: int, chunk: np.ndarray, k: int) -> None:
        chunk = np.asarray(chunk, np.float32)
        if chunk.ndim == 1:
            chunk = chunk[None]
        te = chunk.shape[0] if self.act_steps is None else min(self.act_steps, chunk.shape[0])
        self._queue = list(chunk[min(k - k0, te):te])

    def next_action(self, obs: Observation | np.ndarray, k: int, wait_until: float) -> np.ndarray | None:
        """Action for tick ``k`` given the latest ``obs`` (an :class:`Observation` or its state ``(Do,)``);
        ``None`` if none is ready by ``wait_until`` (monotonic s)."""
        x = self._input(obs)
        if self.history.horizon > 1:  # every step's observation enters the history, chunk requested or not
            x = self.history.push(x)
        if self._pending is None and len(self._queue) <= self.prefetch:
            self._pending = (k, self._pool.submit(self.infer, x))
        if self._pending is not None:
            k0, fut = self._pending
            if not self._queue:
                try:
                    fut.result(timeout=max(0.0, wait_until - time.monotonic()))
                except TimeoutError:
                    pass
            if fut.done():
                self._pending = None
                self._accept(k0, fut.result(), k)
        if self._queue:
            return self._queue.pop(0)
        self.late += 1
        return None


@dataclass
class StepRecord:
    """What happened at one tick (arrays in robot units); ``obs`` is the state ``(Do,)`` the policy saw and
    ``images`` the camera frames ``{name: uint8 (H, W, C)}`` taken with it (``None`` without cameras)."""

    obs: np.ndarray
    policy_action: np.ndarray | None
    requested: np.ndarray | None
    applied: np.ndarray
    flags: list[str]
    intervention: bool
    reward: float
    terminated: bool
    truncated: bool
    success: bool
    rtt_s: float
    jitter_s: float
    t: float
    images: dict[str, np.ndarray] | None = None


@dataclass
class EpisodeLog:
    """Steps of one episode plus its final observation and why it ended."""

    steps: list[StepRecord] = field(default_factory=list)
    final_obs: Observation | None = None
    seed: int | None = None
    stopped: str = ""  # "", "episode_end", "max_steps", "link_lost", "robot_crashed"
    reason: str = ""  # what is known about an early stop (the link's or the server's message)

    @property
    def success(self) -> bool:
        return any(s.success for s in self.steps) or bool(self.final_obs and self.final_obs.success)

    @property
    def ret(self) -> float:
        return float(sum(s.reward for s in self.steps))


class ControlLoop:
    """Fixed-rate deploy loop over a :class:`RobotClient` (see the module doc).

    Args:
        client: connected robot link.
        scheduler: the :class:`ChunkScheduler` wrapping the policy.
        rate_hz: control rate (Hz); default the robot's.
        mode: ``"autonomous"``, ``"scaled"`` or ``"shadow"``.
        scale: factor in ``(0, 1]`` for ``scaled`` mode.
        hold_action: the robot's hold command ``(Da,)``.
        teleop: optional :class:`TeleopDevice`.
        deadline_frac: fraction of the period the loop waits for inference.
        max_missed: consecutive missed step deadlines before the loop gives up.

    Raises:
        ConfigError: unknown mode or a scale outside ``(0, 1]``.
    """

    def __init__(self, client: RobotClient, scheduler: ChunkScheduler, *, rate_hz: float, hold_action,
                 mode: str = "autonomous", scale: float = 0.5, teleop: TeleopDevice | None = None,
                 deadline_frac: float = 0.5, max_missed: int = 10):
        if mode not in MODES:
            raise ConfigError(f"mode must be one of {MODES}, got {mode!r}")
        if not 0 < scale <= 1:
            raise ConfigError(f"scale must be in (0, 1], got {scale}")
        self.client, self.scheduler, self.rate_hz = client, scheduler, float(rate_hz)
        self.period = 1.0 / self.rate_hz
        self.mode, self.scale, self.teleop = mode, float(scale), teleop
        self.hold = np.asarray(hold_action, np.float32)
        self.deadline_frac, self.max_missed = float(deadline_frac), int(max_missed)
        self.missed = 0
        self.episodes = 0  # episodes started: a teleop device with ``new_episode`` (ScriptedTeleop) is told each one

    def _command(self, a_pol: np.ndarray | None, cmd: TeleopCommand) -> tuple[np.ndarray | None, bool]:
        if cmd.engaged and cmd.action is not None:
            return np.asarray(cmd.action, np.float32), True
        if a_pol is None or self.mode == "shadow":
            return None, False
        if self.mode == "scaled":
            return (self.hold + self.scale * (a_pol - self.hold)).astype(np.float32), False
        return a_pol, False

    def run_episode(self, seed: int | None = None, max_steps: int | None = None, on_step=None) -> EpisodeLog:
        """Reset the robot and run until the episode ends, ``max_steps``, or the link is lost.

        The returned log's ``stopped`` says why it ended; a lost link or a crashed robot
        ends the episode (it is not raised) so what was recorded can still be written.
        """
        from robotrl.real_robot.client import RobotCommandError
        from robotrl.real_robot.interface import RobotConnectionError

        log = EpisodeLog(seed=seed)
        if hasattr(self.teleop, "new_episode"):
            self.teleop.new_episode(self.episodes)  # as the online actor does: per-episode takeovers and marks
        self.episodes += 1
        self.scheduler.reset()
        obs = self.client.reset(seed)
        t0, k, consecutive = time.monotonic() + self.period, 0, 0
        while max_steps is None or k < max_steps:
            t_sched = t0 + k * self.period
            _sleep_until(t_sched)
            t_start = time.monotonic()
            if hasattr(self.teleop, "observe"):
                self.teleop.observe(obs.state)
            cmd = self.teleop.poll() if self.teleop is not None else TeleopCommand()
            try:
                if cmd.estop:
                    self.client.estop()
                if cmd.rearm:
                    self.client.rearm()
                a_pol = self.scheduler.next_action(obs, k, t_sched + self.deadline_frac * self.period)
                a_cmd, intervention = self._command(a_pol, cmd)
                t_send = time.perf_counter()
                ans = self.client.step(a_cmd, deadline=time.time() + self.period, timeout_s=self.period)
                rtt = time.perf_counter() - t_send
                consecutive = 0
            except DeadlineExceeded:
                self.missed += 1
                consecutive += 1
                if consecutive >= self.max_missed:
                    log.stopped = "link_lost"
                    log.reason = (f"{consecutive} step requests in a row got no answer within one period: "
                                  f"{self.client.link_diagnosis()}")
                    break
                k += 1
                continue
            except RobotCommandError as exc:
                if exc.kind == "expired":
                    k += 1
                    continue
                log.stopped = "robot_crashed" if exc.kind == "robot_crashed" else f"error: {exc}"
                log.reason = str(exc)
                break
            except RobotConnectionError as exc:
                log.stopped, log.reason = "link_lost", str(exc)
                break
            nxt = ans["obs"]
            label = cmd.label  # the operator's mark (teleop y / n): the step's success; success ends it, failure cuts it
            rec = StepRecord(obs.state, a_pol, a_cmd, np.asarray(ans["applied"], np.float32), list(ans["flags"]),
                             intervention, nxt.reward, bool(nxt.terminated) or label is True,
                             bool(nxt.truncated) or label is False, nxt.success if label is None else label, rtt,
                             t_start - t_sched, time.time(), obs.images)
            log.steps.append(rec)
            if on_step is not None:
                on_step(rec)
            obs = nxt
            k += 1
            if rec.terminated or rec.truncated:
                log.stopped = "episode_end"
                break
        else:
            log.stopped = "max_steps"
        log.final_obs = obs
        return log


def _sleep_until(t: float, spin_s: float = 0.0008) -> None:
    """Sleep until monotonic time ``t``; the last ``spin_s`` seconds are spun for precision."""
    while True:
        left = t - time.monotonic()
        if left <= 0:
            return
        if left > spin_s:
            time.sleep(left - spin_s)
