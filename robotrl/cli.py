"""The ``robotrl`` command line: ``train``, ``collect``, ``eval``, each taking Hydra overrides; ``bench``.

::

    robotrl train                                   # the default experiment (BC, PointMaze UMaze)
    robotrl train agent=bc env=hopper dataset=hopper-medium trainer.offline_steps=50000
    robotrl train -m seed=0,1,2                     # Hydra multirun sweep
    robotrl collect recipe=fetch-push-expert num_episodes=200
    robotrl eval checkpoint=runs/bc-ppo_pointmaze-umaze/<time>
    robotrl bench quick                             # benchmark suite (plain options, not Hydra)
    robotrl convert --from lerobot ./my_lerobot_ds --to minari robot/my-task-v0   # plain options
    robotrl export runs/bc-ppo_pointmaze-umaze/<time> ./bundle    # deploy bundle (TorchScript + ONNX), plain options

Errors in the input (missing dataset, mismatched spaces, bad checkpoint, ...) print one
line ``robotrl: error: ...`` and exit with status 2; nothing is overwritten.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from robotrl.errors import ConfigError, RobotRLError

CONFIG_PATH = "pkg://robotrl.configs"
USAGE = """usage: robotrl {train,collect,eval,robot-server,deploy,actor,learner,online-demo} [hydra overrides ...]
       robotrl bench {quick,full,check,tables,list} [--only TASK ...] [--force] [--no-readme] [--record]
       robotrl convert --from {lerobot,minari} SRC --to {minari,lerobot} DST [--root DIR] [--fps F] [--codec C] [--overwrite]
       robotrl export CHECKPOINT OUT_DIR [--formats {torchscript,onnx} ...] [--opset N] [--overwrite]

  train     pretrain (and optionally fine-tune online) an agent; no overrides = default experiment
  collect   generate a Minari dataset with a recipe (robotrl collect list=true lists them)
  eval      evaluate a checkpoint in simulation: robotrl eval checkpoint=<run dir or .pt>
  robot-server  serve a robot over ZeroMQ: robotrl robot-server robot=sim key_file=robot.key key_create=true
  deploy        run a policy on a robot server: robotrl deploy checkpoint=<run|.pt|export dir> robot=sim key_file=robot.key
  actor         online RL, robot side: robotrl actor robot=sim learner=tcp://<host>:5600 key_file=online.key
  learner       online RL, learner: robotrl learner robot=sim agent=rlpd demos=<Minari id> key_file=online.key
  online-demo   robot server (twin) + learner + actor on this machine: robotrl online-demo
  bench     benchmark suite: quick (< 30 min) or full tier, tables, plots, README block, regression check
  convert   LeRobotDataset (v3.0: parquet + mp4) <-> Minari dataset; robotrl convert --help lists its options
  export    a checkpoint's policy as a deploy bundle (TorchScript + ONNX + policy_meta.json; pixel policies with their cameras)

