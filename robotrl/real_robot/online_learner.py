"""The online learner: an off-policy agent fed by the actors' transitions and offline
demonstrations, pushing weights back; a :class:`~robotrl.runner.Loop` driven by the one
:class:`~robotrl.runner.Runner`, which owns its checkpoints, resume, TensorBoard, report and
progress exactly as for a simulation run. What stays here is what is specific to serving actors:
the link, per-actor delivery (dedup, durable acknowledgements), weight pushes and ``status.json``.

See :mod:`robotrl.real_robot.online` for the whole picture.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from robotrl.checkpoint import save_arrays
from robotrl.data.replay import ReplayBuffer
from robotrl.errors import CheckpointError, ConfigError
from robotrl.real_robot.interface import ProtocolError, RobotSpec
from robotrl.utd import batch_split, update_schedule
from robotrl.real_robot.learner_link import (
    Dedup,
    LearnerEndpoint,
    atomic_write_bytes,
    check_batch,
    state_to_arrays,
    with_next_frames,
)


def _to_tensors(d: dict) -> dict:
    return {k: torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v for k, v in d.items()}


def _to_numpy(d: dict) -> dict:
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in d.items()}


@dataclass
class LearnerSchedule:
    """The learner's cadences as the :class:`~robotrl.runner.Runner` reads them (its clock: agent updates).

    Attributes:
        eval_every: updates between evaluation records (the actors' episodes since the last record:
            :meth:`OnlineLearner.episode_record`).
        checkpoint_every: updates between the Runner's own checkpoints; the learner checkpoints by wall time
            (``checkpoint_every_s``) and when an actor asks, so this is effectively off.
        log_every: updates between training-metric logs.
        eval_episodes, eval_envs, eval_seed: unused (there is no simulator to roll out in).
        progress: no progress bar (a server).
        keep_best: off (the learner's evaluations are the actors' episode records, not a held-out evaluation).
    """

    eval_every: int = 1000
    checkpoint_every: int = 2 ** 62
    log_every: int = 100
    eval_episodes: int = 0
    eval_envs: int = 0
    eval_seed: int | None = None
    progress: bool = False
    keep_best: bool = False


class OnlineLearner:
    """The learner of online RL on a robot (see the module doc), a :class:`~robotrl.runner.Loop`.

    Build it, then a :class:`~robotrl.runner.Runner` around it (``make_eval_env=None``,
    ``validator=learner.episode_record``) and set :attr:`runner`; :func:`robotrl.real_robot.online_cli.build_learner`
    does both. ``runner.fit(prepared=...)`` then serves until :attr:`should_stop` says so.

    Args:
        agent: an off-policy agent (``update``, ``policy``, ``state_dict``), e.g. ``QLAgent``.
        endpoint: the bound :class:`LearnerEndpoint`.
        spec: the robot's :class:`RobotSpec` (actors with another ``Do``/``Da`` are refused).
        demos: buffer of offline demonstrations (``None``: none; then ``offline_ratio`` must be 0);
            it needs room for the interventions (``capacity`` above its data).
        online_capacity: capacity of the robot-experience buffer (transitions).
        run_dir: the Runner's checkpoints (``checkpoints/latest.pt``), TensorBoard (``tb/``), report; and
            ``status.json``, ``version.json``.
        batch_size: ``B``, the transitions of one critic update.
        utd: critic updates per robot transition received (the one meaning of UTD, :mod:`robotrl.utd`; a
            fraction, e.g. 0.25, updates once every 4 transitions). Each ``agent.update`` call makes the agent's
            ``critic_utd`` critic updates on ``critic_utd · B`` sampled transitions and one actor update.
        offline_ratio: share of each batch from ``demos`` (RLPD 0.5).
        warmup: robot transitions held before the first update.
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
        pixels: the agent learns from the robot's camera frames (a pixel agent: ``batch.images()``
            ``{"pixels/<camera>": uint8 (B, H, W, C)}`` beside the state ``(B, Ds)``): actors are asked for
            their frames (``welcome``'s ``frames``), must send every camera of ``spec`` at its frame size, and
            both buffers store each frame once (uint8, the replay buffer's image storage; ``demos`` must have
            been built with the same ``image_shapes``).
        offline_steps: offline pretraining updates on the demonstrations at the first start (:meth:`start`).
        n_step: ``n`` of the TD targets (``trainer.n_step``, as ``robotrl train``): every batch, offline and online,
            is sampled with n-step returns along its episodes (:meth:`ReplayBuffer.sample`), cut at an episode's
            end or the newest step an actor has sent.
        log_every, eval_every: the Runner's cadences in updates (:class:`LearnerSchedule`).

    The agent's declared ``transition_fields`` (a residual on a chunked base: ``{"base_action": Da}``, the base action
    each step executed, which the actor sends in every row: ``link_codec.TRANSITION_FIELDS``) are stored per
    transition in both buffers (the demonstrations' own rows NaN: recomputed; takeover rows as executed), so the TD
    target relabels with the base action really executed, as ``robotrl train``'s trainer stores them.

    Raises:
        ConfigError: ``offline_ratio > 0`` without demonstrations, bad periods, ``n_step < 1``, or an agent that
            records per-transition fields the link does not carry.
    """

    def __init__(self, agent, endpoint: LearnerEndpoint, spec: RobotSpec, *, demos: ReplayBuffer | None,
                 online_capacity: int, run_dir: str | os.PathLike, batch_size: int = 256, utd: float = 1.0,
                 offline_ratio: float = 0.5, warmup: int = 256,
                 push_period_s: float = 2.0, checkpoint_every_s: float = 30.0, interventions_to_demos: bool = True,
                 reward_scale: float = 1.0, reward_bias: float = 0.0, max_actors: int = 4, gamma: float = 0.99,
                 seed: int = 0, pushed_weights_dir: str | os.PathLike | None = None, pixels: bool = False,
                 offline_steps: int = 0, log_every: int = 100, eval_every: int = 1000, n_step: int = 1):
        from robotrl.data.mixing import MixedSampler
        from robotrl.real_robot.online_pixels import camera_shapes

        if offline_ratio > 0 and demos is None:
            raise ConfigError(f"offline_ratio={offline_ratio} needs a demonstration buffer (it may start empty and "
                              "fill with interventions); set offline_ratio=0 to learn from the robot's experience only")
        if push_period_s <= 0 or checkpoint_every_s <= 0:
            raise ConfigError(f"push_period_s and checkpoint_every_s must be > 0 s, got {push_period_s}, {checkpoint_every_s}")
        if int(n_step) < 1:
            raise ConfigError(f"trainer.n_step must be >= 1 (1: one-step TD targets), got {n_step}")
        self.n_step = int(n_step)
        self.critic_init: float | None = None  # the critic's starting output (agent.init_from_data), for the log
        self.agent, self.ep, self.spec = agent, endpoint, spec
        self.do, self.da = spec.observation.dim, spec.action.dim
        self.run_dir = Path(run_dir)
        self.ckpt_path = self.run_dir / "checkpoints" / "latest.pt"
        self.demos = demos
        self.pixels = bool(pixels)
        if self.pixels and not spec.cameras:
            raise ConfigError(f"a pixel learner needs a robot with cameras; {spec.name} has none")
        self.image_shapes = {k: tuple(v) for k, v in camera_shapes(spec.cameras).items()} if self.pixels else {}
        if self.pixels and demos is not None and demos.image_shapes != self.image_shapes:
            raise ConfigError(f"the demonstration buffer stores cameras {demos.image_shapes}, the robot sends "
                              f"{self.image_shapes}; build it with the robot's cameras")
        # the float fields the agent records per transition (a residual on a chunked base: the base action executed),
        # as robotrl train's trainer reads them; they travel in every transition row (link_codec.TRANSITION_FIELDS)
        self.transition_fields = dict(agent.transition_fields)  # a declared hook of every off-policy agent
        from robotrl.real_robot.link_codec import TRANSITION_FIELDS

        unknown = sorted(k for k in self.transition_fields if TRANSITION_FIELDS.get(k, ("", ""))[1] != "a")
        if unknown or any(int(d) != self.da for d in self.transition_fields.values()):
            raise ConfigError(f"agent {type(agent).__name__} records per transition {self.transition_fields}; the actors "
                              f"send only action-sized fields of the link ({', '.join(TRANSITION_FIELDS)}): use an "
                              "agent whose fields the robot link carries")
        self.online = ReplayBuffer(online_capacity, self.do, self.da, gamma=gamma, num_envs=max_actors, seed=seed,
                                   device=getattr(agent, "device", "cpu"), image_shapes=self.image_shapes or None,
                                   frame_stack=int(agent.frame_stack),  # stacks by index, per actor
                                   extra_dims=self.transition_fields)
        if demos is not None:  # the demonstrations' rows: NaN (unknown, recomputed); interventions: as executed
            for name, d in self.transition_fields.items():
                demos.add_extra_field(name, int(d))
        self.online_keys = np.full((online_capacity, 2), -1, np.int64)  # (episode, step) per online slot, for audits
        self.sampler = MixedSampler(demos if demos is not None else self.online, self.online, offline_ratio)
        self.batch_size, self.utd = int(batch_size), float(utd)
        self.schedule = update_schedule(batch_split(agent), self.utd, self.batch_size)  # robotrl.utd, as in simulation
        self.warmup = int(warmup)
        self.push_period_s, self.checkpoint_every_s = float(push_period_s), float(checkpoint_every_s)
        self.interventions_to_demos = bool(interventions_to_demos)
        self.reward_scale, self.reward_bias = float(reward_scale), float(reward_bias)
        self.max_actors = int(max_actors)
        self.slots: dict[str, int] = {}
        self.dedup = Dedup()
        self.durable: dict[str, int] = {}
        self.version = 0
        self.updates = 0
        self.pretrain_updates = 0
        self.ingested = 0
        self.interventions = 0
        self._in_takeover: dict[str, bool] = {}
        self._pushed: dict[str, int] = {}
        self._last_push = 0.0
        self._last_ckpt = time.monotonic()
        self._sync_wanted = False
        self._policy_changed = True
        self.pushed_weights_dir = Path(pushed_weights_dir) if pushed_weights_dir else None
        self.metrics: dict[str, float] = {}
        self.episode_log: list[dict] = []
        self._ep_acc: dict[str, dict] = {}
        self._open_ep: dict[str, int | None] = {}  # per actor: its episode still open in the buffers
        self.offline_steps = int(offline_steps)
        self.cfg = LearnerSchedule(eval_every=max(1, int(eval_every)), log_every=max(1, int(log_every)))
        self.runner = None  # the Runner driving this loop (set by build_learner)
        self._payload: dict | None = None  # the current weights message
        self.should_stop: Callable[[], bool] = lambda: False
        self._recorded = 0  # episodes of episode_log already in an evaluation record

    def close(self) -> None:
        """Close the actors' endpoint and release the run directory (:meth:`robotrl.runner.Runner.close`)."""
        self.ep.close()
        if self.runner is not None:
            self.runner.close()

    # ---- the Loop protocol (robotrl.runner) ---------------------------------------------------

    @property
    def step(self) -> int:
        """The run's x-axis: robot transitions received (env steps, as in simulation)."""
        return self.ingested

    @step.setter
    def step(self, value: int) -> None:
        self.ingested = int(value)

    @property
    def clock(self) -> int:
        """The cadences count agent updates."""
        return self.updates

    @property
    def log_every(self) -> int:
        """Updates between training-metric logs."""
        return self.cfg.log_every

    @property
    def total(self) -> int:
        """No update budget: the learner serves until stopped (``max_runtime_s``, SIGTERM)."""
        return 0

    def phase(self) -> str:
        """Always ``"online"`` once serving (offline pretraining happens in :meth:`start`)."""
        return "online"

    def start(self, runner, warm_started: bool) -> None:
        """First start only: ``offline_steps`` of offline pretraining on the demonstrations (:meth:`pretrain`;
        a warm-started learner keeps the critic it loaded, as ``robotrl train`` does)."""
        self.runner = runner
        if self.offline_steps > 0:
            self.pretrain(self.offline_steps, init_critic=not warm_started)

    def run(self, runner) -> None:
        """Serve until :attr:`should_stop`: :meth:`serve`."""
        self.runner = runner
        self.serve(self.should_stop, log_every=self.cfg.log_every)

    def summary(self, history: list[dict]) -> dict:
        """The learner's counters; no onset (there is no offline evaluation on a robot)."""
        st = self.status()
        out = {k: st[k] for k in ("ingested", "interventions", "updates", "version", "pretrain_updates", "episodes")}
        out["onset"] = {"online_start": 0}
        return out

    def episode_record(self, agent=None) -> dict:
        """The evaluation record of a robot run: the actors' episodes ended since the last record (their mean
        return, success rate and interventions per step), in place of rollouts in a simulator."""
        eps = self.episode_log[self._recorded:]
        self._recorded = len(self.episode_log)
        done = [e for e in eps if not e.get("cut")]
        nan = float("nan")
        rets = [float(e.get("return", nan)) for e in done]
        steps = sum(int(e.get("steps", 0)) for e in done)
        return {"evaluation": "robot episodes", "return_mean": float(np.mean(rets)) if rets else nan,
                "return_std": float(np.std(rets)) if rets else nan,
                "success_rate": float(np.mean([bool(e.get("success")) for e in done])) if done else nan,
                "intervention_rate": sum(int(e.get("interventions", 0)) for e in done) / steps if steps else nan,
                "normalized_score": nan, "episodes": len(done), "cut_episodes": len(eps) - len(done)}

    # ---- checkpoints ---------------------------------------------------------------------------
    def state_dict(self, ckpt_dir: Path | None = None) -> dict:
        """What the Runner's checkpoint adds for this loop: both buffers, per-actor delivery state, counters
        (the agent, policy, step, updates, RNGs and history are the Runner's)."""
        out = {"online": _to_tensors(self.online.state_dict()),
               "online_keys": torch.from_numpy(self.online_keys[: self.online.size].copy()),
               "online_rng": self.online.rng.bit_generator.state,
               "dedup": self.dedup.state(), "slots": dict(self.slots), "version": self.version,
               "ingested": self.ingested, "pretrain_updates": self.pretrain_updates,
               "interventions": self.interventions, "episode_log": list(self.episode_log),
               "recorded_episodes": self._recorded,
               "open_episodes": {k: (-1 if v is None else v) for k, v in self._open_ep.items()}}
        if self.demos is not None:
            out["demos"] = _to_tensors(self.demos.state_dict())
            out["demos_rng"] = self.demos.rng.bit_generator.state
        return out

    def checkpoint(self) -> Path:
        """The Runner writes the checkpoint atomically; from then on everything held is durable (acks say so).

        Raises:
            RuntimeError: no Runner drives this learner yet.
        """
        if self.runner is None:
            raise RuntimeError("the learner checkpoints through its Runner: build it with build_learner")
        path = self.runner.save()
        self.durable = {a: self.dedup.have(a) for a in self.dedup.last}
        self._last_ckpt = time.monotonic()
        for actor in list(self.ep.peers):
            self.ep.reply(actor, "ack", {"received": self.dedup.have(actor), "durable": self.durable.get(actor, -1)})
        return path

    def load_state_dict(self, s: dict, ckpt_dir: Path | None = None) -> None:
        """Inverse of :meth:`state_dict` (``s``: the whole checkpoint the Runner resumes from).

        Raises:
            CheckpointError: the checkpoint does not fit this learner, or ``version.json`` is damaged.
        """
        try:
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
        self.version = int(s["version"])
        vfile = self.run_dir / "version.json"
        if vfile.exists():
            try:
                self.version = max(self.version, int(json.loads(vfile.read_text())["version"]))
            except (ValueError, KeyError, TypeError):
                raise CheckpointError(f"{vfile} is damaged; delete it only if no actor ran with this learner's "
                                      "weights (versions could repeat)") from None
        self.ingested, self.interventions = int(s["ingested"]), int(s["interventions"])
        self.pretrain_updates = int(s.get("pretrain_updates", 0))
        self.episode_log = list(s.get("episode_log", []))
        self._recorded = int(s.get("recorded_episodes", len(self.episode_log)))
        self._open_ep = {str(k): (None if int(v) < 0 else int(v)) for k, v in s.get("open_episodes", {}).items()}
        # the actors' episodes in progress continue where the checkpoint left them (resent rows link on)

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
            if self.pixels:
                from robotrl.real_robot.online_pixels import camera_shapes, mismatch

                diff = mismatch(camera_shapes(spec.cameras), self.image_shapes)
                if diff:
                    self.ep.reply(actor, "error", {"code": "spec_mismatch", "text":
                                  f"actor robot {spec.name} sends cameras {diff[0]} ({{key: [H, W, C]}}); this learner "
                                  f"trains a pixel policy on {diff[1]}: start the actor with the learner's cameras and "
                                  "frame size (for the twin robot.cameras=[...] robot.image_size=N), or the learner "
                                  "with the actor's robot config and demonstrations recorded with its cameras"})
                    return
            if self._slot(actor) is None:
                self.ep.reply(actor, "error", {"code": "too_many_actors", "text":
                              f"this learner serves max_actors={self.max_actors}; raise it"})
                return
            self.ep.reply(actor, "welcome", {"have": self.durable.get(actor, -1), "version": self.version,
                                             "frames": self.pixels})
            self._pushed.pop(actor, None)
            self.push(only=actor)
        elif t == "batch":
            if actor not in self.slots:  # this learner (restarted?) has not been greeted by the actor yet
                self.ep.reply(actor, "error", {"code": "hello_first", "text": "say hello first (learner restarted)"})
                return
            try:
                check_batch(b, self.do, self.da, self.spec.cameras if self.pixels else ())
            except ProtocolError as exc:
                self.ep.reply(actor, "error", {"code": "bad_batch", "text": str(exc)})
                return
            if self.pixels:
                b = with_next_frames(b, self.spec.cameras)
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
        cams = [k[len("pixels/"):] for k in self.image_shapes]  # the batch's frames/<camera> → the agent's pixels/<camera>

        def frames(prefix: str, i: int) -> dict | None:
            return {f"pixels/{c}": b[f"{prefix}/{c}"][i:i + 1] for c in cams} if cams else None

        for i in idx:  # rows in order: the buffer links each actor's steps into episodes
            last = self.dedup.last.get(actor)
            if last is not None and int(b["episode"][i]) != last[0] and self._open_ep.get(actor) is not None:
                # the actor's previous episode never ended here (the actor was killed mid-episode):
                # do not link the new episode to it
                self.online.end_open_episodes([slot])  # this actor's episode only: the others go on
                if self.demos is not None:
                    self.demos.end_open_episodes([slot])
                acc = self._ep_acc.pop(actor, {})
                self.episode_log.append({"actor": actor, "episode": last[0], **acc, "ingested": self.ingested, "cut": True})
            pos = self.online.ptr
            imgs, next_imgs = frames("frames", i), frames("next_frames", i)
            extras = {k: b[k][i:i + 1] for k in self.transition_fields} or None
            self.online.add(b["obs"][i], b["action"][i], r[i], b["next_obs"][i], b["terminated"][i], b["truncated"][i],
                            env_ids=[slot], images=imgs, next_images=next_imgs, extras=extras)
            self.online_keys[pos] = (b["episode"][i], b["step"][i])
            interv = bool(b["intervention"][i])
            if interv and self.interventions_to_demos and self.demos is not None:
                self.demos.add(b["obs"][i], b["action"][i], r[i], b["next_obs"][i], b["terminated"][i],
                               b["truncated"][i], env_ids=[slot], images=imgs, next_images=next_imgs, extras=extras)
                self.interventions += 1
            elif interv:
                self.interventions += 1
            if self._in_takeover.get(actor) and (not interv) and self.demos is not None:
                self.demos.end_open_episodes([slot])  # this actor's takeover segment ended: do not link it to the next one
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
        n_off, _ = self.sampler.split(self.schedule.sampled_batch, self.updates)
        if n_off > 0 and (self.demos is None or self.demos.size < n_off):
            return False  # the demonstration buffer (maybe filling with interventions) cannot give its share yet
        return self.updates < (self.ingested - self.warmup + 1) * self.schedule.calls_per_step

    def pretrain(self, steps: int, init_critic: bool = True) -> dict:
        """Offline pretraining before any actor connects: ``steps`` agent updates on demonstration batches alone.

        As ``robotrl train``'s offline phase (:class:`robotrl.trainer.OffPolicyLoop`): first the agent's
        ``init_from_data`` hook on the demonstrations (``agent.model.critic_init=data``: every critic head starts at
        their mean MC return instead of 0, :meth:`QLAgent.init_from_data`), then batches from the agent's own
        ``sample_batch`` or ``demos.sample(n, n_step=trainer.n_step)``.

        Offline-pretrained then online in one learner (as WSRL/ConRFT run it): e.g. ``agent=calql
        agent.model.online_algo=sac``, then the agent's :meth:`start_online` switches the update rule. The
        online counters (``updates``, the UTD schedule) start at 0 afterwards; the pretrained weights are pushed
        as the first version and checkpointed, so a resumed learner does not pretrain again.

        Args:
            steps: offline updates, each on the schedule's ``critic_utd · B`` demonstration transitions.
            init_critic: call the agent's ``init_from_data`` first (a fresh run; not after a warm start).

        Returns:
            the last update's metrics.

        Raises:
            ConfigError: no demonstrations, or fewer than one batch of them.
        """
        n = self.schedule.sampled_batch
        if self.demos is None or self.demos.size < n:
            have = 0 if self.demos is None else self.demos.size
            raise ConfigError(f"offline pretraining (trainer.offline_steps={steps}) needs demonstrations: {have} held, "
                              f"a batch takes {n}; pass demos=<Minari id or path> or set trainer.offline_steps=0")
        if init_critic:
            self.critic_init = self.agent.init_from_data(self.demos)
        m: dict = {}
        for i in range(int(steps)):
            m = self.agent.update(self.pretrain_batch(), i)
        self.pretrain_updates = int(steps)
        self.agent.start_online()
        self._policy_changed = True
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint()
        return m

    def pretrain_batch(self):
        """One offline batch of ``critic_utd · B`` demonstration transitions (the agent's ``sample_batch``, else
        n-step returns of ``trainer.n_step``), as :meth:`pretrain` updates on."""
        n = self.schedule.sampled_batch
        batch = self.agent.sample_batch(self.demos, n)
        return batch if batch is not None else self.demos.sample(n, n_step=self.n_step)

    def online_batch(self):
        """One mixed batch of ``critic_utd · B`` transitions (``offline_ratio`` from the demonstrations) with n-step
        returns of ``trainer.n_step``, as :meth:`update` updates on."""
        return self.sampler.sample(self.schedule.sampled_batch, step=self.updates, n_step=self.n_step)

    def update(self) -> dict:
        """One agent update on a mixed batch of ``critic_utd · B`` transitions (:meth:`online_batch`)."""
        m = self.agent.update(self.online_batch(), self.updates)
        self.updates += 1
        self._policy_changed = True
        return m

    def push(self, only: str | None = None) -> int:
        """Send the current policy weights to every accepted actor (or ``only`` one) that lacks them; returns how many
        got them. An actor refused at ``hello`` (another robot spec or cameras) gets none."""
        from robotrl.policy import policy_state

        if self._policy_changed:
            self.version += 1
            self._policy_changed = False
            self._payload = None
            # versions stay unique across restarts: a learner killed after pushing versions its checkpoint
            # does not know about must not reuse their numbers (resume reads this file)
            atomic_write_bytes(self.run_dir / "version.json", json.dumps({"version": self.version}).encode())
        if self._payload is None:
            ps = policy_state(self.agent.policy)
            names, arrays = state_to_arrays(ps["state_dict"])
            self._payload = {"version": self.version, "target": ps["target"], "kwargs": ps["kwargs"], "names": names,
                             "arrays": arrays}
            if self.pushed_weights_dir is not None:
                save_arrays(self.pushed_weights_dir / f"v{self.version}.npz", dict(zip(names, arrays)))
        sent = 0
        for actor in ([only] if only else [a for a in self.ep.peers if a in self.slots]):  # greeted and accepted only
            if self._pushed.get(actor) == self.version:
                continue
            if self.ep.reply(actor, "weights", {**self._payload, "sent_at": time.time()}):
                self._pushed[actor] = self.version
                sent += 1
        self._last_push = time.monotonic()
        return sent

    # ---- logging ------------------------------------------------------------------------------
    def _log_episode(self, e: dict) -> None:
        if self.runner is not None:  # the Runner's TensorBoard, at the transitions received
            self.runner.log("episode", {"return": e["return"], "success": float(e["success"]),
                                        "interventions": e["interventions"]}, step=self.ingested)

    def status(self) -> dict:
        """Counters (JSON-able), also written to ``run_dir/status.json``."""
        return {"ingested": self.ingested, "online": self.online.size, "demos": self.demos.size if self.demos else 0,
                "interventions": self.interventions, "updates": self.updates, "version": self.version,
                "pretrain_updates": self.pretrain_updates,
                "duplicates": self.dedup.duplicates, "durable": dict(self.durable),
                "have": {a: self.dedup.have(a) for a in self.dedup.last}, "episodes": len(self.episode_log),
                "actors": sorted(self.slots), "rejected": dict(self.ep.auth.rejected), "endpoint": self.ep.endpoint,
                "connections": {**self.ep.guard.status(), "quarantined": self.ep.screen.quarantined},
                "pid": os.getpid()}

    def _write_status(self) -> None:
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
                        self.metrics = {k: float(v) for k, v in m.items() if math.isfinite(float(v))}
                    if self.runner is not None:
                        self.runner.tick(m, "online")  # the Runner logs, evaluates and counts as for every loop
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
        return self.status()
