"""Online RL on a robot: the actor (robot side) and the learner (anywhere), HIL-SERL style.

**Actor** (:class:`OnlineActor`): a fixed-rate loop (period ``1 / rate_hz`` s) against a
robot (:class:`LocalRobot`: any :class:`~robotrl.real_robot.interface.Robot` behind a
local :class:`~robotrl.real_robot.safety.SafetySupervisor`; :class:`RemoteRobot`: a robot
server through :class:`~robotrl.real_robot.client.RobotClient`). Per tick: poll the teleop
device (a takeover replaces the policy's action and flags the step), act with the newest
weights the learner pushed, step the robot, and hand the transition (observation, applied
and requested action, policy action, reward, terminated, truncated, intervention flag,
safety flags, timing, weights version) to the :class:`~robotrl.real_robot.learner_link.ActorLink`
and to the episode recorder (:class:`EpisodeRecorder`, one atomically written ``.npz``
per finished episode, assembled into a Minari dataset). Without a learner the actor keeps
acting with its last weights (``on_learner_lost="continue"``) or holds the robot
(``"hold"``, the steps are still recorded and flagged ``held``), and keeps recording.

**Learner** (:class:`OnlineLearner`): any off-policy agent (``QLAgent``: RLPD, WSRL, SAC
configs) with offline demonstrations in one buffer and the robot's experience in another,
sampled at ``offline_ratio`` (RLPD 50/50) by :class:`~robotrl.data.mixing.MixedSampler`;
intervention steps also enter the demonstration buffer (HIL-SERL). ``trainer.utd`` critic
updates per transition received (the one meaning of UTD, :mod:`robotrl.utd`; a fraction updates
less often); weights pushed every ``push_period_s``; the one :class:`~robotrl.runner.Runner` drives
it: TensorBoard in ``run_dir/tb``, the report, one atomic checkpoint file
``run_dir/checkpoints/latest.pt`` (agent, both buffers, per-actor delivery state) every
``checkpoint_every_s`` and when an actor asks (``sync``); a restarted learner resumes
from it and the actors resend whatever it does not hold.

**Cameras** (:mod:`~robotrl.real_robot.online_pixels`): a pixel agent (``agent=rlpd obs=pixels``,
``agent=residual-offpolicy obs=pixels``) learns from the robot's frames + state; the actor sends each transition's
frames to it, both buffers store each frame once, and the actor acts with the pushed pixel policy (encoder
included) on the robot's frames. Robot, demonstrations, learner and actor must agree on every camera and frame
size (refused at start otherwise); a state agent on a camera robot ignores the frames.

Units: time in s, rates in Hz, actions/observations in the robot's units (``Do``, ``Da``); frames uint8
``(H, W, C)``.
"""

from robotrl.real_robot.online_actor import LOST_MODES, ActorSummary, OnlineActor, PolicyHolder
from robotrl.real_robot.online_learner import OnlineLearner
from robotrl.real_robot.online_recording import EpisodeRecorder
from robotrl.real_robot.online_robots import LocalRobot, RemoteRobot

__all__ = ["LOST_MODES", "ActorSummary", "EpisodeRecorder", "LocalRobot", "OnlineActor", "OnlineLearner", "PolicyHolder",
           "RemoteRobot"]
