"""Hydra entry points ``robotrl robot-server`` and ``robotrl deploy``.

Registered in ``robotrl/cli.py``'s ``_COMMANDS``; also runnable stand-alone as
``python -m robotrl.real_robot.cli {robot-server,deploy} [overrides]``.

Exit status: 0 done; 2 bad input (one ``robotrl: error:`` line); 3 the robot or the
link failed (the message says what is known: server ended, silent, wrong key...;
recorded episodes are kept).

``robot-server`` settings of the bridge's hardening (``configs/robot_server.yaml``): ``robot_id`` (default ``<robot name>@<endpoint>``),
``latch_file`` (default: one per robot, ``<key_file>.<robot slug>.estop``, or
``$XDG_STATE_HOME/robotrl/estop/<robot slug>.estop`` with the environment key; it must be writable
or the server does not start), ``max_unauth`` / ``max_unauth_per_peer`` / ``unauth_timeout_s``
(connections without an authenticated message: defaults from the descriptor limit, 2 s),
``deadline_periods`` (default 2),
``lease_timeout_s`` (default max(1 s, 10 watchdog periods)), ``max_request_bytes``
(default 4096), ``rt_priority`` (default null: ordinary scheduling; 1–99: ``SCHED_FIFO``,
:mod:`robotrl.real_robot.rt`). A robot with cameras (``robot.cameras=[topdown]`` for the twin)
sends its frames in every observation: ``robot-server`` raises ``max_message_bytes`` (and
the array size limit) to :func:`~robotrl.real_robot.protocol.camera_limits` of the robot's
cameras, and ``deploy`` raises its client's limits the same way after ``hello``. ``deploy`` with a
pixel policy (an export bundle of ``experiment=bc obs=pixels`` / ``rlpd-pixels``, or their checkpoint)
hands each observation's frames to the policy; a robot without the policy's cameras, or with other
frame sizes, is refused after ``hello`` (exit 2, :func:`~robotrl.real_robot.export.check_cameras`),
before the robot is reset or moved.

``SIGUSR1`` to a ``robot-server`` process latches the e-stop (persisted, the robot holds) within one
loop tick, without the socket or the key: the operator's e-stop when the network path is flooded
(``kill -USR1 <pid>``; the pid is in the start line and the ready file).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import hydra
import numpy as np
from omegaconf import DictConfig, OmegaConf

from robotrl.errors import ConfigError, RobotRLError
from robotrl.files import atomic_write
from robotrl.progress import emit

CONFIG_PATH = "pkg://robotrl.configs"


def _fail(msg: str, code: int) -> None:
    print(f"robotrl: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def _key(cfg: DictConfig) -> bytes:
    from robotrl.real_robot.protocol import load_key, write_key_file

    if cfg.get("key_create") and cfg.key_file and not Path(cfg.key_file).exists():
        write_key_file(cfg.key_file)
    return load_key(cfg.key_file)


def _latch_file(cfg: DictConfig, latch_id: str) -> Path:
    """Where the e-stop latch persists: ``latch_file``, else one file per robot (``latch_id``) beside the key file,
    else in the user's state directory (:func:`~robotrl.real_robot.latch.default_latch_path`)."""
    from robotrl.real_robot.latch import default_latch_path

    if cfg.get("latch_file"):
        return Path(cfg.latch_file)
    return default_latch_path(latch_id, cfg.key_file)


