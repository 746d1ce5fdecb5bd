"""Hydra entry points ``robotrl actor``, ``robotrl learner`` and ``robotrl online-demo`` (online RL on a robot).

Also runnable as ``python -m robotrl.real_robot.online_cli {actor,learner,online-demo} [overrides]``.
Configs: ``configs/online/{actor,learner,demo}.yaml``. Exit status: 0 done; 2 bad input (one
``robotrl: error:`` line); 3 the robot or the link failed (what was recorded is kept).
"""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from robotrl.errors import ConfigError, RobotRLError
from robotrl.progress import emit

CONFIG_PATH = "pkg://robotrl.configs"


def _fail(msg: str, code: int) -> None:
    print(f"robotrl: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def _key(key_file, create: bool = False) -> bytes:
    from robotrl.real_robot.protocol import load_key, write_key_file

    if create and key_file and not Path(key_file).exists():
        write_key_file(key_file)
    return load_key(key_file)


def check_bind(endpoint: str, allow_remote: bool) -> None:
    """Refuse to bind the learner beyond loopback unless ``allow_remote``.

    Raises:
        ConfigError: a non-loopback ``tcp://`` endpoint without ``allow_remote=true``.
    """
    if not endpoint.startswith("tcp://"):
        raise ConfigError(f"endpoint must be tcp://host:port, got {endpoint!r}")
    host = endpoint[6:].rsplit(":", 1)[0]
    if host not in ("127.0.0.1", "localhost", "[::1]", "::1") and not allow_remote:
        raise ConfigError(f"endpoint {endpoint} is reachable from other machines; set allow_remote=true to bind it "
                          "(every message is still authenticated with the key; add curve_secret_file= and "
                          "curve_clients_dir= to encrypt the link, docs/protocol.md)")


def _stop_flag() -> dict:
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


# ----------------------------------------------------------------------------- learner
def build_learner(cfg: DictConfig):
    """The :class:`~robotrl.real_robot.online.OnlineLearner` of config ``cfg`` (bound, resumed or warm-started).

    Built by the one build path's parts (:mod:`robotrl.experiment_parts`), exactly as ``robotrl train`` builds a
    simulation run: the robot's :class:`~robotrl.spec.ObservationSpec` (state ``Do``, actions ``Da`` and, with
    ``obs=pixels`` or a camera agent config, the robot's cameras ``{"pixels/<camera>": (H, W, C)}``), the agent
    (:func:`~robotrl.experiment_parts.build_agent`), the warm start's architecture adoption and observation check
    (:func:`robotrl.experiment.warm_start_architecture`, :func:`~robotrl.experiment_parts.check_warm_start_spec`),
    and the demonstration buffer with the agent's reward transform and Cal-QL's sparse fill
    (:func:`~robotrl.experiment_parts.replay_buffer`).

    Raises:
        ConfigError: a camera agent on a robot without cameras, demonstrations without frames or with other
            cameras / frame sizes (:func:`~robotrl.real_robot.online_pixels.check_demo_cameras`), a residual
            without a base or with one that does not fit, unbounded actions, a warm start from another observation.
        SpaceMismatchError: demonstrations of another ``Do`` / ``Da``.
    """
    import torch

    from robotrl.data.dataset import load_dataset
    from robotrl.data.normalizer import ActionScaler
    from robotrl.errors import SpaceMismatchError
    from robotrl.experiment import frame_stack_of, wants_cameras, warm_start_architecture
    from robotrl.experiment_parts import build_agent, check_warm_start_spec, observation_normalizer, reward_transform, replay_buffer
    from robotrl.real_robot.factory import make_robot
    from robotrl.real_robot.learner_link import LearnerEndpoint, camera_link_limits, link_limits
    from robotrl.real_robot.online import OnlineLearner
    from robotrl.real_robot.online_pixels import camera_shapes, check_demo_cameras, drop_frames, with_policy_cameras
    from robotrl.spec import ObservationSpec
    from robotrl.utils import resolve_device, set_seed

    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    set_seed(int(cfg.seed))
    check_bind(cfg.endpoint, bool(cfg.allow_remote))
    key = _key(cfg.key_file, bool(cfg.key_create))
    robot = make_robot(OmegaConf.to_container(cfg.robot, resolve=True)).spec()
    do, da = robot.observation.dim, robot.action.dim
    device = resolve_device(cfg.device)
    pixels = wants_cameras(cfg)
    if pixels and not robot.cameras:
        raise ConfigError(f"agent={cfg.agent.name} learns from camera frames, and robot {robot.name} has no camera: give "
                          "the robot its cameras (for the twin robot.cameras=[topdown] robot.image_size=64, on the "
                          "learner and the actor), or train on states (obs=state)")
    spec = ObservationSpec(do, da, {k: tuple(v) for k, v in camera_shapes(robot.cameras).items()} if pixels else {},
                           None, frame_stack_of(cfg) if pixels else 1)
    resumable = Path(str(cfg.run_dir)) / "checkpoints" / "latest.pt"
    if cfg.init_from and not resumable.is_file():
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
        cfg = warm_start_architecture(cfg, overrides, Path(str(cfg.run_dir)), source=cfg.init_from)
        check_warm_start_spec(cfg.init_from, spec)
    data = load_dataset(cfg.demos) if cfg.demos else None
    if data is not None and (data.obs_dim, data.action_dim) != (do, da):
        raise SpaceMismatchError(f"demos {cfg.demos} have Do={data.obs_dim}, Da={data.action_dim} but robot {robot.name} "
                                 f"has Do={do}, Da={da}; record demonstrations on this robot")
    reward_fn = make_reward(cfg, robot)  # reward=classifier: the demonstrations' rewards are its verdicts, as online
    if data is not None and reward_fn is not None:
        from robotrl.real_robot.reward_classifier import relabel_rewards

        data = relabel_rewards(data, reward_fn)
    if data is not None:
        if pixels:
            check_demo_cameras(data, robot.cameras, robot.name, str(cfg.demos))
            data = with_policy_cameras(data)
        else:
            data = drop_frames(data)  # a state agent learns from the flat observations only
    low, high = robot.action.low_array, robot.action.high_array
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(f"robot {robot.name} has unbounded actions; the policy needs bounds (set them in the robot config)")
    if "base" in cfg.agent.model and not cfg.agent.model.base:
        raise ConfigError(f"agent={cfg.agent.name} trains a residual on a frozen base: set agent.model.base=<BC or "
                          "diffusion checkpoint / run dir> (a chunked base also needs agent.model.base_overrides="
                          "{act_steps: 1})")
    utd = float(cfg.trainer.utd)
    if cfg.trainer.get("updates_per_transition") is not None:
        raise ConfigError(f"trainer.updates_per_transition={cfg.trainer.updates_per_transition} is gone: trainer.utd is the "
                          "one knob, critic updates per robot transition received (a fraction updates less often): "
                          f"pass trainer.utd={utd * float(cfg.trainer.updates_per_transition):g}")
    if "critic_utd" in cfg.agent.model:  # the batch split follows the UTD (robotrl.utd): whole critic updates per call
        cfg.agent.model.critic_utd = int(utd) if float(utd).is_integer() else 1
    agent = build_agent(cfg.agent.model, spec, obs_normalizer=observation_normalizer(data, do, cfg.agent.model.get("obs_clip")),
                        action_scaler=ActionScaler(low, high), device=device, seed=int(cfg.seed))
    demos = replay_buffer(cfg.agent, spec, data, device=device, seed=int(cfg.seed) + 1,
                          extra_capacity=int(cfg.intervention_capacity), num_envs=int(cfg.max_actors))
    r_scale, r_bias, _ = reward_transform(cfg.agent)
    t = cfg.trainer
    limits = link_limits(int(cfg.max_message_bytes))
    endpoint = LearnerEndpoint(cfg.endpoint, key, learner_id=cfg.learner_id,
                               limits=camera_link_limits(robot.cameras, limits) if pixels else limits,
                               curve_secret_file=cfg.get("curve_secret_file"), curve_clients_dir=cfg.get("curve_clients_dir"))
    learner = OnlineLearner(agent, endpoint, robot, demos=demos, online_capacity=int(t.online_buffer_size),
                            run_dir=cfg.run_dir, batch_size=int(t.batch_size), utd=utd,
                            offline_ratio=float(t.offline_ratio), warmup=int(t.online_warmup_steps),
                            push_period_s=float(cfg.push_period_s), checkpoint_every_s=float(cfg.checkpoint_every_s),
                            interventions_to_demos=bool(cfg.interventions_to_demos), reward_scale=r_scale,
                            reward_bias=r_bias, max_actors=int(cfg.max_actors), gamma=float(cfg.agent.get("gamma", 0.99)),
                            seed=int(cfg.seed), pushed_weights_dir=cfg.pushed_weights_dir, pixels=pixels,
                            offline_steps=int(t.get("offline_steps") or 0), log_every=int(cfg.log_every),
                            n_step=int(t.get("n_step", 1)))
    from robotrl.runner import Runner

    resolved = OmegaConf.to_container(cfg, resolve=True)
    resolved["derived"] = {"obs_dim": spec.obs_dim, "action_dim": spec.action_dim, "observation": spec.to_dict(),
                           "robot": robot.to_dict(), "device": str(device), "evaluation": "robot episodes",
                           "dataset_transitions": data.num_transitions if data is not None else 0}
    if spec.has_cameras:
        resolved["derived"]["image_shapes"] = {k: list(v) for k, v in spec.image_shapes.items()}
    # the one Runner drives the learner: checkpoints, resume, warm start, TensorBoard, report (robotrl.runner)
    learner.runner = Runner(learner, cfg.run_dir, make_eval_env=None, validator=learner.episode_record, seed=int(cfg.seed),
                            run_config=resolved, title=f"{cfg.agent.name} on robot {robot.name}",
                            init_from=cfg.init_from or None, init_parts=list(cfg.init_parts) if cfg.init_parts else None)
    resumed = learner.runner.prepare()  # resumed, or warm-started and pretrained (trainer.offline_steps)
    if resumed and learner.pretrain_updates > 0:
        agent.start_online()  # the update rule of the online phase (e.g. SAC after Cal-QL)
    return learner, resumed, key


def run_learner(cfg: DictConfig) -> dict:
    """Body of ``robotrl learner``: serve until SIGTERM/SIGINT or ``max_runtime_s``; returns the final status."""
    from robotrl.real_robot.learner_link import atomic_write_bytes
    from robotrl.real_robot.protocol import key_fingerprint

    learner, resumed, key = build_learner(cfg)
    stop = _stop_flag()
    if cfg.ready_file:
        atomic_write_bytes(Path(cfg.ready_file), json.dumps({"endpoint": learner.ep.endpoint,
                                                              "pid": __import__("os").getpid()}).encode())
    st = learner.status()
    emit(f"learner: {type(learner.agent).__name__} for {learner.spec.name} on {learner.ep.endpoint} "
          f"({'resumed' if resumed else 'new'} run in {cfg.run_dir}: {st['online']} robot transitions, {st['demos']} in "
          f"the demonstration buffer, {st['updates']} updates); weights every {cfg.push_period_s:g} s, "
          f"key fingerprint {key_fingerprint(key)}")
    if st["demos"] == 0 and float(cfg.trainer.offline_ratio) > 0:
        emit(f"learner: no demonstrations: updates start once the demonstration buffer holds takeover steps for its "
              f"share of a batch (offline_ratio={cfg.trainer.offline_ratio}); set trainer.offline_ratio=0 to learn "
              "from the robot's experience alone")
    t_end = time.monotonic() + float(cfg.max_runtime_s) if cfg.max_runtime_s else None
    learner.should_stop = lambda: stop["flag"] or (t_end is not None and time.monotonic() > t_end)
    try:
        learner.runner.fit()  # serves until should_stop; the Runner's report in run_dir
        status = learner.status()
    finally:
        learner.close()
    print(json.dumps({"status": status}, default=str), flush=True)
    return status


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="online/learner")
def learner_main(cfg: DictConfig) -> None:
    """``robotrl learner robot=sim agent=rlpd ...``."""
    try:
        run_learner(cfg)
    except RobotRLError as exc:
        _fail(str(exc), 2)


