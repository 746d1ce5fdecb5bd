"""`robotrl train` / `robotrl eval` on cameras: pixel BC and pixel RLPD through the Hydra trainer.

Real processes, real MuJoCo renders (OSMesa), a real Minari camera dataset the first test generates through the
dataset config (PointMaze UMaze, top-down camera at 32x32 to keep it small); tiny budgets.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from pixel_runs import cli_env, compose_train, run_robotrl  # noqa: E402

from robotrl.checkpoint import load_checkpoint  # noqa: E402
from robotrl.envs import make_env_from_args, osmesa_available  # noqa: E402
from robotrl.errors import ConfigError  # noqa: E402
from robotrl.experiment import build_trainer  # noqa: E402
from robotrl.policy import act, load_policy  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

DATASET_ID = "robotrl/pointmaze/umaze-slow-pixtest-v1"
DATA = [f"dataset.id={DATASET_ID}", "dataset.recipe_args.num_steps=1500", "dataset.recipe_args.image_size=32",
        "+dataset.recipe_args.ref_episodes=3"]
SMALL = ["trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.batch_size=16", "trainer.log_every=10",
         "trainer.progress=false", "torch_threads=1", "agent.model.channels=8", "agent.model.hidden=[64,64]"]
BC = ["experiment=bc", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL]
RLPD = ["experiment=rlpd", "obs=pixels", "dataset=pointmaze-umaze-topdown", *DATA, *SMALL, "agent.model.critic_hidden=[64,64]"]


def test_bc_pixels_trains_checkpoints_and_evaluates_in_the_datas_camera_env(minari_module_root, tmp_path):
    run_dir = tmp_path / "bc"
    res = run_robotrl(["train", *BC, "trainer.offline_steps=40", "trainer.eval_every=20", "trainer.checkpoint_every=20",
                    f"run_dir={run_dir}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "generating it with recipe pointmaze-umaze-slow" in res.stdout  # the camera dataset, on first use
    report = json.loads((run_dir / "report.json").read_text())
    assert [h["step"] for h in report["history"]] == [20, 40]
    assert report["summary"]["gradient_updates"] == 40

    ckpt = load_checkpoint(run_dir)
    derived = ckpt["config"]["derived"]
    # sizes and envs derived from the data: PointMaze's 8-d state beside one 32x32 top-down camera, 2-d actions
    assert derived["obs_dim"] == 8 and derived["action_dim"] == 2
    assert derived["image_shapes"] == {"pixels/topdown": [32, 32, 3]}
    ev = derived["eval_env"]
    assert ev["name"] == "PointMaze_UMaze-v3" and ev["pixels"] == ["topdown"] and ev["size"] == [32, 32]
    assert ev["max_episode_steps"] == derived["train_env"]["max_episode_steps"] is not None
    # the saved policy carries its preprocessing: normalisers, scaler, encoder and the state layout
    pol = ckpt["policy"]
    assert pol["target"] == "robotrl.agents.bc.policy.BCPolicy"
    assert set(pol["state_dict"]) >= {"obs_normalizer.mean", "obs_normalizer.std", "action_scaler.low",
                                      "action_scaler.high"}
    assert any(k.startswith("encoder.") for k in pol["state_dict"]) and pol["kwargs"]["state_layout"]

    # rebuilt alone, it acts on the raw camera observations of the recorded env
    policy = load_policy(str(run_dir))
    env = make_env_from_args(ev, seed=3)
    try:
        obs, _ = env.reset(seed=3)
        a = act(policy, obs)
        assert a.shape == (2,) and np.all(np.abs(a) <= 1.0 + 1e-6)
    finally:
        env.close()

    out = run_robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    metrics = json.loads((run_dir / "eval.json").read_text())
    assert metrics["episodes"] == 2 and metrics["step"] == 40
    # D4RL's score of the evaluated return against the camera dataset's own reference scores (generated above)
    meta = json.loads((minari_module_root / DATASET_ID / "data" / "metadata.json").read_text())
    lo, hi = float(meta["ref_min_score"]), float(meta["ref_max_score"])
    assert hi > lo and metrics["normalized_score"] == pytest.approx(100.0 * (metrics["return_mean"] - lo) / (hi - lo),
                                                                    rel=1e-6, abs=1e-6)
    assert 0.0 <= metrics["success_rate"] <= 1.0


def test_other_cameras_than_the_datas_are_refused_clearly(minari_module_root, tmp_path):
    res = run_robotrl(["train", *BC, "obs.cameras=[free]", "trainer.offline_steps=10", f"run_dir={tmp_path / 'x'}"],
                   minari_module_root)
    assert res.returncode == 2
    assert "obs.cameras=['free'] differs from the cameras dataset" in res.stderr and "obs.cameras=[topdown]" in res.stderr
    assert not (tmp_path / "x" / "checkpoints").exists()
    with pytest.raises(ConfigError, match=r"obs.image_size=64 differs from the frame size \[32, 32\]"):
        build_trainer(compose_train([*BC, "obs.image_size=64", "device=cpu"]), tmp_path / "y")
    build_trainer(compose_train([*BC, "obs.cameras=[topdown]", "obs.image_size=32", "device=cpu"]), tmp_path / "z")  # equal: fine


@pytest.mark.slow
def test_killed_bc_pixels_run_resumes(minari_module_root, tmp_path, kill_after_checkpoint):
    run_dir = tmp_path / "killed"
    base = [*BC, "trainer.eval_every=1000000", "trainer.checkpoint_every=25", f"run_dir={run_dir}"]
    killed_at = kill_after_checkpoint([sys.executable, "-m", "robotrl.cli", "train", *base,
                                       "trainer.offline_steps=1000000"], cli_env(minari_module_root), run_dir, min_step=50)
    assert killed_at >= 50 and killed_at % 25 == 0
    res = run_robotrl(["train", *base, f"trainer.offline_steps={killed_at + 25}"], minari_module_root)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((run_dir / "report.json").read_text())["summary"]
    assert summary["resumed"] is True and summary["gradient_updates"] == killed_at + 25


def test_rlpd_pixels_stores_camera_frames_online_and_its_checkpoint_evaluates(minari_module_root, tmp_path):
    run_dir = tmp_path / "rlpd"
    steps, warmup, n_envs = 40, 10, 2
    cfg = compose_train([*RLPD, f"trainer.online_steps={steps}", f"trainer.online_warmup_steps={warmup}",
                    f"trainer.num_envs={n_envs}", "trainer.eval_every=40", "trainer.checkpoint_every=40", "device=cpu"])
    trainer = build_trainer(cfg, run_dir)
    summary = trainer.fit()
    # trainer.utd=2 critic updates per env step: one update call of critic_utd=2 critic steps (+ one actor step)
    assert summary["gradient_updates"] == (steps - warmup) and trainer.agent.critic_utd == 2
    online = trainer.online
    assert online.size == steps * n_envs and online.image_shapes == {"pixels/topdown": (32, 32, 3)}
    frames = online.frames["pixels/topdown"][: online.size]
    assert frames.dtype == np.uint8 and frames.std() > 0  # real renders, not zeros
    # each frame once: a next frame is kept apart only where no later transition of the episode holds it
    assert len(online.cameras.pending) <= n_envs + int((online.terminated | online.truncated)[: online.size].sum())
    batch = online.sample(8)
    assert batch.images()["pixels/topdown"].shape == (8, 32, 32, 3) and batch.observations.shape == (8, 8)
    # the symmetric batches mixed camera rows from the offline dataset (offline_ratio 0.5)
    assert trainer.offline.image_shapes == online.image_shapes

    out = run_robotrl(["eval", f"checkpoint={run_dir}", "episodes=2", "num_envs=2"], minari_module_root)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads((run_dir / "eval.json").read_text())["step"] == steps


def test_rlpd_pixels_run_resumes_with_its_online_frames(minari_module_root, tmp_path):
    """The online buffer's frames go into the checkpoint and come back: 15 + 15 online steps continue the buffer."""
    base = [*RLPD, "trainer.online_warmup_steps=5", "trainer.num_envs=1", "trainer.eval_every=1000",
            "trainer.checkpoint_every=15", "device=cpu"]
    first = build_trainer(compose_train([*base, "trainer.online_steps=15"]), tmp_path / "r")
    first.fit()
    key = "pixels/topdown"
    saved = first.online.frames[key][: first.online.size].copy()
    second = build_trainer(compose_train([*base, "trainer.online_steps=30"]), tmp_path / "r")
    summary = second.fit()
    assert summary["resumed"] is True and summary["gradient_updates"] == (30 - 5)  # update calls (utd 2: 2 critic steps each)
    assert second.online.size == 30
    np.testing.assert_array_equal(second.online.frames[key][:15], saved)


