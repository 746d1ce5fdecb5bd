"""Gather a tier's results and render them: tables, plots and the README block.

:func:`render_tier` reads every task's result (any format, through
:func:`robotrl.bench.schema.load_results`), writes the learning-curve PNGs to
``benchmarks/results/<tier>/plots/`` and the markdown to ``benchmarks/results/<tier>/tables.md``,
and returns the markdown of the README block: tier, commands, machine, versions, date,
tables and plot links.
"""

from __future__ import annotations

from pathlib import Path

from robotrl.bench.machine import environment
from robotrl.bench.plots import learning_plot
from robotrl.bench.runner import load_manifest, norm_argv, own_argv, read_json
from robotrl.bench.schema import BenchFormatError, load_results
from robotrl.bench.suite import Task, tier_dir, tier_tasks
from robotrl.bench.tables import learning_table, throughput_table

VERSION_ORDER = ("python", "torch", "numpy", "gymnasium", "mujoco", "minari", "stable-baselines3", "d3rlpy")


def _command(task: Task, doc: dict | None, entry: dict | None) -> str:
    own = own_argv(doc) if doc else None
    if own and norm_argv(own) == norm_argv(task.argv):  # the task's command (only where the result is written may differ)
        return task.display()
    if own and entry and entry.get("status") == "ok" and norm_argv(entry.get("argv", [])) == norm_argv(own):
        return entry["command"]
    if own:
        prefix = "" if own[0] == "robotrl" else ("<d3rlpy python> " if task.peer else "python ")
        return prefix + " ".join(str(a) for a in own)
    if entry and entry.get("status") == "ok":
        return entry["command"]
    return task.display()  # tasks not run yet


def gather(root: Path, tier: str) -> list[dict]:
    """One section per task of the tier: task, command, status, when, normalised documents."""
    manifest = load_manifest(root, tier)
    sections = []
    for task in tier_tasks(tier):
        entry = manifest.get("tasks", {}).get(task.name)
        path = Path(root) / task.output
        raw = read_json(path)
        docs, problem = [], None
        if raw is not None:
            try:
                docs = load_results(path)
            except BenchFormatError as exc:
                problem = str(exc)
        status = "ok" if docs else (entry or {}).get("status", "not run")
        reason = problem or (entry or {}).get("reason", "")
        when = ((entry or {}).get("finished") if entry and entry.get("status") == "ok" else None) or \
            ((raw or {}).get("environment") or {}).get("when", "")
        sections.append({"task": task, "command": _command(task, raw, entry), "status": status, "reason": reason,
                         "peer_missing": (entry or {}).get("peer_missing"), "when": when, "docs": docs, "raw": raw or {}})
    return sections


def _recorded_env(sections: list[dict]) -> dict:
    """Machine and versions as the results themselves record them (for a tier never run through the suite)."""
    env: dict = {"versions": {}}
    for s in sections:
        e = s["raw"].get("environment") or {}
        env.setdefault("cpu_count", e.get("cpu_count"))
        env.setdefault("cpu_model", e.get("cpu_model") or e.get("processor"))
        for k, v in (e.get("versions") or {}).items():  # robotrl.bench.machine.environment()
            env["versions"].setdefault(k, v)
        for k in ("python", "torch", "numpy", "gymnasium", "mujoco", "minari", "stable_baselines3"):
            if k in e:  # results written before benchmarks used the one collector: flat version keys
                env["versions"].setdefault(k.replace("_", "-"), e[k])
    return env


def _versions(sections: list[dict], env: dict) -> str:
    v = dict(env.get("versions", {}))
    for s in sections:
        d3 = s["raw"].get("environment", {}).get("d3rlpy")
        if d3:
            v["d3rlpy"] = d3
    return ", ".join(f"{k} {v[k]}" for k in VERSION_ORDER if k in v)


