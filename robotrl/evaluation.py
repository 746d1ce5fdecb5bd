"""Evaluating a policy in simulation: return, D4RL-normalised score, success rate.

Episodes run in ``N`` independent envs stepped in lock-step so the policy is called on
a batch ``(N, Do)`` per step; each env runs exactly its share of episodes (no autoreset
ambiguity, every episode counted exactly once).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch


def normalized_score(ret: float | np.ndarray, ref_min: float, ref_max: float) -> float | np.ndarray:
    """D4RL normalised score ``100 · (R − R_random) / (R_expert − R_random)``."""
    return 100.0 * (np.asarray(ret) - ref_min) / (ref_max - ref_min)


@torch.no_grad()
def evaluate(
    policy: Callable[[np.ndarray], np.ndarray],
    make_env: Callable[[], gym.Env],
    num_episodes: int,
    *,
    seed: int = 0,
    num_envs: int = 8,
    ref_scores: tuple[float, float] | None = None,
    reset_policy: Callable[[np.ndarray], None] | None = None,
) -> dict[str, float]:
    """Run ``num_episodes`` episodes and summarise them.

    Args:
        policy: maps observations ``(N, Do)`` to actions ``(N, Da)`` (raw units).
        make_env: builds one env with flat observations.
        num_episodes: episodes in total; episode ``i`` is reset with seed ``seed + i``.
        num_envs: envs stepped together (batching policy calls).
        ref_scores: ``(ref_min, ref_max)`` for the normalised score.
        reset_policy: called with the env ids whose episode starts (chunk queues).

    Returns:
        ``return_mean``, ``return_std``, ``length_mean``, ``success_rate`` (NaN when the
        task reports no success), ``normalized_score`` (NaN without references),
        ``episodes``.
    """
    n = max(1, min(num_envs, num_episodes))
    envs = [make_env() for _ in range(n)]
    try:
        returns, lengths, successes = [], [], []
        next_ep = 0
        obs = [None] * n
        ep_ret, ep_len, ep_succ, active = np.zeros(n), np.zeros(n, int), np.zeros(n, bool), np.zeros(n, bool)

        def start(i):
            nonlocal next_ep
            obs[i], _ = envs[i].reset(seed=seed + next_ep)
            next_ep += 1
            ep_ret[i], ep_len[i], ep_succ[i], active[i] = 0.0, 0, False, True
            if reset_policy is not None:
                reset_policy(np.array([i]))

        for i in range(n):
            if next_ep < num_episodes:
                start(i)
        has_success = False
        while active.any():
            ids = np.flatnonzero(active)
            # the whole batch every step (finished envs keep their last observation), so row i is
            # always env i: chunked policies keep per-env queues aligned
            actions = np.asarray(policy(np.stack(obs)))
            for i in ids:
                obs[i], r, term, trunc, info = envs[i].step(actions[i])
                ep_ret[i] += float(r)
                ep_len[i] += 1
                if "success" in info or "is_success" in info:
                    has_success = True
                    ep_succ[i] |= bool(info.get("success", info.get("is_success")))
                if term or trunc:
                    returns.append(ep_ret[i])
                    lengths.append(ep_len[i])
                    successes.append(ep_succ[i])
                    active[i] = False
                    if next_ep < num_episodes:
                        start(i)
        ret = np.asarray(returns)
        out = {
            "return_mean": float(ret.mean()),
            "return_std": float(ret.std()),
            "length_mean": float(np.mean(lengths)),
            "success_rate": float(np.mean(successes)) if has_success else float("nan"),
            "normalized_score": float(normalized_score(ret.mean(), *ref_scores)) if ref_scores else float("nan"),
            "episodes": float(len(ret)),
        }
        return out
    finally:
        for e in envs:
            e.close()
