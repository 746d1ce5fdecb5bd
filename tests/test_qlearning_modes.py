"""Every warm-start Q-learning mode, run briefly through the real trainer on a generated PointMaze dataset.

Real MuJoCo, real Minari files, the real experiment configs (``configs/experiment/{calql,wsrl,...}``)
with small networks and budgets. Rewards get ``reward_bias=-1`` and Cal-QL's sparse fill
(``mc_sparse_fill=0``): then every transition has a substantial known Monte Carlo
return-to-go (``-1/(1-γ) = -10`` with ``γ = 0.9`` for never-solved episodes), and the learnable quantity each
mode must improve is the critic's fit to it: ``mean (Q(s, a) - G)²`` over the data that
mode trains on, after the run versus at its start (after the warm start).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.checkpoint import load_checkpoint
from robotrl.data import load_dataset
from robotrl.experiment import build_trainer
from robotrl.policy import load_policy

pytestmark = pytest.mark.slow  # learning / end-to-end: `pytest -m "not slow"` skips them, CI runs them

DATASET_ID = "robotrl/pointmaze/umaze-slow-test-v0"  # a variant of the default (slow demonstrator) recipe's id
SMALL = [
    f"dataset.id={DATASET_ID}", "dataset.recipe_args.num_steps=3000", "+dataset.recipe_args.ref_episodes=3",
    "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.log_every=50", "trainer.progress=false",
    "trainer.eval_every=100000", "trainer.checkpoint_every=100000", "torch_threads=1", "device=cpu",
    "+dataset.recipe_args.max_episode_steps=50", "agent.reward_scale=1.0", "agent.reward_bias=-1.0", "agent.mc_sparse_fill=0.0", "agent.gamma=0.9",
    "agent.model.hidden=[64,64]", "agent.model.critic_hidden=[64,64]", "agent.model.num_critics=4",
    "agent.model.cql_n_actions=4", "agent.model.critic_lr=1e-3", "agent.model.actor_lr=3e-4",
]
ONLINE = ["trainer.online_steps=400", "trainer.online_warmup_steps=100"]




def _compose(overrides: list[str]):
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _q_fit(agent, buffer, idx: np.ndarray, critic=None) -> float:
    """``mean (Q̄(s, a) - G)²`` over rows ``idx`` of ``buffer`` (Q̄: mean over heads)."""
    b = buffer.sample(len(idx), indices=idx)
    c = critic or agent.critic
    with torch.no_grad():
        o = agent.policy.obs_normalizer(b.observations)
        a = agent.policy.action_scaler.normalize(b.actions).clamp(-1, 1)
        return float(((c(o, a).mean(0) - b.mc_returns) ** 2).mean())


def _known(buffer, n=512, seed=0) -> np.ndarray:
    idx = np.flatnonzero(np.isfinite(buffer.mc_returns[: buffer.size]))
    return np.random.default_rng(seed).choice(idx, min(n, idx.size), replace=False)


def _offline_run(experiment: str, run_dir, steps=300):
    trainer = build_trainer(_compose([f"experiment={experiment}", *SMALL, f"trainer.offline_steps={steps}",
                                      f"run_dir={run_dir}"]), run_dir)
    idx = _known(trainer.offline)
    before = _q_fit(trainer.agent, trainer.offline, idx)
    trainer.fit()
    return trainer, before, _q_fit(trainer.agent, trainer.offline, idx)


@pytest.fixture(scope="module")
def pretrained(minari_module_root, tmp_path_factory):
    """Short Cal-QL and IQL pretraining (the checkpoints the online modes start from)."""
    out = {}
    for algo in ("calql", "iql"):
        d = tmp_path_factory.mktemp(f"pre-{algo}")
        out[algo] = (d, *_offline_run(algo, d))  # experiment=calql|iql on the default env (PointMaze UMaze)
    return out


@pytest.mark.parametrize("algo", ["calql", "iql"])
def test_offline_pretraining_fits_the_mc_returns(pretrained, algo):
    trainer, before, after = pretrained[algo][1:]
    assert trainer.agent.algo == algo and trainer.updates == 300
    # reward bias applied once to the offline data; MC returns are in the same units
    raw = load_dataset(DATASET_ID).rewards
    np.testing.assert_allclose(trainer.offline.rewards[: trainer.offline.size], raw - 1.0)
    assert after < 0.8 * before, (before, after)


def test_offline_cql_prefers_data_actions_to_uniform_ones(minari_module_root, tmp_path):
    cfg = _compose(["experiment=calql", *SMALL, "agent=cql", "trainer.offline_steps=300", f"run_dir={tmp_path}"])
    trainer = build_trainer(cfg, tmp_path)
    b = trainer.offline.sample(512)
    agent = trainer.agent

    def gap():
        rand = torch.rand(b.actions.shape, generator=torch.Generator().manual_seed(0)) * 2 - 1
        return float(agent.q_values(b.observations, b.actions).mean()
                      - agent.q_values(b.observations, agent.policy.action_scaler.unnormalize(rand)).mean())

    g0 = gap()
    trainer.fit()
    assert agent.algo == "cql"
    assert gap() > g0 + 1.0


def _online_run(mode: str, run_dir, extra: list[str]):
    keys = {e.split("=")[0] for e in extra}
    base = [o for o in ONLINE if o.split("=")[0] not in keys]
    cfg = _compose([f"experiment={mode}", *SMALL, *base, *extra, f"run_dir={run_dir}"])
    trainer = build_trainer(cfg, run_dir)
    if trainer.cfg.init_from:  # the state right after the warm start (fit() applies the same init again)
        trainer.init_from(trainer.cfg.init_from, trainer.cfg.init_parts)
    critic0 = copy.deepcopy(trainer.agent.critic)
    batches = []
    update = trainer.agent.update
    trainer.agent.update = lambda batch, step: (batches.append(batch.extras.get("offline")), update(batch, step))[1]
    summary = trainer.fit()
    idx = _known(trainer.online)
    assert idx.size >= 100
    before, after = _q_fit(trainer.agent, trainer.online, idx, critic0), _q_fit(trainer.agent, trainer.online, idx)
    print(f"{mode}: Q-fit to MC returns on online data {before:.2f} -> {after:.2f}")
    return trainer, summary, batches, before, after


def test_wsrl_warm_starts_keeps_no_offline_data_and_improves_its_critic(pretrained, tmp_path):
    pre_dir = pretrained["calql"][0]
    trainer, summary, batches, before, after = _online_run(
        "wsrl", tmp_path, [f"trainer.init_from={pre_dir}", "trainer.batch_size=64", "trainer.utd=4"])
    # initialised from the Cal-QL checkpoint: normalisers came with the policy
    pre = pretrained["calql"][1].agent
    assert torch.equal(trainer.agent.policy.obs_normalizer.mean, pre.policy.obs_normalizer.mean)
    # no offline data anywhere: none loaded, none sampled, no offline transition in the online buffer
    assert trainer.offline is None
    assert all(flag is None for flag in batches) and len(batches) == 400 - 100
    online = trainer.online
    data = load_dataset(DATASET_ID)
    offline_rows = np.concatenate([data.observations, data.actions], 1)
    stored = np.concatenate([online.observations[: online.size], online.actions[: online.size]], 1)
    assert not (stored[:, None, :] == offline_rows[None, :, :]).all(-1).any()
    # reward bias applied once to online rewards (raw 0/1 -> -1/0); never-solved episodes get Cal-QL's fill
    rew = online.rewards[: online.size]
    assert set(np.unique(rew)) <= {-1.0, 0.0}
    closed = np.isfinite(online.mc_returns[: online.size])
    for ep in np.unique(online.episode_id[: online.size][closed]):
        rows = np.flatnonzero(online.episode_id[: online.size] == ep)
        if (rew[rows] == -1.0).all():
            np.testing.assert_allclose(online.mc_returns[rows], -1.0 / (1 - 0.9), rtol=1e-6)
        else:
            g, expect = 0.0, []
            for r in rew[rows][::-1]:
                g = r + 0.9 * g
                expect.append(g)
            np.testing.assert_allclose(online.mc_returns[rows], expect[::-1], rtol=1e-5)
    # every env step is stored except the reset-only steps that follow each truncation
    ends = online.truncated[: online.size] | online.terminated[: online.size]
    assert online.size in (400 - int(ends.sum()), 401 - int(ends.sum()))  # the last step may end an episode
    assert after < 0.8 * before, (before, after)
    # the warm-started policy was evaluated before going online: the report has the onset dip
    assert [h["phase"] for h in trainer.history][:2] == ["offline", "online"] and "onset_dip_return" in summary
    assert np.isfinite(summary["final_normalized_score"])  # evaluated on the dataset's eval spec, with its ref scores


def test_wsrl_warm_start_carries_the_pretrained_adam_state_under_its_own_learning_rates(pretrained, tmp_path):
    """WSRL's reference restores the whole pretrained train state, Adam moments included: a fresh Adam
    moves every weight of the pretrained networks by about ``lr`` in its first updates."""
    pre_dir, pre_trainer = pretrained["calql"][0], pretrained["calql"][1]
    cfg = _compose(["experiment=wsrl", *SMALL, *ONLINE, f"trainer.init_from={pre_dir}", f"run_dir={tmp_path}",
                    "agent.model.critic_lr=5e-4", "agent.model.actor_lr=2e-4"])
    assert "optimizers" in cfg.trainer.init_parts
    trainer = build_trainer(cfg, tmp_path)
    trainer.init_from(cfg.trainer.init_from, cfg.trainer.init_parts)
    saved = load_checkpoint(pre_dir)["agent"]
    for opt, key, lr in ((trainer.agent.critic_opt, "critic_opt", 5e-4), (trainer.agent.actor_opt, "actor_opt", 2e-4)):
        state = opt.state_dict()
        assert [g["lr"] for g in state["param_groups"]] == [lr]  # the online config's rate, not the pretraining one
        for i, moments in saved[key]["state"].items():
            assert float(moments["step"]) == pre_trainer.updates > 0
            torch.testing.assert_close(state["state"][i]["exp_avg_sq"], moments["exp_avg_sq"])
    with pytest.raises(ValueError, match="optimizer state"):
        trainer.agent.load_parts({k: v for k, v in saved.items() if k != "alpha_opt"}, ["optimizers"])


def test_calql_online_updates_only_on_ended_episodes(pretrained, tmp_path):
    """Cal-QL online (no warmup): updates start once the first online episode has ended, and
    every online row carries a known MC return (never a -inf bound)."""
    pre_dir = pretrained["calql"][0]
    cfg = _compose(["experiment=calql-online", *SMALL, "trainer.online_steps=150",
                    "trainer.online_warmup_steps=0", "trainer.batch_size=64", f"trainer.init_from={pre_dir}",
                    f"run_dir={tmp_path}"])
    trainer = build_trainer(cfg, tmp_path)
    seen = []
    update = trainer.agent.update

    def spy(batch, step):
        online = batch.extras["offline"] == 0
        seen.append((step, bool(torch.isfinite(batch.mc_returns[online]).all())))
        return update(batch, step)

    trainer.agent.update = spy
    trainer.fit()
    online = trainer.online
    first_end = int(np.flatnonzero((online.terminated | online.truncated)[: online.size])[0]) + 1
    assert seen and seen[0][0] >= first_end  # no update before the first online episode ended (step = env steps done)
    assert all(ok for _, ok in seen)


@pytest.mark.parametrize("mode", ["sac", "cql", "calql", "calql-online", "wsrl", "porl", "rlpd"])
def test_actor_maximises_the_min_over_heads_except_rlpd(mode):
    """The actor step's loss is ``E[α log π − min_j Q_j]`` over the ensemble's heads (SAC, CQL/Cal-QL, WSRL, PORL)
    and ``E[α log π − mean_j Q_j]`` for RLPD: recomputed here from the same sample (the agent's generator state)
    and heads that differ, where the two reductions give different losses."""
    from types import SimpleNamespace

    from hydra.utils import instantiate

    from robotrl.data import ActionScaler, ObservationNormalizer

    cfg = _compose([f"agent={mode}", "agent.model.num_critics=4"])
    agent = instantiate(cfg.agent.model, obs_dim=6, action_dim=2, obs_normalizer=ObservationNormalizer.identity(6),
                        action_scaler=ActionScaler(-np.ones(2), np.ones(2)), device="cpu", seed=0, _convert_="all")
    obs = torch.randn(128, 6, generator=torch.Generator().manual_seed(1))
    gen = torch.Generator().set_state(agent.gen.get_state())
    with torch.no_grad():
        nobs = agent.policy.obs_normalizer(obs)
        a, logp = agent.actor.sample(nobs, gen)
        q = agent.critic(nobs, a)
        alpha = agent.log_alpha.exp()
    assert q.shape[0] == 4 and float((q.max(0).values - q.min(0).values).mean()) > 1e-3  # heads differ
    want = {"min": float((alpha * logp - q.min(0).values).mean()), "mean": float((alpha * logp - q.mean(0)).mean())}
    got = float(agent._sac_actor(SimpleNamespace(observations=obs), None, nobs)["actor_loss"])  # the critic step's features
    used = "mean" if mode == "rlpd" else "min"
    assert got == pytest.approx(want[used], rel=1e-5, abs=1e-6), (mode, got, want)
    assert abs(want["min"] - want["mean"]) > 1e-4  # the other reduction would have been told apart


def test_wsrl_in_one_run_pretrains_with_calql_and_fine_tunes_with_sac(minari_module_root, tmp_path):
    cfg = _compose(["experiment=calql", *SMALL, "trainer.offline_steps=60", "trainer.online_steps=120",
                    "trainer.online_warmup_steps=60", "trainer.offline_ratio=0.0", "agent.model.online_algo=sac",
                    f"run_dir={tmp_path}"])
    trainer = build_trainer(cfg, tmp_path)
    algos = []
    update = trainer.agent.update
    trainer.agent.update = lambda batch, step: (algos.append(trainer.agent.algo), update(batch, step))[1]
    trainer.fit()
    assert algos[:60] == ["calql"] * 60 and set(algos[60:]) == {"sac"} and len(algos) == 60 + 120 - 60
    assert trainer.offline is not None and trainer.online.size > 0


def test_rlpd_mixes_exactly_half_offline_in_every_minibatch(minari_module_root, tmp_path):
    trainer, summary, batches, before, after = _online_run(
        "rlpd", tmp_path, ["trainer.batch_size=64", "trainer.utd=4", "trainer.online_warmup_steps=200",
                           "agent.model.init_alpha=0.01"])  # RLPD backs up entropy: small α keeps soft Q ≈ MC return
    assert len(batches) == 400 - 200  # warmup long enough for the 128 online rows of a batch
    for flag in batches:
        assert flag.shape == (256,) and float(flag.sum()) == 128.0
        for i in range(4):  # the agent's interleaved split: exact in each critic minibatch too
            assert float(flag[i::4].sum()) == 32.0
    assert after < 0.8 * before, (before, after)


def test_calql_online_continues_with_offline_data(pretrained, tmp_path):
    pre_dir = pretrained["calql"][0]
    trainer, summary, batches, before, after = _online_run(
        "calql-online", tmp_path, [f"trainer.init_from={pre_dir}", "trainer.batch_size=128"])
    assert trainer.agent.algo == "calql"
    assert all(float(f.sum()) == 64.0 for f in batches)
    assert after < 0.8 * before, (before, after)


def test_porl_keeps_only_the_policy_and_fits_the_critic_first(pretrained, tmp_path):
    pre_dir = pretrained["calql"][0]
    trainer, summary, batches, before, after = _online_run(
        "porl", tmp_path, [f"trainer.init_from={pre_dir}", "trainer.batch_size=64", "trainer.utd=4",
                           "trainer.warmup_updates=100",
                           "agent.model.critic_warmup_updates=100"])
    # the pre-sample stage ran 100 critic-only updates once, then one update per env step
    assert summary["gradient_updates"] == 100 + (400 - 100)
    assert all(flag is None for flag in batches)
    assert after < 0.8 * before, (before, after)


def test_porl_starts_from_the_pretrained_policy_and_a_fresh_critic(pretrained, tmp_path):
    pre_dir, pre = pretrained["calql"][0], pretrained["calql"][1].agent
    cfg = _compose(["experiment=porl", *SMALL, *ONLINE, f"trainer.init_from={pre_dir}", f"run_dir={tmp_path}"])
    trainer = build_trainer(cfg, tmp_path)
    trainer.init_from(trainer.cfg.init_from, trainer.cfg.init_parts)
    for k, v in pre.policy.state_dict().items():
        assert torch.equal(trainer.agent.policy.state_dict()[k], v)
    assert not torch.equal(trainer.agent.critic.net.net[0].weight, pre.critic.net.net[0].weight)


def test_iql_online_continues_and_checkpoint_evaluates_and_resumes(pretrained, minari_module_root, tmp_path):
    pre_dir = pretrained["iql"][0]
    extra = [f"trainer.init_from={pre_dir}", "trainer.batch_size=64", "trainer.checkpoint_every=200"]
    trainer, summary, batches, before, after = _online_run("iql-online", tmp_path, [*extra, "trainer.online_steps=200"])
    assert trainer.agent.algo == "iql" and all(float(f.sum()) == 32.0 for f in batches)
    # resume: same run dir, longer budget -> continues from step 200, no second warm start
    cont = build_trainer(_compose(["experiment=iql-online", *SMALL, *ONLINE, *extra,
                                   f"run_dir={tmp_path}"]), tmp_path)
    idx = _known(trainer.online)
    res = cont.fit()
    assert res["resumed"] is True and cont.step == 400
    assert cont.online.size > trainer.online.size
    assert _q_fit(cont.agent, cont.online, idx) < before
    # the checkpoint loads as a deployable policy and in `robotrl eval`
    policy = load_policy(str(tmp_path))
    assert type(policy).__name__ == "QLPolicy"
    out = policy(torch.zeros(3, 8))
    assert out.shape == (3, 2) and torch.isfinite(out).all()
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root)}
    ev = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={tmp_path}", "episodes=2",
                         "num_envs=2"], env=env, capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads((tmp_path / "eval.json").read_text())["episodes"] == 2


# every mode's own init: online modes warm-start from the Cal-QL / IQL checkpoint (RLPD from scratch)
MODES = {"calql": [], "wsrl": ["calql"], "rlpd": [], "calql-online": ["calql"], "porl": ["calql"],
         "iql-online": ["iql"]}


# One runner (robotrl.runner) resumes every mode: the killed process covers each kind of state it must restore -
# the offline phase (calql), a warm start with an empty online buffer (wsrl), offline/online mixing (rlpd) and
# MC-return sampling from ended episodes (calql-online). IQL online resumes in-process in its own test; PORL runs
# WSRL's online loop (a policy-only warm start, also never repeated on resume: the runner's one warm-start path).
@pytest.mark.parametrize("mode", ["calql", "wsrl", "rlpd", "calql-online"])
def test_every_mode_resumes_after_a_kill_and_its_checkpoint_runs_in_robotrl_eval(mode, pretrained, minari_module_root,
                                                                                   tmp_path, kill_after_checkpoint):
    """A real ``robotrl train`` process of each mode, SIGKILLed after its second checkpoint, started
    again with the same run dir: it resumes (no second warm start), finishes the budget, and the
    checkpoint evaluates in a real ``robotrl eval`` process."""
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_module_root), "PYTHONUNBUFFERED": "1"}
    run_dir = tmp_path / mode
    offline = mode == "calql"
    budget = "trainer.offline_steps" if offline else "trainer.online_steps"
    init = [f"trainer.init_from={pretrained[MODES[mode][0]][0]}"] if MODES[mode] else []
    args = [sys.executable, "-m", "robotrl.cli", "train", f"experiment={mode}", *SMALL, *init,
            "trainer.online_warmup_steps=50", "trainer.batch_size=64", "trainer.checkpoint_every=100",
            f"run_dir={run_dir}"] + ([] if offline else ["trainer.offline_steps=0", "trainer.utd=2",
                                                         "trainer.warmup_updates=0"])  # resume is under test, not UTD
    killed_at = kill_after_checkpoint([*args, f"{budget}=1000000"], env, run_dir)
    ckpt = run_dir / "checkpoints" / "latest.pt"
    assert killed_at >= 200 and killed_at % 100 == 0
    res = subprocess.run([*args, f"{budget}={killed_at + 100}"], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True
    assert load_checkpoint(ckpt)["step"] == killed_at + 100
    if not offline:  # online data survived the kill: the buffer file of the steps before it is there
        assert (run_dir / "checkpoints" / "online_buffer.npz").exists()
    ev = subprocess.run([sys.executable, "-m", "robotrl.cli", "eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"],
                        env=env, capture_output=True, text=True, timeout=300)
    assert ev.returncode == 0, ev.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and metrics["step"] == killed_at + 100
