"""OmegaConf resolvers the configs use (registered on ``import robotrl``).

- ``${robotrl.or:A,B}``: ``A`` unless it is null, else ``B`` (``oc.select`` keeps a null).
  ``hydra.run.dir`` uses it so that ``run_dir=...`` is the one directory of a run.
- ``${robotrl.slug:X}``: ``X`` as one path component (a dataset id or path such as
  ``robotrl/pointmaze/umaze-slow-v1`` becomes ``robotrl-pointmaze-umaze-slow-v1``), so
  pretraining and warm-start experiments agree on where a checkpoint lives.
"""

from __future__ import annotations

import re


def _or(value, default):
    return default if value is None else value


def slug(value) -> str:
    """A filesystem-safe single path component for ``value`` (``str(value)``)."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", str(value)).strip("-.")
    return text or "none"


def register() -> None:
    """Register the resolvers once (idempotent)."""
    from omegaconf import OmegaConf

    for name, fn in (("robotrl.or", _or), ("robotrl.slug", slug)):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)
