"""Reset-free (RoboFuME) vs reset-based Cal-QL online on PointMaze UMaze with a fixed start and goal (issue 46 item 4).

The task: ``PointMaze_UMaze-v3`` goal reaching with ``maze_map`` start cell ``r`` (bottom left) and goal cell ``g``
(top left), the two ends of the U; the backward task swaps them. Data: the project's PointMaze recipe (Minari's
noisy full-speed planner, ``--dataset-steps`` steps of each task, generated once). Per seed, each with its own
classifiers and pretrainings:

1. a success classifier per task, ``robotrl train agent=reward-classifier`` on the recording's success labels;
2. Cal-QL pretraining per task (``experiment=calql``, ``--pretrain-steps`` updates: few on purpose, so the online
   phase starts from a weak forward policy and improvement, not only retention, can show);
3. reset-based: ``experiment=calql-online`` from the forward pretraining, ``--online-steps`` env steps, the task's
   resets after every episode;
4. reset-free: ``experiment=reset-free`` from both pretrainings, the same ``--online-steps`` env steps (both phases
   together), the classifiers as rewards, one simulator reset plus the interventions (``max_timeouts`` timeouts in
   a row of one phase; ``intervene=true``).

Both are evaluated the same way: the forward policy from the task's standard resets, ``--eval-episodes`` episodes
every ``--eval-every`` env steps (evaluation seeds 10000 + seed + i, the runner's). CPU-sized networks (the
quick tier's deviations: 2 LayerNorm critic heads, an actor and critic of two ``--width`` layers, UTD 1)::

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python3 benchmarks/bench_reset_free.py --seeds 0 --out /tmp/rf-seed0.json
    python3 benchmarks/bench_reset_free.py --merge /tmp/rf-seed*.json     # the table over seeds

Writes (``--out``, default ``benchmarks/results/studies/reset-free/results.json``) per seed and contender the curve
``[(env steps, success rate)]``, the offline success, the final and ending (mean of the last ``ENDING_EVALS``
evaluations) success, env resets (reset-based: the online episodes it began, each with a reset; reset-free: the
simulator resets, ``sim_resets``) and human resets; and over seeds the IQM with a 95 % bootstrap CI of each, and the
ratio reset-free / reset-based of the final and of the ending success, of the IQMs and per seed. ``--merge`` keeps each
file's command, args and environment (``parts``) and refuses files run with different study settings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import environment, seed_study, seed_table, set_threads, write_json  # noqa: E402

FWD_MAZE = [[1, 1, 1, 1, 1], [1, "g", 0, 0, 1], [1, 1, 1, 0, 1], [1, "r", 0, 0, 1], [1, 1, 1, 1, 1]]
BWD_MAZE = [[1, 1, 1, 1, 1], [1, "r", 0, 0, 1], [1, 1, 1, 0, 1], [1, "g", 0, 0, 1], [1, 1, 1, 1, 1]]
FWD_ID, BWD_ID = "robotrl/pointmaze/umaze-fixed-forward-v1", "robotrl/pointmaze/umaze-fixed-backward-v1"
#: The classifiers' own labelled recordings (``--classifier-data around-goal``): the scene goes on past the success.
FWD_CLF_ID, BWD_CLF_ID = "robotrl/pointmaze/umaze-fixed-forward-clf-v1", "robotrl/pointmaze/umaze-fixed-backward-clf-v1"
CONTENDERS = ("reset-based", "reset-free")

SETTINGS = ("dataset_steps", "pretrain_steps", "online_steps", "eval_every", "eval_episodes", "max_timeouts", "width",
            "classifier_data", "classifier_noise", "classifier_hover", "classifier_steps", "goals")
#: What a study run before ``--classifier-data`` existed ran (its files have no such arguments).
LEGACY = {"classifier_data": "task", "classifier_noise": None, "classifier_hover": None, "classifier_steps": None,
          "goals": "scene"}


def _ratio(free: float, based: float) -> float | None:
    """reset-free / reset-based success; ``None`` when the reset-based success is 0 (no ratio)."""
    return free / based if based > 0 else None


def merge_parts(files: list[str]) -> list[dict]:
    """Each merged file's ``command``, study ``args`` and ``environment`` (load, time), in the order given.

    Raises:
        ValueError: the files were run with different study settings (``SETTINGS``); rerun the odd seed with the
            others' arguments.
    """
    parts = []
    for f in files:
        d = json.loads(Path(f).read_text())
        parts.append({"file": str(f), "command": d["command"], "args": d["args"], "environment": d["environment"]})
    first = {k: parts[0]["args"].get(k, LEGACY.get(k)) for k in SETTINGS}
    for part in parts[1:]:
        other = {k: part["args"].get(k, LEGACY.get(k)) for k in SETTINGS}
        if other != first:
            raise ValueError(f"--merge: {part['file']} was run with {other}, {parts[0]['file']} with {first}; "
                             "rerun that seed with the same study arguments")
    return parts


def _net(width: int) -> list[str]:
    return [f"agent.model.hidden=[{width},{width}]", f"agent.model.critic_hidden=[{width},{width}]",
            "agent.model.num_critics=2", "agent.model.target_subset=null", "agent.model.critic_layer_norm=true"]


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _data(ds: str) -> list[str]:
    """The run's dataset: a recorded one, in its own recorded env (the fixed maze)."""
    return ["env=pointmaze-umaze", "env.name=null", f"dataset.id={ds}", "dataset.recipe=null", "dataset.generate=false"]


