"""Learning comparison: WSRL vs Cal-QL online (robotrl) vs d3rlpy Cal-QL fine-tuning vs SB3 SAC from scratch.

Same task, same generated Minari dataset, several seeds; every contender is evaluated
with robotrl's :func:`~robotrl.evaluation.evaluate` (same eval env, same episode seeds)
at the same online env-step budgets. Run from the repository root, in the d3rlpy venv
(see ``benchmarks/bench_qlearning.py`` for how to create it)::

    /tmp/d3rlpy-venv/bin/python benchmarks/bench_qlearning_learning.py --smoke        # minutes: plumbing check
    /tmp/d3rlpy-venv/bin/python benchmarks/bench_qlearning_learning.py --seeds 0 1 2 \\
        --offline-steps 50000 --online-steps 50000 --eval-every 5000                  # hours on 2 CPU cores

Contenders (the online phase starts at env step 0 for all):

- ``robotrl-wsrl``: ``experiment=calql`` pretraining, then
  ``experiment=wsrl`` (init from that checkpoint, empty online buffer), with the study's
  ``--robotrl-extra`` (the tiers pass ``critic_init=data``, a deviation from the reference).
- ``robotrl-wsrl-zero``: the same with the reference ``agent.model.critic_init=zero`` (its own
  Cal-QL pretraining, ``robotrl-offline-calql-zero``): the row that compares like with like
  with d3rlpy, whose critic has no data-scaled start.
- ``robotrl-calql-online``: the same checkpoint, ``experiment=calql-online``.
- ``robotrl-rlpd``: ``experiment=rlpd`` from scratch on the same data (symmetric 50/50 offline/online
  batches, ``--rlpd-utd``: the paper's 20 by default; CPU-sized runs pass less and say so).
- ``d3rlpy-calql``: d3rlpy 2.8 ``CalQL`` ``fit`` on the same data, then ``fit_online``
  on a buffer that holds the offline episodes (its documented fine-tuning recipe). It gets
  robotrl's task (:func:`robotrl_settings`, read from the composed ``experiment=wsrl`` config
  with ``--robotrl-extra``): the same reward transform (``agent.reward_scale·r + reward_bias``,
  10r − 5 on the sparse mazes, on the offline data and on every online step), the same
  offline budget (``--offline-steps`` updates of the same batch size), the same critic updates
  per env step (``n_updates`` = WSRL's ``trainer.utd``, after the same no-update warmup), the
  same networks (actor and critic widths, number of critics, critic LayerNorm) and the same
  optimiser and CQL settings (learning rates, γ, τ, a fixed CQL α — d3rlpy's Lagrangian
  tuning of it off —, sampled actions, initial temperature). What stays d3rlpy's: its algorithm (Cal-QL online with the offline episodes in
  the buffer, where WSRL drops them) and, with ``n_updates``, one actor update per critic update
  (WSRL: one per env step).
- ``sb3-sac``: stable-baselines3 SAC from scratch (no data), default hyper-parameters.

Writes ``benchmarks/results/full/qlearning_learning.json``: per contender and seed the curve
``[(env_steps, return_mean, success_rate, online wall s)]`` plus the mean over seeds at each budget,
the onset dip (first online evaluation minus the offline one), wall time, and the ``threshold``
(``--threshold``, success 0.9) of the tables' time-to-threshold column.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from robotrl.bench.tasks._common import environment, results_dir, set_threads, write_json
from robotrl.files import atomic_write
from robotrl.provenance import now, phase_record


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def _curve(history: list[dict], offset: int) -> list[list[float]]:
    """``[[env_steps, return, success, online wall s]]`` (wall: training time, evaluations excluded)."""
    return [[h["step"] - offset, h["return_mean"], h["success_rate"], h.get("train_wall_s", float("nan"))]
            for h in history]


#: robotrl variants: suffix of the mode / pretraining name -> overrides after ``--robotrl-extra`` (they win)
VARIANTS = {"": [], "-zero": ["agent.model.critic_init=zero"]}


def _variant(mode: str) -> str:
    return "-zero" if mode.endswith("-zero") else ""


def pretrain_run(args, seed: int, work: Path, variant: str = "") -> dict:
    """The Cal-QL pretraining every warm-started mode of ``seed`` and ``variant`` starts from
    (``work/calql<variant>-s<seed>``; a killed one resumes from its checkpoint): offline return, wall seconds and
    the critic's scale ``q_minus_mc``."""
    from robotrl.experiment import build_trainer

    pre_dir = work / f"calql{variant}-s{seed}"
    pre = build_trainer(_compose(["experiment=calql", *_common(args, seed), f"trainer.offline_steps={args.offline_steps}",
                                  f"trainer.eval_every={args.offline_steps}", f"run_dir={pre_dir}", *args.robotrl_extra,
                                  *VARIANTS[variant]]), pre_dir)
    pre.fit()
    # the critic's scale at the end of pretraining (Q - Monte-Carlo return on offline data, reward units):
    # far above 0, the online phase first spends its updates dragging the critic down (issue 11's onset)
    gap = pre.agent.q_minus_mc(pre.loop.offline.sample(4096, allow_small=True))
    return {"return_mean": pre.history[-1]["return_mean"], "seconds": pre.wall_time, "q_minus_mc": gap,
            "provenance": pre.provenance.records}


