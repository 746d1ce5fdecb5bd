"""``robotrl bench``: run the benchmark tiers, render tables/plots and the docs' results pages, check regressions.

::

    robotrl bench quick                 # ~80 min on 2 shared cores: all quick tasks, tables, plots, docs page, check
    robotrl bench quick --record        # ... and record its figures as benchmarks/baselines/quick.json
    robotrl bench full                  # the published numbers; resumes after an interruption
    robotrl bench full --only bridge replay --force
    robotrl bench check                 # latest quick results vs the recorded figures (exit 1 on regression)
    robotrl bench tables --tier full    # rewrite tables, plots and docs/results/full.md from the results, run nothing
    robotrl bench list                  # the tasks of a tier and whether their results are there

Exit status: 0 fine, 1 a regression or a failed task, 2 bad input (``robotrl: error: ...``).
"""

from __future__ import annotations

import argparse
import os
import time

from robotrl.bench import regression
from robotrl.bench.machine import environment
from robotrl.bench.readme import update_readme
from robotrl.bench.report import render_tier
from robotrl.bench.runner import is_done, load_manifest, write_json
from robotrl.bench.suite import TIERS, repo_root, tier_dir, tier_tasks


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="robotrl bench", description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("::")[1])
    p.add_argument("action", choices=["quick", "full", "check", "tables", "list"])
    p.add_argument("--only", nargs="+", metavar="TASK", help="run only these tasks (robotrl bench list shows them)")
    p.add_argument("--force", action="store_true", help="rerun tasks whose results record the same command")
    p.add_argument("--no-docs", "--no-readme", dest="no_docs", action="store_true",
                   help="do not rewrite the generated block of docs/results/<tier>.md")
    p.add_argument("--record", action="store_true", help="record the results as the baseline of the regression check")
    p.add_argument("--jobs", type=int, default=None,
                   help="learning tasks run side by side (default: 2 on machines with >= 2 CPUs; timing tasks always alone)")
    p.add_argument("--tier", choices=TIERS, default=None, help="tier of check/tables/list (default: quick for check, "
                   "full for tables and list)")
    p.add_argument("--results-dir", default=None, help="check: the results to compare (default: the tier's)")
    p.add_argument("--baseline", default=None, help="check: the baseline file (default: benchmarks/baselines/<tier>.json)")
    return p


#: The docs page of a tier's results (its block between ``<!-- robotrl-bench:<tier>:begin/end -->`` is generated),
#: relative to the repository root; the page's links to plots go one folder up (``docs/results/`` to the site root,
#: where ``docs/hooks.py`` serves ``benchmarks/results/<tier>/plots/``).
DOCS_PAGE = "docs/results/{tier}.md"


def _render(root, tier: str, write_docs: bool) -> None:
    print(f"[bench] tables: {tier_dir(root, tier).relative_to(root)}/tables.md, plots in "
          f"{tier_dir(root, tier).relative_to(root)}/plots/")
    text = render_tier(root, tier, link_prefix="../")
    page = DOCS_PAGE.format(tier=tier)
    if write_docs and (root / page).is_file():  # a checkout's docs; an installed suite's root has none
        update_readme(root / page, tier, text)
        print(f"[bench] {page}: the {tier} block is rewritten")


def _check(root, tier: str, results=None, baseline=None) -> bool:
    passed, text = regression.check(root, tier, results=results, baseline=baseline)
    print(text)
    print("[bench] regression check: " + ("passed" if passed else "FAILED"))
    return passed


def main(argv: list[str]) -> int:
    """Run ``robotrl bench``; returns the exit status. Raises RobotRLError for bad input."""
    from robotrl.bench.runner import run_tasks

    a = _parser().parse_args(argv)
    root = repo_root()
    if a.action == "check":
        return 0 if _check(root, a.tier or "quick", a.results_dir, a.baseline) else 1
    if a.action in ("tables", "list"):
        tier = a.tier or "full"
        if a.action == "tables":
            _render(root, tier, not a.no_docs)
            return 0
        manifest = load_manifest(root, tier)
        for t in tier_tasks(tier, a.only):
            done, why = is_done(t, root, manifest)
            print(f"{t.name:22s} {t.kind:11s} {'done' if done else 'to run':7s} {t.display()}  [{why}]")
        return 0
    tier = a.action
    tasks = tier_tasks(tier, a.only)
    jobs = a.jobs or (2 if (os.cpu_count() or 1) >= 2 else 1)
    t0 = time.time()
    print(f"[bench] {tier} tier: {len(tasks)} task(s), up to {jobs} learning task(s) side by side")
    records = run_tasks(tasks, root, tier, force=a.force, jobs=jobs)
    cmd = "robotrl bench " + " ".join(argv)
    mpath = tier_dir(root, tier) / "manifest.json"
    manifest = load_manifest(root, tier)
    manifest["suite"] = {"command": cmd, "environment": environment(), "wall_s": round(time.time() - t0, 1)}
    write_json(mpath, manifest)
    _render(root, tier, not a.no_docs)
    failed = [r for r in records if r["status"] == "failed"]
    for r in records:
        print(f"[bench] {r['task']:22s} {r['status']:12s} {r.get('reason', '')}")
    print(f"[bench] {tier} tier done in {(time.time() - t0) / 60:.1f} min")
    ok = not failed
    if a.record:
        path = regression.record(root, tier)
        print(f"[bench] recorded the figures of this run: {path.relative_to(root)}")
    elif regression.baseline_path(root, tier).exists():
        ok = _check(root, tier) and ok
    return 0 if ok else 1
