"""The off-policy loop: an offline phase, then an online phase (run by :class:`~robotrl.runner.Runner`).

Offline phase: ``offline_steps`` gradient updates on batches from the offline buffer.
Online phase: ``online_steps`` env steps in ``num_envs`` vectorised envs with
``agent.explore``; transitions go to an online :class:`~robotrl.data.ReplayBuffer`
(``terminated`` and ``truncated`` kept apart); after ``online_warmup_steps`` env steps,
``utd`` critic updates per env step (:mod:`robotrl.utd`: ``batch_size`` is the minibatch, the
sampled batch is derived) on batches mixed from offline and online data at
``offline_ratio`` (exact per batch, :class:`~robotrl.data.MixedSampler`). Agents whose
updates use MC returns-to-go (``agent.needs_mc_returns``: Cal-QL) sample online rows only
from ended episodes and start updating once the first online episode has ended.

Warm starts: ``init_from`` (a checkpoint file or run directory) loads a pretrained
agent's state into a fresh run before its first step (never on resume); ``init_parts``
picks parts through the agent's ``load_parts`` (e.g. ``[policy]`` for PORL), ``None``
loads the whole agent state (:func:`robotrl.warmstart.warm_start`, done by the runner). A warm-started run without offline steps evaluates the
loaded policy first (phase ``offline``), so its report has the onset dip.
``warmup_updates`` gradient updates run once on the online buffer when the online
warmup ends (PORL's pre-sample stage fits the critic there).

Reward scale/bias (``reward_scale``, ``reward_bias``) are applied once, to rewards as
they enter a buffer: :func:`robotrl.experiment.build_trainer` transforms the offline
data, the trainer every online reward, so MC returns computed by the buffers are in
the same units.

``forgetting_starts > 0``: the policy at the online start is kept (also in checkpoints) and, when the
online phase ends, the forgetting metric (:func:`robotrl.evaluation.forgetting_report`) compares it with
the final policy from the held-out resets farthest from the online buffer; the report gets ``forgetting``,
``forgetting_near`` and ``forgetting_detail``.

Evaluation, TensorBoard, checkpoints and resume are the :class:`~robotrl.runner.Runner`'s;
this loop adds its step counters and sampler generators to every checkpoint and, online,
the online buffer (``checkpoints/online_buffer.npz``). Starting again in the same run
directory resumes where the checkpoint left off. :func:`Trainer` builds the runner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from robotrl.agent import OffPolicyAgent, agent_device
from robotrl.checkpoint import load_arrays, save_arrays
from robotrl.data.mixing import MixedSampler
from robotrl.data.replay import ReplayBuffer
from robotrl.errors import ConfigError
from robotrl.evaluation import forgetting_report
from robotrl.policy import act, build_policy, policy_state
from robotrl.runner import Runner
from robotrl.schema import TrainerConfig  # noqa: F401  (re-exported: robotrl.trainer.TrainerConfig)
from robotrl.utd import batch_split, update_schedule

if TYPE_CHECKING:
    from robotrl.data.her import GoalRelabeler
    from robotrl.vision.obs import PixelLayout


class OffPolicyLoop:
    """Offline updates, then env steps into an online buffer with ``utd`` updates each (module doc).

    The :class:`~robotrl.runner.Runner` holding it evaluates, logs and checkpoints; its clock
    is ``step`` (offline updates, then ``offline_steps`` + online env steps).

    Args:
        agent: the agent (built by Hydra from ``configs/agent``).
        config: :class:`TrainerConfig`.
        offline_buffer: offline data (``None``: online only).
        make_train_envs: builds the vectorised training envs (needed if ``online_steps > 0``).
        seed: run seed (online env resets use ``seed + step``, the online buffer ``seed + 1``).
        reward_scale, reward_bias: online rewards are stored as ``scale·r + bias`` (the
            offline buffer must hold data transformed the same way).
        mc_sparse_fill: Cal-QL's never-solved fill for the online buffer, in transformed
            units (``None``: the offline buffer's setting).
        gamma: discount of the online buffer's n-step sums and MC returns (``None``: the
            offline buffer's, else 0.99).
        goal_relabeler: HER relabelling of both buffers' batches (:class:`robotrl.data.her.GoalRelabeler`, from
            ``trainer.her_ratio``); ``None``: off.
        obs_layout: how the training envs' ``Dict`` observations with cameras split into the flat
            state ``(N, Ds)`` and the frames ``{key: uint8 (N, H, W, C)}``
            (:class:`~robotrl.vision.obs.PixelLayout`); the online buffer then stores each frame once
            beside the state (:class:`~robotrl.data.ReplayBuffer` ``image_shapes``) and ``agent.explore``
            gets the raw observations. ``None``: flat observations ``(N, Do)``.

    Raises:
        ValueError: ``online_steps > 0`` without ``make_train_envs``, or ``offline_steps > 0``
            without an offline buffer.
        ConfigError: a relabeller with an agent that reads MC returns, or with offline data whose rewards are not
            the task's (:meth:`robotrl.data.her.GoalRelabeler.check`); ``forgetting_starts`` with cameras.
    """

    def __init__(self, agent: OffPolicyAgent, config: TrainerConfig, *, offline_buffer: ReplayBuffer | None,
                 make_train_envs: Callable[[], gym.vector.VectorEnv] | None = None, seed: int = 0,
                 reward_scale: float = 1.0, reward_bias: float = 0.0, mc_sparse_fill: float | None = None,
                 gamma: float | None = None, obs_layout: PixelLayout | None = None,
                 goal_relabeler: GoalRelabeler | None = None):
        self.agent, self.cfg = agent, config
        self.relabeler = goal_relabeler
        self.offline, self.make_train_envs, self.seed = offline_buffer, make_train_envs, seed
        self.reward_scale, self.reward_bias, self.mc_sparse_fill = float(reward_scale), float(reward_bias), mc_sparse_fill
        self.gamma, self.obs_layout = gamma, obs_layout
        self.step = 0  # offline updates done, then offline_steps + online env steps
        self.updates = 0
        self.online: ReplayBuffer | None = None
        self._ready = False  # the online buffer can feed updates (stays so: ended episodes stay ended)
        self._reference: dict | None = None  # the policy at the online start (forgetting_starts > 0)
        self._forgetting: dict | None = None
        if config.forgetting_starts > 0 and obs_layout is not None:
            raise ConfigError("trainer.forgetting_starts measures forgetting from state observations; this run has "
                              "cameras: set trainer.forgetting_starts=0")
        if config.online_steps > 0 and make_train_envs is None:
            raise ValueError("online_steps > 0 needs make_train_envs (the training env factory)")
        if self.offline is None and config.offline_steps > 0:
            raise ValueError("offline_steps > 0 needs an offline buffer (a dataset)")
        self.schedule = update_schedule(batch_split(agent), config.utd, config.batch_size)  # robotrl.utd: ConfigError
        if goal_relabeler is not None:
            if self._needs_mc:
                raise ConfigError("HER (trainer.her_ratio > 0) relabels goals, whose Monte-Carlo returns the data does "
                                  "not hold, and this agent's updates read them (Cal-QL): set trainer.her_ratio=0")
            if self.offline is not None:
                goal_relabeler.check(self.offline)  # the stored rewards are this task's, in the buffers' units
                self.offline.relabeler = goal_relabeler

    # ------------------------------------------------------------------ Loop protocol
    @property
    def clock(self) -> int:
        """The cadence counter: ``step``."""
        return self.step

    @property
    def total(self) -> int:
        """``offline_steps + online_steps``."""
        return self.cfg.offline_steps + self.cfg.online_steps

    @property
    def log_every(self) -> int:
        """Training metrics every ``trainer.log_every`` steps."""
        return self.cfg.log_every

    def phase(self) -> str:
        """``"online"`` once past the offline steps."""
        return "online" if self.step > self.cfg.offline_steps else "offline"

    def start(self, runner: Runner, warm_started: bool) -> None:
        """A warm-started run without offline steps evaluates the loaded policy first (phase
        ``offline``): the reference of the onset dip."""
        if not warm_started and self.offline is not None and self.cfg.offline_steps > 0:
            self.agent.init_from_data(self.offline)
        if warm_started and self.cfg.offline_steps == 0 and self.cfg.online_steps > 0:
            runner.evaluate("offline")

    def run(self, runner: Runner) -> None:
        """Both phases until ``offline_steps + online_steps``."""
        if self.step < self.cfg.offline_steps:
            self._offline_phase(runner)
        if self.step < self.total:
            self._online_phase(runner)
            self._measure_forgetting(runner)

    def _measure_forgetting(self, runner: Runner) -> None:
        """The forgetting metric of the online phase that just ended (``forgetting_starts > 0``)."""
        if not self.cfg.forgetting_starts or self._reference is None or runner.make_eval_env is None \
                or self.online is None or len(self.online) == 0:
            return
        pretrained = build_policy(self._reference, device=agent_device(self.agent))
        self._forgetting = forgetting_report(
            lambda o: act(pretrained, o), lambda o: act(self.agent.policy.eval(), o), runner.make_eval_env,
            self.online.observations[: self.online.size], num_starts=self.cfg.forgetting_starts,
            ref_scores=runner.ref_scores, num_envs=self.cfg.eval_envs)
        runner.print(f"forgetting (start-of-online minus final policy, {self._forgetting['score']}) on the "
                     f"{self._forgetting['num_far']} held-out resets farthest from the online data: "
                     f"{self._forgetting['forgetting']:+.2f} (nearer ones: {self._forgetting['forgetting_near']:+.2f})")

    def state_dict(self, ckpt_dir: Path) -> dict:
        """Sampler generators; writes the online buffer to ``ckpt_dir/online_buffer.npz``."""
        if self.online is not None:
            save_arrays(ckpt_dir / "online_buffer.npz", {k: np.asarray(v) for k, v in self.online.state_dict().items()})
        out: dict = {"sampler_rng": {name: buf.rng.bit_generator.state for name, buf in
                                     (("offline", self.offline), ("online", self.online)) if buf is not None}}
        if self._reference is not None:
            out["forgetting_reference"] = self._reference
        return out

    def load_state_dict(self, state: dict, ckpt_dir: Path) -> None:
        """The online buffer (past the offline phase) and the sampler generators.

        Raises:
            CheckpointError: the online buffer file is corrupt.
        """
        buf = ckpt_dir / "online_buffer.npz"
        if self.step > self.cfg.offline_steps and buf.exists():
            self.online = self._new_online_buffer()
            self.online.load_state_dict(load_arrays(buf))
        self._reference = state.get("forgetting_reference", self._reference)
        for name, rng_state in state.get("sampler_rng", {}).items():
            target = self.offline if name == "offline" else self.online
            if target is not None:
                target.rng.bit_generator.state = rng_state

    def summary(self, history: list[dict]) -> dict:
        """Budgets, gradient updates, the last offline evaluation; onset window from the online start."""
        out = {"offline_steps": self.cfg.offline_steps, "online_steps": self.cfg.online_steps,
               "gradient_updates": self.updates}
        offline = [h for h in history if h["phase"] == "offline" and "return_mean" in h]  # rollouts, not validation
        if offline:
            out["offline_return"] = offline[-1]["return_mean"]
            out["offline_normalized_score"] = offline[-1]["normalized_score"]
            out["offline_success_rate"] = offline[-1]["success_rate"]
        out["onset"] = {"online_start": self.cfg.offline_steps, "first_update": self.cfg.online_warmup_steps,
                        "budget": self.cfg.online_steps}
        if self._forgetting is not None:
            f = self._forgetting
            out.update(forgetting=f["forgetting"], forgetting_near=f["forgetting_near"],
                       forgetting_success=f["forgetting_success"], forgetting_detail=f)
        return out

    # ------------------------------------------------------------------ phases
    def _offline_phase(self, runner: Runner) -> None:
        cfg = self.cfg
        while self.step < cfg.offline_steps:
            n = self.schedule.sampled_batch
            batch = self.agent.sample_batch(self.offline, n)  # agents with their own sampling (sequences)
            if batch is None:
                batch = self.offline.sample(n, n_step=cfg.n_step)
            metrics = self.agent.update(batch, self.step)
            self.step += 1
            self.updates += 1
            runner.tick(metrics, "offline")

    def _new_online_buffer(self) -> ReplayBuffer:
        ref, layout = self.offline, self.obs_layout
        od, ad = (ref.obs_dim, ref.action_dim) if ref is not None else (
            layout.state_dim if layout is not None else int(np.prod(self.agent.policy.obs_dim)),
            int(self.agent.policy.action_dim))
        gamma = self.gamma if self.gamma is not None else (ref.gamma if ref is not None else 0.99)
        fill = self.mc_sparse_fill if self.mc_sparse_fill is not None else (
            ref.mc_sparse_fill if ref is not None else None)
        buf = ReplayBuffer(min(self.cfg.online_buffer_size, max(self.cfg.online_steps, 1) * self.cfg.num_envs),
                           od, ad, gamma=gamma, num_envs=self.cfg.num_envs, mc_sparse_fill=fill,
                           seed=self.seed + 1, device=ref.device if ref is not None else "cpu",
                           image_shapes=layout.image_shapes if layout is not None else None,
                           frame_stack=int(self.agent.frame_stack), extra_dims=self._transition_fields())
        buf.relabeler = self.relabeler
        return buf

    def _transition_fields(self) -> dict[str, int]:
        """Float fields the agent records per transition (the declared hook ``agent.transition_fields``, e.g. a
        residual agent's executed base action; ``agent.explore_extras()`` gives them for each explore call); the
        offline buffer gets them as NaN (unknown)."""
        fields = dict(self.agent.transition_fields)
        if self.offline is not None:
            for name, d in fields.items():
                self.offline.add_extra_field(name, d)
        return fields

    def begin_online(self) -> MixedSampler | None:
        """Prepare the online phase, before its first env step (also on resume): the online buffer (a resumed
        one's open episodes ended: the envs restart), the agent's offline data and online start, the forgetting
        metric's reference policy; returns the offline/online sampler (``None``: online data only). Loops that
        drive this loop's steps themselves (:class:`robotrl.reset_free.ResetFreeLoop`) call it too."""
        if self.online is None:
            self.online = self._new_online_buffer()
        self.online.end_open_episodes()  # on resume the envs restart: never link to a pre-kill episode
        if self.offline is not None:
            self.agent.attach_offline_data(self.offline)  # e.g. knowledge retention's BC / replay
        self.agent.start_online()  # e.g. Cal-QL offline -> SAC online (WSRL)
        if self.cfg.forgetting_starts and self._reference is None:  # the policy the online phase starts from
            ref = policy_state(self.agent.policy)
            self._reference = {**ref, "state_dict": {k: v.detach().clone() for k, v in ref["state_dict"].items()}}
        if self.offline is not None and self.cfg.offline_ratio > 0:
            return MixedSampler(self.offline, self.online, self.cfg.offline_ratio)
        return None

    def _online_phase(self, runner: Runner) -> None:
        cfg = self.cfg
        sampler = self.begin_online()
        envs = self.make_train_envs()
        try:
            obs, _ = envs.reset(seed=self.seed + self.step)
            self.episodes_start(np.arange(cfg.num_envs))
            resetting = np.zeros(cfg.num_envs, bool)
            while self.step < self.total:
                obs, resetting = self.env_step(envs, obs, resetting)
                runner.tick(self.online_updates(sampler), "online")
        finally:
            envs.close()

    def _split(self, obs, rows: np.ndarray) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """Rows ``rows`` of a batch of observations as ``(flat (n, Do), frames {key: (n, H, W, C)} or None)``."""
        if self.obs_layout is None:
            return obs[rows], None
        state, frames = self.obs_layout.split(obs)
        return state[rows], {k: v[rows] for k, v in frames.items()}

    def env_step(self, envs, obs, resetting: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """One vector step with ``agent.explore`` into the online buffer; returns ``(next obs, resetting)``."""
        actions = self.agent.explore(obs)
        extras = self.agent.explore_extras() if self.online.extra else None
        next_obs, rew, term, trunc, _ = envs.step(actions)
        live = np.flatnonzero(~resetting)  # next-step autoreset: skip envs that only reset
        rew = self.reward_scale * np.asarray(rew, np.float32) + self.reward_bias
        (s, im), (s2, im2) = self._split(obs, live), self._split(next_obs, live)
        self.online.add(s, actions[live], rew[live], s2, term[live], trunc[live], env_ids=live, images=im,
                        next_images=im2, extras=None if extras is None else {k: v[live] for k, v in extras.items()})
        self.episodes_start(np.flatnonzero(resetting))  # those envs only reset: next_obs starts their episode
        self.step += 1
        return next_obs, term | trunc

    def episodes_start(self, env_ids: np.ndarray) -> None:
        """Tell an agent that keeps per-env exploration state (a pixel agent's frame stacks: ``reset_explore``)
        that the episodes of ``env_ids`` start with the observations the envs just returned."""
        if env_ids.size:
            self.agent.reset_explore(env_ids)

    def online_updates(self, sampler) -> dict:
        """The updates due after an env step: the warmup updates once, then the UTD schedule's calls
        (:mod:`robotrl.utd`); returns the last metrics."""
        cfg, metrics = self.cfg, {}
        online_step = self.step - cfg.offline_steps
        if online_step == cfg.online_warmup_steps + 1 and cfg.warmup_updates > 0 and self._online_ready():
            for _ in range(cfg.warmup_updates):  # pre-sample stage: fit on the warmup data once
                metrics = self.agent.update(self._online_batch(sampler), self.step)
                self.updates += 1
        if online_step > cfg.online_warmup_steps and self._online_ready():
            for _ in range(self.schedule.calls_per_step):
                metrics = self.agent.update(self._online_batch(sampler), self.step)
                self.updates += 1
        return metrics

    @property
    def _needs_mc(self) -> bool:
        """Whether the agent's updates use MC returns-to-go (Cal-QL): then online rows come only
        from ended episodes, and updates wait for the first one (never a ``-inf`` bound)."""
        return bool(self.agent.needs_mc_returns)

    def _online_ready(self) -> bool:
        if not self._ready:  # checked every env step: scan the buffer only until the answer is yes
            self._ready = (self.online.complete_indices().size if self._needs_mc else len(self.online)) > 0
        return self._ready

    def _online_batch(self, sampler):
        n, mc = self.schedule.sampled_batch, self._needs_mc
        if sampler:
            return sampler.sample(n, step=self.step, n_step=self.cfg.n_step, complete_only=mc)
        have = self.online.complete_indices().size if mc else len(self.online)
        return self.online.sample(min(n, have), n_step=self.cfg.n_step, complete_only=mc)


def Trainer(agent: OffPolicyAgent, run_dir: str | Path, config: TrainerConfig, *, offline_buffer: ReplayBuffer | None,
            make_eval_env: Callable[[], gym.Env] | None, make_train_envs: Callable[[], gym.vector.VectorEnv] | None = None,
            ref_scores: tuple[float, float] | None = None, seed: int = 0, run_config: dict | None = None,
            title: str = "", validator: Callable[..., dict] | None = None, **loop_kwargs) -> Runner:
    """A :class:`~robotrl.runner.Runner` driving an :class:`OffPolicyLoop` (the off-policy trainer).

    Args:
        agent, config, offline_buffer, make_train_envs, seed: as :class:`OffPolicyLoop`.
        run_dir, make_eval_env, ref_scores, run_config, title, validator: as :class:`~robotrl.runner.Runner`
            (a run without an env: ``make_eval_env=None`` and a :class:`robotrl.validation.Validator`).
        loop_kwargs: ``reward_scale``, ``reward_bias``, ``mc_sparse_fill``, ``gamma``, ``obs_layout``,
            ``goal_relabeler`` of the loop.

    Raises:
        ValueError: as :class:`OffPolicyLoop`.
    """
    loop = OffPolicyLoop(agent, config, offline_buffer=offline_buffer, make_train_envs=make_train_envs, seed=seed,
                         **loop_kwargs)
    return Runner(loop, run_dir, make_eval_env=make_eval_env, ref_scores=ref_scores, seed=seed,
                  run_config=run_config, title=title, init_from=config.init_from, init_parts=config.init_parts,
                  validator=validator)
