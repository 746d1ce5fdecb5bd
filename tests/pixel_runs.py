"""Helpers of the pixel-training tests: ``robotrl`` CLI processes on a test's own Minari root, Hydra composition."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hydra import compose, initialize_config_module


def cli_env(root: Path) -> dict:
    """The environment of a ``robotrl`` process whose Minari datasets live under ``root`` (one torch thread)."""
    return {**os.environ, "MINARI_DATASETS_PATH": str(root), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def run_robotrl(args: list[str], root: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``robotrl <args>`` as a process (output captured, text)."""
    return subprocess.run([sys.executable, "-m", "robotrl.cli", *args], env=cli_env(root), capture_output=True, text=True,
                          timeout=timeout)


def compose_train(overrides: list[str]):
    """The composed ``train`` config with ``overrides``."""
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)
