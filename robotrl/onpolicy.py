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

An on-policy agent (:class:`robotrl.agent.OnPolicyAgent`, inheriting
:class:`robotrl.agent.OnPolicyAgentBase`) provides ``policy`` (deployable, with ``To``/``Te``),
``gamma``, ``reward_scaling`` (bool), ``rollout_act(obs_hist (N, To, Do)) -> (actions (N, Te, Da)
or (N, Da) raw, extras {name: tensor (N, ...)})``, ``update_rollout(rollout, iteration)
-> metrics``, ``state_dict``/``load_state_dict``, ``load_pretrained(path)`` (the warm start
``trainer.init_from``, :func:`robotrl.warmstart.warm_start`) and ``reset_rollout(env_ids)``
(called when those envs start a new episode: per-env state such as a base policy's chunk
queue). Agents that can clone the dataset's behaviour first (:class:`robotrl.agent.BCPretrainer`)
have ``bc_update(batch) -> metrics`` (``pretrain_steps`` of behaviour cloning before the first
online iteration: pretraining and fine-tuning in one run).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robotrl.agent import BCPretrainer, OnPolicyAgent
from robotrl.runner import Runner
from robotrl.schema import OnPolicyConfig  # noqa: F401  (re-exported: robotrl.onpolicy.OnPolicyConfig)


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
    """Divide rewards by the running std of the per-env discounted return, clipped (DPPO
    ``util/reward_scaling.py``: ``RunningRewardScaler``, ``cliprew=10``).

    Per rollout, as DPPO scales its rollouts: ``G ← γ G + r`` per env through the rollout's ``T`` steps
    (reset to 0 after ``done``), the running variance takes every ``G`` of the rollout at once (a
    parallel Welford update), and then every reward of the rollout is divided by ``√(Var[G] + eps)``
    and clipped to ``±clip``. Updating the statistics first matters at the start: were the first step
    scaled by the variance of its own ``N`` returns, a sparse task whose envs all pay the same reward
    (Fetch: −1 per step everywhere) would divide it by ``~√(1e-4·r²/N)`` and store it ~100× too large.

    Args:
        num_envs: ``N``; gamma: discount; eps: variance floor; clip: bound of the scaled reward
            (DPPO's ``cliprew``; ``None``: no clip).
    """

    def __init__(self, num_envs: int, gamma: float = 0.99, eps: float = 1e-8, clip: float | None = 10.0):
        self.gamma, self.eps, self.clip = float(gamma), float(eps), clip
        self.ret = np.zeros(num_envs)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def _update(self, x: np.ndarray) -> None:
        bm, bv, bc = float(x.mean()), float(x.var()), x.size
        d, tot = bm - self.mean, self.count + bc
        self.mean += d * bc / tot
        self.var = (self.var * self.count + bv * bc + d * d * self.count * bc / tot) / tot
        self.count = tot

    def scale_rollout(self, rewards: np.ndarray, dones: np.ndarray, valid: np.ndarray | None = None) -> np.ndarray:
        """Scaled rewards ``(T, N)`` float32 of one rollout's ``rewards (T, N)`` (raw, float64 best).

        ``dones (T, N)`` resets a return after its step; ``valid (T, N)`` (default all) marks the steps
        that were real env steps: the others neither add to a return nor to the statistics. The per-env
        returns carry over to the next rollout.
        """
        rewards = np.asarray(rewards, np.float64)
        ok = np.ones(rewards.shape, bool) if valid is None else np.asarray(valid, bool)
        dones = np.asarray(dones, bool)
        seen = []
        for t in range(rewards.shape[0]):
            self.ret = np.where(ok[t], self.ret * self.gamma + rewards[t], self.ret)
            seen.append(self.ret[ok[t]])
            self.ret = np.where(dones[t], 0.0, self.ret)
        returns = np.concatenate(seen)
        if returns.size:
            self._update(returns)
        out = rewards / np.sqrt(self.var + self.eps)
        if self.clip is not None:
            out = np.clip(out, -self.clip, self.clip)
        return out.astype(np.float32)

    def state_dict(self) -> dict:
        """The running statistics: per-env returns ``ret (N,)`` (a float64 tensor), ``mean``, ``var``, ``count``."""
        return {"ret": torch.from_numpy(self.ret.copy()), "mean": self.mean, "var": self.var, "count": self.count}

    def load_state_dict(self, s: dict) -> None:
        """Inverse of :meth:`state_dict` (``ret`` as a tensor or an array)."""
        ret = s["ret"].cpu().numpy() if torch.is_tensor(s["ret"]) else np.asarray(s["ret"])
        self.ret, self.mean, self.var, self.count = ret.astype(np.float64).copy(), s["mean"], s["var"], s["count"]


