"""Issue 42 item 3 on the robot: the actor reports the base action each step executed (a residual on a chunked base),
every transition row carries it (``base_action`` in the link's ``TRANSITION_FIELDS``, NaN when none), and the learner
stores the agent's declared ``transition_fields`` in both buffers, so the residual's TD target relabels with the base
action really executed. A real diffusion base executing chunks of 4, the learner built by ``robotrl learner``'s
builder, the policy rebuilt from pushed weights as the actor does; no processes."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.real_robot.link_codec import TRANSITION_FIELDS, check_batch, stack_transitions
from robotrl.real_robot.online_cli import build_learner
from robotrl.real_robot.online_eval import robot_overrides

DO, DA = 8, 2


def _chunked_residual_learner(tmp_path):
    from robotrl.agents.diffusion import DiffusionAgent
    from robotrl.checkpoint import save_checkpoint
    from robotrl.data.normalizer import ActionScaler, ObservationNormalizer
    from robotrl.policy import policy_state

    torch.manual_seed(0)
    base = DiffusionAgent(DO, DA, obs_normalizer=ObservationNormalizer.identity(DO),
                          action_scaler=ActionScaler(-np.ones(DA), np.ones(DA)), denoising_steps=5, act_steps=4,
                          denoiser_kwargs={"hidden": [32, 32], "time_dim": 8}, seed=0)
    save_checkpoint(tmp_path / "diffusion.pt", {"policy": policy_state(base.policy)})
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        cfg = compose("online/learner", overrides=[
            *robot_overrides("open", "dense", 60), "agent=residual-offpolicy", f"agent.model.base={tmp_path / 'diffusion.pt'}",
            "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
            "trainer.batch_size=16", "trainer.offline_ratio=0", "trainer.n_step=3", f"run_dir={tmp_path / 'run'}",
            "endpoint=tcp://127.0.0.1:0", "key_create=true", f"key_file={tmp_path / 'k.key'}"])
    return build_learner(cfg)[0]


def _holder(agent, explore: bool = False):
    from robotrl.policy import policy_state
    from robotrl.real_robot.learner_link import Weights
    from robotrl.real_robot.online_actor import PolicyHolder

    ps = policy_state(agent.policy)
    h = PolicyHolder(explore=explore, seed=0)
    h.load(Weights(1, ps["target"], ps["kwargs"], {k: v.clone() for k, v in ps["state_dict"].items()}, 0.0, 0.0))
    return h


def test_the_actor_reports_the_base_action_each_step_executed(tmp_path):
    learner = _chunked_residual_learner(tmp_path)
    try:
        assert learner.agent.chunked_base and learner.agent.policy.base.Te == 4
        assert learner.transition_fields == {"base_action": DA}
        h = _holder(learner.agent)
        p = h.policy
        rng = np.random.default_rng(1)
        h.reset()
        twin = copy.deepcopy(p.base)  # the same base, stepped by hand below on the same noise
        obs = rng.uniform(-1, 1, (8, DO)).astype(np.float32)
        bases = []
        torch.manual_seed(5)
        for o in obs:
            a = h.act(o)
            base = h.last_base_action
            assert base is not None and base.shape == (DA,) and np.isfinite(base).all()
            x, b = torch.from_numpy(o[None]), torch.from_numpy(base[None])
            with torch.no_grad():  # the executed action is the residual on exactly this base action
                want = p.combine(b, p.deterministic_residual(p.inputs(x, b)))[0].numpy()
            np.testing.assert_allclose(a, want, rtol=0, atol=1e-6)
            bases.append(base)
        torch.manual_seed(5)
        with torch.no_grad():  # the base's own outputs step by step: a chunk of 4 predicted every 4th step, queued
            direct = np.stack([twin(torch.from_numpy(o[None]))[0].numpy() for o in obs])
        np.testing.assert_allclose(np.stack(bases), direct, rtol=0, atol=1e-6)
    finally:
        learner.close()


def test_a_policy_without_a_base_reports_none_and_rows_without_it_travel_as_nan():
    from robotrl.agents.qlearning import QLAgent  # noqa: F401  (the policy class of a SAC learner)
    from robotrl.real_robot.online_actor import PolicyHolder

    h = PolicyHolder(explore=False)
    assert h.last_base_action is None
    assert TRANSITION_FIELDS["base_action"] == ("<f4", "a")
    row = {"n": 0, "episode": 0, "step": 0, "obs": np.zeros(DO, np.float32), "next_obs": np.zeros(DO, np.float32),
           "action": np.zeros(DA, np.float32), "requested": np.zeros(DA, np.float32),
           "policy_action": np.zeros(DA, np.float32), "reward": 0.0, "terminated": False, "truncated": False,
           "success": False, "intervention": False, "safety_modified": False, "held": False, "learner_connected": True,
           "weights_version": 1, "time": 0.0, "rtt_s": 0.0, "jitter_s": 0.0}
    cols = stack_transitions([row])
    assert cols["base_action"].shape == (1, DA) and np.isnan(cols["base_action"]).all()
    check_batch({"count": 1, **cols}, DO, DA)
    cols.pop("base_action")
    with pytest.raises(Exception, match="base_action"):
        check_batch({"count": 1, **cols}, DO, DA)
    with pytest.raises(KeyError, match="policy_action"):
        stack_transitions([{k: v for k, v in row.items() if k != "policy_action"}])


def test_the_learner_stores_the_executed_base_actions_and_the_td_target_reads_them(tmp_path):
    learner = _chunked_residual_learner(tmp_path)
    try:
        assert "base_action" in learner.online.extra and "base_action" in learner.demos.extra
        rng = np.random.default_rng(2)
        n = 40
        obs = rng.uniform(-1, 1, (n + 1, DO)).astype(np.float32)
        base = rng.uniform(-1, 1, (n, DA)).astype(np.float32)
        base[5] = np.nan  # a step the policy did not act on (held): unknown, the agent recomputes it
        rows = [{"n": i, "episode": 0, "step": i, "obs": obs[i], "next_obs": obs[i + 1],
                 "action": rng.uniform(-1, 1, DA).astype(np.float32), "requested": np.zeros(DA, np.float32),
                 "policy_action": np.zeros(DA, np.float32), "base_action": base[i], "reward": -1.0,
                 "terminated": False, "truncated": i == n - 1, "success": False, "intervention": 10 <= i < 14,
                 "safety_modified": False, "held": False, "learner_connected": True, "weights_version": 1,
                 "time": 0.0, "rtt_s": 0.0, "jitter_s": 0.0} for i in range(n)]
        b = {"count": n, **stack_transitions(rows)}
        check_batch(b, DO, DA)
        learner.slots["a0"] = 0
        assert learner.ingest("a0", b) == n
        np.testing.assert_array_equal(learner.online.extra["base_action"][:n], base)
        np.testing.assert_array_equal(learner.demos.extra["base_action"][:4], base[10:14])  # interventions: as executed
        batch = learner.online.sample(n, indices=np.arange(n), n_step=3)
        ex = {k: v.numpy() for k, v in batch.extras.items()}
        np.testing.assert_array_equal(ex["base_action"], base)
        # the TD target's next base action: the one executed 3 steps on (n_step=3), NaN past the episode's end
        want = np.full((n, DA), np.nan, np.float32)
        want[: n - 3] = base[3:]
        np.testing.assert_array_equal(ex["next_base_action"], want)
        learner.warmup = 1
        m = learner.update()  # the agent's update reads them (NaN rows recomputed), without error
        assert all(np.isfinite(float(v)) for v in m.values())
    finally:
        learner.close()


def test_the_episode_file_records_the_executed_base_action_also_after_a_recovery(tmp_path):
    """The recorder's episode ``.npz`` has ``info_base_action`` ``(T+1, Da)`` (reset entry NaN, then each step's
    executed base action; NaN for a step without one and for a row from an actor that sent none), also when a killed
    actor's journal is turned into the episode (:meth:`EpisodeRecorder.recover`)."""
    from robotrl.real_robot.online_recording import EpisodeRecorder
    from robotrl.real_robot.sim import MuJoCoTwin

    spec = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=50).spec()
    do, da = spec.observation.dim, spec.action.dim
    rng = np.random.default_rng(3)
    n = 6
    obs = rng.uniform(-1, 1, (n + 1, do)).astype(np.float32)
    base = rng.uniform(-1, 1, (n, da)).astype(np.float32)
    rows = [{"n": i, "episode": 0, "step": i, "obs": obs[i], "next_obs": obs[i + 1],
             "action": np.zeros(da, np.float32), "requested": np.zeros(da, np.float32),
             "policy_action": np.zeros(da, np.float32), "base_action": base[i], "reward": 0.0, "terminated": False,
             "truncated": i == n - 1, "success": False, "intervention": False, "safety_modified": False,
             "held": False, "learner_connected": True, "weights_version": 1, "time": 0.0, "rtt_s": 0.0,
             "jitter_s": 0.0} for i in range(n)]
    del rows[2]["base_action"]  # a row of an actor that sent none
    rec = EpisodeRecorder(tmp_path / "a", spec)
    rec.write(0, rows, obs[n], seed=None)
    z = rec.load(0)
    want = np.concatenate([np.full((1, da), np.nan, np.float32), base])
    want[3] = np.nan
    np.testing.assert_array_equal(z["info_base_action"], want)
    rec2 = EpisodeRecorder(tmp_path / "b", spec)  # killed mid-episode: the journal becomes the episode
    for r in rows[:4]:
        rec2.append({**r, "episode": 1})
    rec2._journal.close()
    rec2._journal = None
    assert len(EpisodeRecorder(tmp_path / "b", spec).recover()) == 4
    np.testing.assert_array_equal(rec2.load(1)["info_base_action"], want[:5])