Each subcommand but bench, convert and export accepts Hydra overrides and Hydra flags (--cfg job, -m, --help);
robotrl bench --help lists its options."""


def _fail(exc: RobotRLError) -> None:
    print(f"robotrl: error: {exc}", file=sys.stderr)
    sys.exit(2)


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="train")
def train_main(cfg: DictConfig) -> dict | None:
    """``robotrl train``: build the run from the config and fit it."""
    from hydra.core.hydra_config import HydraConfig

    from robotrl.experiment import build_trainer

    try:
        run_dir = Path(cfg.run_dir) if cfg.get("run_dir") else Path(HydraConfig.get().runtime.output_dir)
        if cfg.agent.get("name") == "reward-classifier":  # a reward model, not an RL agent
            from robotrl.real_robot.reward_classifier import run_train

            result = run_train(cfg, run_dir)
            print(json.dumps(result, indent=2))
            return result
        trainer = build_trainer(cfg, run_dir)
        summary = trainer.fit()
    except RobotRLError as exc:
        _fail(exc)
        return None
    print(json.dumps({k: v for k, v in summary.items() if k != "report_paths"}, indent=2, default=str))
    print(f"run directory: {run_dir}")
    for k, v in summary["report_paths"].items():
        print(f"  {k}: {v}")
    print(f"  tensorboard: tensorboard --logdir {run_dir / 'tb'}")
    return summary


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="collect")
def collect_main(cfg: DictConfig) -> None:
    """``robotrl collect``: run a dataset recipe."""
    from robotrl.collect import RECIPES, collect

    if cfg.list:
        for name, recipe in RECIPES.items():
            print(f"{name:28s} {getattr(recipe, 'description', '')}")
        return
    args = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items()
            if k not in ("recipe", "list", "hydra") and v is not None}
    try:
        path = collect(cfg.recipe, **args)
    except RobotRLError as exc:
        _fail(exc)
    print(f"dataset written: {path}")


def _set_flow_steps(policy, steps: int) -> None:
    """``robotrl eval flow_steps=K``: evaluate a flow-family policy with ``K`` Euler steps.

    Raises:
        ConfigError: not a flow policy, or ``K < 1``.
    """
    from robotrl.agents.flow import FlowPolicy
    from robotrl.agents.flow.sampling import euler_times

    if not isinstance(policy, FlowPolicy):
        raise ConfigError(f"flow_steps={steps} applies to flow, shortcut and ReinFlow policies, not "
                          f"{type(policy).__name__}: drop flow_steps")
    euler_times(steps)  # validates K
    policy.K = steps


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="eval")
def eval_main(cfg: DictConfig) -> dict | None:
    """``robotrl eval``: evaluate the policy of a checkpoint on its run's evaluation env."""
    from robotrl.checkpoint import load_checkpoint
    from robotrl.envs import make_env_from_args
    from robotrl.evaluation import evaluate
    from robotrl.policy import act, build_policy
    from robotrl.utils import resolve_device

    try:
        state = load_checkpoint(cfg.checkpoint)
        policy = build_policy(state["policy"], resolve_device(cfg.device))
        if cfg.get("flow_steps") is not None:
            _set_flow_steps(policy, int(cfg.flow_steps))
        run_cfg = state.get("config", {})
        ev = run_cfg.get("derived", {}).get("eval_env")
        if ev is None:
            raise RobotRLError(f"checkpoint {cfg.checkpoint} records no evaluation env; was it written by robotrl train?")

        def make_eval_env(first=[True]):  # noqa: B006  (the list is the closure's "first call" flag)
            video = cfg.video_dir if first[0] else None
            first[0] = False
            return make_env_from_args(ev, record_video_dir=video)  # cameras too, for a pixel policy

        ref = run_cfg.get("derived", {}).get("ref_scores")
        if cfg.get("ray_workers"):  # episodes on Ray workers (robotrl.distributed.evaluation)
            from robotrl.distributed.evaluation import evaluate_on_ray

            if cfg.video_dir:
                raise RobotRLError("video_dir records on this machine: drop ray_workers (or video_dir)")
            res = evaluate_on_ray(policy, ev, int(cfg.episodes), workers=int(cfg.ray_workers), seed=int(cfg.seed),
                                  num_envs=int(cfg.num_envs), ref_scores=tuple(ref) if ref else None,
                                  address=cfg.get("ray_address"))
        else:
            res = evaluate(lambda o: act(policy, o), make_eval_env, int(cfg.episodes), seed=int(cfg.seed),
                           num_envs=int(cfg.num_envs), ref_scores=tuple(ref) if ref else None, reset_policy=policy.reset)
    except RobotRLError as exc:
        _fail(exc)
        return None
    res["checkpoint"] = str(cfg.checkpoint)
    res["step"] = int(state.get("step", 0))
    if cfg.get("flow_steps") is not None:
        res["flow_steps"] = int(cfg.flow_steps)
    ckpt = Path(cfg.checkpoint)
    out = Path(cfg.output) if cfg.output else (ckpt if ckpt.is_dir() else ckpt.parent.parent) / "eval.json"
    out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    print(f"written: {out}")
    return res


def _robot_server() -> None:
    from robotrl.real_robot.cli import robot_server_main  # lazy: zmq/onnx stay out of `robotrl train`

    robot_server_main()


def _deploy() -> None:
    from robotrl.real_robot.cli import deploy_main

    deploy_main()


def _online(name: str):
    def run() -> None:
        from robotrl.real_robot.online_cli import COMMANDS  # lazy: zmq/torch only for these commands

        COMMANDS[name]()

    return run


def _bench() -> None:
    """``robotrl bench``: plain argparse options (not a training config); exit 1 on a regression."""
    from robotrl.bench.cli import main as bench_main  # lazy: the other commands never import the suite

    try:
        code = bench_main(sys.argv[1:])
    except RobotRLError as exc:
        _fail(exc)
        return
    sys.exit(code)