def ensure_datasets(steps: int, classifier_steps: int = 0, classifier_noise: float = 0.5,
                    classifier_hover: float = 1.0) -> None:
    """Each task's recording (the pretraining's data; episodes end at the first success) and, with
    ``classifier_steps > 0``, each classifier's own labelled recording: the planner drives to the goal and then
    keeps moving around it (points within ``classifier_hover`` m, :class:`robotrl.collect.pointmaze.MazePlanner`'s
    ``hover_radius``; action noise ``classifier_noise``) for the whole time limit (``continuing_task``), each step
    labelled with the task's success (distance <= 0.45 m). That is the labelled recording HIL-SERL's operator makes:
    many frames at the goal and near misses on every side of it, where the task's recording has one success frame
    per episode and no state past it."""
    from robotrl.collect.pointmaze import collect_pointmaze
    from robotrl.data import datasets_root

    jobs = [(FWD_ID, FWD_MAZE, 0, steps, {}, {}), (BWD_ID, BWD_MAZE, 1, steps, {}, {})]
    if classifier_steps > 0:
        around = {"action_noise": classifier_noise, "hover_radius": classifier_hover}
        going_on = {"continuing_task": True, "reset_target": False}
        jobs += [(FWD_CLF_ID, FWD_MAZE, 2, classifier_steps, around, going_on),
                 (BWD_CLF_ID, BWD_MAZE, 3, classifier_steps, around, going_on)]
    for ds, maze, seed, n, planner, task in jobs:
        if not (datasets_root() / ds / "data" / "metadata.json").exists():
            collect_pointmaze("umaze", num_steps=n, seed=seed, dataset_id=ds, env_kwargs={"maze_map": maze, **task},
                              progress=False, ref_episodes=20, **planner)


#: Distance bands (m from the goal) of :func:`probe_classifier`; the task's success radius is 0.45 m.
PROBE_BANDS = ((0.0, 0.45), (0.45, 0.55), (0.55, 0.7), (0.7, 1.0))


def probe_classifier(path: Path, n: int = 20000, seed: int = 0) -> dict:
    """Where the forward classifier says success: the share of ``n`` ball positions in the goal's corridor
    (x in [-1.4, 0.5], y in [0.6, 1.4], uniform; the goal drawn within its cell's +-0.25 m as the task draws it) it
    calls a success, per distance band from the goal (:data:`PROBE_BANDS`), with the ball at rest and moving
    (velocity ~ N(0, 2^2) per axis). A classifier that learnt the success radius says ~1 inside 0.45 m and ~0
    outside; one that learnt a region fires well beyond it (the diagnosis in docs/algorithms/reset-free.md)."""
    from robotrl.envs import env_info
    from robotrl.real_robot.reward_classifier import load_classifier

    clf, thr = load_classifier(path)
    layout = env_info("pointmaze-umaze", {"maze_map": FWD_MAZE}).layout
    sl = layout.slices
    rng = np.random.default_rng(seed)
    goal = np.array([-1.0, 1.0]) + rng.uniform(-0.25, 0.25, (n, 2))  # the goal cell (row 1, col 1) of FWD_MAZE
    pos = np.c_[rng.uniform(-1.4, 0.5, n), rng.uniform(0.6, 1.4, n)]
    dist = np.linalg.norm(pos - goal, axis=1)
    out = {}
    for mode, vel in (("rest", np.zeros((n, 2))), ("moving", rng.normal(0.0, 2.0, (n, 2)))):
        obs = np.zeros((n, layout.size), np.float32)
        obs[:, sl["observation"]] = np.c_[pos, vel]
        obs[:, sl["achieved_goal"]], obs[:, sl["desired_goal"]] = pos, goal
        say = clf.prob(obs) >= thr
        out[mode] = {f"{lo}-{hi}": round(float(say[(dist >= lo) & (dist < hi)].mean()), 3) for lo, hi in PROBE_BANDS}
    return out


