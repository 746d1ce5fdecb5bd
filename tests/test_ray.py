"""Ray rollout and evaluation workers and the Ray sweep, on a local Ray cluster this module starts
on 127.0.0.1 (2 CPUs, no dashboard, no usage stats): real actors, real MuJoCo envs, real process kills.

Skipped with the reason when ray is not installed (``pip install 'robotrl[ray]'``)."""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from robotrl.distributed import loopback_only

pytestmark = pytest.mark.slow  # Ray start-up and worker processes: end-to-end

loopback_only()  # before ray is imported: every Ray server of this module listens on 127.0.0.1 only
ray = pytest.importorskip("ray", reason="the Ray tests need the robotrl[ray] extra (pip install 'robotrl[ray]')")

from robotrl.data.normalizer import ActionScaler, ObservationNormalizer  # noqa: E402
from robotrl.distributed import WorkerFailedError, split_envs  # noqa: E402
from robotrl.distributed.collector import (  # noqa: E402
    RayCollectorConfig,
    RayRolloutCollector,
    build_worker_agent,
    worker_gen_seed,
)
from robotrl.envs import env_info, make_env  # noqa: E402
from robotrl.onpolicy import RolloutCollector, RunningRewardScaler  # noqa: E402

# InvertedPendulum terminates when it falls; a 6-step limit adds truncations: both kinds of episode end
ENV = {"name": "InvertedPendulum-v5", "env_kwargs": {}, "max_episode_steps": 6}
PPO = {"_target_": "robotrl.agents.ppo.PPOAgent", "hidden": [16, 16], "critic_hidden": [16], "init_log_std": -1.0,
       "batch_size": 32, "n_epochs": 1}
DPPO = {"_target_": "robotrl.agents.dppo.DPPOAgent", "obs_horizon": 2, "action_horizon": 3, "act_steps": 2,
        "denoising_steps": 4, "ft_denoising_steps": 2, "denoiser_kwargs": {"hidden": [16, 16]}, "critic_hidden": [16],
        "batch_size": 64, "n_epochs": 1}


@pytest.fixture(scope="module")
def cluster():
    ctx = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    assert ctx.address_info["node_ip_address"] == "127.0.0.1"
    yield ctx
    ray.shutdown()


def _spec(model: dict, seed: int = 0) -> dict:
    info = env_info(ENV["name"])
    return {"model": model, "obs_dim": info.obs_dim, "action_dim": info.action_dim, "seed": seed}


def _agent(model: dict, seed: int = 0):
    """The learner's agent, with non-trivial normalisers (the workers must receive them with the weights)."""
    spec = _spec(model, seed)
    agent = build_worker_agent(spec)
    d, a = spec["obs_dim"], spec["action_dim"]
    agent.policy.obs_normalizer.load_state_dict(ObservationNormalizer(np.full(d, 0.1), np.full(d, 2.0)).state_dict())
    agent.policy.action_scaler.load_state_dict(ActionScaler(np.full(a, -3.0), np.full(a, 3.0)).state_dict())
    return agent


def _local(agent, num_envs: int, seed: int, reset_seed: int, offset: int = 0, scaling: bool = True):
    envs = make_env(ENV["name"], num_envs=num_envs, seed=seed + offset, vectorization="sync",
                    action_chunk=int(getattr(agent.policy, "Te", 1)), max_episode_steps=ENV["max_episode_steps"])
    return RolloutCollector(envs, agent.policy.To, gamma=agent.gamma, reward_scaling=scaling, seed=reset_seed + offset)


def _ray(agent, num_envs: int, workers: int, seed: int, reset_seed: int, **kw):
    cfg = RayCollectorConfig(workers=workers, **kw)
    return RayRolloutCollector(agent, agent_spec=_spec(_model_of(agent), seed), env_args=ENV, num_envs=num_envs, cfg=cfg, seed=seed, reset_seed=reset_seed)


def _model_of(agent) -> dict:
    return DPPO if type(agent).__name__ == "DPPOAgent" else PPO


def _assert_same(ro_a, ro_b):
    for k in ("observations", "next_observations", "rewards", "scaled_rewards", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(ro_a, k), getattr(ro_b, k), err_msg=k)
    assert ro_a.extras.keys() == ro_b.extras.keys()
    for k in ro_a.extras:
        torch.testing.assert_close(ro_a.extras[k], ro_b.extras[k], rtol=0, atol=0)
    assert ro_a.env_steps == ro_b.env_steps
    assert ro_a.episode_returns == ro_b.episode_returns and ro_a.episode_successes == ro_b.episode_successes


