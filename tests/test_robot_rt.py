"""Real-time scheduling of the robot server (``rt_priority``): a real server process, its threads checked in /proc.

Where this machine lets a process use ``SCHED_FIFO`` (root or ``CAP_SYS_NICE``), the server and every one of
its threads (libzmq's I/O threads included) run under it and still answer; where it does not, the server refuses
to start with an error that names the ways out. Either way a step round trip works or the failure is clear.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from robotrl.errors import ConfigError
from robotrl.real_robot.client import RobotClient
from robotrl.real_robot.interface import RobotConnectionError
from robotrl.real_robot.launch import ServerProcess
from robotrl.real_robot.protocol import load_key, write_key_file
from robotrl.real_robot.rt import set_rt_priority

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_setscheduler"), reason="SCHED_FIFO is Linux-only")


def _fifo_allowed() -> bool:
    probe = "import os; os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


def test_set_rt_priority_refuses_bad_values_and_leaves_scheduling_alone_when_off():
    before = os.sched_getscheduler(0)
    assert set_rt_priority(None) == "SCHED_OTHER" and os.sched_getscheduler(0) == before
    for bad in (0, 100, -5):
        with pytest.raises(ConfigError, match="outside 1-99"):
            set_rt_priority(bad)
    assert os.sched_getscheduler(0) == before


def test_server_runs_every_thread_under_sched_fifo_or_refuses_clearly(tmp_path):
    keyfile = write_key_file(tmp_path / "robot.key")
    if not _fifo_allowed():
        with pytest.raises(RobotConnectionError) as exc:
            ServerProcess(keyfile, ["robot.safety.rate_hz=20", "rt_priority=20"]).start()
        assert "rt_priority=20" in str(exc.value) and "CAP_SYS_NICE" in str(exc.value)
        return
    with ServerProcess(keyfile, ["robot.safety.rate_hz=20", "rt_priority=20"]) as srv:
        pid = srv.proc.pid
        with RobotClient(srv.endpoint, load_key(keyfile)) as c:
            c.hello()
            c.reset(0)
            obs = c.step(np.zeros(2, np.float32))
            assert obs is not None
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        assert len(tids) >= 2  # the main thread and libzmq's threads
        assert {os.sched_getscheduler(t) for t in tids} == {os.SCHED_FIFO}
        assert {os.sched_getparam(t).sched_priority for t in tids} == {20}
    # the default stays ordinary scheduling
    with ServerProcess(keyfile, ["robot.safety.rate_hz=20"]) as srv:
        assert os.sched_getscheduler(srv.proc.pid) == os.SCHED_OTHER