def run_server(cfg: DictConfig) -> int:
    """Body of ``robotrl robot-server``; returns the exit status."""
    from robotrl.real_robot.factory import make_robot, make_supervisor
    from robotrl.real_robot.interface import RobotConnectionError
    from robotrl.real_robot.protocol import Limits, camera_limits, key_fingerprint
    from robotrl.real_robot.server import RobotServer, check_endpoint

    from robotrl.real_robot.rt import set_rt_priority

    sched = set_rt_priority(cfg.get("rt_priority"))  # before any ZeroMQ context: its I/O threads inherit it
    robot_cfg = OmegaConf.to_container(cfg.robot, resolve=True)
    check_endpoint(cfg.endpoint, bool(cfg.allow_remote))
    key = _key(cfg)
    robot = make_robot(robot_cfg)
    supervisor = make_supervisor(robot_cfg.get("safety"), robot.spec())
    stop = {"flag": False}

    def on_signal(signum, frame):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    from robotrl.real_robot.latch import legacy_latch_paths

    latch_id = str(cfg.get("robot_id") or f"{robot.spec().name}@{cfg.endpoint}")
    latch = _latch_file(cfg, latch_id)
    # a robot with cameras sends its frames in every observation: raise the reply limit for them (never lowered)
    limits = camera_limits(robot.spec().cameras, Limits(max_bytes=int(cfg.max_message_bytes), max_skew_s=float(cfg.max_skew_s),
                                                        max_request_bytes=int(cfg.get("max_request_bytes") or 4096)),
                           state_dim=max(1024, robot.spec().observation.dim))
    with robot:
        server = RobotServer(robot, supervisor, key, cfg.endpoint, allow_remote=bool(cfg.allow_remote), limits=limits,
                             robot_id=cfg.get("robot_id"), latch_file=latch,
                             deadline_periods=float(cfg.get("deadline_periods") or 2.0),
                             lease_timeout_s=cfg.get("lease_timeout_s"), latch_id=latch_id,
                             legacy_latch_files=[] if cfg.get("latch_file") else legacy_latch_paths(cfg.key_file),
                             max_unauth=cfg.get("max_unauth"), max_unauth_per_peer=cfg.get("max_unauth_per_peer"),
                             unauth_timeout_s=float(cfg.get("unauth_timeout_s") or 2.0))
        # the operator's e-stop that needs no socket and no key: `kill -USR1 <pid>` (latched within one tick)
        signal.signal(signal.SIGUSR1, lambda signum, frame: server.request_estop("SIGUSR1"))
        endpoint = server.bind()
        if cfg.ready_file:
            atomic_write(cfg.ready_file, json.dumps({"endpoint": endpoint, "pid": os.getpid(), "latch_file": str(latch)}),
                         mode=0o666)
        emit(f"robot-server: {robot.spec().name} listening on {endpoint} at {supervisor.config.rate_hz:g} Hz "
              f"(watchdog {supervisor.config.watchdog_s * 1000:.0f} ms, step deadline {server.horizon_s * 1000:.0f} ms); "
              f"robot_id {server.robot_id!r}, epoch {server.epoch}, key fingerprint {key_fingerprint(key)}, "
              f"e-stop latch {latch}{' (LATCHED)' if supervisor.estopped else ''} (kill -USR1 {os.getpid()} latches "
              f"it without the socket), scheduling {sched}"
              + (f"; cameras {[c.name for c in robot.spec().cameras]}: replies up to {limits.max_bytes} bytes"
                 if robot.spec().cameras else ""))
        try:
            server.serve(lambda: stop["flag"])
        except RobotConnectionError as exc:
            print(json.dumps({"status": server.status()}, default=str), flush=True)
            _fail(f"robot failed: {exc}; the server stopped", 3)
        finally:
            server.close()
        print(json.dumps({"status": server.status()}, default=str), flush=True)
    return 0


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="robot_server")
def robot_server_main(cfg: DictConfig) -> None:
    """``robotrl robot-server robot=sim ...``: serve a robot (see :mod:`robotrl.real_robot.server`)."""
    try:
        run_server(cfg)
    except RobotRLError as exc:
        _fail(str(exc), 2)


