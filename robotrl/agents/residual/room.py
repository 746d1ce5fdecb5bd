"""The residual-learning room task: an open PointMaze room and a deliberately biased base controller.

Used by the residual learning tests (``tests/test_residual_learning.py``) and by the quick
benchmark tier's residual row (``benchmarks/bench_residual.py --task room``), so that both
measure the same thing. It lives with the residual agents, not in the core's :mod:`robotrl.bench`: its base is an
agent's policy (:class:`~robotrl.agents.bc.BCPolicy`), and the core never imports an agent (``tests/test_layers.py``).

Task: ``PointMaze_Open-v3`` with a 5×7 room (:data:`ROOM_MAP`: start cell ``r`` two cells
left of the goal cell ``g``), dense reward ``exp(-distance)``, 100-step episodes; success =
the ball within 0.45 m of the goal at any step (the maze convention).

Base: :func:`biased_pd_base`, a :class:`~robotrl.agents.bc.BCPolicy` whose weights implement
``tanh(kp (goal - pos) - kd vel + [0, bias])``: with the default bias 1.0 it stops about 0.5 m
beside the goal, so its success is 0 while the unbiased controller's is 1 (50 episodes: 0.00
vs 1.00). A residual must learn to cancel the bias.

Observation (flat, ``D_o = 8``): achieved_goal (0:2) | desired_goal (2:4) | x, y, vx, vy (4:8);
action ``D_a = 2``, forces in [-1, 1].
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from robotrl.agents.bc import BCPolicy
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.envs import make_env
from robotrl.evaluation import evaluate
from robotrl.policy import act

ROOM_ENV = "PointMaze_Open-v3"
ROOM_MAP = [[1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 1], [1, 0, "r", 0, "g", 0, 1], [1, 0, 0, 0, 0, 0, 1],
            [1, 1, 1, 1, 1, 1, 1]]
ROOM_KW = {"reward_type": "dense", "maze_map": ROOM_MAP}
ROOM_STEPS = 100  # episode limit (env steps)
OBS_DIM, ACTION_DIM = 8, 2


def room_obs_normalizer() -> ObservationNormalizer:
    """Fixed normaliser of the room's flat observation (positions in m scaled by 1.5, velocities in m/s by 1)."""
    return ObservationNormalizer(np.zeros(OBS_DIM), np.array([1.5, 1, 1.5, 1, 1.5, 1, 1, 1]))


def room_action_scaler() -> ActionScaler:
    """The room's action box [-1, 1]^2 (already normalised)."""
    return ActionScaler(-np.ones(ACTION_DIM), np.ones(ACTION_DIM))


def biased_pd_base(bias: float = 1.0, kp: float = 2.0, kd: float = 1.0) -> BCPolicy:
    """BCPolicy computing ``tanh(kp (goal - pos) - kd vel + [0, bias])`` on the flat observation.

    The hidden ReLU pairs ``relu(z) - relu(-z)`` reproduce the linear map exactly.

    Args:
        bias: constant added to the y force before tanh (0: the controller reaches the goal).
        kp: position gain (per m); kd: velocity gain (per m/s).

    Returns:
        the policy in eval mode, ``(B, 8) -> (B, 2)``.
    """
    pol = BCPolicy(OBS_DIM, ACTION_DIM, hidden=[4])
    w = torch.zeros(4, OBS_DIM)
    for d in range(2):
        z = torch.zeros(OBS_DIM)
        z[2 + d], z[4 + d], z[6 + d] = kp, -kp, -kd
        w[2 * d], w[2 * d + 1] = z, -z
    with torch.no_grad():
        first, last = pol.actor.net.net[0], pol.actor.net.net[-1]
        first.weight.copy_(w)
        first.bias.zero_()
        last.weight.copy_(torch.tensor([[1.0, -1, 0, 0], [0, 0, 1, -1]]))
        last.bias.copy_(torch.tensor([0.0, bias]))
    return pol.eval()


def room_eval_env():
    """One evaluation env of the room task (100-step episodes)."""
    return make_env(ROOM_ENV, max_episode_steps=ROOM_STEPS, env_kwargs=ROOM_KW)


def room_train_envs(num_envs: int, seed: int) -> Callable:
    """Factory of ``num_envs`` synchronous training envs of the room task, seeded ``seed``."""
    return lambda: make_env(ROOM_ENV, num_envs=num_envs, seed=seed, vectorization="sync", max_episode_steps=ROOM_STEPS,
                            env_kwargs=ROOM_KW)


def room_success(policy, episodes: int = 20, seed: int = 10_000) -> float:
    """Success rate of ``policy`` (deterministic) over ``episodes`` room episodes from fixed seeds."""
    return evaluate(lambda o: act(policy, o), room_eval_env, episodes, seed=seed, num_envs=10,
                    reset_policy=policy.reset)["success_rate"]


#: Residual PPO on the room (ResidualPPOAgent keyword arguments besides sizes, normalisers, base and seed), sized for
#: this small task rather than ResiP's defaults: a full-scale residual (α 1: the bias is a large correction), lr 1e-3,
#: γ 0.95 for 100-step episodes, 10 epochs on 1,600-sample minibatches.
ROOM_PPO_AGENT = dict(hidden=[64, 64], critic_hidden=[64, 64], residual_scale=1.0, actor_lr=1e-3, gamma=0.95,
                      gae_lambda=0.9, n_epochs=10, batch_size=1600)
#: Its schedule: 16 iterations of 32 envs × 100 steps (51,200 env steps); over three seeds every run reached >= 0.9.
ROOM_PPO_SCHEDULE = dict(iterations=16, steps_per_iter=100, num_envs=32)
#: Off-policy residual (ResidualOffPolicyAgent keyword arguments besides sizes, normalisers, base and seed) on the room:
#: α 1, 4 critic heads of 128×128, lr 1e-3, γ 0.95, wide exploration (σ 0.3) and 100 base+noise steps, 200
#: critic-only warmup updates.
ROOM_OFFPOLICY_AGENT = dict(hidden=[64, 64], critic_hidden=[128, 128], num_critics=4, residual_scale=1.0, actor_lr=1e-3,
                            critic_lr=1e-3, gamma=0.95, explore_std=0.3, base_noise_steps=100, base_noise_std=0.3,
                            critic_warmup_updates=200)
#: Its schedule (TrainerConfig fields): 1,500 env steps on 4 envs, UTD 2, n-step 3, 100 warmup steps; with the SAC
#: actor every run over three seeds reached >= 0.9 (3,000 updates).
ROOM_OFFPOLICY_SCHEDULE = dict(online_steps=1500, batch_size=128, n_step=3, num_envs=4, online_warmup_steps=100, utd=2,
                               offline_ratio=0.0)
