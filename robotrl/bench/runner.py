"""Run benchmark tasks as subprocesses, with resume.

Each task runs from the suite's root (:func:`robotrl.bench.suite.repo_root`) as its own process
(``sys.executable``, or the d3rlpy interpreter for peer tasks): a benchmark as its shipped module
(``python -m robotrl.bench.tasks.x ...`` for a task that names ``benchmarks/bench_x.py``), a sweep as
``python -m robotrl.cli train -m ...``; its output goes to ``<tier dir>/logs/<task>.log``. The command
shown and stored (manifest, results) stays the one a user types (``python benchmarks/bench_x.py ...``).
A task is **skipped** when its result JSON exists, is not marked partial and records the
same command (argv, ignoring ``--out``): the command the file itself records
(``environment.argv`` / ``argv``), else the one this runner recorded in
``<tier dir>/manifest.json`` when it finished the task. So a ``full`` run that was killed
resumes with the first task not finished; ``force`` reruns all.
Timing tasks (``Task.exclusive``) always run alone; up to ``jobs`` learning tasks run side
by side.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from robotrl.bench.machine import environment
from robotrl.bench.peers import PeerUnavailable, d3rlpy_python
from robotrl.bench.suite import Task, task_script, tier_dir
from robotrl.files import atomic_write

MANIFEST = "manifest.json"


def norm_argv(argv) -> tuple[str, ...]:
    """argv in comparable form: ``--out X`` and ``--root X`` dropped (where the result and the runs are written, not
    what is measured), a script path reduced to its file name (a task module's file to its script's:
    :func:`robotrl.bench.suite.task_script`)."""
    out, skip = [], False
    for i, a in enumerate(str(x) for x in argv):
        if skip:
            skip = False
            continue
        if a in ("--out", "--root"):
            skip = True
            continue
        if a.startswith(("--out=", "--root=")):
            continue
        out.append(Path(task_script(a)).name if i == 0 and a.endswith(".py") else a)
    return tuple(out)


def read_json(path: Path) -> dict | None:
    """The JSON object in ``path``, or None if it is missing or unreadable."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def write_json(path: Path, obj: dict) -> Path:
    """Write JSON atomically (:func:`robotrl.files.atomic_write`)."""
    return atomic_write(path, json.dumps(obj, indent=2, default=str) + "\n", mode=0o666)


def own_argv(doc: dict) -> list | None:
    """The argv a result file records itself (``argv`` or ``environment.argv``)."""
    return doc.get("argv") or (doc.get("environment") or {}).get("argv")


def is_done(task: Task, root: Path, manifest: dict, argv: tuple[str, ...] | None = None) -> tuple[bool, str]:
    """Whether ``task`` (run as ``argv``, default its own) already has its result; and why (not)."""
    argv = task.argv if argv is None else argv
    doc = read_json(Path(root) / task.output)
    if doc is None:
        return False, "no result yet"
    if doc.get("partial"):
        return False, "the result is partial (the run was interrupted)"
    accepted = norm_argv(argv)
    recorded = own_argv(doc)
    if recorded:
        same = norm_argv(recorded) == accepted
        return same, "the result records the same command" if same else "the result records another command"
    entry = manifest.get("tasks", {}).get(task.name)
    if entry and entry.get("output") == task.output:
        same = entry.get("status") == "ok" and norm_argv(entry.get("argv", [])) == accepted
        return same, "the manifest records the same command" if same else "the manifest records another command or run"
    return False, "the result records no command"


def load_manifest(root: Path, tier: str) -> dict:
    """The tier's manifest (``{"tasks": {name: entry}, "suite": {...}}``), empty if none."""
    return read_json(tier_dir(root, tier) / MANIFEST) or {"tasks": {}}


def _python(task: Task, root: Path, log) -> tuple[str, tuple[str, ...], str | None]:
    """(interpreter, effective argv, reason the peer is missing or None)."""
    if task.peer != "d3rlpy":
        return sys.executable, task.argv, None
    try:
        return str(d3rlpy_python(root, log=log)), task.argv, None
    except PeerUnavailable as exc:
        if task.without_peer:
            return sys.executable, (*task.argv, *task.without_peer), str(exc)
        return "", task.argv, str(exc)


def _command(task: Task, python: str, argv: tuple[str, ...], sweep_dir: Path) -> list[str]:
    """The process to start: a sweep through ``robotrl.cli``, a benchmark as its module (:attr:`Task.module`),
    anything else (a checkout-only script, ``-c ...``) as its argv."""
    if task.kind == "train-sweep":
        return [python, "-m", "robotrl.cli", *argv[1:], "trainer.progress=false", f"hydra.sweep.dir={sweep_dir}"]
    if task.module:
        return [python, "-m", task.module, *argv[1:]]
    return [python, *argv]


def _missing_script(task: Task, root: Path) -> str | None:
    """Why a task cannot start here (a checkout-only script with no file under ``root``), or None."""
    script = task.argv[0] if task.argv and task.kind != "train-sweep" else ""
    if task.module or not script.endswith(".py") or (Path(root) / script).is_file():
        return None
    return (f"{script} is not shipped with robotrl and {root} has no such file: run this task from a source clone "
            "(git clone the repository, `pip install -e .` in it)")


def _display_python(python: str, root: Path) -> str:
    if python == sys.executable:
        return "python"
    try:
        return str(Path(python).relative_to(root))
    except ValueError:
        return python


