"""The benchmark suite's tasks are shipped modules (``robotrl.bench.tasks``): every scripted task of both tiers names
one with a ``main(argv=None)``, the runner starts it with ``python -m``, the checkout's ``benchmarks/bench_x.py``
shims run the same ``main``, and a task run through the runner writes under the runner's root while recording the
command as a user types it (so stored results keep their resume key)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import json
import sys
from pathlib import Path

import pytest

from robotrl.bench.machine import command_argv
from robotrl.bench.runner import _command, is_done, norm_argv, read_json, run_tasks
from robotrl.bench.suite import TASKS_PACKAGE, Task, task_module, task_script, tier_tasks

ROOT = Path(__file__).resolve().parents[1]

def _scripted() -> list[Task]:
    return [t for tier in ("quick", "full") for t in tier_tasks(tier) if t.kind != "train-sweep"]


def test_every_scripted_suite_task_is_a_shipped_module_with_main_and_its_script_a_shim_for_it():
    modules = set()
    for task in _scripted():
        script = Path(task.argv[0])
        assert task.argv[0] == f"benchmarks/{script.name}" and script.name.startswith("bench_"), task
        assert task.module == f"{TASKS_PACKAGE}.{script.stem[len('bench_'):]}", task
        modules.add(task.module)
    assert len(modules) >= 13 and f"{TASKS_PACKAGE}.online_robot" in modules, modules
    for name in sorted(modules):
        mod = importlib.import_module(name)
        assert callable(mod.main) and "argv" in inspect.signature(mod.main).parameters, name
        shim_path = ROOT / "benchmarks" / f"bench_{name.rsplit('.', 1)[1]}.py"
        spec = importlib.util.spec_from_file_location(f"_shim_{shim_path.stem}", shim_path)
        shim = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(shim)  # type: ignore[union-attr]
        assert shim._task is mod, shim_path                       # the documented command runs the same main


def test_a_study_importing_a_suite_script_by_its_old_name_gets_the_module(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    for name in ("bench_dppo_learning", "bench_bridge"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import bench_bridge
    import bench_dppo_learning

    from robotrl.bench.tasks import bridge, dppo_learning

    assert bench_dppo_learning is dppo_learning and bench_bridge.SLOWLORIS is bridge.SLOWLORIS


def test_the_core_names_task_modules_without_importing_them():
    """``robotrl bench`` finds a task's module as a file and starts it by name; importing the suite imports none."""
    assert task_module("benchmarks/bench_replay.py") == "robotrl.bench.tasks.replay"
    assert task_module("/abs/benchmarks/bench_online_robot.py") == "robotrl.bench.tasks.online_robot"
    assert task_module("benchmarks/bench_sung.py") is None                     # a study: a checkout script
    assert task_module("benchmarks/bench_no_such_thing.py") is None and task_module("-c") is None
    for f in ("suite", "runner", "cli", "machine"):
        src = (ROOT / "robotrl" / "bench" / f"{f}.py").read_text()
        assert "import robotrl.bench.tasks" not in src and "from robotrl.bench.tasks" not in src, f


def test_the_runner_starts_each_task_as_its_module_and_shows_the_users_command(tmp_path):
    for task in _scripted():
        cmd = _command(task, sys.executable, task.argv, tmp_path)
        assert cmd == [sys.executable, "-m", task.module, *task.argv[1:]], task.name
        assert task.display().startswith(f"python {task.argv[0]} ") or task.display() == f"python {task.argv[0]}" \
            or task.peer, task.name
    (sweep,) = [t for t in tier_tasks("quick", ["bc_sweep"])]
    assert _command(sweep, "py", sweep.argv, tmp_path)[:3] == ["py", "-m", "robotrl.cli"]


def test_a_module_run_records_its_script_so_stored_results_keep_their_resume_key(monkeypatch):
    path = str(ROOT / "robotrl" / "bench" / "tasks" / "replay.py")
    assert task_script(path) == "benchmarks/bench_replay.py"
    assert task_script("benchmarks/bench_replay.py") == "benchmarks/bench_replay.py"
    assert task_script(str(ROOT / "robotrl" / "bench" / "tasks" / "_formats.py")).endswith("_formats.py")
    monkeypatch.setattr(sys, "argv", [path, "--quick", "--out", "quick/replay.json"])
    assert command_argv() == ["benchmarks/bench_replay.py", "--quick", "--out", "quick/replay.json"]
    stored = json.loads((ROOT / "benchmarks" / "results" / "quick" / "replay.json").read_text())
    (task,) = tier_tasks("quick", ["replay"])
    assert norm_argv(stored["environment"]["argv"]) == norm_argv(command_argv()) == norm_argv(task.argv)
    assert norm_argv([path, "--n", "3"]) == ("bench_replay.py", "--n", "3")


