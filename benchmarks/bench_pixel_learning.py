"""Offline -> online Q-learning from a camera beside the same run from states, on the same PointMaze episodes.

Issue 17's learning table: a pixel offline->online run on a PointMaze camera task with the state-based run beside it.
Through the real ``robotrl`` commands a user types:

1. ``robotrl collect recipe=<--recipe> num_steps=--data-steps`` twice, once with ``cameras=[topdown]
   image_size=--size``: the same demonstrator and seed, so the same episodes, once with the top-down camera's frames
   (observations ``{"observation", ..., "pixels": {"topdown": uint8 (S, S, 3)}}``) and once without. The script
   checks that both hold the same actions and rewards (``setting.same_transitions``).
2. per seed, states: ``experiment=calql`` (``--offline-steps`` updates) then ``experiment=wsrl`` from it;
   pixels: ``experiment=calql obs=pixels`` then ``experiment=wsrl obs=pixels`` from it. Both WSRL runs: ``--warmup``
   env steps without updates, then ``--online-steps`` in all at UTD ``--utd``, evaluated every ``--eval-every``
   env steps on ``--eval-episodes`` episodes. The pixel agents see the frame and the task's state (the DrQ encoder
   shared by actor and critic, the actor's gradient stopped at it, random shift pad 4).
3. one learning result: per arm and seed the success curve from the pretrained policy (step 0) on, the pretrained
   score as the offline score, wall time = pretraining + fine-tuning.

Networks are CPU-sized for both arms alike (every override in ``setting.networks``): 2 LayerNorm critic heads and
an actor of 64x64 (the full tier's Q-learning study's size), minibatches of 128; the pixel encoder is DrQ's with
``--channels`` channels at ``--size`` px. On a GPU, drop ``--cpu-sized`` to run the experiments' own networks
(10 heads, 256x256, 32 channels).

Usage::

    python benchmarks/bench_pixel_learning.py --seeds 0 1 2 --workers 1      # ~1.5 h on 2 shared CPU cores
    python benchmarks/bench_pixel_learning.py --smoke                        # tiny budgets: checks every command
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import learning_result, run_cli, run_cli_all, write_json  # noqa: E402

ARMS = {"state": ("calql", "wsrl"), "pixels": ("calql", "wsrl")}  # arm -> (pretraining, fine-tuning); the arm is obs=<arm>
LABELS = {"state": "WSRL from states", "pixels": "WSRL from the top-down camera (+ state)"}


def _datasets(args, root: Path) -> dict[str, str]:
    """Collect the two datasets (skipped when present): ``{arm: dataset id}``."""
    import minari

    tag = f"{args.recipe.removeprefix('pointmaze-')}-{args.data_steps // 1000}k"
    ids = {"state": f"robotrl/pointmaze/{tag}-v1", "pixels": f"robotrl/pointmaze/{tag}-top{args.size}-v1"}
    have = set(minari.list_local_datasets())
    for arm, ds in ids.items():
        if ds not in have:
            cams = ["cameras=[topdown]", f"image_size={args.size}"] if arm == "pixels" else []
            run_cli(["collect", f"recipe={args.recipe}", f"num_steps={args.data_steps}", f"dataset_id={ds}", *cams],
                    root / f"collect_{arm}.log")
    return ids


def _same_transitions(ids: dict[str, str]) -> bool:
    """Whether the two datasets hold the same episodes (actions, rewards, terminations)."""
    from robotrl.data import load_dataset

    a, b = (load_dataset(ids[k]) for k in ("state", "pixels"))
    return (a.num_transitions == b.num_transitions and np.array_equal(a.actions, b.actions)
            and np.array_equal(a.rewards, b.rewards) and np.array_equal(a.terminated, b.terminated))


def _networks(args, arm: str) -> list[str]:
    if not args.cpu_sized:
        return []
    net = ["agent.model.num_critics=2", "agent.model.hidden=[64,64]", "agent.model.critic_hidden=[64,64]",
           "agent.model.critic_layer_norm=true", "trainer.batch_size=128"]
    net.append("agent.model.target_subset=null")  # the target's min over both critics, as the camera arm always had
    net = net if arm == "state" else [*net, f"agent.model.channels={args.channels}"]
    return [*net, *(args.pixel_overrides if arm == "pixels" else [])]


def _commands(args, root: Path, ids: dict[str, str], seed: int, arm: str) -> tuple[tuple, tuple]:
    pre_exp, ft_exp = ARMS[arm]
    pre, ft = root / "runs" / f"{arm}_calql_s{seed}", root / "runs" / f"{arm}_wsrl_s{seed}"
    data = [f"dataset={args.recipe}", f"dataset.id={ids[arm]}", "dataset.generate=false",
            f"dataset.recipe_args.num_steps={args.data_steps}"]  # the recipe arguments the data was collected with
    common = [*data, f"obs={arm}", f"seed={seed}", "trainer.progress=false", "torch_threads=1", f"trainer.eval_episodes={args.eval_episodes}",
              *_networks(args, arm)]
    pretrain = (["train", f"experiment={pre_exp}", *common, f"trainer.offline_steps={args.offline_steps}",
                 f"trainer.eval_every={args.offline_steps}", f"trainer.checkpoint_every={args.offline_steps}",
                 f"run_dir={pre}"], pre.with_suffix(".log"))
    finetune = (["train", f"experiment={ft_exp}", *common, f"trainer.init_from={pre}", f"trainer.online_steps={args.online_steps}",
                 f"trainer.online_warmup_steps={args.warmup}", f"trainer.utd={args.utd}", f"trainer.eval_every={args.eval_every}",
                 f"trainer.checkpoint_every={args.eval_every}", f"run_dir={ft}"], ft.with_suffix(".log"))
    return pretrain, finetune


def _run_of(root: Path, seed: int, arm: str) -> dict:
    """One arm and seed as a learning-result run, from the two runs' reports."""
    pre = json.loads((root / "runs" / f"{arm}_calql_s{seed}" / "report.json").read_text())
    ft = json.loads((root / "runs" / f"{arm}_wsrl_s{seed}" / "report.json").read_text())
    hist = ft["history"]  # step 0: the warm-started policy before any online step (phase "offline"), then online
    curve = [[int(h["step"]), float(h["success_rate"])] for h in hist]
    pre_wall, ft_wall = pre["summary"]["wall_time_s"], ft["summary"]["wall_time_s"]
    return {"method": LABELS[arm], "family": arm, "peer": False, "seed": seed, "offline_score": curve[0][1],
            "curve": curve, "return_curve": [[int(h["step"]), float(h["return_mean"])] for h in hist],
            "wall_s": pre_wall + ft_wall, "pretrain_wall_s": pre_wall, "online_wall_s": ft_wall,
            "pretrain_offline_success": pre["summary"].get("final_success_rate"),
            "first_update_step": ft["config"]["trainer"]["online_warmup_steps"],
            # where each phase ran (robotrl.provenance; [] for runs made before it was recorded)
            "provenance": {"pretraining": pre["summary"].get("provenance", []),
                           "fine-tuning": ft["summary"].get("provenance", [])}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--recipe", default="pointmaze-umaze-noisy", help="dataset recipe (and dataset config) of both arms")
    ap.add_argument("--data-steps", type=int, default=30_000)
    ap.add_argument("--size", type=int, default=32, help="camera frame size H = W (px)")
    ap.add_argument("--channels", type=int, default=16, help="DrQ encoder channels with --cpu-sized")
    ap.add_argument("--offline-steps", type=int, default=3_000)
    ap.add_argument("--online-steps", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--utd", type=int, default=2, help="the camera WSRL's UTD (2, configs/tuning/obs), given to both arms")
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--cpu-sized", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--root", default="runs/bench_pixel_learning", help="where the runs go (finished ones are kept)")
    ap.add_argument("--out", default="studies/pixels/learning.json", help="under benchmarks/results/")
    ap.add_argument("--smoke", action="store_true", help="1 seed, tiny budgets")
    ap.add_argument("--arms", nargs="+", choices=sorted(ARMS), default=sorted(ARMS), help="the arms to run (default both)")
    ap.add_argument("--pixel-overrides", nargs="*", default=[],
                    help="extra overrides of the camera arm's two commands (a diagnostic: e.g. the settings of an older "
                         "version), recorded in setting.networks")
    args = ap.parse_args()
    if args.smoke:
        args.seeds, args.data_steps, args.offline_steps, args.online_steps = [0], 2000, 20, 400
        args.warmup, args.eval_every, args.eval_episodes = 100, 200, 2
    root = Path(args.root).resolve()
    os.environ.setdefault("MINARI_DATASETS_PATH", str(root / "minari"))
    os.environ.setdefault("MUJOCO_GL", "osmesa")
    ids = _datasets(args, root)
    same = _same_transitions(ids)
    if not same:
        raise SystemExit(f"the datasets {ids} do not hold the same episodes: the comparison would not be like for like")
    arms = [a for a in ARMS if a in args.arms]
    jobs = {(s, arm): _commands(args, root, ids, s, arm) for s in args.seeds for arm in arms}
    done = {k: [(root / "runs" / f"{k[1]}_{w}_s{k[0]}" / "report.json").exists() for w in ("calql", "wsrl")]
            for k in jobs}
    run_cli_all([jobs[k][0] for k in jobs if not done[k][0]], args.workers)
    run_cli_all([jobs[k][1] for k in jobs if not done[k][1]], args.workers)
    runs = [_run_of(root, s, arm) for s in args.seeds for arm in arms]
    budgets = sorted({s for r in runs for s, _ in r["curve"] if s > 0})
    doc = learning_result("pixel_learning", f"PointMaze UMaze, sparse reward ({args.recipe}, {args.data_steps} steps), "
                          f"top-down camera {args.size}x{args.size} vs state", "success", budgets, runs,
                          setting={"datasets": ids, "same_transitions": same, "args": vars(args),
                                   "networks": {arm: _networks(args, arm) for arm in arms},
                                   "commands": {f"{arm}_s{s}": [" ".join(["robotrl", *jobs[s, arm][i][0]]) for i in (0, 1)]
                                                for s, arm in jobs}})
    out = write_json(args.out, doc)
    for arm in arms:
        rs = [r for r in runs if r["family"] == arm]
        print(f"{LABELS[arm]:45s} offline {[r['offline_score'] for r in rs]} -> final {[r['curve'][-1][1] for r in rs]}"
              f"  ({np.mean([r['wall_s'] for r in rs]):.0f} s per seed)")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