def run_deploy(cfg: DictConfig) -> dict:
    """Body of ``robotrl deploy``: connect, check spaces, run episodes, record, summarise."""
    from robotrl.errors import SpaceMismatchError
    from robotrl.real_robot.client import RobotClient
    from robotrl.real_robot.control import ChunkScheduler, ControlLoop, latency_stats
    from robotrl.real_robot.export import DeployPolicy, check_cameras, load_deploy_policy
    from robotrl.real_robot.interface import Observation
    from robotrl.real_robot.protocol import Limits
    from robotrl.real_robot.recording import record_dataset
    from robotrl.real_robot.rt import set_rt_priority

    set_rt_priority(cfg.get("rt_priority"))  # before the client's ZeroMQ context and the inference thread
    key = _key(cfg)
    hold_only = str(cfg.checkpoint).lower() == "none"  # no policy yet: hold the robot, the teleop device drives (demos)
    if hold_only and cfg.teleop == "none":
        raise ConfigError("checkpoint=none holds the robot still: record demonstrations with teleop=keyboard (or "
                          "teleop=scripted on the PointMaze twin), or name a checkpoint")
    policy = None if hold_only else load_deploy_policy(cfg.checkpoint, cfg.backend)
    client = RobotClient(cfg.endpoint, key, timeout_s=1.0, link_timeout_s=float(cfg.link_timeout_s),
                         limits=Limits(max_bytes=int(cfg.max_message_bytes)))
    logs, summary = [], {}
    try:
        spec = client.hello()
        client.use_camera_limits()  # the frames travel in every observation (and are recorded)
        if policy is None:
            hold = np.asarray(spec.hold_action, np.float32)
            policy = DeployPolicy(spec.observation.dim, spec.action.dim, 1, 1, "hold",
                                  lambda obs: np.broadcast_to(hold, (1, 1, hold.size)).copy())
        check_cameras(policy, spec)  # a pixel policy: the robot's cameras and frame sizes, before anything moves
        do = spec.observation.dim if policy.cameras and policy.obs_dim == 0 else policy.obs_dim  # cameras-only policy
        if (do, policy.action_dim) != (spec.observation.dim, spec.action.dim):
            raise SpaceMismatchError(f"policy takes Do={policy.obs_dim}, Da={policy.action_dim} but robot {spec.name} has "
                                     f"Do={spec.observation.dim}, Da={spec.action.dim}; deploy a policy trained on this robot's task")
        from robotrl.real_robot.online_cli import make_teleop

        teleop = make_teleop(cfg, spec)  # none | keyboard (stdin) | scripted (the PointMaze twin's scripted human)
        scheduler = ChunkScheduler(policy, act_steps=cfg.act_steps or policy.act_steps, prefetch=int(cfg.prefetch))
        frames = {c.name: np.zeros(c.shape, np.uint8) for c in spec.cameras} or None
        scheduler.warmup(Observation(np.zeros(spec.observation.dim, np.float32), 0.0, images=frames))
        loop = ControlLoop(client, scheduler, rate_hz=float(cfg.rate_hz or spec.control_rate_hz), hold_action=spec.hold_action,
                           mode=cfg.mode, scale=float(cfg.scale), teleop=teleop, deadline_frac=float(cfg.deadline_frac))
        stopped, stop_reason = "", ""
        for i in range(int(cfg.episodes)):
            log = loop.run_episode(seed=int(cfg.seed) + i, max_steps=cfg.max_steps)
            logs.append(log)
            stopped, stop_reason = log.stopped, log.reason
            if stopped not in ("episode_end", "max_steps"):
                break
        scheduler.close()
        steps = [s for log in logs for s in log.steps]
        summary = {"robot": spec.name, "mode": cfg.mode, "backend": policy.backend,
                   "policy_cameras": [name for name, _ in policy.cameras], "episodes": len(logs), "stopped": stopped, "stop_reason": stop_reason,
                   "success_rate": float(sum(log.success for log in logs) / max(1, len(logs))),
                   "returns": [log.ret for log in logs], "successes": [log.success for log in logs],
                   "steps": len(steps), "late_inference": scheduler.late, "missed_deadlines": loop.missed,
                   "interventions": int(sum(s.intervention for s in steps)),
                   "safety_modified": int(sum(bool(set(s.flags) - {"hold"}) for s in steps)),
                   "rtt": latency_stats(s.rtt_s for s in steps), "jitter": latency_stats(abs(s.jitter_s) for s in steps)}
        if stopped == "episode_end" or stopped == "max_steps":
            summary["server"] = client.status()
    finally:
        if cfg.record and any(log.steps for log in logs):
            ds_id = cfg.dataset_id or f"robot/{cfg.robot.name}/deploy-{time.strftime('%Y%m%d-%H%M%S')}-v0"
            path = record_dataset(ds_id, logs, spec, root=cfg.dataset_root,
                                  provenance={"checkpoint": str(cfg.checkpoint), "mode": cfg.mode, "backend": policy.backend})
            summary["dataset_id"], summary["dataset_path"] = ds_id, str(path)
        client.close()
    return summary


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name="deploy")
def deploy_main(cfg: DictConfig) -> None:
    """``robotrl deploy checkpoint=... robot=...``: run a policy on a robot server and record it."""
    from robotrl.real_robot.interface import RobotConnectionError

    try:
        summary = run_deploy(cfg)
    except RobotConnectionError as exc:
        _fail(f"{exc}; nothing was deployed", 3)
        return
    except RobotRLError as exc:
        _fail(str(exc), 2)
        return
    text = json.dumps(summary, indent=2, default=str)
    print(text, flush=True)
    if cfg.output:
        Path(cfg.output).write_text(text)
    if summary.get("stopped") not in ("episode_end", "max_steps"):
        _fail(f"deployment stopped early ({summary.get('stopped')}): {summary.get('stop_reason') or 'see above'}. "
              f"{summary.get('episodes', 0)} episode(s) recorded", 3)


COMMANDS = {"robot-server": robot_server_main, "deploy": deploy_main}


def main(argv: list[str] | None = None) -> None:
    """``python -m robotrl.real_robot.cli {robot-server,deploy} [overrides]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(f"usage: python -m robotrl.real_robot.cli {{{','.join(COMMANDS)}}} [hydra overrides]", file=sys.stderr)
        sys.exit(2)
    sys.argv = [f"robotrl-{argv[0]}", *argv[1:]]
    COMMANDS[argv[0]]()


if __name__ == "__main__":
    main()
