"""On-policy fine-tuning core: rollouts over vector envs, GAE, running reward scaling, the loop.

Used by DPPO (irom-princeton/dppo, ``agent/finetune/train_ppo_diffusion_agent.py``) and
the Gaussian PPO baseline. Symbols: ``T`` rollout steps per env per iteration (one step
= one executed chunk of ``Te`` env steps), ``N`` envs, ``To`` observation history,
``Do`` observation size, ``Te``/``Da`` executed chunk length / action size.

Vector envs are gymnasium 1.x with *next-step* autoreset: the step after an episode
ends only resets that env (its action is ignored, reward 0). Such steps are stored with
``valid = False`` and carry no advantage or loss; because they only ever follow a
``terminated | truncated`` step, GAE chains never cross them.

GAE (Schulman et al. 2016) with DPPO's semantics:
``δ_t = r_t + γ V(s'_t)(1 − terminated_t) − V(s_t)``, ``A_t = δ_t + γλ(1 − done_t) A_{t+1}``
with ``done = terminated | truncated``: a truncated step bootstraps from the value of
its real final observation ``s'_t`` (never the reset observation); only termination
stops the bootstrap.

An on-policy agent provides ``policy`` (deployable, with ``To``/``Te``), ``gamma``,
``reward_scaling`` (bool), ``rollout_act(obs_hist (N, To, Do)) -> (actions (N, Te, Da)
or (N, Da) raw, extras {name: tensor (N, ...)})``, ``update_rollout(rollout, iteration)
-> metrics``, ``state_dict``/``load_state_dict`` and optionally ``load_pretrained(path)``,
``bc_update(batch) -> metrics`` (``pretrain_steps`` of behaviour cloning on the dataset
before the first online iteration: pretraining and fine-tuning in one run)
and ``reset_rollout(env_ids)`` (called when those envs start a new episode: per-env state
such as a base policy's chunk queue).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.evaluation import evaluate
from robotrl.policy import act, policy_state
from robotrl.utils import check_schedule, get_rng_state, set_rng_state


# ---------------------------------------------------------------------- GAE
def compute_gae(rewards: np.ndarray, values: np.ndarray, next_values: np.ndarray, terminated: np.ndarray,
                truncated: np.ndarray, valid: np.ndarray | None = None, *, gamma: float = 0.99,
                lam: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimates over env steps.

    Args:
        rewards, values, next_values: ``(T, N)``; ``next_values[t]`` = ``V(s'_t)`` of the
            step's real next observation (the final one at an episode end).
        terminated, truncated: ``(T, N)`` bool.
        valid: ``(T, N)`` bool; invalid (reset-only) steps get advantage 0.
        gamma, lam: discount and GAE λ.

    Returns:
        ``(advantages (T, N), returns = advantages + values (T, N))`` float32.
    """
    r = np.asarray(rewards, np.float64)
    v, nv = np.asarray(values, np.float64), np.asarray(next_values, np.float64)
    term, done = np.asarray(terminated, bool), np.asarray(terminated, bool) | np.asarray(truncated, bool)
    ok = np.ones_like(term) if valid is None else np.asarray(valid, bool)
    adv = np.zeros_like(r)
    last = np.zeros(r.shape[1])
    for t in range(r.shape[0] - 1, -1, -1):
        delta = r[t] + gamma * nv[t] * (~term[t]) - v[t]
        last = np.where(ok[t], delta + gamma * lam * (~done[t]) * last, 0.0)
        adv[t] = last
    return adv.astype(np.float32), (adv + v).astype(np.float32)


