"""SUNG (robotrl.agents.qlearning.sung), an option of the Q-learning agent.

Off: the updates are exactly those of an agent without it. On, with real PointMaze UMaze data (the slow
demonstrator's dataset, generated once per module): the VAE's uncertainty is higher off the data than on it,
exploration takes one of the top-k most uncertain candidates and prefers the higher Q among them, the CQL
penalty goes to the uncertain rows, the checkpoint keeps the VAE (a resumed run continues exactly), bad settings
are one-line errors naming the fix, and ``robotrl train experiment=sung`` runs end to end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from robotrl.agents.qlearning import QLAgent
from robotrl.agents.qlearning.sung import SungConfig, conservative_rows, optimistic_choice
from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.data.batch import Batch
from robotrl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

MAZE = ["dataset.id=robotrl/pointmaze/umaze-slow-test-v0", "dataset.recipe_args.num_steps=3000",
        "+dataset.recipe_args.ref_episodes=3", "+dataset.recipe_args.max_episode_steps=50", "trainer.eval_episodes=2",
        "trainer.eval_envs=2", "trainer.progress=false", "trainer.eval_every=100000", "trainer.checkpoint_every=100000",
        "torch_threads=1", "device=cpu"]
QSMALL = ["agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
          "agent.model.target_subset=null", "agent.model.cql_n_actions=4"]
SUNG_SMALL = {"enabled": True, "vae_hidden": 64, "vae_pretrain_steps": 400, "vae_batch_size": 128, "candidates": 30,
              "topk": 6}


def _compose(overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


@pytest.fixture(scope="module")
def maze(minari_module_root, tmp_path_factory):
    """``(agent kwargs, offline ReplayBuffer)`` of PointMaze UMaze as ``experiment=sung`` builds them (the
    dataset's normalisers and action bounds), for agents built fresh in each test."""
    from robotrl.experiment import build_trainer

    run = tmp_path_factory.mktemp("sung-maze")
    tr = build_trainer(_compose(["experiment=sung", *MAZE, *QSMALL, "trainer.init_from=null", f"run_dir={run}"]), run)
    p = tr.agent.policy
    kw = dict(obs_dim=tr.offline.obs_dim, action_dim=tr.offline.action_dim, obs_normalizer=p.obs_normalizer,
              action_scaler=p.action_scaler)
    return kw, tr.offline


def _agent(maze, sung=None, seed=0, **kw) -> QLAgent:
    base, _ = maze
    return QLAgent(base["obs_dim"], base["action_dim"], obs_normalizer=base["obs_normalizer"],
                   action_scaler=base["action_scaler"], hidden=(32, 32), critic_hidden=(32, 32), num_critics=2,
                   critic_layer_norm=True, cql_n_actions=4, seed=seed, sung=sung, **kw)


def _online(maze, sung=SUNG_SMALL, seed=0) -> QLAgent:
    agent = _agent(maze, sung, seed)
    agent.attach_offline_data(maze[1])
    agent.start_online()
    return agent


def _off_data(batch: Batch, seed: int = 0) -> Batch:
    """``batch`` moved off the data: states shifted 3 dataset standard deviations, uniform random actions."""
    g = torch.Generator().manual_seed(seed)
    n = len(batch)
    obs = batch.observations + 3.0 * batch.observations.std(0) + 1.0
    act = torch.rand((n, batch.actions.shape[1]), generator=g) * 2 - 1
    return batch.replace(observations=obs, actions=act, next_observations=obs)


def _normed(agent: QLAgent, b: Batch) -> tuple[torch.Tensor, torch.Tensor]:
    p = agent.policy
    return p.obs_normalizer(b.observations), p.action_scaler.normalize(b.actions).clamp(-1, 1)


def _params(agent: QLAgent) -> list[torch.Tensor]:
    return [t.detach().clone() for t in (*agent.policy.parameters(), *agent.critic.parameters(), agent.log_alpha)]


# ---------------------------------------------------------------------- off: nothing changes
def test_off_the_updates_and_exploration_are_bit_identical(maze):
    data = maze[1]
    plain, off, before = _agent(maze), _agent(maze, {"enabled": False}), _agent(maze, SUNG_SMALL)
    batches = [data.sample(64) for _ in range(4)]
    for a in (plain, off, before):  # offline updates: SUNG (built, not started) changes none of them
        for b in batches:
            a.update(b, 0)
    for a in (off, before):
        for p, q in zip(_params(plain), _params(a)):
            torch.testing.assert_close(p, q, rtol=0, atol=0)
    for a in (plain, off):  # off through the online start too
        a.attach_offline_data(data)
        a.start_online()
        for b in batches:
            a.update(b, 0)
    for p, q in zip(_params(plain), _params(off)):
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    obs = data.observations[:5]
    np.testing.assert_array_equal(plain.explore(obs), off.explore(obs))
    assert "sung" not in off.state_dict() and off.sung.vae is None
    before.attach_offline_data(data)
    before.start_online()  # on: the same batches now give other updates (the comparison above can fail)
    for b in batches:
        before.update(b, 0)
    assert any(not torch.equal(p, q) for p, q in zip(_params(plain), _params(before)))


# ---------------------------------------------------------------------- the density estimate
def test_uncertainty_is_higher_off_the_data_than_on_it(maze):
    agent = _online(maze)
    assert agent.sung.pretrained and agent.sung.vae_updates == SUNG_SMALL["vae_pretrain_steps"]
    on = maze[1].sample(512)
    u_on = agent.sung.uncertainty(*_normed(agent, on), agent.gen)
    u_off = agent.sung.uncertainty(*_normed(agent, _off_data(on)), agent.gen)
    # the dataset's own states with random actions: only the action is off
    u_act = agent.sung.uncertainty(*_normed(agent, _off_data(on).replace(observations=on.observations)), agent.gen)
    print(f"uncertainty on data {u_on.mean():.3f}, random actions {u_act.mean():.3f}, off data {u_off.mean():.3f}")
    assert u_off.mean() > 3 * u_on.mean()
    assert u_act.mean() > u_on.mean()
    assert (u_off > u_on.quantile(0.9)).float().mean() > 0.9


# ---------------------------------------------------------------------- optimistic exploration
def test_optimistic_choice_takes_a_top_k_uncertain_candidate_and_prefers_higher_q():
    g = torch.Generator().manual_seed(0)
    C, N, K = 50, 3, 8
    u, q = torch.rand((C, N), generator=g), torch.rand((C, N), generator=g) * 4
    top = u.topk(K, dim=0).indices
    counts = torch.zeros((C, N))
    for _ in range(400):
        j = optimistic_choice(q, u, topk=K, generator=g)
        assert all(j[n] in top[:, n] for n in range(N))
        counts[j, torch.arange(N)] += 1
    for n in range(N):  # among the kept candidates, the draw frequency follows softmax(Q): best over worst
        kept = top[:, n]
        best, worst = kept[q[kept, n].argmax()], kept[q[kept, n].argmin()]
        assert counts[best, n] > counts[worst, n]
    greedy = optimistic_choice(q, u, topk=K, mode="greedy")
    for n in range(N):
        kept = top[:, n]
        assert greedy[n] == kept[q[kept, n].argmax()]
    qu = optimistic_choice(q, u, topk=K, order="qu", mode="greedy")  # the K best Q, then the most uncertain
    for n in range(N):
        kept = q[:, n].topk(K).indices
        assert qu[n] == kept[u[kept, n].argmax()]


def test_the_agent_explores_with_one_of_its_most_uncertain_candidates(maze):
    agent = _online(maze)
    c = agent.sung.cfg
    obs = maze[1].observations[:4]
    state = agent.gen.get_state()
    action = torch.as_tensor(agent.explore(obs))
    agent.gen.set_state(state)  # replay the draws: the same candidates and uncertainty noise
    with torch.no_grad():
        x = agent.policy.obs_normalizer(torch.as_tensor(obs))
        a, _ = agent.actor.sample_n(x, c.candidates, agent.gen)
        xs = x.unsqueeze(0).expand(c.candidates, -1, -1).reshape(-1, x.shape[1])
        u = agent.sung.uncertainty(xs, a.reshape(-1, a.shape[-1]), agent.gen).view(c.candidates, -1)
    raw = agent.policy.action_scaler.unnormalize(a)  # (C, N, Da)
    for n in range(len(obs)):
        hit = torch.nonzero(torch.isclose(raw[:, n], action[n], atol=1e-6).all(-1)).flatten()
        assert hit.numel() == 1 and hit[0] in u[:, n].topk(c.topk).indices
    plain = _agent(maze, {**SUNG_SMALL, "explore": "policy"})
    plain.attach_offline_data(maze[1])
    plain.start_online()
    assert not plain.sung.optimistic and plain.sung.active  # the exploitation half alone


# ---------------------------------------------------------------------- uncertainty-guided exploitation
def test_conservative_rows_are_the_uncertain_ones():
    u = torch.cat([torch.zeros(90), torch.full((10,), 3.0)])
    assert set(conservative_rows(u, 10, mode="greedy").tolist()) == set(range(90, 100))
    g = torch.Generator().manual_seed(0)
    drawn = conservative_rows(u, 2000, generator=g)
    share = (drawn >= 90).float().mean().item()  # softmax: 10 e³ / (90 + 10 e³) ≈ 0.69
    assert share == pytest.approx(10 * np.e**3 / (90 + 10 * np.e**3), abs=0.04)


def test_the_cql_penalty_goes_to_the_uncertain_rows_of_a_real_batch(maze):
    agent = _online(maze, {**SUNG_SMALL, "conservative_fraction": 0.25})
    on = maze[1].sample(96)
    off = _off_data(maze[1].sample(32), seed=1)
    batch = Batch.cat([on, off])
    seen = []
    for _ in range(5):
        m = agent.update(batch, 0)
        seen.append((float(m["sung_uncertainty"]), float(m["sung_cql_uncertainty"])))
        assert float(m["cql_penalty"]) != 0.0 and "vae_loss" in m
    print("batch vs CQL-row uncertainty:", [(round(a, 3), round(b, 3)) for a, b in seen])
    assert all(b > 1.5 * a for a, b in seen)


def test_the_penalty_is_lambda_times_cql_alpha_on_the_drawn_rows(maze):
    """The same networks and draws with λ = 0 and λ = 0.5: the critic loss grows by λ·α·Σ_heads penalty."""
    b = maze[1].sample(64)
    losses = {}
    for w in (0.0, 0.5):
        state = maze[1].rng.bit_generator.state  # the same pretraining batches for both agents
        agent = _online(maze, {**SUNG_SMALL, "conservative_weight": w})
        maze[1].rng.bit_generator.state = state
        m = agent._sac_critic(b)[0]  # the one critic step; SUNG is active online
        losses[w] = (float(m["critic_loss"]), float(m["cql_penalty"]))
    assert losses[0.0][1] == pytest.approx(losses[0.5][1], rel=1e-5) and losses[0.5][1] != 0.0
    assert losses[0.5][0] == pytest.approx(losses[0.0][0] + 0.5 * 5.0 * 2 * losses[0.5][1], rel=1e-4)


# ---------------------------------------------------------------------- checkpoint and resume
def test_checkpoint_round_trip_and_resume_continue_exactly(maze, tmp_path):
    agent = _online(maze)
    for _ in range(3):
        agent.update(maze[1].sample(64), 0)
    save_checkpoint(tmp_path / "latest.pt", {"agent": agent.state_dict()})  # through the file, as a resume reads it
    state = load_checkpoint(tmp_path / "latest.pt")["agent"]
    assert set(state["sung"]) == {"vae", "vae_opt", "pretrained", "vae_updates"} and state["sung"]["pretrained"]
    resumed = _agent(maze, SUNG_SMALL, seed=9)
    resumed.load_state_dict(state)
    resumed.attach_offline_data(maze[1])
    resumed.start_online()  # the loop calls it on resume: no second pretraining
    assert resumed.sung.vae_updates == agent.sung.vae_updates == SUNG_SMALL["vae_pretrain_steps"] + 3
    for k, v in agent.sung.vae.state_dict().items():
        torch.testing.assert_close(resumed.sung.vae.state_dict()[k], v, rtol=0, atol=0)
    batches = [maze[1].sample(64) for _ in range(3)]
    obs = maze[1].observations[:3]
    for a in (agent, resumed):
        for b in batches:
            a.update(b, 0)
    for p, q in zip(agent.sung.vae.parameters(), resumed.sung.vae.parameters()):  # the VAE continues exactly
        torch.testing.assert_close(p, q, rtol=0, atol=0)
    assert agent.sung.vae_updates == resumed.sung.vae_updates
    np.testing.assert_array_equal(agent.explore(obs), resumed.explore(obs))
    for p, q in zip(_params(agent), _params(resumed)):
        torch.testing.assert_close(p, q, rtol=0, atol=0)


# ---------------------------------------------------------------------- settings and configs
@pytest.mark.parametrize("given, words", [
    ({"enabled": True, "top_k": 5}, "unknown agent.model.sung settings ['top_k']"),
    ({"topk": 200}, "topk=200 keeps more than the 100 candidates"),
    ({"explore": "ucb"}, "explore='ucb' is unknown"),
    ({"conservative_fraction": 1.5}, "conservative_fraction=1.5 must lie in [0, 1]"),
    ({"conservative_weight": -1.0}, "conservative_weight=-1.0 must be a finite number >= 0"),
    ({"vae_hidden": 0}, "vae_hidden=0 must be a whole number >= 1"),
])
def test_bad_settings_are_one_line_errors(given, words):
    with pytest.raises(ConfigError) as err:
        SungConfig.from_mapping(given)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_sung_refuses_what_it_cannot_run_with_the_way_out(maze):
    with pytest.raises(ConfigError, match="online_algo=sac") as err:
        _agent(maze, SUNG_SMALL, algo="calql")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="trainer.offline_ratio > 0"):
        _agent(maze, SUNG_SMALL).start_online()  # no offline data to pretrain the VAE on
    _agent(maze, {**SUNG_SMALL, "vae_pretrain_steps": 0}).start_online()  # the named way out works
    assert _agent(maze, SUNG_SMALL, algo="cql", online_algo="sac").sung.enabled


