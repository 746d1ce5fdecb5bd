"""Building robots and their safety supervisors from the ``robot`` config group (``configs/robot/*.yaml``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from robotrl.errors import ConfigError
from robotrl.real_robot.interface import Robot, RobotSpec
from robotrl.real_robot.safety import SafetyConfig, SafetySupervisor, WorkspaceBox

#: the sections of a robot config that belong to the bridge, not to the driver: they are never passed to ``_target_``
BRIDGE_KEYS = ("name", "endpoint", "episode", "reset", "safety")


def make_robot(cfg: Mapping) -> Robot:
    """A (not yet connected) robot for the robot config ``cfg`` (``configs/robot/*.yaml``).

    The config's ``_target_`` names the driver: a class (or a function returning one) that
    ``hydra.utils.instantiate`` calls with every other key of the config as a keyword argument, except the
    bridge's own sections :data:`BRIDGE_KEYS` (``name``, ``endpoint``, ``episode``, ``reset``, ``safety``). A
    driver outside robotrl is selected the same way, by its import path (``docs/robot_driver_guide.md``).

    Raises:
        ConfigError: no ``_target_`` (an old ``driver:`` name says which ``_target_`` replaces it), a
            ``_target_`` that cannot be imported, arguments the driver does not take, or bad driver options.
        ImportError: a driver whose outside library is missing, e.g. the LeRobot adapter without
            ``pip install robotrl[lerobot]``.
    """
    from hydra.errors import InstantiationException
    from hydra.utils import get_object, instantiate

    target = cfg.get("_target_")
    if not target:
        old = cfg.get("driver")
        hint = (f"; `driver: {old}` is now `_target_: {_OLD_DRIVERS[old]}`" if old in _OLD_DRIVERS else
                f"; `driver: {old}` names no class: set `_target_` to your driver's import path" if old else "")
        raise ConfigError("the robot config has no _target_ (the driver class, e.g. robotrl.real_robot.sim.MuJoCoTwin)"
                          f"{hint} (see docs/robot_driver_guide.md)")
    kwargs = {k: v for k, v in cfg.items() if k not in BRIDGE_KEYS and k != "_target_"}
    try:
        get_object(str(target))
    except Exception as exc:  # hydra wraps what the import raised
        cause = exc.__cause__ or exc
        raise ConfigError(f"robot driver _target_={target} cannot be imported ({type(cause).__name__}: {cause}); give the "
                          "import path of the driver class (package.module.Class) of an installed package") from None
    try:
        return instantiate({"_target_": target, **kwargs}, _convert_="all", _recursive_=False)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, (ImportError, ConfigError)):
            raise cause from None  # the driver's own message says what to do
        raise ConfigError(f"robot driver _target_={target} could not be built from the robot config keys "
                          f"{sorted(kwargs)}: {(cause or exc)!s} (every key but {', '.join(BRIDGE_KEYS)} is passed "
                          "to the driver; see docs/robot_driver_guide.md)") from None


_OLD_DRIVERS = {"sim": "robotrl.real_robot.sim.MuJoCoTwin",
                "lerobot": "robotrl.real_robot.lerobot_adapter.LeRobotAdapter.from_robot_type"}


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