def test_pixel_bc_with_online_steps_is_refused(minari_module_root, tmp_path):
    with pytest.raises(ConfigError, match="learns offline only.*experiment=rlpd"):
        build_trainer(compose_train([*BC, "trainer.online_steps=10", "device=cpu"]), tmp_path / "o")


def test_a_dataset_without_cameras_is_refused_for_pixel_agents(minari_module_root):
    import dataclasses

    from omegaconf import OmegaConf

    from robotrl.data import load_dataset
    from robotrl.experiment import ensure_dataset
    from robotrl.experiment import camera_args

    cfg = compose_train(BC)
    data = load_dataset(ensure_dataset(cfg.dataset))
    run_cfg = OmegaConf.create({"obs": {"cameras": None, "image_size": None}})
    assert camera_args(run_cfg, data) == {"pixels": ["topdown"], "size": [32, 32]}
    with pytest.raises(ConfigError, match="records no camera frames.*cameras=\\[topdown\\]"):
        camera_args(run_cfg, dataclasses.replace(data, images=None, image_index=None))
    with pytest.raises(ConfigError, match="without a dataset needs the cameras"):
        camera_args(run_cfg, None)
    assert camera_args(OmegaConf.create({"obs": {"cameras": []}}), data) == {}  # obs=state: the frames are not read
