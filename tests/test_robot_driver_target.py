"""Robot drivers selected by ``_target_`` (issue 42, item 6): an out-of-tree driver served by ``robotrl robot-server``.

The driver class lives outside robotrl (``tests/drivers/toy_slider.py``), its robot config in a config directory
of the user's (``--config-dir``), exactly as ``docs/robot_driver_guide.md`` describes; the real server process
builds it through :func:`robotrl.real_robot.factory.make_robot` and a real client drives it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

from robotrl.errors import ConfigError
from robotrl.real_robot.client import RobotClient
from robotrl.real_robot.factory import make_robot
from robotrl.real_robot.launch import ServerProcess
from robotrl.real_robot.protocol import load_key, write_key_file

DRIVERS = Path(__file__).resolve().parent / "drivers"

TOY_CONFIG = """\
name: toy-slider
_target_: toy_slider.ToySlider
rate_hz: 20.0
max_speed: 0.5
start: 0.25
endpoint: tcp://127.0.0.1:0
safety:
  low: [-0.4]
  high: [0.4]
  max_delta: null
  workspace: null
  hold_mode: fixed
"""


def test_out_of_tree_driver_is_served_by_robot_server_through_its_target(tmp_path):
    conf = tmp_path / "conf" / "robot"
    conf.mkdir(parents=True)
    (conf / "toy.yaml").write_text(TOY_CONFIG)
    key = write_key_file(tmp_path / "robot.key")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(DRIVERS), *sys.path])}
    with ServerProcess(key, [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "robot=toy"], env=env,
                       start_timeout_s=180) as srv:  # its start under CI load
        with RobotClient(srv.endpoint, load_key(key)) as c:
            spec = c.hello()
            assert spec.name == "toy-slider" and spec.action.names == ("vel_cmd",) and spec.control_rate_hz == 20.0
            assert c.reset(seed=0).state.tolist() == [0.25, 0.0]  # the config's start reached the driver
            ans = c.step(np.array([0.3], np.float32))
            np.testing.assert_allclose(ans["applied"], [0.3])
            ans = c.step(np.array([0.9], np.float32))  # the supervisor clips to the config's safety.high first
            np.testing.assert_allclose(ans["applied"], [0.4])
            assert c.observe().state[0] == pytest.approx(0.25 + 0.3 / 20 + 0.4 / 20)  # (the watchdog may zero vel)
    assert "toy-slider listening" in srv.output()


def test_target_errors_are_one_line_and_say_the_way_out():
    with pytest.raises(ConfigError, match=r"_target_: robotrl\.real_robot\.sim\.MuJoCoTwin"):
        make_robot({"driver": "sim", "task": "pointmaze-umaze"})
    with pytest.raises(ConfigError, match="cannot be imported"):
        make_robot({"_target_": "no_such_package.Arm"})
    with pytest.raises(ConfigError, match=r"could not be built.*\['no_such_option'\]"):
        make_robot({"_target_": "robotrl.real_robot.sim.MuJoCoTwin", "no_such_option": 1, "safety": {}})
