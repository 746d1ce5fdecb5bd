"""The import layers of robotrl: no module imports from a layer above its own.

Every ``import`` and ``from ... import`` of every module under ``robotrl/`` is read with :mod:`ast`, at
module level and inside functions, classes and ``if TYPE_CHECKING:`` blocks alike, and so are
``importlib.import_module("...")`` / ``__import__("...")`` calls with a literal name. Each imported
robotrl module (or ``benchmarks``) is placed in :data:`LAYERS`; an import from a higher layer than the
importer's fails the test, naming the file, the line and the layers.

The layers, lowest first (a module may import its own layer and any lower one):

- the core: foundation, data, envs/vision, run pieces, warm start, runner, loops and bench, and the
  build parts (:mod:`robotrl.experiment_parts`, shared by ``robotrl train``, the robot learner and Ray
  workers). It never imports an agent, a collector, the robot bridge, Ray workers, the run assembly or
  ``benchmarks`` (README: the core never imports an agent module by name; agents reach the loops through
  :mod:`robotrl.agent`'s protocols and Hydra's ``_target_``);
- then agents and collectors, Ray workers, the run assembly (``experiment.py``), the robot bridge, the
  composition roots (the CLI, and :mod:`robotrl.configs`, which registers the agent classes' settings schemas,
  ``schema/model/<ClassName>``, from its table and imports the classes to rewrite the table), and ``benchmarks/``
  on top.

``python3 tests/test_layers.py`` prints the dependency listing (each package or core module, its layer,
and the robotrl packages and modules it imports).
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (layer name, module prefixes), lowest layer first. A module belongs to the layer of its longest prefix.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("foundation", ("robotrl", "robotrl.errors", "robotrl._alloc", "robotrl._resolvers", "robotrl.progress",
                    "robotrl.utils", "robotrl.files", "robotrl.checkpoint", "robotrl.stats", "robotrl.networks",
                    "robotrl.schema", "robotrl.provenance", "robotrl.logging_wandb")),
    ("data", ("robotrl.data",)),
    ("envs and vision", ("robotrl.envs", "robotrl.vision")),
    ("run pieces", ("robotrl.agent", "robotrl.policy", "robotrl.utd", "robotrl.evaluation", "robotrl.report",
                    "robotrl.task_mdp", "robotrl.spec", "robotrl.validation")),
    ("warm start", ("robotrl.warmstart",)),
    ("runner", ("robotrl.runner",)),
    ("loops and bench", ("robotrl.trainer", "robotrl.onpolicy", "robotrl.bench")),
    ("build parts", ("robotrl.experiment_parts",)),
    # ---- above the core
    ("agents and collectors", ("robotrl.agents", "robotrl.collect")),
    ("ray workers", ("robotrl.distributed",)),
    ("run assembly", ("robotrl.experiment", "robotrl.reset_free")),
    ("robot bridge", ("robotrl.real_robot",)),
    ("cli and configs", ("robotrl.cli", "robotrl.configs")),  # the composition roots: configs imports the agent classes
    ("bench tasks", ("robotrl.bench.tasks",)),  # the suite's benchmark modules: run by name, never imported by the core
    ("benchmarks", ("benchmarks",)),
]
#: The highest layer of the core (see module doc).
CORE_TOP = "build parts"
#: Modules the core never imports, whatever the layer table says (the rule the layers exist for).
NEVER_IN_CORE = ("robotrl.agents", "robotrl.collect", "robotrl.real_robot", "robotrl.distributed",
                 "robotrl.experiment", "robotrl.cli", "robotrl.configs", "benchmarks")


def _within(module: str, prefix: str) -> bool:
    """``module`` is ``prefix`` or inside it; the bare package ``robotrl`` (its ``__init__``) only matches itself,
    so that a new top-level module must be placed in the table (not fall into the foundation)."""
    return module == prefix or (prefix != "robotrl" and module.startswith(prefix + "."))


def layer_of(module: str) -> int | None:
    """Index in :data:`LAYERS` of ``module`` (its longest matching prefix), ``None`` when none matches."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if _within(module, p) and len(p) > best_len:
                best, best_len = i, len(p)
    return best