# ----------------------------------------------------------------------------- actor
def make_teleop(cfg: DictConfig, spec):
    """The teleop device named by ``cfg.teleop`` (``none``, ``keyboard``, ``scripted``)."""
    from robotrl.real_robot import teleop as tp

    if cfg.teleop == "none":
        return None
    if cfg.teleop == "keyboard":
        return tp.KeyboardTeleop(sys.stdin, spec.hold_action, spec.action.low, spec.action.high)
    if cfg.teleop == "scripted":
        s = cfg.scripted
        if not (spec.name.startswith("sim:pointmaze")):
            raise ConfigError(f"teleop=scripted has a controller for the PointMaze twin only, not {spec.name}")
        given = cfg.robot.get("env_kwargs")
        kw = {} if given is None else OmegaConf.to_container(given, resolve=True)
        ctrl = tp.maze_controller(kw.get("maze_map"), float(s.gain))  # along the map's path (straight without one)
        if s.get("on_failure"):  # HIL-SERL's operator: takes over when the policy fails, drives, hands back
            rule = tp.OnFailureTakeover(tp.maze_path_progress(kw.get("maze_map")), patience=int(s.patience),
                                        min_gain=float(s.min_gain), max_regress=float(s.max_regress),
                                        length=int(s.takeover_steps))
            return tp.ScriptedTeleop(ctrl, None, spec.action.low, spec.action.high, takeover=rule)
        every, start, length = int(s.every), int(s.start), int(s.length)
        return tp.ScriptedTeleop(ctrl,
                                 lambda ep, k: every > 0 and ep % every == 0 and start <= k < start + length,
                                 spec.action.low, spec.action.high)
    raise ConfigError(f"teleop must be none, keyboard or scripted, got {cfg.teleop!r}")


