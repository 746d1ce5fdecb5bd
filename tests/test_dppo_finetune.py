"""DPPO fine-tuning on real MuJoCo with real generated data: a short run must raise the return of a
deliberately weakened pretrained diffusion policy by clearly more than the evaluation noise.

Setting (chosen for a dense, low-variance signal; measured while designing, 1 torch thread):

* Data: ``collect_pointmaze("umaze", 20_000 steps)`` — the noisy waypoint planner with random
  goals (real MuJoCo, written and read back as a Minari dataset).
* Weakening: the diffusion policy is pretrained on the same data with a constant action bias
  of +0.5 on both axes (clipped to the action box). Evaluated on the task below, the
  unbiased policy scores ~12.7 and the biased one ~9.5 (per-episode std ~1.7, std of the
  50-episode mean across eval seed sets ~0.25).
* Task (train and eval): ``PointMaze_UMaze-v3`` with a FIXED reset cell (top right) and
  goal cell (top left) two cells apart, dense reward ``exp(-distance)``, goal kept fixed
  (``continuing_task=True, reset_target=False``), 50-step episodes.
* DPPO: tiny denoiser (2x64 residual MLP), K = K' = 5, Ta = Te = 4, 10 envs x 2 episodes per
  iteration (1,000 env steps), 40 iterations (40k env steps). For a test-sized budget the trust
  region is wider than the reference's (actor lr 1e-3, clip 0.1 / base 0.05, no KL stop);
  ``benchmarks/bench_dppo_learning.py`` runs the reference values (lr 1e-4, clip 0.01, KL 1). In design runs (training seeds
  0, 1, 2, 30k steps) the return rose 9.2 -> 15.6, 9.3 -> 13.5, 9.4 -> 15.2.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
import torch

from robotrl.agents.diffusion import DiffusionAgent
from robotrl.agents.dppo import DPPOAgent
from robotrl.agents.ppo.loss import normalize_advantages
from robotrl.checkpoint import save_checkpoint
from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer, load_dataset
from robotrl.envs import make_env
from robotrl.evaluation import evaluate
from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer, RolloutCollector
from robotrl.policy import act, policy_state

pytestmark = pytest.mark.slow  # learning / end-to-end: `pytest -m "not slow"` skips them, CI runs them

G, R = "g", "r"
# UMaze walls; reset cell (1, 3) and goal cell (1, 1) on the top corridor
MAZE = [[1, 1, 1, 1, 1], [1, G, 0, R, 1], [1, 1, 1, 0, 1], [1, 0, 0, 0, 1], [1, 1, 1, 1, 1]]
ENV_KWARGS = {"maze_map": MAZE, "continuing_task": True, "reset_target": False, "reward_type": "dense"}
HORIZON = 50
BIAS = (0.5, 0.5)
DIFFUSION = dict(obs_horizon=1, action_horizon=4, act_steps=4, denoising_steps=5, denoiser="mlp",
                 denoiser_kwargs={"hidden": [64, 64], "time_dim": 8})
EVAL_SEEDS = (0, 1000, 2000)
EVAL_EPISODES = 50


def _eval_env():
    return make_env("pointmaze-umaze", env_kwargs=ENV_KWARGS, max_episode_steps=HORIZON)


def _train_envs(n: int, seed: int):
    return lambda: make_env("pointmaze-umaze", num_envs=n, seed=seed, vectorization="sync", action_chunk=4,
                            env_kwargs=ENV_KWARGS, max_episode_steps=HORIZON)


def _eval_means(policy) -> list[float]:
    """Mean return over ``EVAL_EPISODES`` episodes for each eval seed set (torch noise seeded too)."""
    out = []
    for s in EVAL_SEEDS:
        torch.manual_seed(s)
        res = evaluate(lambda o: act(policy, o), _eval_env, EVAL_EPISODES, seed=s, num_envs=10,
                       reset_policy=policy.reset)
        out.append(res["return_mean"])
    return out


@pytest.fixture(scope="module")
def one_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(scope="module")
def weakened(tmp_path_factory, one_thread):
    """(dataset, path of a diffusion-BC checkpoint trained on +0.5-biased actions)."""
    root = tmp_path_factory.mktemp("minari")
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        from robotrl.collect import collect_pointmaze

        # D4RL maze2d's moving-goal continuing collection: long episodes covering the maze (the demos this test
        # was designed with); the test env below is its own dense fixed-goal task
        path = collect_pointmaze("umaze", num_steps=20_000, seed=0, dataset_id="robotrl/pointmaze/umaze-dppo-test-v0",
                                 root=root, progress=False, ref_episodes=2,
                                 env_kwargs={"continuing_task": True, "reset_target": True})
        data = load_dataset(str(path))
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    biased = dataclasses.replace(data, actions=np.clip(data.actions + np.float32(BIAS), -1, 1).astype(np.float32))
    torch.manual_seed(0)
    agent = DiffusionAgent(data.obs_dim, data.action_dim,
                           obs_normalizer=ObservationNormalizer.from_data(data.observations, clip=10.0),
                           action_scaler=ActionScaler.from_space(data.action_space), lr=1e-3, ema_start=1500,
                           seed=0, **DIFFUSION)
    buf = ReplayBuffer.from_offline(biased, seed=0)
    for u in range(3000):
        agent.update(agent.sample_batch(buf, 256), u)
    ckpt = tmp_path_factory.mktemp("pretrained") / "diffusion.pt"
    save_checkpoint(ckpt, {"policy": policy_state(agent.policy)})
    return data, ckpt


def _dppo(data, seed: int = 0, **kw) -> DPPOAgent:
    args = dict(ft_denoising_steps=5, gamma=0.95, gae_lambda=0.95, gamma_denoising=0.99, clip=0.1, clip_base=0.05,
                actor_lr=1e-3, critic_lr=1e-3, critic_hidden=[64, 64], n_epochs=5, batch_size=500, target_kl=None,
                critic_warmup_iters=2, seed=seed)
    args.update(kw)
    return DPPOAgent(data.obs_dim, data.action_dim,
                     obs_normalizer=ObservationNormalizer.from_data(data.observations, clip=10.0),
                     action_scaler=ActionScaler.from_space(data.action_space), **DIFFUSION, **args)


def test_dppo_fine_tuning_raises_return_of_weakened_pretrained_policy(weakened, tmp_path):
    data, ckpt = weakened
    torch.manual_seed(0)
    agent = _dppo(data)
    agent.load_pretrained(str(ckpt))
    before = _eval_means(agent.policy)
    # the evaluation is precise: the unchanged policy's means over the seed sets agree closely
    noise = max(before) - min(before)
    assert noise < 1.0, f"eval noise too large to judge improvement: {before}"
    assert max(before) < 11.0, f"the biased pretrained policy is not weakened: {before}"

    cfg = OnPolicyConfig(iterations=40, steps_per_iter=28, num_envs=10, eval_every=1000, eval_episodes=10,
                         eval_envs=10, checkpoint_every=1000, progress=False)
    summary = OnPolicyTrainer(agent, tmp_path / "run", cfg, make_train_envs=_train_envs(10, 0),
                              make_eval_env=_eval_env, seed=0).fit()
    assert summary["online_steps"] == 40 * 10 * 2 * HORIZON
    after = _eval_means(agent.policy)
    gain = float(np.mean(after) - np.mean(before))
    print(f"DPPO fine-tuning: return per eval seed set {before} -> {after} (gain {gain:.2f}, noise {noise:.2f})")
    # every after-set beats every before-set, by several times the eval noise and >= 25 %
    margin = max(4 * noise, 0.25 * float(np.mean(before)))
    assert min(after) - max(before) > margin, f"before {before} after {after} (noise {noise:.2f})"
    assert gain > margin


def test_dppo_update_moves_log_probs_with_the_advantage_sign(weakened):
    """One small actor step (clip off) with advantage +1 on half the chains, -1 on the other half:
    log-probs of the positive half go up, of the negative half down (sign of surrogate and ratio).
    A small lr keeps the step first-order (one Adam step at lr 1e-3 overshoots and lowers both)."""
    data, ckpt = weakened
    torch.manual_seed(0)
    agent = _dppo(data, clip=10.0, clip_base=10.0, actor_lr=1e-4, gamma_denoising=1.0)
    agent.load_pretrained(str(ckpt))
    envs = _train_envs(4, 0)()
    try:
        ro = RolloutCollector(envs, 1, reward_scaling=False, seed=0).collect(agent, 8)
    finally:
        envs.close()
    d = agent._prepare(ro)
    S = d["cond"].shape[0]
    sign = torch.where(torch.arange(S) % 2 == 0, 1.0, -1.0)
    d["adv"] = sign.clone()
    assert torch.equal(normalize_advantages(d["adv"]).sign(), sign)
    agent._minibatch(d, torch.arange(S * agent.Kp), train_actor=True)
    with torch.no_grad():
        new = torch.stack([agent.pair_log_prob(d["cond"], d["chains"][:, j], d["chains"][:, j + 1],
                                               torch.full((S,), j, dtype=torch.long)) for j in range(agent.Kp)], 1)
    delta = (new - d["logp"]).mean(1)
    assert float(delta[sign > 0].mean()) > 0 > float(delta[sign < 0].mean())
