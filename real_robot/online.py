"""Online RL on a robot: the actor (robot side) and the learner (anywhere), HIL-SERL style.

**Actor** (:class:`OnlineActor`): a fixed-rate loop (period ``1 / rate_hz`` s) against a
robot (:class:`LocalRobot`: any :class:`~robotrl.real_robot.interface.Robot` behind a
local :class:`~robotrl.real_robot.safety.SafetySupervisor`; :class:`RemoteRobot`: a robot
server through :class:`~robotrl.real_robot.client.RobotClient`). Per tick: poll the teleop
device (a takeover replaces the policy's action and flags the step), act with the newest
weights the learner pushed, step the robot, and hand the transition (observation, applied
and requested action, policy action, reward, terminated, truncated, intervention flag,
safety flags, timing, weights version) to the :class:`~robotrl.real_robot.learner_link.ActorLink`
and to the episode recorder (:class:`EpisodeRecorder`, one atomically written ``.npz``
per finished episode, assembled into a Minari dataset). Without a learner the actor keeps
acting with its last weights (``on_learner_lost="continue"``) or holds the robot
(``"hold"``, the steps are still recorded and flagged ``held``), and keeps recording.

**Learner** (:class:`OnlineLearner`): any off-policy agent (``QLAgent``: RLPD, WSRL, SAC
configs) with offline demonstrations in one buffer and the robot's experience in another,
sampled at ``offline_ratio`` (RLPD 50/50) by :class:`~robotrl.data.mixing.MixedSampler`;
intervention steps also enter the demonstration buffer (HIL-SERL). ``updates_per_transition``
agent updates (each of ``utd`` critic minibatches) per transition received; weights pushed
every ``push_period_s``; TensorBoard in ``run_dir/tb``; one atomic checkpoint file
``run_dir/checkpoints/latest.pt`` (agent, both buffers, per-actor delivery state) every
``checkpoint_every_s`` and when an actor asks (``sync``); a restarted learner resumes
from it and the actors resend whatever it does not hold.

Units: time in s, rates in Hz, actions/observations in the robot's units (``Do``, ``Da``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robotrl.checkpoint import load_arrays, load_checkpoint, save_arrays, save_checkpoint
from robotrl.data.replay import ReplayBuffer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.real_robot.client import DeadlineExceeded, RobotCommandError
from robotrl.real_robot.interface import Observation, ProtocolError, Robot, RobotConnectionError, RobotSpec
from robotrl.real_robot.learner_link import (
    ActorLink,
    Dedup,
    LearnerEndpoint,
    Weights,
    check_batch,
    state_to_arrays,
)
from robotrl.real_robot.safety import SafetySupervisor
from robotrl.real_robot.teleop import TeleopCommand, TeleopDevice

LOST_MODES = ("continue", "hold")


# ============================================================================ robot access
class LocalRobot:
    """A :class:`Robot` in this process behind a :class:`SafetySupervisor` (the robot PC runs the actor).

    Args:
        robot: a connected (or connectable) robot; connected here if needed.
        supervisor: filters every command (bounds, rate limits, workspace, e-stop).
    """

    def __init__(self, robot: Robot, supervisor: SafetySupervisor):
        self.robot, self.supervisor = robot, supervisor
        if not robot.is_connected:
            robot.connect()
        self._obs: Observation | None = None

    def spec(self) -> RobotSpec:
        return self.robot.spec()

    def reset(self, seed: int | None) -> Observation:
        """Start an episode; the supervisor's motion history restarts from hold."""
        self.supervisor.hold("reset")
        self._obs = self.robot.reset(seed)
        return self._obs

    def step(self, action: np.ndarray | None) -> tuple[np.ndarray, list[str], Observation]:
        """Filter and send ``action (Da,)`` (``None``: hold); returns applied ``(Da,)``, flags, next observation."""
        state = self._obs.state if self._obs is not None else None
        d = self.supervisor.hold("hold") if action is None else self.supervisor.filter(action, state)
        applied = self.robot.send_action(d.applied)
        self._obs = self.robot.get_observation()
        return np.asarray(applied, np.float32), list(d.flags), self._obs

    def estop(self) -> None:
        self.supervisor.estop()

    def rearm(self) -> None:
        self.supervisor.rearm()

    def close(self) -> None:
        try:
            self.robot.hold()
        finally:
            self.robot.disconnect()


class RemoteRobot:
    """A robot server through a :class:`~robotrl.real_robot.client.RobotClient` (safety runs on the server).

    Args:
        client: the robot link (``hello`` done here).
        step_timeout_s: how long one step waits for its answer (s).
    """

    def __init__(self, client, step_timeout_s: float = 0.5):
        self.client, self.step_timeout_s = client, float(step_timeout_s)
        self._spec = client.hello()

    def spec(self) -> RobotSpec:
        return self._spec

    def reset(self, seed: int | None, acquire_wait_s: float = 10.0) -> Observation:
        """Start an episode. A lease still held by a dead actor (killed, its lease not yet
        lapsed) is waited for up to ``acquire_wait_s`` (s), never taken over.

        Raises:
            RobotCommandError: the lease stays held by another client, or the robot refuses the reset.
        """
        from robotrl.real_robot.client import RobotCommandError

        end = time.monotonic() + acquire_wait_s
        while True:
            try:
                return self.client.reset(seed)
            except RobotCommandError as exc:
                if exc.kind != "lease_held" or time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def step(self, action: np.ndarray | None) -> tuple[np.ndarray, list[str], Observation]:
        ans = self.client.step(action, timeout_s=self.step_timeout_s)
        return np.asarray(ans["applied"], np.float32), list(ans["flags"]), ans["obs"]

    def estop(self) -> None:
        self.client.estop("teleop")

    def rearm(self) -> None:
        self.client.rearm()

    def close(self) -> None:
        try:
            self.client.release()
        finally:
            self.client.close()