def _common(args, seed: int) -> list[str]:
    return [*_dataset_overrides(args), f"seed={seed}", "trainer.progress=false",
            f"trainer.eval_episodes={args.eval_episodes}", f"torch_threads={args.threads}"]


def online_run(args, seed: int, mode: str, work: Path) -> dict:
    """One robotrl online contender (``experiment=<mode>``) on ``seed`` in ``work/<mode>-s<seed>`` (a killed run
    resumes from its checkpoint). RLPD starts from scratch on the offline data (its paper), the others from the
    seed's Cal-QL checkpoint (:func:`pretrain_run` first). ``seconds``: the run's own wall time, resumed parts
    included."""
    from robotrl.experiment import build_trainer

    d = work / f"{mode}-s{seed}"
    variant = _variant(mode)
    experiment = mode.removesuffix(variant)
    # --warmup is WSRL's and RLPD's no-update warmup; Cal-QL online keeps its config's (0: updates from step 0)
    warm = [f"trainer.online_warmup_steps={args.warmup}"] if experiment in ("wsrl", "rlpd") else []
    init = [f"trainer.utd={args.rlpd_utd}"] if mode == "rlpd" else \
        [f"trainer.init_from={work / f'calql{variant}-s{seed}'}"]
    tr = build_trainer(_compose([f"experiment={experiment}", *_common(args, seed), *init,
                                 f"trainer.online_steps={args.online_steps}", f"trainer.eval_every={args.eval_every}",
                                 *warm, f"run_dir={d}", *args.robotrl_extra, *VARIANTS[variant]]), d)
    tr.fit()
    return {"curve": _curve(tr.history, 0), "seconds": tr.wall_time, "provenance": tr.provenance.records}


def _eval_fn(make_eval_env, episodes: int, seed: int):
    from robotrl.evaluation import evaluate

    def run(policy) -> tuple[float, float]:
        res = evaluate(policy, make_eval_env, episodes, seed=seed + 10_000, num_envs=min(episodes, 10))
        return res["return_mean"], res["success_rate"]

    return run


