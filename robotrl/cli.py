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
import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from robotrl.errors import ConfigError, RobotRLError

CONFIG_PATH = "pkg://robotrl.configs"
USAGE = """usage: robotrl {train,collect,eval,robot-server,deploy,actor,learner,online-demo} [hydra overrides ...]
       robotrl bench {quick,full,check,tables,list} [--only TASK ...] [--force] [--no-docs] [--record]
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
  bench     benchmark suite: quick or full tier, tables, plots, the docs results pages, regression check
  convert   LeRobotDataset (v3.0: parquet + mp4) <-> Minari dataset; robotrl convert --help lists its options
  export    a checkpoint's policy as a deploy bundle (TorchScript + ONNX + policy_meta.json; pixel policies with their cameras)

Each subcommand but bench, convert and export accepts Hydra overrides and Hydra flags (--cfg job, -m, --help);
robotrl bench --help lists its options."""


log = logging.getLogger("robotrl.cli")


def _fail(exc: RobotRLError) -> None:
    line = f"robotrl: error: {exc}"
    log.debug(line)  # kept in cli.log when logging is configured; the console line is stderr's
    print(line, file=sys.stderr)
    sys.exit(2)


def _show(text: str) -> None:
    """A console line of a command's result, also kept in the run's cli.log (robotrl.progress.emit)."""
    from robotrl.progress import emit

    for line in text.splitlines():
        emit(line)


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
            _show(json.dumps(result, indent=2))
            return result
        trainer = build_trainer(cfg, run_dir)
        summary = trainer.fit()
    except RobotRLError as exc:
        _fail(exc)
        return None
    _show(json.dumps({k: v for k, v in summary.items() if k != "report_paths"}, indent=2, default=str))
    _show(f"run directory: {run_dir}")
    for k, v in summary["report_paths"].items():
        _show(f"  {k}: {v}")
    _show(f"  log: {run_dir / 'cli.log'}")
    _show(f"  tensorboard: tensorboard --logdir {run_dir / 'tb'}")
    return summary


def list_recipes() -> None:
    """``robotrl collect list=true``: one line per dataset recipe, its name and description."""
    from robotrl.collect import RECIPES

    for name, recipe in RECIPES.items():
        print(f"{name:28s} {getattr(recipe, 'description', '')}")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="collect")
def collect_main(cfg: DictConfig) -> None:
    """``robotrl collect``: run a dataset recipe."""
    from robotrl.collect import collect

    if cfg.list:
        list_recipes()
        return
    args = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items()
            if k not in ("recipe", "list", "hydra") and v is not None}
    try:
        path = collect(cfg.recipe, **args)
    except RobotRLError as exc:
        _fail(exc)
    _show(f"dataset written: {path}")


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
    _show(json.dumps(res, indent=2))
    _show(f"written: {out}")
    return res


def _require_robot() -> None:
    from robotrl.errors import require

    require("zmq", "robot", "the robot bridge")
    require("msgpack", "robot", "the robot bridge")


def _robot_server() -> None:
    _require_robot()
    from robotrl.real_robot.cli import robot_server_main  # lazy: zmq/onnx stay out of `robotrl train`

    robot_server_main()


def _deploy() -> None:
    _require_robot()
    from robotrl.real_robot.cli import deploy_main

    deploy_main()


def _online(name: str):
    def run() -> None:
        _require_robot()
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
    if "onnx" in a.formats:
        from robotrl.errors import require

        require("onnx", "export", "ONNX export (--formats onnx; --formats torchscript needs nothing more)")
        require("onnxruntime", "export", "ONNX export's check in ONNX Runtime")
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


# ----------------------------------------------------------------------------- pre-flight checks
#: Hydra commands whose overrides are checked before Hydra runs, with their config names.
_PREFLIGHT = {"train": "train", "eval": "eval", "collect": "collect"}
_DEVICES = ("auto", "cpu", "cuda", "mps")
#: Namespaces of the official Minari datasets (Farama's remote storage), which need a download.
OFFICIAL_NAMESPACES = ("mujoco/", "D4RL/", "minigrid/", "atari/")