# ============================================================================ policy on the actor
class PolicyHolder:
    """The actor's current policy, rebuilt from pushed :class:`Weights`.

    Only classes under ``robotrl.agents.`` are built (:func:`robotrl.policy.policy_class`).

    Args:
        explore: sample from a stochastic policy's distribution (tanh-Gaussian ``actor.sample``)
            instead of its deterministic action.
        seed: seed of the exploration noise.
    """

    def __init__(self, explore: bool = True, seed: int = 0):
        self.explore = bool(explore)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.policy: torch.nn.Module | None = None
        self.version = -1
        self._key: tuple | None = None

    def load(self, w: Weights) -> None:
        """Use weights ``w`` from now on.

        Raises:
            CheckpointError: a class outside ``robotrl.agents.`` or weights that do not fit it.
        """
        from robotrl.policy import policy_class

        key = (w.target, json.dumps(w.kwargs, sort_keys=True, default=str))
        if self.policy is None or key != self._key:
            self.policy = policy_class(w.target)(**w.kwargs)
            self._key = key
        try:
            self.policy.load_state_dict(w.state)
        except RuntimeError as exc:
            raise CheckpointError(f"pushed weights do not fit {w.target}: {exc}") from exc
        self.policy.eval()
        self.version = w.version

    @torch.no_grad()
    def act(self, obs: np.ndarray) -> np.ndarray:
        """Action ``(Da,)`` float32 for ``obs (Do,)``."""
        p = self.policy
        x = torch.as_tensor(np.asarray(obs, np.float32))[None]
        if self.explore and hasattr(p, "actor") and hasattr(p.actor, "sample") and hasattr(p, "obs_normalizer"):
            a, _ = p.actor.sample(p.obs_normalizer(x), self.gen)
            y = p.action_scaler.unnormalize(a)
        else:
            y = p(x)
        return y[0].numpy().astype(np.float32)


# ============================================================================ recording
class EpisodeRecorder:
    """Finished episodes as atomically written ``.npz`` files, assembled into a Minari dataset.

    File ``<dir>/episodes/ep_<episode>.npz``: ``observations (T+1, Do)``, ``actions (T, Da)``
    (applied), ``rewards``, ``terminations``, ``truncations`` ``(T,)`` and ``info_<name>``
    arrays with ``T+1`` entries (reset entry first, as Minari's infos): ``requested_action``,
    ``policy_action`` (NaN where none), ``intervention``, ``safety_modified``, ``held``,
    ``success``, ``learner_connected``, ``weights_version``, ``n`` (link index), ``step``,
    ``time``, ``rtt_s``, ``jitter_s``.
    """

    def __init__(self, directory: str | os.PathLike, spec: RobotSpec):
        self.dir = Path(directory) / "episodes"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.journal_path = Path(directory) / "current.journal"
        self._journal = None

    # The episode in progress goes to an append-only journal (length-prefixed msgpack records,
    # written through to the OS at every step), so a killed actor loses no step it took:
    # :meth:`recover` turns a journal left behind into a truncated episode.
    def append(self, row: dict) -> None:
        """Journal one step of the episode in progress (before it is handed to the link)."""
        from robotrl.real_robot.protocol import encode

        if self._journal is None:
            self._journal = open(self.journal_path, "ab")
        payload = encode({"v": 2, "type": "step", "dir": "req", "src": "journal", "dst": "", "epoch": "", "seq": 0,
                          "ts": time.time(), "body": row})
        self._journal.write(len(payload).to_bytes(4, "little") + payload)
        self._journal.flush()

    def _read_journal(self) -> list[dict]:
        from robotrl.real_robot.learner_link import link_limits
        from robotrl.real_robot.protocol import decode

        data, rows, i = self.journal_path.read_bytes(), [], 0
        while i + 4 <= len(data):
            n = int.from_bytes(data[i:i + 4], "little")
            if i + 4 + n > len(data):
                break  # the record being written when the process died
            try:
                rows.append(decode(data[i + 4:i + 4 + n], link_limits())["body"])
            except ProtocolError:
                break
            i += 4 + n
        return rows

    def recover(self) -> list[dict]:
        """Close an episode a killed actor left in the journal: its steps become a recorded
        episode ending truncated (the last step's next observation as the final one).
        Returns its rows (empty: nothing to recover)."""
        if not self.journal_path.exists():
            return []
        rows = self._read_journal()
        if rows:
            rows[-1]["truncated"] = True
            self.write(int(rows[0]["episode"]), rows, np.asarray(rows[-1]["next_obs"], np.float32), None)
        self.journal_path.unlink(missing_ok=True)
        return rows

    def episodes_done(self) -> list[int]:
        """Episode numbers recorded so far (sorted)."""
        return sorted(int(p.stem.split("_")[1]) for p in self.dir.glob("ep_*.npz"))

    def write(self, episode: int, rows: list[dict], final_obs: np.ndarray, seed: int | None) -> Path:
        """Write one episode from its transitions (rows with :data:`TRANSITION_FIELDS` keys)."""
        if not rows:
            raise ValueError("episode has no steps; nothing to record")
        col = lambda k, dt: np.asarray([r[k] for r in rows], dt)  # noqa: E731
        first = lambda x: np.concatenate([np.zeros(1, x.dtype), x])  # noqa: E731  the reset entry (same dtype)
        da = self.spec.action.dim
        nan = np.full((1, da), np.nan, np.float32)
        out = {"observations": np.concatenate([np.stack([r["obs"] for r in rows]), final_obs[None]]).astype(np.float32),
               "actions": np.stack([r["action"] for r in rows]).astype(np.float32),
               "rewards": col("reward", np.float64), "terminations": col("terminated", bool),
               "truncations": col("truncated", bool),
               "info_requested_action": np.concatenate([nan, np.stack([r["requested"] for r in rows])]),
               "info_policy_action": np.concatenate([nan, np.stack([r["policy_action"] for r in rows])]),
               "seed": np.asarray(-1 if seed is None else seed, np.int64)}
        for k, dt in (("intervention", bool), ("safety_modified", bool), ("held", bool), ("success", bool),
                      ("learner_connected", bool), ("weights_version", np.int64), ("n", np.int64), ("step", np.int64),
                      ("time", np.float64), ("rtt_s", np.float64), ("jitter_s", np.float64)):
            out[f"info_{k}"] = first(col(k, dt))
        path = save_arrays(self.dir / f"ep_{episode:06d}.npz", out)
        if self._journal is not None:  # the episode is durable as a file: its journal goes
            self._journal.close()
            self._journal = None
        self.journal_path.unlink(missing_ok=True)
        return path

    def load(self, episode: int) -> dict[str, np.ndarray]:
        return load_arrays(self.dir / f"ep_{episode:06d}.npz")

    def to_minari(self, dataset_id: str, root: str | os.PathLike | None = None, provenance: dict | None = None) -> Path:
        """(Re)write every recorded episode as Minari dataset ``dataset_id`` (replacing an older version of it).

        Raises:
            DatasetFormatError: no episode recorded yet.
        """
        from robotrl.data.writer import Episode
        from robotrl.real_robot.recording import record_episodes

        eps = []
        for i in self.episodes_done():
            z = self.load(i)
            infos = {k[5:]: z[k] for k in z if k.startswith("info_")}
            seed = int(z["seed"])
            eps.append(Episode(z["observations"], z["actions"], z["rewards"], z["terminations"], z["truncations"],
                               infos=infos, seed=None if seed < 0 else seed))
        return record_episodes(dataset_id, eps, self.spec, root=root, provenance=provenance, overwrite=True,
                               description=f"online RL episodes on {self.spec.name} (robotrl actor)")


