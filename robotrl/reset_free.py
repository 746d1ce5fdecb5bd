"""Reset-free fine-tuning (RoboFuME): a forward and a backward agent take turns on one scene, ``experiment=reset-free``.

Yang et al. 2024, "Robot Fine-Tuning Made Easy: Pre-Training Rewards and Policies for Autonomous Real-World
Reinforcement Learning" (RoboFuME): both a forward (task) policy and a backward (reset) policy are pretrained with
Cal-QL on demonstrations; online, they alternate on the robot without resets, each rewarded by a learned success
classifier, and keep learning with Cal-QL online. Evaluation is the task's: the forward policy from standard resets.

Here (docs/algorithms/reset-free.md):

- the scene is :class:`robotrl.envs.reset_free.ResetFreeEnv` around the task's training env: reset once, then each
  ``reset()`` starts the other phase from wherever the scene is; each phase's reward and end come from its own
  reward function, by default a success classifier file (``reset_free.forward_classifier`` /
  ``reset_free.backward_classifier``, trained with ``robotrl train agent=reward-classifier``) loaded by the Hydra
  target ``reset_free.reward``; ``max_timeouts`` timeouts in a row of one phase count one human reset
  (``intervene``: the simulator is then really reset);
- :class:`ResetFreeLoop` is the :class:`~robotrl.runner.Loop` of the one :class:`~robotrl.runner.Runner`. It drives two
  ordinary :class:`~robotrl.trainer.OffPolicyLoop` (forward: the run's agent, data and warm start; backward: the same
  agent config on ``reset_free.backward_dataset``, warm-started from ``reset_free.backward_init_from``), one episode
  each in turn, through their own env-step and update code, so each keeps its online buffer, offline mixing, UTD
  schedule and Cal-QL's complete-episode rule. The runner evaluates the forward agent in the task's evaluation env
  (standard resets) and checkpoints: the forward agent as every run's agent, and in the loop's state both loops'
  own :meth:`~robotrl.trainer.OffPolicyLoop.state_dict` (buffers under ``checkpoints/{forward,backward}/``), the
  backward agent and the scene's counters, so a killed run resumes;
- :func:`reset_free_runner` builds it from :func:`robotrl.experiment.build_trainer`'s forward parts.

The report's summary adds ``sim_resets`` (simulator resets: the first, the interventions, the resumes),
``human_resets``, ``resume_resets`` and per phase ``<phase>_episodes``, ``_successes``, ``_timeouts``,
``_env_steps`` and ``_updates``, and ``forward_task_successes`` (forward phases the classifier ended where the
simulator's own success flag held too: the audit of its verdicts).

The clock is env steps of both phases together: ``trainer.online_steps`` is the whole budget, shared by the
phases as their episodes take it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
from omegaconf import DictConfig

from robotrl.data import check_spaces, load_dataset
from robotrl.envs.reset_free import PHASES, MazeGoals, ResetFreeEnv
from robotrl.errors import ConfigError
from robotrl.experiment_parts import action_scaler_for, build_agent, check_warm_start_spec, observation_normalizer, \
    offline_buffer, reward_transform
from robotrl.runner import Runner
from robotrl.task_mdp import terminate_data_at_success
from robotrl.trainer import OffPolicyLoop, TrainerConfig
from robotrl.utils import resolve_device
from robotrl.warmstart import warm_start

if TYPE_CHECKING:
    from robotrl.spec import ObservationSpec

__all__ = ["ResetFreeLoop", "reset_free_runner", "check_reset_free_schedule"]


def check_reset_free_schedule(cfg: TrainerConfig) -> None:
    """Refuse the trainer settings a reset-free run cannot honour.

    Raises:
        ConfigError: offline steps, several envs, HER, the forgetting metric, or no online budget (one line each,
            naming the fix).
    """
    if cfg.offline_steps > 0:
        raise ConfigError(f"trainer.offline_steps={cfg.offline_steps}: experiment=reset-free fine-tunes pretrained agents "
                          "online; set trainer.offline_steps=0 and pretrain each phase with experiment=calql "
                          "(trainer.init_from, reset_free.backward_init_from)")
    if cfg.online_steps < 1:
        raise ConfigError("trainer.online_steps=0: a reset-free run is online; set trainer.online_steps=N env steps "
                          "(both phases together)")
    if cfg.num_envs != 1:
        raise ConfigError(f"trainer.num_envs={cfg.num_envs}: a reset-free run has one scene; set trainer.num_envs=1")
    if cfg.her_ratio > 0:
        raise ConfigError("trainer.her_ratio relabels goals with the task's reward, and a reset-free run is rewarded by "
                          "its classifiers: set trainer.her_ratio=0")
    if cfg.forgetting_starts > 0:
        raise ConfigError("trainer.forgetting_starts is measured by the off-policy loop at the end of its own online "
                          "phase, which a reset-free run does not run: set trainer.forgetting_starts=0")


class ResetFreeLoop:
    """Forward and backward :class:`~robotrl.trainer.OffPolicyLoop` taking turns on one :class:`ResetFreeEnv` (module doc).

    Args:
        forward, backward: the two loops (``offline_steps = 0``, ``num_envs = 1``); ``forward.agent`` is the run's
            agent (evaluated, deployed).
        env: the scene; the loops act in it through one single-env ``SyncVectorEnv``.
        config: the run's schedule (:class:`TrainerConfig`): ``online_steps`` env steps of both phases together,
            and the cadences.
        seed: seeds the one simulator reset (and a resumed run's, ``seed + step``).
        backward_init_from, init_parts: warm start of the backward agent on the first start (never on resume).

    Raises:
        ConfigError: as :func:`check_reset_free_schedule`.
    """

    def __init__(self, forward: OffPolicyLoop, backward: OffPolicyLoop, env: ResetFreeEnv, config: TrainerConfig, *,
                 seed: int = 0, backward_init_from: str | Path | None = None, init_parts: list[str] | None = None):
        check_reset_free_schedule(config)
        self.loops = {PHASES[0]: forward, PHASES[1]: backward}
        self.env, self.cfg, self.seed = env, config, int(seed)
        self.backward_init_from, self.init_parts = backward_init_from, init_parts
        self.step = 0  # env steps, both phases
        self.updates = 0
        self._phase_start = True  # the phase now starting: tell its agent (per-episode exploration state)

    @property
    def forward(self) -> OffPolicyLoop:
        return self.loops[PHASES[0]]

    @property
    def backward(self) -> OffPolicyLoop:
        return self.loops[PHASES[1]]

    @property
    def agent(self) -> Any:
        """The forward agent: the one the runner evaluates, checkpoints as ``agent`` and deploys."""
        return self.forward.agent

    # ------------------------------------------------------------------ Loop protocol
    @property
    def clock(self) -> int:
        """Env steps of both phases."""
        return self.step

    @property
    def total(self) -> int:
        """``trainer.online_steps``."""
        return self.cfg.online_steps

    @property
    def log_every(self) -> int:
        return self.cfg.log_every

    def phase(self) -> str:
        return "online"

    def start(self, runner: Runner, warm_started: bool) -> None:
        """Warm-start the backward agent (``backward_init_from``), then the forward loop's start (a warm-started run
        evaluates the loaded forward policy first: the onset's reference)."""
        if self.backward_init_from:
            warm_start(self.backward.agent, self.backward_init_from, self.init_parts)
        self.forward.start(runner, warm_started)

    def run(self, runner: Runner) -> None:
        """Episodes of the two phases in turn until ``online_steps`` env steps; ``runner.tick`` after each step."""
        samplers = {name: loop.begin_online() for name, loop in self.loops.items()}
        env = self.env
        venv = gym.vector.SyncVectorEnv([lambda: env])  # the loops' vector interface to the one scene
        idle = np.zeros(1, bool)  # no autoreset step ever runs: an ended phase is followed by venv.reset() below
        try:
            obs, _ = venv.reset(seed=self.seed + self.step)  # the one simulator reset (a resumed run: its own)
            while self.step < self.total:
                name = env.phase
                loop = self.loops[name]
                if self._phase_start:
                    loop.episodes_start(np.arange(1))
                    self._phase_start = False
                # the OffPolicyLoop's own env step (explore, buffer, its step) and UTD updates
                obs, ended = loop.env_step(venv, obs, idle)
                metrics = loop.online_updates(samplers[name])
                self.step += 1
                self.updates = self.forward.updates + self.backward.updates
                runner.tick({f"{name}/{k}": v for k, v in metrics.items()}, "online")
                if ended[0]:
                    obs, _ = venv.reset()  # the other phase from the scene as it is (or a person's reset)
                    self._phase_start = True
        finally:
            venv.close()

    def state_dict(self, ckpt_dir: Path) -> dict:
        """Both loops' own state (their buffers under ``ckpt_dir/<phase>/``), their counters, the backward agent and
        the scene's counters."""
        out: dict = {"env": self.env.state_dict()}
        for name, loop in self.loops.items():
            out[name] = {"step": loop.step, "updates": loop.updates, "loop": loop.state_dict(Path(ckpt_dir) / name)}
        out[PHASES[1]]["agent"] = self.backward.agent.state_dict()
        return {"reset_free": out}

    def load_state_dict(self, state: dict, ckpt_dir: Path) -> None:
        """Inverse of :meth:`state_dict` (``state``: the whole checkpoint); the scene restarts with a simulator reset.

        Raises:
            KeyError: a checkpoint of another loop (the runner names it).
            CheckpointError: a buffer file is corrupt.
        """
        rf = state["reset_free"]
        self.backward.agent.load_state_dict(rf[PHASES[1]]["agent"])
        for name, loop in self.loops.items():
            loop.step, loop.updates = int(rf[name]["step"]), int(rf[name]["updates"])
            loop.load_state_dict(rf[name]["loop"], Path(ckpt_dir) / name)
        self.env.load_state_dict(rf["env"])
        self._phase_start = True

    def summary(self, history: list[dict]) -> dict:
        """The forward loop's fields (its last offline evaluation, the onset window), the gradient updates of both
        and the scene's counters."""
        out = dict(self.forward.summary(history))
        out.update(online_steps=self.cfg.online_steps, gradient_updates=self.updates, reset_free=True,
                   **self.env.counters(), **{f"{n}_updates": loop.updates for n, loop in self.loops.items()})
        return out


def _phase_reward(rf: DictConfig, which: str, obs_dim: int):
    """The reward function of one phase: ``reset_free.reward`` (a Hydra target) called with the classifier path."""
    from hydra.utils import instantiate

    path = rf.get(f"{which}_classifier")
    if not path:
        raise ConfigError(f"reset_free.{which}_classifier is not set: train one with `robotrl train "
                          f"agent=reward-classifier dataset.id=<{which} demonstrations> run_dir=runs/clf/{which}` and "
                          f"pass reset_free.{which}_classifier=runs/clf/{which}")
    if not Path(str(path)).exists():
        raise ConfigError(f"reset_free.{which}_classifier={path} does not exist: give a classifier.pt or its run "
                          f"directory (`robotrl train agent=reward-classifier ... run_dir={path}` writes it)")
    return instantiate(rf.reward, path=str(path), obs_dim=int(obs_dim))


def reset_free_runner(cfg: DictConfig, run_dir: Path, tcfg: TrainerConfig, agent, offline, spec: ObservationSpec, info,
                      train_env: dict, make_eval_env, ref_scores, run_config: dict, title: str) -> Runner:
    """The :class:`~robotrl.runner.Runner` of ``experiment=reset-free`` from :func:`robotrl.experiment.build_trainer`'s
    forward parts: ``agent`` and ``offline`` (its buffer) on the run's dataset, the observation spec, the task's
    ``EnvInfo`` and training-env arguments, the evaluation env factory and the run's resolved config and title.

    The backward agent is the same ``agent.model`` built on ``reset_free.backward_dataset`` (its normaliser, action
    scaler and offline buffer) with seed ``seed + 1``.

    Raises:
        ConfigError: cameras, a missing or unusable classifier or backward dataset, or a schedule
            :func:`check_reset_free_schedule` refuses (one line naming the fix).
        DatasetNotFoundError, SpaceMismatchError: the backward dataset is missing or does not fit the task.
    """
    from robotrl.envs import make_env_from_args
    from robotrl.experiment import ensure_dataset

    rf = cfg.reset_free
    check_reset_free_schedule(tcfg)
    if spec.has_cameras:
        raise ConfigError("experiment=reset-free reads states (its classifiers score flat observations): drop obs=pixels")
    if rf.get("backward_dataset") is None or not rf.backward_dataset.get("id"):
        raise ConfigError("reset_free.backward_dataset.id is not set: record demonstrations of the backward task (goal "
                          "-> start, e.g. `robotrl collect recipe=pointmaze-umaze` with maze_map's 'r' and 'g' swapped) "
                          "and pass reset_free.backward_dataset.id=<its id>")
    seed, device = int(cfg.seed), resolve_device(cfg.device)
    bdata = load_dataset(ensure_dataset(rf.backward_dataset))
    check_spaces(bdata, info.observation_space, info.action_space)
    bdata = terminate_data_at_success(bdata, train_env, info.reports_success)
    b_init = rf.get("backward_init_from")
    if b_init:
        check_warm_start_spec(b_init, spec)
    bnorm = observation_normalizer(bdata, spec.obs_dim, cfg.agent.model.get("obs_clip"),
                                   rf.backward_dataset.get("obs_std_floor"))
    bagent = build_agent(cfg.agent.model, spec, obs_normalizer=bnorm, action_scaler=action_scaler_for(info.action_space, bdata),
                         device=device, seed=seed + 1)
    bbuf = offline_buffer(cfg.agent, bdata, tcfg, device, seed + 1, frame_stack=spec.frame_stack)

    rewards = {ph: _phase_reward(rf, ph, spec.obs_dim) for ph in PHASES}
    limit = rf.get("max_episode_steps") or train_env.get("max_episode_steps") or info.max_episode_steps
    if not limit:
        raise ConfigError("the task has no time limit, and a reset-free phase needs one: set reset_free.max_episode_steps")
    goal = None
    if info.layout is not None and {"achieved_goal", "desired_goal"} <= set(info.layout.keys):
        sl = info.layout.slices
        goal = (sl["achieved_goal"], sl["desired_goal"])
    goals = str(rf.get("goals", "scene"))  # absent from the configs of runs made before it
    if goals not in ("scene", "maze"):
        raise ConfigError(f"reset_free.goals={goals!r} is unknown: choose scene (the goals of the last simulator reset "
                          "for the whole scene) or maze (each phase draws its goal as a gymnasium-robotics maze's reset does)")
    # the scene: the task's training env with a time limit it never reaches (the phases end episodes)
    sim = make_env_from_args({**train_env, "max_episode_steps": 10**9, "terminate_on_success": False})
    env = ResetFreeEnv(sim, rewards, max_episode_steps=int(limit), max_timeouts=int(rf.max_timeouts),
                       intervene=bool(rf.intervene), goal_slices=goal,
                       goals=MazeGoals() if goals == "maze" else None)

    r_scale, r_bias, fill = reward_transform(cfg.agent)
    gamma = float(cfg.agent.get("gamma", 0.99))

    def no_env():  # the loops act through ResetFreeLoop.run's vector view of the scene, never their own envs
        raise RuntimeError("the reset-free loops step the shared scene of ResetFreeLoop")

    loops = [OffPolicyLoop(a, copy.deepcopy(tcfg), offline_buffer=buf, make_train_envs=no_env, seed=s,
                           reward_scale=r_scale, reward_bias=r_bias, mc_sparse_fill=fill, gamma=gamma)
             for a, buf, s in ((agent, offline, seed), (bagent, bbuf, seed + 1))]
    loop = ResetFreeLoop(*loops, env, tcfg, seed=seed, backward_init_from=b_init, init_parts=tcfg.init_parts)
    run_config = dict(run_config)
    run_config["derived"] = {**run_config.get("derived", {}), "reset_free": {
        "phase_max_episode_steps": int(limit), "backward_dataset": str(rf.backward_dataset.id),
        "backward_dataset_transitions": bdata.num_transitions,
        "goal_swap": goal is not None}}
    return Runner(loop, run_dir, make_eval_env=make_eval_env, ref_scores=ref_scores, seed=seed, run_config=run_config,
                  title=f"{title} (reset-free)", init_from=tcfg.init_from, init_parts=tcfg.init_parts)