# ---------------------------------------------------------------------- rollouts
@dataclass
class Rollout:
    """One iteration of on-policy data, all ``(T, N, ...)``.

    ``observations``/``next_observations``: histories ``(T, N, To, Do)`` raw
    (``next_observations`` ends with the real next observation; the names of
    :class:`~robotrl.data.Batch`); a camera env's ``Dict`` observations: the same (nested) dict, each entry
    ``(T, N, To, ...)`` (frames uint8 ``(T, N, To, H, W, C)``); ``rewards`` raw chunk sums; ``scaled_rewards`` after running
    scaling (= rewards when off); ``terminated``/``truncated``/``valid`` bool;
    ``extras``: what the agent's ``rollout_act`` returned, stacked (tensors).
    """

    observations: np.ndarray | dict
    next_observations: np.ndarray | dict
    rewards: np.ndarray
    scaled_rewards: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray
    extras: dict[str, torch.Tensor]
    env_steps: int
    episode_returns: list[float] = field(default_factory=list)
    episode_successes: list[bool] = field(default_factory=list)


def _tree(fn: Callable, *xs):
    """``fn`` over the arrays of observations alike: plain arrays, or a camera env's (nested) ``Dict`` entry by entry."""
    if isinstance(xs[0], Mapping):
        return {k: _tree(fn, *(x[k] for x in xs)) for k in xs[0]}
    return fn(*xs)


def _obs_array(x) -> np.ndarray:
    """An observation array as stored: frames stay uint8, everything else float32."""
    x = np.asarray(x)
    return x if x.dtype == np.uint8 else x.astype(np.float32)


def _leaves(tree) -> list:
    """The leaves of a :func:`_tree` result."""
    return [v for x in tree.values() for v in _leaves(x)] if isinstance(tree, Mapping) else [tree]


