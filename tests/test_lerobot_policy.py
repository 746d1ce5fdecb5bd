"""A LeRobot-trained ACT policy as the frozen base of the residual agents (issue 42 item 3).

The fixture ``tests/data/lerobot_policies/act`` is a tiny ACT policy (state 4 + environment state 4, action 2,
chunk 4, n_action_steps 4) trained for 300 steps with LeRobot 0.4.4's own API on a dataset robotrl wrote
(``benchmarks/check_lerobot_policies.py --save-fixture``) and saved with ``save_pretrained`` (policy, pre- and
post-processor). The tests that run LeRobot are skipped where LeRobot is not importable (robotrl's CI
interpreter); run them under the LeRobot venv as the contributing docs say. Without LeRobot, loading the folder
gives one line naming the extra.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPolicy, ResidualPPOAgent, load_base
from robotrl.agents.residual.lerobot import is_lerobot_policy_dir
from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
from robotrl.errors import CheckpointError

ACT = Path(__file__).parent / "data" / "lerobot_policies" / "act"
HAVE_LEROBOT = importlib.util.find_spec("lerobot") is not None
needs_lerobot = pytest.mark.skipif(not HAVE_LEROBOT, reason="LeRobot is not installed (pip install 'robotrl[lerobot]')")
SCALER = ActionScaler(-np.ones(2), np.ones(2))


def _states(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 8)).astype(np.float32)


def test_fixture_is_a_lerobot_policy_folder_under_2_mb():
    assert is_lerobot_policy_dir(ACT)
    assert sum(p.stat().st_size for p in ACT.iterdir()) < 2_000_000


@pytest.mark.skipif(HAVE_LEROBOT, reason="checks the message shown where LeRobot is missing")
def test_without_lerobot_the_base_names_the_extra():
    with pytest.raises(CheckpointError, match=r"robotrl\[lerobot\]") as err:
        load_base(ACT)
    assert "\n" not in str(err.value)


@needs_lerobot
def test_act_base_executes_its_chunks_per_env_as_lerobots_select_action():
    from lerobot.policies.act.modeling_act import ACTPolicy
    from lerobot.policies.factory import make_pre_post_processors

    base = load_base(ACT)
    assert (base.obs_dim, base.action_dim, base.To, base.Te) == (8, 2, 1, 4)
    assert not any(p.requires_grad for p in base.parameters())
    ref = ACTPolicy.from_pretrained(str(ACT), local_files_only=True)
    pre, post = make_pre_post_processors(ref.config, pretrained_path=str(ACT))
    s = [_states(11, 1), _states(11, 2)]
    ours = []
    for t in range(11):
        if t == 6:  # env 1 starts a new episode mid-chunk: only its chunk restarts
            base.reset(np.array([1]))
        ours.append(base(torch.as_tensor(np.stack([s[0][t], s[1][t]]))).numpy())
    ours = np.stack(ours, 1)  # (2, 11, 2)
    for env, episodes in ((0, [range(11)]), (1, [range(6), range(6, 11)])):
        theirs = []
        for ep in episodes:
            ref.reset()
            for t in ep:
                x = torch.as_tensor(s[env][t])[None]
                a = ref.select_action(pre({"observation.state": x[:, :4], "observation.environment_state": x[:, 4:]}))
                theirs.append(post(a)[0].numpy())
        np.testing.assert_allclose(ours[env], np.stack(theirs), rtol=0, atol=1e-5)


@needs_lerobot
def test_residual_policy_on_the_act_base_starts_at_it_and_its_checkpoint_rebuilds(tmp_path):
    from robotrl.checkpoint import save_checkpoint
    from robotrl.policy import load_policy, policy_state

    base = load_base(ACT)
    obs = torch.as_tensor(_states(3))
    pol = ResidualPolicy(8, 2, base, hidden=[16], head="tanh")
    pol.set_normalizers(ObservationNormalizer.identity(8), SCALER)
    twin = load_base(ACT)
    assert torch.equal(pol(obs), torch.clamp(twin(obs), -1, 1))
    with torch.no_grad():
        pol.residual.net[-1].bias.fill_(0.2)
    pol.reset()
    moved = pol(obs)
    save_checkpoint(tmp_path / "res.pt", {"policy": policy_state(pol)})
    again = load_policy(tmp_path / "res.pt")
    assert type(again.base).__name__ == "LeRobotPolicy" and again.base.Te == 4
    assert torch.equal(again(obs), moved)


@needs_lerobot
def test_offpolicy_and_ppo_residuals_accept_the_act_base(tmp_path):
    from robotrl.agents.residual.room import ROOM_ENV, ROOM_KW, room_eval_env, room_obs_normalizer
    from robotrl.envs import make_env
    from robotrl.trainer import Trainer, TrainerConfig

    torch.set_num_threads(1)
    agent = ResidualOffPolicyAgent(8, 2, obs_normalizer=room_obs_normalizer(), action_scaler=SCALER, base=str(ACT),
                                   hidden=[16], critic_hidden=[16], num_critics=2, base_noise_steps=3, actor_delay=1)
    assert agent.chunked_base and agent.transition_fields == {"base_action": 2}
    rows = []
    predict = agent.explore_base.predict_chunk
    agent.explore_base.predict_chunk = lambda h, *a, **k: rows.append(len(h)) or predict(h, *a, **k)
    cfg = TrainerConfig(offline_steps=0, online_steps=21, batch_size=8, n_step=1, num_envs=2, online_warmup_steps=3,
                        utd=1, offline_ratio=0.0, eval_every=21, eval_episodes=1, eval_envs=1, checkpoint_every=21,
                        progress=False)
    trainer = Trainer(agent, tmp_path / "run", cfg, offline_buffer=None, make_eval_env=room_eval_env,
                      make_train_envs=lambda: make_env(ROOM_ENV, num_envs=2, seed=0, vectorization="sync",
                                                       max_episode_steps=10, env_kwargs=ROOM_KW), seed=0)
    trainer.fit()
    assert agent.num_updates > 0 and np.isfinite(trainer.online.extra["base_action"][: trainer.online.size]).all()
    # per env: 10 steps (chunks at 0, 4, 8), a reset step, 10 steps: 3 chunk predictions per episode and env
    assert sum(rows) == 2 * 2 * 3
    ppo = ResidualPPOAgent(8, 2, obs_normalizer=ObservationNormalizer.identity(8), action_scaler=SCALER,
                           base=str(ACT), hidden=[16], critic_hidden=[16])
    hist = np.repeat(_states(2)[:, None], 2, axis=1)  # identical rows: episode starts
    a, extras = ppo.rollout_act(hist)
    assert a.shape == (2, 2) and torch.equal(extras["base"], load_base(ACT)(torch.as_tensor(hist[:, -1])))


@needs_lerobot
def test_train_build_path_takes_the_folder_as_agent_model_base(minari_module_root, tmp_path):
    """``robotrl train agent=residual-offpolicy agent.model.base=<LeRobot folder>``: demonstrations mixed in (their
    rows carry no executed base action: relabelled with fresh chunks), online rows store it, the run's policy
    reloads with the LeRobot base inside."""
    from hydra import compose, initialize_config_module

    from robotrl.experiment import build_trainer
    from robotrl.policy import load_policy

    torch.set_num_threads(1)
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=[
            "agent=residual-offpolicy", "dataset=pointmaze-umaze-planner", "dataset.id=robotrl/pointmaze/umaze-lr-v0",
            "dataset.recipe_args.num_steps=2000", "+dataset.recipe_args.ref_episodes=2", "trainer.eval_episodes=2",
            "trainer.eval_envs=2", "trainer.progress=false", "torch_threads=1", f"agent.model.base={ACT}",
            "agent.model.hidden=[32]", "agent.model.critic_hidden=[32]", "agent.model.num_critics=2",
            "agent.model.base_noise_steps=10", "agent.model.critic_warmup_updates=5", "trainer.offline_steps=0",
            "trainer.online_steps=40", "trainer.online_warmup_steps=10", "trainer.n_step=3", "trainer.batch_size=16",
            "trainer.eval_every=40", "trainer.checkpoint_every=40", "device=cpu"])
    trainer = build_trainer(cfg, tmp_path / "run")
    assert type(trainer.agent.policy.base).__name__ == "LeRobotPolicy" and trainer.agent.chunked_base
    summary = trainer.fit()
    assert summary["gradient_updates"] == 30
    assert torch.isnan(trainer.offline.sample(8).extras["base_action"]).all()
    assert np.isfinite(trainer.online.extra["base_action"][: trainer.online.size]).all()
    pol = load_policy(tmp_path / "run")
    assert type(pol).__name__ == "ResidualPolicy" and type(pol.base).__name__ == "LeRobotPolicy" and pol.base.Te == 4
