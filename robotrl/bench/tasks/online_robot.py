"""Online RL on the robot (issue 16): success before/after a short online run on the MuJoCo twin.

Per run, two real processes on this machine: ``robotrl learner`` (SAC, small networks, CPU)
and ``robotrl actor`` (the twin in the actor's process behind the safety supervisor, paced
at ``--rate`` Hz, the twin itself unpaced). The actor explores with the pushed weights for
``--episodes`` episodes of ``--max-steps`` steps; the learner makes ``--utd`` critic updates per
transition received and pushes weights every ``--push`` s, saving every pushed version.
Once the actor is done and the learner has caught up (the updates its schedule allows for
the transitions it holds), both stop, and every saved version near each ``--eval-every``
seconds of the run is evaluated deterministically on ``--eval-seeds`` fixed starts/goals:
success vs wall-clock minutes, "before" = the first pushed version (the initial weights),
"after" = the last.

Modes: ``human``: a scripted "human" (P-D controller along the path, straight to the goal without fixed cells) takes over every
``--every``-th episode; its steps enter the demonstration buffer and the learner samples
half of each batch from it (RLPD/HIL-SERL 50/50). ``demos``: no human; the learner starts
with 20 episodes of the same controller's demonstrations (RLPD 50/50). ``none``: no human,
no demonstrations (``offline_ratio=0``). ``pretrained``: offline-pretrained then online: the
same 20 demonstrations, ``--pretrain-steps`` Cal-QL updates on them in the learner before the
actor starts, then SAC online (WSRL's switch) with the demonstrations kept at 50/50; its
"before" is the pretrained policy, and the pretraining time is reported apart
(``learner_start_s``). ``--paced``: the actor's twin keeps to wall-clock time (real-time
pacing, as a physical robot); unpaced, only the actor's loop sets the rate.

``pretrained-human``: offline-pretrained as ``pretrained``, then online with the scripted human
as in ``human`` (HIL-SERL's offline-pretrained + interventions). ``human-clf``: as ``human``, but
the actor's reward is a success classifier's (``reward=classifier``: the state classifier of
:mod:`robotrl.real_robot.reward_classifier`, trained per seed on ``--classifier-episodes`` labelled episodes of other
starts than the run's, :func:`~robotrl.real_robot.online_eval.record_classifier_episodes`: half the controller to the
goal and held there, half steered into the dead ends, each step labelled by the twin's success flag, as HIL-SERL's
operator records successes and failures; the threshold chosen on held-out episodes, a success ends the episode), not
the twin's: a robot without a reward of its own. ``human-clf-cam``: the same with the **camera** classifier trained on
the same episodes rendered by the dead-end twin's ``goal`` camera (``camera_views`` of ``robot=sim-deadend``: a 64 px
view of the goal region, as HIL-SERL crops its cameras to the task's region; frames alone, DrQ's encoder trained from
scratch with the head: :data:`CLASSIFIER_ARMS`), the actor's twin rendering that camera, the learner a state learner. (Until 2026-12-02 05:45 UTC ``human-clf``'s classifier learned from
30 controller episodes, successes only, with frames held out and threshold 0.5: the recorded rows of the L and Z
corridors.)

Tasks (``--task``): ``room`` (default, issue 16): PointMaze twin in a 2×2 room without inner
walls (``--maze open``, a ``maze_map`` override), ``--reward dense`` gymnasium-robotics'
``exp(-distance)`` reward, 150 steps, :data:`~robotrl.real_robot.online_eval.LEARNER`.
``lcorridor`` (issue 42): the L-shaped corridor one cell wide
(:data:`robotrl.real_robot.sim.LCORRIDOR_MAP`, fixed start and goal cells, about 6.5 m of path),
the sparse reward (1 at the goal), 200 steps, ``gamma`` 0.99
(:data:`~robotrl.real_robot.online_eval.LEARNER_SPARSE`): random exploration almost never reaches
the goal, the straight-to-goal controller does in about 135 steps. ``zcorridor`` (issue 42): the corridor with two
turns where the ball must reverse its x direction (:data:`robotrl.real_robot.sim.ZCORRIDOR_MAP`, about 8 m of path),
otherwise as ``lcorridor``: no constant action reaches the goal, the path-following controller
(:func:`robotrl.real_robot.teleop.maze_controller`, the scripted human's and the demonstrations') does in about 145
steps. ``deadend`` (issue 42): the Z corridor's path with dead-end branches off it
(:data:`robotrl.real_robot.sim.DEADEND_MAP`: a 9-cell room past the first turn, three short dead ends), otherwise as
``zcorridor``: the step cost's optimism explores the dead ends, the path-following operator does not. ``--maze``, ``--reward``,
``--max-steps`` and ``--learner`` override the task's. Success = the ball within 0.45 m of the
goal (the twin's flag). Per mode: the IQM of the final success over seeds with a 95 % bootstrap
CI (:mod:`robotrl.stats`), the human's steps and time (steps / ``--rate``), and per run the
intervention rate per episode; ``--plot`` draws success vs minutes and the intervention rate.

Run: ``python benchmarks/bench_online_robot.py [--modes human none] [--seeds 0] [--episodes 60]
[--out online_robot.json]``; wall time is about ``episodes · max_steps / rate`` per run plus
the learner's catch-up.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from robotrl.bench.tasks._common import command_line, environment, results_dir, write_json
from robotrl.bench.tasks._formats import TOP, as_result, detect
from robotrl.real_robot.online_eval import (
    LEARNER,
    LEARNER_SPARSE,
    MAZES,
    MODES,
    OPERATORS,
    evaluate_trial,
    run_twin_trial,
    train_twin_classifier,
)

#: ``--task`` presets: maze, reward, max steps, learner overrides
TASKS = {"room": {"maze": "open", "reward": "dense", "max_steps": 150, "learner": list(LEARNER), "operator": "schedule"},
         "lcorridor": {"maze": "lcorridor", "reward": "sparse", "max_steps": 200, "learner": list(LEARNER_SPARSE),
                       "operator": "on-failure"},
         "zcorridor": {"maze": "zcorridor", "reward": "sparse", "max_steps": 200, "learner": list(LEARNER_SPARSE),
                       "operator": "on-failure"},
         "deadend": {"maze": "deadend", "reward": "sparse", "max_steps": 200, "learner": list(LEARNER_SPARSE),
                     "operator": "on-failure"}}
#: the arms whose reward is a success classifier's: run_twin_trial's mode, and the classifier
#: (:func:`~robotrl.real_robot.online_eval.train_twin_classifier`'s options; ``cameras``: also rendered by the actor's twin)
CLASSIFIER_ARMS = {"human-clf": {"mode": "human", "classifier": {}},
                   "human-clf-cam": {"mode": "human", "classifier": {"cameras": ("goal",), "image_size": 64,
                                                                     "encoder": "drq", "channels": 16,
                                                                     "pooling": "flatten", "steps": 1000}}}
#: bench modes: run_twin_trial's, and the classifier arms (``human`` with the state or camera classifier's reward)
BENCH_MODES = [*MODES, *CLASSIFIER_ARMS]
ORDER = ["none", "demos", "human", "human-clf", "human-clf-cam", "pretrained", "pretrained-human"]


def arm_settings(mode: str) -> tuple[str, dict | None]:
    """Bench ``mode`` -> (``run_twin_trial``'s mode, the classifier's ``train_twin_classifier`` options or ``None``
    without a classifier reward)."""
    arm = CLASSIFIER_ARMS.get(mode)
    return (mode, None) if arm is None else (arm["mode"], dict(arm["classifier"]))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="room", choices=sorted(TASKS), help="twin task preset (see the module doc)")
    p.add_argument("--modes", nargs="+", default=["human", "demos", "none", "pretrained"], choices=BENCH_MODES)
    p.add_argument("--pretrain-steps", type=int, default=1000, help="offline Cal-QL updates of mode pretrained")
    p.add_argument("--paced", action="store_true", help="the actor's twin keeps to wall-clock time (every mode)")
    p.add_argument("--paced-modes", nargs="*", default=[], choices=BENCH_MODES,
                   help="modes run a second time with the paced twin (after the --modes runs)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--max-steps", type=int, default=None, help="episode step limit (default: the task's)")
    p.add_argument("--rate", type=float, default=100.0, help="actor control rate (Hz)")
    p.add_argument("--utd", type=float, default=1.0, help="learner critic updates per transition received (trainer.utd)")
    p.add_argument("--push", type=float, default=1.0, help="weights push period (s)")
    p.add_argument("--every", type=int, default=2, help="the scripted human drives every n-th episode (--operator schedule)")
    p.add_argument("--operator", default=None, choices=list(OPERATORS),
                   help="schedule: the scripted human drives every --every-th episode in full; on-failure: it watches "
                        "every episode and takes over only when the policy is stuck or heading back (default: the task's)")
    p.add_argument("--maze", default=None, choices=sorted(MAZES), help="default: the task's")
    p.add_argument("--reward", default=None, choices=["dense", "sparse"], help="default: the task's")
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--learner", nargs="*", default=None, help="extra learner Hydra overrides (default: the task's)")
    p.add_argument("--classifier-episodes", type=int, default=40,
                   help="labelled episodes the human-clf / human-clf-cam classifiers learn from: half the controller "
                        "to the goal, half into the dead ends (online_eval.record_classifier_episodes)")
    p.add_argument("--eval-seeds", type=int, default=20)
    p.add_argument("--eval-every", type=float, default=20.0, help="evaluate the version nearest every this many s")
    p.add_argument("--out", default="online_robot.json")
    p.add_argument("--merge", action="store_true", help="keep the other runs already in --out (same settings)")
    p.add_argument("--plot", default=None, help="PNG of success vs minutes and the intervention rate (under results/)")
    p.add_argument("--combine", nargs="+", default=None, metavar="JSON",
                   help="run nothing: write --out (and --plot) from the runs of these result files (e.g. one per seed, "
                        "run side by side), their commands and configs kept")
    a = p.parse_args(argv)
    if a.combine:
        return combine([Path(f) if Path(f).is_absolute() else results_dir() / f for f in a.combine], a)
    for k, v in TASKS[a.task].items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    seeds = list(range(10_000, 10_000 + a.eval_seeds))
    path = Path(a.out) if Path(a.out).is_absolute() else results_dir() / a.out
    plan = [(m, a.paced) for m in a.modes] + [(m, True) for m in a.paced_modes if not a.paced]
    planned = {(m, s, paced) for m, paced in plan for s in a.seeds}
    prev = read_raw(path) if a.merge and path.exists() else {}
    runs = [r for r in prev.get("runs", []) if (r["mode"], r["seed"], r.get("paced", False)) not in planned]
    commands = [*prev.get("commands", []), command_line()]
    out: dict = {}
    for mode, paced in plan:
        for seed in a.seeds:
            with tempfile.TemporaryDirectory(prefix="bench-online-") as d:
                clf, clf_metrics, clf_s = None, None, 0.0
                trial_mode, clf_opts = arm_settings(mode)
                if clf_opts is not None:  # per seed, from a labelled recording of other starts than the run's: the
                    t_clf = time.time()  # same episodes (reset seeds, noise) for the state and the camera classifier
                    clf, clf_metrics = train_twin_classifier(Path(d) / "clf", episodes=a.classifier_episodes,
                                                             max_steps=a.max_steps, maze=a.maze, reward=a.reward,
                                                             seed=2 * 10 ** 6 + 1000 * seed, **clf_opts)
                    clf_s = time.time() - t_clf
                cams = (clf_opts or {}).get("cameras", ())
                r = run_twin_trial(Path(d), mode=trial_mode, seed=seed, episodes=a.episodes, max_steps=a.max_steps,
                                   rate=a.rate, utd=a.utd, push_s=a.push, every=a.every, maze=a.maze, reward=a.reward,
                                   hidden=a.hidden, batch=a.batch, warmup=a.warmup, learner_overrides=a.learner,
                                   pretrain_steps=a.pretrain_steps, paced=paced, reward_classifier=clf,
                                   operator=a.operator, cameras=cams,
                                   image_size=(clf_opts or {}).get("image_size", 64))
                ev = evaluate_trial(r, maze=a.maze, reward=a.reward, max_steps=a.max_steps, seeds=seeds,
                                    every_s=a.eval_every)
            s, st = r["summary"], r["status"]
            runs.append({"mode": mode, "seed": seed, "paced": paced, "operator": a.operator if "human" in mode else None,
                         "wall_s": round(r["wall_s"], 1),
                         "actor_s": round(r["actor_s"], 1), "learner_start_s": round(r["learner_start_s"], 1),
                         "episodes": s["episodes"], "steps": s["steps"],
                         "interventions": int(sum(s["interventions_per_episode"])),
                         "human_s": round(sum(s["interventions_per_episode"]) / a.rate, 2), "updates": st["updates"], "updates_target": r["updates_target"],
                         "versions": st["version"], "success_before": ev["before"]["success"],
                         "success_after": ev["after"]["success"], "return_before": ev["before"]["mean_return"],
                         "return_after": ev["after"]["mean_return"], "curve": ev["curve"],
                         "interventions_per_episode": list(s["interventions_per_episode"]),
                         "steps_per_episode": [e["steps"] for e in r["episode_log"]],
                         "episode_success": [bool(x) for x in s["successes"]],
                         "episode_robot_success": [bool(e["robot_success"]) for e in r["episode_log"]],
                         **({"classifier": clf_metrics, "classifier_s": round(clf_s, 1),
                             "classifier_data": "labelled recording: controller to the goal and into the dead ends"}
                            if clf_metrics is not None else {})})
            print(json.dumps({k: v for k, v in runs[-1].items() if k not in ("curve", "interventions_per_episode",
                                                                               "steps_per_episode", "episode_success",
                                                                               "episode_robot_success")}),
                  flush=True)
            out = {"benchmark": "online_robot" if a.task == "room" else f"online_robot_{a.task}", "commands": commands,
                   "config": vars(a), "eval_seeds": seeds, "runs": runs, "table": table(runs),
                   "summary": summary(runs), "environment": environment(),
                   "note": "shared machine (2 cores, other agents' jobs running): wall times are indicative only"}
            write_json(path, as_result(out, path.stem, "online_robot"))  # after every run: a run cut short keeps
            # what was measured; the suite's one result form, this script's own figures under ``details``
            if a.plot:
                plot(runs, results_dir() / a.plot if not Path(a.plot).is_absolute() else Path(a.plot), a.task)
    print(out.get("table", ""))
    return out


def read_raw(path: Path) -> dict:
    """This script's own figures from a result file: the suite's form keeps them under ``details``
    (:func:`robotrl.bench.tasks._formats.as_result`); an older file in the raw form is read as it is.

    Raises:
        ValueError: a file in neither form (one line naming it).
    """
    doc = json.loads(Path(path).read_text())
    if detect(doc) == "online_robot":
        return doc
    if isinstance(doc.get("details"), dict) and "runs" in doc["details"]:
        return {"benchmark": doc.get("benchmark"), **doc["details"], **{k: doc[k] for k in TOP if k in doc}}
    raise ValueError(f"{path} is not a result of this script (no runs of bench_online_robot.py in it): give one "
                     "it wrote, with --merge or --combine")


def combine(files: list[Path], a: argparse.Namespace) -> dict:
    """``--combine``: one result file (table, summary, plot) from the runs of ``files``."""
    parts = [read_raw(f) for f in files]
    runs = [r for d in parts for r in d["runs"]]
    path = Path(a.out) if Path(a.out).is_absolute() else results_dir() / a.out
    out = {"benchmark": parts[0]["benchmark"], "commands": [c for d in parts for c in d["commands"]] + [command_line()],
           "config": parts[0]["config"], "configs": [d["config"] for d in parts], "eval_seeds": parts[0]["eval_seeds"],
           "runs": runs, "table": table(runs), "summary": summary(runs), "environment": environment(),
           "combined_from": [f.name for f in files], "note": parts[0].get("note")}
    write_json(path, as_result(out, path.stem, "online_robot"))
    if a.plot:
        plot(runs, results_dir() / a.plot if not Path(a.plot).is_absolute() else Path(a.plot), parts[0]["config"]["task"])
    print(out["table"])
    return out


def _groups(runs: list[dict]) -> list[tuple[str, list[dict]]]:
    out = []
    for paced in (False, True):
        for mode in ORDER:
            rs = [r for r in runs if r["mode"] == mode and r.get("paced", False) == paced]
            if rs:
                out.append((f"{mode}{' (paced)' if paced else ''}", rs))
    return out


def summary(runs: list[dict]) -> dict:
    """Per mode: IQM of the final success over seeds with its 95 % bootstrap CI (:func:`robotrl.stats.bootstrap_ci`),
    the human's steps and seconds (mean over seeds) and the mean wall minutes."""
    import statistics

    from robotrl.stats import bootstrap_ci, iqm

    out = {}
    for name, rs in _groups(runs):
        after = [r["success_after"] for r in rs]
        lo, hi = bootstrap_ci(after)
        last3 = [last_mean(r) for r in rs]
        lo3, hi3 = bootstrap_ci(last3)
        out[name] = {"seeds": [r["seed"] for r in rs], "success_after": after, "iqm_after": iqm(after),
                     "ci95_after": [lo, hi], "iqm_before": iqm([r["success_before"] for r in rs]),
                     "success_last3": last3, "iqm_last3": iqm(last3), "ci95_last3": [lo3, hi3],
                     "intervention_rate_first5": statistics.mean(intervention_rate(r, "first") for r in rs),
                     "intervention_rate_last5": statistics.mean(intervention_rate(r, "last") for r in rs),
                     "human_steps": statistics.mean(r.get("interventions", 0) for r in rs),
                     "human_s": statistics.mean(r.get("human_s", 0.0) for r in rs),
                     "wall_min": statistics.mean(r["wall_s"] for r in rs) / 60}
    return out