def _rows(mask: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``mask (N,)`` shaped to broadcast over ``x (N, ...)``."""
    return mask.reshape(-1, *([1] * (x.ndim - 1)))


class RolloutCollector:
    """Steps ``N`` vector envs with an on-policy agent, handling next-step autoreset.

    Observations are flat ``(N, Do)`` or a camera env's ``Dict`` (:class:`robotrl.envs.pixels.PixelObservation`),
    whose entries (frames included) get histories alike; ``agent.rollout_act`` then takes that dict of
    ``(N, To, ...)`` histories.

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
        self.hist = _tree(lambda o: np.repeat(_obs_array(o)[:, None], self.To, axis=1), obs)
        self.resetting = np.zeros(self.N, bool)
        self.ep_ret = np.zeros(self.N)
        self.ep_succ = np.zeros(self.N, bool)
        self.fresh = np.zeros(self.N, bool)  # reset by autoreset and not stepped since: restorable (state_dict)
        self.reset_rng: list[dict | None] = [None] * self.N  # each env's generator state before its last autoreset

    def _success(self, info: dict) -> np.ndarray:
        for key in ("episode_success", "success", "is_success"):
            if key in info:
                return np.asarray(info[key], bool) & np.asarray(info.get("_" + key, True), bool)
        return np.zeros(self.N, bool)

    @torch.no_grad()
    def collect(self, agent, T: int) -> Rollout:
        """``T`` vector steps with ``agent.rollout_act``; returns the :class:`Rollout`."""
        N, To = self.N, self.To
        obs_b, nobs_b = (_tree(lambda h: np.zeros((T, *h.shape), h.dtype), self.hist) for _ in range(2))
        rew64 = np.zeros((T, N), np.float64)
        term_b, trunc_b, valid_b = np.zeros((T, N), bool), np.zeros((T, N), bool), np.zeros((T, N), bool)
        extras: dict[str, list] = {}
        env_steps, rets, succs = 0, [], []
        for t in range(T):
            actions, ext = agent.rollout_act(self.hist)
            for k, v in ext.items():
                extras.setdefault(k, []).append(v)
            if self.resetting.any():  # this step resets them: remember their generators (exact resume)
                gens = self.envs.get_attr("np_random")
                for i in np.flatnonzero(self.resetting):
                    self.reset_rng[i] = gens[i].bit_generator.state
            next_obs, r, term, trunc, info = self.envs.step(actions)
            next_obs = _tree(_obs_array, next_obs)
            valid = ~self.resetting
            r = np.where(valid, np.asarray(r, np.float64), 0.0)
            term, trunc = np.asarray(term, bool) & valid, np.asarray(trunc, bool) & valid
            nhist = _tree(lambda h, o: np.concatenate([h[:, 1:], o[:, None]], axis=1), self.hist, next_obs)
            _tree(lambda b, h, t=t: b.__setitem__(t, h), obs_b, self.hist)
            _tree(lambda b, h, t=t: b.__setitem__(t, h), nobs_b, nhist)
            rew64[t] = r
            term_b[t], trunc_b[t], valid_b[t] = term, trunc, valid
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
            self.hist = _tree(lambda o, h: np.where(_rows(self.resetting, h), np.repeat(o[:, None], To, axis=1), h),
                              next_obs, nhist)
            if self.resetting.any():  # per-env state (chunk queues)
                agent.reset_rollout(np.flatnonzero(self.resetting))
            self.fresh = self.resetting.copy()
            self.resetting = done
        stacked = {k: torch.stack(v, 0) for k, v in extras.items()}
        rew = rew64.astype(np.float32)
        srew = self.scaler.scale_rollout(rew64, term_b | trunc_b, valid_b) if self.scaler is not None else rew.copy()
        return Rollout(obs_b, nobs_b, rew, srew, term_b, trunc_b, valid_b, stacked, env_steps, rets, succs)

    def state_dict(self) -> dict:
        """The collector's state for a checkpoint: the reward scaler's running statistics, the
        observation histories ``hist (N, To, Do)`` (a camera env's: a dict of them), which envs are ``fresh`` (just reset by
        autoreset, not stepped since) and their generators before that reset."""
        return {"scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "hist": _tree(lambda h: torch.from_numpy(h.copy()), self.hist), "fresh": torch.from_numpy(self.fresh.copy()),
                "reset_rng": list(self.reset_rng)}

    def load_state_dict(self, state: dict) -> bool:
        """Restore a checkpointed collector into these (freshly reset) envs.

        The reward scaler's statistics always come back. The envs come back exactly when every
        env was ``fresh`` at the checkpoint (its iterations end at episode boundaries, e.g. fixed
        episodes of ``steps_per_iter - 1`` chunk steps): each env's generator is set to its state
        before that reset and the env is reset again, giving the same observation and generator
        as the uninterrupted run. Otherwise the envs start new episodes (the reset of
        ``__init__``) and the scaler's per-env returns restart at 0.

        Returns:
            Whether the envs were restored exactly.
        """
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        fresh, rngs = np.asarray(state["fresh"], bool), state["reset_rng"]
        exact = len(rngs) == self.N and bool(fresh.all()) and all(r is not None for r in rngs)
        if exact:
            gens = []
            for r in rngs:
                gen = np.random.Generator(getattr(np.random, r["bit_generator"])())
                gen.bit_generator.state = r
                gens.append(gen)
            self.envs.set_attr("np_random", gens)
            obs, _ = self.envs.reset()
            hist = _tree(lambda h: _obs_array(h).copy(), state["hist"])
            same = _tree(lambda o, h: bool(np.array_equal(_obs_array(o), h[:, -1])), obs, hist)
            exact = all(_leaves(same))
            if exact:
                self.hist, self.fresh, self.reset_rng = hist, fresh.copy(), list(rngs)
        if not exact and self.scaler is not None:
            self.scaler.ret[:] = 0.0
        return exact


# ---------------------------------------------------------------------- the loop
class OnPolicyLoop:
    """Iterations of rollout → ``agent.update_rollout`` (run by :class:`~robotrl.runner.Runner`).

    Its clock is the iteration (``eval_every``/``checkpoint_every`` count iterations); ``step``
    counts env steps and ``updates`` iterations. Checkpoints add the rollout collector's state
    (:meth:`RolloutCollector.state_dict`: the reward scaler's running statistics, and the envs
    where they can be restored), so a resumed run goes on as the uninterrupted one would.

    Args:
        agent: an on-policy agent (module docstring).
        config: :class:`OnPolicyConfig`.
        make_train_envs: ``() -> VectorEnv`` of ``num_envs`` envs executing ``Te``-step chunks.
        seed: run seed (the collector's first reset uses ``seed + iteration``).
        offline_buffer: demonstrations for ``pretrain_steps`` of ``agent.bc_update``.
        make_collector: ``reset_seed -> collector`` replacing the local :class:`RolloutCollector`
            (same ``collect``/``state_dict``/``load_state_dict``, plus ``close``), e.g. Ray rollout
            workers (:mod:`robotrl.distributed.collector`); ``None``: local vector envs.

    Raises:
        ValueError: ``pretrain_steps > 0`` without a dataset or an agent with ``bc_update``.
    """

    def __init__(self, agent: OnPolicyAgent, config: OnPolicyConfig, *, make_train_envs: Callable[[], gym.vector.VectorEnv],
                 seed: int = 0, offline_buffer=None, make_collector: Callable[[int], Any] | None = None):
        if config.pretrain_steps > 0 and (offline_buffer is None or not isinstance(agent, BCPretrainer)):
            raise ValueError("onpolicy.pretrain_steps > 0 needs a dataset and an agent with bc_update (e.g. agent=ppo)")
        self.agent, self.cfg, self.offline = agent, config, offline_buffer
        self.make_train_envs, self.seed, self.make_collector = make_train_envs, seed, make_collector
        self.step = 0          # env steps
        self.updates = 0       # iterations
        self.collector: RolloutCollector | None = None
        self._collector_state: dict | None = None

    @property
    def iteration(self) -> int:
        """Iterations done (= ``updates``)."""
        return self.updates

    # ------------------------------------------------------------------ Loop protocol
    @property
    def clock(self) -> int:
        """The cadence counter: iterations."""
        return self.updates

    @property
    def total(self) -> int:
        """``iterations``."""
        return self.cfg.iterations

    @property
    def log_every(self) -> int:
        """Training metrics after every iteration."""
        return 1

    def phase(self) -> str:
        """``"online"`` once an iteration ran."""
        return "online" if self.updates > 0 else "offline"

    def done(self) -> bool:
        """Whether ``iterations`` or ``max_env_steps`` is reached."""
        c = self.cfg
        return self.updates >= c.iterations or (c.max_env_steps is not None and self.step >= c.max_env_steps)

    def start(self, runner: Runner, warm_started: bool) -> None:
        """``pretrain_steps`` of behaviour cloning, the offline evaluation (of the pretrained or
        warm-started policy); after pretraining a checkpoint (a kill from there resumes online)."""
        self._pretrain(runner)
        runner.evaluate("offline")
        if self.cfg.pretrain_steps:
            runner.save()

    def run(self, runner: Runner) -> None:
        """Iterations until :meth:`done` (the runner evaluates and checkpoints the end)."""
        if self.done():
            return
        if self.make_collector is not None:  # e.g. Ray rollout workers (robotrl.distributed.collector)
            self.collector = self.make_collector(self.seed + self.updates)
            close = self.collector.close
        else:
            envs = self.make_train_envs()
            close = envs.close
        try:
            if self.make_collector is None:
                self.collector = RolloutCollector(envs, self.agent.policy.To, gamma=self.agent.gamma,
                                                  reward_scaling=self.agent.reward_scaling, seed=self.seed + self.updates)
            if self._collector_state is not None:
                self.collector.load_state_dict(self._collector_state)
            if self.offline is not None:
                self.agent.attach_offline_data(self.offline)  # e.g. knowledge retention's BC term
            self.agent.start_online()  # e.g. knowledge retention's frozen pretrained snapshot
            while not self.done():
                ro = self.collector.collect(self.agent, self.cfg.steps_per_iter)
                metrics = self.agent.update_rollout(ro, self.updates)
                self.step += ro.env_steps
                self.updates += 1
                train_return = float(np.mean(ro.episode_returns)) if ro.episode_returns else float("nan")
                runner.tick({"train_return": train_return, **metrics}, "online")
        finally:
            close()

    def state_dict(self, ckpt_dir: Path) -> dict:
        """The collector's state (``collector``; ``None`` before the first iteration)."""
        return {"collector": self.collector.state_dict() if self.collector is not None else self._collector_state}

    def load_state_dict(self, state: dict, ckpt_dir: Path) -> None:
        """Keep the collector's state for the collector :meth:`run` creates."""
        self._collector_state = state.get("collector")

    def summary(self, history: list[dict]) -> dict:
        """Env steps, iterations, the first (offline) evaluation; onset window from env step 0."""
        first = history[0]
        return {"offline_return": first["return_mean"], "offline_success_rate": first["success_rate"],
                "online_steps": self.step, "iterations": self.updates,
                "onset": {"online_start": 0, "first_update": 0, "budget": self.step}}

    def _pretrain(self, runner: Runner) -> None:
        """``pretrain_steps`` behaviour-cloning updates on the offline buffer (BC then PPO in one run)."""
        n = self.cfg.pretrain_steps
        for i in range(n):
            metrics = self.agent.bc_update(self.offline.sample(self.cfg.pretrain_batch_size))
            runner.log("pretrain", metrics, step=i + 1)  # the BC loss in TensorBoard, not only on the console
            if (i + 1) % max(1, n // 5) == 0:
                runner.print(f"[pretrain update {i + 1}/{n}] bc_loss {float(metrics['bc_loss']):.4f}")


def OnPolicyTrainer(agent: OnPolicyAgent, run_dir: str | Path, config: OnPolicyConfig, *,
                    make_train_envs: Callable[[], gym.vector.VectorEnv], make_eval_env: Callable[[], gym.Env],
                    ref_scores: tuple[float, float] | None = None, seed: int = 0, run_config: dict | None = None,
                    title: str = "", offline_buffer=None, init_from: str | Path | None = None,
                    init_parts: list[str] | None = None, make_collector: Callable[[int], Any] | None = None,
                    evaluator: Callable[..., dict] | None = None) -> Runner:
    """A :class:`~robotrl.runner.Runner` driving an :class:`OnPolicyLoop` (the on-policy trainer).

    Checkpoints have the off-policy layout (``agent``, ``policy``, ``config``, ``history``,
    ``step`` = env steps), so ``robotrl eval`` and :func:`robotrl.policy.load_policy` rebuild
    the fine-tuned policy. ``init_from``/``init_parts``: the warm start
    (:func:`~robotrl.warmstart.warm_start`; ``agent.load_pretrained`` converts foreign checkpoints).
    ``make_collector``: as :class:`OnPolicyLoop`; ``evaluator``: as :class:`~robotrl.runner.Runner`.

    Raises:
        ValueError: as :class:`OnPolicyLoop`.
    """
    loop = OnPolicyLoop(agent, config, make_train_envs=make_train_envs, seed=seed, offline_buffer=offline_buffer,
                        make_collector=make_collector)
    return Runner(loop, run_dir, make_eval_env=make_eval_env, ref_scores=ref_scores, seed=seed,
                  run_config=run_config, title=title, init_from=init_from, init_parts=init_parts, evaluator=evaluator)