def render_tier(root: Path, tier: str, *, link_prefix: str = "") -> str:
    """Write plots and ``tables.md`` of the tier; return the README block's markdown.

    ``link_prefix`` is put before the plots' root-relative paths in the returned text
    (``""`` for the README at the repository root).
    """
    root = Path(root)
    tdir = tier_dir(root, tier)
    manifest = load_manifest(root, tier)
    suite = manifest.get("suite") or {}
    sections = gather(root, tier)
    if suite.get("environment"):
        env = suite["environment"]
        load = env.get("load_average")
        origin = (f"Last run of this tier: `{suite.get('command', f'robotrl bench {tier}')}` on "
                  f"{env.get('when', '?')[:16].replace('T', ' ')} UTC (each task's own command and date are in the "
                  f"table below)")
        machine = (f"{env.get('cpu_count')} CPUs ({env.get('cpu_model')}), load average "
                   f"{' / '.join(str(x) for x in load) if load else 'n/a'} at the end of the run")
    else:  # results recorded before the suite ran this tier: state what they record
        env = _recorded_env(sections)
        now = environment()["when"][:16].replace("T", " ")
        origin = (f"Rendered by `robotrl bench tables --tier {tier}` on {now} UTC from results recorded by the "
                  f"commands below (dates in the table; `robotrl bench {tier}` reruns what is missing)")
        machine = f"{env.get('cpu_count')} CPUs ({env.get('cpu_model')}) as the results record it"
    lines = [f"### Benchmark suite: `{tier}` tier (generated)", "",
             f"{origin}; do not edit by hand (`robotrl bench tables --tier {tier}` rewrites it from the results). "
             f"Machine: {machine}, shared with other jobs, so absolute timings move 2–3× between runs and the ratios "
             f"(measured side by side in one run) are the figures to compare. Versions: {_versions(sections, env)}.", "",
             "Each task runs from the repository root as one process (log in "
             f"`{tdir.relative_to(root)}/logs/`); a task whose result records the same command is not rerun.", "",
             "| task | command | result | status | recorded |", "|---|---|---|---|---|"]
    for s in sections:
        t = s["task"]
        status = s["status"] + (" (peer not installed: its rows are missing)" if s["peer_missing"] else "")
        lines.append(f"| {t.name} | `{s['command']}` | `{t.output}` | {status} | {s['when'][:10] or '—'} |")
    body = []
    not_run = [s["task"].name for s in sections if not s["docs"] and s["status"] == "not run"]
    if not_run:
        body += [f"Not run yet: {', '.join(not_run)}.", ""]
    for s in sections:
        t = s["task"]
        if not s["docs"]:
            if s["status"] != "not run":
                why = "peer not installed" if s["status"] == "peer-missing" else s["status"]
                body += [f"#### {t.name}", "", f"No result: {why}{(' — ' + s['reason'][:200]) if s['reason'] else ''}.", ""]
            continue
        for doc in s["docs"]:
            title = f"#### {doc['benchmark']}" + (f" — {t.note}" if t.note else "")
            body += [title, "", f"Command: `{s['command']}`", ""]
            if "rows" in doc:
                body += [throughput_table(doc), ""]
                continue
            body += [f"Task: {doc.get('task', '')}.", "", learning_table(doc), ""]
            png = learning_plot(doc, tdir / "plots" / f"{doc['benchmark']}.png")
            if png is not None:
                rel = png.relative_to(root).as_posix()
                body += [f"![{doc['benchmark']} learning curves]({link_prefix}{rel})", ""]
    text = "\n".join(lines + [""] + body).rstrip() + "\n"
    tdir.mkdir(parents=True, exist_ok=True)
    local = f"]({link_prefix}{tdir.relative_to(root).as_posix()}/"  # links relative to tables.md itself
    (tdir / "tables.md").write_text(render_header(tier) + text.replace(local, "]("))
    return text


def render_header(tier: str) -> str:
    """The first line of ``tables.md``."""
    return f"<!-- generated by robotrl bench ({tier} tier); rerun `robotrl bench tables --tier {tier}` -->\n\n"
