"""The benchmark suite behind `robotrl bench`: statistics, result adapters, tables, plots,
README block, regression check, resume of tasks and the CLI's exit codes.

Fast (no benchmark is run): the adapters read the real files in benchmarks/results/, the
runner runs tiny real subprocesses (`python -c`, and one tiny real `robotrl train -m` sweep).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from robotrl.bench import regression
from robotrl.bench.peers import PeerUnavailable, d3rlpy_python
from robotrl.bench.plots import learning_plot
from robotrl.bench.readme import markers, replace_block, update_readme
from robotrl.bench.runner import is_done, norm_argv, read_json, run_tasks
from robotrl.bench.schema import BenchFormatError, load_results, normalize
from robotrl.stats import bootstrap_ci, iqm, onset_dip, regret, score_at
from robotrl.bench.suite import BenchError, Task, checkout_root, repo_root, tier_tasks
from robotrl.bench.tables import learning_stats, learning_table, throughput_table

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "tests" / "data" / "bench_results"  # frozen copies of benchmarks/results/, converted to the one form


def _doc(name: str) -> dict:
    docs = load_results(RESULTS / name)
    assert len(docs) == 1
    return docs[0]


# ----------------------------------------------------------------------------- statistics
def test_iqm_hand_values_and_trim_mean_semantics():
    assert iqm([1, 2, 3, 4]) == pytest.approx(2.5)               # cut 1 each end: mean(2, 3)
    assert iqm([8, 1, 7, 2, 6, 3, 5, 4]) == pytest.approx(4.5)   # cut 2 each end: mean(3, 4, 5, 6)
    assert iqm([1, 100, 2]) == pytest.approx(103 / 3)            # n < 4: nothing cut
    assert iqm([1, 2, 3, 4, 1000]) == pytest.approx(3.0)         # cut 1 each end: mean(2, 3, 4)
    assert iqm([5.0, None, float("nan")]) == 5.0                 # None / NaN dropped
    assert np.isnan(iqm([]))
    from scipy import stats as scipy_stats  # the reference implementation (test extra)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 5, 7, 10, 13):
        x = rng.normal(size=n)
        assert iqm(x) == pytest.approx(scipy_stats.trim_mean(x, 0.25))


def test_bootstrap_ci_contains_iqm_is_deterministic_and_narrows_with_more_seeds():
    rng = np.random.default_rng(1)
    few, many = rng.normal(10, 2, size=5), rng.normal(10, 2, size=60)
    lo, hi = bootstrap_ci(few)
    assert lo <= iqm(few) <= hi
    assert bootstrap_ci(few) == (lo, hi)                          # same seed, same interval
    lo2, hi2 = bootstrap_ci(many)
    assert lo2 <= iqm(many) <= hi2
    assert hi2 - lo2 < hi - lo
    assert all(np.isnan(bootstrap_ci([3.0])))                     # one seed: no interval
    with pytest.raises(ValueError):
        bootstrap_ci(few, conf=1.5)


def test_regret_onset_dip_and_score_at_definitions():
    curve = [[0, 0.5], [1000, 0.3], [2000, 0.6], [10000, 0.9]]
    assert regret(curve, 1.0) == pytest.approx(np.mean([0.7, 0.4, 0.1]))   # online evaluations only
    assert onset_dip(0.5, curve) == pytest.approx(-0.2)          # evaluations within 10 % of 10k: the 1k one
    late = [[0, 0.5], [5000, 0.4], [10000, 0.9]]
    assert onset_dip(0.5, late) == pytest.approx(-0.1)           # none within 10 %: the first online evaluation
    assert onset_dip(0.5, [[0, 0.5], [10000, 0.9]]) is None      # only before/after: no information on the start
    assert onset_dip(None, curve) is None                        # from scratch
    warm = [[0, 0.5], [1000, 0.5], [2000, 0.1], [3000, 0.4], [10000, 0.9]]   # no updates before 1k (WSRL warmup)
    assert onset_dip(0.5, warm) == pytest.approx(0.0)            # the warmup hides the dip ...
    assert onset_dip(0.5, warm, start=1000) == pytest.approx(-0.4)  # ... counted from where updates start
    assert score_at(curve, 1500) == 0.3 and score_at(curve, 2000) == 0.6
    assert score_at(curve, 20000) is None                        # the run never got that far
    assert regret([[0, 0.5]], 1.0) is None


# ----------------------------------------------------------------------------- adapters
def test_adapters_read_every_existing_result_file():
    files = sorted(RESULTS.glob("*.json"))
    assert len(files) >= 8
    for f in files:
        docs = load_results(f)
        assert docs, f
        for d in docs:
            assert ("rows" in d) != ("runs" in d), f
    replay = _doc("replay.json")
    row = next(r for r in replay["rows"] if r["what"].startswith("sample(256) vs Minari"))
    assert row["ratio"] == pytest.approx(137.2, abs=0.1) and row["target"] == 20.0 and row["peer_name"] == "minari"
    bridge = _doc("bridge.json")
    assert not bridge["rows"][0]["higher_is_better"] and bridge["rows"][0]["ratio"] == pytest.approx(5.62, abs=0.01)
    ql = _doc("qlearning_throughput.json")
    sac = next(r for r in ql["rows"] if r["what"] == "SAC updates/s fp32")
    assert sac["ratio"] == pytest.approx(1.245, abs=1e-3) and sac["peer_name"] == "d3rlpy"
    dl = _doc("dppo_learning.json")
    assert dl["budgets"] == [100000] and len(dl["runs"]) == 10 and dl["metric"] == "return"
    res = _doc("residual_fetch_push.json")
    assert res["metric"] == "success" and {r["method"] for r in res["runs"]} >= {"base (frozen BC)", "residual PPO"}
    qll = _doc("qlearning_learning.json")
    peers = {r["method"] for r in qll["runs"] if r["peer"]}
    assert peers == {"d3rlpy Cal-QL", "SB3 SAC (from scratch)"}
    assert qll["budgets"] == [1000, 2000, 3000, 4000, 5000]
    assert next(r for r in qll["runs"] if r["method"] == "SB3 SAC (from scratch)")["offline_score"] is None
    with pytest.raises(BenchFormatError):
        normalize({"something": 1}, "unknown")


def test_every_stored_suite_result_is_in_the_one_form():
    """The files of both tiers need no adapter: the scripts write the form (robotrl.bench.tasks._formats converts theirs)."""
    from robotrl.bench.schema import _detect

    for tier in ("quick", "full"):
        for task in tier_tasks(tier):
            path = ROOT / task.output
            if not path.exists():
                continue
            doc = json.loads(path.read_text())
            kind = _detect(doc)
            assert kind in ("learning", "throughput"), path
            if kind == "throughput":
                assert "details" in doc and doc.get("environment"), path  # the raw figures and the machine, kept


def test_online_robot_result_is_its_scripts_raw_form_converted_number_for_number():
    """The stored online_robot.json is bench_online_robot.py's raw output through benchmarks/_formats.py (the suite's
    schema has no adapter for it any more): converting the raw form kept under ``details`` gives the file again."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _formats
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    stored = json.loads((ROOT / "benchmarks" / "results" / "online_robot.json").read_text())
    raw = {"benchmark": stored["benchmark"], "environment": stored["environment"], **stored["details"]}
    assert _formats.detect(raw) == "online_robot" and _formats.detect(stored) is None
    assert _formats.as_result(raw, "online_robot", "online_robot") == stored
    (doc,) = load_results(ROOT / "benchmarks" / "results" / "online_robot.json")
    first = raw["runs"][0]
    assert doc["metric"] == "success" and doc["budgets"] == [] and len(doc["runs"]) == len(raw["runs"])
    assert doc["runs"][0]["curve"] == [[0, first["success_before"]], [first["steps"], first["success_after"]]]
    with pytest.raises(BenchFormatError):
        normalize(raw, "online_robot")  # the raw form is not read by the suite


