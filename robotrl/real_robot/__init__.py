"""Real-robot bridge (installed as ``robotrl.real_robot``).

Robot interface and drivers (MuJoCo twin, LeRobot adapter), safety supervisor, robot
server and client over ZeroMQ (msgpack + HMAC-SHA256), fixed-rate control loop with
asynchronous chunked inference, recording to Minari, and policy export (TorchScript/ONNX).
Heavy modules (MuJoCo, torch, zmq) load only in the submodules that need them.
"""

from robotrl.real_robot.interface import (
    ArraySpec,
    Observation,
    ProtocolError,
    Robot,
    RobotConnectionError,
    RobotError,
    RobotSpec,
)
from robotrl.real_robot.safety import Decision, SafetyConfig, SafetySupervisor, WorkspaceBox

__all__ = ["ArraySpec", "Observation", "ProtocolError", "Robot", "RobotConnectionError", "RobotError", "RobotSpec",
           "Decision", "SafetyConfig", "SafetySupervisor", "WorkspaceBox"]
