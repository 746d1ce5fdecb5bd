"""One build path: the simulation runner, a Ray worker and the robot learner built from the same agent config share
the observation spec, the reward transform (with Cal-QL's sparse fill) and the networks' architecture.

Real twin demonstrations (the scripted controller on the MuJoCo PointMaze twin) written as a real Minari dataset; the
runner is built by ``robotrl train``'s :func:`robotrl.experiment.build_trainer`, the worker's agent by
:func:`robotrl.distributed.collector.build_worker_agent` (what a Ray rollout worker runs) and the learner by
``robotrl learner``'s :func:`robotrl.real_robot.online_cli.build_learner` (bound to a real loopback socket).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module

from robotrl.distributed.collector import build_worker_agent
from robotrl.experiment import build_trainer, trainer_config, worker_agent_spec
from robotrl.real_robot.online_cli import build_learner
from robotrl.real_robot.online_eval import record_controller_demos, robot_overrides
from robotrl.spec import ObservationSpec

#: the agent, as both commands are given it: Cal-QL (reward transform and sparse fill on) with small networks
AGENT = ["agent=calql", "agent.reward_scale=10.0", "agent.reward_bias=-5.0", "agent.mc_sparse_fill=0.0", "agent.model.num_critics=2",
         "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.cql_n_actions=4"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    return record_controller_demos(tmp_path_factory.mktemp("minari") / "demos", episodes=3, max_steps=40, maze="open",
                                   reward="sparse", seed=3)


def _train_cfg(demos, tmp_path, *extra):
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("train", overrides=["env=gym", f"dataset.id={demos}", *AGENT, "trainer.offline_steps=10",
                                           "trainer.batch_size=16", "trainer.progress=false", f"run_dir={tmp_path}",
                                           *extra])


def _learner_cfg(demos, tmp_path, *extra):
    with initialize_config_module("robotrl.configs", version_base="1.3"):
        return compose("online/learner", overrides=[*robot_overrides("open", "sparse", 40), *AGENT, f"demos={demos}",
                                                    f"run_dir={tmp_path / 'learner'}", "endpoint=tcp://127.0.0.1:0",
                                                    "key_create=true", f"key_file={tmp_path / 'k.key'}",
                                                    "trainer.batch_size=16", *extra])


def test_runner_worker_and_learner_share_spec_reward_transform_and_architecture(demos, tmp_path):
    cfg = _train_cfg(demos, tmp_path / "train")
    runner = build_trainer(cfg, tmp_path / "train", overrides=[])
    derived = runner.run_config["derived"]
    spec = ObservationSpec.from_dict(derived["observation"])
    worker = build_worker_agent(worker_agent_spec(cfg, spec, trainer_config(cfg)))
    learner, resumed, _ = build_learner(_learner_cfg(demos, tmp_path))
    try:
        assert not resumed
        # one observation spec: the robot's Do/Da are the data's and the env's
        assert (spec.obs_dim, spec.action_dim) == (learner.do, learner.da) and not spec.has_cameras
        # one agent class and one architecture, built by one function
        assert type(runner.agent) is type(worker) is type(learner.agent)
        assert runner.agent.policy.spec() == worker.policy.spec() == learner.agent.policy.spec()
        assert [p.shape for p in runner.agent.state_dict()["critic"].values()] == \
            [p.shape for p in learner.agent.state_dict()["critic"].values()]
        # one reward transform: the demonstrations enter both buffers as 10 r - 5, with the same sparse fill
        off, dem = runner.offline, learner.demos
        assert off.mc_sparse_fill is not None and dem.mc_sparse_fill == pytest.approx(off.mc_sparse_fill)
        n = off.size
        np.testing.assert_allclose(dem.rewards[:n], off.rewards[:n])
        assert set(np.unique(off.rewards[:n])) <= {-5.0, 5.0}
        np.testing.assert_allclose(dem.mc_returns[:n], off.mc_returns[:n], rtol=1e-6)
    finally:
        learner.close()


def test_learner_warm_start_adopts_the_checkpoint_architecture_as_train_does(demos, tmp_path):
    pre = _train_cfg(demos, tmp_path / "pre", "agent.model.hidden=[24,24]", "agent.model.critic_hidden=[24,24]",
                     "trainer.eval_every=10", "trainer.eval_episodes=1", "trainer.eval_envs=1")
    runner = build_trainer(pre, tmp_path / "pre", overrides=[])
    runner.fit()
    # the learner's config says 32-wide (not on its command line): the warm start takes 24 from the checkpoint,
    # exactly as robotrl train's warm start does, so the weights load
    learner, resumed, _ = build_learner(_learner_cfg(demos, tmp_path, f"init_from={tmp_path / 'pre'}"))
    try:
        assert not resumed
        assert learner.agent.policy.spec()["hidden"] == [24, 24]
        mine, theirs = learner.agent.state_dict()["critic"], runner.agent.state_dict()["critic"]
        assert mine.keys() == theirs.keys()
        assert all(torch.equal(mine[k].cpu(), theirs[k].cpu()) for k in mine)  # the pretrained weights, loaded
    finally:
        learner.close()


def test_a_wrong_type_fails_when_the_config_is_composed(demos, tmp_path):
    with pytest.raises(Exception, match="utd"):
        _train_cfg(demos, tmp_path, "trainer.utd=fast")
    with pytest.raises(Exception, match="ofline_steps"):
        _train_cfg(demos, tmp_path, "trainer.ofline_steps=100")


def test_the_learner_command_encrypts_its_link_with_curvezmq_when_given_certificates(demos, tmp_path):
    """``robotrl learner curve_secret_file=... curve_clients_dir=...`` (built by build_learner): an actor with a listed
    certificate is heard, one without is not (issue 45: CurveZMQ from the commands, not only the library)."""
    import time

    import zmq.auth

    from robotrl.real_robot.learner_link import ActorLink

    for d in ("learner", "clients", "actor", "stranger"):
        (tmp_path / d).mkdir()
    zmq.auth.create_certificates(tmp_path / "learner", "learner")
    zmq.auth.create_certificates(tmp_path / "actor", "actor0")
    zmq.auth.create_certificates(tmp_path / "stranger", "actor1")
    (tmp_path / "clients" / "actor0.key").write_bytes((tmp_path / "actor" / "actor0.key").read_bytes())
    learner, _, key = build_learner(_learner_cfg(demos, tmp_path, f"curve_secret_file={tmp_path / 'learner' / 'learner.key_secret'}",
                                                 f"curve_clients_dir={tmp_path / 'clients'}"))
    links = {name: ActorLink(learner.ep.endpoint, key, name, {"name": "x"}, tmp_path / f"spill-{name}",
                             curve_cert_file=tmp_path / d / f"{name}.key_secret",
                             curve_server_public_file=tmp_path / "learner" / "learner.key")
             for name, d in (("actor0", "actor"), ("actor1", "stranger"))}
    try:
        heard: set[str] = set()
        end = time.monotonic() + 10
        while time.monotonic() < end and "actor0" not in heard:
            heard |= {msg["body"]["actor_id"] for _, msg in learner.ep.recv(20)}
        end = time.monotonic() + 1.5  # the stranger keeps saying hello: never heard
        while time.monotonic() < end:
            heard |= {msg["body"]["actor_id"] for _, msg in learner.ep.recv(20)}
        assert heard == {"actor0"}
    finally:
        for link in links.values():
            link.close()
        learner.close()


@pytest.mark.parametrize("utd, split, calls", [(2, 2, 1), (1, 1, 1), (0.25, 1, 0.25)])
def test_the_robot_learner_reads_utd_as_critic_updates_per_transition(demos, tmp_path, utd, split, calls):
    """One meaning of ``trainer.utd`` everywhere (robotrl.utd): on the robot, critic updates per transition received;
    each update call makes ``critic_utd`` critic updates on ``critic_utd × B`` transitions, a fraction paces calls."""
    learner, _, _ = build_learner(_learner_cfg(demos, tmp_path, f"trainer.utd={utd}"))
    try:
        s = learner.schedule
        assert (s.split, s.calls_per_step, s.sampled_batch) == (split, calls, split * 16)
        assert learner.agent.critic_utd == split
        learner.warmup, learner.ingested = 1, 8  # 8 transitions received: utd × 8 critic updates are due
        learner.online.size = max(learner.online.size, 1)
        due = 0
        while learner.updates < 100 and learner._can_update():
            learner.updates += 1
            due += 1
        assert due * split == int(8 * utd)
    finally:
        learner.close()


def test_the_removed_updates_per_transition_is_refused_naming_utd(demos, tmp_path):
    with pytest.raises(Exception, match="trainer.utd is the one knob.*trainer.utd=0.5"):
        build_learner(_learner_cfg(demos, tmp_path, "trainer.updates_per_transition=0.5"))