def _convert() -> None:
    """``robotrl convert``: LeRobotDataset v3.0 <-> Minari (plain argparse options; see robotrl.data.lerobot)."""
    import argparse

    p = argparse.ArgumentParser(prog="robotrl convert", description=(
        "Convert a LeRobotDataset v3.0 folder into a Minari dataset or back, without the lerobot package. "
        "Minari datasets are named by id (written under --root or $MINARI_DATASETS_PATH) or by path."))
    p.add_argument("--from", dest="src_format", choices=["lerobot", "minari"], required=True)
    p.add_argument("src", help="source: LeRobotDataset folder, or Minari dataset id/path")
    p.add_argument("--to", dest="dst_format", choices=["minari", "lerobot"], required=True)
    p.add_argument("dst", help="destination: Minari dataset id, or LeRobotDataset folder")
    p.add_argument("--root", default=None, help="Minari datasets folder of the destination (default $MINARI_DATASETS_PATH)")
    p.add_argument("--data-format", default="hdf5", choices=["hdf5", "arrow"], help="Minari storage backend")
    p.add_argument("--fps", type=float, default=None, help="frame rate for Minari -> LeRobot (default: the recorded one)")
    p.add_argument("--codec", default="lossless", choices=["lossless", "h264", "av1"],
                   help="lossless: hevc (libx265) gbrp, lossless mode (bit-exact); h264: libx264 yuv420p; av1: libsvtav1 yuv420p (lerobot's own)")
    p.add_argument("--crf", type=int, default=18, help="quality of --codec h264/av1 (lower is better; lerobot uses 30 for av1)")
    p.add_argument("--task", default=None, help="task string of every frame when the Minari data records none")
    p.add_argument("--robot-type", default=None)
    p.add_argument("--tolerance-s", type=float, default=1e-4, help="largest video/parquet timestamp gap (LeRobot -> Minari)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing destination (after the new one is complete)")
    a = p.parse_args(sys.argv[1:])
    if a.src_format == a.dst_format:
        p.error("--from and --to name the same format; nothing to convert")
    from robotrl.data.lerobot import lerobot_to_minari, minari_to_lerobot

    try:
        if a.src_format == "lerobot":
            out = lerobot_to_minari(a.src, a.dst, root=a.root, data_format=a.data_format, overwrite=a.overwrite,
                                    tolerance_s=a.tolerance_s)
        else:
            out = minari_to_lerobot(a.src, a.dst, fps=a.fps, codec=a.codec, crf=a.crf, task=a.task,
                                    robot_type=a.robot_type, overwrite=a.overwrite)
    except RobotRLError as exc:
        _fail(exc)
        return
    print(f"written: {out}")


def _export() -> None:
    """``robotrl export CHECKPOINT OUT_DIR``: the deploy bundle of a training checkpoint's policy
    (:func:`robotrl.real_robot.export.export_policy`: TorchScript, ONNX, ``policy_meta.json``; a pixel
    policy's bundle names its cameras and state layout). Prints ``{"files": {...}, "cameras": [...]}``;
    exit 2 with one ``robotrl: error:`` line on a bad checkpoint, a failed export, or an existing bundle
    in ``OUT_DIR`` without ``--overwrite``."""
    import argparse

    p = argparse.ArgumentParser(prog="robotrl export", description=(
        "Write the policy of a robotrl checkpoint (file or run directory) as a deploy bundle for `robotrl deploy "
        "checkpoint=OUT_DIR`: policy.torchscript.pt, policy.onnx and policy_meta.json, normalisers inside."))
    p.add_argument("checkpoint", help="training checkpoint (.pt) or run directory")
    p.add_argument("out_dir", help="bundle directory (created)")
    p.add_argument("--formats", nargs="+", default=["torchscript", "onnx"], choices=["torchscript", "onnx"])
    p.add_argument("--opset", type=int, default=17, help="ONNX opset")
    p.add_argument("--overwrite", action="store_true", help="replace a bundle already in OUT_DIR")
    a = p.parse_args(sys.argv[1:])
    from robotrl.policy import load_policy
    from robotrl.real_robot.export import META, export_policy

    if (Path(a.out_dir) / META).exists() and not a.overwrite:
        _fail(ConfigError(f"{a.out_dir} already holds a deploy bundle ({META}); choose another OUT_DIR or pass --overwrite"))
    try:
        paths = export_policy(load_policy(a.checkpoint), a.out_dir, formats=tuple(a.formats), opset=a.opset)
    except RobotRLError as exc:
        _fail(exc)
        return
    except (ValueError, RuntimeError) as exc:
        _fail(ConfigError(f"cannot export {a.checkpoint}: {exc}"))
        return
    meta = json.loads(paths["meta"].read_text())
    print(json.dumps({"files": {k: str(v) for k, v in paths.items()}, "cameras": meta.get("cameras", [])}, indent=2))


_COMMANDS = {"train": train_main, "collect": collect_main, "eval": eval_main,
             "robot-server": _robot_server, "deploy": _deploy, "bench": _bench, "convert": _convert, "export": _export,
             "actor": _online("actor"), "learner": _online("learner"), "online-demo": _online("online-demo")}


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``robotrl`` script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        if not argv:  # `robotrl` alone: show usage, but `robotrl train` alone runs the default
            print(USAGE)
            return
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd not in _COMMANDS:
        print(f"robotrl: error: unknown command {cmd!r}\n{USAGE}", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"robotrl-{cmd}", *rest]
    _COMMANDS[cmd]()


if __name__ == "__main__":
    main()