def test_a_task_outside_a_checkout_without_its_script_fails_with_the_way_out(tmp_path):
    task = Task("sung", "learning", ("benchmarks/bench_sung.py", "--seeds", "0"), "benchmarks/results/studies/sung/x.json")
    assert task.module is None  # a study's script, not shipped
    (rec,) = run_tasks([task], tmp_path, "full", log=lambda *a: None)
    assert rec["status"] == "failed" and "source clone" in rec["reason"], rec


@pytest.mark.slow
def test_a_suite_task_runs_end_to_end_as_a_module_and_writes_under_the_runners_root(tmp_path):
    """A real, tiny online_link run (~30 s on 2 loaded cores: three processes start) through the runner in a folder
    with no checkout: written under that folder's benchmarks/results, started with -m, recorded as the user's
    command, and skipped when asked again."""
    out = "benchmarks/results/tiny/online_link.json"
    task = Task("online_link", "throughput", ("benchmarks/bench_online_link.py", "--n", "640", "--pushes", "3",
                                              "--out", "tiny/online_link.json"), out)
    (rec,) = run_tasks([task], tmp_path, "quick", log=lambda *a: None)
    log = (tmp_path / "benchmarks" / "results" / "quick" / "logs" / "online_link.log").read_text()
    assert rec["status"] == "ok", log[-3000:]
    assert log.splitlines()[0].endswith("-m robotrl.bench.tasks.online_link --n 640 --pushes 3 --out tiny/online_link.json")
    doc = read_json(tmp_path / out)
    assert doc is not None and doc["rows"] and doc["environment"]["argv"][0] == "benchmarks/bench_online_link.py"
    assert doc["command"] == "python benchmarks/bench_online_link.py --n 640 --pushes 3 --out tiny/online_link.json"
    manifest = read_json(tmp_path / "benchmarks" / "results" / "quick" / "manifest.json")
    assert manifest["tasks"]["online_link"]["command"] == "python " + " ".join(task.argv)
    assert is_done(task, tmp_path, manifest) == (True, "the result records the same command")
    assert not (ROOT / "benchmarks" / "results" / "tiny").exists()    # nothing beside the package or in the clone


def test_online_robot_writes_the_suites_form_and_reads_its_own_figures_back(tmp_path):
    """``bench_online_robot.py --combine`` (no twin run: the per-seed files of the Z-corridor study) writes the
    suite's one result form, its own figures under ``details``; ``--merge``/``--combine`` read that form and an
    older raw file alike, run for run, and refuse another script's file with one line."""
    from robotrl.bench.schema import load_results
    from robotrl.bench.tasks import online_robot

    study = ROOT / "benchmarks" / "results" / "studies" / "online-robot"
    parts = [str(study / f"online_robot_zcorridor_s{s}.json") for s in (0, 1, 2)]  # the raw form (older files)
    out = tmp_path / "z.json"
    online_robot.main(["--combine", *parts, "--out", str(out)])
    (doc,) = load_results(out)
    raw = [json.loads(Path(p).read_text()) for p in parts]
    assert doc["metric"] == "success" and len(doc["runs"]) == sum(len(r["runs"]) for r in raw)
    assert doc["runs"][0]["curve"] == [[0, raw[0]["runs"][0]["success_before"]],
                                       [raw[0]["runs"][0]["steps"], raw[0]["runs"][0]["success_after"]]]
    back = online_robot.read_raw(out)
    assert back["runs"] == [r for d in raw for r in d["runs"]] and back["eval_seeds"] == raw[0]["eval_seeds"]
    again = tmp_path / "again.json"
    online_robot.main(["--combine", str(out), "--out", str(again)])  # the suite's form read back as input
    assert online_robot.read_raw(again)["runs"] == back["runs"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"benchmark": "replay", "rows": []}))
    with pytest.raises(ValueError, match="not a result of this script"):
        online_robot.read_raw(other)
