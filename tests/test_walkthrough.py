"""docs/robot/walkthrough.md, run: the commands of the page, read from the page, as real processes on the camera twin.

Every ``robotrl ...`` line of the page's marked blocks (``<!-- walkthrough: <step> -->``) is run as written, with
the test's additions only: tiny sizes (32 px frames, a few episodes and updates), free ports and ready files, a
twin that is not paced to the wall clock (as the other camera tests run it), and ``teleop=scripted`` (the
PointMaze twin's scripted operator) where the page says ``teleop=keyboard`` and a person would type. Each step's
artefact is checked: the labelled recording with frames, the no-env checkpoint with validation metrics, the deploy
recordings in shadow / scaled / autonomous mode, the classifier report, the learner's pushed versions and
checkpoint, and the improved policy's deploy.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("MUJOCO_GL", "osmesa")
os.environ.setdefault("PYOPENGL_PLATFORM", "osmesa")

from robotrl.envs import osmesa_available  # noqa: E402

pytestmark = pytest.mark.skipif(not osmesa_available(), reason="headless MuJoCo rendering needs libosmesa6")

PAGE = Path(__file__).resolve().parents[1] / "docs" / "robot" / "walkthrough.md"
PX = 32
STEPS = ("server", "demos", "train", "deploy-bc", "classifier", "learner", "actor", "deploy-final")


def page_commands() -> dict[str, list[list[str]]]:
    """``{step: [argv, ...]}``: the ``robotrl`` command lines of each marked ``bash`` block of the page."""
    out = {}
    for m in re.finditer(r"<!-- walkthrough: ([\w-]+) -->\s*```bash\n(.*?)```", PAGE.read_text(), re.S):
        out[m.group(1)] = [shlex.split(line) for line in m.group(2).splitlines() if line.startswith("robotrl ")]
    return out


def argv(cmd: list[str], **over) -> list[str]:
    """``cmd`` (``robotrl <sub> k=v ...``) as a process argv with ``over`` set: keys it has are replaced (so a
    changed value never doubles a key), new keys appended."""
    assert cmd[0] == "robotrl"
    args, seen = [], set()
    for a in cmd[1:]:
        k = a.split("=", 1)[0]
        if "=" in a and k in over:
            args.append(f"{k}={over[k]}")
            seen.add(k)
        else:
            args.append(a)
    args += [f"{k}={v}" for k, v in over.items() if k not in seen]
    return [sys.executable, "-m", "robotrl.cli", *args]


def run(cmd, cwd, env, timeout=240) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert res.returncode == 0, (cmd, res.stdout[-2000:], res.stderr[-3000:])
    return res


def start(cmd, cwd, env, ready: Path, log: Path, timeout=180) -> tuple[subprocess.Popen, dict]:
    """A long-running process (server, learner); waits for its ready file and returns ``(process, ready json)``."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    end = time.monotonic() + timeout
    while not ready.exists():
        assert proc.poll() is None and time.monotonic() < end, log.read_text()[-3000:]
        time.sleep(0.1)
    return proc, json.loads(ready.read_text())


def stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def test_the_page_marks_every_step_of_the_chain():
    cmds = page_commands()
    assert list(cmds) == list(STEPS) and all(cmds.values()), cmds
    assert [c[1] for c in cmds["deploy-bc"]] == ["deploy"] * 3
    assert [next(a for a in c if a.startswith("mode=")) for c in cmds["deploy-bc"]] == ["mode=shadow", "mode=scaled",
                                                                                       "mode=autonomous"]
    assert "env.name=none" in cmds["train"][0] and "checkpoint=none" in cmds["demos"][0]


