"""The trainer: an offline phase, an online phase, evaluation, logging and resumable checkpoints.

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
loads the whole agent state. A warm-started run without offline steps evaluates the
loaded policy first (phase ``offline``), so its report has the onset dip.
``warmup_updates`` gradient updates run once on the online buffer when the online
warmup ends (PORL's pre-sample stage fits the critic there).

Reward scale/bias (``reward_scale``, ``reward_bias``) are applied once, to rewards as
they enter a buffer: :func:`robotrl.experiment.build_trainer` transforms the offline
data, the trainer every online reward, so MC returns computed by the buffers are in
the same units.

Every ``checkpoint_every`` steps the trainer writes ``checkpoints/latest.pt`` atomically
(agent state incl. optimizers, deployable policy with normalisers, resolved config, RNG
state, evaluation history, step counters) and, online, the online buffer as ``.npz``.
Starting again in the same run directory resumes where the checkpoint left off.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from robotrl.agent import Agent
from robotrl.checkpoint import load_arrays, load_checkpoint, save_arrays, save_checkpoint
from robotrl.data.mixing import MixedSampler
from robotrl.data.replay import ReplayBuffer
from robotrl.errors import CheckpointError
from robotrl.evaluation import evaluate
from robotrl.policy import act, policy_state
from robotrl.report import drop_missing, format_eval, format_onset, onset_summary, write_report
from robotrl.utd import batch_split, update_schedule
from robotrl.utils import check_schedule, get_rng_state, set_rng_state


@dataclass
class TrainerConfig:
    """Schedule of a run (all counts in gradient updates offline, env steps online)."""

    offline_steps: int = 20_000
    online_steps: int = 0
    batch_size: int = 256
    n_step: int = 1
    eval_every: int = 5_000
    eval_episodes: int = 20
    eval_envs: int = 10
    checkpoint_every: int = 5_000
    log_every: int = 250
    num_envs: int = 1
    online_buffer_size: int = 1_000_000
    online_warmup_steps: int = 1_000
    utd: int = 1
    offline_ratio: float = 0.5
    progress: bool = True
    init_from: str | None = None
    init_parts: list[str] | None = None
    warmup_updates: int = 0

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (negative budgets, zero batch, ...)."""
        check_schedule(self, "trainer", positive=("batch_size", "n_step", "eval_every", "eval_episodes", "eval_envs",
                                                  "checkpoint_every", "log_every", "num_envs", "online_buffer_size",
                                                  "utd"),
                       non_negative=("offline_steps", "online_steps", "online_warmup_steps", "warmup_updates"),
                       fractions=("offline_ratio",))


