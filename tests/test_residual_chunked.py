"""Chunked bases under the off-policy residual (ResFiT, issue 42 item 3): robotrl's diffusion policy with action
horizon 4 executing chunks of Te = 3 in real MuJoCo envs through the real Trainer. The base predicts one chunk per
Te env steps per env (restarted at each episode start), the replay keeps the base action actually executed with
every transition and gives updates the executed base action of the step after the next observation; rows
without one (offline data, episode ends) are relabelled with a fresh chunk's first action."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from robotrl.agents.diffusion import DiffusionPolicy
from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPolicy
from robotrl.agents.residual.room import ROOM_ENV, ROOM_KW, room_action_scaler, room_eval_env, room_obs_normalizer
from robotrl.data import ReplayBuffer
from robotrl.envs import make_env
from robotrl.policy import load_policy
from robotrl.trainer import Trainer, TrainerConfig

TE = 3


def _diffusion_base(te: int = TE, obs_horizon: int = 1) -> DiffusionPolicy:
    torch.manual_seed(0)
    return DiffusionPolicy(8, 2, obs_horizon=obs_horizon, action_horizon=4, act_steps=te, denoising_steps=5,
                           denoiser_kwargs={"hidden": [32, 32]}, sampler="ddim", ddim_steps=3).eval()


def _agent(base, **kw) -> ResidualOffPolicyAgent:
    args = dict(obs_normalizer=room_obs_normalizer(), action_scaler=room_action_scaler(), base=base, seed=0,
                hidden=[32], critic_hidden=[32], num_critics=2, residual_scale=1.0, base_noise_steps=5,
                critic_warmup_updates=0, actor_delay=1)
    return ResidualOffPolicyAgent(8, 2, **{**args, **kw})


def _episodes(buf: ReplayBuffer) -> list[np.ndarray]:
    """Each stored episode's slots in step order (following the links)."""
    starts = [i for i in range(buf.size) if buf.prev_idx[i] < 0]
    out = []
    for s in starts:
        chain = [s]
        while buf.next_idx[chain[-1]] >= 0:
            chain.append(int(buf.next_idx[chain[-1]]))
        out.append(np.asarray(chain))
    return out


