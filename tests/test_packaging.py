"""The install layout: the file tree is the import tree (``robotrl/agents`` is ``robotrl.agents``),
and `pip install .` ships every package setuptools discovers under ``robotrl/``."""

from __future__ import annotations

from pathlib import Path

try:  # Python 3.11+; 3.10 (requires-python >=3.10) gets tomli from the [test] extra
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def test_the_file_tree_is_the_import_tree():
    """Every package is a folder under ``robotrl/`` found by setuptools' package discovery: no
    hand-kept package list, no folder mapped onto another import path."""
    from setuptools import find_packages

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert set(cfg["packages"]) == {"find"} and "package-dir" not in cfg, "packages are discovered, not listed or mapped"
    found = set(find_packages(str(ROOT), **cfg["packages"]["find"]))
    on_disk = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "robotrl").rglob("__init__.py")}
    assert on_disk == found, sorted(on_disk ^ found)
    assert {"robotrl.agents.qlearning", "robotrl.envs", "robotrl.real_robot", "robotrl.configs"} <= found
    for top in ("agents", "envs", "real_robot", "configs"):
        assert not (ROOT / top).exists(), f"{top}/ belongs under robotrl/"


def test_console_script_points_at_the_cli():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["robotrl"] == "robotrl.cli:main"
