"""Return computations over stored transitions (pure NumPy, reference-checked in tests).

Symbols: ``M`` transitions, ``E`` episodes, ``n`` the n-step horizon, ``γ`` discount.

- Monte Carlo return-to-go per episode, ``G_t = r_t + γ G_{t+1}`` (Cal-QL's lower bound
  ``V^μ``; Nakamoto et al. 2023, "Cal-QL", github.com/nakamotoo/Cal-QL). An episode that
  is truncated rather than terminated has an unknown tail; with ``sparse_fill`` set, a
  sparse-reward episode whose rewards are all equal to ``sparse_fill`` gets
  ``sparse_fill / (1 - γ)`` everywhere, as Cal-QL's code does for never-solved episodes.
- Episode segmentation: some D4RL/Minari episodes are not contiguous
  (``next_obs[t] != obs[t+1]``); :func:`split_discontinuous` finds those cuts so returns
  never run across them.
"""

from __future__ import annotations

import numpy as np


def discounted_return_to_go(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """``G_t = Σ_{k≥t} γ^{k-t} r_k`` for one episode.

    Args:
        rewards: ``(T,)``.
        gamma: discount in ``[0, 1]``.

    Returns:
        float32 ``(T,)``.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    out = np.empty_like(rewards)
    acc = 0.0
    for t in range(rewards.shape[0] - 1, -1, -1):
        acc = rewards[t] + gamma * acc
        out[t] = acc
    return out.astype(np.float32)


def mc_returns(
    rewards: np.ndarray,
    episode_starts: np.ndarray,
    episode_ends: np.ndarray,
    gamma: float,
    *,
    sparse_fill: float | None = None,
) -> np.ndarray:
    """Monte Carlo return-to-go for every transition, episode by episode.

    Args:
        rewards: ``(M,)`` rewards of contiguously stored episodes.
        episode_starts, episode_ends: ``(E,)`` index of each episode's first transition and
            one past its last.
        gamma: discount.
        sparse_fill: if not ``None``, episodes whose rewards all equal this value (a
            sparse task never solved) get ``sparse_fill / (1 - γ)`` (Cal-QL convention).

    Returns:
        float32 ``(M,)``.
    """
    out = np.zeros(np.asarray(rewards).shape[0], dtype=np.float32)
    for s, e in zip(np.asarray(episode_starts), np.asarray(episode_ends)):
        r = rewards[s:e]
        if sparse_fill is not None and e > s and np.all(r == sparse_fill) and gamma < 1:
            out[s:e] = sparse_fill / (1.0 - gamma)
        else:
            out[s:e] = discounted_return_to_go(r, gamma)
    return out


def split_discontinuous(
    observations: np.ndarray,
    next_observations: np.ndarray,
    episode_starts: np.ndarray,
    episode_ends: np.ndarray,
    atol: float = 1e-6,
) -> tuple[np.ndarray, np.ndarray]:
    """Split episodes at steps where ``next_obs[t] != obs[t+1]``.

    Args:
        observations, next_observations: ``(M, Do)``.
        episode_starts, episode_ends: ``(E,)``.

    Returns:
        ``(starts, ends)`` of the contiguous segments, ``(E',)`` each with ``E' ≥ E``.
    """
    M = observations.shape[0]
    if M < 2:
        return np.asarray(episode_starts), np.asarray(episode_ends)
    gap = ~np.all(np.isclose(next_observations[:-1], observations[1:], atol=atol), axis=-1)
    cut = np.zeros(M + 1, dtype=bool)
    cut[np.asarray(episode_starts)] = True
    cut[np.asarray(episode_ends)] = True
    cut[1:M][gap] = True
    cut[M] = True
    bounds = np.flatnonzero(cut)
    return bounds[:-1].astype(np.int64), bounds[1:].astype(np.int64)


def nstep_targets_reference(
    rewards: np.ndarray,
    terminated: np.ndarray,
    episode_end: np.ndarray,
    index: int,
    n: int,
    gamma: float,
) -> tuple[float, float, int]:
    """Plain-loop n-step return from ``index`` (the reference the tests check against).

    Walks forward through contiguous storage until ``n`` rewards are summed, the episode
    terminates, or the episode ends (``episode_end`` True on its last transition).

    Returns:
        ``(G, discount, last)``: ``G = Σ_{k<m} γ^k r``, ``discount = γ^m`` times 0 if the
        last step terminated, and ``last`` the index whose ``next_observation`` bootstraps.
    """
    G, disc, i = 0.0, 1.0, index
    for k in range(n):
        i = index + k
        G += disc * float(rewards[i])
        disc *= gamma
        if terminated[i]:
            return G, 0.0, i
        if episode_end[i]:
            break
    return G, disc, i