def test_the_walkthrough_runs_end_to_end_on_the_camera_twin(tmp_path, minari_root):
    import minari
    import torch

    from robotrl.data import load_dataset
    from robotrl.vision.encoders import ResNet10

    cmds = page_commands()
    env = {**os.environ, "MINARI_DATASETS_PATH": str(minari_root), "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = os.pathsep.join([str(PAGE.parents[2]), env.get("PYTHONPATH", "")])
    cwd = tmp_path
    robot = {"robot.image_size": PX}
    procs: list[subprocess.Popen] = []
    try:
        # Day 1: the robot server (its key made by key_create=true), then demonstrations through the teleop device
        server, ready = start(argv(cmds["server"][0], **robot, endpoint="tcp://127.0.0.1:0", ready_file="server.ready",
                                   **{"robot.realtime": "false", "robot.safety.rate_hz": 20,
                                      "robot.safety.watchdog_s": 30, "deadline_periods": 10,
                                      "unauth_timeout_s": 30}),  # a loaded CI machine may take seconds to say hello
                              cwd, env, cwd / "server.ready", cwd / "server.log")
        procs.append(server)
        endpoint = ready["endpoint"]
        assert (cwd / "robot.key").is_file()
        loop = {"endpoint": endpoint, "rate_hz": 20, "deadline_frac": 0.9, "link_timeout_s": 30}
        # the scripted operator drives every second episode to the goal; in the others nobody drives (failures)
        run(argv(cmds["demos"][0], **loop, teleop="scripted", episodes=6, max_steps=40, **{"scripted.every": 2}),
            cwd, env)
        demos = load_dataset("robot/twin/demos-v0")
        E, M = demos.num_episodes, demos.num_transitions
        assert E == 6 and demos.images["topdown"].shape == (M + E, PX, PX, 3) and demos.images["topdown"].dtype == np.uint8
        eps = list(minari.load_dataset("robot/twin/demos-v0").iterate_episodes())
        labels = [bool(ep.infos["success"][1:].any()) for ep in eps]
        assert any(labels) and not all(labels), labels  # successes and failures, labelled
        assert all(ep.infos["intervention"][1:].all() == (i % 2 == 0) for i, ep in enumerate(eps))

        # Day 2-3: the no-env camera BC run and the camera classifier, side by side (both read only the demos)
        (cwd / "weights").mkdir()
        torch.manual_seed(0)
        torch.save(ResNet10(3, 8).state_dict(), cwd / "weights" / "resnet10.pt")  # stands in for pretrained weights
        bc = subprocess.Popen(argv(cmds["train"][0], **{"trainer.offline_steps": 60, "trainer.eval_every": 30,
                                                        "trainer.checkpoint_every": 60, "trainer.batch_size": 16,
                                                        "trainer.progress": "false", "torch_threads": 1}),
                              cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(bc)
        run(argv(cmds["classifier"][0], **{"agent.model.channels": 8, "agent.model.steps": 150,
                                           "agent.model.batch_size": 32}), cwd, env)
        report = json.loads((cwd / "runs/clf/report.json").read_text())
        assert (cwd / "runs/clf/classifier.pt").is_file() and (cwd / "runs/clf/report.md").is_file()
        for k in ("precision", "recall", "f1", "auc"):
            assert np.isfinite(report["heldout"][k]), report
        assert report["train"]["auc"] > 0.8, report["train"]  # the frames tell a success from a failure
        learner, lready = start(argv(cmds["learner"][0], **robot, endpoint="tcp://127.0.0.1:0", ready_file="learner.ready",
                                     push_period_s=1, pushed_weights_dir="runs/online/pushed",
                                     **{"trainer.batch_size": 16, "trainer.online_warmup_steps": 20,
                                        "agent.model.channels": 8}),
                                cwd, env, cwd / "learner.ready", cwd / "learner.log")
        procs.append(learner)
        out, err = bc.communicate(timeout=300)
        assert bc.returncode == 0, err[-3000:]
        assert "is trained without its env (env.name=none): training offline on" in out
        hist = json.loads((cwd / "runs/bc-cams/report.json").read_text())["history"]
        assert hist and all(h["evaluation"] == "validation" and np.isfinite(h["val_action_mse"]) for h in hist), hist
        assert list((cwd / "runs/bc-cams/checkpoints").iterdir())

        # Day 2: deploy shadow -> scaled -> autonomous
        for cmd, mode in zip(cmds["deploy-bc"], ("shadow", "scaled", "autonomous")):
            run(argv(cmd, **loop, episodes=2, max_steps=10, output=f"deploy-{mode}.json"), cwd, env)
            summary = json.loads((cwd / f"deploy-{mode}.json").read_text())
            assert summary["mode"] == mode and summary["policy_cameras"] == ["topdown"] and summary["episodes"] == 2
            ep = next(minari.load_dataset(summary["dataset_id"]).iterate_episodes())
            pol, applied = ep.infos["policy_action"][1:], ep.actions
            live = np.isfinite(pol).all(axis=1)  # the policy acted on the robot's frames at these steps
            assert live.any() and np.abs(pol[live]).max() > 0, mode
            if mode == "shadow":  # recorded only: the robot held (zero force) throughout
                np.testing.assert_array_equal(applied, np.zeros_like(applied))
                continue
            unchanged = live & ~ep.infos["safety_modified"][1:].astype(bool) & ~ep.infos["held"][1:].astype(bool)
            assert unchanged.any(), mode
            want = 0.5 * pol if mode == "scaled" else pol  # hold + scale * (a - hold), hold = zero force
            np.testing.assert_allclose(applied[unchanged], want[unchanged], atol=1e-5, err_msg=mode)
            assert ep.observations["topdown"].shape[1:] == (PX, PX, 3)

        # Day 4: online RL: the actor with the scripted operator taking over, the classifier's reward
        res = run(argv(cmds["actor"][0], **robot, robot_endpoint=endpoint, learner=lready["endpoint"], teleop="scripted",
                       episodes=4, max_steps=30, rate_hz=20), cwd, env)
        actor = json.loads(res.stdout.strip().splitlines()[-1])
        assert actor["drained"] and sum(actor["interventions_per_episode"]) > 0, actor
        assert max(actor["versions_seen"]) > 1, actor  # it acted with weights the learner pushed while it ran
        online = load_dataset("robot/twin/online-v0")
        assert set(np.unique(online.rewards)) <= {0.0, 1.0} and online.images["topdown"].shape[1:] == (PX, PX, 3)
        assert stop(learner) == 0, (cwd / "learner.log").read_text()[-3000:]
        status = json.loads((cwd / "runs/online/status.json").read_text())
        assert status["updates"] > 0 and status["version"] > 1, status
        assert len(list((cwd / "runs/online/pushed").glob("v*.npz"))) > 1
        assert (cwd / "runs/online/checkpoints/latest.pt").is_file()

        # Day 5: the improved policy, exported and deployed
        export, deploy = cmds["deploy-final"]
        run(argv(export), cwd, env)
        assert json.loads((cwd / "runs/online-bundle/policy_meta.json").read_text())["kind"] == "pixels"
        run(argv(deploy, **loop, episodes=2, max_steps=10, output="deploy-final.json"), cwd, env)
        final = json.loads((cwd / "deploy-final.json").read_text())
        assert final["backend"] == "onnx" and final["mode"] == "autonomous" and final["episodes"] == 2
        assert load_dataset(final["dataset_id"]).images["topdown"].shape[1:] == (PX, PX, 3)
    finally:
        for p in reversed(procs):
            stop(p)


def test_recording_demonstrations_without_a_teleop_device_is_refused_in_one_line(tmp_path):
    """``checkpoint=none`` holds the robot still: without a teleop device nothing would move, so ``robotrl deploy``
    exits 2 with one line naming the way out, before it connects to any robot."""
    from robotrl.real_robot.protocol import write_key_file

    key = write_key_file(tmp_path / "robot.key")
    res = subprocess.run([sys.executable, "-m", "robotrl.cli", "deploy", "checkpoint=none", "robot=sim", f"key_file={key}",
                          "endpoint=tcp://127.0.0.1:1"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    lines = [line for line in res.stderr.splitlines() if line.startswith("robotrl:")]
    assert res.returncode == 2 and len(lines) == 1, res.stderr[-2000:]
    assert "teleop=keyboard" in lines[0] and "checkpoint=none" in lines[0]