def _curve(history: list[dict]) -> list[list[float]]:
    return [[h["step"], h["success_rate"]] for h in history if h["phase"] == "online" and "success_rate" in h]


def _episodes(run_dir: Path) -> int:
    """Episodes a reset-based run's online phase began, each with an env reset (distinct episode ids of its buffer)."""
    from robotrl.checkpoint import load_arrays

    b = load_arrays(run_dir / "checkpoints" / "online_buffer.npz")
    return int(np.unique(np.asarray(b["episode_id"])[: int(b["size"])]).size)


def run_seed(seed: int, args, root: Path) -> dict:
    from robotrl.experiment import build_trainer
    from robotrl.real_robot.reward_classifier import run_train
    from robotrl.stats import ENDING_EVALS

    common = [f"seed={seed}", "trainer.progress=false", f"trainer.eval_episodes={args.eval_episodes}",
              "trainer.eval_envs=5", "torch_threads=1", "device=cpu", *_net(args.width)]
    out: dict = {}
    clf, pre = {}, {}
    t0 = time.perf_counter()
    around = args.classifier_data == "around-goal"
    for name, ds, clf_ds in (("forward", FWD_ID, FWD_CLF_ID), ("backward", BWD_ID, BWD_CLF_ID)):
        clf[name] = root / f"clf-{name}-seed{seed}"
        s = run_train(_compose(["agent=reward-classifier", *_data(clf_ds if around else ds), f"seed={seed}",
                                "agent.model.steps=1500"]), clf[name])
        out[f"classifier_{name}"] = {k: s["heldout"][k] for k in ("precision", "recall", "f1", "auc")}
        if name == "forward":
            out["classifier_forward"]["says_success_by_distance"] = probe_classifier(clf[name])
        pre[name] = root / f"pre-{name}-seed{seed}"
        build_trainer(_compose(["experiment=calql", *_data(ds), *common, "agent.model.critic_init=data",
                                f"trainer.offline_steps={args.pretrain_steps}",
                                f"trainer.eval_every={args.pretrain_steps}",
                                f"trainer.checkpoint_every={args.pretrain_steps}", f"run_dir={pre[name]}"]),
                      pre[name], overrides=[]).fit()
    out["prepare_wall_s"] = time.perf_counter() - t0
    online = ["trainer.utd=1", "trainer.batch_size=256", f"trainer.online_steps={args.online_steps}",
              f"trainer.eval_every={args.eval_every}", f"trainer.checkpoint_every={args.online_steps}",
              f"trainer.init_from={pre['forward']}"]
    for name in args.contenders:
        run = root / f"{name}-seed{seed}"
        extra = ["experiment=calql-online"] if name == "reset-based" else [
            "experiment=reset-free", f"reset_free.backward_dataset.id={BWD_ID}", "reset_free.backward_dataset.generate=false",
            f"reset_free.forward_classifier={clf['forward']}", f"reset_free.backward_classifier={clf['backward']}",
            f"reset_free.backward_init_from={pre['backward']}", f"reset_free.max_timeouts={args.max_timeouts}",
            f"reset_free.goals={args.goals}"]
        t0 = time.perf_counter()
        tr = build_trainer(_compose([*extra, *_data(FWD_ID), *common, *online, f"run_dir={run}"]), run, overrides=[])
        s = tr.fit()
        wall = time.perf_counter() - t0
        curve = _curve(tr.history)
        succ = [c[1] for c in curve]
        row = {"curve": curve, "offline_success": s.get("offline_success_rate"), "final": succ[-1],
               "ending": float(np.mean(succ[-ENDING_EVALS:])), "best": max(succ), "wall_s": wall}
        if name == "reset-based":
            row.update(env_resets=_episodes(run), human_resets=0)
        else:
            row.update(env_resets=s["sim_resets"], human_resets=s["human_resets"],
                       **{k: s[k] for k in ("forward_episodes", "forward_successes", "forward_task_successes",
                                            "forward_timeouts", "forward_env_steps",
                                            "backward_episodes", "backward_successes", "backward_timeouts",
                                            "backward_env_steps")})
        out[name] = row
        print(f"seed {seed} {name}: offline {row['offline_success']} final {row['final']:.2f} ending {row['ending']:.2f} "
              f"env resets {row['env_resets']} human resets {row['human_resets']} ({wall:.0f} s)", flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--dataset-steps", type=int, default=20000)
    p.add_argument("--pretrain-steps", type=int, default=1500)
    p.add_argument("--online-steps", type=int, default=5000)
    p.add_argument("--eval-every", type=int, default=1000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--max-timeouts", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--classifier-data", choices=("around-goal", "task"), default="around-goal",
                   help="what the success classifiers learn from: their own labelled recordings around the goal "
                        "(ensure_datasets) or the task recordings the pretraining uses (one success frame per episode)")
    p.add_argument("--classifier-noise", type=float, default=0.5, help="action noise std of the around-goal recordings")
    p.add_argument("--classifier-hover", type=float, default=1.0,
                   help="radius (m) around the goal the around-goal recordings move within once there")
    p.add_argument("--classifier-steps", type=int, default=20000, help="env steps of each around-goal recording")
    p.add_argument("--goals", choices=("scene", "maze"), default="scene",
                   help="reset_free.goals: the scene keeps the goals of its last simulator reset (scene, the headline "
                        "runs), or each phase draws its goal as the task's reset does (maze; maze_goals.json)")
    p.add_argument("--contenders", nargs="+", choices=CONTENDERS, default=list(CONTENDERS),
                   help="run only these (a pilot; the table needs both)")
    p.add_argument("--root", default="/tmp/bench_reset_free")
    p.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "studies" / "reset-free" /
                                        "results.json"))
    p.add_argument("--merge", nargs="+", default=None, help="only build the table from these per-seed result files")
    args = p.parse_args()
    set_threads(1)
    os.environ.setdefault("MINARI_DATASETS_PATH", str(Path(args.root) / "minari"))
    if not args.merge:
        ensure_datasets(args.dataset_steps, args.classifier_steps if args.classifier_data == "around-goal" else 0,
                        args.classifier_noise, args.classifier_hover)
    parts = merge_parts(args.merge) if args.merge else None
    per_seed, commands = seed_study(args, run_seed)
    env = parts[0]["environment"] if parts else environment()
    if set(args.contenders) != set(CONTENDERS):  # a pilot: the per-seed rows, no comparison
        write_json(Path(args.out), {"command": " ".join(sys.argv), "commands": commands, "args": vars(args),
                                    "environment": env, "per_seed": {str(k): v for k, v in per_seed.items()}})
        return
    table = seed_table(per_seed, CONTENDERS, ("final", "ending", "env_resets", "human_resets"))
    ratio = _ratio(table["reset-free"]["final"]["iqm"], table["reset-based"]["final"]["iqm"])
    ratio_ending = _ratio(table["reset-free"]["ending"]["iqm"], table["reset-based"]["ending"]["iqm"])
    ratio_seeds = {str(s): {k: _ratio(r["reset-free"][k], r["reset-based"][k]) for k in ("final", "ending")}
                   for s, r in sorted(per_seed.items())}
    print(f"\nseeds {args.seeds}")
    print(f"{'contender':<13}{'final success':>22}{'ending success':>22}{'env resets':>22}{'human resets':>22}")
    for name, row in table.items():
        cells = "".join(f"{row[k]['iqm']:.2f} [{row[k]['ci95'][0]:.2f},{row[k]['ci95'][1]:.2f}]".rjust(22)
                        for k in ("final", "ending", "env_resets", "human_resets"))
        print(f"{name:<13}{cells}")
    print(f"ratio reset-free / reset-based, IQM: final {ratio if ratio is None else round(ratio, 3)}, ending "
          f"{ratio_ending if ratio_ending is None else round(ratio_ending, 3)}; per seed {ratio_seeds}")
    record = {"command": " ".join(sys.argv), "commands": commands, "args": vars(args), "environment": env,
              "per_seed": {str(k): v for k, v in per_seed.items()}, "table": table, "ratio_final_iqm": ratio,
              "ratio_ending_iqm": ratio_ending, "ratio_per_seed": ratio_seeds}
    if parts:
        record["parts"] = parts
    write_json(Path(args.out), record)


if __name__ == "__main__":
    main()
