"""Evaluation episodes on Ray workers (long evaluations: many episodes, slow envs).

Episode ``i`` of an evaluation is reset with seed ``seed + i`` as in
:func:`robotrl.evaluation.evaluate`; the ``E`` episodes are split in contiguous blocks over
``W`` Ray tasks, each running :func:`~robotrl.evaluation.evaluate` on its block with a policy
rebuilt from its class path, constructor kwargs and weights as NumPy arrays
(:func:`robotrl.policy.build_policy`: only ``robotrl.agents`` classes, never a pickled module).
The blocks' summaries are merged exactly (means weighted by episodes, the return std from the
pooled second moment), so a deterministic policy scores the same as in one local evaluation.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from torch import nn

from robotrl.distributed import arrays_to_state, init_ray, split_envs, state_to_arrays
from robotrl.evaluation import normalized_score

_WEIGHTED = ("return_mean", "length_mean", "success_rate", "success_final_rate", "success_any_rate")


def _evaluate_block(policy_state: dict, env_args: dict, num_episodes: int, seed: int, num_envs: int) -> dict:
    """One worker's block: ``num_episodes`` episodes seeded ``seed, seed + 1, ...``."""
    import torch

    from robotrl.envs import make_env_from_args
    from robotrl.evaluation import evaluate
    from robotrl.policy import act, build_policy

    torch.set_num_threads(1)
    policy = build_policy({**policy_state, "state_dict": arrays_to_state(policy_state["state_dict"])})

    def make_eval_env():
        return make_env_from_args(env_args)

    return evaluate(lambda o: act(policy, o), make_eval_env, num_episodes, seed=seed, num_envs=num_envs,
                    reset_policy=policy.reset)


def merge_evaluations(parts: list[dict], ref_scores: tuple[float, float] | None = None) -> dict:
    """One :func:`~robotrl.evaluation.evaluate` summary from the summaries of disjoint episode blocks."""
    n = np.array([p["episodes"] for p in parts], np.float64)
    w = n / n.sum()
    out = {k: float(np.sum(w * np.array([p[k] for p in parts]))) for k in _WEIGHTED}
    second = float(np.sum(w * np.array([p["return_std"] ** 2 + p["return_mean"] ** 2 for p in parts])))
    out["return_std"] = math.sqrt(max(0.0, second - out["return_mean"] ** 2))
    out["normalized_score"] = float(normalized_score(out["return_mean"], *ref_scores)) if ref_scores else float("nan")
    out["episodes"] = float(n.sum())
    metrics = {p["success_metric"] for p in parts if "success_metric" in p}
    if metrics:
        out["success_metric"] = metrics.pop() if len(metrics) == 1 else "mixed"
    return out


def evaluate_on_ray(policy: nn.Module, env_args: dict, num_episodes: int, *, workers: int, seed: int = 0,
                    num_envs: int = 8, ref_scores: tuple[float, float] | None = None, address: str | None = None,
                    cpus_per_worker: float = 1.0, actors: list | None = None) -> dict:
    """:func:`robotrl.evaluation.evaluate` of ``policy`` with the episodes split over ``workers`` Ray tasks.

    Args:
        policy: a robotrl policy (``spec()``; its class under ``robotrl.agents``).
        env_args: ``{"name", "env_kwargs", "max_episode_steps"}`` of the evaluation env.
        num_episodes: ``E``; episode ``i`` is reset with ``seed + i``.
        workers: ``W`` (at most ``E`` are used); num_envs: envs per worker stepped together.
        ref_scores: for the normalised score; address: Ray cluster (:func:`~robotrl.distributed.init_ray`).
        cpus_per_worker: CPUs each evaluation task reserves.
        actors: live :class:`~robotrl.distributed.collector.RolloutWorker` actors to run the blocks on
            (round-robin) instead of new tasks: during training the rollout workers are idle while the
            learner evaluates and hold the cluster's CPUs (tasks would wait for them forever).

    Returns:
        the summary :func:`~robotrl.evaluation.evaluate` returns.

    Raises:
        RayUnavailableError: ray is not installed.
    """
    from robotrl.policy import policy_state

    ray = init_ray(address)
    state = policy_state(policy)
    state["state_dict"] = state_to_arrays(state["state_dict"])
    ref = ray.put(state)
    blocks = split_envs(int(num_episodes), max(1, min(int(workers), int(num_episodes))))
    args = [(ref, env_args, n, int(seed) + off, max(1, min(int(num_envs), n))) for off, n in blocks]
    if actors:
        calls = [actors[i % len(actors)].evaluate.remote(*a) for i, a in enumerate(args)]
    else:
        task = ray.remote(num_cpus=cpus_per_worker)(_evaluate_block)
        calls = [task.remote(*a) for a in args]
    return merge_evaluations(ray.get(calls), ref_scores)


def ray_evaluator(get_policy: Callable[[], nn.Module], env_args: dict, *, workers: int, address: str | None = None,
                  get_actors: Callable[[], list] | None = None) -> Callable[..., dict]:
    """An ``evaluator`` for :class:`robotrl.runner.Runner` that evaluates ``get_policy()`` on Ray
    (the policy callable and env factory the runner passes are replaced by the policy's weights and
    ``env_args``; seeds, episode count, envs and reference scores are the runner's). ``get_actors``:
    the live rollout workers to evaluate on (``[]``/``None``: new tasks, e.g. before the first iteration)."""

    def evaluator(_policy_fn, _make_env, num_episodes: int, *, seed: int = 0, num_envs: int = 8,
                  ref_scores=None, reset_policy=None) -> dict:
        return evaluate_on_ray(get_policy(), env_args, num_episodes, workers=workers, seed=seed, num_envs=num_envs,
                               ref_scores=ref_scores, address=address, actors=get_actors() if get_actors else None)

    return evaluator
