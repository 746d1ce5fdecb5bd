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

import math
from collections.abc import Callable, Sequence

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
    seeds: Sequence[int] | None = None,
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
        seeds: explicit reset seeds, episode ``i`` reset with ``seeds[i]`` (``num_episodes`` must then be
            ``len(seeds)``; ``seed`` is ignored); ``None``: ``seed + i``.

    Returns:
        ``return_mean``, ``return_std``, ``length_mean``, ``success_rate`` (the task's
        convention, see :data:`SUCCESS_CONVENTION`), ``success_final_rate`` (success at the
        episode's last step), ``success_any_rate`` (at any step) - the three NaN when the
        task reports no success -, ``normalized_score`` (NaN without references),
        ``episodes``; and ``success_metric`` (``"final-step"`` or ``"any-step"``, the one
        ``success_rate`` is) when the task reports success.
    """
    if seeds is not None and len(seeds) != num_episodes:
        raise ValueError(f"evaluate: {len(seeds)} seeds for {num_episodes} episodes; give one seed per episode")
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
            obs[i], _ = envs[i].reset(seed=int(seeds[next_ep]) if seeds is not None else seed + next_ep)
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


def start_observations(make_env: Callable[[], gym.Env], seeds: Sequence[int]) -> np.ndarray:
    """The flat first observations ``(len(seeds), Do)`` of resets with ``seeds`` (one env, reset once per seed).

    Raises:
        ValueError: the env's observations are not flat arrays (cameras).
    """
    env = make_env()
    try:
        out = []
        for s in seeds:
            obs, _ = env.reset(seed=int(s))
            if isinstance(obs, dict):
                raise ValueError("start_observations needs flat observations; this env returns a Dict (cameras)")
            out.append(np.asarray(obs, np.float64).ravel())
        return np.stack(out)
    finally:
        env.close()


def visit_distance(starts: np.ndarray, visited: np.ndarray, k: int = 10, chunk: int = 4096) -> np.ndarray:
    """How far each start state lies from the states a run visited: distance to the ``k``-th nearest visited
    observation, in units of the visited observations' per-dimension std (floored at 1e-6).

    Args:
        starts: ``(S, Do)`` observations; visited: ``(M, Do)`` observations (e.g. the online replay buffer's).
        k: neighbour rank (``min(k, M)`` is used).

    Returns:
        ``(S,)`` float64 distances (large: a start whose neighbourhood the run rarely visited).

    Raises:
        ValueError: no visited observations, or sizes that do not match.
    """
    starts, visited = np.asarray(starts, np.float64), np.asarray(visited, np.float64)
    if visited.ndim != 2 or visited.shape[0] == 0 or starts.ndim != 2 or starts.shape[1] != visited.shape[1]:
        raise ValueError(f"visit_distance: starts {starts.shape} and visited {visited.shape} must be (S, D) and (M>0, D)")
    scale = np.maximum(visited.std(0), 1e-6)
    s = torch.as_tensor(starts / scale)
    kk = min(int(k), visited.shape[0])
    best = torch.full((s.shape[0], kk), float("inf"), dtype=torch.float64)
    for lo in range(0, visited.shape[0], chunk):  # running k smallest over chunks of the visited set
        v = torch.as_tensor(visited[lo:lo + chunk] / scale)
        best = torch.cat([best, torch.cdist(s, v)], 1).topk(kk, dim=1, largest=False).values
    return best[:, -1].numpy()


def forgetting_report(
    pretrained: Callable[[np.ndarray], np.ndarray],
    finetuned: Callable[[np.ndarray], np.ndarray],
    make_env: Callable[[], gym.Env],
    visited: np.ndarray,
    *,
    num_starts: int = 100,
    far_fraction: float = 0.25,
    k: int = 10,
    seed: int = 1_000_000,
    num_envs: int = 8,
    ref_scores: tuple[float, float] | None = None,
) -> dict:
    """The forgetting metric of a fine-tuning run (Wołczyk et al. 2024's FAR-state performance, on resets).

    Definition:

    1. *Held-out resets*: ``num_starts`` env resets with seeds ``seed, seed + 1, ...`` (the default 10⁶ lies
       apart from the seeds robotrl's training and evaluation resets use: run seed + step, and 0, 1, ...).
    2. *Rarely visited*: each reset's first observation gets its :func:`visit_distance` to ``visited`` (the
       observations the online phase collected, e.g. the online replay buffer); the ``ceil(far_fraction ·
       num_starts)`` resets with the largest distance are FAR, the rest NEAR.
    3. Both policies run one deterministic episode from each reset (:func:`evaluate` with those seeds).
    4. ``forgetting = score(pretrained, FAR) − score(finetuned, FAR)`` where score is the normalised score
       when ``ref_scores`` are given, else the mean return; positive: the fine-tuned policy lost ground where
       the online phase rarely went. ``forgetting_near`` is the same on NEAR (the ordinary improvement, negated),
       and the success-rate versions (``*_success``) are given when the task reports success.

    On tasks whose resets barely differ (locomotion: a small noise around one pose) FAR and NEAR hold nearly
    the same states and the two numbers agree; FAR then means only "least like the online data".

    Args:
        pretrained, finetuned: policies ``(N, Do) -> (N, Da)`` raw units (deterministic).
        make_env: builds one evaluation env with flat observations.
        visited: ``(M, Do)`` observations of the online phase.
        num_starts, far_fraction, k, seed, num_envs, ref_scores: as above.

    Returns:
        ``{"forgetting", "forgetting_near", "forgetting_success", "forgetting_near_success", "far": {"pretrained":
        evaluate(...), "finetuned": ...}, "near": {...}, "far_seeds", "far_distance_min", "num_far", "num_near",
        "score": "normalized_score" | "return_mean", "k"}``.

    Raises:
        ValueError: ``far_fraction`` outside ``(0, 1)``, fewer than 2 starts, or observations that do not fit.
    """
    if not 0.0 < far_fraction < 1.0 or num_starts < 2:
        raise ValueError(f"forgetting_report: far_fraction={far_fraction} must be in (0, 1) and num_starts={num_starts} >= 2")
    seeds = np.arange(seed, seed + num_starts)
    dist = visit_distance(start_observations(make_env, seeds), visited, k=k)
    order = np.argsort(-dist, kind="stable")
    n_far = min(num_starts - 1, max(1, math.ceil(far_fraction * num_starts)))
    groups = {"far": np.sort(seeds[order[:n_far]]), "near": np.sort(seeds[order[n_far:]])}
    key = "normalized_score" if ref_scores else "return_mean"
    out: dict = {"score": key, "k": int(k), "num_far": int(n_far), "num_near": int(num_starts - n_far),
                 "far_seeds": [int(s) for s in groups["far"]], "far_distance_min": float(dist[order[n_far - 1]])}
    for name, group in groups.items():
        res = {who: evaluate(pol, make_env, len(group), seeds=group, num_envs=num_envs, ref_scores=ref_scores)
               for who, pol in (("pretrained", pretrained), ("finetuned", finetuned))}
        out[name] = res
        suffix = "" if name == "far" else "_near"
        out["forgetting" + suffix] = res["pretrained"][key] - res["finetuned"][key]
        out["forgetting" + suffix + "_success"] = res["pretrained"]["success_rate"] - res["finetuned"]["success_rate"]
    return out

