"""Offline -> online Q-learning on cameras: pixel Cal-QL pretraining, pixel WSRL fine-tuning from it (trainer.init_from),
resume, refusal of an incompatible pretraining run, and the frozen encoder's feature cache.

Real processes, real MuJoCo renders (OSMesa) and a real Minari camera dataset generated through the dataset config
(PointMaze UMaze, top-down camera at 32x32, 600 steps); tiny networks and budgets.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from pixel_runs import cli_env, compose_train, run_robotrl  # noqa: E402

from robotrl.agents.qlearning import QLAgent  # noqa: E402
from robotrl.checkpoint import load_arrays, load_checkpoint, save_checkpoint  # noqa: E402
from robotrl.data import ActionScaler, ObservationNormalizer, ReplayBuffer  # noqa: E402
from robotrl.envs import osmesa_available  # noqa: E402
from robotrl.errors import CheckpointError, ConfigError  # noqa: E402
from robotrl.experiment import build_trainer  # noqa: E402

needs_osmesa = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

DATA = ["dataset.id=robotrl/pointmaze/umaze-slow-pixwarm-v1", "dataset.recipe_args.num_steps=600",
        "dataset.recipe_args.image_size=32", "+dataset.recipe_args.ref_episodes=2"]
SMALL = ["trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.batch_size=16", "trainer.log_every=10",
         "trainer.progress=false", "torch_threads=1", "device=cpu", "agent.model.channels=8",
         "agent.model.hidden=[32,32]", "agent.model.critic_hidden=[32,32]", "agent.model.num_critics=2",
         "agent.model.cql_n_actions=2"]
CALQL = ["experiment=calql", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL]
WSRL = ["experiment=wsrl", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL]
PRETRAIN_STEPS = 20


def _assert_same_tensors(a, b, where: str = "") -> None:
    """Every tensor of two nested state dicts is equal (bit for bit)."""
    if isinstance(a, torch.Tensor):
        assert torch.equal(a, b), where
    elif isinstance(a, dict):
        assert set(a) == set(b), where
        for k in a:
            _assert_same_tensors(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.fixture(scope="module")
def pretrained(minari_module_root, tmp_path_factory) -> Path:
    """A pixel Cal-QL run through `robotrl train` (its camera dataset generated on first use)."""
    run_dir = tmp_path_factory.mktemp("pixwarm") / "calql"
    res = run_robotrl(["train", *CALQL, f"trainer.offline_steps={PRETRAIN_STEPS}", f"trainer.eval_every={PRETRAIN_STEPS}",
                    f"trainer.checkpoint_every={PRETRAIN_STEPS}", f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    return run_dir


WARM_PARTS = ("policy", "critic", "target_encoder", "critic_target", "log_alpha", "critic_opt", "actor_opt", "alpha_opt")


@pytest.mark.slow
@needs_osmesa
def test_wsrl_pixels_starts_from_the_calql_pixels_weights_stores_frames_checkpoints_and_evaluates(
        pretrained, minari_module_root, tmp_path):
    pre = load_checkpoint(pretrained)
    assert pre["updates"] == PRETRAIN_STEPS
    assert pre["config"]["agent"]["model"]["algo"] == "calql"
    assert pre["config"]["derived"]["image_shapes"] == {"pixels/topdown": [32, 32, 3]}

    run_dir, warmup, n_envs = tmp_path / "wsrl", 10, 2
    base = [*WSRL, f"trainer.init_from={pretrained}", f"trainer.online_warmup_steps={warmup}",
            f"trainer.num_envs={n_envs}", "trainer.eval_every=10", "trainer.checkpoint_every=10", f"run_dir={run_dir}"]
    # the warmup only (no update yet): the run's state is the pretrained one, Adam moments and all
    res = run_robotrl(["train", *base, f"trainer.online_steps={warmup}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    start = load_checkpoint(run_dir)
    assert start["updates"] == 0 and start["step"] == warmup
    for part in WARM_PARTS:
        _assert_same_tensors(pre["agent"][part], start["agent"][part], part)
    assert start["config"]["agent"]["model"]["algo"] == "sac"  # WSRL: plain SAC online
    report = json.loads((run_dir / "report.json").read_text())
    assert report["history"][0]["phase"] == "offline"  # the loaded policy evaluated first (onset reference)
    # the online buffer holds the env's camera frames, uint8, one per transition
    buf = load_arrays(run_dir / "checkpoints" / "online_buffer.npz")
    frames = buf["frames/pixels/topdown"]
    assert frames.dtype == np.uint8 and frames.shape == (warmup * n_envs, 32, 32, 3) and frames.std() > 0
    assert int(buf["size"]) == warmup * n_envs

    # the same run goes on: resumed (never warm-started again), now updating at UTD 2 (robotrl.utd: per env step
    # one update call of 2 critic minibatches and one actor step)
    res = run_robotrl(["train", *base, "trainer.online_steps=20"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True and summary["gradient_updates"] == 20 - warmup
    after = load_checkpoint(run_dir)
    assert after["agent"]["num_updates"] == 20 - warmup
    assert int(after["agent"]["critic_opt"]["state"][0]["step"]) - int(pre["agent"]["critic_opt"]["state"][0]["step"]) \
        == (20 - warmup) * 2  # 2 critic updates per env step (the encoder's first parameter: in the critic's Adam)
    critic = pre["agent"]["critic"]
    assert any(not torch.equal(critic[k], after["agent"]["critic"][k]) for k in critic)  # it learned from there
    enc = [k for k in pre["agent"]["policy"] if k.startswith("encoder.trunks")]
    assert enc and any(not torch.equal(pre["agent"]["policy"][k], after["agent"]["policy"][k]) for k in enc)

    out = run_robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and metrics["step"] == 20 and 0.0 <= metrics["success_rate"] <= 1.0


@needs_osmesa
def test_a_killed_wsrl_pixels_run_resumes(pretrained, minari_module_root, tmp_path, kill_after_checkpoint):
    run_dir = tmp_path / "killed"
    base = [*WSRL, f"trainer.init_from={pretrained}", "trainer.online_warmup_steps=5", "trainer.eval_every=1000000",
            "trainer.checkpoint_every=10", f"run_dir={run_dir}"]
    killed_at = kill_after_checkpoint([sys.executable, "-m", "robotrl.cli", "train", *base,
                                       "trainer.online_steps=1000000"], cli_env(minari_module_root), run_dir, min_step=20)
    assert killed_at >= 20 and killed_at % 10 == 0
    res = run_robotrl(["train", *base, f"trainer.online_steps={killed_at + 10}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True and summary["gradient_updates"] == killed_at + 10 - 5  # one call per env step
    ckpt = load_checkpoint(run_dir)["agent"]
    assert int(ckpt["critic_opt"]["state"][0]["step"]) - int(load_checkpoint(pretrained)["agent"]["critic_opt"]["state"][0]["step"]) \
        == (killed_at + 10 - 5) * 2  # UTD 2: two critic updates per env step
    buf = load_arrays(run_dir / "checkpoints" / "online_buffer.npz")
    assert int(buf["size"]) == killed_at + 10 and buf["frames/pixels/topdown"].dtype == np.uint8


@needs_osmesa
def test_a_pretraining_run_with_other_networks_or_cameras_is_refused(pretrained, minari_module_root, tmp_path):
    wsrl = [*WSRL, f"trainer.init_from={pretrained}", "trainer.online_steps=10"]
    # one architecture rule for states and cameras: an explicit override that contradicts the checkpoint is refused
    # (robotrl.experiment.warm_start_architecture), a default is adopted from it
    with pytest.raises(ConfigError, match=r"agent.model.channels=4 conflicts with the warm-start checkpoint.*"
                                          r"agent.model.channels=8"):
        build_trainer(compose_train([*wsrl, "agent.model.channels=4"]), tmp_path / "a", overrides=["agent.model.channels=4"])
    with pytest.raises(ConfigError, match=r"agent.model.critic_hidden=\[64, 64\] conflicts.*critic_hidden=\[32, 32\]"):
        build_trainer(compose_train([*wsrl, "agent.model.critic_hidden=[64,64]"]), tmp_path / "b",
                      overrides=["agent.model.critic_hidden=[64,64]"])
    adopted = build_trainer(compose_train([*wsrl, "agent.model.channels=4"]), tmp_path / "a2", overrides=[])
    assert adopted.run_config["agent"]["model"]["channels"] == 8  # not on the command line: the checkpoint's
    # a pretraining run on a 64 px camera (its recorded config says so) cannot start a 32 px run
    state = load_checkpoint(pretrained)
    state["config"]["derived"]["image_shapes"] = {"pixels/topdown": [64, 64, 3]}
    other = save_checkpoint(tmp_path / "other64.pt", state)
    with pytest.raises(ConfigError, match=r"cameras \{key: \[H, W, C\]\}.*\[64, 64, 3\].*\[32, 32, 3\].*dataset.id="):
        build_trainer(compose_train([*WSRL, f"trainer.init_from={other}", "trainer.online_steps=10"]), tmp_path / "c")
    # pixel BC cannot be warm-started from a Q-learning run: its weights do not fit (refused before any update)
    with pytest.raises(CheckpointError):
        build_trainer(compose_train(["experiment=bc", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL[:-4],
                                     f"trainer.init_from={pretrained}", "trainer.offline_steps=10"]), tmp_path / "d").fit()
    assert not (tmp_path / "a" / "checkpoints").exists()


@needs_osmesa
def test_wsrl_pixels_with_a_frozen_pretrained_encoder_caches_its_features(pretrained, minari_module_root, tmp_path):
    cfg = compose_train([*WSRL, f"trainer.init_from={pretrained}", "trainer.online_steps=16", "trainer.online_warmup_steps=8",
                    "trainer.eval_every=1000", "trainer.checkpoint_every=1000", "agent.model.freeze_encoder=true",
                    "agent.model.augment_pad=0", "agent.model.cache_features=true"])
    trainer = build_trainer(cfg, tmp_path / "frozen")
    trainer.fit()
    agent, pre = trainer.agent, load_checkpoint(pretrained)["agent"]
    cache = agent.feature_cache
    assert cache is not None and cache.hits > 0 and 0 < cache.misses <= 2 * 16  # each online frame encoded once
    state = agent.policy.state_dict()
    trunk = [k for k in state if k.startswith("encoder.trunks")]
    for k in trunk:  # frozen at the pretrained weights
        assert torch.equal(state[k], pre["policy"][k]), k
    assert not torch.equal(state["encoder.project.0.weight"], pre["policy"]["encoder.project.0.weight"])


# ---------------------------------------------------------------------------------------------- the cache itself
SHAPES = {"pixels/cam": (16, 16, 3)}


def _agent(seed: int = 0, **kw) -> QLAgent:
    return QLAgent(3, 2, image_shapes=SHAPES, obs_normalizer=ObservationNormalizer.identity(3),
                   action_scaler=ActionScaler(-np.ones(2), np.ones(2)), num_critics=2, critic_hidden=[16],
                   hidden=[16], channels=4, feature_dim=8, cql_n_actions=2, seed=seed, device="cpu", **kw)


def _fill(buf: ReplayBuffer, steps: int, rng: np.random.Generator) -> None:
    for t in range(steps):
        img = {"pixels/cam": rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)}
        nxt = {"pixels/cam": rng.integers(0, 256, (1, 16, 16, 3), dtype=np.uint8)}
        buf.add(rng.normal(size=(1, 3)), rng.uniform(-1, 1, (1, 2)), [1.0], rng.normal(size=(1, 3)), [t % 7 == 6], [False],
                images=img, next_images=nxt)


def test_cached_and_uncached_updates_are_identical_and_the_cache_is_used_and_invalidated():
    rng = np.random.default_rng(0)
    buf = ReplayBuffer(24, 3, 2, image_shapes=SHAPES, seed=0)
    _fill(buf, 20, rng)
    frozen = dict(freeze_encoder=True, augment_pad=0, algo="calql")
    plain, cached = _agent(**frozen), _agent(**frozen, cache_features=True)
    calls = []
    cached.policy.encoder.trunks["cam0"].register_forward_hook(lambda m, i, o: calls.append(i[0].shape[0]))

    def step(batch):
        m1, m2 = plain.update(batch, 0), cached.update(batch, 0)
        for k in m1:
            assert torch.equal(m1[k], m2[k]), k
        _assert_same_tensors(plain.state_dict(), cached.state_dict())

    batch = buf.sample(12)
    step(batch)
    n_frames = len(set(batch.extras["obs_uid"].tolist()) | set(batch.extras["next_obs_uid"].tolist()))
    assert cached.feature_cache.misses == n_frames == sum(calls)  # each distinct frame through the trunk once
    calls.clear()
    hits = cached.feature_cache.hits
    step(batch)  # the same frames again: all from the cache, the trunk never runs
    assert calls == [] and cached.feature_cache.hits - hits == 2 * 12
    # the ring wraps: overwritten slots hold new frames with new ids, never served the old features
    before = set(batch.extras["obs_uid"].tolist())
    _fill(buf, 24, rng)
    batch = buf.sample(12)
    assert not before & set(batch.extras["obs_uid"].tolist())
    step(batch)
    assert sum(calls) > 0
    # new encoder weights (a warm start from a run that trained its encoder) clear the cache; both agents load
    # the same and stay identical, the frozen trunk its own target
    other = _agent(algo="calql", seed=1)
    other.update(batch, 0)
    other = other.state_dict()
    for a in (plain, cached):
        a.load_parts(other, ["encoder", "policy", "critic", "temperature"])
    assert len(cached.feature_cache) == 0
    assert cached.target_encoder.trunks is cached.policy.encoder.trunks  # a frozen trunk is its own target
    _assert_same_tensors(dict(cached.policy.encoder.trunks.state_dict()),
                         {k[len("encoder.trunks."):]: v for k, v in other["policy"].items() if k.startswith("encoder.trunks.")})
    step(batch)
    # a write to the trunk that bypasses the agent is caught by the weight versions
    with torch.no_grad():
        for a in (plain, cached):
            a.policy.encoder.trunks["cam0"].net[0].weight.mul_(0.5)
    calls.clear()
    step(batch)
    assert sum(calls) == len(set(batch.extras["obs_uid"].tolist()) | set(batch.extras["next_obs_uid"].tolist()))


def test_feature_caching_needs_a_frozen_unshifted_encoder():
    with pytest.raises(ConfigError, match="freeze_encoder=true and agent.model.augment_pad=0"):
        _agent(cache_features=True)
    with pytest.raises(ConfigError, match="augment_pad=4"):
        _agent(cache_features=True, freeze_encoder=True, augment_pad=4)


def test_pixel_calql_needs_mc_returns_and_switches_to_sac_online():
    agent = _agent(algo="calql", online_algo="sac")
    assert agent.needs_mc_returns
    agent.start_online()
    assert agent.algo == "sac" and not agent.needs_mc_returns
    with pytest.raises(ValueError, match="unknown part"):
        agent.load_parts(agent.state_dict(), ["values"])
    with pytest.raises(ValueError, match="part 'value' needs an IQL agent"):  # the merged class knows IQL's part
        agent.load_parts(agent.state_dict(), ["value"])
    with pytest.raises(ValueError, match="iql.*on cameras is not built"):
        _agent(algo="iql")