def test_normalised_form_passes_through_unchanged():
    doc = {"benchmark": "x", "task": "t", "metric": "success", "budgets": [10],
           "runs": [{"method": "m", "seed": 0, "offline_score": 0.5, "curve": [[0, 0.5], [10, 0.7]]}]}
    (out,) = normalize(doc, "file")
    assert out["runs"][0]["peer"] is False and out["runs"][0]["family"] == "m"


# ----------------------------------------------------------------------------- tables and plots
def test_ending_is_the_mean_of_the_last_five_online_evaluations_beside_the_last_point():
    """A run that climbs to ~1 and falls back holds ~0.5 at the end: its last point (0.9 on one seed) says more than
    it held. The ending cell is the IQM over seeds of each run's mean of its last 5 online evaluations, with its CI."""
    from robotrl.stats import ending_evals, ending_score

    curve = [[0, 0.2], [1, 0.9], [2, 1.0], [3, 0.4], [4, 0.5], [5, 0.3], [6, 0.4], [7, 0.9]]
    assert ending_score(0.2, curve) == pytest.approx(np.mean([0.4, 0.5, 0.3, 0.4, 0.9]))
    assert ending_score(0.2, curve[:3]) == pytest.approx(0.95) and ending_evals(curve[:3]) == 2  # fewer: all online
    assert ending_score(0.3, []) == 0.3 and ending_evals([]) == 0  # offline only: the offline score
    with pytest.raises(ValueError):
        ending_score(0.2, curve, k=0)
    runs = [{"method": "m", "seed": s, "offline_score": 0.2, "curve": [[0, 0.2]] + [[t, v + 0.01 * s] for t, v in curve[1:]]}
            for s in range(4)]
    doc = {"benchmark": "b", "task": "t", "metric": "success", "budgets": [0, 7], "runs": runs}
    st = learning_stats(doc)["methods"]["m"]
    endings = [np.mean([0.4, 0.5, 0.3, 0.4, 0.9]) + 0.01 * s for s in range(4)]
    assert st["ending"]["iqm"] == pytest.approx(iqm(endings)) and st["ending"]["lo"] < st["ending"]["hi"]
    assert st["final"]["iqm"] == pytest.approx(iqm([0.9 + 0.01 * s for s in range(4)]))
    row = next(line for line in learning_table(doc).splitlines() if line.startswith("| m |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    head = [c.strip() for c in learning_table(doc).splitlines()[0].strip("|").split("|")]
    assert cells[head.index("ending (last 5)")].startswith(f"{st['ending']['iqm']:.2f} [")
    assert cells[head.index("last @7")].startswith("0.92 [")
    short = {**doc, "runs": [{**r, "curve": r["curve"][:4]} for r in runs], "budgets": [0, 3]}
    assert " (last 3)" in learning_table(short)  # a run with fewer evaluations says how many


def test_tables_render(tmp_path):
    text = learning_table(_doc("qlearning_learning.json"))
    assert "| method | n | offline |" in text and "@1k" in text and "last @5k | ending (last 5)" in text
    assert "d3rlpy Cal-QL (peer)" in text and "regret" in text
    wsrl = next(line for line in text.splitlines() if line.startswith("| robotrl WSRL |"))
    assert "[" in wsrl                                            # IQM [lo, hi] with 2 seeds
    st = learning_stats(_doc("residual_fetch_push.json"))
    assert st["best"] == 1.0 and st["methods"]["residual PPO"]["final"]["n"] == 3
    tp = throughput_table(_doc("replay.json"))
    assert "137.22×" in tp and "≥ 20×: met" in tp
    png = learning_plot(_doc("qlearning_learning.json"), tmp_path / "plots" / "ql.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_offline_only_bc_result_renders_scores_and_its_updates_per_s_part():
    """bench_bc.py's form (no d3rlpy needed): offline-only runs plus a throughput part read as two documents."""
    from robotrl.bench.tasks import bc as bench_bc
    ev = {"normalized_score": 60.0, "success_rate": 1.0, "return_mean": 140.0}
    rows = [{"contender": c, "seed": s, "updates": 1000, "train_s": t * (1 + s / 10), "eval": ev}
            for s in (0, 1, 2) for c, t in (("robotrl", 2.0), ("d3rlpy", 4.0))]
    doc = {"benchmark": "bc", "task": "t", "metric": "normalized_score", "budgets": [],
           "runs": bench_bc.to_runs(rows, "normalized_score"), "throughput": bench_bc.throughput(rows, "bc_updates"),
           "argv": ["benchmarks/bench_bc.py"]}
    learn, tp = normalize(doc, "bc")
    assert {r["method"] for r in learn["runs"] if r["peer"]} == {"d3rlpy BC"}
    text = learning_table(learn)
    assert "| method | n | normalised score | success rate (any-step) | wall s |" in text and "regret" not in text
    assert "| d3rlpy BC (peer) | 3 | 60.0 [60.0, 60.0] | 1.00 [1.00, 1.00] |" in text
    row = tp["rows"][0]
    assert row["what"] == "BC updates/s" and row["ratio"] == pytest.approx(2.0) and "2.00×" in throughput_table(tp)
    base = regression.make_baseline([learn, tp])
    assert base["throughput"]["bc_updates"]["BC updates/s"]["ratio"] == pytest.approx(2.0)
    assert base["learning"]["bc"]["methods"]["robotrl BC"]["final_iqm"] == pytest.approx(60.0)
    alone = bench_bc.throughput([r for r in rows if r["contender"] == "robotrl"], "bc_updates")["rows"][0]
    assert alone["peer"] is None and alone["ratio"] is None      # --skip d3rlpy: "not measured", never failed
    for tier in ("quick", "full"):
        (task,) = tier_tasks(tier, ["bc"])
        assert task.peer == "d3rlpy" and task.without_peer == ("--skip", "d3rlpy")


# ----------------------------------------------------------------------------- README block
def test_readme_block_is_replaced_in_place_and_idempotently(tmp_path):
    readme = tmp_path / "README.md"
    original = (ROOT / "README.md").read_text()
    readme.write_text(original)
    begin, end = markers("quick")
    update_readme(readme, "quick", "first body")
    once = readme.read_text()
    update_readme(readme, "quick", "first body")
    assert readme.read_text() == once                              # idempotent
    assert once.count(begin) == 1 and once.count(end) == 1
    update_readme(readme, "quick", "second body")
    text = readme.read_text()
    assert "second body" in text and "first body" not in text and text.count(begin) == 1
    outside = text[:text.index(begin)] + text[text.index(end):]
    assert "## Set-up on a fresh machine" in outside and "## Benchmarks" in outside  # the rest is kept
    # markers absent: created at the end of the Results section, before the next section
    made = replace_block("# T\n\n## Results\n\nold text\n\n## Next\n\nmore\n", "full", "B")
    assert made.index("old text") < made.index(markers("full")[0]) < made.index("## Next")
    assert replace_block("# T\n", "full", "B").endswith(f"## Results\n\n{markers('full')[0]}\nB\n{markers('full')[1]}\n")


# ----------------------------------------------------------------------------- regression check
def _worse(doc: dict, factor: float) -> dict:
    doc = copy.deepcopy(doc)
    for r in doc["runs"]:
        r["curve"] = [[s, v * factor] for s, v in r["curve"]]
        if not r["curve"] and r["offline_score"] is not None:
            r["offline_score"] *= factor
    return doc


def test_regression_check_fails_on_a_clearly_worse_result_and_passes_on_an_equal_one():
    docs = [_doc("residual_fetch_push.json"), _doc("qlearning_learning.json"), _doc("replay.json")]
    base = regression.make_baseline(docs)
    assert all(r["status"] == "ok" for r in regression.compare(docs, base))
    worse = [_worse(docs[0], 0.2), docs[1], docs[2]]
    bad = [r for r in regression.compare(worse, base) if r["status"] == "regressed"]
    assert bad and all(r["benchmark"] == "residual_fetch_push" for r in bad)
    slow = copy.deepcopy(docs[2])
    for r in slow["rows"]:
        r["ratio"] = r["ratio"] * 0.3 if r["ratio"] else r["ratio"]
    rows = regression.compare([docs[0], docs[1], slow], base)
    assert {r["benchmark"] for r in rows if r["status"] == "regressed"} == {"replay"}
    assert "REGRESSED" in regression.format_rows(rows)
    missing = regression.compare(docs[:1], base)                  # results not measured now: listed, not failed
    assert not any(r["status"] == "regressed" for r in missing) and any(r["status"] == "not measured" for r in missing)


def test_a_learning_row_that_could_never_fail_is_flagged_and_refused_at_record(tmp_path):
    src = _doc("residual_fetch_push.json")                         # success rates, every method ~0.2
    assert all(r["status"] == "ok" for r in regression.compare([src], regression.make_baseline([src])))
    zero = _worse(src, 0.0)                                        # every method at 0 success
    peer = next(iter(learning_stats(zero)["methods"]))
    for r in zero["runs"]:
        r["peer"] = r["method"] == peer                             # a peer from scratch at 0 is exempt
    rows = regression.compare([zero], regression.make_baseline([zero]))
    inert = {r["what"].split(": final")[0] for r in rows if r["status"] == "cannot fail"}
    assert inert == set(learning_stats(zero)["methods"]) - {peer} and len(inert) >= 2
    assert "CANNOT FAIL" in regression.format_rows(rows)
    res = tmp_path / "benchmarks" / "results" / "quick"
    res.mkdir(parents=True)
    (res / "residual_fetch_push.json").write_text((RESULTS / "residual_fetch_push.json").read_text())
    regression.record(tmp_path, "quick")                           # real results: recordable, and they pass
    assert regression.check(tmp_path, "quick")[0]
    regression.baseline_path(tmp_path, "quick").write_text(json.dumps(regression.make_baseline([zero])))
    passed, text = regression.check(tmp_path, "quick")             # a baseline recorded at 0 guards nothing
    assert not passed and "cannot fail" in text
    raw = json.loads((RESULTS / "residual_fetch_push.json").read_text())
    for r in raw["runs"]:  # every method at 0, before and after
        r["offline_score"] = 0.0
        r["curve"] = [[s, 0.0] for s, _ in r["curve"]]
    (res / "residual_fetch_push.json").write_text(json.dumps(raw))
    with pytest.raises(BenchError, match="could never fail"):
        regression.record(tmp_path, "quick")


def _cli(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "robotrl.cli", "bench", *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, **kw)


def test_cli_bench_check_exit_codes(tmp_path):
    good, bad = tmp_path / "good", tmp_path / "bad"
    good.mkdir()
    bad.mkdir()
    src = json.loads((RESULTS / "residual_fetch_push.json").read_text())
    (good / "residual_fetch_push.json").write_text(json.dumps(src))
    worse = copy.deepcopy(src)
    for r in worse["runs"]:  # every method ends at 0
        r["curve"] = [[s, v if s == 0 else 0.0] for s, v in r["curve"]]
        if not r["curve"]:
            r["offline_score"] = 0.0
    (bad / "residual_fetch_push.json").write_text(json.dumps(worse))
    baseline = tmp_path / "quick.json"
    baseline.write_text(json.dumps(regression.make_baseline(regression.load_dir(good))))
    ok = _cli("check", "--results-dir", str(good), "--baseline", str(baseline))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "passed" in ok.stdout
    fail = _cli("check", "--results-dir", str(bad), "--baseline", str(baseline))
    assert fail.returncode == 1, fail.stdout + fail.stderr
    assert "REGRESSED" in fail.stdout
    none = _cli("check", "--results-dir", str(good), "--baseline", str(tmp_path / "missing.json"))
    assert none.returncode == 2 and none.stderr.startswith("robotrl: error: no baseline")
    unknown = _cli("full", "--only", "no-such-task", "--no-readme")
    assert unknown.returncode == 2 and "unknown task" in unknown.stderr


# ----------------------------------------------------------------------------- runner: resume, peers, sweeps
WRITE = ("import json, sys, pathlib; p = pathlib.Path('out/r.json'); p.parent.mkdir(exist_ok=True); "
         "c = pathlib.Path('out/count'); c.write_text(str(int(c.read_text()) + 1 if c.exists() else 1)); "
         "p.write_text(json.dumps({'benchmark': 'tiny', 'rows': [{'what': 'x', 'ours': 2.0, 'peer': 1.0, "
         "'peer_name': 'p', 'unit': 'items/s', 'ratio': 2.0}], 'tag': sys.argv[1:]}))")


def _task(tag: str, **kw) -> Task:
    return Task("tiny", kw.pop("kind", "throughput"), ("-c", WRITE, tag, *kw.pop("extra", ())), "out/r.json", **kw)


def test_resume_skips_a_task_with_the_same_command_and_reruns_when_it_changes(tmp_path):
    quiet = lambda *a: None  # noqa: E731
    count = lambda: int((tmp_path / "out" / "count").read_text())  # noqa: E731
    assert run_tasks([_task("v1")], tmp_path, "quick", log=quiet)[0]["status"] == "ok"
    manifest = read_json(tmp_path / "benchmarks" / "results" / "quick" / "manifest.json")
    assert manifest["tasks"]["tiny"]["status"] == "ok" and manifest["tasks"]["tiny"]["argv"][2] == "v1"
    assert (tmp_path / "benchmarks" / "results" / "quick" / "logs" / "tiny.log").exists()
    assert run_tasks([_task("v1")], tmp_path, "quick", log=quiet)[0]["status"] == "skipped" and count() == 1
    assert run_tasks([_task("v2")], tmp_path, "quick", log=quiet)[0]["status"] == "ok" and count() == 2
    assert run_tasks([_task("v2")], tmp_path, "quick", force=True, log=quiet)[0]["status"] == "ok" and count() == 3
    assert json.loads((tmp_path / "out" / "r.json").read_text())["tag"] == ["v2"]
    failing = Task("boom", "learning", ("-c", "raise SystemExit(3)"), "out/none.json")
    assert run_tasks([failing], tmp_path, "quick", log=quiet)[0]["status"] == "failed"


def test_is_done_uses_the_argv_a_result_records_and_ignores_partial_results(tmp_path):
    task = Task("t", "learning", ("benchmarks/bench_x.py", "--seeds", "0", "1"), "r.json")
    doc = {"environment": {"argv": ["benchmarks/bench_x.py", "--seeds", "0", "1", "--out", "elsewhere.json"]}}
    (tmp_path / "r.json").write_text(json.dumps(doc))
    assert is_done(task, tmp_path, {"tasks": {}})[0]              # --out is not part of the comparison
    (tmp_path / "r.json").write_text(json.dumps({**doc, "partial": True}))
    assert not is_done(task, tmp_path, {"tasks": {}})[0]
    assert norm_argv(["/abs/benchmarks/bench_x.py", "--out=a", "--n", "3"]) == ("bench_x.py", "--n", "3")
    assert norm_argv(["bench_x.py", "--root", "/tmp/runs", "--n", "3", "--root=b"]) == ("bench_x.py", "--n", "3")
    assert norm_argv(["bench_x.py", "--n", "3"]) != norm_argv(["bench_x.py", "--n", "4"])


def test_tiers_have_distinct_outputs_and_a_result_without_a_command_is_not_done(tmp_path):
    for tier in ("quick", "full"):
        outputs = [t.output for t in tier_tasks(tier)]
        assert len(set(outputs)) == len(outputs)
    task = Task("t", "learning", ("benchmarks/bench_x.py",), "r.json")
    (tmp_path / "r.json").write_text(json.dumps({"runs": []}))
    assert is_done(task, tmp_path, {"tasks": {}}) == (False, "the result records no command")
    assert [t.name for t in tier_tasks("quick", ["bridge", "replay"])] == ["replay", "bridge"]
    with pytest.raises(BenchError):
        tier_tasks("quick", ["nope"])


def test_missing_peer_skips_the_task_or_runs_it_without_the_peer(tmp_path, monkeypatch):
    monkeypatch.setenv("ROBOTRL_D3RLPY_PYTHON", sys.executable)   # an interpreter without d3rlpy
    with pytest.raises(PeerUnavailable):
        d3rlpy_python(tmp_path)
    quiet = lambda *a: None  # noqa: E731
    (rec,) = run_tasks([_task("p", peer="d3rlpy")], tmp_path, "quick", log=quiet)
    assert rec["status"] == "peer-missing" and not (tmp_path / "out" / "r.json").exists()
    (rec,) = run_tasks([_task("p", peer="d3rlpy", without_peer=("--skip", "d3rlpy"))], tmp_path, "quick", log=quiet)
    assert rec["status"] == "ok" and rec["peer_missing"]
    assert json.loads((tmp_path / "out" / "r.json").read_text())["tag"] == ["p", "--skip", "d3rlpy"]


@pytest.mark.slow
def test_train_sweep_task_converts_a_real_multirun(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    tiny = ("agent=bc", "dataset=pointmaze-umaze-planner", "dataset.id=robotrl/pointmaze/umaze-bench-test-v0", "dataset.recipe_args.num_steps=2000",
            "+dataset.recipe_args.ref_episodes=2", "trainer.eval_episodes=2", "trainer.eval_envs=2", "torch_threads=1",
            "trainer.offline_steps=40", "trainer.eval_every=20", "trainer.checkpoint_every=40")
    task = Task("sweep", "train-sweep", ("robotrl", "train", "-m", "seed=0,1", *tiny), "out/sweep.json")
    (rec,) = run_tasks([task], tmp_path, "quick", log=lambda *a: None)
    assert rec["status"] == "ok", (tmp_path / rec["log"]).read_text()[-2000:]
    (doc,) = load_results(tmp_path / "out" / "sweep.json")
    assert doc["metric"] == "normalized_score" and [r["seed"] for r in doc["runs"]] == [0, 1]
    assert all(r["method"] == "bc" and r["offline_score"] is not None for r in doc["runs"])
    assert doc["command"].startswith("robotrl train -m seed=0,1")
    assert run_tasks([task], tmp_path, "quick", log=lambda *a: None)[0]["status"] == "skipped"


@pytest.mark.slow
def test_held_out_evaluation_of_the_last_and_the_kept_best_policy(tmp_path, monkeypatch):
    """add_held_out evaluates each run's last policy and its keep_best policy with `robotrl eval` on episodes reset
    from seed 100000 (never a run evaluation's), the same numbers an in-process evaluation of that policy gives; the
    table shows both beside the ending."""
    import json as _json

    from robotrl.bench.sweep import HELD_OUT_SEED, add_held_out, sweep_to_learning
    from robotrl.checkpoint import load_checkpoint
    from robotrl.envs import make_env_from_args
    from robotrl.evaluation import evaluate
    from robotrl.policy import act, load_policy

    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "minari"))
    runs = tmp_path / "runs"
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "train", "agent=bc", "dataset=pointmaze-umaze-planner",
                          "dataset.id=robotrl/pointmaze/umaze-heldout-test-v0", "dataset.recipe_args.num_steps=2000",
                          "+dataset.recipe_args.ref_episodes=2", "trainer.eval_episodes=2", "trainer.eval_envs=2",
                          "torch_threads=1", "trainer.offline_steps=60", "trainer.eval_every=20",
                          "trainer.checkpoint_every=60", "trainer.keep_best=true", "trainer.progress=false",
                          f"run_dir={runs / '000'}"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = sweep_to_learning(runs, benchmark="b", argv=[], command="c", metric="return")
    add_held_out(doc, {"000": runs / "000"}, tmp_path / "held", episodes=3)
    (run,) = doc["runs"]
    ev = load_checkpoint(runs / "000")["config"]["derived"]["eval_env"]
    for field, ckpt in (("held_out", runs / "000"), ("held_out_best", runs / "000" / "checkpoints" / "best.pt")):
        want = evaluate(lambda o, p=load_policy(str(ckpt)): act(p, o), lambda: make_env_from_args(ev), 3,
                        seed=HELD_OUT_SEED, num_envs=3)
        assert run[field]["episodes"] == 3 and run[field]["seed"] == HELD_OUT_SEED
        assert run[field]["score"] == pytest.approx(want["return_mean"]), field
    assert run["held_out_best"]["step"] == _json.loads((runs / "000" / "report.json").read_text())["summary"]["best"]["step"]
    head = learning_table(doc).splitlines()[0]
    assert "held-out last (3 ep.)" in head and "held-out best kept (3 ep.)" in head
    assert run["provenance"]["resumed"] is False


def test_sweep_converter_names_methods_by_swept_overrides_and_counts_online_steps(tmp_path):
    from robotrl.bench.sweep import sweep_to_learning

    for job, (seed, lr) in enumerate([(0, "1e-3"), (1, "1e-3"), (0, "3e-4"), (1, "3e-4")]):
        d = tmp_path / str(job)
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- seed={seed}\n- agent.model.lr={lr}\n- trainer.offline_steps=100\n")
        hist = [{"phase": "offline", "step": 100, "return_mean": 1.0 + job},
                {"phase": "online", "step": 150, "return_mean": 0.5}, {"phase": "online", "step": 300, "return_mean": 4.0}]
        (d / "report.json").write_text(json.dumps({
            "config": {"agent": {"name": "iql"}, "trainer": {"offline_steps": 100}, "seed": seed,
                       "env": {"name": "hopper"}, "dataset": {"id": "hopper-medium"}},
            "history": hist, "summary": {"wall_time_s": 2.0}}))
    doc = sweep_to_learning(tmp_path, benchmark="hp", argv=["robotrl", "train", "-m"], command="robotrl train -m ...")
    assert doc["metric"] == "return" and doc["budgets"] == [50, 200]
    assert {r["method"] for r in doc["runs"]} == {"iql (agent.model.lr=1e-3)", "iql (agent.model.lr=3e-4)"}
    run = doc["runs"][0]
    assert run["offline_score"] == 1.0 and run["curve"] == [[0, 1.0], [50, 0.5], [200, 4.0]]
    assert "iql (agent.model.lr=3e-4)" in learning_table(doc)
    with pytest.raises(BenchError):
        sweep_to_learning(tmp_path / "empty", benchmark="x", argv=[], command="")
    with pytest.raises(BenchError, match="success"):  # a metric the evaluations do not report is refused
        sweep_to_learning(tmp_path, benchmark="hp", argv=[], command="", metric="success")


def test_sweep_converter_reads_unfinished_runs_from_their_checkpoints_only_when_asked(tmp_path):
    """``unfinished=True`` (``bench_wsrl_warmstart.py --summarize-only``): a run still going is read from its
    last checkpoint and marked so; by default only finished runs count."""
    from robotrl.bench.sweep import sweep_to_learning
    from robotrl.checkpoint import save_checkpoint

    cfg = {"agent": {"name": "wsrl"}, "trainer": {"offline_steps": 0}, "env": {"name": "Hopper-v5"}}
    hist = [{"phase": "offline", "step": 0, "normalized_score": 18.0},
            {"phase": "online", "step": 1000, "normalized_score": 20.0}]
    done = tmp_path / "arm2_s0"
    done.mkdir()
    (done / "report.json").write_text(json.dumps({"config": {**cfg, "seed": 0}, "history": [
        *hist, {"phase": "online", "step": 2000, "normalized_score": 30.0}], "summary": {"wall_time_s": 9.0}}))
    save_checkpoint(tmp_path / "arm2_s1" / "checkpoints" / "latest.pt",
                    {"history": hist, "config": {**cfg, "seed": 1}, "wall_time": 4.3, "agent": {}})
    finished = sweep_to_learning(tmp_path, benchmark="b", argv=[], command="")
    assert [r["seed"] for r in finished["runs"]] == [0] and "partial" not in finished
    doc = sweep_to_learning(tmp_path, benchmark="b", argv=[], command="", unfinished=True)
    assert doc["partial"] is True and [r["seed"] for r in doc["runs"]] == [0, 1]
    first, going = doc["runs"]
    assert "finished" not in first and first["curve"][-1] == [2000, 30.0]
    assert going["finished"] is False and going["stopped_at"] == 1000 and going["wall_s"] == 4.3
    assert going["curve"] == [[0, 18.0], [1000, 20.0]]


def test_sweep_converter_takes_the_metric_asked_for_over_the_normalised_score(tmp_path):
    from robotrl.bench.sweep import sweep_to_learning

    d = tmp_path / "0"
    d.mkdir()
    hist = [{"phase": "offline", "step": 0, "normalized_score": 40.0, "success_rate": 0.2},
            {"phase": "online", "step": 100, "normalized_score": 90.0, "success_rate": 0.7, "success_metric": "final step"}]
    (d / "report.json").write_text(json.dumps({"config": {"agent": {"name": "dppo", "onpolicy": {}}, "seed": 0},
                                               "history": hist, "summary": {"wall_time_s": 1.0}}))
    assert sweep_to_learning(tmp_path, benchmark="b", argv=[], command="")["metric"] == "normalized_score"
    doc = sweep_to_learning(tmp_path, benchmark="b", argv=[], command="", metric="success")
    assert doc["metric"] == "success" and doc["runs"][0]["curve"] == [[0, 0.2], [100, 0.7]]


def test_repo_root_is_the_checkout_or_for_an_installed_robotrl_the_current_directorys(tmp_path, monkeypatch):
    """A clone's suite runs in the clone; an installed one (no benchmarks/ beside the package) in the nearest folder
    up from the current directory that has benchmarks/, else the current directory (results in ./benchmarks/results)."""
    import robotrl

    assert repo_root() == ROOT
    monkeypatch.setattr(robotrl, "__file__", str(tmp_path / "site-packages" / "robotrl" / "__init__.py"))
    (tmp_path / "work" / "deep").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "work" / "deep")
    assert repo_root() == tmp_path / "work" / "deep"
    (tmp_path / "work" / "benchmarks").mkdir()
    assert repo_root() == tmp_path / "work" == checkout_root()
    assert repo_root(tmp_path) == tmp_path


def test_benchmarks_and_the_suite_share_one_environment_collector_and_old_results_still_read():
    from robotrl.bench.machine import environment
    from robotrl.bench.report import _recorded_env

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _common
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert _common.environment is environment
    env = environment()
    assert env["argv"] == sys.argv and env["versions"]["python"] and env["cpu_count"] >= 1
    old = {"raw": {"environment": {"processor": "x86_64", "cpu_count": 2, "torch": "2.4.0", "stable_baselines3": "2.3"}}}
    new = {"raw": {"environment": env}}
    got = _recorded_env([old, new])
    assert got["cpu_model"] == "x86_64" and got["versions"]["torch"] == "2.4.0"
    assert got["versions"]["stable-baselines3"] == "2.3" and got["versions"]["numpy"] == env["versions"]["numpy"]


def test_time_to_threshold_column_reports_seconds_never_and_partial_counts():
    from robotrl.stats import time_to_threshold

    curve = [[0, 0.5], [1000, 0.6], [2000, 0.92], [3000, 0.95]]
    wall = [[0, 0.0], [1000, 10.0], [2000, 25.0], [3000, 40.0]]
    assert time_to_threshold(curve, wall, 0.9) == 25.0
    assert time_to_threshold(curve, wall, 0.99) == float("inf")
    assert time_to_threshold(curve, None, 0.9) is None
    # the offline evaluation (env step 0) never counts, even above the threshold
    assert time_to_threshold([[0, 1.0], [1000, 0.5]], [[0, 0.0], [1000, 5.0]], 0.9) == float("inf")

    def run(method, seed, reach_at):
        c = [[0, 0.4], [1000, 0.95 if reach_at == 1000 else 0.5], [2000, 0.95 if reach_at else 0.5]]
        return {"method": method, "seed": seed, "offline_score": 0.4, "curve": c,
                "wall_curve": [[0, 0.0], [1000, 100.0 + seed], [2000, 200.0 + seed]], "wall_s": 250.0}

    doc = {"benchmark": "b", "task": "t", "metric": "success", "budgets": [0, 1000, 2000], "threshold": 0.9,
           "runs": [run("a", s, 1000) for s in range(4)] + [run("b", s, 2000 if s < 2 else None) for s in range(4)]
           + [run("c", s, None) for s in range(4)]}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in learning_table(doc).splitlines() if line.startswith("| ")}
    assert "time to 0.90 s" in rows["method"]
    assert " | 101.5 [100.0, 103.0] | " in rows["a"], rows["a"]     # IQM of 100..103 s, every seed got there
    assert " | 200.5 (2/4) | " in rows["b"], rows["b"]               # two seeds got there (200, 201 s)
    assert " | never | " in rows["c"], rows["c"]
    del doc["threshold"]
    assert "time to" not in learning_table(doc)


