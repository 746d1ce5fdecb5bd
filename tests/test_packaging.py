"""The install layout: every Python package in the source tree is listed in pyproject.toml.

`pip install .` (non-editable) ships only the packages listed under
`[tool.setuptools] packages`; one missing from the list would import in the editable
checkout and fail for users.
"""

from __future__ import annotations

from pathlib import Path

try:  # Python 3.11+; 3.10 (requires-python >=3.10) gets tomli from the [test] extra
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MAPPING = {"robotrl": "robotrl", "robotrl.envs": "envs", "robotrl.agents": "agents",
           "robotrl.real_robot": "real_robot", "robotrl.configs": "configs"}


def _source_packages() -> set[str]:
    found = set()
    for name, folder in MAPPING.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base)
            sub = ".".join(rel.parts)
            if name == "robotrl" and rel.parts and rel.parts[0] in {"envs", "agents", "real_robot", "configs"}:
                continue
            found.add(f"{name}.{sub}" if sub else name)
    return found


def test_every_source_package_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    assert _source_packages() <= listed, sorted(_source_packages() - listed)
    assert {k: v for k, v in cfg["package-dir"].items()} == MAPPING


def test_console_script_points_at_the_cli():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["robotrl"] == "robotrl.cli:main"