def test_one_ray_worker_equals_local_collection_across_updates(cluster):
    """With one worker, Ray collection is local collection transition for transition (same seed), and
    the learner's generator comes back advanced as locally: PPO updates in between keep both runs equal."""
    local_agent = _agent(PPO, seed=3)
    ray_agent = copy.deepcopy(local_agent)
    local = _local(local_agent, 3, seed=5, reset_seed=5)
    remote = _ray(ray_agent, 3, 1, seed=5, reset_seed=5)
    try:
        for it in range(2):
            ro_l, ro_r = local.collect(local_agent, 30), remote.collect(ray_agent, 30)
            _assert_same(ro_l, ro_r)
            assert ro_r.terminated.any() and ro_r.truncated.any() and (~ro_r.valid).any()  # every case was exercised
            local_agent.update_rollout(ro_l, it)
            ray_agent.update_rollout(ro_r, it)
        for (k, a), (_, b) in zip(local_agent.policy.state_dict().items(), ray_agent.policy.state_dict().items()):
            torch.testing.assert_close(a, b, rtol=0, atol=0, msg=k)
        # checkpoint layout is the local one
        s_l, s_r = local.state_dict(), remote.state_dict()
        np.testing.assert_array_equal(s_l["hist"].numpy(), s_r["hist"].numpy())
        assert s_l["scaler"]["var"] == s_r["scaler"]["var"]
    finally:
        local.envs.close()
        remote.close()


def test_two_ray_workers_equal_local_collection_of_their_shards(cluster):
    """DPPO (chunks of 2 env steps, observation history 2) on 2 workers: each shard's transitions are
    the local collector's on the same envs and seeds; reward scaling and episode order are over all envs.
    The same workers then run evaluation episodes, scoring as one local evaluation."""
    N, seed, reset_seed = 5, 1, 4
    agent = _agent(DPPO, seed=2)
    ref_agents = [copy.deepcopy(agent) for _ in range(2)]
    ref_agents[1].gen.manual_seed(worker_gen_seed(1, reset_seed))
    remote = _ray(agent, N, 2, seed=seed, reset_seed=reset_seed)
    try:
        ro = remote.collect(agent, 16)
        _evaluation_on_workers_equals_local([s.actor for s in remote.shards])
    finally:
        remote.close()
    shards = split_envs(N, 2)
    refs = []
    for (off, n), a in zip(shards, ref_agents):
        c = _local(a, n, seed, reset_seed, offset=off, scaling=False)
        refs.append(c.collect(a, 16))
        c.envs.close()
    for k in ("observations", "next_observations", "rewards", "terminated", "truncated", "valid"):
        np.testing.assert_array_equal(getattr(ro, k), np.concatenate([getattr(r, k) for r in refs], 1), err_msg=k)
    torch.testing.assert_close(ro.extras["chains"], torch.cat([r.extras["chains"] for r in refs], 1), rtol=0, atol=0)
    assert ro.observations.shape[:3] == (16, N, 2) and ro.terminated.any()
    # the learner's generator advanced as worker 0's
    assert torch.equal(agent.gen.get_state(), ref_agents[0].gen.get_state())
    # one running scaler over all N envs, as a local N-env collector would have it
    scaler = RunningRewardScaler(N, agent.gamma)
    expect = scaler.scale_rollout(ro.rewards.astype(np.float64), ro.terminated | ro.truncated, ro.valid)
    np.testing.assert_allclose(ro.scaled_rewards, expect, rtol=1e-6)
    # episode statistics ordered by step, then global env index
    ends = np.argwhere(ro.terminated | ro.truncated)
    assert len(ro.episode_returns) == len(ends) == sum(len(r.episode_returns) for r in refs)
    assert sorted(ro.episode_returns) == sorted(sum((r.episode_returns for r in refs), []))


def _evaluation_on_workers_equals_local(actors):
    """Episodes split over the 2 (idle) rollout workers score as one local evaluation (deterministic
    PPO policy, the same episode seeds)."""
    from robotrl.distributed.evaluation import evaluate_on_ray
    from robotrl.evaluation import evaluate
    from robotrl.policy import act

    pol = _agent(PPO).policy
    ev = {"name": ENV["name"], "env_kwargs": {}, "max_episode_steps": 20}
    local = evaluate(lambda o: act(pol, o), lambda: make_env(ev["name"], max_episode_steps=20), 7, seed=11, num_envs=3,
                     ref_scores=(0.0, 20.0), reset_policy=pol.reset)
    remote = evaluate_on_ray(pol, ev, 7, workers=2, seed=11, num_envs=3, ref_scores=(0.0, 20.0), actors=actors)
    assert remote.keys() == local.keys() and remote["episodes"] == 7
    for k, v in local.items():
        if isinstance(v, float) and np.isnan(v):
            assert np.isnan(remote[k]), k
        elif isinstance(v, float):
            assert remote[k] == pytest.approx(v, rel=1e-9, abs=1e-9), k
        else:
            assert remote[k] == v, k