def robotrl_settings(args) -> dict:
    """What robotrl's WSRL run of this study gets (the composed ``experiment=wsrl`` config with ``--robotrl-extra``):
    reward transform, discount, UTD, batch, networks, optimiser and CQL settings — the task the d3rlpy peer is given."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(_compose(["experiment=wsrl", *_dataset_overrides(args), *args.robotrl_extra]),
                                 resolve=True)
    agent, model, trainer = cfg["agent"], cfg["agent"]["model"], cfg["trainer"]
    return {"reward_scale": float(agent["reward_scale"]), "reward_bias": float(agent["reward_bias"]),
            "gamma": float(agent["gamma"]), "utd": int(trainer["utd"]), "batch_size": int(trainer["batch_size"]),
            "actor_hidden": list(model["hidden"]), "critic_hidden": list(model["critic_hidden"]),
            "num_critics": int(model["num_critics"]), "critic_layer_norm": bool(model["critic_layer_norm"]),
            "actor_lr": float(model["actor_lr"]), "critic_lr": float(model["critic_lr"]),
            "alpha_lr": float(model["alpha_lr"]), "tau": float(model["tau"]), "init_alpha": float(model["init_alpha"]),
            "cql_alpha": float(model["cql_alpha"]), "cql_n_actions": int(model["cql_n_actions"]),
            "critic_init": str(model["critic_init"])}


def d3rlpy_run(args, seed: int, data, make_env, make_eval_env) -> dict:
    """d3rlpy's Cal-QL on robotrl's task (module doc; :func:`robotrl_settings`)."""
    import d3rlpy
    import gymnasium as gym

    task = robotrl_settings(args)
    scale, bias = task["reward_scale"], task["reward_bias"]
    d3rlpy.seed(seed)
    terminals = data.terminated.astype(np.float32)
    timeouts = (data.truncated | np.isin(np.arange(data.num_transitions), data.episode_ends - 1)) & ~data.terminated
    dataset = d3rlpy.dataset.MDPDataset(data.observations, data.actions, scale * data.rewards + bias, terminals,
                                        timeouts=timeouts.astype(np.float32))
    enc = d3rlpy.models.encoders.VectorEncoderFactory
    algo = d3rlpy.algos.CalQLConfig(
        batch_size=task["batch_size"], gamma=task["gamma"], tau=task["tau"], n_critics=task["num_critics"],
        actor_learning_rate=task["actor_lr"], critic_learning_rate=task["critic_lr"],
        temp_learning_rate=task["alpha_lr"], initial_temperature=task["init_alpha"],
        conservative_weight=task["cql_alpha"], n_action_samples=task["cql_n_actions"],
        alpha_learning_rate=0.0,  # robotrl's CQL(H) weight is fixed (cql_alpha); d3rlpy's Lagrangian tuning off
        actor_encoder_factory=enc(hidden_units=task["actor_hidden"]),
        critic_encoder_factory=enc(hidden_units=task["critic_hidden"], use_layer_norm=task["critic_layer_norm"]),
    ).create(device="cpu:0")
    evaluate = _eval_fn(make_eval_env, args.eval_episodes, seed)  # raw rewards: the score is the task's success
    t = time.time()
    algo.fit(dataset, n_steps=args.offline_steps, n_steps_per_epoch=args.offline_steps, show_progress=False,
             save_interval=10**9, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    curve = [[0, *evaluate(algo.predict), 0.0]]
    buffer = d3rlpy.dataset.ReplayBuffer(d3rlpy.dataset.InfiniteBuffer(), episodes=dataset.episodes)
    env = gym.wrappers.TransformReward(make_env(), lambda r: scale * r + bias)  # the online rewards robotrl trains on
    done, online_s = 0, 0.0
    while done < args.online_steps:  # fit_online in chunks so every contender is evaluated at the same budgets
        n = min(args.eval_every, args.online_steps - done)
        t1 = time.time()
        # WSRL's UTD critic updates per env step after its no-update warmup (fit_online counts steps per call)
        algo.fit_online(env, buffer, n_steps=n, n_steps_per_epoch=n, n_updates=task["utd"],
                        update_start_step=max(0, args.warmup - done), show_progress=False,
                        save_interval=10**9, logger_adapter=d3rlpy.logging.NoopAdapterFactory())
        online_s += time.time() - t1
        done += n
        curve.append([done, *evaluate(algo.predict), online_s])
    return {"curve": curve, "seconds": time.time() - t, "task": task}


def sb3_run(args, seed: int, make_env, make_eval_env) -> dict:
    from stable_baselines3 import SAC

    evaluate = _eval_fn(make_eval_env, args.eval_episodes, seed)
    t = time.time()
    model = SAC("MlpPolicy", make_env(), seed=seed, learning_starts=min(args.warmup, args.eval_every), verbose=0)
    curve = [[0, *evaluate(lambda o: model.predict(o, deterministic=True)[0]), 0.0]]
    done, online_s = 0, 0.0
    while done < args.online_steps:
        n = min(args.eval_every, args.online_steps - done)
        t1 = time.time()
        model.learn(n, reset_num_timesteps=False)
        online_s += time.time() - t1
        done += n
        curve.append([done, *evaluate(lambda o: model.predict(o, deterministic=True)[0]), online_s])
    return {"curve": curve, "seconds": time.time() - t}


def summarize(per_seed: dict[str, list[dict]], first_update: dict[str, int] | None = None) -> dict:
    """Means over seeds. ``first_update``: per contender, the online env step after which updates start
    (robotrl's ``--warmup``, SB3's ``learning_starts``, 0 for d3rlpy); with it, the dip is also measured at
    the first evaluation after updates started (the plain onset dip is 0 by construction when the first
    evaluation falls inside a no-update warmup)."""
    out = {}
    first_update = first_update or {}
    for name, runs in per_seed.items():
        curves = [np.asarray(r["curve"], float) for r in runs if "curve" in r]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        stack = np.stack([c[:n] for c in curves])
        out[name] = {"steps": stack[0, :, 0].tolist(), "return_mean_over_seeds": stack[:, :, 1].mean(0).tolist(),
                     "success_mean_over_seeds": stack[:, :, 2].mean(0).tolist(),
                     "seconds_mean": float(np.mean([r["seconds"] for r in runs]))}
        if n >= 2:  # curve[0]: the policy before any online step (offline-trained, or untrained for sb3-sac)
            out[name]["start_return_mean"] = float(stack[:, 0, 1].mean())
            out[name]["onset_dip_return_mean"] = float((stack[:, 1, 1] - stack[:, 0, 1]).mean())
            out[name]["onset_dip_success_mean"] = float((stack[:, 1, 2] - stack[:, 0, 2]).mean())
            out[name]["max_drop_return_mean"] = float((stack[:, 1:, 1].min(1) - stack[:, 0, 1]).mean())
            after = np.flatnonzero(stack[0, :, 0] > first_update.get(name, 0))
            if name in first_update and len(after):
                i = int(after[0])
                out[name]["first_update_step"] = int(first_update[name])
                out[name]["dip_after_updates_start_step"] = float(stack[0, i, 0])
                out[name]["dip_after_updates_start_return_mean"] = float((stack[:, i, 1] - stack[:, 0, 1]).mean())
                out[name]["dip_after_updates_start_success_mean"] = float((stack[:, i, 2] - stack[:, 0, 2]).mean())
    for name in ("robotrl-offline-calql", "robotrl-offline-calql-zero"):
        offline = per_seed.get(name, [])
        if offline:
            out[name] = {"return_mean_over_seeds": float(np.mean([r["return_mean"] for r in offline])),
                         "seconds_mean": float(np.mean([r["seconds"] for r in offline])),
                         "q_minus_mc_per_seed": [r.get("q_minus_mc") for r in offline]}
    return out


FIRST_UPDATE = {"robotrl-wsrl": "warmup", "robotrl-wsrl-zero": "warmup", "robotrl-rlpd": "warmup",
                "robotrl-calql-online": 0, "d3rlpy-calql": "warmup", "sb3-sac": "warmup"}
PEERS = {"d3rlpy-calql", "sb3-sac"}
FROM_SCRATCH = {"sb3-sac", "robotrl-rlpd"}  # no pretrained policy: no offline score, no onset dip


def _dataset_overrides(args) -> list[str]:
    """Hydra overrides selecting the data: the dataset config (``--dataset``: its recipe generates the data on
    first use), the dataset id and, if given, the generated size."""
    return ([f"dataset={args.dataset}"] if args.dataset else []) + [f"dataset.id={args.dataset_id}"] + (
        [f"dataset.recipe_args.num_steps={args.dataset_steps}"] if args.dataset_steps else [])


def _setup(args):
    """The dataset (generated on first use), and the train / eval env builders of every contender."""
    from robotrl.data import load_dataset
    from robotrl.envs import make_env
    from robotrl.experiment import ensure_dataset
    from robotrl.task_mdp import eval_env_args

    cfg = _compose(_dataset_overrides(args))
    data = load_dataset(ensure_dataset(cfg.dataset))
    env_name = cfg.env.name
    ev = eval_env_args(cfg.env, data)  # the env robotrl's trainer evaluates in (the data's MDP)

    def make_train_env():
        return make_env(env_name)

    def make_eval_env():
        return make_env(ev["name"], env_kwargs=ev["env_kwargs"], max_episode_steps=ev["max_episode_steps"])

    return data, make_train_env, make_eval_env


def run_unit(args, seed: int, unit: str, work: str) -> dict:
    """One unit of the study in its own process (``--workers`` of them side by side, ``--threads`` torch
    threads each): ``robotrl-offline-calql`` (the seed's Cal-QL pretraining), ``robotrl-<mode>``,
    ``d3rlpy-calql`` or ``sb3-sac``; returns ``{"curve": [[env_steps, return, success, online wall s]],
    "seconds": s}`` (the pretraining: its offline return and critic scale instead of a curve)."""
    set_threads(args.threads)
    started = now()
    if unit.startswith("robotrl-offline-calql"):
        return pretrain_run(args, seed, Path(work), _variant(unit))
    if unit.startswith("robotrl-"):
        return online_run(args, seed, unit.removeprefix("robotrl-"), Path(work))
    data, make_train_env, make_eval_env = _setup(args)
    if unit == "d3rlpy-calql":
        res = d3rlpy_run(args, seed, data, make_train_env, make_eval_env)
    else:
        res = sb3_run(args, seed, make_train_env, make_eval_env)
    return {**res, "provenance": [phase_record(unit, started, "cpu")]}


def units(args) -> list[tuple[str, str | None]]:
    """The study's contenders in run order, each with the unit it needs first (the pretraining of its seed):
    WSRL and RLPD (the issue's targets) first, then the peers (the longest first), Cal-QL online last."""
    out: list[tuple[str, str | None]] = []
    if "robotrl" not in args.skip:
        if set(args.modes) - {"rlpd", "wsrl-zero"}:
            out.append(("robotrl-offline-calql", None))
        if "wsrl-zero" in args.modes:
            out.append(("robotrl-offline-calql-zero", None))
        for mode in ("wsrl", "wsrl-zero", "rlpd"):
            if mode in args.modes:
                out.append((f"robotrl-{mode}", None if mode == "rlpd" else f"robotrl-offline-calql{_variant(mode)}"))
    out += [(p, None) for p in ("d3rlpy-calql", "sb3-sac") if p.split("-")[0] not in args.skip]
    if "robotrl" not in args.skip and "calql-online" in args.modes:
        out.append(("robotrl-calql-online", "robotrl-offline-calql"))
    return out


def to_runs(per_seed: dict[str, list[dict]], seeds: list[int], args) -> list[dict]:
    """The suite's normalised learning form (``robotrl.bench``): one row per contender and seed; the
    primary metric is the success rate, returns ride along; ``offline_score`` is the score before any
    online step (None for SB3 SAC, which starts untrained). ``wall_s`` is the whole pipeline of the
    method: for robotrl's modes the shared Cal-QL pretraining of that seed (``pretrain_wall_s``) plus
    the online phase (``online_wall_s``), as d3rlpy's includes its offline ``fit``."""
    runs = []
    for name, rows in per_seed.items():
        if name.startswith("robotrl-offline-calql"):
            continue
        offline = per_seed.get(f"robotrl-offline-calql{_variant(name)}", [])
        for i, (seed, r) in enumerate(zip(seeds, rows)):
            c = np.asarray(r["curve"], float)
            row = {"method": name, "family": "qlearning", "peer": name in PEERS, "seed": seed,
                   "offline_score": None if name in FROM_SCRATCH else float(c[0, 2]),
                   "curve": c[:, [0, 2]].tolist(), "return_curve": c[:, [0, 1]].tolist(), "wall_s": r["seconds"],
                   "first_update_step": args.warmup if FIRST_UPDATE[name] == "warmup" else 0}
            if c.shape[1] > 3 and np.isfinite(c[:, 3]).all():
                row["wall_curve"] = c[:, [0, 3]].tolist()
            # where each phase ran (robotrl.provenance; absent from units cached before it was recorded)
            row["provenance"] = {"run": r.get("provenance", [])}
            if name.startswith("robotrl") and name not in FROM_SCRATCH and i < len(offline):
                row.update(pretrain_wall_s=offline[i]["seconds"], online_wall_s=r["seconds"],
                           wall_s=offline[i]["seconds"] + r["seconds"])
                row["provenance"]["pretraining"] = offline[i].get("provenance", [])
            runs.append(row)
    return runs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=1, help="(seed, contender) units run in this many processes side by side")
    ap.add_argument("--offline-steps", type=int, default=50_000)
    ap.add_argument("--online-steps", type=int, default=50_000)
    ap.add_argument("--eval-every", type=int, default=5_000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5_000,
                    help="WSRL's no-update warmup and SB3's learning_starts (Cal-QL online and d3rlpy update from step 0)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dataset", default="", help="dataset config (configs/dataset/<name>, e.g. pointmaze-umaze-noisy): "
                    "its recipe generates the data; empty: the env's default (the slow demonstrator)")
    ap.add_argument("--dataset-id", default="robotrl/pointmaze/umaze-slow-v1")
    ap.add_argument("--dataset-steps", type=int, default=0, help="regenerate size (0: the config's)")
    ap.add_argument("--robotrl-extra", nargs="*", default=[], help="extra Hydra overrides for robotrl runs")
    ap.add_argument("--skip", nargs="*", default=[], help="contenders to skip: robotrl d3rlpy sb3")
    ap.add_argument("--modes", nargs="+", default=["wsrl", "wsrl-zero", "rlpd", "calql-online"],
                    choices=["wsrl", "wsrl-zero", "rlpd", "calql-online"],
                    help="robotrl contenders (wsrl-zero: WSRL with the reference critic_init=zero)")
    ap.add_argument("--rlpd-utd", type=int, default=20, help="RLPD's UTD (paper: 20; CPU-sized runs use less)")
    ap.add_argument("--threshold", type=float, default=0.9, help="success for the time-to-threshold column")
    ap.add_argument("--out", default="", help="results file (relative: under benchmarks/results; default "
                    "qlearning_learning.json, or qlearning_learning_smoke.json with --smoke)")
    ap.add_argument("--smoke", action="store_true", help="tiny budgets and networks: checks the plumbing")
    args = ap.parse_args(argv)
    if args.smoke:
        args.seeds, args.offline_steps, args.online_steps, args.eval_every = [0], 200, 400, 200
        args.eval_episodes, args.warmup, args.dataset_steps = 2, 200, 3000
        args.dataset_id = "robotrl/pointmaze/umaze-slow-smoke-v1"
        args.robotrl_extra = [*args.robotrl_extra, "agent.model.num_critics=2", "agent.model.hidden=[64,64]",
                              "agent.model.critic_hidden=[64,64]", "agent.model.cql_n_actions=4"]
    set_threads(args.threads)
    _setup(args)  # generate the dataset once, before the seed processes start
    out_name = args.out or ("qlearning_learning_smoke.json" if args.smoke else "full/qlearning_learning.json")
    t0 = time.time()
    per_seed: dict[str, list[dict]] = {}
    for res in seed_results(args):
        for k, v in res.items():
            per_seed.setdefault(k, []).append(v)
    warm = {k: (args.warmup if v == "warmup" else v) for k, v in FIRST_UPDATE.items()}
    warm["sb3-sac"] = min(args.warmup, args.eval_every)
    summary = summarize(per_seed, warm)
    for name, s in summary.items():
        if "steps" not in s:
            print(f"{name:24s} offline return {s['return_mean_over_seeds']:8.2f}  ({s['seconds_mean']:.0f} s/seed)"
                  f"  critic Q - MC return per seed: {s.get('q_minus_mc_per_seed')}")
            continue
        print(f"{name:24s} final return {s['return_mean_over_seeds'][-1]:8.2f}  success {s['success_mean_over_seeds'][-1]:.2f}"
              f"  ({s['seconds_mean']:.0f} s/seed)")
    env = environment()
    path = write_json(out_name, {
        "environment": env, "args": vars(args), "command": "python " + " ".join(env["argv"]),
        "benchmark": "qlearning-offline-to-online", "task": f"PointMaze UMaze, sparse reward ({args.dataset_id})",
        "metric": "success", "budgets": list(range(0, args.online_steps + 1, args.eval_every)),
        "threshold": args.threshold, "peer_task": robotrl_settings(args),
        "note": "d3rlpy Cal-QL gets robotrl's task (peer_task: reward transform, UTD after the same warmup, networks, "
                "offline budget, optimiser and CQL settings); robotrl-wsrl-zero is WSRL with the reference "
                "critic_init=zero, the like-for-like row against it; robotrl-wsrl keeps the study's overrides",
        "runs": to_runs(per_seed, args.seeds, args), "total_wall_s": time.time() - t0,
        "per_seed": per_seed, "summary": summary})
    print(f"results: {path}")


def seed_results(args):
    """Per-seed results in seed order, ``{contender: result}``. Every (seed, contender) unit is cached beside the
    output (``results/.partial/qlearning_learning-<settings hash>/s<seed>-<contender>.json``, written atomically) and robotrl's run
    directories live there too (``work/``), so a killed study resumes: finished units are read back, a killed
    robotrl run goes on from its last checkpoint (the peers' units restart). Units run on ``--workers``
    processes as soon as the unit they need is done, so the study can be spread over several sittings."""
    import hashlib
    import json
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
    from multiprocessing import get_context

    key = {k: v for k, v in vars(args).items() if k not in ("seeds", "workers", "out", "skip", "modes")}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    # one cache per setting, whatever the output's name: a run with --skip / --modes / --out reuses the units done
    cache = results_dir() / ".partial" / f"qlearning_learning-{digest}"
    work = cache / "work"
    work.mkdir(parents=True, exist_ok=True)

    def path(seed, unit):
        return cache / f"s{seed}-{unit}.json"

    plan = units(args)
    todo = [(seed, u, need) for u, need in plan for seed in args.seeds if not path(seed, u).exists()]
    done = len(plan) * len(args.seeds) - len(todo)
    if done:
        print(f"resuming: {done} of {len(plan) * len(args.seeds)} units done in {cache}", flush=True)

    def save(seed, unit, res):
        atomic_write(path(seed, unit), json.dumps(res), mode=0o666)
        print(f"seed {seed} {unit} done ({res.get('seconds', 0):.0f} s)", flush=True)

    with ProcessPoolExecutor(max(1, args.workers), mp_context=get_context("spawn")) as pool:
        running: dict = {}
        while todo or running:
            ready = [t for t in todo if t[2] is None or path(t[0], t[2]).exists()]
            for t in ready[:max(1, args.workers) - len(running)]:
                todo.remove(t)
                running[pool.submit(run_unit, args, t[0], t[1], str(work))] = t
            if not running:
                raise RuntimeError(f"units {todo} wait for units that are not planned")
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                seed, unit, _ = running.pop(f)
                save(seed, unit, f.result())
    for seed in args.seeds:
        yield {u: json.loads(path(seed, u).read_text()) for u, _ in plan}


if __name__ == "__main__":
    main()
