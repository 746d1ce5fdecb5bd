"""``logger=wandb`` (:mod:`robotrl.logging_wandb`): a real ``robotrl train`` run mirrored into a real W&B run in
offline mode, which needs no network and no account."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    # no account, no network: W&B's own switches for a machine like CI's
    env.update(OMP_NUM_THREADS="1", MINARI_DATASETS_PATH=str(tmp_path / "minari"), WANDB_SILENT="true",
               WANDB_DIR=str(tmp_path / "wandb-home"), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"),
               WANDB_CACHE_DIR=str(tmp_path / "wandb-cache"))
    env.pop("WANDB_API_KEY", None)
    return env


@pytest.mark.slow
def test_logger_wandb_offline_mirrors_the_runs_scalars_and_config(tmp_path):
    pytest.importorskip("wandb")
    run_dir = tmp_path / "run"
    args = ["train", "agent=bc", "logger=wandb", "logger.project=robotrl-test", "dataset=pointmaze-umaze-planner",
            "dataset.id=robotrl/pointmaze/umaze-wb-v1", "dataset.recipe_args.num_steps=2000",
            "+dataset.recipe_args.ref_episodes=2", "trainer.offline_steps=100", "trainer.eval_every=50",
            "trainer.eval_episodes=2", "trainer.eval_envs=2", "trainer.log_every=10", "trainer.checkpoint_every=100",
            "torch_threads=1", f"run_dir={run_dir}"]
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", *args], cwd=tmp_path, env=_env(tmp_path),
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    run_id = (run_dir / "wandb_id").read_text().strip()
    (offline,) = (run_dir / "wandb").glob(f"offline-run-*-{run_id}")
    # the offline run file holds W&B's records (protobuf; keys and JSON values as plain bytes): W&B has no public
    # reader for an unsynced run, so the test looks for the keys the run logged and the config it was given
    data = (offline / f"run-{run_id}.wandb").read_bytes()
    for key in (b"train_offline/loss", b"eval/return_mean", b"summary/final_return", b"robotrl/pointmaze/umaze-wb-v1",
                b"offline_steps"):
        assert key in data, key
    assert not list((run_dir / "tb").glob("**/events.out.tfevents.*"))[1:]  # still one TensorBoard event file


def test_logger_wandb_without_wandb_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['wandb'] = None; from robotrl.logging_wandb import WandbLogger\n"
            "try:\n    WandbLogger(sys.argv[1], {'logger': {'name': 'wandb'}})\nexcept Exception as e:\n"
            "    print(type(e).__name__, e)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "run")], env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120, check=True).stdout
    assert out.startswith("ConfigError") and 'pip install "robotrl[wandb]"' in out and "\n" not in out.strip()
