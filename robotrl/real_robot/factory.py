"""Building robots and their safety supervisors from the ``robot`` config group (``configs/robot/*.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import Robot, RobotSpec
from robotrl.real_robot.safety import SafetyConfig, SafetySupervisor, WorkspaceBox

DRIVERS = ("sim", "lerobot")


def make_robot(cfg: Mapping) -> Robot:
    """A (not yet connected) robot for config ``cfg`` (``driver: sim | lerobot``).

    Raises:
        ConfigError: unknown driver (lists the known ones) or bad driver options.
        ImportError: ``driver: lerobot`` without ``pip install robotrl[lerobot]``.
    """
    driver = cfg.get("driver")
    if driver == "sim":
        from robotrl.real_robot.sim import MuJoCoTwin

        faults = dict(cfg.get("faults") or {})
        return MuJoCoTwin(cfg.get("task", "pointmaze-umaze"), realtime=bool(cfg.get("realtime", True)), faults=faults,
                          max_episode_steps=cfg.get("max_episode_steps"), env_kwargs=dict(cfg.get("env_kwargs") or {}),
                          cameras=list(cfg.get("cameras") or ()), image_size=int(cfg.get("image_size") or 64))
    if driver == "lerobot":
        from robotrl.real_robot.lerobot_adapter import LeRobotAdapter

        return LeRobotAdapter.from_config(cfg)
    raise ConfigError(f"unknown robot driver {driver!r}; choose one of {DRIVERS} (see docs/robot_driver_guide.md to add one)")


def make_supervisor(safety: Mapping | None, spec: RobotSpec, rate_hz: float | None = None) -> SafetySupervisor:
    """The :class:`SafetySupervisor` of a robot; ``null`` entries default to the spec's bounds/hold/rate.

    Raises:
        ConfigError: inconsistent limits (see :class:`SafetyConfig`).
    """
    s = dict(safety or {})
    low = s.get("low") if s.get("low") is not None else list(spec.action.low)
    high = s.get("high") if s.get("high") is not None else list(spec.action.high)
    if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
        raise ConfigError(f"robot {spec.name} has unbounded actions; set safety.low and safety.high in its config")
    ws = s.get("workspace")
    cfg = SafetyConfig(
        low=[float(x) for x in low], high=[float(x) for x in high],
        hold_action=[float(x) for x in (s.get("hold_action") or spec.hold_action)],
        rate_hz=float(rate_hz or s.get("rate_hz") or spec.control_rate_hz),
        max_delta=s.get("max_delta"), max_velocity=s.get("max_velocity"), max_acceleration=s.get("max_acceleration"),
        workspace=WorkspaceBox(**dict(ws)) if ws else None, watchdog_s=s.get("watchdog_s"),
        estop_on_nonfinite=bool(s.get("estop_on_nonfinite", True)), hold_mode=str(s.get("hold_mode", "fixed")))
    return SafetySupervisor(cfg)