def run_tasks(tasks: list[Task], root: Path, tier: str, *, force: bool = False, jobs: int = 1, log=print) -> list[dict]:
    """Run (or skip, when done) each task; returns one record per task.

    A record holds ``task``, ``status`` (``ok``, ``skipped``, ``failed``, ``peer-missing``),
    ``reason`` and, for runs, ``wall_s`` and ``log``. Failures do not stop the other tasks.
    Raises ``KeyboardInterrupt`` after stopping the running tasks (their manifest entries
    say ``interrupted``; the next run starts them again).
    """
    from robotrl.bench.sweep import sweep_to_learning

    root = Path(root)
    tdir = tier_dir(root, tier)
    mpath = tdir / MANIFEST
    manifest = load_manifest(root, tier)
    manifest.setdefault("tasks", {})
    records: dict[str, dict] = {}
    pending: list[tuple[Task, list[str], tuple[str, ...], str, Path]] = []

    for task in tasks:
        done, why = is_done(task, root, manifest)
        if done and not force:
            records[task.name] = {"task": task.name, "status": "skipped", "reason": why}
            log(f"[bench] {task.name}: skipped ({why})")
            continue
        absent = _missing_script(task, root)
        if absent:
            records[task.name] = {"task": task.name, "status": "failed", "reason": absent}
            manifest["tasks"][task.name] = {"argv": list(task.argv), "output": task.output, "status": "failed",
                                            "reason": absent, "command": task.display()}
            log(f"[bench] {task.name}: failed ({absent})")
            continue
        python, argv, missing = _python(task, root, log)
        if missing and not python:
            records[task.name] = {"task": task.name, "status": "peer-missing", "reason": missing}
            manifest["tasks"][task.name] = {"argv": list(task.argv), "output": task.output, "status": "peer-missing",
                                            "reason": missing, "command": task.display()}
            log(f"[bench] {task.name}: peer not installed, skipped ({missing})")
            continue
        if argv != task.argv and not force:
            done, why = is_done(task, root, manifest, argv)
            if done:
                records[task.name] = {"task": task.name, "status": "skipped", "reason": why + " (peer missing)",
                                      "peer_missing": missing}
                continue
        sweep_dir = root / ".bench" / "runs" / tier / task.name
        if task.kind == "train-sweep" and sweep_dir.exists():
            prev = manifest["tasks"].get(task.name, {})
            if force or norm_argv(prev.get("argv", [])) != norm_argv(argv):
                shutil.rmtree(sweep_dir)  # a different sweep: start clean (the same one resumes its runs)
        cmd = _command(task, python, argv, sweep_dir)
        display = f"{_display_python(python, root)} {' '.join(argv)}" if task.kind != "train-sweep" else " ".join(argv)
        pending.append((task, cmd, argv, display, sweep_dir))
        if missing:
            records[task.name] = {"peer_missing": missing}

    running: dict[str, tuple[subprocess.Popen, float, Task, tuple, str, Path, object]] = {}

    def save():
        write_json(mpath, manifest)

    def start(item):
        task, cmd, argv, display, sweep_dir = item
        logp = tdir / "logs" / f"{task.name}.log"
        logp.parent.mkdir(parents=True, exist_ok=True)
        (root / task.output).parent.mkdir(parents=True, exist_ok=True)
        fh = open(logp, "w")
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "MPLBACKEND": "Agg"}
        proc = subprocess.Popen(cmd, cwd=root, stdout=fh, stderr=subprocess.STDOUT, env=env)
        running[task.name] = (proc, time.time(), task, argv, display, sweep_dir, fh)
        manifest["tasks"][task.name] = {"argv": list(argv), "output": task.output, "status": "running",
                                        "command": display, "log": str(logp.relative_to(root)),
                                        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        save()
        log(f"[bench] {task.name}: running `{display}` (log {logp.relative_to(root)})")

    def finish(name: str, rc: int):
        proc, t0, task, argv, display, sweep_dir, fh = running.pop(name)
        fh.close()
        wall = time.time() - t0
        status, reason = ("ok", "") if rc == 0 else ("failed", f"exit status {rc}")
        if rc == 0 and task.kind == "train-sweep":
            try:
                doc = sweep_to_learning(sweep_dir, benchmark=Path(task.output).stem, argv=list(argv), command=display)
                write_json(root / task.output, doc)
            except Exception as exc:  # noqa: BLE001 - reported as the task's failure
                status, reason = "failed", f"converting the sweep failed: {exc}"
        if status == "ok" and read_json(root / task.output) is None:
            status, reason = "failed", f"exited 0 but wrote no readable {task.output}"
        entry = manifest["tasks"][name]
        entry.update(status=status, returncode=rc, wall_s=round(wall, 1), environment=environment(),
                     finished=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if reason:
            entry["reason"] = reason
        missing = records.get(name, {}).get("peer_missing")
        if missing:
            entry["peer_missing"] = missing
        save()
        records[name] = {"task": name, "status": status, "reason": reason, "wall_s": round(wall, 1),
                         "log": entry["log"], **({"peer_missing": missing} if missing else {})}
        log(f"[bench] {name}: {status} in {wall:.0f} s" + (f" ({reason}; see {entry['log']})" if reason else ""))

    try:
        while pending or running:
            for name, (proc, *_rest) in list(running.items()):
                rc = proc.poll()
                if rc is not None:
                    finish(name, rc)
            exclusive_running = any(r[2].exclusive for r in running.values())
            while pending and not exclusive_running:
                nxt = pending[0][0]
                if nxt.exclusive and running or len(running) >= max(1, jobs):
                    break
                start(pending.pop(0))
                exclusive_running = nxt.exclusive
            time.sleep(0.2)
    except KeyboardInterrupt:
        for name, (proc, *_rest) in running.items():
            proc.terminate()
        for name, (proc, _t0, _task, _argv, _d, _s, fh) in running.items():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            fh.close()
            manifest["tasks"][name]["status"] = "interrupted"
        save()
        raise
    save()
    return [records[t.name] for t in tasks if t.name in records]
