"""Start and stop a robot-server process (tests, benchmarks, notebooks).

``ServerProcess`` runs ``python -m robotrl.real_robot.cli robot-server`` on a free
loopback port (``endpoint=tcp://127.0.0.1:0``) and waits for its ready file; leaving
the ``with`` block terminates it (SIGTERM, then SIGKILL after ``stop_timeout_s``).
``ServerThread`` serves a robot from a thread of the calling process (same protocol,
same sockets; faster to start).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from robotrl.real_robot.interface import RobotConnectionError


class ServerProcess:
    """A robot server in a child process.

    Args:
        key_file: the bridge key file (mode 0600); the e-stop latch persists beside it, one file per robot
            (``<key_file>.<robot slug>.estop``, :func:`~robotrl.real_robot.latch.default_latch_path`) unless the
            overrides set ``latch_file=...``; ``"null"``: the key from ``$ROBOTRL_ROBOT_KEY`` (in ``env``).
        endpoint: where to bind (default: a free loopback port; give a fixed one to
            restart a server on the same endpoint).
        overrides: extra Hydra overrides, e.g. ``["robot.task=hopper"]``.
        start_timeout_s: how long to wait for the server to bind (s).
        fd_limit: the server process's file-descriptor limit (soft ``RLIMIT_NOFILE``), e.g. to test that a
            connection flood cannot exhaust it; ``None``: inherited.

    Attributes:
        endpoint: the bound endpoint; ``proc``: the ``subprocess.Popen``.

    Raises:
        RobotConnectionError: the server exited or did not bind in time (its output is in the message).
    """

    def __init__(self, key_file: str | os.PathLike, overrides: list[str] = (), start_timeout_s: float = 60.0,
                 stop_timeout_s: float = 10.0, env: dict | None = None, endpoint: str = "tcp://127.0.0.1:0",
                 fd_limit: int | None = None):
        self.key_file, self.overrides, self.bind_endpoint = str(key_file), list(overrides), endpoint
        self.start_timeout_s, self.stop_timeout_s = start_timeout_s, stop_timeout_s
        self.env, self.fd_limit = env, fd_limit
        self._dir = Path(tempfile.mkdtemp(prefix="robot-server-"))
        self.ready_file = self._dir / "ready.json"
        self.log_file = self._dir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.endpoint = ""

    def start(self) -> ServerProcess:
        cmd = [sys.executable, "-m", "robotrl.real_robot.cli", "robot-server", f"endpoint={self.bind_endpoint}",
               f"key_file={self.key_file}", f"ready_file={self.ready_file}", *self.overrides]
        self._log = open(self.log_file, "a")
        self.ready_file.unlink(missing_ok=True)
        limit = self.fd_limit

        def preexec() -> None:
            import resource

            hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
            resource.setrlimit(resource.RLIMIT_NOFILE, (int(limit), hard))  # type: ignore[arg-type]

        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     preexec_fn=preexec if limit is not None else None)
        end = time.monotonic() + self.start_timeout_s
        while not self.ready_file.exists():
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RobotConnectionError(f"robot server did not start: {self.output()[-2000:]}")
            time.sleep(0.05)
        self.endpoint = json.loads(self.ready_file.read_text())["endpoint"]
        return self

    @property
    def info(self) -> dict:
        """The server's ready file: ``endpoint``, ``pid``, ``latch_file``."""
        return json.loads(self.ready_file.read_text())

    def output(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def kill(self) -> None:
        """SIGKILL (a crash, no clean shutdown)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=self.stop_timeout_s)

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=self.stop_timeout_s)
        self._log.close()
        return self.proc.returncode

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class ServerThread:
    """A robot server in a thread of this process (tests, notebooks): a real ZeroMQ socket on loopback.

    Args:
        robot: a :class:`~robotrl.real_robot.interface.Robot`, not yet connected (it is
            connected here and disconnected by :meth:`stop`).
        supervisor: its :class:`~robotrl.real_robot.safety.SafetySupervisor`.
        key: the bridge key (bytes).
        **server_kw: passed to :class:`~robotrl.real_robot.server.RobotServer`.

    Attributes:
        server: the :class:`RobotServer`; ``endpoint``: its bound endpoint; ``error``: the
            exception that ended :meth:`RobotServer.serve`, if any.
    """

    def __init__(self, robot, supervisor, key: bytes, **server_kw):
        import threading

        from robotrl.real_robot.server import RobotServer

        self.robot = robot
        self.server = RobotServer(robot, supervisor, key, **server_kw)  # validates before the robot connects
        self.robot.connect()
        self.endpoint = self.server.bind()
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="robot-server", daemon=True)

    def _run(self) -> None:
        try:
            self.server.serve(self._stop.is_set)
        except BaseException as exc:  # recorded for the caller: the thread must not die silently
            self.error = exc

    @property
    def alive(self) -> bool:
        """Whether :meth:`RobotServer.serve` is still running."""
        return self._thread.is_alive()

    def start(self) -> ServerThread:
        """Start serving; returns ``self``."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving, close the socket and disconnect the robot."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.server.close()
        self.robot.disconnect()

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