def _config_groups() -> set[str]:
    from importlib.resources import files

    return {p.name for p in files("robotrl.configs").iterdir() if p.is_dir() and not p.name.startswith("_")}


def _group_options(group: str) -> list[str]:
    from importlib.resources import files

    d = files("robotrl.configs").joinpath(*group.split("/"))
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".yaml")) if d.is_dir() else []


def _leaf_keys(cfg, prefix: str = "") -> list[str]:
    """Every dotted key of a composed config (containers and leaves)."""
    out = []
    for k in cfg.keys() if isinstance(cfg, DictConfig) else []:
        key = f"{prefix}{k!s}"
        out.append(key)
        node = cfg._get_node(k)
        if isinstance(node, DictConfig):
            out += _leaf_keys(node, key + ".")
    return out


def _did_you_mean(word: str, options: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""


def _compose(config_name: str, overrides: list[str]):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
        return compose(config_name=config_name, overrides=overrides)


def _override_error(config_name: str, ov, good: list[str], exc: Exception) -> ConfigError:
    """One line for an override Hydra refused: an unknown key or group option, with did-you-mean; a value of the
    wrong type for a typed setting, with its default; an agent setting that is a build argument, with where it is
    set instead (:func:`robotrl.schema.wrong_type_line`, :func:`robotrl.schema.build_argument_hint`)."""
    from omegaconf.errors import ValidationError

    from robotrl.schema import build_argument_hint, wrong_type_line

    key, value = ov.key_or_group, ov.value() if not ov.is_delete() else None
    if "/" in key or key in _config_groups():
        options = _group_options(key)
        return ConfigError(f"no {key} config {value!r}{_did_you_mean(str(value), options)} "
                           f"(options: {', '.join(options)})")
    typed = ov.input_line.split("=", 1)[1] if "=" in ov.input_line else ""
    moved = build_argument_hint(key, typed)
    if moved is not None:
        return ConfigError(moved)
    if isinstance(exc.__cause__, ValidationError):
        default = OmegaConf.select(_compose(config_name, good), key, default=None, throw_on_missing=False)
        if OmegaConf.is_config(default):
            default = OmegaConf.to_container(default, resolve=True)
        line = wrong_type_line(key, typed, default, str(exc.__cause__))
        if line is not None:
            return ConfigError(line)
    if ov.is_add() or "not in struct" in str(exc) or "Could not override" in str(exc) or "Key '" in str(exc):
        base = _compose(config_name, good)
        keys = _leaf_keys(base)
        hint = _did_you_mean(key, keys)
        return ConfigError(f"no config key {key!r}{hint or ''} (`robotrl {config_name} --cfg job` prints every key; "
                           f"+{key}=... adds a new one on purpose)")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConfigError(f"cannot apply {ov.input_line!r}: {first}")


def _pretrain_hint(cfg, overrides: list[str]) -> ConfigError | None:
    """A warm start from ``runs/pretrain/<agent>/...`` that was never written: name the command to run first."""
    init = cfg.get("trainer", {}).get("init_from") if isinstance(cfg.get("trainer"), DictConfig) else None
    if not init:
        return None
    path = Path(str(init))
    if path.exists() or (cfg.get("run_dir") and (Path(str(cfg.run_dir)) / "checkpoints" / "latest.pt").exists()):
        return None
    parts = path.parts
    if len(parts) >= 3 and parts[0] == "runs" and parts[1] == "pretrain":
        agent = parts[2]
        exp = agent if agent in _group_options("experiment") else None
        same = [o for o in overrides if o.split("=", 1)[0] in ("env", "dataset", "dataset.id", "seed")
                or o.startswith("dataset.recipe_args.")]
        first = f"robotrl train experiment={exp} {' '.join(same)}".strip() if exp else f"a pretraining run of agent={agent}"
        return ConfigError(f"this run warm-starts from {path}, which does not exist: run `{first}` first (the same "
                           "env, dataset and seed), or point trainer.init_from=<checkpoint or run dir> at another run")
    return None


def _official_dataset_hint(cfg) -> ConfigError | None:
    """An official Minari dataset (no recipe) that is not here: downloaded with ``minari.download_dataset`` when
    the network allows (into ``$MINARI_DATASETS_PATH``), else one line with the reason and the download command."""
    ds = cfg.get("dataset")
    if not isinstance(ds, DictConfig) or ds.get("recipe") or not ds.get("id"):
        return None
    ds_id = str(ds.id)
    if not ds_id.startswith(OFFICIAL_NAMESPACES):  # someone's own id: the run's own message lists the closest names
        return None
    from robotrl.data.dataset import resolve_dataset_path
    from robotrl.errors import DatasetNotFoundError

    try:
        resolve_dataset_path(ds_id)
        return None
    except DatasetNotFoundError:
        pass
    except Exception:  # noqa: BLE001  (the run reports anything else itself)
        return None
    why = download_official_dataset(ds_id)
    if why is None:
        return None
    return ConfigError(f"dataset {ds_id!r} is an official Minari dataset that is not downloaded, and {why}: run "
                       f"`minari download {ds_id}` where the network allows (then copy it into $MINARI_DATASETS_PATH), "
                       "or train on a generated one (`robotrl collect list=true` lists the recipes; e.g. env=hopper "
                       "dataset=hopper-medium)")


def download_official_dataset(ds_id: str) -> str | None:
    """Download the official Minari dataset ``ds_id`` with ``minari.download_dataset`` (into the local Minari
    directory, ``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``).

    Returns:
        None when the dataset is there now; else why not, as a clause for a one-line error (Minari's download
        needs ``huggingface_hub``, the ``download`` extra, and network access to the Hugging Face Hub).
    """
    import minari

    log.info("dataset %s is an official Minari dataset: downloading it with minari.download_dataset", ds_id)
    try:  # huggingface_hub's retry warnings would be lines beside the one error line: quiet while it tries
        from huggingface_hub.utils import logging as hub_logging

        level = hub_logging.get_verbosity()  # (its own set-up runs first, so it does not reset the level later)
        hub_logging.set_verbosity_error()
    except ImportError:
        hub_logging = None
    try:
        minari.download_dataset(ds_id)
    except ImportError as exc:  # minari's remote needs huggingface_hub (minari[hf])
        return f'its download needs {getattr(exc, "name", None) or "huggingface_hub"}: pip install "robotrl[download]"'
    except Exception as exc:  # noqa: BLE001  (no network, unknown id, server error: the line says which)
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return f"the download failed ({type(exc).__name__}: {first})"
    finally:
        if hub_logging is not None:
            hub_logging.set_verbosity(level)
    log.info("downloaded %s", ds_id)
    return None


def _check_values(cmd: str, cfg, base, key_overrides) -> None:
    """Checks of the composed config that would otherwise fail deep inside a run, as one line."""
    from omegaconf import OmegaConf

    for ov in key_overrides:
        key = ov.key_or_group
        old = OmegaConf.select(base, key, default=None, throw_on_missing=False)
        new = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if isinstance(old, (int, float)) and not isinstance(old, bool) and isinstance(new, str):
            raise ConfigError(f"{key}={new} is not a number (default {old}): give a number, e.g. {key}={old}")
    if "device" in cfg and cfg.get("device") is not None:
        dev = str(cfg.device)
        if dev.split(":")[0] not in _DEVICES:
            raise ConfigError(f"device={dev} is not a device: use device=auto (a GPU when present), cpu or cuda"
                              + ("; did you mean device=cuda?" if dev.lower() in ("gpu", "nvidia", "cuda0") else ""))
        if dev.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise ConfigError(f"device={dev} but no CUDA GPU is visible (torch {torch.__version__}): use device=auto "
                                  "or device=cpu")
    if cmd == "eval" and OmegaConf.is_missing(cfg, "checkpoint"):
        raise ConfigError("robotrl eval needs a checkpoint: robotrl eval checkpoint=<run dir or .pt file>, "
                          "e.g. robotrl eval checkpoint=runs/bc-ppo_pointmaze-umaze/<time>")


def preflight(cmd: str, args: list[str]) -> None:
    """Compose ``robotrl <cmd>``'s config from ``args`` before Hydra runs, and turn what would be a
    Hydra error or a traceback deep inside the run into one :class:`ConfigError` line with the way out:
    unknown keys and group options (did-you-mean from the composed config), non-numbers for numbers,
    ``device=`` values, ``robotrl eval`` without a checkpoint, an online experiment before its
    pretraining, an official Minari dataset not downloaded.

    Runs only for plain overrides (no Hydra flags such as ``-m`` or ``--cfg``); sweeps are left to Hydra.

    Raises:
        ConfigError: the first problem found.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    if cmd not in _PREFLIGHT or any(a.startswith("-") for a in args):
        return
    config_name = _PREFLIGHT[cmd]
    user = [a for a in args if not a.startswith(("hydra.", "hydra/", "+hydra", "~hydra"))]
    try:
        parsed = OverridesParser.create().parse_overrides(user)
    except OverrideParseException as exc:
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"cannot parse the overrides: {first} (write key=value, e.g. trainer.offline_steps=1000)") from None
    if any(o.is_sweep_override() for o in parsed):
        return
    try:
        cfg = _compose(config_name, user)
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        good: list[str] = []
        for ov, line in zip(parsed, user):
            try:
                _compose(config_name, [*good, line])
                good.append(line)
            except (HydraException, OmegaConfBaseException, ValueError) as one:
                raise _override_error(config_name, ov, good, one) from None
        first = str(exc).strip().splitlines()[0]
        raise ConfigError(f"the config does not compose: {first}") from None
    groups = _config_groups()
    key_ovs = [o for o in parsed if "/" not in o.key_or_group and o.key_or_group not in groups and not o.is_delete()]
    base = _compose(config_name, [ln for o, ln in zip(parsed, user) if o not in key_ovs]) if key_ovs else cfg
    _check_values(cmd, cfg, base, key_ovs)
    if cmd == "train":
        for check in (_pretrain_hint(cfg, user), _official_dataset_hint(cfg)):
            if check is not None:
                raise check


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``robotrl`` script.

    Process-wide settings belong here, not to ``import robotrl``: the glibc allocator tuning
    (:func:`robotrl._alloc.tune_malloc`; ``ROBOTRL_MALLOC_TUNE=0`` opts out) and headless
    MuJoCo rendering on a machine without a display (:func:`robotrl.utils.prefer_headless_rendering`).
    Bad input ends with one line ``robotrl: error: ...`` and exit status 2.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return
    cmd, rest = argv[0], argv[1:]
    if cmd not in _COMMANDS:
        print(f"robotrl: error: unknown command {cmd!r}{_did_you_mean(cmd, list(_COMMANDS))}\n{USAGE}", file=sys.stderr)
        sys.exit(2)
    from robotrl._alloc import tune_malloc
    from robotrl.utils import prefer_headless_rendering  # not robotrl.envs: that package imports torch

    tune_malloc()
    prefer_headless_rendering()
    try:
        preflight(cmd, rest)
    except RobotRLError as exc:
        _fail(exc)
    sys.argv = [f"robotrl-{cmd}", *rest]
    try:
        _COMMANDS[cmd]()
    except RobotRLError as exc:  # anything a command did not catch itself: still one line
        _fail(exc)


if __name__ == "__main__":
    main()