def test_runs_table_names_hand_made_runs_by_label_and_records_each_runs_command(tmp_path):
    """benchmarks/runs_table.py: run directories from anywhere become one learning document in the order given, each
    run's method its label and its command ``robotrl train`` + its recorded overrides; a label count that does not
    match the runs, or a directory that is not a run, is refused."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from runs_table import runs_document

    dirs = []
    for i, gamma in enumerate(["0.999", "0.95"]):
        d = tmp_path / f"place{i}" / "dppo_s0"
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(f"- experiment=dppo\n- seed=0\n- agent.gamma={gamma}\n- run_dir={d}\n")
        hist = [{"phase": "offline", "step": 0, "success_rate": 0.2},
                {"phase": "online", "step": 100, "success_rate": 0.2 + 0.3 * i}]
        (d / "report.json").write_text(json.dumps({
            "config": {"agent": {"name": "dppo", "onpolicy": {}}, "seed": 0, "env": {"name": "fetch-push"},
                       "dataset": {"id": "d"}}, "history": hist, "summary": {"wall_time_s": 3.0}}))
        dirs.append(d)
    doc = runs_document(dirs, ["gamma 0.999", "gamma 0.95"], metric="success", command="c", argv=[])
    assert [r["method"] for r in doc["runs"]] == ["gamma 0.999", "gamma 0.95"]
    assert [r["curve"][-1] for r in doc["runs"]] == [[100, 0.2], [100, 0.5]]
    assert doc["runs"][1]["command"] == f"robotrl train experiment=dppo seed=0 agent.gamma=0.95 run_dir={dirs[1]}"
    assert doc["runs"][1]["run_dir"] == str(dirs[1]) and "gamma 0.95" in learning_table(doc)
    with pytest.raises(ValueError, match="one label per run"):
        runs_document(dirs, ["only one"], metric="success", command="c", argv=[])
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "report.json").write_text((dirs[0] / "report.json").read_text())
    with pytest.raises(FileNotFoundError, match="not a robotrl train run"):
        runs_document([tmp_path / "x"], None, metric="success", command="c", argv=[])


def test_runs_table_refuses_a_run_without_report_unless_asked_and_reads_a_resumed_run_to_a_budget(tmp_path):
    """A run directory given to ``runs_table`` is never dropped silently: without ``report.json`` it is refused (the
    message names it and ``--unfinished``), with ``unfinished`` it is read from its checkpoint; ``max_steps`` reads a run
    that was resumed past the comparison's budget up to it, curve and training wall time alike."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from runs_table import runs_document

    from robotrl.bench.suite import BenchError
    from robotrl.checkpoint import save_checkpoint

    cfg = {"agent": {"name": "reinflow", "onpolicy": {}}, "seed": 0, "env": {"name": "fetch-push"}, "dataset": {"id": "d"}}
    hist = [{"phase": "offline", "step": 0, "success_rate": 0.4}]
    hist += [{"phase": "online", "step": s, "success_rate": v, "train_wall_s": w}
             for s, v, w in ((100_000, 0.5, 200.0), (300_000, 0.6, 600.0), (600_000, 0.7, 1500.0))]
    done, stopped = tmp_path / "resumed", tmp_path / "stopped"
    for d in (done, stopped):
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text("- experiment=reinflow\n")
    (done / "report.json").write_text(json.dumps({"config": cfg, "history": hist, "summary": {"wall_time_s": 1500.0}}))
    save_checkpoint(stopped / "checkpoints" / "latest.pt", {"history": hist[:2], "config": cfg, "wall_time": 210.0})
    with pytest.raises(BenchError, match=f"{stopped}.*--unfinished"):
        runs_document([done, stopped], None, metric="success", command="c", argv=[])
    doc = runs_document([done, stopped], ["resumed", "stopped"], metric="success", command="c", argv=[],
                        unfinished=True, max_steps=300_000)
    resumed, partial = doc["runs"]
    assert resumed["curve"] == [[0, 0.4], [100_000, 0.5], [300_000, 0.6]] and resumed["wall_s"] == 600.0
    assert resumed["read_to"] == 300_000
    assert partial["method"] == "stopped" and partial["finished"] is False and partial["curve"][-1] == [100_000, 0.5]
    rows = {line.split(" | ")[0]: line for line in learning_table(doc).splitlines()}
    assert "0.50 (to 100k)" in rows["| stopped"] and "(to " not in rows["| resumed"]


