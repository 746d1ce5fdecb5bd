"""Evaluating a policy in simulation: return, D4RL-normalised score, success rate.

Success rate follows each task family's convention (:data:`SUCCESS_CONVENTION`): the
success at the episode's final step for gymnasium-robotics goal envs (Fetch), success at
any step for the others; both are reported (``success_final_rate``, ``success_any_rate``)
and ``success_metric`` names the one that ``success_rate`` is.

Episodes run in ``N`` independent envs stepped in lock-step so the policy is called on
a batch ``(N, Do)`` per step; each env runs exactly its share of episodes (no autoreset
ambiguity, every episode counted exactly once).
"""

from __future__ import annotations

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch

from robotrl.data.spaces import stack_obs


SUCCESS_CONVENTION = ("success_rate = success at the episode's final step for tasks reporting info['is_success'] "
                      "(gymnasium-robotics Fetch/Shadow hand, HER's convention), at any step otherwise (mazes, "
                      "Adroit, Kitchen: D4RL's)")
SUCCESS_METRICS = {"final": "final-step", "any": "any-step"}


def _reports_success(env: gym.Env) -> bool | None:
    """Whether the task has a success signal (robotrl's ``SuccessInfo`` wrapper knows once it
    saw one; it puts ``info["success"] = False`` on every step of tasks without one, such as
    locomotion); ``None`` for an env without the wrapper."""
    try:
        return bool(env.get_wrapper_attr("reports_success"))
    except AttributeError:
        return None


def success_convention(env: gym.Env, saw_is_success: bool = False) -> str:
    """``"final"`` or ``"any"``: the env's :class:`~robotrl.envs.wrappers.SuccessInfo` convention, else
    ``"final"`` when it reported only ``info["is_success"]`` (a goal env), else ``"any"``."""
    try:
        conv = env.get_wrapper_attr("success_convention")
    except AttributeError:
        conv = None
    if conv in SUCCESS_METRICS:
        return conv
    return "final" if saw_is_success else "any"


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
        policy: maps observations ``(N, Do)`` to actions ``(N, Da)`` (raw units); ``Dict`` observations
            (cameras) come stacked per key, ``{key: (N, ...)}``.
        make_env: builds one env with flat observations.
        num_episodes: episodes in total; episode ``i`` is reset with seed ``seed + i``.
        num_envs: envs stepped together (batching policy calls).
        ref_scores: ``(ref_min, ref_max)`` for the normalised score.
        reset_policy: called with the env ids whose episode starts (chunk queues).

    Returns:
        ``return_mean``, ``return_std``, ``length_mean``, ``success_rate`` (the task's
        convention, see :data:`SUCCESS_CONVENTION`), ``success_final_rate`` (success at the
        episode's last step), ``success_any_rate`` (at any step) - the three NaN when the
        task reports no success -, ``normalized_score`` (NaN without references),
        ``episodes``; and ``success_metric`` (``"final-step"`` or ``"any-step"``, the one
        ``success_rate`` is) when the task reports success.
    """
    n = max(1, min(num_envs, num_episodes))
    envs = [make_env() for _ in range(n)]
    try:
        returns, lengths, successes, final_successes = [], [], [], []
        next_ep = 0
        obs = [None] * n
        ep_ret, ep_len, ep_succ, active = np.zeros(n), np.zeros(n, int), np.zeros(n, bool), np.zeros(n, bool)
        step_succ = np.zeros(n, bool)

        def start(i):
            nonlocal next_ep
            obs[i], _ = envs[i].reset(seed=seed + next_ep)
            next_ep += 1
            ep_ret[i], ep_len[i], ep_succ[i], step_succ[i], active[i] = 0.0, 0, False, False, True
            if reset_policy is not None:
                reset_policy(np.array([i]))

        for i in range(n):
            if next_ep < num_episodes:
                start(i)
        has_success = saw_is_success = False
        while active.any():
            ids = np.flatnonzero(active)
            # the whole batch every step (finished envs keep their last observation), so row i is
            # always env i: chunked policies keep per-env queues aligned
            actions = np.asarray(policy(stack_obs(obs)))
            for i in ids:
                obs[i], r, term, trunc, info = envs[i].step(actions[i])
                ep_ret[i] += float(r)
                ep_len[i] += 1
                if "success" in info or "is_success" in info:
                    has_success = True
                    saw_is_success |= "success" not in info
                    step_succ[i] = bool(np.asarray(info.get("success", info.get("is_success"))).item())
                    ep_succ[i] |= step_succ[i]
                if term or trunc:
                    returns.append(ep_ret[i])
                    lengths.append(ep_len[i])
                    successes.append(ep_succ[i])
                    final_successes.append(step_succ[i])
                    active[i] = False
                    if next_ep < num_episodes:
                        start(i)
        has_success = has_success and _reports_success(envs[0]) is not False  # locomotion: False on every step, no signal
        ret = np.asarray(returns)
        nan = float("nan")
        any_rate = float(np.mean(successes)) if has_success else nan
        final_rate = float(np.mean(final_successes)) if has_success else nan
        conv = success_convention(envs[0], saw_is_success) if has_success else None
        out = {
            "return_mean": float(ret.mean()),
            "return_std": float(ret.std()),
            "length_mean": float(np.mean(lengths)),
            "success_rate": final_rate if conv == "final" else any_rate,
            "success_final_rate": final_rate,
            "success_any_rate": any_rate,
            "normalized_score": float(normalized_score(ret.mean(), *ref_scores)) if ref_scores else nan,
            "episodes": float(len(ret)),
        }
        if conv is not None:
            out["success_metric"] = SUCCESS_METRICS[conv]
        return out
    finally:
        for e in envs:
            e.close()
