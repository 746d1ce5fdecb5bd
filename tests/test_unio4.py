"""Uni-O4 (robotrl.agents.ppo.unio4): the offline phase of ensemble BC, V/Q of the behaviour and BPPO steps
checked by off-policy evaluation, then PPO.

With real PointMaze UMaze data (the slow demonstrator's dataset, generated once per module): the cloned members
differ from each other and fit the data; a BPPO step the OPE scores lower is not kept (a Q constructed so that
any move of one member's mean lowers its score) while a step it scores higher is; ``V`` fits the Monte-Carlo
returns of a tiny hand-written dataset; the clipped ratio objective and the advantage weighting match hand
computations; the checkpoint keeps the ensemble and the chosen member; a ``pretrain_steps`` that does not match the
stages is a one-line error naming the fix; and ``robotrl train experiment=unio4`` runs end to end and resumes.
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
from torch import nn

from robotrl.agents.ppo.unio4 import UniO4Agent, bppo_policy_loss, ensemble_bc_loss, q_ope, weighted_advantages
from robotrl.checkpoint import load_checkpoint, save_checkpoint
from robotrl.data.batch import Batch
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.data.returns import mc_returns
from robotrl.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")

MAZE = ["dataset.id=robotrl/pointmaze/umaze-slow-test-v0", "dataset.recipe_args.num_steps=3000",
        "+dataset.recipe_args.ref_episodes=3", "+dataset.recipe_args.max_episode_steps=50", "torch_threads=1",
        "device=cpu", "agent.onpolicy.progress=false"]
SMALL = dict(hidden=(32, 32), critic_hidden=(32, 32), q_hidden=(32, 32), batch_size=64)


def _compose(overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


@pytest.fixture(scope="module")
def maze(minari_module_root, tmp_path_factory):
    """``(agent kwargs, offline ReplayBuffer)`` of PointMaze UMaze as ``experiment=unio4`` builds them."""
    from robotrl.experiment import build_trainer

    run = tmp_path_factory.mktemp("unio4-maze")
    tr = build_trainer(_compose(["experiment=unio4", *MAZE, f"run_dir={run}"]), run)
    p = tr.agent.policy
    kw = dict(obs_dim=p.obs_dim, action_dim=p.action_dim, obs_normalizer=p.obs_normalizer,
              action_scaler=p.action_scaler)
    return kw, tr.loop.offline


def _agent(maze, seed=0, **kw) -> UniO4Agent:
    base, _ = maze
    return UniO4Agent(base["obs_dim"], base["action_dim"], obs_normalizer=base["obs_normalizer"],
                      action_scaler=base["action_scaler"], seed=seed, **{**SMALL, **kw})


def _offline(agent: UniO4Agent, buffer, steps: int | None = None, batch_size: int = 128) -> None:
    for _ in range(agent.offline_total if steps is None else steps):
        agent.bc_update(buffer.sample(batch_size))


def _params(m: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in m.parameters()])


# ---------------------------------------------------------------------- pure pieces, by hand
def test_the_clipped_ratio_objective_matches_a_hand_computation():
    logp_new = torch.log(torch.tensor([1.5, 0.5, 1.1, 0.9]))
    logp_old = torch.zeros(4)
    adv = torch.tensor([2.0, -1.0, -3.0, 1.0])
    loss, info = bppo_policy_loss(logp_new, logp_old, adv, clip=0.25)
    # ρ = 1.5, 0.5, 1.1, 0.9; min(ρA, clip(ρ, .75, 1.25)A): min(3, 2.5)=2.5, min(-.5, -.75)=-.75, min(-3.3,-3.3)=-3.3,
    # min(.9, .9)=.9  → loss = -(2.5 - .75 - 3.3 + .9)/4 = 0.1625
    assert loss.item() == pytest.approx(0.1625, abs=1e-6)
    assert info["clipfrac"].item() == pytest.approx(0.5)
    assert info["ratio"].item() == pytest.approx(1.0)


def test_advantages_are_normalised_then_weighted_omega_above_zero():
    adv = torch.tensor([1.0, 2.0, 3.0])  # normalised: -1, 0, 1 (std 1)
    out = weighted_advantages(adv, omega=0.7)
    assert torch.allclose(out, torch.tensor([-0.3, 0.0, 0.7]), atol=1e-6)
    assert torch.allclose(weighted_advantages(adv, omega=0.5), torch.tensor([-1.0, 0.0, 1.0]), atol=1e-6)


def test_the_ensemble_bc_loss_adds_the_disagreement_to_the_others_best_likelihood():
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -3.0], [-2.0, -1.0]], requires_grad=True)
    loss = ensemble_bc_loss(logp, 0, alpha=0.1)
    # others' max per column: -0.5, -1.0; rows: 1 - .1(-1 + .5) = 1.05, 2 - .1(-2 + 1) = 2.1 → mean 1.575
    assert loss.item() == pytest.approx(1.575)
    loss.backward()  # only member 0's own likelihood carries a gradient: (1 + α) · (-1/B)
    assert torch.allclose(logp.grad, torch.tensor([[-0.55, -0.55], [0.0, 0.0], [0.0, 0.0]]))
    assert ensemble_bc_loss(torch.tensor([[-1.0, -3.0]]), 0, alpha=0.1).item() == pytest.approx(2.0)


# ---------------------------------------------------------------------- stage 1: the ensemble
def test_the_cloned_members_differ_and_each_fits_the_data(maze):
    _, buffer = maze
    agent = _agent(maze, bc_steps=300, critic_steps=0, bppo_steps=0)
    batch = buffer.sample(512)
    act = agent.policy.action_scaler.normalize(batch.actions).clamp(-1, 1)

    def nll(m):
        with torch.no_grad():
            mean, std = m.distribution(batch.observations)
            return float(-torch.distributions.Normal(mean, std).log_prob(act).sum(-1).mean())

    before = [nll(m) for m in agent.members]
    _offline(agent, buffer)
    after = [nll(m) for m in agent.members]
    assert all(a < b - 0.5 for a, b in zip(after, before)), (before, after)
    with torch.no_grad():
        means = torch.stack([m.distribution(batch.observations)[0] for m in agent.members])  # (K, B, Da)
    gaps = [float((means[i] - means[j]).abs().mean()) for i in range(4) for j in range(i + 1, 4)]
    assert min(gaps) > 1e-3, gaps  # distinct policies, not one policy four times
    assert agent.chosen in range(4)
    assert torch.equal(_params(agent.policy), _params(agent.members[agent.chosen]))


# ---------------------------------------------------------------------- stage 2: V on Monte-Carlo returns
def test_v_fits_the_monte_carlo_returns_of_a_tiny_dataset():
    gamma = 0.9
    obs = np.array([[0.0, 0.0], [0.2, 0.0], [0.4, 0.0], [0.6, 0.0], [0.0, 1.0], [0.3, 1.0], [0.6, 1.0]], np.float32)
    rewards = np.array([0, 0, 0, 1, 1, 0, 1], np.float32)
    mc = mc_returns(rewards, np.array([0, 4]), np.array([4, 7]), gamma)  # 0.729 .81 .9 1 | 1.81 .9 1
    assert mc[0] == pytest.approx(0.729) and mc[4] == pytest.approx(1.81)
    mc_seen = np.concatenate([mc, [-np.inf]]).astype(np.float32)  # a row of an unfinished episode: no target
    obs_all = np.concatenate([obs, [[5.0, 5.0]]]).astype(np.float32)
    n = len(obs_all)
    batch = Batch.from_numpy("cpu", observations=obs_all, actions=np.zeros((n, 2), np.float32),
                             rewards=np.concatenate([rewards, [0]]), next_observations=obs_all,
                             terminated=np.zeros(n, bool), truncated=np.zeros(n, bool),
                             discounts=np.full(n, gamma, np.float32), mc_returns=mc_seen)
    agent = UniO4Agent(2, 2, obs_normalizer=ObservationNormalizer(np.zeros(2), np.ones(2)),
                       action_scaler=ActionScaler(-np.ones(2), np.ones(2)), gamma=gamma, critic_lr=3e-3,
                       bc_steps=1, critic_steps=800, bppo_steps=0, num_policies=2, **SMALL)
    for _ in range(agent.offline_total):
        out = agent.bc_update(batch)
    assert np.isfinite(float(out["v_loss"]))
    with torch.no_grad():
        v = agent.critic(agent.policy.obs_normalizer(torch.as_tensor(obs))).numpy()
    assert np.abs(v - mc).max() < 0.05, (v, mc)


# ---------------------------------------------------------------------- stage 3: OPE accepts or keeps
class PeakedQ(nn.Module):
    """``Q(s, a) = −‖a − μ(s)‖²`` for a frozen policy's mean ``μ``: that policy scores the maximum, 0, and any
    change of its mean scores lower."""

    def __init__(self, policy):
        super().__init__()
        self.policy = policy

    def forward(self, obs, actions):
        with torch.no_grad():
            return -(actions - self.policy.distribution(obs)[0]).pow(2).sum(-1)


class RisingQ(nn.Module):
    """``Q(s, a) = Σ a``: a mean moved up scores higher."""

    def forward(self, obs, actions):
        return actions.sum(-1)


def _through_critic_stage(maze, **kw) -> UniO4Agent:
    agent = _agent(maze, bc_steps=100, critic_steps=20, bppo_steps=20, ope_every=5, bppo_lr=1e-3, **kw)
    _offline(agent, maze[1], steps=agent.bc_steps + agent.critic_steps)
    return agent


def test_a_bppo_step_the_ope_scores_lower_is_not_kept(maze):
    import copy

    agent = _through_critic_stage(maze)
    cloned = copy.deepcopy(agent.members[0])
    agent.q = PeakedQ(cloned)  # member 0's cloned policy is the OPE's optimum: every step of it is rejected
    before = [_params(m) for m in agent.members]
    _offline(agent, maze[1], steps=agent.bppo_steps - 1)
    assert not torch.equal(_params(agent.members[0]), before[0])  # the steps were taken ...
    assert torch.equal(_params(agent.behaviours[0]), before[0]) and agent.accepted[0] == 0  # ... and not kept
    assert q_ope(agent.q, agent.members[0], agent.ope_pool) < 0.0
    _offline(agent, maze[1], steps=1)
    assert agent.accepted[0] == 0 and agent.best_ope[0] == pytest.approx(0.0, abs=1e-12)
    # member 0 ends as its cloned policy although it trained 20 BPPO steps; it scores best, so it goes online
    assert torch.equal(_params(agent.members[0]), before[0])
    assert agent.chosen == 0 and torch.equal(_params(agent.policy), before[0])
    assert q_ope(agent.q, agent.policy, agent.ope_pool) == pytest.approx(0.0, abs=1e-12)


def test_a_bppo_step_the_ope_scores_higher_becomes_the_behaviour_policy(maze):
    agent = _through_critic_stage(maze)
    agent.q = RisingQ()
    before = [_params(m) for m in agent.members]
    start = [q_ope(agent.q, m, agent.ope_pool) for m in agent.members]
    _offline(agent, maze[1], steps=agent.bppo_steps)
    assert (agent.accepted > 0).all(), agent.accepted
    for i, m in enumerate(agent.members):
        assert not torch.equal(_params(m), before[i])
        assert q_ope(agent.q, m, agent.ope_pool) > start[i]
        assert torch.equal(_params(m), _params(agent.behaviours[i]))  # the last accepted policy
    assert agent.chosen == int(torch.argmax(agent.best_ope))


# ---------------------------------------------------------------------- state and errors
def test_the_checkpoint_keeps_the_ensemble_and_the_chosen_member(maze, tmp_path):
    _, buffer = maze
    agent = _agent(maze, bc_steps=60, critic_steps=20, bppo_steps=10, ope_every=5)
    _offline(agent, buffer)
    path = save_checkpoint(tmp_path / "a.pt", {"agent": agent.state_dict()})
    fresh = _agent(maze, seed=5, bc_steps=60, critic_steps=20, bppo_steps=10, ope_every=5)
    assert not torch.equal(_params(fresh.members), _params(agent.members))
    fresh.load_state_dict(load_checkpoint(path)["agent"])
    for name in ("members", "behaviours", "q", "q_target", "policy", "critic"):
        assert torch.equal(_params(getattr(fresh, name)), _params(getattr(agent, name))), name
    assert fresh.chosen == agent.chosen and torch.equal(fresh.best_ope, agent.best_ope)
    assert torch.equal(fresh.ope_pool, agent.ope_pool) and fresh.offline_step == agent.offline_total
    fresh.start_online()  # a complete offline phase: online may start


def test_a_pretraining_budget_that_does_not_match_the_stages_is_a_one_line_error(maze):
    _, buffer = maze
    agent = _agent(maze, bc_steps=3, critic_steps=2, bppo_steps=1)
    _offline(agent, buffer, steps=4)
    with pytest.raises(ConfigError, match=r"pretrain_steps=6") as err:
        agent.start_online()
    assert "\n" not in str(err.value)
    _offline(agent, buffer, steps=2)
    with pytest.raises(ConfigError, match=r"pretrain_steps=6"):
        agent.bc_update(buffer.sample(8))
    with pytest.raises(ConfigError, match="num_policies >= 2"):
        _agent(maze, num_policies=1)


def test_agent_unio4_pretrains_exactly_its_stages():
    cfg = _compose(["experiment=unio4"])
    m = cfg.agent.model
    assert cfg.agent.onpolicy.pretrain_steps == m.bc_steps + m.critic_steps + m.bppo_steps
    assert m._target_ == "robotrl.agents.ppo.unio4.UniO4Agent" and m.num_policies == 4
    bc_ppo = _compose([]).agent.onpolicy  # the main job's online schedule
    for key in ("iterations", "num_envs", "steps_per_iter", "eval_every", "eval_episodes"):
        assert cfg.agent.onpolicy[key] == bc_ppo[key], key


# ---------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_robotrl_train_experiment_unio4_runs_and_resumes(minari_module_root, tmp_path):
    run = tmp_path / "run"
    tiny = ["agent.model.bc_steps=60", "agent.model.critic_steps=30", "agent.model.bppo_steps=20",
            "agent.model.ope_every=10", "agent.onpolicy.pretrain_steps=110", "agent.onpolicy.num_envs=2",
            "agent.onpolicy.steps_per_iter=50", "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2",
            "agent.model.batch_size=50", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
            "agent.model.q_hidden=[32,32]", f"run_dir={run}"]
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root), "PYTHONUNBUFFERED": "1"}

    def train(iterations: int) -> subprocess.CompletedProcess:
        args = ["train", "experiment=unio4", *MAZE, *tiny, f"agent.onpolicy.iterations={iterations}"]
        return subprocess.run([sys.executable, "-m", "robotrl.cli", *args], env=env, capture_output=True, text=True,
                              timeout=400)

    res = train(1)
    assert res.returncode == 0, res.stderr[-3000:]
    first = load_checkpoint(run)["agent"]
    u = first["unio4"]
    assert u["offline_step"] == 110 and u["chosen"] in range(4)
    chosen = {k[len(f"{u['chosen']}."):]: v for k, v in u["behaviours"].items() if k.startswith(f"{u['chosen']}.")}
    report = json.loads((run / "report.json").read_text())
    assert [h["phase"] for h in report["history"]] == ["offline", "online"]
    res = train(2)  # resumes after iteration 1: no second offline phase, the same ensemble and member
    assert res.returncode == 0, res.stderr[-3000:]
    assert "pretrain update" not in res.stdout
    second = load_checkpoint(run)["agent"]["unio4"]
    assert second["chosen"] == u["chosen"]
    assert all(torch.equal(second["members"][k], v) for k, v in u["members"].items())
    assert all(torch.equal(chosen[k], u["members"][f"{u['chosen']}.{k}"]) for k in chosen)
    report = json.loads((run / "report.json").read_text())
    assert [h["phase"] for h in report["history"]] == ["offline", "online", "online"]