def plot(runs: list[dict], path: Path, task: str) -> Path:
    """Success vs wall-clock minutes per run (thin) and mode, and the human's share of each episode's steps
    (intervention rate) per episode; written atomically as a PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from robotrl.files import atomic_write

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (name, rs) in enumerate(_groups(runs)):
        c = colors[i % len(colors)]
        for j, r in enumerate(rs):
            ax.plot([p["minutes"] for p in r["curve"]], [p["success"] for p in r["curve"]], color=c, alpha=0.7,
                    marker=".", label=f"{name} ({len(rs)} seeds)" if j == 0 else None)
            if r.get("interventions") and r.get("steps_per_episode"):  # (older result files lack the episodes)
                rate = [k / max(n, 1) for k, n in zip(r["interventions_per_episode"], r["steps_per_episode"])]
                bx.plot(range(len(rate)), rate, color=c, alpha=0.6, marker=".", ls="",
                        label=f"{name}" if j == 0 else None)
    ax.set(xlabel="wall-clock minutes of the run", ylabel="evaluated success (20 starts)", ylim=(-0.03, 1.03),
           title=f"online RL on the PointMaze twin ({task})")
    ax.axhline(0.8, color="grey", lw=0.5, ls="--")
    ax.axhline(0.3, color="grey", lw=0.5, ls=":")
    ax.legend(fontsize=7)
    bx.set(xlabel="episode", ylabel="human steps / episode steps", ylim=(-0.03, 1.03), title="intervention rate")
    if bx.lines:
        bx.legend(fontsize=7)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=110), mode=0o644)
    plt.close(fig)
    return path


def last_mean(run: dict, k: int = 3) -> float:
    """Mean evaluated success of a run's last ``k`` evaluations (an ending less noisy than the last alone)."""
    c = run["curve"][-k:]
    return sum(p["success"] for p in c) / len(c)


