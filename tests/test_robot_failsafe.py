"""Issue 45: the bridge's fail-safes through real ``robotrl robot-server`` processes and real sockets.

1. an e-stop is never lost: the server refuses to start when its latch cannot be written, an
   e-stop that cannot be written says so and keeps the robot held (and is written once it can),
   a latch file deleted after its first write starts the server latched (kill -9 and restart);
2. robots sharing a key keep one latch each;
3. an operator is never locked out: a slowloris that fills a low descriptor limit with
   unfinished frames does not stop a new connection's e-stop, and ``SIGUSR1`` latches the
   e-stop without any socket.

Nothing of the bridge is mocked; the server serves the MuJoCo twin.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

import robotrl.configs
from robotrl.errors import ConfigError

from robotrl.real_robot.client import RobotClient, RobotCommandError
from robotrl.real_robot.factory import make_supervisor
from robotrl.real_robot.interface import RobotConnectionError
from robotrl.real_robot.launch import ServerProcess
from robotrl.real_robot.protocol import load_key, write_key_file
from robotrl.real_robot.server import RobotServer
from robotrl.real_robot.sim import MuJoCoTwin

from robotrl.bench.tasks.bridge import SLOWLORIS  # the attack scripts live with the benchmark that measures them

SLOW = ["robot.safety.rate_hz=20"]
SIM_SAFETY = yaml.safe_load((Path(robotrl.configs.__file__).parent / "robot" / "sim.yaml").read_text())["safety"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def latch_record(path: Path) -> dict:
    return json.loads(Path(path).read_text())


# ---- 1: an e-stop is never lost --------------------------------------------------------------------------
def test_an_unwritable_latch_refuses_to_start_an_unpersisted_estop_holds_and_a_deleted_latch_is_latched(tmp_path):
    keyfile = write_key_file(tmp_path / "robot.key")
    # the repro: a directory that does not exist (a typo); the server exits 2 with one line
    bad = "no/such/dir/l.estop"
    with pytest.raises(RobotConnectionError) as exc:
        ServerProcess(keyfile, [*SLOW, f"latch_file={bad}"], start_timeout_s=60).start()
    assert f"robotrl: error: cannot write the e-stop latch file {bad}" in str(exc.value) and "Traceback" not in str(exc.value)
    # a file system that refuses files (read-only; root may write anywhere else)
    robot = MuJoCoTwin("pointmaze-umaze", realtime=False)
    with pytest.raises(ConfigError, match="cannot write the e-stop latch file /proc/robotrl.estop"):
        RobotServer(robot, make_supervisor(SIM_SAFETY, robot.spec()), load_key(keyfile), latch_file="/proc/robotrl.estop")

    latch_dir = tmp_path / "latch"
    latch_dir.mkdir()
    latch = latch_dir / "arm.estop"
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    srv = ServerProcess(keyfile, [*SLOW, f"latch_file={latch}"], endpoint=endpoint).start()
    try:
        assert latch_record(latch)["estopped"] is False  # written at start: the path is known to work
        c = RobotClient(endpoint, load_key(keyfile))
        c.reset(0)
        shutil.rmtree(latch_dir)  # the latch's directory vanishes while the server runs
        ans = c.request("estop", {"reason": "operator"}, timeout_s=2.0)
        assert ans["ok"] and ans["persisted"] is False and "could NOT be written" in ans["warning"]
        assert ans["status"]["estopped"] and ans["status"]["held"] and ans["status"]["latch_persisted"] is False
        held = c.step(np.array([0.3, -0.2], np.float32))
        assert held["flags"] == ["estop"] and np.array_equal(held["applied"], [0, 0])
        with pytest.raises(RobotCommandError) as refused:
            c.rearm(operator="alice")  # a re-arm that cannot be written is refused: the robot stays held
        assert refused.value.kind == "not_persisted" and c.status()["estopped"]
        latch_dir.mkdir()  # the directory is back: the next request writes the latch it owes
        st = c.status()
        assert st["latch_persisted"] is True and latch_record(latch)["estopped"] is True
        assert latch_record(latch)["reason"] == "operator"
        srv.kill()  # kill -9
        srv.start()
        assert c.status()["estopped"] is True  # the e-stop survived
        c.rearm(operator="alice")
        assert latch_record(latch)["estopped"] is False
        srv.kill()
        latch.unlink()  # lost while the server was down (deleted, a failed restore...): not read as "unlatched"
        srv.start()
        st = c.status()
        assert st["estopped"] is True and st["estop_latch"]["reason"] == "latch file missing"
        with pytest.raises(RobotCommandError) as exc:
            c.reset(0)
        assert exc.value.kind == "estopped"
        c.close()
    finally:
        srv.stop()
    out = srv.output()
    assert "could NOT persist" in out and "re-arm REFUSED" in out and "MISSING although this robot wrote it before" in out


# ---- 2: robots sharing a key keep one latch each -------------------------------------------------------------
def test_two_robots_sharing_the_environment_key_keep_their_own_latches(tmp_path):
    key_hex = os.urandom(32).hex()
    env = {**os.environ, "ROBOTRL_ROBOT_KEY": key_hex, "XDG_STATE_HOME": str(tmp_path / "state")}
    key = bytes.fromhex(key_hex)
    ep_a, ep_b = (f"tcp://127.0.0.1:{free_port()}" for _ in range(2))
    a = ServerProcess("null", SLOW, endpoint=ep_a, env=env).start()
    b = ServerProcess("null", SLOW, endpoint=ep_b, env=env).start()
    try:
        assert a.info["latch_file"] != b.info["latch_file"]
        assert Path(a.info["latch_file"]).parent == tmp_path / "state" / "robotrl" / "estop"
        ca, cb = RobotClient(ep_a, key), RobotClient(ep_b, key)
        ca.estop(reason="A stopped")
        cb.estop(reason="B stopped")
        cb.rearm(operator="carol")  # B is re-armed: that must not clear A's latch
        a.kill()  # kill -9
        a.start()
        st = ca.status()
        assert st["estopped"] is True and st["estop_latch"]["reason"] == "A stopped"
        assert cb.status()["estopped"] is False
        ca.close()
        cb.close()
    finally:
        a.stop()
        b.stop()
    # a latch file named explicitly for both: the second robot refuses to read the first one's record as its own
    shared = tmp_path / "shared.estop"
    robot = MuJoCoTwin("pointmaze-umaze", realtime=False)
    RobotServer(robot, make_supervisor(SIM_SAFETY, robot.spec()), key, robot_id="arm-A", latch_file=shared)
    with pytest.raises(ConfigError, match="belongs to robot 'arm-A'"):
        RobotServer(robot, make_supervisor(SIM_SAFETY, robot.spec()), key, robot_id="arm-B", latch_file=shared)


# ---- 3: an operator is never locked out ------------------------------------------------------------------------


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_slowloris_at_a_low_descriptor_limit_does_not_lock_out_a_new_connections_estop(tmp_path):
    keyfile = write_key_file(tmp_path / "robot.key")
    key = load_key(keyfile)
    srv = ServerProcess(keyfile, SLOW, fd_limit=256).start()
    pid, latch = srv.info["pid"], Path(srv.info["latch_file"])
    port = int(srv.endpoint.rsplit(":", 1)[1])
    attack = subprocess.Popen([sys.executable, "-c", SLOWLORIS, str(port), "8", "1200"], stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(2.5)  # the attacker holds as many unfinished frames as the server lets it (it asks for 1200)
        peak = open_fds(pid)
        # the operator's e-stop that needs no socket: SIGUSR1, latched and written within a tick
        os.kill(pid, signal.SIGUSR1)
        t0 = time.monotonic()
        while latch_record(latch).get("estopped") is not True:
            assert time.monotonic() - t0 < 1.0, "SIGUSR1 did not latch the e-stop"
            time.sleep(0.01)
        assert latch_record(latch)["reason"] == "SIGUSR1"
        # a NEW connection's authenticated e-stop is answered, with the status, during the attack
        t0 = time.monotonic()
        with RobotClient(srv.endpoint, key, timeout_s=1.0, link_timeout_s=3.0) as c:
            st = c.estop(reason="operator during slowloris")
            answered_s = time.monotonic() - t0
            assert st["estopped"] is True and st["held"] is True
            conns = c.status()["connections"]
        peak = max(peak, open_fds(pid))
        opened, cut, live = (int(x) for x in attack.communicate(timeout=30)[0].split())
    finally:
        if attack.poll() is None:
            attack.kill()
        srv.stop()
    assert answered_s < 2.0, answered_s
    assert opened > 256 and cut > 0, (opened, cut, live)  # the attacker opened more than the limit; the server cut
    assert peak < 256 - 32, peak  # the descriptors in use stayed below the limit with a reserve
    assert conns["unauth"] <= conns["max_unauth"] <= (256 - 64) // 2 and sum(conns["cut"].values()) > 0, conns
