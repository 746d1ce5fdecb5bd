"""The online actor (robot side): a fixed-rate loop that acts with the newest pushed weights,
lets a teleop device take over, records every step and streams it to the learner.

See :mod:`robotrl.real_robot.online` for the whole picture.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from robotrl.errors import CheckpointError, ConfigError, RobotRLError
from robotrl.real_robot.client import DeadlineExceeded, RobotCommandError
from robotrl.real_robot.interface import Observation, RobotConnectionError
from robotrl.real_robot.learner_link import ActorLink, Weights
from robotrl.real_robot.online_recording import EpisodeRecorder
from robotrl.real_robot.resets import RobotReset
from robotrl.real_robot.teleop import TeleopCommand, TeleopDevice

if TYPE_CHECKING:
    from robotrl.real_robot.reward_classifier import RewardFunction

LOST_MODES = ("continue", "hold")


class PolicyHolder:
    """The actor's current policy, rebuilt from pushed :class:`Weights`.

    Only classes under ``robotrl.agents.`` are built (:func:`robotrl.policy.policy_class`). A pixel policy
    (an :class:`~robotrl.vision.frontend.ObservationFrontend` with cameras: pixel RLPD/SAC, the pixel residual) acts on the robot's
    state ``(Ds,)`` and camera frames ``{camera: uint8 (H, W, C)}``; it must see exactly the robot's cameras at their
    frame size (its ``image_shapes`` ``{"pixels/<camera>": [H, W, C]}``), else :meth:`load` refuses it.

    Args:
        explore: sample from a stochastic policy's distribution (tanh-Gaussian ``actor.sample``)
            instead of its deterministic action; a deterministic policy with an action scaler
            (the TD3 residual on a frozen base, ResFiT) gets Gaussian noise of ``explore_std``
            added in normalised action units (``[-1, 1]``), as ResFiT adds it to the scaled residual.
        seed: seed of the exploration noise.
        explore_std: that noise's standard deviation (normalised action units).
        cameras: the robot's :class:`~robotrl.real_robot.interface.CameraSpec` items (empty: a state-only robot).
    """

    def __init__(self, explore: bool = True, seed: int = 0, explore_std: float = 0.1, cameras=()):
        self.explore, self.explore_std = bool(explore), float(explore_std)
        self.gen = torch.Generator().manual_seed(int(seed))
        self.policy: torch.nn.Module | None = None
        self.version = -1
        self._key: tuple | None = None
        self.cameras = tuple(cameras)
        self.pixels = False  # the policy reads camera frames
        #: ``(Da,)`` the base action the last :meth:`act` executed (a residual policy on a state base: a chunked base's
        #: queued action, what the learner's TD target relabels with); ``None``: not a residual policy, or a base the
        #: policy does not call per step (a camera policy's stateless chunk)
        self.last_base_action: np.ndarray | None = None
        self._base_out: list[torch.Tensor] = []

    def check_cameras(self, w: Weights) -> None:
        """Refuse weights of a pixel policy whose cameras or frame size differ from the robot's.

        Raises:
            ConfigError: names the camera shapes of both and the way out.
        """
        from robotrl.real_robot.online_pixels import camera_shapes, mismatch

        want = w.kwargs.get("image_shapes") if isinstance(w.kwargs, dict) else None
        if want is None:
            return  # a state policy: it ignores the frames
        diff = mismatch({str(k): list(v) for k, v in dict(want).items()}, camera_shapes(self.cameras))
        if diff:
            raise ConfigError(f"the learner's pixel policy {w.target.rsplit('.', 1)[-1]} (version {w.version}) sees "
                              f"{diff[0]} ({{key: [H, W, C]}}), this actor's robot sends {diff[1]}: start the actor "
                              "with the learner's cameras and frame size (for the twin robot.cameras=[...] "
                              "robot.image_size=N), or the learner with this robot's config and demonstrations "
                              "recorded with its cameras")

    def load(self, w: Weights) -> None:
        """Use weights ``w`` from now on.

        Raises:
            CheckpointError: a class outside ``robotrl.agents.`` or weights that do not fit it.
            ConfigError: a pixel policy for other cameras or another frame size than the robot's (:meth:`check_cameras`).
        """
        from robotrl.policy import policy_class
        from robotrl.vision.frontend import ObservationFrontend

        self.check_cameras(w)
        key = (w.target, json.dumps(w.kwargs, sort_keys=True, default=str))
        if self.policy is None or key != self._key:
            self.policy = policy_class(w.target)(**w.kwargs)
            self._key = key
            self._watch_base(self.policy)
        try:
            self.policy.load_state_dict(w.state)
        except RuntimeError as exc:
            raise CheckpointError(f"pushed weights do not fit {w.target}: {exc}") from exc
        self.policy.eval()
        self.pixels = isinstance(self.policy, ObservationFrontend) and self.policy.has_cameras
        self.version = w.version

    def _watch_base(self, policy: torch.nn.Module) -> None:
        """A residual policy's frozen base reports each output it gives (a forward hook): the base action the
        combined action was built from, a chunked base's queued action included."""
        from robotrl.agents.residual.policy import ResidualPolicy

        self._base_out = []
        if isinstance(policy, ResidualPolicy) and isinstance(policy.base, torch.nn.Module):
            out = self._base_out
            policy.base.register_forward_hook(lambda module, args, y: out.append(y.detach()))

    @torch.no_grad()
    def act(self, obs: np.ndarray, images: dict | None = None) -> np.ndarray:
        """As :meth:`_act`; also sets :attr:`last_base_action`."""
        self._base_out.clear()
        y = self._act(obs, images)
        self.last_base_action = self._base_out[0][0].numpy().astype(np.float32) if self._base_out else None
        return y

    @torch.no_grad()
    def _act(self, obs: np.ndarray, images: dict | None = None) -> np.ndarray:
        """Action ``(Da,)`` float32 for the state ``obs (Ds,)`` (and, for a pixel policy, the robot's frames
        ``images`` ``{camera: uint8 (H, W, C)}`` of that observation).

        Raises:
            ConfigError: a pixel policy without frames (the robot sent none).
        """
        p = self.policy
        x = torch.as_tensor(np.asarray(obs, np.float32))[None]
        if self.pixels:
            if images is None:
                raise ConfigError("the pixel policy needs the robot's camera frames, and this observation carries none")
            from robotrl.real_robot.online_pixels import policy_images

            imgs = p.stack_frames({k: torch.as_tensor(np.array(v, np.uint8))[None]
                                   for k, v in policy_images(images).items()})  # (1, H, W, k·C): its own history
            if self.explore and hasattr(p, "actor") and hasattr(p.actor, "sample"):  # pixel SAC / RLPD
                a, _ = p.actor.sample(p.features(x, imgs), self.gen)
                y = p.action_scaler.unnormalize(a)
            elif self.explore and self.explore_std > 0:  # the pixel residual (TD3): noise in normalised units
                a = p.action_scaler.normalize(p(x, imgs))
                a = a + self.explore_std * torch.randn(a.shape, generator=self.gen)
                y = p.action_scaler.unnormalize(a.clamp(-1.0, 1.0))
            else:
                y = p(x, imgs)
        elif self.explore and hasattr(p, "actor") and hasattr(p.actor, "sample") and hasattr(p, "obs_normalizer"):
            a, _ = p.actor.sample(p.obs_normalizer(x), self.gen)
            y = p.action_scaler.unnormalize(a)
        elif self.explore and self.explore_std > 0 and hasattr(p, "action_scaler"):
            a = p.action_scaler.normalize(p(x))
            a = a + self.explore_std * torch.randn(a.shape, generator=self.gen)
            y = p.action_scaler.unnormalize(a.clamp(-1.0, 1.0))
        else:
            y = p(x)
        return y[0].numpy().astype(np.float32)

    def reset(self) -> None:
        """An episode starts: the policy's per-episode state (a pixel policy's frame stack, a chunk queue) starts afresh."""
        if self.policy is not None:
            self.policy.reset()


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
        initial: weights to act with before the learner's first push (``None``: wait for it); ``robotrl
            actor`` passes the weights it kept (``work_dir/weights.npz``), so a restarted actor acts
            with its last weights even while no learner answers.
        max_duration_s: wall-clock seconds per episode before it is truncated (``None``: no limit).
        reset: the episode start (:mod:`~robotrl.real_robot.resets`: the robot's own reset,
            a scripted motion or a human; ``None``: the robot's own ``reset(seed)``).
        max_missed: consecutive unanswered steps after which the robot counts as lost (the
            episode is recorded, truncated, and :class:`RobotConnectionError` raised).
        reward_fn: a :class:`~robotrl.real_robot.reward_classifier.RewardFunction` (the success classifier's
            :class:`~robotrl.real_robot.reward_classifier.ClassifierReward`): its verdict on each next observation
            (state and camera frames) replaces the robot's reward and success; a success ends the episode when its
            ``end_on_success`` says so. An operator's mark (:attr:`TeleopCommand.label`) overrides the success.

    Raises:
        ConfigError: unknown ``on_learner_lost`` or a negative rate.
    """

    def __init__(self, robot, link: ActorLink | None, recorder: EpisodeRecorder, *, rate_hz: float,
                 teleop: TeleopDevice | None = None, on_learner_lost: str = "continue", explore: bool = True,
                 max_steps: int | None = None, wait_weights_s: float = 30.0, seed: int = 0,
                 initial: Weights | None = None, max_missed: int = 10, reward_fn: RewardFunction | None = None,
                 max_duration_s: float | None = None, reset=None, explore_std: float = 0.1):
        if on_learner_lost not in LOST_MODES:
            raise ConfigError(f"on_learner_lost must be one of {LOST_MODES}, got {on_learner_lost!r}")
        if rate_hz < 0:
            raise ConfigError(f"rate_hz must be >= 0 (0: unpaced), got {rate_hz}")
        self.robot, self.link, self.recorder = robot, link, recorder
        self.spec = robot.spec()
        self.period = 1.0 / rate_hz if rate_hz > 0 else 0.0
        self.teleop, self.on_learner_lost = teleop, on_learner_lost
        self.max_steps, self.wait_weights_s, self.seed = max_steps, float(wait_weights_s), int(seed)
        self.holder = PolicyHolder(explore, seed, explore_std, self.spec.cameras)
        if initial is not None:
            self.holder.load(initial)
            if link is not None:
                link.set_version(initial.version)
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
        self.max_duration_s = None if max_duration_s is None else float(max_duration_s)
        self.reset = reset if reset is not None else RobotReset()

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
        """One episode; returns ``{episode, steps, return, success, interventions, robot_success, ...}``: ``success``
        is the episode's success as learnt from (the reward function's verdicts, or the operator's marks, where given),
        ``robot_success`` whether the robot's own success flag was set at any step (a twin's or a robot's that reports
        one: the audit of a success classifier's verdicts; always ``False`` on a robot without one)."""
        ep = self.next_episode
        self.next_episode += 1
        reset_steps = self.reset.steps
        obs = self.reset.run(self.robot, self.seed + ep, teleop=self.teleop, period_s=self.period)
        reset_steps = self.reset.steps - reset_steps
        self.holder.reset()
        if self.reward_fn is not None:
            self.reward_fn.reset()
        if hasattr(self.teleop, "new_episode"):
            self.teleop.new_episode(ep)
        rows: list[dict] = []
        nan = np.full(self.spec.action.dim, np.nan, np.float32)
        t0 = t_ep = time.monotonic()
        k = missed = 0
        stats = {"lost": 0, "held": 0}
        robot_success = False
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
            a_pol = a_base = None
            if self.holder.policy is not None and (connected or self.on_learner_lost == "continue"):
                a_pol = self.holder.act(obs.state, obs.images)
                a_base = self.holder.last_base_action
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
            robot_success = robot_success or bool(nxt.success)  # before a reward function's verdict replaces it
            if self.reward_fn is not None:  # the success classifier's reward on the observation the step led to
                v = self.reward_fn(nxt.state, nxt.images)
                end = bool(nxt.terminated) or (v.success and self.reward_fn.end_on_success)
                nxt = Observation(nxt.state, nxt.timestamp, v.reward, end, bool(nxt.truncated), v.success, nxt.images)
            if cmd.label is not None:  # the operator's mark labels this step; success ends the task, failure cuts it
                nxt = Observation(nxt.state, nxt.timestamp, nxt.reward, bool(nxt.terminated) or cmd.label,
                                  bool(nxt.truncated) or not cmd.label, cmd.label, nxt.images)
            over = (self.max_steps is not None and k + 1 >= self.max_steps) or \
                (self.max_duration_s is not None and time.monotonic() - t_ep >= self.max_duration_s)
            trunc = bool(nxt.truncated) or (over and not nxt.terminated)
            row = {"n": self.next_n, "episode": ep, "step": k, "obs": obs.state, "next_obs": nxt.state,
                   "action": applied, "requested": nan if a_cmd is None else np.asarray(a_cmd, np.float32),
                   "policy_action": nan if a_pol is None else a_pol,
                   "base_action": nan if a_base is None else a_base, "reward": float(nxt.reward),
                   "terminated": bool(nxt.terminated), "truncated": trunc, "success": bool(nxt.success),
                   "intervention": bool(cmd.engaged and cmd.action is not None),
                   "safety_modified": bool(set(flags) - {"hold"}), "held": a_cmd is None,
                   "learner_connected": bool(connected), "weights_version": self.holder.version,
                   "time": time.time(), "rtt_s": rtt, "jitter_s": t_start - t_sched if self.period else 0.0}
            if self.spec.cameras:  # the frames taken with obs and next_obs: recorded, and sent to a pixel learner
                row["images"], row["next_images"] = obs.images, nxt.images
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
                "success": bool(any(r["success"] for r in rows)), "robot_success": robot_success,
                "interventions": int(sum(r["intervention"] for r in rows)),
                "versions": sorted({int(r["weights_version"]) for r in rows}), "reset_steps": reset_steps, **stats}

    def _close(self, ep: int, rows: list[dict], obs: Observation) -> None:
        """Record an episode that ended (or was cut by a robot failure: then it ends truncated)."""
        if not rows:
            self.recorder.journal_path.unlink(missing_ok=True)
            return
        if not (rows[-1]["terminated"] or rows[-1]["truncated"]):
            rows[-1]["truncated"] = True
        if self.link is not None and not self.link.spill_now() and not self.link.alive:
            # the link's thread stopped: these rows may not be on disk for the learner, so the journal stays (the
            # next start of this actor recovers and resends it) and the actor stops rather than run on unheard
            raise RobotRLError(f"{self.link.error or 'the learner link stopped'}; episode {ep}'s {len(rows)} steps "
                               f"stay in {self.recorder.journal_path} and are resent when this actor (same actor_id "
                               "and work_dir) starts again")
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