class Trainer:
    """Drives an :class:`~robotrl.agent.Agent` through the offline and online phases.

    Args:
        agent: the agent (built by Hydra from ``configs/agent``).
        run_dir: where logs, checkpoints, report and plot go.
        config: :class:`TrainerConfig`.
        offline_buffer: offline data (``None``: online only).
        make_eval_env: builds one evaluation env (flat observations).
        make_train_envs: builds the vectorised training envs (needed if ``online_steps > 0``).
        ref_scores: ``(ref_min, ref_max)`` for D4RL-normalised scores.
        seed: run seed (evaluation episodes use ``seed + 10_000``).
        run_config: the resolved config, stored in checkpoints and the report.
        title: a short name of the run for the report.
        reward_scale, reward_bias: online rewards are stored as ``scale·r + bias`` (the
            offline buffer must hold data transformed the same way).
        mc_sparse_fill: Cal-QL's never-solved fill for the online buffer, in transformed
            units (``None``: the offline buffer's setting).
        gamma: discount of the online buffer's n-step sums and MC returns (``None``: the
            offline buffer's, else 0.99).
    """

    def __init__(
        self,
        agent: Agent,
        run_dir: str | Path,
        config: TrainerConfig,
        *,
        offline_buffer: ReplayBuffer | None,
        make_eval_env: Callable[[], gym.Env],
        make_train_envs: Callable[[], gym.vector.VectorEnv] | None = None,
        ref_scores: tuple[float, float] | None = None,
        seed: int = 0,
        run_config: dict | None = None,
        title: str = "",
        reward_scale: float = 1.0,
        reward_bias: float = 0.0,
        mc_sparse_fill: float | None = None,
        gamma: float | None = None,
    ):
        self.agent, self.cfg = agent, config
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.offline, self.make_eval_env, self.make_train_envs = offline_buffer, make_eval_env, make_train_envs
        self.ref_scores, self.seed = ref_scores, seed
        self.run_config = run_config or {}
        self.title = title
        self.reward_scale, self.reward_bias, self.mc_sparse_fill = float(reward_scale), float(reward_bias), mc_sparse_fill
        self.gamma = gamma
        self.history: list[dict] = []
        self.step = 0  # offline updates done, then offline_steps + online env steps
        self.updates = 0
        self.online: ReplayBuffer | None = None
        self._ready = False  # the online buffer can feed updates (stays so: ended episodes stay ended)
        self.wall_time = 0.0
        self._writer = None
        if config.online_steps > 0 and make_train_envs is None:
            raise ValueError("online_steps > 0 needs make_train_envs (the training env factory)")
        if self.offline is None and config.offline_steps > 0:
            raise ValueError("offline_steps > 0 needs an offline buffer (a dataset)")
        self.schedule = update_schedule(batch_split(agent), config.utd, config.batch_size)  # robotrl.utd: ConfigError

    # ------------------------------------------------------------------ logging
    @property
    def writer(self):
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=self.step or None)
        return self._writer

    def _log(self, prefix: str, metrics: dict, step: int) -> None:
        for k, v in metrics.items():
            v = float(v.item() if torch.is_tensor(v) else v)
            if np.isfinite(v):
                self.writer.add_scalar(f"{prefix}/{k}", v, step)

    def _evaluate(self, phase: str) -> dict:
        t = time.time()
        res = evaluate(lambda o: act(self.agent.policy, o), self.make_eval_env, self.cfg.eval_episodes,
                       seed=self.seed + 10_000, num_envs=self.cfg.eval_envs, ref_scores=self.ref_scores,
                       reset_policy=self.agent.policy.reset)
        res.update(phase=phase, step=self.step, updates=self.updates, eval_seconds=time.time() - t)
        self.history.append(res)
        self._log("eval", {k: v for k, v in res.items() if isinstance(v, float)}, self.step)
        self.writer.flush()
        if self.cfg.progress:
            from tqdm.auto import tqdm

            tqdm.write(format_eval(res))
        return res

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write ``checkpoints/latest.pt`` (and the online buffer) atomically."""
        state = {
            "format": 1,
            "step": self.step,
            "updates": self.updates,
            "wall_time": self.wall_time,
            "agent": self.agent.state_dict(),
            "policy": policy_state(self.agent.policy),
            "rng": get_rng_state(),
            "sampler_rng": {name: buf.rng.bit_generator.state for name, buf in
                            (("offline", self.offline), ("online", self.online)) if buf is not None},
            "history": self.history,
            "config": self.run_config,
            "trainer": asdict(self.cfg),
        }
        if self.online is not None:
            save_arrays(self.ckpt_dir / "online_buffer.npz",
                        {k: np.asarray(v) for k, v in self.online.state_dict().items()})
        return save_checkpoint(self.ckpt_dir / "latest.pt", state)

    def try_resume(self) -> bool:
        """Load ``checkpoints/latest.pt`` if present; returns whether a run was resumed.

        Raises:
            CheckpointError: the checkpoint exists but is corrupt or from another agent.
        """
        path = self.ckpt_dir / "latest.pt"
        if not path.exists():
            return False
        state = load_checkpoint(path, map_location=self.agent.policy.obs_normalizer.mean.device)
        try:
            self.agent.load_state_dict(state["agent"])
        except (KeyError, RuntimeError, ValueError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit this agent ({exc}); use another run_dir") from exc
        self.step, self.updates = int(state["step"]), int(state["updates"])
        self.wall_time = float(state.get("wall_time", 0.0))
        self.history = list(state["history"])
        set_rng_state(state["rng"])
        buf = self.ckpt_dir / "online_buffer.npz"
        if self.step > self.cfg.offline_steps and buf.exists():
            self.online = self._new_online_buffer()
            self.online.load_state_dict(load_arrays(buf))
        for name, rng_state in state.get("sampler_rng", {}).items():
            target = self.offline if name == "offline" else self.online
            if target is not None:
                target.rng.bit_generator.state = rng_state
        return True

    # ------------------------------------------------------------------ phases
    def _offline_phase(self, bar) -> None:
        cfg = self.cfg
        while self.step < cfg.offline_steps:
            sample = getattr(self.agent, "sample_batch", None)  # agents with their own sampling (sequences)
            n = self.schedule.sampled_batch
            batch = sample(self.offline, n) if sample else self.offline.sample(n, n_step=cfg.n_step)
            metrics = self.agent.update(batch, self.step)
            self.step += 1
            self.updates += 1
            self._periodic(metrics, "offline", bar)

    def _new_online_buffer(self) -> ReplayBuffer:
        ref = self.offline
        od, ad = (ref.obs_dim, ref.action_dim) if ref is not None else (
            int(np.prod(self.agent.policy.obs_dim)), int(self.agent.policy.action_dim))
        gamma = self.gamma if self.gamma is not None else getattr(ref, "gamma", 0.99)
        fill = self.mc_sparse_fill if self.mc_sparse_fill is not None else getattr(ref, "mc_sparse_fill", None)
        return ReplayBuffer(min(self.cfg.online_buffer_size, max(self.cfg.online_steps, 1) * self.cfg.num_envs),
                            od, ad, gamma=gamma, num_envs=self.cfg.num_envs, mc_sparse_fill=fill,
                            seed=self.seed + 1, device=getattr(ref, "device", "cpu"))

    def _online_phase(self, bar) -> None:
        cfg = self.cfg
        if self.online is None:
            self.online = self._new_online_buffer()
        self.online.end_open_episodes()  # on resume the envs restart: never link to a pre-kill episode
        start_online = getattr(self.agent, "start_online", None)  # e.g. Cal-QL offline -> SAC online (WSRL)
        if start_online is not None:
            start_online()
        sampler = MixedSampler(self.offline, self.online, cfg.offline_ratio) if self.offline is not None and cfg.offline_ratio > 0 else None
        envs = self.make_train_envs()
        try:
            obs, _ = envs.reset(seed=self.seed + self.step)
            resetting = np.zeros(cfg.num_envs, bool)
            end = cfg.offline_steps + cfg.online_steps
            while self.step < end:
                actions = self.agent.explore(obs)
                next_obs, rew, term, trunc, _ = envs.step(actions)
                live = np.flatnonzero(~resetting)  # next-step autoreset: skip envs that only reset
                rew = self.reward_scale * np.asarray(rew, np.float32) + self.reward_bias
                self.online.add(obs[live], actions[live], rew[live], next_obs[live], term[live], trunc[live], env_ids=live)
                resetting = term | trunc
                obs = next_obs
                self.step += 1
                metrics = {}
                if self.step - cfg.offline_steps == cfg.online_warmup_steps + 1 and cfg.warmup_updates > 0 \
                        and self._online_ready():
                    for _ in range(cfg.warmup_updates):  # pre-sample stage: fit on the warmup data once
                        metrics = self.agent.update(self._online_batch(sampler), self.step)
                        self.updates += 1
                if self.step - cfg.offline_steps > cfg.online_warmup_steps and self._online_ready():
                    for _ in range(self.schedule.calls_per_step):
                        metrics = self.agent.update(self._online_batch(sampler), self.step)
                        self.updates += 1
                self._periodic(metrics, "online", bar)
        finally:
            envs.close()

    @property
    def _needs_mc(self) -> bool:
        """Whether the agent's updates use MC returns-to-go (Cal-QL): then online rows come only
        from ended episodes, and updates wait for the first one (never a ``-inf`` bound)."""
        return bool(getattr(self.agent, "needs_mc_returns", False))

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

    def init_from(self, source: str, parts: list[str] | None = None) -> None:
        """Load a pretrained agent's state (file or run directory) into this run's agent.

        Raises:
            CheckpointError: unreadable checkpoint, or its state does not fit the agent.
        """
        state = load_checkpoint(source, map_location=self.agent.policy.obs_normalizer.mean.device)
        try:
            if parts is None:
                self.agent.load_state_dict(state["agent"])
            else:
                self.agent.load_parts(state["agent"], list(parts))
        except (KeyError, RuntimeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"init_from {source}: its agent state does not fit this agent ({exc})") from exc

    def _periodic(self, metrics: dict, phase: str, bar) -> None:
        cfg = self.cfg
        bar.update(1)
        if metrics and self.step % cfg.log_every == 0:
            self._log(f"train_{phase}", metrics, self.step)
            bar.set_postfix({k: f"{float(v):.3g}" for k, v in list(metrics.items())[:3]})
        if self.step % cfg.eval_every == 0:
            self._evaluate(phase)
        if self.step % cfg.checkpoint_every == 0:
            self.wall_time += time.time() - self._t0
            self._t0 = time.time()
            self.save()

    # ------------------------------------------------------------------ run
    def fit(self) -> dict:
        """Run (or resume) both phases, evaluate, checkpoint, and write the report.

        Returns:
            The summary dict (also in ``report.json``), with ``report_paths``.
        """
        from tqdm.auto import tqdm

        self.run_dir.mkdir(parents=True, exist_ok=True)
        resumed = self.try_resume()
        if not resumed and self.cfg.init_from:
            self.init_from(self.cfg.init_from, self.cfg.init_parts)
            if self.cfg.offline_steps == 0 and self.cfg.online_steps > 0:
                self._evaluate("offline")  # the warm-started policy: the reference of the onset dip
        total = self.cfg.offline_steps + self.cfg.online_steps
        self._t0 = time.time()
        with tqdm(total=total, initial=self.step, desc=self.title or "train", disable=not self.cfg.progress,
                  dynamic_ncols=True) as bar:
            if self.step < self.cfg.offline_steps:
                self._offline_phase(bar)
            if self.step < total:
                self._online_phase(bar)
        if not self.history or self.history[-1]["step"] != self.step:
            self._evaluate("online" if self.step > self.cfg.offline_steps else "offline")
        self.wall_time += time.time() - self._t0
        self._t0 = time.time()
        self.save()
        summary = self._summary(resumed)
        self.writer.close()
        paths = write_report(self.run_dir, summary=summary, history=self.history, config=self.run_config)
        summary["report_paths"] = {k: str(v) for k, v in paths.items()}
        return summary

    def _summary(self, resumed: bool) -> dict:
        final = self.history[-1]
        offline = [h for h in self.history if h["phase"] == "offline"]
        out = {
            "title": self.title,
            "final_return": final["return_mean"],
            "final_normalized_score": final["normalized_score"],
            "final_success_rate": final["success_rate"],
            "final_success_any_rate": final.get("success_any_rate", final["success_rate"]),
            "success_metric": final.get("success_metric", "n/a"),
            "offline_steps": self.cfg.offline_steps,
            "online_steps": self.cfg.online_steps,
            "gradient_updates": self.updates,
            "wall_time_s": round(self.wall_time, 1),
            "resumed": resumed,
            "run_dir": str(self.run_dir),
        }
        if offline:
            out["offline_return"] = offline[-1]["return_mean"]
            out["offline_normalized_score"] = offline[-1]["normalized_score"]
            out["offline_success_rate"] = offline[-1]["success_rate"]
        out.update(onset_summary(self.history, online_start=self.cfg.offline_steps,
                                 first_update=self.cfg.online_warmup_steps, budget=self.cfg.online_steps))
        dips = {k: v for k, v in out.items() if k.startswith("onset_dip_")}
        if dips:
            self._log("summary", dips, self.step)
            line = format_onset(out)
            if self.cfg.progress and line:
                print(line, flush=True)
        return drop_missing(out)
