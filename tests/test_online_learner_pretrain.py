"""Offline-pretrained then online in one learner (``robotrl learner ... trainer.offline_steps=N``): Cal-QL updates on
the demonstrations before serving, the switch to the online update rule, and no second pretraining on resume.

Real MuJoCo twin demonstrations (the scripted P-D controller) written as a real Minari dataset; the learner is
built by the same code as ``robotrl learner`` (:func:`robotrl.real_robot.online_cli.build_learner`).
"""

from __future__ import annotations

import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.errors import ConfigError
from robotrl.real_robot.online_cli import build_learner
from robotrl.real_robot.online_eval import LEARNER, record_controller_demos, robot_overrides


def _cfg(tmp_path, *extra):
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("online/learner", overrides=[
            *robot_overrides("open", "dense", 60), "agent=calql", "agent.model.online_algo=sac",
            "agent.model.num_critics=2", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
            "agent.model.cql_n_actions=4", "trainer.batch_size=32", f"run_dir={tmp_path / 'run'}",
            "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}", *LEARNER, *extra])


def _weights(agent) -> torch.Tensor:
    return torch.cat([p.detach().flatten().clone() for p in agent.policy.parameters()])


def test_learner_pretrains_on_demos_then_switches_to_the_online_rule_once(tmp_path):
    demos = record_controller_demos(tmp_path / "minari" / "demos", episodes=4, max_steps=60, maze="open",
                                    reward="dense", seed=7)
    fresh, _, _ = build_learner(_cfg(tmp_path, f"demos={demos}"))  # no pretraining: the reference weights
    w0 = _weights(fresh.agent)
    fresh.close()
    learner, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert not resumed and learner.pretrain_updates == 30 and learner.status()["pretrain_updates"] == 30
        assert learner.agent.algo == "sac"  # Cal-QL offline, SAC online (WSRL's switch)
        assert learner.updates == 0  # the online schedule starts from 0
        w1 = _weights(learner.agent)
        assert not torch.equal(w0, w1)  # the updates moved the policy
        assert learner.ckpt_path.exists()  # checkpointed: durable before any actor connects
    finally:
        learner.close()
    again, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert resumed and again.pretrain_updates == 30 and again.agent.algo == "sac"
        assert torch.equal(_weights(again.agent), w1)  # resumed, not pretrained a second time
    finally:
        again.close()


def test_pretraining_without_demonstrations_is_refused_with_the_way_out(tmp_path):
    with pytest.raises(ConfigError, match="needs demonstrations.*offline_steps=0"):
        build_learner(_cfg(tmp_path, "trainer.offline_steps=10", "trainer.offline_ratio=0"))


def test_residual_learner_on_a_frozen_diffusion_base_pushes_weights_an_actor_rebuilds(tmp_path):
    """The off-policy residual on a diffusion base (re-planned every step) through ``robotrl learner``'s builder: a few
    updates move the residual, the base stays frozen, and a pushed version rebuilt as an actor does acts identically."""
    import numpy as np

    from robotrl.agents.diffusion import DiffusionAgent
    from robotrl.checkpoint import save_checkpoint
    from robotrl.data import ReplayBuffer
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
    from robotrl.policy import policy_state
    from robotrl.real_robot.online_eval import pushed_policy

    torch.manual_seed(0)
    base = DiffusionAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8),
                          action_scaler=ActionScaler(-np.ones(2), np.ones(2)), denoising_steps=5,
                          denoiser_kwargs={"hidden": [32, 32], "time_dim": 8}, seed=0)
    save_checkpoint(tmp_path / "diffusion.pt", {"policy": policy_state(base.policy)})
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/learner", overrides=[
            *robot_overrides("open", "dense", 60), "agent=residual-offpolicy", f"agent.model.base={tmp_path / 'diffusion.pt'}",
            "+agent.model.base_overrides={act_steps: 1}", "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]",
            "agent.model.num_critics=2", "agent.model.actor_delay=1", "agent.model.critic_warmup_updates=0",
            "agent.model.base_noise_steps=0", "agent.model.actor_lr=1e-2", "trainer.batch_size=32",
            "trainer.offline_ratio=0", f"run_dir={tmp_path / 'run'}", f"pushed_weights_dir={tmp_path / 'pushed'}",
            "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}"])
    learner, _, _ = build_learner(cfg)
    try:
        agent = learner.agent
        assert type(agent.policy.base).__name__ == "DiffusionPolicy" and agent.policy.base.act_steps == 1
        base_before = {k: v.clone() for k, v in agent.policy.base.state_dict().items()}
        res_before = {k: v.clone() for k, v in agent.policy.residual.state_dict().items()}
        rng = np.random.default_rng(0)
        buf = ReplayBuffer(256, 8, 2, seed=0)
        for _ in range(128):
            o = rng.uniform(-1, 1, (1, 8)).astype(np.float32)
            buf.add(o, rng.uniform(-1, 1, (1, 2)).astype(np.float32), rng.normal(size=1).astype(np.float32),
                    rng.uniform(-1, 1, (1, 8)).astype(np.float32), np.zeros(1, bool), np.zeros(1, bool))
        for i in range(5):
            agent.update(buf.sample(32, n_step=1), i)
        learner._policy_changed = True
        learner.push()  # no actor connected: the version is still built and saved as an actor would receive it
        for k, v in agent.policy.base.state_dict().items():
            assert torch.equal(v, base_before[k])  # frozen
        assert any(not torch.equal(v, res_before[k]) for k, v in agent.policy.residual.state_dict().items())
        from robotrl.policy import policy_state as ps

        spec = ps(agent.policy)
        rebuilt = pushed_policy(tmp_path / "pushed", learner.version, spec["target"], spec["kwargs"])
        obs = torch.from_numpy(rng.uniform(-1, 1, (6, 8)).astype(np.float32))
        agent.policy.eval()
        for pol in (agent.policy, rebuilt):
            pol.reset()
        torch.manual_seed(3)
        a = agent.policy(obs)
        torch.manual_seed(3)
        b = rebuilt(obs)
        torch.testing.assert_close(a, b)  # same weights, same sampling noise: the same actions
    finally:
        learner.close()


