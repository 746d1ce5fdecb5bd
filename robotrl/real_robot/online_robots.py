"""Robot access of the online actor: a robot in this process or a robot server.

:class:`LocalRobot` wraps any :class:`~robotrl.real_robot.interface.Robot` behind a local
:class:`~robotrl.real_robot.safety.SafetySupervisor` (the robot PC runs the actor);
:class:`RemoteRobot` drives a robot server through a
:class:`~robotrl.real_robot.client.RobotClient` (safety runs on the server). Both offer
``spec``, ``reset(seed)``, ``observe()``, ``step(action | None)``, ``estop``, ``rearm``, ``close``.
"""

from __future__ import annotations

import time

import numpy as np

from robotrl.real_robot.interface import Observation, Robot, RobotSpec
from robotrl.real_robot.safety import SafetySupervisor


class LocalRobot:
    """A :class:`Robot` in this process behind a :class:`SafetySupervisor` (the robot PC runs the actor).

    Args:
        robot: a connected (or connectable) robot; connected here if needed.
        supervisor: filters every command (bounds, rate limits, workspace, e-stop).
    """

    def __init__(self, robot: Robot, supervisor: SafetySupervisor):
        self.robot, self.supervisor = robot, supervisor
        if not robot.is_connected:
            robot.connect()
        self._obs: Observation | None = None

    def spec(self) -> RobotSpec:
        return self.robot.spec()

    def reset(self, seed: int | None) -> Observation:
        """Start an episode; the supervisor's motion history restarts from hold."""
        self.supervisor.hold("reset")
        self._obs = self.robot.reset(seed)
        return self._obs

    def observe(self) -> Observation:
        """The robot's latest observation (no command sent)."""
        self._obs = self.robot.get_observation()
        return self._obs

    def acquire_control(self, wait_s: float = 10.0) -> None:
        """Nothing to acquire: this process owns the robot."""

    def step(self, action: np.ndarray | None) -> tuple[np.ndarray, list[str], Observation]:
        """Filter and send ``action (Da,)`` (``None``: hold); returns applied ``(Da,)``, flags, next observation."""
        state = self._obs.state if self._obs is not None else None
        d = self.supervisor.hold("hold") if action is None else self.supervisor.filter(action, state)
        applied = self.robot.send_action(d.applied)
        self._obs = self.robot.get_observation()
        return np.asarray(applied, np.float32), list(d.flags), self._obs

    def estop(self) -> None:
        self.supervisor.estop()

    def rearm(self) -> None:
        self.supervisor.rearm()

    def close(self) -> None:
        try:
            self.robot.hold()
        finally:
            self.robot.disconnect()


class RemoteRobot:
    """A robot server through a :class:`~robotrl.real_robot.client.RobotClient` (safety runs on the server).

    Args:
        client: the robot link (``hello`` done here; for a robot with cameras its limits are raised to
            :func:`~robotrl.real_robot.protocol.camera_limits` of them).
        step_timeout_s: how long one step waits for its answer (s).
    """

    def __init__(self, client, step_timeout_s: float = 0.5):
        self.client, self.step_timeout_s = client, float(step_timeout_s)
        self._spec = client.hello()
        client.use_camera_limits()  # the frames travel in every observation (as in robotrl deploy)

    def spec(self) -> RobotSpec:
        return self._spec

    def reset(self, seed: int | None, acquire_wait_s: float = 10.0) -> Observation:
        """Start an episode. A lease still held by a dead actor (killed, its lease not yet
        lapsed) is waited for up to ``acquire_wait_s`` (s), never taken over.

        Raises:
            RobotCommandError: the lease stays held by another client, or the robot refuses the reset.
        """
        from robotrl.real_robot.client import RobotCommandError

        end = time.monotonic() + acquire_wait_s
        while True:
            try:
                return self.client.reset(seed)
            except RobotCommandError as exc:
                if exc.kind != "lease_held" or time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def observe(self) -> Observation:
        """The server's latest observation (no lease needed)."""
        return self.client.observe()

    def acquire_control(self, wait_s: float = 10.0) -> None:
        """Take the control lease for commands outside :meth:`reset` (scripted and human resets);
        a lease still held by a dead actor is waited for up to ``wait_s`` (s), never taken over.

        Raises:
            RobotCommandError: the lease stays held by another client.
        """
        from robotrl.real_robot.client import RobotCommandError

        if self.client.lease_held:
            return
        end = time.monotonic() + wait_s
        while True:
            try:
                self.client.acquire()
                return
            except RobotCommandError as exc:
                if exc.kind != "lease_held" or time.monotonic() > end:
                    raise
                time.sleep(0.2)

    def step(self, action: np.ndarray | None) -> tuple[np.ndarray, list[str], Observation]:
        """Send ``action (Da,)`` (``None``: hold) to the server; returns applied ``(Da,)``, flags, next observation."""
        ans = self.client.step(action, timeout_s=self.step_timeout_s)
        return np.asarray(ans["applied"], np.float32), list(ans["flags"]), ans["obs"]

    def estop(self) -> None:
        self.client.estop("teleop")

    def rearm(self) -> None:
        self.client.rearm()

    def close(self) -> None:
        try:
            self.client.release()
        finally:
            self.client.close()
