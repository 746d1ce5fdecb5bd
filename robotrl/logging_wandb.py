"""The optional Weights & Biases logger of a run (``logger=wandb``), beside its TensorBoard event file.

``robotrl train logger=wandb`` sends every scalar the run writes to TensorBoard (training losses, evaluations,
the summary) to a W&B run as well, with the composed config as the run's config. ``logger.mode`` is W&B's own
mode: ``offline`` (the default: no network, no account; the run is written under ``<run_dir>/wandb`` and
``wandb sync <run_dir>/wandb/offline-run-*`` uploads it later), ``online`` (needs ``wandb login`` or
``WANDB_API_KEY``) or ``disabled``. The W&B run id is kept in ``<run_dir>/wandb_id``, so a resumed robotrl run
continues its W&B run (``resume="allow"``) instead of starting a second one.

W&B wants one increasing step per run, while robotrl logs phases on their own axes (the BC pretraining's updates,
then env steps): every scalar is logged with a ``step`` field and W&B plots against it
(``define_metric("*", step_metric="step")``), as W&B documents for custom x-axes.

Needs the ``wandb`` extra (``pip install "robotrl[wandb]"``).
"""

from __future__ import annotations

import logging
import secrets
from pathlib import Path
from typing import Any

from robotrl.errors import ConfigError

log = logging.getLogger(__name__)

MODES = ("offline", "online", "disabled")


def logger_name(run_config: dict | None) -> str:
    """The run's ``logger.name`` (``"tensorboard"`` when the config has no ``logger`` section)."""
    section = (run_config or {}).get("logger") or {}
    return str(section.get("name", "tensorboard")) if isinstance(section, dict) else "tensorboard"


class WandbLogger:
    """A W&B run that mirrors a robotrl run's scalars.

    Args:
        run_dir: the robotrl run directory (W&B's files go to ``run_dir/wandb``, the run id to ``run_dir/wandb_id``).
        run_config: the resolved run config; its ``logger`` section sets ``project``, ``entity``, ``group``,
            ``tags``, ``name`` of the W&B run (``run_name``; default: the run directory's name) and ``mode``.

    Raises:
        ConfigError: ``wandb`` is not installed (the message names the extra), or ``logger.mode`` is unknown.
    """

    def __init__(self, run_dir: str | Path, run_config: dict):
        try:
            import wandb
        except ImportError as exc:
            raise ConfigError('logger=wandb needs the wandb package: pip install "robotrl[wandb]" '
                              "(or leave logger at its default, tensorboard)") from exc
        cfg = dict(run_config.get("logger") or {})
        mode = str(cfg.get("mode", "offline"))
        if mode not in MODES:
            raise ConfigError(f"logger.mode={mode!r} is not a W&B mode; use one of {', '.join(MODES)}")
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        id_file = self.run_dir / "wandb_id"
        run_id = id_file.read_text().strip() if id_file.exists() else secrets.token_hex(4)  # W&B ids: [a-z0-9]
        if not id_file.exists():
            id_file.write_text(run_id + "\n")
        self.run: Any = wandb.init(project=cfg.get("project") or "robotrl", entity=cfg.get("entity"),
                                   group=cfg.get("group"), tags=list(cfg.get("tags") or []) or None,
                                   name=cfg.get("run_name") or self.run_dir.name, dir=str(self.run_dir),
                                   mode=mode, id=run_id, resume="allow", config=run_config, reinit=True)
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        log.info("W&B run %s (%s mode) in %s", run_id, mode, self.run_dir / "wandb")

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Log finite scalars ``metrics`` (full names, e.g. ``train_offline/actor_loss``) at robotrl's ``step``."""
        if metrics:
            self.run.log({**metrics, "step": int(step)})

    def summary(self, summary: dict[str, float]) -> None:
        """Set the run's summary values (the final scores of ``report.json``)."""
        for k, v in summary.items():
            self.run.summary[k] = v

    def finish(self) -> None:
        """Close the W&B run (offline: its files are complete in ``run_dir/wandb``)."""
        self.run.finish()