def make_reward(cfg: DictConfig, spec):
    """The actor's :class:`~robotrl.real_robot.reward_classifier.RewardFunction` of ``reward=`` (``None``: the
    robot's own reward).

    Raises:
        ConfigError: an unknown ``reward``, ``reward=classifier`` without ``reward_classifier``, or a classifier for
            other cameras, frame sizes or state size than the robot's (one line naming the fix).
        CheckpointError: the file is not a success classifier.
    """
    if cfg.reward == "robot":
        return None
    if cfg.reward != "classifier":
        raise ConfigError(f"reward must be robot or classifier, got {cfg.reward!r}")
    from robotrl.real_robot.online_pixels import camera_shapes
    from robotrl.real_robot.reward_classifier import ClassifierReward

    if not cfg.reward_classifier:
        raise ConfigError("reward=classifier needs reward_classifier=<classifier.pt or its run dir> "
                          "(robotrl train agent=reward-classifier ...)")
    return ClassifierReward.from_file(cfg.reward_classifier, spec.observation.dim, camera_shapes(spec.cameras),
                                      f"robot {spec.name}", cfg.reward_threshold, bool(cfg.get("end_on_success", True)))


def run_actor(cfg: DictConfig) -> dict:
    """Body of ``robotrl actor``: connect robot and learner, run the episodes, write the recording."""
    import os

    import torch

    from robotrl.real_robot.learner_link import ActorLink, link_limits, load_weights
    from robotrl.real_robot.online import EpisodeRecorder, LocalRobot, OnlineActor, RemoteRobot

    torch.set_num_threads(1)
    key = _key(cfg.key_file)
    robot_cfg = OmegaConf.to_container(cfg.robot, resolve=True)
    if cfg.robot_link == "local":
        from robotrl.real_robot.factory import make_robot, make_supervisor

        dev = make_robot(robot_cfg)
        robot = LocalRobot(dev, make_supervisor(robot_cfg.get("safety"), dev.spec()))
    elif cfg.robot_link == "remote":
        from robotrl.real_robot.client import RobotClient

        robot = RemoteRobot(RobotClient(cfg.robot_endpoint, _key(cfg.robot_key_file), timeout_s=1.0, link_timeout_s=2.0))
    else:
        raise ConfigError(f"robot_link must be local or remote, got {cfg.robot_link!r}")
    spec = robot.spec()
    try:
        reward_fn = make_reward(cfg, spec)
    except RobotRLError:
        robot.close()
        raise
    work = Path(cfg.work_dir)
    # a camera robot's frames travel with its transitions to a pixel learner: ActorLink raises its limits for them
    link = ActorLink(cfg.learner, key, cfg.actor_id, spec.to_dict(), work / "spill", learner_id=cfg.learner_id,
                     batch_size=int(cfg.batch_size), flush_s=float(cfg.flush_s), ack_timeout_s=float(cfg.ack_timeout_s),
                     link_timeout_s=float(cfg.link_timeout_s), limits=link_limits(int(cfg.max_message_bytes)),
                     weights_file=work / "weights.npz", curve_cert_file=cfg.get("curve_cert_file"),
                     curve_server_public_file=cfg.get("curve_server_public_file"))
    recorder = EpisodeRecorder(work, spec)
    rate = float(spec.control_rate_hz if cfg.rate_hz is None else cfg.rate_hz)
    from robotrl.real_robot.resets import make_limits, make_reset

    teleop = make_teleop(cfg, spec)
    limits = make_limits(robot_cfg.get("episode"))  # the robot's episode limits; the actor's max_steps overrides
    reset = make_reset(robot_cfg.get("reset"), spec, teleop)
    actor = OnlineActor(robot, link, recorder, rate_hz=rate, teleop=teleop,
                        on_learner_lost=cfg.on_learner_lost, explore=bool(cfg.explore),
                        max_steps=cfg.max_steps if cfg.max_steps is not None else limits.max_steps,
                        max_duration_s=limits.max_duration_s, reset=reset, explore_std=float(cfg.explore_std),
                        wait_weights_s=float(cfg.wait_weights_s), seed=int(cfg.seed), reward_fn=reward_fn,
                        initial=load_weights(work / "weights.npz"))  # a restarted actor: its last weights
    emit(f"actor {cfg.actor_id}: {spec.name} at {rate:g} Hz ({cfg.robot_link}), learner {cfg.learner}, "
          f"reset {reset.name}, pid {os.getpid()}")

    def on_episode(info: dict) -> None:
        print(json.dumps({"episode": info}), flush=True)

    ds_id = cfg.dataset_id or f"robot/{spec.name.replace(':', '-')}/online-{cfg.actor_id}-v0"
    summary: dict = {}
    try:
        s = actor.run(int(cfg.episodes), float(cfg.drain_timeout_s), on_episode)
        summary = dict(vars(s))
    finally:
        link.close()
        robot.close()
        if recorder.episodes_done():
            path = recorder.to_minari(ds_id, root=cfg.dataset_root, provenance={"actor_id": cfg.actor_id,
                                                                              "learner": cfg.learner})
            summary["dataset_id"], summary["dataset_path"] = ds_id, str(path)
    text = json.dumps(summary, default=str)
    (work / "summary.json").write_text(text)
    if cfg.output:
        Path(cfg.output).write_text(text)
    print(text, flush=True)
    return summary


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="online/actor")
def actor_main(cfg: DictConfig) -> None:
    """``robotrl actor robot=sim learner=tcp://...``."""
    from robotrl.real_robot.interface import RobotConnectionError

    try:
        summary = run_actor(cfg)
    except RobotConnectionError as exc:
        _fail(f"{exc}; episodes recorded so far are kept in {cfg.work_dir}", 3)
        return
    except RobotRLError as exc:
        _fail(str(exc), 2)
        return
    if not summary.get("drained"):
        _fail(f"the learner did not confirm every transition within drain_timeout_s={cfg.drain_timeout_s}; they stay "
              f"in {cfg.work_dir}/spill and are resent when this actor (same actor_id, same work_dir) runs again", 3)


