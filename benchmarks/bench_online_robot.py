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

Modes: ``human``: a scripted "human" (P-D controller to the goal) takes over every
``--every``-th episode; its steps enter the demonstration buffer and the learner samples
half of each batch from it (RLPD/HIL-SERL 50/50). ``demos``: no human; the learner starts
with 20 episodes of the same controller's demonstrations (RLPD 50/50). ``none``: no human,
no demonstrations (``offline_ratio=0``). ``pretrained``: offline-pretrained then online: the
same 20 demonstrations, ``--pretrain-steps`` Cal-QL updates on them in the learner before the
actor starts, then SAC online (WSRL's switch) with the demonstrations kept at 50/50; its
"before" is the pretrained policy, and the pretraining time is reported apart
(``learner_start_s``). ``--paced``: the actor's twin keeps to wall-clock time (real-time
pacing, as a physical robot); unpaced, only the actor's loop sets the rate.

Task: PointMaze twin; ``--maze open`` is a 2×2 room without inner walls (``maze_map``
override), ``--reward dense`` gymnasium-robotics' ``exp(-distance)`` reward; success = the
ball within 0.45 m of the goal (the twin's flag).

Run: ``python benchmarks/bench_online_robot.py [--modes human none] [--seeds 0] [--episodes 60]
[--out online_robot.json]``; wall time is about ``episodes · max_steps / rate`` per run plus
the learner's catch-up.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import RESULTS_DIR, command_line, environment, write_json  # noqa: E402
from robotrl.real_robot.online_eval import LEARNER, MAZES, evaluate_trial, run_twin_trial

def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--modes", nargs="+", default=["human", "demos", "none", "pretrained"],
                   choices=["human", "demos", "none", "pretrained"])
    p.add_argument("--pretrain-steps", type=int, default=1000, help="offline Cal-QL updates of mode pretrained")
    p.add_argument("--paced", action="store_true", help="the actor's twin keeps to wall-clock time (every mode)")
    p.add_argument("--paced-modes", nargs="*", default=[], choices=["human", "demos", "none", "pretrained"],
                   help="modes run a second time with the paced twin (after the --modes runs)")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--max-steps", type=int, default=150)
    p.add_argument("--rate", type=float, default=100.0, help="actor control rate (Hz)")
    p.add_argument("--utd", type=float, default=1.0, help="learner critic updates per transition received (trainer.utd)")
    p.add_argument("--push", type=float, default=1.0, help="weights push period (s)")
    p.add_argument("--every", type=int, default=2, help="the scripted human drives every n-th episode")
    p.add_argument("--maze", default="open", choices=sorted(MAZES))
    p.add_argument("--reward", default="dense", choices=["dense", "sparse"])
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--warmup", type=int, default=500)
    p.add_argument("--learner", nargs="*", default=list(LEARNER), help="extra learner Hydra overrides")
    p.add_argument("--eval-seeds", type=int, default=20)
    p.add_argument("--eval-every", type=float, default=20.0, help="evaluate the version nearest every this many s")
    p.add_argument("--out", default="online_robot.json")
    p.add_argument("--merge", action="store_true", help="keep the other runs already in --out (same settings)")
    a = p.parse_args(argv)
    seeds = list(range(10_000, 10_000 + a.eval_seeds))
    path = Path(a.out) if Path(a.out).is_absolute() else RESULTS_DIR / a.out
    plan = [(m, a.paced) for m in a.modes] + [(m, True) for m in a.paced_modes if not a.paced]
    planned = {(m, s, paced) for m, paced in plan for s in a.seeds}
    prev = json.loads(path.read_text()) if a.merge and path.exists() else {}
    runs = [r for r in prev.get("runs", []) if (r["mode"], r["seed"], r.get("paced", False)) not in planned]
    commands = [*prev.get("commands", []), command_line()]
    out: dict = {}
    for mode, paced in plan:
        for seed in a.seeds:
            with tempfile.TemporaryDirectory(prefix="bench-online-") as d:
                r = run_twin_trial(Path(d), mode=mode, seed=seed, episodes=a.episodes, max_steps=a.max_steps,
                                   rate=a.rate, utd=a.utd, push_s=a.push, every=a.every, maze=a.maze, reward=a.reward,
                                   hidden=a.hidden, batch=a.batch, warmup=a.warmup, learner_overrides=a.learner,
                                   pretrain_steps=a.pretrain_steps, paced=paced)
                ev = evaluate_trial(r, maze=a.maze, reward=a.reward, max_steps=a.max_steps, seeds=seeds,
                                    every_s=a.eval_every)
            s, st = r["summary"], r["status"]
            runs.append({"mode": mode, "seed": seed, "paced": paced, "wall_s": round(r["wall_s"], 1),
                         "actor_s": round(r["actor_s"], 1), "learner_start_s": round(r["learner_start_s"], 1),
                         "episodes": s["episodes"], "steps": s["steps"],
                         "interventions": int(sum(s["interventions_per_episode"])), "updates": st["updates"],
                         "versions": st["version"], "success_before": ev["before"]["success"],
                         "success_after": ev["after"]["success"], "return_before": ev["before"]["mean_return"],
                         "return_after": ev["after"]["mean_return"], "curve": ev["curve"]})
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "curve"}), flush=True)
            out = {"benchmark": "online_robot", "commands": commands, "config": vars(a), "eval_seeds": seeds,
                   "runs": runs, "table": table(runs), "environment": environment(),
                   "note": "shared machine (2 cores, other agents' jobs running): wall times are indicative only"}
            write_json(path, out)  # after every run: a run cut short keeps what was measured
    print(out.get("table", ""))
    return out


def table(runs: list[dict], level: float = 0.8) -> str:
    """Markdown table per mode: success before/after (mean over seeds), minutes until the evaluated
    success first reached ``level`` (median over seeds; "-": not within the run), wall time, updates."""
    import statistics

    rows = [f"| mode | seeds | success before | success after | minutes to ≥ {level:.0%} | wall min | updates |",
            "| --- | --- | --- | --- | --- | --- | --- |"]
    for mode, paced in [(m, p) for p in (False, True) for m in ("human", "demos", "none", "pretrained")]:
        rs = [r for r in runs if r["mode"] == mode and r.get("paced", False) == paced]
        if not rs:
            continue
        hit = [next((c["minutes"] for c in r["curve"] if c["success"] >= level), None) for r in rs]
        reached = [h for h in hit if h is not None]
        t = f"{statistics.median(reached):.1f} ({len(reached)}/{len(rs)})" if reached else "-"
        rows.append(f"| {mode}{' (paced)' if paced else ''} | {len(rs)} | {statistics.mean(r['success_before'] for r in rs):.2f} | "
                    f"{statistics.mean(r['success_after'] for r in rs):.2f} | {t} | "
                    f"{statistics.mean(r['wall_s'] for r in rs) / 60:.1f} | "
                    f"{statistics.mean(r['updates'] for r in rs):.0f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