def intervention_rate(run: dict, part: str, k: int = 5) -> float:
    """Human steps / episode steps over a run's ``first`` or ``last`` ``k`` episodes (0 without a human)."""
    n, s = run.get("interventions_per_episode") or [], run.get("steps_per_episode") or []
    if not n or not s:
        return 0.0
    sl = slice(0, k) if part == "first" else slice(-k, None)
    return sum(n[sl]) / max(sum(s[sl]), 1)


def table(runs: list[dict], level: float = 0.8) -> str:
    """Markdown table per mode: success before/after (mean over seeds), IQM of the final success and of the mean of
    the last 3 evaluations with their 95 % bootstrap CIs, minutes until the evaluated success first reached ``level`` (median over seeds; "-": not within
    the run), wall time, updates, the human's steps and seconds (mean over seeds), and the intervention rate over the
    first and the last 5 episodes (mean over seeds)."""
    import statistics

    from robotrl.stats import bootstrap_ci, iqm

    rows = [f"| mode | seeds | success before | success after | IQM after [95% CI] | IQM last 3 [95% CI] | "
            f"minutes to ≥ {level:.0%} | wall min | updates | human steps (s) | intervention rate, first → last 5 ep |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for name, rs in _groups(runs):
        hit = [next((c["minutes"] for c in r["curve"] if c["success"] >= level), None) for r in rs]
        reached = [h for h in hit if h is not None]
        t = f"{statistics.median(reached):.1f} ({len(reached)}/{len(rs)})" if reached else "-"
        after = [r["success_after"] for r in rs]
        lo, hi = bootstrap_ci(after)
        human = statistics.mean(r["interventions"] for r in rs)
        human_s = statistics.mean(r.get("human_s", 0.0) for r in rs)
        last3 = [last_mean(r) for r in rs]
        lo3, hi3 = bootstrap_ci(last3)
        first_rate, last_rate = (statistics.mean(intervention_rate(r, part) for r in rs) for part in ("first", "last"))
        rows.append(f"| {name} | {len(rs)} | {statistics.mean(r['success_before'] for r in rs):.2f} | "
                    f"{statistics.mean(after):.2f} | {iqm(after):.2f} [{lo:.2f}, {hi:.2f}] | "
                    f"{iqm(last3):.2f} [{lo3:.2f}, {hi3:.2f}] | {t} | "
                    f"{statistics.mean(r['wall_s'] for r in rs) / 60:.1f} | "
                    f"{statistics.mean(r['updates'] for r in rs):.0f} | {human:.0f} ({human_s:.0f}) | "
                    f"{first_rate:.2f} → {last_rate:.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