def test_a_ratio_target_on_a_cost_row_is_a_maximum_and_a_speed_up_target_a_minimum():
    """A time-to-score row (lower is better, target on the ratio, e.g. ReinFlow's time to DPPO's final return over
    DPPO's wall time, target <= 0.3) is met below its target; a throughput ratio target (a speed-up) above it."""
    cost = {"what": "time to the peer's final return vs the peer's wall", "unit": "s", "ours": 19.7, "peer_name": "DPPO",
            "peer": 13.9, "ratio": 1.42, "target": 0.3, "target_on": "ratio", "higher_is_better": False}
    fast = {**cost, "ours": 3.0, "ratio": 0.22}
    speed = {"what": "updates/s", "unit": "updates/s", "ours": 300.0, "peer_name": "d3rlpy", "peer": 100.0,
             "ratio": 3.0, "target": 2.0, "target_on": "ratio", "higher_is_better": True}
    table = throughput_table({"rows": [cost, fast, speed, {**speed, "ratio": 1.5}]}).splitlines()
    assert table[2].endswith("| < 0.3×: not met |") and table[3].endswith("| < 0.3×: met |")
    assert table[4].endswith("| ≥ 2×: met |") and table[5].endswith("| ≥ 2×: not met |")


def _paired_report(d: Path, agent: str, seed: int, scores: list[float], walls: list[float]) -> None:
    d.mkdir(parents=True)
    hist = [{"phase": "offline", "step": 0, "success_rate": 0.3, "return_mean": -40.0}]
    hist += [{"phase": "online", "step": 1000 * (i + 1), "success_rate": v, "return_mean": -30.0, "train_wall_s": w}
             for i, (v, w) in enumerate(zip(scores, walls))]
    (d / "report.json").write_text(json.dumps({"config": {"agent": {"name": agent, "onpolicy": {}}, "seed": seed},
                                               "history": hist, "summary": {"wall_time_s": walls[-1] + 5}}))