# ---------------------------------------------------------------------- reward scaling
class RunningRewardScaler:
    """Divide rewards by the running std of the per-env discounted return (DPPO ``RunningRewardScaler``).

    ``G ← γ G + r`` per env (reset to 0 after ``done``); rewards are divided by
    ``√(Var[G] + eps)`` with ``Var`` the running variance of every ``G`` seen so far
    (parallel Welford updates).

    Args:
        num_envs: ``N``; gamma: discount; eps: variance floor.
    """

    def __init__(self, num_envs: int, gamma: float = 0.99, eps: float = 1e-8):
        self.gamma, self.eps = float(gamma), float(eps)
        self.ret = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def _update(self, x: np.ndarray) -> None:
        bm, bv, bc = float(x.mean()), float(x.var()), x.size
        d, tot = bm - self.mean, self.count + bc
        self.mean += d * bc / tot
        self.var = (self.var * self.count + bv * bc + d * d * self.count * bc / tot) / tot
        self.count = tot

    def __call__(self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Scaled rewards ``(N,)``; ``dones (N,)`` resets the return after this step; ``valid`` masks updates."""
        ok = np.ones(len(rewards), bool) if valid is None else np.asarray(valid, bool)
        self.ret = np.where(ok, self.ret * self.gamma + rewards, self.ret)
        if ok.any():
            self._update(self.ret[ok])
        out = rewards / np.sqrt(self.var + self.eps)
        self.ret = np.where(np.asarray(dones, bool), 0.0, self.ret)
        return out.astype(np.float32)

    def state_dict(self) -> dict:
        return {"ret": self.ret.copy(), "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, s: dict) -> None:
        self.ret, self.mean, self.var, self.count = np.asarray(s["ret"]).copy(), s["mean"], s["var"], s["count"]


# ---------------------------------------------------------------------- rollouts
@dataclass
class Rollout:
    """One iteration of on-policy data, all ``(T, N, ...)``.

    ``obs``/``next_obs``: histories ``(T, N, To, Do)`` raw (``next_obs`` ends with the
    real next observation); ``rewards`` raw chunk sums; ``scaled_rewards`` after running
    scaling (= rewards when off); ``terminated``/``truncated``/``valid`` bool;
    ``extras``: what the agent's ``rollout_act`` returned, stacked (tensors).
    """

    obs: np.ndarray
    next_obs: np.ndarray
    rewards: np.ndarray
    scaled_rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    extras: dict[str, torch.Tensor]
    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_successes: list[bool] = field(default_factory=list)


class RolloutCollector:
    """Steps ``N`` vector envs with an on-policy agent, handling next-step autoreset.

    Args:
        envs: a gymnasium ``VectorEnv`` (``make_env(..., action_chunk=Te, vectorization=...)``).
        obs_horizon: ``To``.
        gamma: discount of the running reward scaler; reward_scaling: enable it.
        seed: first reset seed.
    """

    def __init__(self, envs: gym.vector.VectorEnv, obs_horizon: int, *, gamma: float = 0.99,
                 reward_scaling: bool = True, seed: int = 0):
        self.envs, self.To, self.N = envs, int(obs_horizon), envs.num_envs
        self.scaler = RunningRewardScaler(self.N, gamma) if reward_scaling else None
        obs, _ = envs.reset(seed=seed)
        self.hist = np.repeat(np.asarray(obs, np.float32)[:, None], self.To, axis=1)
        self.resetting = np.zeros(self.N, bool)
        self.ep_ret = np.zeros(self.N)
        self.ep_succ = np.zeros(self.N, bool)

    def _success(self, info: dict) -> np.ndarray:
        for key in ("episode_success", "success", "is_success"):
            if key in info:
                return np.asarray(info[key], bool) & np.asarray(info.get("_" + key, True), bool)
        return np.zeros(self.N, bool)

    @torch.no_grad()
    def collect(self, agent, T: int) -> Rollout:
        """``T`` vector steps with ``agent.rollout_act``; returns the :class:`Rollout`."""
        N, To = self.N, self.To
        obs_b, nobs_b = np.zeros((T, N, To, self.hist.shape[-1]), np.float32), np.zeros((T, N, To, self.hist.shape[-1]), np.float32)
        rew, srew = np.zeros((T, N), np.float32), np.zeros((T, N), np.float32)
        term_b, trunc_b, valid_b = np.zeros((T, N), bool), np.zeros((T, N), bool), np.zeros((T, N), bool)
        extras: dict[str, list] = {}
        env_steps, rets, succs = 0, [], []
        for t in range(T):
            actions, ext = agent.rollout_act(self.hist)
            for k, v in ext.items():
                extras.setdefault(k, []).append(v)
            next_obs, r, term, trunc, info = self.envs.step(actions)
            next_obs = np.asarray(next_obs, np.float32)
            valid = ~self.resetting
            r = np.where(valid, np.asarray(r, np.float64), 0.0)
            term, trunc = np.asarray(term, bool) & valid, np.asarray(trunc, bool) & valid
            nhist = np.concatenate([self.hist[:, 1:], next_obs[:, None]], axis=1)
            obs_b[t], nobs_b[t], rew[t] = self.hist, nhist, r
            term_b[t], trunc_b[t], valid_b[t] = term, trunc, valid
            srew[t] = self.scaler(r, term | trunc, valid) if self.scaler is not None else r
            steps = np.asarray(info.get("executed_steps", np.ones(N)), np.int64)
            env_steps += int(np.where(valid, steps, 0).sum())
            self.ep_ret += r
            self.ep_succ |= self._success(info) & valid
            done = term | trunc
            for i in np.flatnonzero(done):
                rets.append(float(self.ep_ret[i]))
                succs.append(bool(self.ep_succ[i]))
            self.ep_ret[done], self.ep_succ[done] = 0.0, False
            # envs that only reset this step restart their history from the reset observation
            fresh = np.repeat(next_obs[:, None], To, axis=1)
            self.hist = np.where(self.resetting[:, None, None], fresh, nhist)
            if self.resetting.any() and hasattr(agent, "reset_rollout"):  # per-env state (chunk queues)
                agent.reset_rollout(np.flatnonzero(self.resetting))
            self.resetting = done
        stacked = {k: torch.stack(v, 0) for k, v in extras.items()}
        return Rollout(obs_b, nobs_b, rew, srew, term_b, trunc_b, valid_b, stacked, env_steps, rets, succs)


# ---------------------------------------------------------------------- the loop
@dataclass
class OnPolicyConfig:
    """Schedule of an on-policy fine-tuning run (budgets in iterations and env steps)."""

    iterations: int = 100
    steps_per_iter: int = 500   # T: chunk steps per env per iteration
    num_envs: int = 40
    eval_every: int = 10        # iterations
    eval_episodes: int = 20
    eval_envs: int = 10
    checkpoint_every: int = 10  # iterations
    max_env_steps: int | None = None  # stop once this many env steps were collected
    init_from: str | None = None      # pretrained checkpoint (agent.load_pretrained)
    pretrain_steps: int = 0           # behaviour-cloning updates on the dataset before going online (agent.bc_update)
    pretrain_batch_size: int = 256
    vectorization: str = "sync"
    progress: bool = True

    def __post_init__(self) -> None:
        """Raises ConfigError on a count that cannot work (zero envs, negative budgets, ...)."""
        check_schedule(self, "agent.onpolicy", positive=("iterations", "steps_per_iter", "num_envs", "eval_every",
                                                         "eval_episodes", "eval_envs", "checkpoint_every",
                                                         "pretrain_batch_size"),
                       non_negative=("max_env_steps", "pretrain_steps"))


class OnPolicyTrainer:
    """Iterations of rollout → ``agent.update_rollout``, with evaluation and resumable checkpoints.

    Checkpoints (``checkpoints/latest.pt``) have the trainer's layout (``agent``,
    ``policy`` via :func:`~robotrl.policy.policy_state`, ``config``, ``history``,
    ``step`` = env steps), so ``robotrl eval`` and :func:`robotrl.policy.load_policy`
    rebuild the fine-tuned policy.

    Args:
        agent: an on-policy agent (module docstring).
        run_dir: output directory.
        config: :class:`OnPolicyConfig`.
        make_train_envs: ``() -> VectorEnv`` of ``num_envs`` envs executing ``Te``-step chunks.
        make_eval_env: ``() -> Env`` with single-step actions (the policy queues chunks).
        ref_scores, seed, run_config, title: as for :class:`~robotrl.trainer.Trainer`.
    """

    def __init__(self, agent, run_dir: str | Path, config: OnPolicyConfig, *,
                 make_train_envs: Callable[[], gym.vector.VectorEnv], make_eval_env: Callable[[], gym.Env],
                 ref_scores: tuple[float, float] | None = None, seed: int = 0, run_config: dict | None = None,
                 title: str = "", offline_buffer=None):
        if config.pretrain_steps > 0 and (offline_buffer is None or not hasattr(agent, "bc_update")):
            raise ValueError("onpolicy.pretrain_steps > 0 needs a dataset and an agent with bc_update (e.g. agent=ppo)")
        self.offline = offline_buffer
        self.agent, self.cfg, self.run_dir = agent, config, Path(run_dir)
        self.make_train_envs, self.make_eval_env = make_train_envs, make_eval_env
        self.ref_scores, self.seed, self.run_config, self.title = ref_scores, seed, run_config or {}, title
        self.history: list[dict] = []
        self.step = 0          # env steps
        self.iteration = 0
        self.wall_time = 0.0

    def evaluate(self, phase: str) -> dict:
        t = time.time()
        pol = self.agent.policy
        res = evaluate(lambda o: act(pol, o), self.make_eval_env, self.cfg.eval_episodes, seed=self.seed + 10_000,
                       num_envs=self.cfg.eval_envs, ref_scores=self.ref_scores, reset_policy=pol.reset)
        res.update(phase=phase, step=self.step, updates=self.iteration, eval_seconds=time.time() - t)
        self.history.append(res)
        if self.cfg.progress:
            from robotrl.report import format_eval

            print(format_eval(res), flush=True)
        return res

    def save(self) -> Path:
        """Write ``checkpoints/latest.pt`` atomically."""
        return save_checkpoint(self.run_dir / "checkpoints" / "latest.pt", {
            "format": 1, "step": self.step, "updates": self.iteration, "wall_time": self.wall_time,
            "agent": self.agent.state_dict(), "policy": policy_state(self.agent.policy), "rng": get_rng_state(),
            "history": self.history, "config": self.run_config, "trainer": asdict(self.cfg)})

    def try_resume(self) -> bool:
        path = self.run_dir / "checkpoints" / "latest.pt"
        if not path.exists():
            return False
        state = load_checkpoint(path)
        self.agent.load_state_dict(state["agent"])
        self.step, self.iteration = int(state["step"]), int(state["updates"])
        self.wall_time, self.history = float(state.get("wall_time", 0.0)), list(state["history"])
        set_rng_state(state["rng"])
        return True

    def _pretrain(self) -> None:
        """``pretrain_steps`` behaviour-cloning updates on the offline buffer (BC then PPO in one run)."""
        for i in range(self.cfg.pretrain_steps):
            metrics = self.agent.bc_update(self.offline.sample(self.cfg.pretrain_batch_size))
            if self.cfg.progress and (i + 1) % max(1, self.cfg.pretrain_steps // 5) == 0:
                print(f"[pretrain update {i + 1}/{self.cfg.pretrain_steps}] bc_loss {float(metrics['bc_loss']):.4f}",
                      flush=True)

    def _done(self) -> bool:
        c = self.cfg
        return self.iteration >= c.iterations or (c.max_env_steps is not None and self.step >= c.max_env_steps)

    def _summary(self, resumed: bool) -> dict:
        """Final and starting scores, and the onset dips (:func:`robotrl.report.onset_summary`, as the
        off-policy :class:`~robotrl.trainer.Trainer`'s summary; updates start at env step 0)."""
        from robotrl.report import drop_missing, format_onset, onset_summary

        final, first = self.history[-1], self.history[0]
        summary = {"title": self.title, "final_return": final["return_mean"],
                   "final_normalized_score": final["normalized_score"], "final_success_rate": final["success_rate"],
                   "final_success_any_rate": final.get("success_any_rate", final["success_rate"]),
                   "success_metric": final.get("success_metric", "n/a"),
                   "offline_return": first["return_mean"], "offline_success_rate": first["success_rate"],
                   "online_steps": self.step, "iterations": self.iteration,
                   "wall_time_s": round(self.wall_time, 1), "resumed": resumed, "run_dir": str(self.run_dir)}
        summary.update(onset_summary(self.history, online_start=0, first_update=0, budget=self.step))
        line = format_onset(summary)
        if self.cfg.progress and line:
            print(line, flush=True)
        return drop_missing(summary)

    def fit(self) -> dict:
        """Run (or resume) fine-tuning; returns the summary (also written as the report)."""
        from robotrl.report import write_report

        self.run_dir.mkdir(parents=True, exist_ok=True)
        resumed = self.try_resume()
        t0 = time.time()
        if not resumed:
            if self.cfg.init_from and hasattr(self.agent, "load_pretrained"):
                self.agent.load_pretrained(self.cfg.init_from)
            self._pretrain()
            self.evaluate("offline")
            if self.cfg.pretrain_steps:  # a kill from here on resumes online, not from scratch
                self.wall_time += time.time() - t0
                t0 = time.time()
                self.save()
        envs = self.make_train_envs()
        try:
            collector = RolloutCollector(envs, self.agent.policy.To, gamma=self.agent.gamma,
                                         reward_scaling=self.agent.reward_scaling, seed=self.seed + self.iteration)
            while not self._done():
                ro = collector.collect(self.agent, self.cfg.steps_per_iter)
                metrics = self.agent.update_rollout(ro, self.iteration)
                self.step += ro.env_steps
                self.iteration += 1
                if self.cfg.progress:
                    tr = np.mean(ro.episode_returns) if ro.episode_returns else float("nan")
                    print(f"[iter {self.iteration} env steps {self.step}] train return {tr:.2f} "
                          + " ".join(f"{k} {float(v):.3g}" for k, v in list(metrics.items())[:4]), flush=True)
                if self.iteration % self.cfg.eval_every == 0 or self._done():
                    self.evaluate("online")
                if self.iteration % self.cfg.checkpoint_every == 0 or self._done():
                    self.wall_time += time.time() - t0
                    t0 = time.time()
                    self.save()
        finally:
            envs.close()
        summary = self._summary(resumed)
        paths = write_report(self.run_dir, summary=summary, history=self.history, config=self.run_config)
        summary["report_paths"] = {k: str(v) for k, v in paths.items()}
        return summary
