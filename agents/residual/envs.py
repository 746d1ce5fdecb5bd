"""Success as termination for residual RL training envs (ResiP and ResFiT end episodes on success).

ResiP (ankile/robust-rearrangement) and ResFiT (amazon-science/residual-offpolicy-rl) train on
tasks whose episodes end when the task succeeds (0/1 success reward, no bootstrapping past the
success). Gymnasium-robotics Fetch tasks never terminate: they run to the 50-step time limit. This
module adds the switch for TRAINING envs only — evaluation keeps the task's own episodes, so the
final-step success convention measures whether a policy also keeps the task solved.

It lives here until the env layer has it: the natural home is a ``terminate_on_success`` flag of
:class:`robotrl.envs.wrappers.SuccessInfo` / :func:`robotrl.envs.make_env`, set for training envs
by ``robotrl train`` (``env.train_terminate_on_success``); until then ``robotrl train`` cannot turn
it on, and :mod:`benchmarks.bench_residual` builds its training envs with
:func:`make_success_terminating_envs`.
"""

from __future__ import annotations

from typing import Any, SupportsFloat

import gymnasium as gym


class SuccessTermination(gym.Wrapper):
    """``terminated = terminated or info["success"]`` (the bool :class:`~robotrl.envs.wrappers.SuccessInfo` sets).

    Raises:
        KeyError: at ``step``, an env without ``info["success"]`` (not built by :func:`robotrl.envs.make_env`).
    """

    def step(self, action) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, bool(terminated or info["success"]), truncated, info


class _Thunk:
    def __init__(self, name: str, seed: int | None, kwargs: dict):
        self.name, self.seed, self.kwargs = name, seed, kwargs

    def __call__(self) -> gym.Env:
        from robotrl.envs import make_env

        return SuccessTermination(make_env(self.name, seed=self.seed, vectorization="none", **self.kwargs))


def make_success_terminating_envs(name: str, *, num_envs: int, seed: int | None = None, vectorization: str = "sync",
                                  **kwargs) -> gym.vector.VectorEnv:
    """A vector env like ``make_env(name, num_envs=N, seed=seed, vectorization=...)`` whose sub-envs end at success.

    Sub-env ``i`` is seeded with ``seed + i`` (as :func:`robotrl.envs.make_env`); ``kwargs`` go to
    ``make_env`` for each sub-env (``env_kwargs``, ``max_episode_steps``, ``action_chunk``, ...).
    """
    fns = [_Thunk(name, None if seed is None else int(seed) + i, dict(kwargs)) for i in range(int(num_envs))]
    venv = gym.vector.AsyncVectorEnv(fns) if vectorization == "async" else gym.vector.SyncVectorEnv(fns)
    if seed is not None:
        venv.action_space.seed(int(seed))
    return venv


def terminate_at_success(buffer, success_reward: float = 1.0) -> int:
    """Mark every transition of ``buffer`` whose reward is ``success_reward`` as terminated; returns how many.

    Offline demonstrations recorded in non-terminating envs (Fetch) go on after their success;
    ResFiT's demos end there (``done`` = reward = 1). Without this, a critic trained on such demos
    and on success-terminated online data gets two targets for reaching the goal: ``1`` online,
    ``1 + γ Q(s', a')`` (up to ``1/(1 − γ)``) offline. n-step sums stop at terminated steps
    (:meth:`robotrl.data.ReplayBuffer.sample`), so marking is enough. For 0/1 success rewards
    (Fetch with ``reward_bias: 1``) ``success_reward`` is 1.
    """
    n = len(buffer)
    hit = buffer.rewards[:n] == float(success_reward)
    buffer.terminated[:n] |= hit
    return int(hit.sum())