def test_reinflow_time_to_dppo_final_success_from_paired_fetch_runs(tmp_path):
    from robotrl.bench.sweep import add_reinflow_time_to_dppo_final, sweep_to_learning

    # seed 0: DPPO ends at 0.6 after 100 s; ReinFlow first reaches 0.6 at its third evaluation, 24 s in
    _paired_report(tmp_path / "dppo_s0", "dppo", 0, [0.4, 0.5, 0.6], [30.0, 60.0, 100.0])
    _paired_report(tmp_path / "reinflow_s0", "reinflow", 0, [0.5, 0.58, 0.62], [8.0, 16.0, 24.0])
    # seed 1: ReinFlow never reaches DPPO's final 0.7
    _paired_report(tmp_path / "dppo_s1", "dppo", 1, [0.5, 0.7, 0.7], [30.0, 60.0, 90.0])
    _paired_report(tmp_path / "reinflow_s1", "reinflow", 1, [0.5, 0.6, 0.68], [8.0, 16.0, 24.0])
    doc = sweep_to_learning(tmp_path, benchmark="fetch_chunked", argv=[], command="", metric="success")
    assert doc["runs"][0]["wall_curve"] == [[1000, 30.0], [2000, 60.0], [3000, 100.0]]
    add_reinflow_time_to_dppo_final(doc)
    assert doc["summary"]["time_to_dppo_final_ratio_per_seed"] == [pytest.approx(0.24), None]
    assert doc["summary"]["time_to_dppo_final_ratio_iqm"] is None  # a seed never reached it
    docs = normalize(doc, "fetch_chunked")
    rows = docs[1]["rows"]
    assert docs[1]["benchmark"] == "fetch_chunked_time"
    assert rows[0]["ours"] == 24.0 and rows[0]["peer"] == 100.0 and "final success rate 0.60" in rows[0]["what"]
    assert rows[1]["ours"] is None and "(never)" in rows[1]["what"]
    assert "(never on some seed)" in rows[2]["what"]
    table = throughput_table(docs[1])  # a seed that never reaches the target misses it; it is not "not measured"
    assert "not met (never reached)" in table and "0.24×" in table and "not measured" not in table
    only_dppo = sweep_to_learning(tmp_path, benchmark="b", argv=[], command="", metric="success")
    only_dppo["runs"] = [r for r in only_dppo["runs"] if r["family"] == "dppo"]
    with pytest.raises(BenchError, match="same seeds"):
        add_reinflow_time_to_dppo_final(only_dppo)