# ============================================================================ actor
@dataclass
class ActorSummary:
    """What an actor run did (JSON-able via ``vars``)."""

    episodes: int
    steps: int
    returns: list
    successes: list
    interventions_per_episode: list
    versions_seen: list
    steps_without_learner: int
    held_steps: int
    late_ticks: int
    link: dict
    drained: bool
    weights_latency_ms: dict
    missed_steps: int = 0
    recovered_steps: int = 0
    resubmitted_steps: int = 0


class OnlineActor:
    """The robot-side loop of online RL (see the module doc).

    Args:
        robot: :class:`LocalRobot` or :class:`RemoteRobot`.
        link: the :class:`ActorLink` to the learner (``None``: act with ``initial`` weights only).
        recorder: :class:`EpisodeRecorder`.
        rate_hz: control rate (Hz); ``0``: as fast as the robot answers (a twin without pacing).
        teleop: optional takeover device (:mod:`robotrl.real_robot.teleop`).
        on_learner_lost: ``"continue"`` (act with the last weights) or ``"hold"`` (command
            the hold action until the learner is back).
        explore: sample from the policy's distribution (online RL) instead of its mean.
        max_steps: steps per episode before it is truncated (``None``: the robot's own end).
        wait_weights_s: how long to wait for the first weights before the first episode (s).
        seed: first reset seed (episode ``i`` resets with ``seed + i``) and exploration seed.
        initial: weights to act with before the learner's first push (``None``: wait for it).
        max_missed: consecutive unanswered steps after which the robot counts as lost (the
            episode is recorded, truncated, and :class:`RobotConnectionError` raised).
        reward_fn: ``next_state (Do,) -> (reward, success, p)`` replacing the robot's reward and
            success (:class:`~robotrl.real_robot.reward_classifier.ClassifierReward`); a success
            ends the episode when its ``end_on_success`` says so.

    Raises:
        ConfigError: unknown ``on_learner_lost`` or a negative rate.
    """

    def __init__(self, robot, link: ActorLink | None, recorder: EpisodeRecorder, *, rate_hz: float,
                 teleop: TeleopDevice | None = None, on_learner_lost: str = "continue", explore: bool = True,
                 max_steps: int | None = None, wait_weights_s: float = 30.0, seed: int = 0,
                 initial: Weights | None = None, max_missed: int = 10, reward_fn=None):
        if on_learner_lost not in LOST_MODES:
            raise ConfigError(f"on_learner_lost must be one of {LOST_MODES}, got {on_learner_lost!r}")
        if rate_hz < 0:
            raise ConfigError(f"rate_hz must be >= 0 (0: unpaced), got {rate_hz}")
        self.robot, self.link, self.recorder = robot, link, recorder
        self.spec = robot.spec()
        self.period = 1.0 / rate_hz if rate_hz > 0 else 0.0
        self.teleop, self.on_learner_lost = teleop, on_learner_lost
        self.max_steps, self.wait_weights_s, self.seed = max_steps, float(wait_weights_s), int(seed)
        self.holder = PolicyHolder(explore, seed)
        if initial is not None:
            self.holder.load(initial)
        c = link.spill.counters if link is not None else {"next_n": 0, "next_episode": 0}
        recovered = recorder.recover()  # an episode a killed actor left unfinished: recorded, truncated
        unsent = [r for r in recovered if int(r["n"]) >= int(c["next_n"])]  # journaled, never spilled
        if link is not None:
            for r in unsent:
                link.submit(r)
        done = recorder.episodes_done()
        self.recovered_steps, self.resubmitted_steps = len(recovered), len(unsent)
        self.next_n = max(int(c["next_n"]), int(recovered[-1]["n"]) + 1 if recovered else 0)
        self.next_episode = max(int(c["next_episode"]), (done[-1] + 1) if done else 0)
        self.late = self.missed = 0
        self.max_missed = int(max_missed)
        self.reward_fn = reward_fn

    def _refresh_weights(self) -> None:
        if self.link is None:
            return
        w = self.link.latest_weights()
        if w is not None and w.version > self.holder.version:
            self.holder.load(w)
            self.link.set_version(w.version)

    def wait_for_weights(self) -> bool:
        """Wait up to ``wait_weights_s`` for the first weights; returns whether the actor has a policy."""
        end = time.monotonic() + self.wait_weights_s
        while self.holder.policy is None and time.monotonic() < end:
            self._refresh_weights()
            if self.link is not None and self.link.error:
                raise ConfigError(self.link.error)
            time.sleep(0.02)
        return self.holder.policy is not None

    def run_episode(self) -> dict:
        """One episode; returns ``{episode, steps, return, success, interventions, ...}``."""
        ep = self.next_episode
        self.next_episode += 1
        if hasattr(self.teleop, "new_episode"):
            self.teleop.new_episode(ep)
        obs = self.robot.reset(self.seed + ep)
        rows: list[dict] = []
        nan = np.full(self.spec.action.dim, np.nan, np.float32)
        t0 = time.monotonic()
        k = missed = 0
        stats = {"lost": 0, "held": 0}
        while self.max_steps is None or k < self.max_steps:
            t_sched = t0 + k * self.period
            if self.period:
                left = t_sched - time.monotonic()
                if left > 0:
                    time.sleep(left)
                elif left < -self.period:  # fell behind (a stall): re-anchor instead of rushing commands out
                    self.late += 1
                    t0 -= left
                    t_sched = t0 + k * self.period
            t_start = time.monotonic()
            if hasattr(self.teleop, "observe"):
                self.teleop.observe(obs.state)
            cmd = self.teleop.poll() if self.teleop is not None else TeleopCommand()
            if cmd.estop:
                self.robot.estop()
            if cmd.rearm:
                self.robot.rearm()
            self._refresh_weights()
            connected = self.link is None or self.link.connected
            a_pol = None
            if self.holder.policy is not None and (connected or self.on_learner_lost == "continue"):
                a_pol = self.holder.act(obs.state)
            a_cmd = cmd.action if cmd.engaged and cmd.action is not None else a_pol
            t_send = time.perf_counter()
            try:
                applied, flags, nxt = self.robot.step(a_cmd)
                missed = 0
            except DeadlineExceeded:  # no answer within the step timeout: the robot's watchdog holds
                missed += 1
                self.missed += 1
                if missed < self.max_missed:
                    k += 1
                    continue
                self._close(ep, rows, obs)
                raise
            except RobotCommandError as exc:
                if exc.kind == "expired":  # the command came too late and was not applied: no step happened
                    self.missed += 1
                    k += 1
                    continue
                self._close(ep, rows, obs)
                raise
            except RobotConnectionError:
                self._close(ep, rows, obs)
                raise
            rtt = time.perf_counter() - t_send
            if self.reward_fn is not None:  # the success classifier's reward instead of the robot's
                r, ok, _ = self.reward_fn(nxt.state)
                end = bool(nxt.terminated) or (ok and getattr(self.reward_fn, "end_on_success", False))
                nxt = Observation(nxt.state, nxt.timestamp, r, end, bool(nxt.truncated), ok)
            trunc = bool(nxt.truncated) or (self.max_steps is not None and k + 1 >= self.max_steps and not nxt.terminated)
            row = {"n": self.next_n, "episode": ep, "step": k, "obs": obs.state, "next_obs": nxt.state,
                   "action": applied, "requested": nan if a_cmd is None else np.asarray(a_cmd, np.float32),
                   "policy_action": nan if a_pol is None else a_pol, "reward": float(nxt.reward),
                   "terminated": bool(nxt.terminated), "truncated": trunc, "success": bool(nxt.success),
                   "intervention": bool(cmd.engaged and cmd.action is not None),
                   "safety_modified": bool(set(flags) - {"hold"}), "held": a_cmd is None,
                   "learner_connected": bool(connected), "weights_version": self.holder.version,
                   "time": time.time(), "rtt_s": rtt, "jitter_s": t_start - t_sched if self.period else 0.0}
            self.next_n += 1
            stats["lost"] += not connected
            stats["held"] += a_cmd is None
            rows.append(row)
            self.recorder.append(row)
            if self.link is not None:
                self.link.submit(row)
            obs = nxt
            k += 1
            if row["terminated"] or row["truncated"]:
                break
        self._close(ep, rows, obs)
        return {"episode": ep, "steps": len(rows), "return": float(sum(r["reward"] for r in rows)),
                "success": bool(any(r["success"] for r in rows)),
                "interventions": int(sum(r["intervention"] for r in rows)),
                "versions": sorted({int(r["weights_version"]) for r in rows}), **stats}

    def _close(self, ep: int, rows: list[dict], obs: Observation) -> None:
        """Record an episode that ended (or was cut by a robot failure: then it ends truncated)."""
        if not rows:
            self.recorder.journal_path.unlink(missing_ok=True)
            return
        if not (rows[-1]["terminated"] or rows[-1]["truncated"]):
            rows[-1]["truncated"] = True
        self.recorder.write(ep, rows, obs.state, self.seed + ep)

    def run(self, episodes: int, drain_timeout_s: float = 60.0, on_episode: Callable[[dict], None] | None = None) -> ActorSummary:
        """Run ``episodes`` episodes, then wait up to ``drain_timeout_s`` until the learner holds
        every transition durably.

        Raises:
            ConfigError: no weights arrived within ``wait_weights_s`` and no initial policy was given.
        """
        from robotrl.real_robot.control import latency_stats

        if not self.wait_for_weights():
            raise ConfigError(f"no policy weights arrived from the learner within {self.wait_weights_s:g} s and no "
                              "initial checkpoint was given; start the learner first (or raise wait_weights_s)")
        infos = []
        for _ in range(int(episodes)):
            info = self.run_episode()
            infos.append(info)
            if on_episode is not None:
                on_episode(info)
        drained = self.link.flush_and_sync(drain_timeout_s) if self.link is not None else True
        lat = latency_stats(self.link.weights_latency_s) if self.link is not None else {"n": 0}
        return ActorSummary(
            episodes=len(infos), steps=sum(i["steps"] for i in infos), returns=[i["return"] for i in infos],
            successes=[i["success"] for i in infos], interventions_per_episode=[i["interventions"] for i in infos],
            versions_seen=sorted({v for i in infos for v in i["versions"]}),
            steps_without_learner=sum(i["lost"] for i in infos), held_steps=sum(i["held"] for i in infos),
            late_ticks=self.late, link=self.link.status() if self.link is not None else {}, drained=drained,
            weights_latency_ms=lat, missed_steps=self.missed, recovered_steps=self.recovered_steps, resubmitted_steps=self.resubmitted_steps)