# ----------------------------------------------------------------------------- demo
def run_demo(cfg: DictConfig) -> int:
    """Body of ``robotrl online-demo``: robot server + learner + actor on this machine."""
    import os
    import subprocess

    from robotrl.real_robot.protocol import write_key_file

    work = Path(cfg.work_dir).absolute()
    work.mkdir(parents=True, exist_ok=True)
    key = work / "online.key"
    if not key.exists():
        write_key_file(key)
    py = [sys.executable, "-m"]
    robot = [f"robot.task={cfg.task}", f"robot.realtime={str(bool(cfg.realtime)).lower()}"]
    server_cmd = py + ["robotrl.real_robot.cli", "robot-server", f"key_file={key}", *robot,
                       f"endpoint=tcp://127.0.0.1:{cfg.robot_port}", f"ready_file={work / 'server.ready'}"]
    learner_cmd = py + ["robotrl.real_robot.online_cli", "learner", f"key_file={key}", *robot, f"agent={cfg.learner_agent}",
                        f"endpoint=tcp://127.0.0.1:{cfg.learner_port}", f"run_dir={work / 'learner'}",
                        f"ready_file={work / 'learner.ready'}",
                        f"trainer.utd={cfg.utd}",
                        f"trainer.batch_size={cfg.batch_size}", f"trainer.online_warmup_steps={cfg.warmup}"]
    actor_cmd = py + ["robotrl.real_robot.online_cli", "actor", f"key_file={key}", *robot, "robot_link=remote",
                      f"robot_endpoint=tcp://127.0.0.1:{cfg.robot_port}", f"learner=tcp://127.0.0.1:{cfg.learner_port}",
                      f"episodes={cfg.episodes}", f"max_steps={cfg.max_steps}", f"teleop={cfg.teleop}",
                      f"work_dir={work / 'actor'}"]
    procs = []
    try:
        for name, cmd, ready in (("robot-server", server_cmd, work / "server.ready"),
                                 ("learner", learner_cmd, work / "learner.ready")):
            ready.unlink(missing_ok=True)
            log = open(work / f"{name}.log", "w")
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy()))
            emit(f"online-demo: started {name} (pid {procs[-1].pid}, log {work / f'{name}.log'})")
            end = time.monotonic() + 120
            while not ready.exists():
                if procs[-1].poll() is not None or time.monotonic() > end:
                    raise RobotRLError(f"{name} did not start; see {work / f'{name}.log'}")
                time.sleep(0.1)
        emit(f"online-demo: actor runs {cfg.episodes} episodes; learner TensorBoard: tensorboard --logdir "
              f"{work / 'learner' / 'tb'}")
        code = subprocess.call(actor_cmd)
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    return code


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="online/demo")
def demo_main(cfg: DictConfig) -> None:
    """``robotrl online-demo``: all three processes on this machine with the MuJoCo twin."""
    try:
        code = run_demo(cfg)
    except RobotRLError as exc:
        _fail(str(exc), 2)
        return
    sys.exit(code)


COMMANDS = {"actor": actor_main, "learner": learner_main, "online-demo": demo_main}


def main(argv: list[str] | None = None) -> None:
    """``python -m robotrl.real_robot.online_cli {actor,learner,online-demo} [overrides]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m robotrl.real_robot.online_cli {{{','.join(COMMANDS)}}} [hydra overrides]", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"robotrl-{argv[0]}", *argv[1:]]
    COMMANDS[argv[0]]()


if __name__ == "__main__":
    main()
