"""Residual RL vs full fine-tuning on Fetch with a deliberately imprecise BC base.

For each seed, at the same env-step budget:

1. **base** — BC (MLP) trained on a few noisy scripted demonstrations
   (``robotrl.collect.collect_fetch(task, "noisy", demos)``), evaluated as is;
2. **residual PPO** (ResiP, :class:`robotrl.agents.residual.ResidualPPOAgent`) on the frozen base,
   with the agent's ResiP defaults (α 0.1, fixed log-std −1, 50 epochs, target KL 0.1) and the
   config's collection (``--num-envs`` × ``--steps-per-iter`` = 32 × 200 = 6400 samples per
   update, γ ``--gamma`` 0.98 = 1 − 1/H);
3. **off-policy residual** (ResFiT, :class:`robotrl.agents.residual.ResidualOffPolicyAgent`
   through ``robotrl train``'s ``experiment=residual-offpolicy env=fetch-<task>``: TD3 residual α 0.1
   with noise σ 0.05 on the scaled residual, target actor, ``--critic-n`` 10 LayerNorm heads,
   n-step 3, UTD ``--utd`` 4 on one env, 0/1 success reward, half of each batch from the
   demonstrations; ``--hidden`` sets actor and critic widths — 256 as the config, 128 to fit
   a 2-core budget);
4. **full fine-tuning** of the base with Gaussian PPO (:class:`robotrl.agents.ppo.PPOAgent`
   initialised from the BC run, i.e. DPPO's Gaussian baseline), same collection and γ.

Training envs end episodes on success (ResiP/ResFiT; ``make_env(..., terminate_on_success=True)``, the
experiments' ``env.train_terminate_on_success``, ``--no-success-termination`` to turn it off); evaluation envs
keep Fetch's 50-step episodes.
Success is measured at the FINAL step of each evaluation episode (``success``: the object is at
the goal when the episode ends; ``--eval-episodes`` episodes, seeds 10 000+) and also at any step
(``success_any_step``, what ``robotrl.evaluation.evaluate`` reported when this was written).
It records env steps actually used and wall time of each run, and writes JSON plus a markdown table.
The JSON (under ``benchmarks/results/``, rewritten after every run with ``"partial": true``
until the end) is in the normalised learning form of ``robotrl.bench.schema`` (``runs``,
``budgets``, ``metric`` "success", ``command``, ``environment``) plus ``args``, ``summary``,
``per_method`` (the raw figures per method and seed) and ``table``.

Usage (one torch thread, as on the shared 2-core machine)::

    python benchmarks/bench_residual.py --task push --seeds 0 1 2 --budget 20000   # the agents' reference values
    python benchmarks/bench_residual.py --quick          # smoke run: 1 seed, tiny budgets (~3 min)

The full tier's ``residual_push`` runs the README's measured FetchPush setting instead (``robotrl/bench/suite.py``
``_RESIDUAL_PUSH``; ~14 CPU-minutes per seed for all three methods at 40k env steps, where ResFiT's 10-head UTD-4
agent alone takes ~65 per 20k): the base on 200
noisy demos, Fetch's own episodes, the off-policy residual as ``experiment=residual-offpolicy-cpu`` (its FetchPush
tuning file: α 0.5, HER 0.8, γ 0.98), residual PPO with α 0.5 and the full-PPO peer's batch::

    python benchmarks/bench_residual.py --task push --demos 200 --seeds 0 1 2 --no-success-termination \
        --warmup 2000 --offpolicy-experiment residual-offpolicy-cpu --steps-per-iter 50 --residual-scale 0.5 \
        --residual-peer-batch --budget 40000 --offpolicy-eval-every 10000

``--utd``, ``--critic-n`` and ``--hidden`` override the off-policy experiment's own values (unset: the experiment's).

The off-policy residual that lifts a 200-demonstration BC base (0.25 -> 0.56 final-step success in 20k env steps,
~48 CPU-minutes per seed; ``benchmarks/results/studies/residual-fetch-push/offpolicy.json``, README)::

    python benchmarks/bench_residual.py --task push --demos 200 --seeds 0 1 2 --methods residual_offpolicy \
        --budget 20000 --warmup 2000 --offpolicy-eval-every 2500 --no-success-termination \
        --offpolicy-overrides agent.model.residual_scale=0.5 trainer.her_ratio=0.8

``--task room``: the open PointMaze room of :mod:`robotrl.agents.residual.room` instead of Fetch, on the
hand-set biased PD base (success 0), residual PPO and the off-policy residual (SAC actor) with the
settings of ``tests/test_residual_learning.py`` (``ROOM_PPO_*``, ``ROOM_OFFPOLICY_*``); success
at any step, 100-step episodes. Minutes per seed: the quick tier's residual row (it learns there
within the budget, so its regression limit is far above 0)::

    python benchmarks/bench_residual.py --task room --seeds 0 1 2 --budget 102400 --offpolicy-budget 1500 \
        --eval-episodes 20 --methods residual_ppo residual_offpolicy --out quick/residual.json

``--budget`` is the env-step budget of every method; ``--offpolicy-budget`` overrides it for the
off-policy residual (its UTD-4 updates cost far more CPU per env step than PPO's).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.bench.tasks._common import learning_result, results_dir, set_threads, write_json

from robotrl.provenance import read_provenance

#: Full PPO's update (10 epochs, minibatch 1024), which ``--residual-peer-batch`` gives residual PPO too.
PPO_PEER_BATCH = {"n_epochs": 10, "batch_size": 1024}
LABELS = {"base": "base (frozen BC)", "residual_ppo": "residual PPO", "residual_offpolicy": "off-policy residual",
          "full_ppo": "full fine-tuning (Gaussian PPO)"}


def _compose(overrides: list[str], run_dir: Path | None = None):
    """The ``robotrl train`` config of ``overrides``; with ``run_dir``, the overrides are also recorded there as
    ``.hydra/overrides.yaml`` (what a ``robotrl train`` run writes), so the run is a ``robotrl train`` command
    (``benchmarks/runs_table.py`` reads it)."""
    from hydra import compose, initialize_config_module

    if run_dir is not None:
        write_overrides(run_dir, overrides)
    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name="train", overrides=overrides)


def write_overrides(run_dir: Path, overrides: list[str]) -> None:
    """``run_dir/.hydra/overrides.yaml`` holding ``overrides`` (a YAML list, as Hydra writes it)."""
    import yaml

    path = Path(run_dir) / ".hydra" / "overrides.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump([*overrides, f"run_dir={run_dir}"], default_flow_style=False))


def _data_overrides(task: str, demos: int) -> list[str]:
    return [f"dataset.id=robotrl/fetch-{task}/noisy-{demos}ep-bench-v0", f"dataset.recipe_args.num_episodes={demos}",
            "+dataset.recipe_args.ref_episodes=5", "torch_threads=1", "trainer.progress=false"]


def final_step_success(policy, task: str, episodes: int, seed: int = 10_000, num_envs: int = 10) -> dict:
    """Success at the final step and at any step of ``episodes`` Fetch episodes (fixed 50-step length, no termination)."""
    from robotrl.envs import make_env
    from robotrl.policy import act

    final, anyst = [], []
    envs = make_env(f"fetch-{task}", num_envs=num_envs, seed=seed, vectorization="sync")
    try:
        for r in range(-(-episodes // num_envs)):
            obs, _ = envs.reset(seed=seed + r * num_envs)
            policy.reset()
            ever = np.zeros(num_envs, bool)
            done = np.zeros(num_envs, bool)
            while not done.all():
                obs, _, term, trunc, info = envs.step(act(policy, obs))
                succ = np.asarray(info["success"], bool)
                ever |= succ & ~done
                ended = (term | trunc) & ~done
                for i in np.flatnonzero(ended):
                    final.append(bool(succ[i]))
                    anyst.append(bool(ever[i]))
                done |= term | trunc
    finally:
        envs.close()
    return {"success": float(np.mean(final[:episodes])), "success_any_step": float(np.mean(anyst[:episodes]))}


def train_base(task: str, demos: int, bc_steps: int, seed: int, run_dir: Path, eval_episodes: int) -> dict:
    """BC on ``demos`` noisy demonstrations through ``robotrl train`` machinery; returns its summary."""
    from robotrl.experiment import build_trainer
    from robotrl.policy import load_policy

    cfg = _compose(["experiment=residual-base", f"env=fetch-{task}", f"dataset=fetch-{task}-noisy-20ep", *_data_overrides(task, demos), f"seed={seed}",
                    f"trainer.offline_steps={bc_steps}", f"trainer.eval_every={bc_steps}",
                    f"trainer.checkpoint_every={bc_steps}", f"trainer.eval_episodes={eval_episodes}"], run_dir)
    t = time.time()
    summary = build_trainer(cfg, run_dir).fit()
    wall = time.time() - t
    return {**final_step_success(load_policy(run_dir), task, eval_episodes), "trainer_success": summary["final_success_rate"],
            "wall_s": wall, "provenance": read_provenance(run_dir)}


def _train_env_factory(task: str, num_envs: int, seed: int, success_termination: bool):
    from robotrl.envs import make_env

    return lambda: make_env(f"fetch-{task}", num_envs=num_envs, seed=seed, vectorization="sync",
                            terminate_on_success=success_termination)


def _sizes(task: str, demos: int):
    from robotrl.data import ActionScaler, ObservationNormalizer, load_dataset
    from robotrl.envs import env_info

    data = load_dataset(f"robotrl/fetch-{task}/noisy-{demos}ep-bench-v0")
    info = env_info(f"fetch-{task}")
    return info, ObservationNormalizer.from_data(data.observations, clip=10.0), ActionScaler.from_space(info.action_space)


def run_onpolicy(kind: str, task: str, demos: int, base_dir: Path, seed: int, budget: int, num_envs: int,
                 run_dir: Path, eval_episodes: int, steps_per_iter: int = 200, gamma: float = 0.98,
                 success_termination: bool = True, residual_scale: float | None = None,
                 residual_peer_batch: bool = False) -> dict:
    """Residual PPO (``kind="residual_ppo"``, ResiP defaults) or full Gaussian-PPO fine-tuning (``"full_ppo"``).

    ``residual_scale``: residual PPO's α (default: the agent's, ResiP's 0.1). ``residual_peer_batch``: residual PPO
    updates like the full-PPO peer (10 epochs, minibatch 1024) instead of its ResiP defaults (50 epochs, minibatch
    3200), so the two differ only in what they train."""
    from robotrl.agents.ppo import PPOAgent
    from robotrl.agents.residual import ResidualPPOAgent
    from robotrl.envs import make_env
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer

    info, obs_norm, scaler = _sizes(task, demos)
    common = dict(obs_normalizer=obs_norm, action_scaler=scaler, seed=seed, gamma=gamma)
    if kind == "residual_ppo":  # the agent's ResiP defaults: α 0.1, 50 epochs, minibatch 3200, target KL 0.1
        extra: dict = {} if residual_scale is None else {"residual_scale": residual_scale}
        if residual_peer_batch:
            extra.update(PPO_PEER_BATCH)
        agent = ResidualPPOAgent(info.obs_dim, info.action_dim, base=base_dir, critic_warmup_iters=1, **common, **extra)
    else:
        agent = PPOAgent(info.obs_dim, info.action_dim, critic_warmup_iters=1, **PPO_PEER_BATCH, **common)
        agent.load_pretrained(str(base_dir))
    cfg = OnPolicyConfig(iterations=10**6, steps_per_iter=steps_per_iter, num_envs=num_envs, eval_every=10**6,
                         eval_episodes=eval_episodes, eval_envs=10, checkpoint_every=10**6, max_env_steps=budget,
                         progress=False)
    name = f"fetch-{task}"
    t = time.time()
    summary = OnPolicyTrainer(agent, run_dir, cfg, seed=seed,
                              make_train_envs=_train_env_factory(task, num_envs, seed, success_termination),
                              make_eval_env=lambda: make_env(name)).fit()
    wall = time.time() - t
    return {**final_step_success(agent.policy, task, eval_episodes), "trainer_success": summary["final_success_rate"],
            "trainer_start_success": summary["offline_success_rate"], "env_steps": summary["online_steps"],
            "wall_s": wall, "provenance": read_provenance(run_dir)}


def offpolicy_overrides(task: str, demos: int, base_dir: Path, seed: int, budget: int, eval_episodes: int, warmup: int,
                        utd: int | None, critic_n: int | None = 10, hidden: int | None = 256,
                        success_termination: bool = True, eval_every: int | None = None,
                        overrides: list[str] | None = None, experiment: str = "residual-offpolicy") -> list[str]:
    """The ``robotrl train`` overrides of :func:`run_offpolicy`'s run.

    ``utd``, ``critic_n``, ``hidden``: ``None`` keeps ``experiment``'s own value (e.g. ``residual-offpolicy-cpu``'s
    2 heads and UTD 1)."""
    sizes = [*([] if critic_n is None else [f"agent.model.num_critics={critic_n}"]),
             *([] if hidden is None else [f"agent.model.hidden=[{hidden},{hidden}]",
                                          f"agent.model.critic_hidden=[{hidden},{hidden}]"]),
             *([] if utd is None else [f"trainer.utd={utd}"])]
    return [f"experiment={experiment}", f"env=fetch-{task}", f"dataset=fetch-{task}-noisy-20ep", *_data_overrides(task, demos), f"seed={seed}",
            f"agent.model.base={base_dir}", f"agent.model.base_noise_steps={warmup}",
            f"agent.model.critic_warmup_updates={warmup}", *sizes,
            f"trainer.online_steps={budget}", f"trainer.online_warmup_steps={warmup}",
            f"trainer.eval_every={eval_every or budget}", f"trainer.checkpoint_every={budget}",
            f"trainer.eval_episodes={eval_episodes}",
            f"env.train_terminate_on_success={str(bool(success_termination)).lower()}", *(overrides or [])]


def run_offpolicy(task: str, demos: int, base_dir: Path, seed: int, budget: int, run_dir: Path,
                  eval_episodes: int, warmup: int, utd: int | None, critic_n: int | None = 10, hidden: int | None = 256,
                  success_termination: bool = True, eval_every: int | None = None,
                  overrides: list[str] | None = None, experiment: str = "residual-offpolicy") -> dict:
    """ResFiT (TD3 residual, the experiment's reference defaults) for ``budget`` env steps, demos at offline ratio 0.5.

    ``eval_every``: env steps between the trainer's evaluations (final-step success, ``curve``); default: at the end.
    ``overrides``: further Hydra overrides of the run (after this function's own), e.g. ``agent.model.residual_scale=0.2``."""
    from robotrl.experiment import build_trainer

    cfg = _compose(offpolicy_overrides(task, demos, base_dir, seed, budget, eval_episodes, warmup, utd, critic_n, hidden,
                                       success_termination, eval_every, overrides, experiment), run_dir)
    t = time.time()
    trainer = build_trainer(cfg, run_dir)
    summary = trainer.fit()
    wall = time.time() - t
    return {**final_step_success(trainer.agent.policy, task, eval_episodes),
            "trainer_success": summary["final_success_rate"], "env_steps": budget,
            "updates": summary["gradient_updates"], "wall_s": wall, "provenance": read_provenance(run_dir),
            "curve": [[int(h["step"]), float(h.get("success_rate", float("nan"))), round(float(h.get("train_wall_s", 0.0)), 1)]
                      for h in trainer.history]}


def run_room(kind: str, seed: int, budget: int, run_dir: Path, eval_episodes: int) -> dict:
    """Residual PPO or off-policy residual (SAC actor) on the room task of :mod:`robotrl.agents.residual.room` (its settings,
    those of ``tests/test_residual_learning.py``) for ``budget`` env steps, on the biased PD base."""
    from robotrl.agents.residual import ResidualOffPolicyAgent, ResidualPPOAgent
    from robotrl.agents.residual import room
    from robotrl.onpolicy import OnPolicyConfig, OnPolicyTrainer
    from robotrl.trainer import Trainer, TrainerConfig

    common = dict(obs_normalizer=room.room_obs_normalizer(), action_scaler=room.room_action_scaler(),
                  base=room.biased_pd_base(), seed=seed)
    t = time.time()
    if kind == "residual_ppo":
        agent = ResidualPPOAgent(room.OBS_DIM, room.ACTION_DIM, **common, **room.ROOM_PPO_AGENT)
        sched = {**room.ROOM_PPO_SCHEDULE, "iterations": 10**6}
        cfg = OnPolicyConfig(**sched, eval_every=10**6, eval_episodes=eval_episodes, eval_envs=10,
                             checkpoint_every=10**6, max_env_steps=budget, progress=False)
        summary = OnPolicyTrainer(agent, run_dir, cfg, seed=seed, make_eval_env=room.room_eval_env,
                                  make_train_envs=room.room_train_envs(sched["num_envs"], seed)).fit()
        policy, steps = agent.policy, summary["online_steps"]
    elif kind == "residual_offpolicy":
        agent = ResidualOffPolicyAgent(room.OBS_DIM, room.ACTION_DIM, actor="sac", **common, **room.ROOM_OFFPOLICY_AGENT)
        sched = {**room.ROOM_OFFPOLICY_SCHEDULE, "online_steps": budget}
        tcfg = TrainerConfig(offline_steps=0, **sched, eval_every=budget, eval_episodes=eval_episodes, eval_envs=10,
                             checkpoint_every=budget, progress=False)
        Trainer(agent, run_dir, tcfg, offline_buffer=None, make_eval_env=room.room_eval_env, seed=seed, gamma=0.95,
                make_train_envs=room.room_train_envs(sched["num_envs"], seed)).fit()
        policy, steps = agent.policy, budget
    else:
        raise ValueError(f"--task room runs residual_ppo and residual_offpolicy, not {kind!r} (its base is a hand-set "
                         "controller, not a BC run that full fine-tuning could start from)")
    wall = time.time() - t
    success = room.room_success(policy, eval_episodes)
    return {"success": success, "success_any_step": success, "env_steps": steps, "wall_s": wall,
            "provenance": read_provenance(run_dir)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="push", choices=["push", "pickandplace", "room"],
                   help="room: the open PointMaze room with a biased PD base (robotrl.agents.residual.room; success at any step)")
    p.add_argument("--demos", type=int, default=20, help="noisy demonstrations for the BC base")
    p.add_argument("--bc-steps", type=int, default=5000)
    p.add_argument("--budget", type=int, default=20000, help="env steps per fine-tuning method")
    p.add_argument("--offpolicy-budget", type=int, default=None, help="env steps of the off-policy residual (default: --budget)")
    p.add_argument("--num-envs", type=int, default=32, help="envs of the on-policy methods")
    p.add_argument("--steps-per-iter", type=int, default=200, help="on-policy rollout steps per env per update")
    p.add_argument("--gamma", type=float, default=0.98, help="on-policy discount (1 - 1/H for 50-step episodes)")
    p.add_argument("--utd", type=int, default=None, help="off-policy updates per env step (default: the experiment's; ResFiT 4)")
    p.add_argument("--critic-n", type=int, default=None, help="off-policy critic heads (default: the experiment's; ResFiT 10)")
    p.add_argument("--hidden", type=int, default=None,
                   help="off-policy actor/critic width, 2 layers (default: the experiment's; ResFiT 256)")
    p.add_argument("--offpolicy-experiment", default="residual-offpolicy",
                   choices=["residual-offpolicy", "residual-offpolicy-cpu"],
                   help="the off-policy run's experiment: ResFiT's reference values, or its CPU-sized variant (with "
                        "configs/tuning/residual-offpolicy-cpu-fetch-push.yaml's measured FetchPush settings)")
    p.add_argument("--residual-scale", type=float, default=None, help="residual PPO's α (default: the agent's, ResiP 0.1)")
    p.add_argument("--residual-peer-batch", action="store_true",
                   help="residual PPO updates with the full-PPO peer's 10 epochs and minibatch 1024 (ResiP: 50, 3200)")
    p.add_argument("--warmup", type=int, default=1000, help="off-policy base+noise steps and critic-only updates")
    p.add_argument("--no-success-termination", dest="success_termination", action="store_false",
                   help="training episodes run to the time limit instead of ending at success")
    p.add_argument("--offpolicy-eval-every", type=int, default=None,
                   help="env steps between the off-policy residual's evaluations (its curve; default: at the end)")
    p.add_argument("--offpolicy-overrides", nargs="+", default=[], metavar="KEY=VALUE",
                   help="Hydra overrides of the off-policy residual's run, applied last (recorded in the result's args), "
                        "e.g. agent.model.residual_scale=0.2 agent.gamma=0.98")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--eval-episodes", type=int, default=50)
    p.add_argument("--methods", nargs="+", default=["residual_ppo", "residual_offpolicy", "full_ppo"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--quick", action="store_true", help="1 seed, 400 BC steps, 1600 env steps, 10 eval episodes")
    p.add_argument("--out", default=None, help="file under benchmarks/results/ (default residual_fetch_<task>.json)")
    args = p.parse_args(argv)
    if args.quick:
        args.seeds, args.bc_steps, args.budget, args.eval_episodes, args.warmup = [0], 400, 1600, 10, 200
        args.steps_per_iter, args.num_envs, args.critic_n, args.hidden = 50, 16, 4, 64
    set_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench_residual_"))
    os.environ["MINARI_DATASETS_PATH"] = str(work / "minari")
    results: dict[str, list[dict]] = {"base": [], **{m: [] for m in args.methods}}
    try:
        for seed in args.seeds:
            base_dir = work / f"base_s{seed}"
            if args.task == "room":
                from robotrl.agents.residual.room import biased_pd_base, room_success

                ok = room_success(biased_pd_base(), args.eval_episodes)
                results["base"].append({"seed": seed, "success": ok, "success_any_step": ok, "wall_s": 0.0})
            else:
                results["base"].append({"seed": seed, **train_base(args.task, args.demos, args.bc_steps, seed, base_dir,
                                                                   args.eval_episodes)})
            print(f"[seed {seed}] base final-step success {results['base'][-1]['success']:.2f} "
                  f"(any step {results['base'][-1]['success_any_step']:.2f})", flush=True)
            for m in args.methods:
                rd = work / f"{m}_s{seed}"
                if args.task == "room":
                    r = run_room(m, seed, args.offpolicy_budget or args.budget if m == "residual_offpolicy" else args.budget,
                                 rd, args.eval_episodes)
                elif m == "residual_offpolicy":
                    r = run_offpolicy(args.task, args.demos, base_dir, seed, args.offpolicy_budget or args.budget, rd,
                                      args.eval_episodes, args.warmup, args.utd, args.critic_n, args.hidden,
                                      args.success_termination, args.offpolicy_eval_every, args.offpolicy_overrides,
                                      args.offpolicy_experiment)
                else:
                    r = run_onpolicy(m, args.task, args.demos, base_dir, seed, args.budget, args.num_envs, rd,
                                     args.eval_episodes, args.steps_per_iter, args.gamma, args.success_termination,
                                     args.residual_scale, args.residual_peer_batch)
                results[m].append({"seed": seed, **r})
                print(f"[seed {seed}] {m}: final-step success {r['success']:.2f} (any step {r['success_any_step']:.2f}) "
                      f"in {r['wall_s']:.0f} s", flush=True)
                _write(args, results, partial=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    _write(args, results, partial=False)


def normalised_runs(results: dict[str, list[dict]], budget: int, base_label: str | None = LABELS["base"]) -> list[dict]:
    """Per method and seed, the suite's learning form: success before fine-tuning (the base's) and after ``budget``.

    ``base_label`` None: the base is no method of its own (a hand-set controller that learns nothing, whose score is
    every residual row's offline column), so the regression check has no row for it."""
    base = {r["seed"]: r["success"] for r in results.get("base", [])}
    runs = []
    for m, rs in results.items():
        for r in rs:
            if m == "base" and base_label is None:
                continue
            if m == "base":
                runs.append({"method": base_label, "family": "bc", "peer": False, "seed": r["seed"],
                             "offline_score": r["success"], "curve": [], "wall_s": r["wall_s"]})
                continue
            start = base.get(r["seed"])  # residuals start exactly at the base; full PPO from the BC run's mean
            steps = int(r.get("env_steps") or budget)
            runs.append({"method": LABELS.get(m, m), "family": m, "peer": False, "seed": r["seed"], "offline_score": start,
                         "curve": ([[0, start]] if start is not None else []) + [[steps, r["success"]]],
                         "wall_s": r["wall_s"]})
    return runs


def _write(args, results: dict, partial: bool) -> None:
    """Markdown table to stdout (final) and JSON under ``benchmarks/results/`` (also after every run)."""
    table = ["| method | final-step success (mean ± std over seeds) | per seed | any-step success (mean) | "
             "env steps | wall time s (mean) |", "|---|---|---|---|---|---|"]
    summary = {}
    for m, runs in results.items():
        if not runs:
            continue
        s = [r["success"] for r in runs]
        w = [r["wall_s"] for r in runs]
        summary[m] = {"success_mean": float(np.mean(s)), "success_std": float(np.std(s)),
                      "wall_s_mean": float(statistics.mean(w))}
        anys = [r.get("success_any_step", float("nan")) for r in runs]
        steps = sorted({int(r.get("env_steps", 0)) for r in runs})
        table.append(f"| {m} | {np.mean(s):.2f} ± {np.std(s):.2f} | {', '.join(f'{x:.2f}' for x in s)} | "
                     f"{np.mean(anys):.2f} | {'/'.join(str(x) for x in steps) if steps != [0] else '—'} | "
                     f"{statistics.mean(w):.0f} |")
    if not partial:
        print("\n".join(table))
    out = results_dir() / (args.out or f"full/residual_fetch_{args.task}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    # "runs": the suite's normalised learning form (robotrl.bench.schema); "per_method": the raw figures
    task = ("PointMaze open room, biased PD base (robotrl.agents.residual.room)" if args.task == "room"
            else f"fetch-{args.task} ({args.demos} noisy demos, BC base)")
    doc = learning_result(out.stem, task,
                          "success", [args.budget], normalised_runs(results, args.budget, None if args.task == "room" else LABELS["base"]),
                          args=vars(args),
                          partial=partial, summary=summary, per_method=results, table=table)
    write_json(out, doc)
    if not partial:
        print(f"wrote {out}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
