"""On-policy rollouts from Ray actors: ``W`` workers, each a vector env and a copy of the policy.

:class:`RayRolloutCollector` is a drop-in for :class:`robotrl.onpolicy.RolloutCollector`
(``collect(agent, T) -> Rollout``, ``state_dict``, ``load_state_dict``, ``close``) selected
with ``collector=ray collector.workers=W``. The ``N = agent.onpolicy.num_envs`` envs are split
in order into ``W`` shards (:func:`~robotrl.distributed.split_envs`); worker ``k`` owns envs
``[o_k, o_k + n_k)`` and runs the local :class:`~robotrl.onpolicy.RolloutCollector` on them, so
the semantics are the local ones by construction: gymnasium's next-step autoreset (reset-only
steps ``valid = False``), the real final observation in ``next_observations``, ``terminated``
and ``truncated`` apart, executed env steps, episode returns and successes.

Per iteration the learner puts the policy's ``state_dict`` as NumPy arrays in Ray's object
store once; each worker loads it into its own copy of the agent (built from the agent's
Hydra config, never a pickled module), collects ``T`` steps and returns arrays, which are
concatenated along the env axis. What would differ if it were done per worker is done on the
learner, over all ``N`` envs, exactly as locally:

- running reward scaling (:class:`~robotrl.onpolicy.RunningRewardScaler`: one running
  variance over every env's return), from the workers' float64 rewards;
- the order of the episode statistics (by step, then global env index);
- the sampling generator: worker 0 samples with the learner agent's ``gen`` (its state goes
  there and back), workers ``k ≥ 1`` with their own generators seeded from the run seed and
  ``k``. With one worker a Ray run is therefore the local run, transition for transition.

Env seeds: env ``i`` of the run is seeded ``seed + i`` whichever worker owns it (as locally).

Failures: a worker that dies (or exceeds ``timeout_s``) during an iteration is, by
``on_failure``: ``"restart"`` (default) replaced by a new actor whose envs start new
episodes, and its shard collected again (at most ``max_restarts`` times per iteration), with
a warning; ``"drop"`` removed with a warning, the iteration completing with the other
shards' envs (``N`` shrinks for the rest of the run: the rollout is smaller, never padded);
``"fail"``: :class:`~robotrl.distributed.WorkerFailedError`. Every failure is also counted in
:attr:`RayRolloutCollector.failures`.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from robotrl.distributed import WorkerFailedError, arrays_to_state, init_ray, split_envs, state_to_arrays
from robotrl.errors import ConfigError
from robotrl.onpolicy import Rollout, RolloutCollector, RunningRewardScaler

#: Seconds a new collector waits for the CPUs its workers reserve (ended actors free theirs asynchronously).
RESOURCE_WAIT_S = 30.0
_ROLLOUT_ARRAYS = ("observations", "next_observations", "rewards", "terminated", "truncated", "valid")


@dataclass
class RayCollectorConfig:
    """``collector`` config group (``configs/collector/ray.yaml``).

    Attributes:
        workers: ``W`` rollout actors (``N`` envs split evenly; needs ``N ≥ W``).
        address: Ray cluster (``None``: ``$RAY_ADDRESS`` or a new local cluster; ``"auto"``;
            ``"host:port"``), see :func:`robotrl.distributed.init_ray`.
        cpus_per_worker: CPUs Ray reserves per actor.
        vectorization: each worker's vector env (``"sync"``/``"async"``).
        on_failure: ``"restart"``, ``"drop"`` or ``"fail"`` (module doc).
        max_restarts: restarts of one shard within one iteration before it fails.
        timeout_s: seconds one worker may take for one iteration (``None``: no limit).
        eval_workers: evaluation episodes on this many Ray workers (0: local evaluation).
        torch_threads: torch threads in each worker.
    """

    kind: str = "ray"
    workers: int = 2
    address: str | None = None
    cpus_per_worker: float = 1.0
    vectorization: str = "sync"
    on_failure: str = "restart"
    max_restarts: int = 2
    timeout_s: float | None = None
    eval_workers: int = 0
    torch_threads: int = 1

    def __post_init__(self) -> None:
        """Raises ConfigError on an unknown kind/policy or a count below 1."""
        if self.kind != "ray":
            raise ConfigError(f"collector.kind={self.kind!r}: this config is for kind=ray (collector=local is the default)")
        if self.on_failure not in ("restart", "drop", "fail"):
            raise ConfigError(f"collector.on_failure={self.on_failure!r}: choose restart, drop or fail")
        if self.workers < 1 or self.max_restarts < 0 or self.eval_workers < 0:
            raise ConfigError("collector.workers must be >= 1, collector.max_restarts and collector.eval_workers >= 0")


def build_worker_agent(spec: dict[str, Any]):
    """A CPU copy of the learner's agent for acting, built by the one build path's
    :func:`robotrl.experiment_parts.build_agent`: ``spec`` is
    :func:`robotrl.experiment.worker_agent_spec` (``{"model": agent.model config with _target_,
    "observation": ObservationSpec.to_dict(), "seed", "init_from", "init_parts"}``). Normalisers
    start as identities (the policy's weights, loaded every iteration, carry the real ones); a warm
    start (``init_from``, a path the worker must see: a shared filesystem on a cluster) gives the
    policy its structure where that depends on it (a residual's base)."""
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
    from robotrl.experiment_parts import build_agent
    from robotrl.spec import ObservationSpec

    obs = ObservationSpec.from_dict(spec.get("observation") or {"obs_dim": spec["obs_dim"], "action_dim": spec["action_dim"]})
    d, a = obs.obs_dim, obs.action_dim
    agent = build_agent(spec["model"], obs, obs_normalizer=ObservationNormalizer.identity(d) if d else None,
                        action_scaler=ActionScaler(-np.ones(a, np.float32), np.ones(a, np.float32)), device="cpu",
                        seed=int(spec.get("seed", 0)))
    if spec.get("init_from"):
        from robotrl.warmstart import warm_start

        warm_start(agent, spec["init_from"], spec.get("init_parts"))
    return agent


class _RewardTap:
    """Stands in for the worker collector's reward scaler: keeps the float64 rewards (the learner
    scales them over all envs) and returns them unscaled."""

    def __init__(self, n: int):
        self.ret = np.zeros(n)  # what RolloutCollector.load_state_dict zeroes
        self.rewards: np.ndarray | None = None

    def scale_rollout(self, rewards, dones, valid=None) -> np.ndarray:
        self.rewards = np.asarray(rewards, np.float64).copy()
        return np.asarray(rewards, np.float32)

    def state_dict(self) -> None:
        return None


class RolloutWorker:
    """One Ray actor: ``num_envs`` envs (global ``offset``) and a copy of the agent.

    Args:
        agent_spec: :func:`build_worker_agent`'s spec.
        env_args: ``{"name", "env_kwargs", "max_episode_steps", "terminate_on_success"}``
            (:func:`robotrl.task_mdp.train_env_args`).
        offset, num_envs: the shard; env ``j`` is seeded ``seed + offset + j``.
        seed: the run seed; vectorization: ``"sync"``/``"async"``; torch_threads: per worker.
    """

    def __init__(self, agent_spec: dict, env_args: dict, *, offset: int, num_envs: int, seed: int,
                 vectorization: str = "sync", torch_threads: int = 1):
        from robotrl.envs import make_env_from_args

        torch.set_num_threads(int(torch_threads))
        self.agent = build_worker_agent(agent_spec)
        self.offset, self.n = int(offset), int(num_envs)
        self.envs = make_env_from_args(env_args, num_envs=self.n, seed=int(seed) + self.offset, vectorization=vectorization,
                                       action_chunk=int(self.agent.policy.Te))  # declared by the on-policy protocol
        self.collector: RolloutCollector | None = None

    def start(self, reset_seed: int, gen_seed: int | None) -> int:
        """New episodes: envs reset with ``reset_seed + offset + j``; own generator seeded ``gen_seed``."""
        self.collector = RolloutCollector(self.envs, self.agent.policy.To, reward_scaling=False,
                                          seed=int(reset_seed) + self.offset)
        self.collector.scaler = _RewardTap(self.n)
        if gen_seed is not None and isinstance(getattr(self.agent, "gen", None), torch.Generator):
            self.agent.gen.manual_seed(int(gen_seed))
        return os.getpid()

    def collect(self, weights: dict[str, np.ndarray], T: int, gen_state: np.ndarray | None) -> dict:
        """``T`` steps with these policy weights (and generator state, worker 0); the rollout as arrays."""
        self.agent.policy.load_state_dict(arrays_to_state(weights), strict=True)
        if gen_state is not None:
            self.agent.gen.set_state(torch.from_numpy(np.array(gen_state, copy=True)))
        tap = self.collector.scaler
        tap.rewards = None
        ro = self.collector.collect(self.agent, int(T))
        out = {k: getattr(ro, k) for k in _ROLLOUT_ARRAYS}
        out["rewards64"] = tap.rewards
        out["extras"] = {k: v.detach().cpu().numpy() for k, v in ro.extras.items()}
        out.update(env_steps=ro.env_steps, episode_returns=ro.episode_returns, episode_successes=ro.episode_successes)
        out["gen_state"] = self.agent.gen.get_state().numpy() if gen_state is not None else None
        return out

    def state_dict(self) -> dict:
        """The shard collector's :meth:`~robotrl.onpolicy.RolloutCollector.state_dict` (arrays)."""
        s = self.collector.state_dict()
        return {"hist": s["hist"].numpy(), "fresh": s["fresh"].numpy(), "reset_rng": s["reset_rng"]}

    def load_state_dict(self, state: dict) -> bool:
        """Restore the shard's envs where exact (:meth:`~robotrl.onpolicy.RolloutCollector.load_state_dict`)."""
        return self.collector.load_state_dict({**state, "scaler": None})

    def evaluate(self, policy_state: dict, env_args: dict, num_episodes: int, seed: int, num_envs: int) -> dict:
        """Evaluation episodes in this (idle) worker: :func:`robotrl.distributed.evaluation._evaluate_block`."""
        from robotrl.distributed.evaluation import _evaluate_block

        return _evaluate_block(policy_state, env_args, num_episodes, seed, num_envs)

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def close(self) -> None:
        """Close the envs."""
        self.envs.close()


def _free_cpus(ray, need: float, wait_s: float = RESOURCE_WAIT_S) -> float:
    """Free CPUs of the cluster, waiting up to ``wait_s`` seconds for ``need`` of them: actors that were
    just ended (a previous collector's, a restarted run's) give their CPUs back asynchronously."""
    deadline = time.monotonic() + wait_s
    while True:
        have = float(ray.available_resources().get("CPU", 0.0))
        if have >= need or time.monotonic() >= deadline:
            return have
        time.sleep(0.2)


def worker_gen_seed(index: int, reset_seed: int, restarts: int = 0) -> int:
    """Seed of worker ``index``'s own sampling generator (workers ``k ≥ 1``, and worker 0 when the
    learner's generator is not a CPU one) after ``restarts`` restarts; ``reset_seed`` = ``seed + iteration``."""
    return 7_919 * (int(index) + 1) + int(reset_seed) + 104_729 * int(restarts)


@dataclass
class _Shard:
    index: int        # the worker slot (k); fixes its env seeds and generator seed
    offset: int       # global index of its first env (seeding)
    n: int
    actor: Any
    restarts: int = 0     # this iteration (limit: max_restarts)
    generation: int = 0   # restarts over the run (seeds of the replacement's envs and generator)


class RayRolloutCollector:
    """Rollouts of ``num_envs`` envs from ``cfg.workers`` Ray actors (module doc).

    Args:
        agent: the learner's on-policy agent (its ``policy`` weights are sent every iteration).
        agent_spec: :func:`build_worker_agent`'s spec of the same agent.
        env_args: the training env (:class:`RolloutWorker`).
        num_envs: ``N``; cfg: :class:`RayCollectorConfig`.
        seed: run seed (env seeds); reset_seed: first reset seed (the loop's ``seed + iteration``).

    Raises:
        RayUnavailableError: ray is not installed.
        ValueError: fewer envs than workers.
        WorkerFailedError: the cluster has fewer free CPUs than the workers reserve.
    """

    def __init__(self, agent, *, agent_spec: dict, env_args: dict, num_envs: int, cfg: RayCollectorConfig,
                 seed: int = 0, reset_seed: int = 0):
        self.ray = init_ray(cfg.address)
        self.cfg, self.agent_spec, self.env_args = cfg, agent_spec, env_args
        self.seed, self.reset_seed = int(seed), int(reset_seed)
        self.To = int(agent.policy.To)
        need, have = cfg.workers * cfg.cpus_per_worker, _free_cpus(self.ray, cfg.workers * cfg.cpus_per_worker)
        if need > have:  # Ray would keep the actors pending forever
            raise WorkerFailedError(
                f"collector=ray needs {need:g} free CPUs ({cfg.workers} workers x collector.cpus_per_worker="
                f"{cfg.cpus_per_worker:g}) and the Ray cluster has {have:g}: lower collector.workers or "
                "collector.cpus_per_worker, or add nodes (ray start --address=<head>:6379 on each)")
        self._remote = self.ray.remote(num_cpus=cfg.cpus_per_worker)(RolloutWorker)
        gen = getattr(agent, "gen", None)
        self.share_gen = isinstance(gen, torch.Generator) and gen.device.type == "cpu"
        self.shards = [_Shard(k, off, n, None) for k, (off, n) in enumerate(split_envs(int(num_envs), int(cfg.workers)))]
        for s in self.shards:
            s.actor = self._spawn(s)
        self.ray.get([self._start(s) for s in self.shards])
        self.scaler = RunningRewardScaler(self.N, agent.gamma) if agent.reward_scaling else None
        self.failures: list[dict] = []
        self._closed_state: dict | None = None

    # ------------------------------------------------------------------ workers
    @property
    def N(self) -> int:
        """Envs collected from (shrinks when a worker is dropped)."""
        return sum(s.n for s in self.shards)

    def _spawn(self, s: _Shard):
        return self._remote.remote(self.agent_spec, self.env_args, offset=s.offset, num_envs=s.n, seed=self.seed,
                                   vectorization=self.cfg.vectorization, torch_threads=self.cfg.torch_threads)

    def _start(self, s: _Shard):
        own_gen = None if (s.index == 0 and self.share_gen) else worker_gen_seed(s.index, self.reset_seed, s.generation)
        return s.actor.start.remote(self.reset_seed + 1_000_003 * s.generation, own_gen)

    def worker_pids(self) -> list[int]:
        """Process ids of the live workers, in shard order."""
        return self.ray.get([s.actor.pid.remote() for s in self.shards])

    def _failed(self, s: _Shard, exc: BaseException) -> bool:
        """Handle a dead worker; True when it was restarted (collect its shard again)."""
        envs = f"envs {s.offset}..{s.offset + s.n - 1}"
        self.failures.append({"worker": s.index, "envs": [s.offset, s.offset + s.n], "error": repr(exc)[:300],
                              "action": self.cfg.on_failure})
        try:
            self.ray.kill(s.actor)
        except Exception:  # noqa: BLE001 - already gone
            pass
        pos = self._position(s)
        if self.cfg.on_failure == "restart" and s.restarts < self.cfg.max_restarts:
            s.restarts += 1
            s.generation += 1
            warnings.warn(f"Ray rollout worker {s.index} ({envs}) failed ({type(exc).__name__}); restarted "
                          f"(restart {s.restarts}/{self.cfg.max_restarts} this iteration): its envs start new episodes",
                          RuntimeWarning, stacklevel=3)
            s.actor = self._spawn(s)
            self.ray.get(self._start(s))
            if self.scaler is not None:
                self.scaler.ret[pos:pos + s.n] = 0.0
            return True
        if self.cfg.on_failure == "drop" and len(self.shards) > 1:
            warnings.warn(f"Ray rollout worker {s.index} ({envs}) failed ({type(exc).__name__}); dropped: this and "
                          f"later iterations collect from {self.N - s.n} envs instead of {self.N}",
                          RuntimeWarning, stacklevel=3)
            self.shards.remove(s)
            if self.scaler is not None:
                self.scaler.ret = np.delete(self.scaler.ret, np.arange(pos, pos + s.n))
            return False
        why = ("on_failure=fail" if self.cfg.on_failure == "fail" else
               f"it failed {s.restarts + 1} times this iteration (collector.max_restarts={self.cfg.max_restarts})"
               if self.cfg.on_failure == "restart" else "it was the last worker")
        raise WorkerFailedError(f"Ray rollout worker {s.index} ({envs}) failed and the iteration cannot complete: {why}. "
                                f"Cause: {exc!r}. Set collector.on_failure=restart or drop to continue without it, "
                                "or check the worker's log (ray logs / the driver's output)") from exc

    def _position(self, s: _Shard) -> int:
        return sum(t.n for t in self.shards[: self.shards.index(s)])

    # ------------------------------------------------------------------ collection
    def collect(self, agent, T: int) -> Rollout:
        """``T`` vector steps on every worker with ``agent``'s current policy; the merged :class:`Rollout`.

        Raises:
            WorkerFailedError: a worker failed and ``on_failure`` does not continue (module doc).
        """
        ray = self.ray
        from robotrl.agent import agent_device

        weights = ray.put(state_to_arrays(agent.policy.state_dict()))
        gen_state = agent.gen.get_state().numpy() if self.share_gen else None
        for s in self.shards:
            s.restarts = 0

        def submit(s: _Shard):
            return s.actor.collect.remote(weights, int(T), gen_state if (s.index == 0 and self.share_gen) else None)

        pending = {s.index: submit(s) for s in self.shards}
        results: dict[int, dict] = {}
        while pending:
            for s in list(self.shards):
                if s.index not in pending:
                    continue
                try:
                    results[s.index] = ray.get(pending.pop(s.index), timeout=self.cfg.timeout_s)
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:  # died / hung
                    if self._failed(s, exc):
                        pending[s.index] = submit(s)
        parts = [results[s.index] for s in self.shards]
        if self.share_gen and self.shards[0].index == 0:
            agent.gen.set_state(torch.from_numpy(np.array(parts[0]["gen_state"], copy=True)))
        return self._merge(parts, agent_device(agent))

    def _merge(self, parts: list[dict], device: torch.device) -> Rollout:
        cat = {k: np.concatenate([p[k] for p in parts], axis=1) for k in _ROLLOUT_ARRAYS}
        r64 = np.concatenate([p["rewards64"] for p in parts], axis=1)
        srew = (self.scaler.scale_rollout(r64, cat["terminated"] | cat["truncated"], cat["valid"])
                if self.scaler is not None else cat["rewards"].copy())
        extras = {k: torch.from_numpy(np.concatenate([p["extras"][k] for p in parts], axis=1)).to(device)
                  for k in parts[0]["extras"]}
        # episode statistics in the local order: by step, then by global env index
        keys, rets, succs, pos = [], [], [], 0
        for p in parts:
            ends = np.argwhere(p["terminated"] | p["truncated"])  # row-major: the order the worker appended them
            keys += [(int(t), int(i) + pos) for t, i in ends]
            rets += list(p["episode_returns"])
            succs += list(p["episode_successes"])
            pos += p["rewards"].shape[1]
        order = sorted(range(len(keys)), key=keys.__getitem__)
        return Rollout(cat["observations"], cat["next_observations"], cat["rewards"], srew, cat["terminated"],
                       cat["truncated"], cat["valid"], extras, int(sum(p["env_steps"] for p in parts)),
                       [rets[i] for i in order], [succs[i] for i in order])

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict:
        """:meth:`robotrl.onpolicy.RolloutCollector.state_dict`'s layout over all ``N`` envs
        (a Ray run's checkpoint resumes locally and the other way round)."""
        if not self.shards:  # closed: the state it had then (the runner checkpoints after the loop ends)
            return self._closed_state
        parts = self.ray.get([s.actor.state_dict.remote() for s in self.shards])
        return {"scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "hist": torch.from_numpy(np.concatenate([p["hist"] for p in parts], 0)),
                "fresh": torch.from_numpy(np.concatenate([p["fresh"] for p in parts], 0)),
                "reset_rng": [r for p in parts for r in p["reset_rng"]]}

    def load_state_dict(self, state: dict) -> bool:
        """Restore a checkpointed collector: the scaler always, each shard's envs where exact (its
        envs all fresh at the checkpoint); the scaler's per-env returns restart at 0 for the others.

        Returns:
            Whether every shard was restored exactly.
        """
        if self.scaler is not None and state.get("scaler") is not None:
            self.scaler.load_state_dict(state["scaler"])
        hist, fresh, rngs = np.asarray(state["hist"]), np.asarray(state["fresh"], bool), list(state["reset_rng"])
        if len(rngs) != self.N or hist.shape[0] != self.N:
            if self.scaler is not None:
                self.scaler.ret = np.zeros(self.N)
            return False
        calls, pos = [], 0
        for s in self.shards:
            sl = slice(pos, pos + s.n)
            calls.append(s.actor.load_state_dict.remote({"hist": hist[sl], "fresh": fresh[sl], "reset_rng": rngs[sl]}))
            pos += s.n
        exact = self.ray.get(calls)
        pos = 0
        for s, ok in zip(self.shards, exact):
            if not ok and self.scaler is not None:
                self.scaler.ret[pos:pos + s.n] = 0.0
            pos += s.n
        return all(exact)

    def close(self) -> None:
        """Keep the collector's state (:meth:`state_dict` still answers), close the workers' envs, end the actors."""
        if not self.shards:
            return
        try:
            self._closed_state = self.state_dict()
        except self.ray.exceptions.RayActorError:  # a worker is gone: no exact restore of its envs
            self._closed_state = {"scaler": self.scaler.state_dict() if self.scaler is not None else None,
                                  "hist": torch.zeros(0), "fresh": torch.zeros(0, dtype=torch.bool), "reset_rng": []}
        for s in self.shards:
            try:
                self.ray.get(s.actor.close.remote(), timeout=30)
            except Exception:  # noqa: BLE001 - a dead worker has nothing to close
                pass
            self.ray.kill(s.actor)
        self.shards = []


class ray_collector_factory:
    """``reset_seed -> RayRolloutCollector`` for :class:`robotrl.onpolicy.OnPolicyLoop` (``make_collector``);
    :meth:`actors` lists the live workers of the collector it made last (evaluation runs on them)."""

    def __init__(self, cfg: RayCollectorConfig, agent, *, agent_spec: dict, env_args: dict, num_envs: int, seed: int):
        self.cfg, self.agent, self.agent_spec, self.env_args = cfg, agent, agent_spec, env_args
        self.num_envs, self.seed = num_envs, seed
        self.current: RayRolloutCollector | None = None

    def __call__(self, reset_seed: int) -> RayRolloutCollector:
        self.current = RayRolloutCollector(self.agent, agent_spec=self.agent_spec, env_args=self.env_args,
                                           num_envs=self.num_envs, cfg=self.cfg, seed=self.seed, reset_seed=reset_seed)
        return self.current

    def actors(self) -> list:
        """The live rollout actors (none before the first iteration or after the run)."""
        return [s.actor for s in self.current.shards] if self.current is not None else []
