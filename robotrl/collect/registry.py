"""Named dataset recipes and ``ensure_dataset`` (generate on first use, reuse afterwards).

Names: ``pointmaze-{umaze,medium,large}[-slow]``, ``fetch-{push,pickandplace}-{expert,noisy,mixed}``,
``{hopper,halfcheetah,walker2d}-{random,medium,expert}``. Each recipe is a collection
function with fixed arguments plus its default dataset id; keyword overrides
(``num_steps``, ``num_episodes``, ``seed``, ``root``, ``dataset_id``, ...) pass through.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robotrl.collect._common import dataset_exists
from robotrl.data.writer import dataset_dir
from robotrl.errors import ConfigError, DatasetExistsError

__all__ = ["Recipe", "RECIPES", "check_recipe_provenance", "collect", "ensure_dataset", "recipe_dataset_id", "recipe_writes"]


@dataclass(frozen=True)
class Recipe:
    """A named dataset recipe.

    Attributes:
        name: registry key, e.g. ``"hopper-medium"``.
        fn: the collection function (returns the dataset directory).
        kwargs: its fixed arguments (env/maze/task, quality).
        dataset_id: default Minari id it writes.
        description: one line for listings.
    """

    name: str
    fn: Callable[..., Path]
    kwargs: dict[str, Any] = field(default_factory=dict)
    dataset_id: str = ""
    description: str = ""

    def __call__(self, **overrides) -> Path:
        """Run the recipe; ``overrides`` replace or add keyword arguments (the ones that shape the
        data are recorded in the dataset's provenance as ``recipe_args``)."""
        from robotrl.collect._common import NOT_DATA_ARGS, RECIPE_ARGS

        kwargs = {**self.kwargs, "dataset_id": self.dataset_id, **overrides}
        token = RECIPE_ARGS.set({k: v for k, v in sorted(overrides.items()) if k not in NOT_DATA_ARGS})
        try:
            return self.fn(**kwargs)
        finally:
            RECIPE_ARGS.reset(token)


def _lazy(module: str, name: str) -> Callable[..., Path]:
    """The collection function, imported on call (keeps ``import robotrl.collect`` light)."""

    def call(**kwargs):
        import importlib

        return getattr(importlib.import_module(module), name)(**kwargs)

    call.__name__ = name
    call.__qualname__ = name
    return call


#: Time limits of the slow-demonstrator PointMaze tasks: half the env ids' (UMaze 300, Medium 600, Large 800),
#: so the full-speed planner still succeeds (UMaze ~0.95) where the slow demonstrator often does not (~0.45).
SLOW_LIMITS = {"umaze": 150, "medium": 300, "large": 400}

#: The sub-optimal PointMaze demonstrators: recipe suffix -> (action_scale, action_noise, description).
#: ``slow``: narrow, slow actions; ``noisy``: as slow on average, but its actions cover the whole box.
SUBOPTIMAL_DEMONSTRATORS = {
    "slow": (0.1, 0.1, "a slow demonstrator"),
    "noisy": (0.15, 1.0, "a slow, very noisy demonstrator whose actions cover the whole range"),
}


def _build() -> dict[str, Recipe]:
    recipes: dict[str, Recipe] = {}
    pm = _lazy("robotrl.collect.pointmaze", "collect_pointmaze")
    for maze in ("umaze", "medium", "large"):
        recipes[f"pointmaze-{maze}"] = Recipe(
            f"pointmaze-{maze}", pm, {"maze": maze}, f"robotrl/pointmaze/{maze}-v1",
            f"PointMaze {maze} goal reaching: noisy Q-iteration waypoint planner, 1M steps (Minari's planner)",
        )
        for variant, (scale, noise, who) in SUBOPTIMAL_DEMONSTRATORS.items():
            recipes[f"pointmaze-{maze}-{variant}"] = Recipe(
                f"pointmaze-{maze}-{variant}", pm,
                {"maze": maze, "action_scale": scale, "action_noise": noise, "max_episode_steps": SLOW_LIMITS[maze]},
                f"robotrl/pointmaze/{maze}-{variant}-v1",
                f"PointMaze {maze} goal reaching in {SLOW_LIMITS[maze]} steps: {who} (planner actions x{scale:g}, "
                f"noise {noise:g}), sub-optimal",
            )
    fe = _lazy("robotrl.collect.fetch", "collect_fetch")
    for task in ("push", "pickandplace"):
        for q in ("expert", "noisy", "mixed"):
            recipes[f"fetch-{task}-{q}"] = Recipe(
                f"fetch-{task}-{q}", fe, {"task": task, "quality": q}, f"robotrl/fetch-{task}/{q}-v0",
                f"Fetch {task}: scripted expert, {q}, 1000 episodes",
            )
    lo = _lazy("robotrl.collect.locomotion", "collect_locomotion")
    for env in ("hopper", "halfcheetah", "walker2d"):
        for q in ("random", "medium", "expert"):
            recipes[f"{env}-{q}"] = Recipe(
                f"{env}-{q}", lo, {"env": env, "quality": q}, f"robotrl/{env}/{q}-v0",
                f"{env} {q}: " + ("uniform random actions" if q == "random" else f"PPO {q} checkpoint") + ", 1M steps (D4RL style)",
            )
    return recipes


RECIPES: dict[str, Recipe] = _build()


def _recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise ConfigError(f"unknown dataset recipe {name!r}; known recipes: {', '.join(sorted(RECIPES))}") from None


def recipe_dataset_id(name: str, **overrides) -> str:
    """The dataset id recipe ``name`` writes (``overrides["dataset_id"]`` if given).

    Raises:
        ConfigError: unknown recipe name.
    """
    return overrides.get("dataset_id") or _recipe(name).dataset_id


def recipe_writes(name: str, dataset_id: str, has_args: bool) -> bool:
    """Whether recipe ``name`` produces ``dataset_id`` under its own name.

    That is the recipe's own id (``robotrl/walker2d/medium-v0``), or, when the dataset
    config gives the recipe arguments (a variant: fewer episodes, more steps), a variant
    of it: the own id's stem plus a suffix and a version (``robotrl/fetch-push/noisy-20ep-v0``
    for ``robotrl/fetch-push/noisy-v0``). Any other id is a typo or someone else's
    dataset, which no recipe should write silently.

    Raises:
        ConfigError: unknown recipe name.
    """
    import re

    own = _recipe(name).dataset_id
    if dataset_id == own:
        return True
    m = re.fullmatch(r"(.+)-(v\d+)", own)
    if not (has_args and m):
        return False
    stem = m.group(1)
    return dataset_id.startswith(stem + "-") and re.search(r"-v\d+$", dataset_id) is not None \
        and len(dataset_id) > len(own) - 3


def collect(name: str, **overrides) -> Path:
    """Run recipe ``name`` (always generates; pass ``overwrite=True`` to replace an existing one).

    Args:
        name: a key of :data:`RECIPES`.
        overrides: keyword arguments for the collection function (``num_steps``,
            ``num_episodes``, ``train_steps``, ``seed``, ``root``, ``dataset_id``,
            ``data_format``, ``overwrite``, ``progress``, ``cameras``/``image_size``
            for the PointMaze and Fetch recipes, ...).

    Returns:
        The dataset directory.

    Raises:
        ConfigError: unknown recipe name (the message lists the known ones).
        DatasetExistsError: the dataset exists and ``overwrite`` is not set.
    """
    recipe = _recipe(name)
    if overrides.get("cameras") and not (name.startswith("pointmaze") or name.startswith("fetch")):
        raise ConfigError(f"recipe {name!r} records no cameras; the PointMaze and Fetch recipes do "
                          "(e.g. `robotrl collect recipe=pointmaze-umaze cameras=[topdown] image_size=64`)")
    return recipe(**overrides)


def ensure_dataset(name: str, **overrides) -> str:
    """The dataset id of recipe ``name``, generating the dataset only if it is not present.

    Presence means ``<root>/<dataset_id>/data/metadata.json`` exists (``root`` from the
    overrides, else ``$MINARI_DATASETS_PATH`` / ``~/.minari/datasets``); an existing dataset
    is reused only when its recorded provenance agrees with the other overrides
    (:func:`check_recipe_provenance`). Unless ``progress`` is overridden the recipe shows its
    tqdm bars.

    Returns:
        The Minari dataset id (for ``minari.load_dataset``).

    Raises:
        ConfigError: unknown recipe name; an existing dataset of that id made by another recipe
            or with other recipe arguments (the message names the way out).
    """
    recipe = _recipe(name)
    dataset_id = overrides.get("dataset_id") or recipe.dataset_id
    root: str | os.PathLike | None = overrides.get("root")
    if dataset_exists(dataset_id, root):
        check_recipe_provenance(dataset_id, name, overrides, root)
        return dataset_id
    # One generator per dataset at a time: processes started together (a multirun with a parallel
    # launcher, benchmark tasks side by side) wait here, then find the dataset the first one wrote.
    target = dataset_dir(dataset_id, root)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.generate.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not dataset_exists(dataset_id, root):
            try:
                recipe(**{**overrides, "dataset_id": dataset_id})
            except DatasetExistsError:
                if not dataset_exists(dataset_id, root):  # not a concurrent writer that finished first
                    raise
    return dataset_id


def check_recipe_provenance(dataset_id: str, name: str, args: dict, root: str | os.PathLike | None = None) -> None:
    """Refuse to reuse dataset ``dataset_id`` for recipe ``name`` with ``args`` when its recorded
    provenance says it was made otherwise.

    Compared: each argument in ``args`` that shapes the data (not
    ``dataset_id``, ``root``, ``overwrite``, ``progress``, ``data_format``) against the value the
    dataset recorded, in its ``recipe_args`` or, for datasets written before those were recorded,
    under the same top-level provenance key (``num_steps``, ``seed``, ...). Arguments the dataset
    does not record cannot be compared and pass, as does a dataset with no robotrl provenance.

    Raises:
        ConfigError: a mismatch; the message names the recorded and requested values and the ways
            out (another ``dataset.id`` for this variant, or deleting the dataset to regenerate it).
    """
    import json

    from robotrl.collect._common import NOT_DATA_ARGS, dataset_path

    path = dataset_path(dataset_id, root)
    try:
        meta = json.loads((path / "data" / "metadata.json").read_text())
        prov = json.loads(meta.get("robotrl_provenance") or "{}")
    except (OSError, ValueError):
        return
    if not prov:
        return
    recorded_recipe = str(prov.get("recipe", ""))
    recorded_args = prov.get("recipe_args")
    diffs = []
    for k, v in sorted(args.items()):
        if k in NOT_DATA_ARGS or v is None:
            continue
        if isinstance(recorded_args, dict) and k in recorded_args:
            had = recorded_args[k]
        elif k in prov:
            had = prov[k]
        elif isinstance(recorded_args, dict):  # recorded, and not given then: the recipe's default
            had = _recipe_default(name, k)
            if had is _UNKNOWN:
                continue
        else:
            continue
        if json.dumps(had, sort_keys=True, default=str) != json.dumps(v, sort_keys=True, default=str):
            diffs.append(f"{k}={json.dumps(had, default=str)} recorded, {k}={json.dumps(v, default=str)} asked")
    if diffs:
        stem, _, version = dataset_id.rpartition("-")
        variant = f"{stem}-<variant>-{version}" if version.startswith("v") and stem else f"{dataset_id}-<variant>"
        raise ConfigError(
            f"dataset {dataset_id} (recipe {recorded_recipe or name}) was generated with other recipe arguments "
            f"({'; '.join(diffs)}): give this variant its own id, dataset.id={variant} (generated on first use), "
            f"or delete {path} to regenerate it")


_UNKNOWN = object()


def _recipe_default(name: str, key: str):
    """The value recipe ``name`` uses for ``key`` when not given (its fixed arguments, then its
    function's default); ``_UNKNOWN`` when neither says."""
    import importlib
    import inspect

    recipe = _recipe(name)
    if key in recipe.kwargs:
        return recipe.kwargs[key]
    module = {"collect_pointmaze": "robotrl.collect.pointmaze", "collect_fetch": "robotrl.collect.fetch",
              "collect_locomotion": "robotrl.collect.locomotion"}.get(recipe.fn.__name__)
    if module is None:
        return _UNKNOWN
    param = inspect.signature(getattr(importlib.import_module(module), recipe.fn.__name__)).parameters.get(key)
    return _UNKNOWN if param is None or param.default is inspect.Parameter.empty else param.default