def _kill(pid: int) -> None:
    os.kill(pid, signal.SIGKILL)
    for _ in range(100):  # wait until the process is gone (a zombie of the raylet counts as gone)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if open(f"/proc/{pid}/stat").read().split()[2] == "Z":
            return
        time.sleep(0.05)


def _collect_warned(remote, agent, match: str):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ro = remote.collect(agent, 8)
    assert any(match in str(w.message) for w in caught), [str(w.message) for w in caught]
    return ro


def test_killed_worker_is_restarted_then_dropped_then_fails_clearly(cluster):
    """SIGKILLed worker processes (as on a crash or a lost node), one collector, the three policies in turn."""
    agent = _agent(PPO)
    remote = _ray(agent, 4, 2, seed=0, reset_seed=0, on_failure="restart")
    try:
        remote.collect(agent, 8)
        pids = remote.worker_pids()
        # restart: a new actor for worker 1, its envs start new episodes, the rollout is whole
        _kill(pids[1])
        ro = _collect_warned(remote, agent, "restarted")
        assert ro.observations.shape[1] == 4 and remote.N == 4
        assert remote.worker_pids()[0] == pids[0] and remote.worker_pids()[1] != pids[1]
        assert remote.failures[-1] == {**remote.failures[-1], "worker": 1, "action": "restart"}
        assert np.isfinite(ro.scaled_rewards).all()
        agent.update_rollout(ro, 0)  # the learner trains on what came back
        # drop: worker 1 leaves, the iteration completes with worker 0's 2 envs (never padded)
        remote.cfg.on_failure = "drop"
        _kill(remote.worker_pids()[1])
        ro = _collect_warned(remote, agent, "dropped")
        assert ro.observations.shape[1] == 2 and remote.N == 2 and remote.scaler.ret.shape == (2,)
        assert remote.collect(agent, 8).rewards.shape == (8, 2)
        # fail (and the last worker can never be dropped): a clear error naming the worker and the way out
        remote.cfg.on_failure = "fail"
        _kill(remote.worker_pids()[0])
        with pytest.raises(WorkerFailedError, match="worker 0 .*on_failure=fail.*on_failure=restart or drop"):
            remote.collect(agent, 8)
    finally:
        remote.close()


def test_two_run_sweep_through_the_ray_launcher_writes_its_study(cluster, tmp_path):
    """`robotrl train -m hydra/launcher=ray_cluster seed=0,1` joining this module's cluster: two runs, each in its own
    directory, and the study summary (IQM, 95 % CI per configuration) written at the end."""
    pytest.importorskip("hydra_plugins.hydra_ray_launcher", reason="hydra-ray-launcher is not installed")
    sweep = tmp_path / "sweep"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "RAY_ADDRESS": ""}
    cmd = [sys.executable, "-m", "robotrl.cli", "train", "-m", "hydra/launcher=ray_cluster",
           f"hydra.launcher.ray.init.address={cluster.address_info['address']}",
           "agent=ppo", "env=pointmaze-umaze", "agent.onpolicy.iterations=1", "agent.onpolicy.steps_per_iter=8",
           "agent.onpolicy.num_envs=2", "agent.onpolicy.eval_episodes=2", "agent.onpolicy.eval_envs=2",
           "agent.model.batch_size=16", "agent.model.hidden=[16,16]", "agent.model.critic_hidden=[16]",
           "trainer.progress=false", "device=cpu", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert sorted(p.parent.name for p in sweep.glob("*/report.json")) == ["0", "1"]
    study = json.loads((sweep / "study.json").read_text())
    (cfg,) = study["configurations"]
    assert cfg["runs"] == 2 and sorted(cfg["seeds"]) == [0, 1]
    finals = [r["final"] for r in cfg["per_run"]]
    assert cfg["final"]["iqm"] == pytest.approx(float(np.mean(finals)))  # 2 values: IQM = mean
    assert cfg["final"]["lo"] <= cfg["final"]["iqm"] <= cfg["final"]["hi"]
    assert (sweep / "study.md").read_text().startswith("# Study")
