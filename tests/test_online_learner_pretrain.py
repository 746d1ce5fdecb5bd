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
    fresh.ep.close()
    learner, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert not resumed and learner.pretrain_updates == 30 and learner.status()["pretrain_updates"] == 30
        assert learner.agent.algo == "sac"  # Cal-QL offline, SAC online (WSRL's switch)
        assert learner.updates == 0  # the online schedule starts from 0
        w1 = _weights(learner.agent)
        assert not torch.equal(w0, w1)  # the updates moved the policy
        assert learner.ckpt_path.exists()  # checkpointed: durable before any actor connects
    finally:
        learner.ep.close()
    again, resumed, _ = build_learner(_cfg(tmp_path / "b", f"demos={demos}", "trainer.offline_steps=30"))
    try:
        assert resumed and again.pretrain_updates == 30 and again.agent.algo == "sac"
        assert torch.equal(_weights(again.agent), w1)  # resumed, not pretrained a second time
    finally:
        again.ep.close()


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
        learner.ep.close()