def test_chunked_base_executes_its_chunks_and_replay_relabels_with_the_executed_base_action(tmp_path):
    torch.set_num_threads(1)
    agent = _agent(_diffusion_base())
    assert agent.chunked_base and agent.transition_fields == {"base_action": 2}
    chunks: list[tuple[np.ndarray, np.ndarray]] = []  # (obs (n, 8), chunk (n, Ta, 2)) of every prediction
    predict = agent.explore_base.predict_chunk

    def recording(obs_hist, *a, **k):
        out = predict(obs_hist, *a, **k)
        chunks.append((obs_hist[:, -1].numpy().copy(), out.numpy().copy()))
        return out

    agent.explore_base.predict_chunk = recording
    cfg = TrainerConfig(offline_steps=0, online_steps=50, batch_size=16, n_step=2, num_envs=2, online_warmup_steps=5,
                        utd=1, offline_ratio=0.0, eval_every=50, eval_episodes=2, eval_envs=2, checkpoint_every=50,
                        progress=False)
    # 20-step episodes: chunks of 3 restart mid-way at every episode start
    trainer = Trainer(agent, tmp_path / "run", cfg, offline_buffer=None, make_eval_env=room_eval_env,
                      make_train_envs=lambda: make_env(ROOM_ENV, num_envs=2, seed=0, vectorization="sync",
                                                       max_episode_steps=20, env_kwargs=ROOM_KW), seed=0, gamma=0.95)
    trainer.fit()
    buf = trainer.online
    stored = buf.extra["base_action"][: buf.size]
    assert np.isfinite(stored).all()
    eps = _episodes(buf)
    # 50 vector steps per env: 20 steps, a reset step (not stored), 20 steps, a reset step, 8 steps
    assert sorted(len(e) for e in eps) == [8, 8, 20, 20, 20, 20] and buf.size == 96
    # every step's stored base action is the entry t % Te of the chunk predicted at step Te * (t // Te) of its
    # episode, from that step's observation: one prediction per Te steps per env, the chunk executed as predicted
    by_obs = {}
    for obs, chunk in chunks:
        for o, c in zip(obs, chunk):
            by_obs[o.tobytes()] = c
    n_chunks = 0
    for e in eps:
        for t, slot in enumerate(e):
            if t % TE == 0:
                chunk = by_obs[buf.observations[slot].tobytes()]
                n_chunks += 1
            np.testing.assert_allclose(stored[slot], chunk[t % TE], rtol=0, atol=1e-6)
    assert n_chunks == sum(-(-len(e) // TE) for e in eps) == 2 * (7 + 7 + 3)
    assert sum(len(o) for o, _ in chunks) == n_chunks  # no other prediction was made while exploring
    # sampled batches carry the executed base action of the step after the next observation (n-step 2)
    idx = np.asarray([e[3] for e in eps])
    b = buf.sample(len(idx), n_step=2, indices=idx)
    np.testing.assert_array_equal(b.extras["base_action"].numpy(), stored[idx])
    np.testing.assert_array_equal(b.extras["next_base_action"].numpy(), stored[[e[5] for e in eps]])
    last = buf.sample(len(eps), n_step=2, indices=np.asarray([e[-1] for e in eps]))
    assert torch.isnan(last.extras["next_base_action"]).all()  # an episode's end: no step after it stored
    # the deployable policy rebuilds with the chunked base inside and executes its chunks per env
    pol = load_policy(tmp_path / "run")
    assert isinstance(pol, ResidualPolicy) and isinstance(pol.base, DiffusionPolicy) and pol.base.Te == TE


def test_update_relabels_rows_without_a_stored_base_action_with_a_fresh_chunk():
    agent = _agent(_diffusion_base())
    obs = torch.as_tensor(np.random.default_rng(0).uniform(-1, 1, (4, 8)), dtype=torch.float32)
    stored = torch.tensor([[0.1, 0.2], [float("nan")] * 2, [0.3, -0.4], [float("nan")] * 2])
    torch.manual_seed(5)
    out = agent._stored_base(stored, obs, None)
    torch.manual_seed(5)
    fresh = agent.policy.base.predict_chunk(obs[[1, 3], None])[:, 0]
    assert torch.equal(out[[0, 2]], stored[[0, 2]]) and torch.equal(out[[1, 3]], fresh)


def test_history_bases_are_refused_with_the_way_out():
    with pytest.raises(ValueError, match="obs_horizon 1"):
        _agent(_diffusion_base(obs_horizon=2))
    # a per-step base records nothing (its actions are recomputed exactly from observations)
    assert _agent(_diffusion_base(te=1)).transition_fields == {}


def test_replay_extra_fields_survive_a_checkpoint_and_refuse_unknown_names(tmp_path):
    from robotrl.checkpoint import load_arrays, save_arrays

    buf = ReplayBuffer(8, 3, 2, num_envs=2, extra_dims={"base_action": 2})
    o = np.zeros((2, 3), np.float32)
    for t in range(3):
        buf.add(o + t, np.zeros((2, 2)), np.zeros(2), o + t + 1, np.zeros(2, bool), np.array([False, t == 2]),
                extras={"base_action": np.array([[t, 0.0], [t, 1.0]])})
    with pytest.raises(KeyError, match="add_extra_field"):
        buf.add(o, np.zeros((2, 2)), np.zeros(2), o, np.zeros(2, bool), np.zeros(2, bool), extras={"other": o})
    save_arrays(tmp_path / "buf.npz", buf.state_dict())
    again = ReplayBuffer(8, 3, 2, num_envs=2, extra_dims={"base_action": 2})
    again.load_state_dict(load_arrays(tmp_path / "buf.npz"))
    np.testing.assert_array_equal(again.extra["base_action"][: again.size], buf.extra["base_action"][: buf.size])
    b = again.sample(2, indices=np.array([0, 1]))  # env 0 and env 1 at t = 0: their t = 1 steps follow
    np.testing.assert_array_equal(b.extras["next_base_action"].numpy(), [[1, 0], [1, 1]])
    old = ReplayBuffer(8, 3, 2, num_envs=2)  # a buffer saved without the field: NaN (unknown) after a resume
    old.add(o, np.zeros((2, 2)), np.zeros(2), o, np.zeros(2, bool), np.zeros(2, bool))
    fresh = ReplayBuffer(8, 3, 2, num_envs=2, extra_dims={"base_action": 2})
    fresh.load_state_dict(old.state_dict())
    assert np.isnan(fresh.extra["base_action"][: fresh.size]).all()