def test_benchmarks_pretrain_per_seed_and_give_the_peer_robotrls_task(monkeypatch):
    """Issue 43: bench_wsrl_warmstart fine-tunes each seed from its own CQL pretraining (one shared only when asked)
    and describes the network the runs got; bench_qlearning_learning plans WSRL with the reference critic_init=zero
    (its own pretraining) and hands d3rlpy robotrl's reward transform, UTD and networks."""
    import argparse

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import bench_qlearning_learning as ql
    import bench_wsrl_warmstart as ws

    own = ws.pretrain_dirs(Path("r"), ["layernorm"], [0, 1, 2], shared=False)
    assert len(set(own.values())) == 3 and own["layernorm", 1] == Path("r/pretrain_layernorm_s1")
    assert set(ws.pretrain_dirs(Path("r"), ["layernorm"], [0, 1, 2], shared=True).values()) == {Path("r/pretrain_layernorm")}
    ten = ws.network_doc([*ws.NETS["layernorm"], "agent.model.num_critics=10", "agent.model.target_subset=2"])
    assert ten.startswith("10 critic heads 256x256 with LayerNorm (target: min over 2 random heads)"), ten
    assert ws.network_doc(ws.NETS["plain"]).startswith("2 critic heads 256x256 without LayerNorm")

    args = argparse.Namespace(dataset="pointmaze-umaze-noisy", dataset_id="robotrl/pointmaze/umaze-noisy-50k-v1",
                              dataset_steps=0, modes=["wsrl", "wsrl-zero"], skip=[],
                              robotrl_extra=["agent.model.num_critics=2", "agent.model.hidden=[64,64]",
                                             "agent.model.critic_hidden=[64,64]", "agent.model.critic_init=data"])
    assert dict(ql.units(args))["robotrl-wsrl-zero"] == "robotrl-offline-calql-zero"
    assert ql.VARIANTS["-zero"] == ["agent.model.critic_init=zero"]
    task = ql.robotrl_settings(args)
    assert (task["reward_scale"], task["reward_bias"], task["utd"]) == (10.0, -5.0, 4)
    assert task["actor_hidden"] == task["critic_hidden"] == [64, 64] and task["num_critics"] == 2
