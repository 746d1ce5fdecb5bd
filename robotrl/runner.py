"""The run shell: evaluation, TensorBoard, checkpoints, resume, report and progress around a loop.

A :class:`Runner` holds a *loop* — the part that turns data into updates — and does
everything else a run needs, the same way for every loop:

- evaluation of ``agent.policy`` in ``make_eval_env`` (history entries with ``phase``,
  ``step``, ``updates``), printed and logged to TensorBoard (``run_dir/tb``);
- ``checkpoints/latest.pt`` written atomically: agent state (incl. optimizers and its
  generators), deployable policy, resolved config, every global RNG
  (:func:`~robotrl.utils.get_rng_state`), the loop's own state (step counters, sampler
  generators, running statistics such as the reward scaler, buffers), history, wall time;
- resume: a run directory with a checkpoint goes on where it left off; a checkpoint that
  cannot be read or does not fit the agent raises :class:`~robotrl.errors.CheckpointError`;
- ``keep_best`` (a loop config flag, ``trainer.keep_best``): ``checkpoints/best.pt`` holds the
  deployable policy of the best evaluation so far (:meth:`Runner.keep_best`), for a user who
  keeps the best policy rather than the last;
- provenance (:mod:`robotrl.provenance`): one hardware record per segment (start, each resume) in the
  checkpoint, ``run_dir/provenance.json`` and the summary;
- the report (:func:`~robotrl.report.write_report`) with the onset dip
  (:func:`~robotrl.report.onset_summary`), and a progress display.

Two loops implement :class:`Loop`: :class:`robotrl.trainer.OffPolicyLoop` (offline
updates, then env steps into a replay buffer) and :class:`robotrl.onpolicy.OnPolicyLoop`
(rollouts → ``agent.update_rollout``). A loop calls :meth:`Runner.tick` after each unit of
its clock (a gradient update or env step off-policy, an iteration on-policy); the runner
evaluates every ``cfg.eval_every`` and checkpoints every ``cfg.checkpoint_every`` clock
units.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch

from robotrl.agent import agent_device
from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.errors import CheckpointError, RunDirInUseError
from robotrl.evaluation import evaluate
from robotrl.files import DirLock
from robotrl.logging_wandb import logger_name
from robotrl.policy import act, policy_state
from robotrl.progress import Progress, emit
from robotrl.provenance import ProvenanceLog
from robotrl.report import drop_missing, format_eval, format_onset, onset_summary, write_report
from robotrl.utils import get_rng_state, log_run_config, set_rng_state
from robotrl.warmstart import warm_start


class Loop(Protocol):
    """What a :class:`Runner` drives (see :class:`robotrl.trainer.OffPolicyLoop`,
    :class:`robotrl.onpolicy.OnPolicyLoop`).

    Attributes:
        agent: the agent (``policy``, ``state_dict``/``load_state_dict``).
        cfg: a dataclass with ``eval_every``, ``checkpoint_every`` (in clock units), ``eval_episodes``,
            ``eval_envs``, ``eval_seed`` (read when evaluating in an env), ``progress`` and ``keep_best``.
        step: the run's x-axis (checkpoint ``step``, TensorBoard step, history ``step``).
        updates: gradient updates (off-policy) or iterations (on-policy) done.
        clock: the counter the cadences count in; ``total``: its budget; ``log_every``: clock
            units between two logs of the training metrics.
    """

    agent: Any
    cfg: Any
    step: int
    updates: int

    @property
    def clock(self) -> int: ...

    @property
    def total(self) -> int: ...

    @property
    def log_every(self) -> int: ...

    def start(self, runner: Runner, warm_started: bool) -> None:
        """First start only (never on resume), after the runner's warm start (``warm_started``):
        pretraining, the first evaluation."""

    def run(self, runner: Runner) -> None:
        """Train until the budget is spent, calling ``runner.tick`` after each clock unit."""

    def phase(self) -> str:
        """``"offline"`` or ``"online"``: the phase the loop is in now."""

    def state_dict(self, ckpt_dir: Path) -> dict:
        """The loop's state for the checkpoint (tensors/containers); may write files to ``ckpt_dir``."""

    def load_state_dict(self, state: dict, ckpt_dir: Path) -> None:
        """Inverse of :meth:`state_dict` (``state``: the whole checkpoint)."""

    def summary(self, history: list[dict]) -> dict:
        """Loop-specific summary fields, and ``onset``: kwargs of :func:`~robotrl.report.onset_summary`."""