def source_modules() -> dict[str, Path]:
    """Every module under ``robotrl/``: dotted name -> file."""
    out = {}
    for path in sorted((ROOT / "robotrl").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports_of(module: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """``(imported robotrl/benchmarks module, line)`` of every import in ``path`` (all nesting levels).

    ``from pkg import name`` counts as an import of ``pkg.name`` where that is a module of the tree.
    """
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                src = ".".join(base + ([node.module] if node.module else []))
            else:
                src = node.module or ""
            subs = [f"{src}.{a.name}" for a in node.names if f"{src}.{a.name}" in known]
            names = subs if subs and len(subs) == len(node.names) else [src, *subs]
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            fn = node.func
            called = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
            if called in ("import_module", "__import__"):
                names = [node.args[0].value]
        found += [(n, node.lineno) for n in names if layer_of(n) is not None]
    return found


def violations() -> list[str]:
    """One line per import from a higher layer (or from a module the core never imports)."""
    mods = source_modules()
    known = set(mods)
    top = [name for name, _ in LAYERS].index(CORE_TOP)
    bad = []
    for module, path in mods.items():
        own = layer_of(module)
        for target, line in imports_of(module, path, known):
            theirs = layer_of(target)
            assert own is not None and theirs is not None
            in_core_forbidden = own <= top and any(_within(target, p) for p in NEVER_IN_CORE)
            if theirs > own or in_core_forbidden:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {module} (layer {own}, {LAYERS[own][0]}) imports "
                           f"{target} (layer {theirs}, {LAYERS[theirs][0]})")
    return bad


def _group(module: str) -> str:
    """The listing's unit: a subpackage of robotrl (``robotrl.data``), else the module itself."""
    parts = module.split(".")
    mods = source_modules()
    if len(parts) > 2 and ".".join(parts[:2]) in mods and (ROOT / "robotrl" / parts[1]).is_dir():
        return ".".join(parts[:2])
    if len(parts) == 2 and (ROOT / "robotrl" / parts[1]).is_dir():
        return module
    return module if parts[0] == "robotrl" else parts[0]


def listing() -> str:
    """The dependency listing: per layer, each package or module and what it imports of robotrl."""
    mods = source_modules()
    known = set(mods)
    deps: dict[str, set[str]] = collections.defaultdict(set)
    for module, path in mods.items():
        g = _group(module)
        deps[g]  # noqa: B018  (listed even without imports)
        for target, _ in imports_of(module, path, known):
            if _group(target) != g:
                deps[g].add(_group(target))
    lines = []
    for i, (name, _) in enumerate(LAYERS):
        members = sorted(g for g in deps if layer_of(g) == i)
        if not members:
            continue
        lines.append(f"layer {i}: {name}{'  (core)' if i <= [n for n, _ in LAYERS].index(CORE_TOP) else ''}")
        for g in members:
            used = sorted(deps[g], key=lambda t: (layer_of(t) or 0, t))
            lines.append(f"  {g} -> {', '.join(f'{t} [{layer_of(t)}]' for t in used) or '-'}")
    return "\n".join(lines)


def test_every_module_has_a_layer():
    missing = [m for m in source_modules() if layer_of(m) is None]
    assert not missing, f"modules outside LAYERS (add them to the table in tests/test_layers.py): {missing}"


def test_no_import_runs_from_a_lower_layer_to_a_higher_one():
    bad = violations()
    assert not bad, "imports running up the layers:\n" + "\n".join(bad) + "\n\nDependency listing:\n" + listing()


def test_the_walk_sees_function_level_and_from_imports(tmp_path):
    """The checker itself: a function-level import, a relative one, a from-import of a submodule and an
    ``import_module`` literal are all seen (a checker that sees nothing would pass every tree)."""
    src = tmp_path / "m.py"
    src.write_text("import os\n"
                   "def f():\n    from robotrl.agents.bc import BCPolicy\n"
                   "def g():\n    import importlib\n    importlib.import_module('robotrl.collect.registry')\n"
                   "from robotrl import envs\n"
                   "from . import runner\n")
    got = imports_of("robotrl.fake", src, {"robotrl.envs", "robotrl.runner"})
    assert sorted(got) == [("robotrl.agents.bc", 3), ("robotrl.collect.registry", 6), ("robotrl.envs", 7),
                           ("robotrl.runner", 8)]
    assert layer_of("robotrl.bench.tables") < layer_of("robotrl.agents.bc")  # type: ignore[operator]


def _declared_hooks() -> set[str]:
    """Members :mod:`robotrl.agent` declares on its agent bases and capability protocols."""
    import robotrl.agent as A

    classes = (A.AgentBase, A.OffPolicyAgentBase, A.OnPolicyAgentBase, A.PartLoader, A.BCPretrainer, A.ResidualAgent)
    return {n for c in classes for n in vars(c) if not n.startswith("_")} | set(A.OffPolicyAgentBase.__annotations__)


def test_the_core_calls_declared_agent_hooks_without_probing():
    """No ``getattr``/``hasattr`` with a declared hook's name in the core: the loops call the hooks directly
    (defaults from the agent bases) or check a capability protocol with ``isinstance``."""
    hooks = _declared_hooks()
    assert {"sample_batch", "reset_explore", "critic_utd", "frame_stack", "needs_mc_returns", "load_parts",
            "bc_update", "set_base", "reset_rollout", "start_online", "init_from_data"} <= hooks
    top = [name for name, _ in LAYERS].index(CORE_TOP)
    probes = []
    for module, path in source_modules().items():
        if (layer_of(module) or 0) > top:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                    and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in hooks:
                probes.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert not probes, "agent hooks probed in the core:\n" + "\n".join(probes)


def test_every_configured_agent_inherits_its_hook_defaults():
    """Each agent class the agent configs instantiate (:data:`robotrl.configs.AGENTS`, whose schemas
    ``configs/agent/*.yaml`` extend) is built on its kind's base (so every hook the loops call exists), and
    satisfies its protocol."""
    from robotrl.agent import OffPolicyAgent, OffPolicyAgentBase, OnPolicyAgent, OnPolicyAgentBase
    from robotrl.configs import agent_classes
    from robotrl.schema import agent_target

    classes = [c for c in agent_classes() if c.__module__.startswith("robotrl.agents.")]
    assert len(classes) >= 10, classes
    for cls in classes:
        target = agent_target(cls)
        if issubclass(cls, OnPolicyAgentBase):
            members = [n for n in dir(OnPolicyAgent) if not n.startswith("_")]
        else:
            assert issubclass(cls, OffPolicyAgentBase), f"{target} inherits neither agent base of robotrl.agent"
            members = [n for n in dir(OffPolicyAgent) if not n.startswith("_")]
        # instance attributes (set in __init__) are not on the class; offline-only agents (pixel BC) have no explore
        missing = [m for m in members if m not in ("policy", "gamma", "reward_scaling", "explore") and not hasattr(cls, m)]
        assert not missing, f"{target} lacks protocol members {missing}"


if __name__ == "__main__":
    print(listing())
    bad = violations()
    print("\n".join(["", "imports running up the layers:", *bad]) if bad else "\nno import runs up the layers")
