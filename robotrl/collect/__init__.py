"""Dataset-generation recipes: PointMaze (D4RL maze2d style), Fetch scripted experts and
D4RL-style Gym-MuJoCo locomotion datasets, written as Minari datasets.

``ensure_dataset(name)`` generates a named recipe's dataset on first use and reuses it
afterwards; ``collect(name)`` always generates; ``RECIPES`` lists the names.
"""

from robotrl.collect.registry import RECIPES, Recipe, collect, ensure_dataset, recipe_dataset_id


def __getattr__(name):
    # The recipe modules import gymnasium-robotics / stable-baselines3 only when used.
    lazy = {
        "collect_pointmaze": "robotrl.collect.pointmaze",
        "collect_fetch": "robotrl.collect.fetch",
        "collect_locomotion": "robotrl.collect.locomotion",
        "FetchExpert": "robotrl.collect.fetch",
        "MazePlanner": "robotrl.collect.pointmaze",
    }
    if name in lazy:
        import importlib

        return getattr(importlib.import_module(lazy[name]), name)
    raise AttributeError(f"module 'robotrl.collect' has no attribute {name!r}")


__all__ = [
    "RECIPES",
    "Recipe",
    "collect",
    "ensure_dataset",
    "recipe_dataset_id",
    "collect_pointmaze",
    "collect_fetch",
    "collect_locomotion",
    "FetchExpert",
    "MazePlanner",
]