class Runner:
    """Evaluation, TensorBoard, checkpoints, resume, report and progress around a :class:`Loop`.

    Args:
        loop: the training loop (holds the agent and its schedule ``loop.cfg``).
        run_dir: where logs, checkpoints, report and plot go.
        make_eval_env: builds one evaluation env (flat observations, single-step actions).
        ref_scores: ``(ref_min, ref_max)`` for D4RL-normalised scores.
        seed: run seed (evaluation episodes reset with ``seed + 10_000 + i``, or ``cfg.eval_seed + i`` when the
            schedule sets it: :meth:`eval_seed`).
        run_config: the resolved config, stored in checkpoints and the report.
        title: a short name of the run for the report and the progress display.
        init_from, init_parts: warm start of a new run (never on resume): checkpoint file or
            run directory, and the parts to load (:func:`~robotrl.warmstart.warm_start`).
        evaluator: :func:`~robotrl.evaluation.evaluate`'s signature, run on ``agent.policy``
            (default: that function; :func:`robotrl.distributed.evaluation.ray_evaluator`: on Ray).
        validator: ``agent -> metrics`` measuring the agent on held-out data instead of rollouts
            (:class:`robotrl.validation.Validator`: a run without an env, ``make_eval_env=None``).

    Attributes not found on the runner are read from the loop (``runner.cfg``,
    ``runner.offline``, ``runner.step``, ...).
    """

    def __init__(self, loop: Loop, run_dir: str | Path, *, make_eval_env: Callable[[], gym.Env] | None,
                 ref_scores: tuple[float, float] | None = None, seed: int = 0, run_config: dict | None = None,
                 title: str = "", init_from: str | Path | None = None, init_parts: list[str] | None = None,
                 evaluator: Callable[..., dict] | None = None, validator: Callable[[Any], dict] | None = None):
        if make_eval_env is None and validator is None:
            raise ValueError("a Runner evaluates in an env (make_eval_env) or on held-out data (validator): give one")
        self.validator = validator
        self._prepared: bool | None = None  # set by prepare()
        self.loop = loop
        self.evaluator = evaluator or evaluate
        self.best: dict | None = None  # keep_best: {"metric", "score", "step"} of checkpoints/best.pt
        self.warm_source, self.warm_parts = init_from, init_parts
        self.run_dir = Path(run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.make_eval_env, self.ref_scores, self.seed = make_eval_env, ref_scores, seed
        self.run_config, self.title = run_config or {}, title
        self.history: list[dict] = []
        self.wall_time = 0.0
        self._t0 = time.time()
        self._writer = None
        self._wandb: Any = None  # logger=wandb: a robotrl.logging_wandb.WandbLogger, opened with the writer
        self.progress: Progress | None = None
        self.provenance = ProvenanceLog(self.run_dir)
        self._checkpoint_provenance: list = []
        self._lock = DirLock(self.run_dir, what="run_dir")  # one live process per run directory

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "loop":
            raise AttributeError(name)
        return getattr(self.loop, name)

    @property
    def agent(self):
        """The loop's agent."""
        return self.loop.agent

    @property
    def step(self) -> int:
        """The loop's step (x-axis of logs, evaluations and checkpoints)."""
        return self.loop.step

    @step.setter
    def step(self, value: int) -> None:
        self.loop.step = int(value)

    # ------------------------------------------------------------------ logging
    @property
    def writer(self):
        """The TensorBoard ``SummaryWriter`` of ``run_dir/tb`` (created on first use; on resume,
        events after the checkpoint's step are purged)."""
        if self._writer is None:
            from torch.utils.tensorboard import SummaryWriter

            self._writer = SummaryWriter(str(self.run_dir / "tb"), purge_step=self.loop.step or None)
            if logger_name(self.run_config) == "wandb":  # logger=wandb: every scalar to W&B as well
                from robotrl.logging_wandb import WandbLogger

                self._wandb = WandbLogger(self.run_dir, self.run_config)
        return self._writer

    def log(self, prefix: str, metrics: dict, step: int | None = None) -> None:
        """Log finite scalar ``metrics`` (floats or 0-d tensors) as ``prefix/name`` at ``step``
        (default: the loop's step), to TensorBoard and, with ``logger=wandb``, to W&B."""
        step = self.loop.step if step is None else step
        out = {}
        for k, v in metrics.items():
            v = float(v.item() if torch.is_tensor(v) else v)
            if np.isfinite(v):
                self.writer.add_scalar(f"{prefix}/{k}", v, step)
                out[f"{prefix}/{k}"] = v
        if self._wandb is not None:
            self._wandb.log(out, step)

    def print(self, line: str) -> None:
        """Print ``line`` when progress output is on (above the progress bar if one is shown)."""
        if not self.loop.cfg.progress:
            return
        if self.progress is not None:
            self.progress.write(line)
        else:
            emit(line)

    def evaluate(self, phase: str) -> dict:
        """Evaluate ``agent.policy`` (``cfg.eval_episodes`` episodes); append to the history, log, print.

        Returns:
            The :func:`~robotrl.evaluation.evaluate` result with ``phase``, ``step``, ``updates``,
            ``eval_seconds`` and ``train_wall_s`` (the run's wall seconds so far, resumed parts
            included, evaluations excluded) added.
        """
        t, cfg, pol = time.time(), self.loop.cfg, self.loop.agent.policy
        train_wall = self.wall_time + (t - self._t0) - sum(h.get("eval_seconds", 0.0) for h in self.history)
        if self.make_eval_env is None:  # no env: held-out data (robotrl.validation)
            res = dict(self.validator(self.loop.agent))  # type: ignore[misc]
        else:
            res = self.evaluator(lambda o: act(pol, o), self.make_eval_env, cfg.eval_episodes, seed=self.eval_seed(),
                                 num_envs=cfg.eval_envs, ref_scores=self.ref_scores, reset_policy=pol.reset)
        res.update(phase=phase, step=self.loop.step, updates=self.loop.updates, eval_seconds=time.time() - t,
                   train_wall_s=train_wall)
        self.history.append(res)
        self.provenance.update(step=self.loop.step, phase=phase, evaluated=True)
        if cfg.keep_best:
            self.keep_best(res)
        self.log("eval", {k: v for k, v in res.items() if isinstance(v, float)})
        self.writer.flush()
        self.print(format_eval(res))
        return res

    def eval_seed(self) -> int:
        """The reset seed of evaluation episode 0 (episode ``i`` resets with it ``+ i``): the schedule's ``eval_seed``
        (``trainer.eval_seed`` / ``agent.onpolicy.eval_seed``), or ``seed + 10_000`` when that is ``None``."""
        base = self.loop.cfg.eval_seed
        return self.seed + 10_000 if base is None else int(base)

    def tick(self, metrics: dict, phase: str) -> None:
        """After one clock unit of the loop: progress, training metrics every ``loop.log_every``,
        evaluation every ``cfg.eval_every``, checkpoint every ``cfg.checkpoint_every``."""
        cfg, clock = self.loop.cfg, self.loop.clock
        if metrics and clock % self.loop.log_every == 0:
            self.log(f"train_{phase}", metrics)
            self.progress.metrics(metrics)
        self.progress.update(clock, self.loop.step)
        if clock % cfg.eval_every == 0:
            self.evaluate(phase)
        if clock % cfg.checkpoint_every == 0:
            self.save()

    def keep_best(self, res: dict) -> None:
        """``keep_best``: write ``checkpoints/best.pt`` atomically when the evaluation ``res`` beats every earlier one.

        The score is the success rate where the task reports one, else the normalised score, else the return
        (ties keep the earlier policy). ``best.pt`` holds ``policy`` (:func:`~robotrl.policy.policy_state`),
        ``step``, ``config`` and ``best`` (``{"metric", "score", "step"}``): ``robotrl eval checkpoint=<run
        dir>/checkpoints/best.pt`` and :func:`~robotrl.policy.load_policy` take it. The selection uses the run's
        own evaluation episodes (resets :meth:`eval_seed` ``+ i``), so the chosen policy's score there is biased
        upwards: report it on held-out episodes (``robotrl eval``'s default seed 100000, ≥ 50 episodes).
        """
        for metric in ("success_rate", "normalized_score", "return_mean"):
            score = res.get(metric)
            if isinstance(score, float) and math.isfinite(score):
                break
        else:
            return
        if self.best is not None and (self.best["metric"] != metric or score <= self.best["score"]):
            return
        self.best = {"metric": metric, "score": float(score), "step": int(res["step"])}
        save_checkpoint(self.ckpt_dir / "best.pt", {"format": 1, "step": self.loop.step, "updates": self.loop.updates,
                                                    "policy": policy_state(self.loop.agent.policy),
                                                    "config": self.run_config, "best": self.best, "history": [res]})

    # ------------------------------------------------------------------ checkpoints
    def save(self) -> Path:
        """Write ``checkpoints/latest.pt`` atomically (and the loop's files, e.g. the online buffer).

        The checkpoint holds ``format``, ``step``, ``updates``, ``wall_time``, ``agent``,
        ``policy`` (:func:`~robotrl.policy.policy_state`), ``rng`` (every global generator),
        ``history``, ``config`` (the resolved run config), ``trainer`` (the loop's schedule)
        and the loop's own state (:meth:`Loop.state_dict`).
        """
        now = time.time()
        self.wall_time += now - self._t0
        self._t0 = now
        loop = self.loop
        state = {"format": 1, "step": loop.step, "updates": loop.updates, "wall_time": self.wall_time,
                 "agent": loop.agent.state_dict(), "policy": policy_state(loop.agent.policy), "rng": get_rng_state(),
                 "history": self.history, "config": self.run_config, "trainer": asdict(loop.cfg)}
        state.update(loop.state_dict(self.ckpt_dir))
        self.provenance.update(step=loop.step, phase=loop.phase())
        state["provenance"] = self.provenance.records
        return save_checkpoint(self.ckpt_dir / "latest.pt", state)

    def try_resume(self) -> bool:
        """Load ``checkpoints/latest.pt`` if present; returns whether a run was resumed.

        Raises:
            CheckpointError: the checkpoint exists but is corrupt, or was written for another agent.
        """
        path = self.ckpt_dir / "latest.pt"
        if not path.exists():
            return False
        # read onto the CPU: modules and optimizers move their tensors to the agent's device as they load, while the
        # RNG, generator and collector states are CPU-only (NumPy, torch's set_state): a resume on a GPU read them
        # onto CUDA and failed ('RNG state must be a torch.ByteTensor', seen on an H200)
        state = load_checkpoint(path, map_location="cpu")
        try:
            self.loop.agent.load_state_dict(state["agent"])
            self.loop.step, self.loop.updates = int(state["step"]), int(state["updates"])
            self.history = list(state["history"])
            set_rng_state(state["rng"])
            self.loop.load_state_dict(state, self.ckpt_dir)
        except CheckpointError:
            raise
        except (KeyError, RuntimeError, ValueError, TypeError) as exc:
            raise CheckpointError(f"checkpoint {path} does not fit this agent ({type(exc).__name__}: {exc}); "
                                  "use another run_dir") from exc
        self.wall_time = float(state.get("wall_time", 0.0))
        self._checkpoint_provenance = list(state.get("provenance", []))
        best = self.ckpt_dir / "best.pt"  # the best policy on disk, even one evaluated after latest.pt was written
        self.best = load_checkpoint(best, map_location="cpu").get("best") if best.exists() else None
        return True

    def init_from(self, source: str | Path, parts: list[str] | None = None) -> None:
        """Warm-start the agent from ``source`` (:func:`~robotrl.warmstart.warm_start`).

        Raises:
            CheckpointError: unreadable checkpoint, or its state does not fit the agent.
        """
        warm_start(self.loop.agent, source, parts)

    # ------------------------------------------------------------------ run
    def prepare(self) -> bool:
        """Resume the run, or warm-start it and run the loop's first start (:meth:`Loop.start`), once, without
        running it: a server loop (the robot learner) is ready — resumed or pretrained — before it serves.

        Returns:
            whether the run was resumed.

        Raises:
            CheckpointError: an existing checkpoint (or a warm-start source) cannot be used.
            RunDirInUseError: another live process is training in ``run_dir`` (the lock is held from here until
                :meth:`fit` ends).
        """
        self._open_run_dir()
        resumed = self.try_resume()
        self._t0 = time.time()
        self._begin_segment(resumed)
        if not resumed:
            if self.warm_source:
                self.init_from(self.warm_source, self.warm_parts)
            self.loop.start(self, warm_started=bool(self.warm_source))
        self._prepared = resumed
        return resumed

    def _open_run_dir(self) -> None:
        """Create the run directory and hold its lock until :meth:`fit` ends (or the process does): a second
        live process on the same ``run_dir`` would resume from the first one's checkpoint and both would
        write its checkpoints, provenance and event files.

        Raises:
            RunDirInUseError: another live process holds the directory (named with its pid and start).
        """
        self.run_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except BlockingIOError as e:
            raise RunDirInUseError(str(e)) from None

    def close(self) -> None:
        """Release the run directory's lock without :meth:`fit` (a prepared server loop that stops before it
        serves); :meth:`fit` releases it itself when it ends."""
        self._lock.release()

    def _begin_segment(self, resumed: bool) -> None:
        self.provenance.begin(resumed=resumed, step=self.loop.step, phase=self.loop.phase(),
                              checkpoint_records=self._checkpoint_provenance, device=agent_device(self.loop.agent))

    def fit(self) -> dict:
        """Run (or resume) the loop, evaluate, checkpoint, and write the report (after :meth:`prepare`, if it ran).

        Returns:
            The summary dict (also in ``report.json``), with ``report_paths``.

        Raises:
            CheckpointError: an existing checkpoint (or a warm-start source) cannot be used.
            RunDirInUseError: another live process is training in ``run_dir``.
        """
        try:
            return self._fit()
        finally:
            self._lock.release()

    def _fit(self) -> dict:
        loop = self.loop
        prepared = self._prepared
        if prepared is None:
            self._open_run_dir()
            resumed = self.try_resume()
            self._t0 = time.time()
            self._begin_segment(resumed)
        else:
            resumed = prepared
        with Progress(total=loop.total, initial=loop.clock, desc=self.title or "train",
                      enabled=loop.cfg.progress) as self.progress:
            if not resumed and prepared is None:
                if self.warm_source:
                    self.init_from(self.warm_source, self.warm_parts)
                loop.start(self, warm_started=bool(self.warm_source))
            loop.run(self)
        self.progress = None
        if not self.history or self.history[-1]["step"] != loop.step:
            self.evaluate(loop.phase())
        self.save()
        self.provenance.update(step=loop.step, phase=loop.phase(), ended=True)
        summary = self._summary(resumed)
        # the composed config as text and the hyper-parameters against the summary, in the run's one event file
        scalars = {f"summary/{k}": float(v) for k, v in summary.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool) and np.isfinite(v)}
        log_run_config(self.writer, self.run_config, scalars, step=self.loop.step)
        self.writer.close()
        if self._wandb is not None:
            self._wandb.summary(scalars)
            self._wandb.finish()
            self._wandb = None
        paths = write_report(self.run_dir, summary=summary, history=self.history, config=self.run_config)
        summary["report_paths"] = {k: str(v) for k, v in paths.items()}
        return summary

    def _summary(self, resumed: bool) -> dict:
        """Final scores, the loop's fields and the onset dips (logged to TensorBoard and printed)."""
        final = self.history[-1]
        if final.get("evaluation") == "validation":  # no env: the held-out metrics (robotrl.validation)
            out = {"title": self.title, "evaluation": "validation on held-out episodes (no env)",
                   **{f"final_{k}": v for k, v in final.items() if k.startswith("val_")}}
        else:
            out = {"title": self.title, "final_return": final["return_mean"],
                   "final_normalized_score": final["normalized_score"], "final_success_rate": final["success_rate"],
                   "final_success_any_rate": final.get("success_any_rate", final["success_rate"]),
                   "success_metric": final.get("success_metric", "n/a")}
        fields = dict(self.loop.summary(self.history))
        onset = fields.pop("onset")
        out.update(fields)
        out.update({"wall_time_s": round(self.wall_time, 1), "resumed": resumed, "run_dir": str(self.run_dir),
                    "provenance": self.provenance.records})
        if self.best is not None:
            out["best"] = dict(self.best, checkpoint=str(self.ckpt_dir / "best.pt"))
        out.update(onset_summary(self.history, **onset))
        dips = {k: v for k, v in out.items() if k.startswith("onset_dip_")}
        if dips:
            self.log("summary", dips)
            line = format_onset(out)
            if line:
                self.print(line)
        return drop_missing(out)