# ============================================================================ learner
def _to_tensors(d: dict) -> dict:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in d.items()}


def _to_numpy(d: dict) -> dict:
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


class OnlineLearner:
    """The learner of online RL on a robot (see the module doc).

    Args:
        agent: an off-policy agent (``update``, ``policy``, ``state_dict``), e.g. ``QLAgent``.
        endpoint: the bound :class:`LearnerEndpoint`.
        spec: the robot's :class:`RobotSpec` (actors with another ``Do``/``Da`` are refused).
        demos: buffer of offline demonstrations (``None``: none; then ``offline_ratio`` must be 0);
            it needs room for the interventions (``capacity`` above its data).
        online_capacity: capacity of the robot-experience buffer (transitions).
        run_dir: checkpoints (``checkpoints/latest.pt``), TensorBoard (``tb/``), ``status.json``.
        batch_size: ``B``; each update samples ``utd · B`` transitions (the agent splits them).
        utd: critic minibatches per update (the agent's ``critic_utd``).
        offline_ratio: share of each batch from ``demos`` (RLPD 0.5).
        warmup: robot transitions held before the first update.
        updates_per_transition: agent updates per transition received (``0``: update continuously).
        push_period_s: weights push period (s).
        checkpoint_every_s: checkpoint period (s).
        interventions_to_demos: add takeover steps to ``demos`` too (HIL-SERL).
        reward_scale, reward_bias: ``r' = scale · r + bias`` for the robot's rewards (the
            demonstrations must already be transformed the same way).
        max_actors: actors served at once (one open-episode slot each in the buffers).
        gamma: discount of the online buffer's MC returns.
        seed: sampling seed.
        pushed_weights_dir: if set, every pushed version is also saved as ``v<version>.npz``
            (for checking what an actor acted with).

    Raises:
        ConfigError: ``offline_ratio > 0`` without demonstrations, or bad periods.
    """

    def __init__(self, agent, endpoint: LearnerEndpoint, spec: RobotSpec, *, demos: ReplayBuffer | None,
                 online_capacity: int, run_dir: str | os.PathLike, batch_size: int = 256, utd: int = 1,
                 offline_ratio: float = 0.5, warmup: int = 256, updates_per_transition: float = 1.0,
                 push_period_s: float = 2.0, checkpoint_every_s: float = 30.0, interventions_to_demos: bool = True,
                 reward_scale: float = 1.0, reward_bias: float = 0.0, max_actors: int = 4, gamma: float = 0.99,
                 seed: int = 0, pushed_weights_dir: str | os.PathLike | None = None):
        from robotrl.data.mixing import MixedSampler

        if offline_ratio > 0 and demos is None:
            raise ConfigError(f"offline_ratio={offline_ratio} needs a demonstration buffer (it may start empty and "
                              "fill with interventions); set offline_ratio=0 to learn from the robot's experience only")
        if push_period_s <= 0 or checkpoint_every_s <= 0:
            raise ConfigError(f"push_period_s and checkpoint_every_s must be > 0 s, got {push_period_s}, {checkpoint_every_s}")
        self.agent, self.ep, self.spec = agent, endpoint, spec
        self.do, self.da = spec.observation.dim, spec.action.dim
        self.run_dir = Path(run_dir)
        self.ckpt_path = self.run_dir / "checkpoints" / "latest.pt"
        self.demos = demos
        self.online = ReplayBuffer(online_capacity, self.do, self.da, gamma=gamma, num_envs=max_actors, seed=seed,
                                   device=getattr(agent, "device", "cpu"))
        self.online_keys = np.full((online_capacity, 2), -1, np.int64)  # (episode, step) per online slot, for audits
        self.sampler = MixedSampler(demos if demos is not None else self.online, self.online, offline_ratio)
        self.batch_size, self.utd = int(batch_size), int(utd)
        self.warmup, self.updates_per_transition = int(warmup), float(updates_per_transition)
        self.push_period_s, self.checkpoint_every_s = float(push_period_s), float(checkpoint_every_s)
        self.interventions_to_demos = bool(interventions_to_demos)
        self.reward_scale, self.reward_bias = float(reward_scale), float(reward_bias)
        self.max_actors = int(max_actors)
        self.slots: dict[str, int] = {}
        self.dedup = Dedup()
        self.durable: dict[str, int] = {}
        self.version = 0
        self.updates = 0
        self.ingested = 0
        self.interventions = 0
        self._in_takeover: dict[str, bool] = {}
        self._pushed: dict[str, int] = {}
        self._last_push = 0.0
        self._last_ckpt = time.monotonic()
        self._sync_wanted = False
        self._policy_changed = True
        self.pushed_weights_dir = Path(pushed_weights_dir) if pushed_weights_dir else None
        self._writer = None
        self.metrics: dict[str, float] = {}
        self.episode_log: list[dict] = []
        self._ep_acc: dict[str, dict] = {}
        self._open_ep: dict[str, int | None] = {}  # per actor: its episode still open in the buffers

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything to resume: agent, both buffers, per-actor delivery state, counters."""
        from robotrl.policy import policy_state

        out = {"agent": self.agent.state_dict(), "policy": policy_state(self.agent.policy),
               "online": _to_tensors(self.online.state_dict()),
               "online_keys": torch.from_numpy(self.online_keys[: self.online.size].copy()),
               "online_rng": self.online.rng.bit_generator.state,
               "dedup": self.dedup.state(), "slots": dict(self.slots), "version": self.version,
               "updates": self.updates, "step": self.updates, "ingested": self.ingested,
               "interventions": self.interventions, "episode_log": list(self.episode_log),
               "open_episodes": {k: (-1 if v is None else v) for k, v in self._open_ep.items()}}
        if self.demos is not None:
            out["demos"] = _to_tensors(self.demos.state_dict())
            out["demos_rng"] = self.demos.rng.bit_generator.state
        return out

    def checkpoint(self) -> Path:
        """Write the checkpoint atomically; from then on everything held is durable (acks say so)."""
        path = save_checkpoint(self.ckpt_path, self.state_dict())
        self.durable = {a: self.dedup.have(a) for a in self.dedup.last}
        self._last_ckpt = time.monotonic()
        for actor in list(self.ep.peers):
            self.ep.reply(actor, "ack", {"received": self.dedup.have(actor), "durable": self.durable.get(actor, -1)})
        return path

    def resume(self) -> bool:
        """Load ``run_dir/checkpoints/latest.pt`` if it exists; returns whether it did.

        Raises:
            CheckpointError: the checkpoint is unreadable or does not fit this learner.
        """
        if not self.ckpt_path.exists():
            return False
        s = load_checkpoint(self.ckpt_path)
        try:
            self.agent.load_state_dict(s["agent"])
            self.online.load_state_dict(_to_numpy(s["online"]))
            self.online.rng.bit_generator.state = s["online_rng"]
            keys = s["online_keys"].numpy()
            self.online_keys[: keys.shape[0]] = keys
            if self.demos is not None and "demos" in s:
                self.demos.load_state_dict(_to_numpy(s["demos"]))
                self.demos.rng.bit_generator.state = s["demos_rng"]
        except (KeyError, RuntimeError, ValueError) as exc:
            raise CheckpointError(f"learner checkpoint {self.ckpt_path} does not fit this learner ({exc}); "
                                  "use the same agent, buffer sizes and demonstrations, or a new run_dir") from exc
        self.dedup = Dedup(s["dedup"])
        self.durable = {a: self.dedup.have(a) for a in self.dedup.last}
        self.slots = {str(k): int(v) for k, v in s["slots"].items()}
        self.version, self.updates = int(s["version"]), int(s["updates"])
        vfile = self.run_dir / "version.json"
        if vfile.exists():
            try:
                self.version = max(self.version, int(json.loads(vfile.read_text())["version"]))
            except (ValueError, KeyError, TypeError):
                raise CheckpointError(f"{vfile} is damaged; delete it only if no actor ran with this learner's "
                                      "weights (versions could repeat)") from None
        self.ingested, self.interventions = int(s["ingested"]), int(s["interventions"])
        self.episode_log = list(s.get("episode_log", []))
        self._open_ep = {str(k): (None if int(v) < 0 else int(v)) for k, v in s.get("open_episodes", {}).items()}
        # the actors' episodes in progress continue where the checkpoint left them (resent rows link on)
        return True

    # ---- messages ----------------------------------------------------------------------------
    def _slot(self, actor: str) -> int | None:
        if actor not in self.slots:
            if len(self.slots) >= self.max_actors:
                return None
            self.slots[actor] = len(self.slots)
        return self.slots[actor]

    def handle(self, msg: dict) -> None:
        """Answer one authenticated request (module doc of :mod:`~robotrl.real_robot.learner_link`)."""
        t, b = msg["type"], msg["body"]
        actor = b["actor_id"]
        if t == "hello":
            try:
                spec = RobotSpec.from_dict(b["spec"])
            except (KeyError, TypeError, ValueError):
                self.ep.reply(actor, "error", {"code": "bad_request", "text": "hello carries no readable robot spec"})
                return
            if (spec.observation.dim, spec.action.dim) != (self.do, self.da):
                self.ep.reply(actor, "error", {"code": "spec_mismatch", "text":
                              f"actor robot {spec.name} has Do={spec.observation.dim}, Da={spec.action.dim}; this learner "
                              f"trains for {self.spec.name} with Do={self.do}, Da={self.da}: start the learner with the "
                              "actor's robot config"})
                return
            if self._slot(actor) is None:
                self.ep.reply(actor, "error", {"code": "too_many_actors", "text":
                              f"this learner serves max_actors={self.max_actors}; raise it"})
                return
            self.ep.reply(actor, "welcome", {"have": self.durable.get(actor, -1), "version": self.version})
            self._pushed.pop(actor, None)
            self.push(only=actor)
        elif t == "batch":
            if actor not in self.slots:  # this learner (restarted?) has not been greeted by the actor yet
                self.ep.reply(actor, "error", {"code": "hello_first", "text": "say hello first (learner restarted)"})
                return
            try:
                check_batch(b, self.do, self.da)
            except ProtocolError as exc:
                self.ep.reply(actor, "error", {"code": "bad_batch", "text": str(exc)})
                return
            self.ingest(actor, b)
            self.ep.reply(actor, "ack", {"received": self.dedup.have(actor), "durable": self.durable.get(actor, -1)})
        elif t == "sync":  # checkpoint now if this actor has data not yet durable (else just confirm)
            if self.dedup.have(actor) > self.durable.get(actor, -1):
                self._sync_wanted = True
            elif actor in self.slots:
                self.ep.reply(actor, "ack", {"received": self.dedup.have(actor), "durable": self.durable.get(actor, -1)})
        elif t == "ping":
            if actor not in self.slots:
                self.ep.reply(actor, "error", {"code": "hello_first", "text": "say hello first (learner restarted)"})
            else:
                self.ep.reply(actor, "ack", {"received": self.dedup.have(actor), "durable": self.durable.get(actor, -1)})

    def ingest(self, actor: str, b: dict) -> int:
        """Add a batch's new transitions to the buffers; returns how many were new."""
        keep = self.dedup.new_rows(actor, b["episode"], b["step"])
        if not keep.any():
            return 0
        slot = self.slots[actor]
        idx = np.flatnonzero(keep)
        r = (self.reward_scale * b["reward"] + self.reward_bias).astype(np.float32)
        for i in idx:  # rows in order: the buffer links each actor's steps into episodes
            last = self.dedup.last.get(actor)
            if last is not None and int(b["episode"][i]) != last[0] and self._open_ep.get(actor) is not None:
                # the actor's previous episode never ended here (the actor was killed mid-episode):
                # do not link the new episode to it
                self.online.end_open_episodes()
                if self.demos is not None:
                    self.demos.end_open_episodes()
                acc = self._ep_acc.pop(actor, {})
                self.episode_log.append({"actor": actor, "episode": last[0], **acc, "ingested": self.ingested, "cut": True})
            pos = self.online.ptr
            self.online.add(b["obs"][i], b["action"][i], r[i], b["next_obs"][i], b["terminated"][i], b["truncated"][i],
                            env_ids=[slot])
            self.online_keys[pos] = (b["episode"][i], b["step"][i])
            interv = bool(b["intervention"][i])
            if interv and self.interventions_to_demos and self.demos is not None:
                self.demos.add(b["obs"][i], b["action"][i], r[i], b["next_obs"][i], b["terminated"][i],
                               b["truncated"][i], env_ids=[slot])
                self.interventions += 1
            elif interv:
                self.interventions += 1
            if self._in_takeover.get(actor) and (not interv) and self.demos is not None:
                self.demos.end_open_episodes()  # a takeover segment ended: do not link it to the next one
            self._in_takeover[actor] = interv and not (b["terminated"][i] or b["truncated"][i])
            acc = self._ep_acc.setdefault(actor, {"return": 0.0, "success": False, "interventions": 0, "steps": 0})
            acc["return"] += float(b["reward"][i])
            acc["success"] |= bool(b["success"][i])
            acc["interventions"] += interv
            acc["steps"] += 1
            if b["terminated"][i] or b["truncated"][i]:
                self.episode_log.append({"actor": actor, "episode": int(b["episode"][i]), **acc, "ingested": self.ingested})
                self._log_episode(self.episode_log[-1])
                self._ep_acc.pop(actor)
            self.dedup.take(actor, int(b["episode"][i]), int(b["step"][i]), int(b["n"][i]))
            self._open_ep[actor] = None if (b["terminated"][i] or b["truncated"][i]) else int(b["episode"][i])
            self.ingested += 1
        return idx.size

    # ---- learning -----------------------------------------------------------------------------
    def _can_update(self) -> bool:
        if self.online.size < max(1, self.warmup):
            return False
        n_off, _ = self.sampler.split(self.utd * self.batch_size, self.updates)
        if n_off > 0 and (self.demos is None or self.demos.size < n_off):
            return False  # the demonstration buffer (maybe filling with interventions) cannot give its share yet
        if self.updates_per_transition <= 0:
            return True
        return self.updates < (self.ingested - self.warmup + 1) * self.updates_per_transition

    def update(self) -> dict:
        """One agent update on a mixed batch of ``utd · B`` transitions."""
        batch = self.sampler.sample(self.utd * self.batch_size, step=self.updates)
        m = self.agent.update(batch, self.updates)
        self.updates += 1
        self._policy_changed = True
        return m

    def push(self, only: str | None = None) -> int:
        """Send the current policy weights to every actor (or ``only`` one) that lacks them; returns how many got them."""
        from robotrl.policy import policy_state

        if self._policy_changed:
            self.version += 1
            self._policy_changed = False
            self._payload = None
            # versions stay unique across restarts: a learner killed after pushing versions its checkpoint
            # does not know about must not reuse their numbers (resume reads this file)
            from robotrl.real_robot.learner_link import atomic_write_bytes

            atomic_write_bytes(self.run_dir / "version.json", json.dumps({"version": self.version}).encode())
        if getattr(self, "_payload", None) is None:
            ps = policy_state(self.agent.policy)
            names, arrays = state_to_arrays(ps["state_dict"])
            self._payload = {"version": self.version, "target": ps["target"], "kwargs": ps["kwargs"], "names": names,
                             "arrays": arrays}
            if self.pushed_weights_dir is not None:
                save_arrays(self.pushed_weights_dir / f"v{self.version}.npz", dict(zip(names, arrays)))
        sent = 0
        for actor in ([only] if only else list(self.ep.peers)):
            if self._pushed.get(actor) == self.version:
                continue
            if self.ep.reply(actor, "weights", {**self._payload, "sent_at": time.time()}):
                self._pushed[actor] = self.version
                sent += 1
        self._last_push = time.monotonic()
        return sent

    # ---- logging ------------------------------------------------------------------------------
    def _tb(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=self.ingested or None)
        return self._writer

    def _log_episode(self, e: dict) -> None:
        w = self._tb()
        w.add_scalar("episode/return", e["return"], self.ingested)
        w.add_scalar("episode/success", float(e["success"]), self.ingested)
        w.add_scalar("episode/interventions", e["interventions"], self.ingested)

    def status(self) -> dict:
        """Counters (JSON-able), also written to ``run_dir/status.json``."""
        return {"ingested": self.ingested, "online": self.online.size, "demos": self.demos.size if self.demos else 0,
                "interventions": self.interventions, "updates": self.updates, "version": self.version,
                "duplicates": self.dedup.duplicates, "durable": dict(self.durable),
                "have": {a: self.dedup.have(a) for a in self.dedup.last}, "episodes": len(self.episode_log),
                "actors": sorted(self.slots), "rejected": dict(self.ep.auth.rejected), "endpoint": self.ep.endpoint,
                "pid": os.getpid()}

    def _write_status(self) -> None:
        from robotrl.real_robot.learner_link import atomic_write_bytes

        atomic_write_bytes(self.run_dir / "status.json", json.dumps(self.status(), default=str).encode())

    # ---- main loop ----------------------------------------------------------------------------
    def serve(self, should_stop: Callable[[], bool], log_every: int = 100) -> dict:
        """Receive, update, push and checkpoint until ``should_stop()``; a last checkpoint on the way out."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._write_status()
        last_status = time.monotonic()
        try:
            while not should_stop():
                can = self._can_update()
                for _, msg in self.ep.recv(0 if can else 20):
                    self.handle(msg)
                if self._can_update():
                    m = self.update()
                    if self.updates % log_every == 0:
                        w = self._tb()
                        for k, v in m.items():
                            w.add_scalar(f"train/{k}", float(v), self.updates)
                        self.metrics = {k: float(v) for k, v in m.items()}
                now = time.monotonic()
                if now - self._last_push >= self.push_period_s and self.ep.peers:
                    self.push()
                if self._sync_wanted or now - self._last_ckpt >= self.checkpoint_every_s:
                    self._sync_wanted = False
                    self.checkpoint()
                if now - last_status >= 0.5:
                    self._write_status()
                    last_status = now
        finally:
            self.checkpoint()
            self._write_status()
            if self._writer is not None:
                self._writer.close()
        return self.status()