def test_pretraining_starts_the_critic_at_the_demonstrations_mean_return(tmp_path):
    """``agent.model.critic_init=data`` (as ``robotrl train`` applies it): before the first offline update the critic's
    heads start at the demonstrations' mean MC return, so after one update Q on the demonstrations sits near their
    returns; without it Q starts near 0, several units above these returns (every step costs 1 here)."""
    import numpy as np

    demos = record_controller_demos(tmp_path / "minari" / "demos", episodes=4, max_steps=60, maze="open",
                                    reward="dense", seed=7)
    learner, _, _ = build_learner(_cfg(tmp_path, f"demos={demos}", "trainer.offline_steps=1",
                                       "agent.model.critic_init=data"))
    try:
        buf = learner.demos
        mc = np.asarray(buf.mc_returns[: buf.size], np.float64)
        mean_mc = float(mc[np.isfinite(mc)].mean())
        assert mean_mc < -3.0  # far enough from 0 that a critic left at 0 fails below
        q = learner.agent.batch_q_values(buf.sample(buf.size, indices=np.arange(buf.size))).mean().item()
        assert abs(q - mean_mc) < 1.0, (q, mean_mc)
        assert learner.critic_init == pytest.approx(mean_mc, abs=1e-4)
    finally:
        learner.close()


def test_the_learner_uses_n_step_targets_offline_and_online(tmp_path):
    """``trainer.n_step=3``: the pretraining batches and the online (mixed) batches both carry 3-step returns
    (discount γ³ on rows with 3 steps ahead in their episode), not the 1-step targets (γ) the learner used to build."""
    import numpy as np

    demos = record_controller_demos(tmp_path / "minari" / "demos", episodes=4, max_steps=60, maze="open",
                                    reward="dense", seed=7)
    learner, _, _ = build_learner(_cfg(tmp_path, f"demos={demos}", "trainer.n_step=3"))
    try:
        g = 0.9  # LEARNER's agent.gamma
        assert learner.n_step == 3
        off = learner.pretrain_batch()
        assert np.isclose(off.discounts.numpy(), g ** 3).mean() > 0.8  # episodes of 60 steps: most rows have 3 ahead
        rng = np.random.default_rng(0)
        n = 40
        obs = rng.uniform(-1, 1, (n + 1, learner.do)).astype(np.float32)
        for i in range(n):  # one actor's episode in progress in the online buffer
            learner.online.add(obs[i:i + 1], rng.uniform(-1, 1, (1, learner.da)).astype(np.float32),
                               np.full(1, -1.0, np.float32), obs[i + 1:i + 2], np.zeros(1, bool), np.zeros(1, bool),
                               env_ids=[0])
        mixed = learner.online_batch()
        online = mixed.extras["offline"].numpy() == 0
        assert online.sum() > 0
        d = mixed.discounts.numpy()[online]
        assert np.isclose(d, g ** 3).mean() > 0.8  # the newest 2 steps of the open episode have fewer ahead
        assert np.all(np.isclose(d, g) | np.isclose(d, g ** 2) | np.isclose(d, g ** 3))
    finally:
        learner.close()


def test_n_step_below_one_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="n_step must be >= 1"):
        build_learner(_cfg(tmp_path, "trainer.n_step=0", "trainer.offline_ratio=0"))