def test_experiment_sung_starts_from_the_wsrl_checkpoint_and_sung_iql_from_iql():
    cfg = _compose(["experiment=sung"])
    wsrl = _compose(["experiment=wsrl"])
    t = OmegaConf.to_container(cfg.trainer, resolve=True)
    assert t["init_from"] == wsrl.trainer.init_from and t["init_parts"] == list(wsrl.trainer.init_parts)
    assert t["offline_ratio"] == 0.1 and cfg.agent.model.sung.enabled
    for key in ("num_critics", "critic_layer_norm", "hidden", "critic_hidden", "target_subset"):
        assert cfg.agent.model[key] == wsrl.agent.model[key]
    iql = _compose(["experiment=sung", "agent=sung-iql"])
    assert "/pretrain/iql/" in iql.trainer.init_from
    assert list(iql.trainer.init_parts) == ["policy", "critic"]
    assert iql.agent.model.num_critics == _compose(["experiment=iql"]).agent.model.num_critics


# ---------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_robotrl_train_experiment_sung_runs_online(minari_module_root, tmp_path):
    from robotrl.experiment import build_trainer

    pre = tmp_path / "pre"
    build_trainer(_compose(["experiment=calql", *MAZE, *QSMALL, "trainer.offline_steps=60", f"run_dir={pre}"]), pre).fit()
    run = tmp_path / "run"
    args = ["train", "experiment=sung", *MAZE, *QSMALL, f"trainer.init_from={pre}", "trainer.online_steps=120",
            "trainer.batch_size=32", "trainer.eval_every=60", "agent.model.sung.vae_hidden=32",
            "agent.model.sung.vae_pretrain_steps=50", "agent.model.sung.candidates=20", "agent.model.sung.topk=5",
            f"run_dir={run}"]
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root), "PYTHONUNBUFFERED": "1"}
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", *args], env=env, capture_output=True, text=True,
                         timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads((run / "report.json").read_text())
    online = [h for h in report["history"] if h["phase"] == "online"]
    assert [h["step"] for h in online] == [60, 120]
    assert report["summary"]["gradient_updates"] == 120
    sung = load_checkpoint(run)["agent"]["sung"]
    assert sung["pretrained"] and sung["vae_updates"] == 50 + 120
