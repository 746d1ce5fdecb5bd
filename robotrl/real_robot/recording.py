"""Recording deployed episodes as a Minari dataset through :func:`robotrl.data.writer.write_dataset`.

Each :class:`~robotrl.real_robot.control.EpisodeLog` becomes one
:class:`~robotrl.data.writer.Episode`: ``observations (T+1, Do)``, the **applied**
actions ``(T, Da)`` (what the robot executed, so ``robotrl train`` learns from what
happened), rewards, terminations, truncations (an episode cut by the loop — link lost,
``max_steps`` — ends truncated), and per-step ``infos`` with ``T+1`` entries (the first
entry belongs to the reset, as in Minari):

``success`` (the robot's, or the operator's ``y`` / ``n`` mark of the step,
:attr:`~robotrl.real_robot.teleop.TeleopCommand.label`: the labels the success classifier of
:mod:`robotrl.real_robot.reward_classifier` trains on), ``intervention`` (human takeover), ``requested_action (T+1, Da)`` (what
the loop sent before the safety supervisor), ``policy_action (T+1, Da)`` (NaN when the
policy had no action ready), ``safety_modified``, ``held``, ``rtt_s``, ``jitter_s`` (s)
and ``time`` (wall clock, s).

A robot with cameras (:attr:`RobotSpec.cameras`) is recorded with ``Dict`` observations
``{"state": float32 (T+1, Do), "<camera>": uint8 (T+1, H, W, C), ...}``, the layout of
camera datasets in :mod:`robotrl.data` (the LeRobot converter writes the same): its
:func:`~robotrl.data.load_dataset` keeps the frames out of the flat vector
(``OfflineData.images[camera]``) and ``ReplayBuffer.from_offline`` batches them.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

from robotrl.data.writer import Episode, write_dataset
from robotrl.real_robot.control import EpisodeLog
from robotrl.real_robot.interface import RobotSpec


def camera_frames(spec: RobotSpec, obs_images: list[dict | None]) -> dict[str, np.ndarray]:
    """``{camera: uint8 (T+1, H, W, C)}``: the frames of an episode's ``T+1`` observations, checked against
    ``spec.cameras`` (``obs_images[t]`` is observation ``t``'s ``{camera: frame}``).

    Raises:
        ValueError: a camera named ``state`` (it would collide with the state vector's key), a camera
            missing from an observation, or frames of another dtype or shape than its ``CameraSpec``.
    """
    out = {}
    for cam in spec.cameras:
        if cam.name == "state":
            raise ValueError("a camera named 'state' collides with the state vector's key in the recording; rename it")
        missing = [t for t, im in enumerate(obs_images) if not im or cam.name not in im]
        if missing:
            raise ValueError(f"robot {spec.name} lists camera {cam.name!r} but observations {missing[:5]} of the episode "
                             "carry no frame of it; the driver must send every camera's frame with every observation")
        frames = np.stack([np.asarray(im[cam.name]) for im in obs_images])  # type: ignore[index]
        if frames.dtype != np.uint8 or frames.shape[1:] != tuple(cam.shape):
            raise ValueError(f"camera {cam.name!r} sent {frames.dtype} frames of shape {frames.shape[1:]}, its CameraSpec "
                             f"says uint8 {tuple(cam.shape)}")
        out[cam.name] = frames
    return out


def _frames(log: EpisodeLog, spec: RobotSpec) -> dict[str, np.ndarray]:
    """``{camera: uint8 (T+1, H, W, C)}`` of a logged episode: each step's frames, then the final observation's."""
    return camera_frames(spec, [s.images for s in log.steps] + [log.final_obs.images])


def to_episode(log: EpisodeLog, spec: RobotSpec) -> Episode:
    """One :class:`Episode` from a deployed episode.

    Observations are ``(T+1, Do)`` float32, or for a robot with cameras the dict
    ``{"state": (T+1, Do), "<camera>": uint8 (T+1, H, W, C)}`` (each step's frames, then the
    final observation's).

    Raises:
        ValueError: the log holds no step; a camera of ``spec`` is missing from an
            observation, has another shape or dtype, or is named ``"state"``.
    """
    steps = log.steps
    if not steps:
        raise ValueError("episode has no steps; nothing to record")
    da = spec.action.dim
    nan = np.full(da, np.nan, np.float32)
    obs = np.stack([s.obs for s in steps] + [log.final_obs.state]).astype(np.float32)
    if spec.cameras:
        obs = {"state": obs, **_frames(log, spec)}
    first = lambda x: np.concatenate([[x[0] * 0], x])  # noqa: E731  reset entry

    def col(fn, dtype):
        return np.asarray([fn(s) for s in steps], dtype)

    infos = {
        "success": first(col(lambda s: s.success, bool)),
        "intervention": first(col(lambda s: s.intervention, bool)),
        "safety_modified": first(col(lambda s: bool(set(s.flags) - {"hold"}), bool)),
        "held": first(col(lambda s: s.requested is None, bool)),
        "rtt_s": first(col(lambda s: s.rtt_s, np.float64)),
        "jitter_s": first(col(lambda s: s.jitter_s, np.float64)),
        "time": first(col(lambda s: s.t, np.float64)),
        "requested_action": np.concatenate([nan[None], np.stack([nan if s.requested is None else s.requested for s in steps])]),
        "policy_action": np.concatenate([nan[None], np.stack([nan if s.policy_action is None else s.policy_action for s in steps])]),
    }
    terms = col(lambda s: s.terminated, bool)
    truncs = col(lambda s: s.truncated, bool)
    if not (terms[-1] or truncs[-1]):
        truncs[-1] = True  # cut by the loop: never bootstrap-free
    return Episode(obs, col(lambda s: s.applied, np.float32), col(lambda s: s.reward, np.float64), terms, truncs,
                   infos=infos, seed=log.seed)


def record_dataset(dataset_id: str, logs: list[EpisodeLog], spec: RobotSpec, *, root: str | os.PathLike | None = None,
                   provenance: dict | None = None, overwrite: bool = False):
    """Write the non-empty episodes of ``logs`` as Minari dataset ``dataset_id``; returns its directory.

    The observation space is the flat ``Box(Do,)`` of the robot, or with cameras
    ``Dict({"state": Box(Do,), "<camera>": Box(0, 255, (H, W, C), uint8), ...})``; the env
    spec is the twin's task when the robot has one (so ``robotrl train`` can evaluate on it).

    Raises:
        DatasetExistsError: the id is taken (see :func:`write_dataset`).
        DatasetFormatError: no episode has a step.
    """
    episodes = [to_episode(log, spec) for log in logs if log.steps]
    return record_episodes(dataset_id, episodes, spec, root=root, provenance=provenance, overwrite=overwrite)


def record_episodes(dataset_id: str, episodes: list[Episode], spec: RobotSpec, *, root: str | os.PathLike | None = None,
                    provenance: dict | None = None, overwrite: bool = False, description: str | None = None):
    """Write already built :class:`Episode` objects of robot ``spec`` as Minari dataset ``dataset_id``
    (what :func:`record_dataset` does after :func:`to_episode`; the online actor builds its
    episodes step by step); returns its directory.

    Episodes with ``Dict`` observations (``{"state": (T+1, Do), "<camera>": uint8 (T+1, H, W, C)}``,
    see :func:`to_episode`) are written with the ``Dict`` space of the robot's cameras; flat
    ``(T+1, Do)`` ones with ``Box(Do,)`` (also for a camera robot whose frames were not kept).

    Raises:
        DatasetExistsError: the id is taken and ``overwrite`` is false (see :func:`write_dataset`).
        DatasetFormatError: no episode, or an episode with no step.
        ValueError: some episodes carry camera frames and others do not.
    """
    with_frames = {isinstance(ep.observations, dict) for ep in episodes}
    if len(with_frames) > 1:
        raise ValueError("some episodes carry camera frames and others do not; record them as separate datasets")
    if spec.gym_env_id:
        from robotrl.envs import ensure_registered

        ensure_registered()  # gymnasium-robotics ids (PointMaze, Fetch) are registered lazily
    obs_space = gym.spaces.Box(-np.inf, np.inf, (spec.observation.dim,), np.float32)
    act_space = gym.spaces.Box(spec.action.low_array.astype(np.float32), spec.action.high_array.astype(np.float32),
                               (spec.action.dim,), np.float32)
    layout = None
    if spec.gym_env_id:
        from robotrl.data.spaces import layout_for_space
        from robotrl.envs import env_info

        layout = layout_for_space(env_info(spec.gym_env_id).observation_space)  # Dict twin: record its key order
        if layout is not None and layout.size != spec.observation.dim:
            layout = None
    prov = {"source": "robotrl.real_robot", "robot": spec.name, "robot_spec": spec.to_dict(), **dict(provenance or {})}
    if True in with_frames:  # {"state": Box(Do), camera: uint8 (H, W, C)}: what robotrl.data reads as a camera dataset
        obs_space = gym.spaces.Dict({"state": obs_space, **{c.name: gym.spaces.Box(0, 255, tuple(c.shape), np.uint8)
                                                             for c in spec.cameras}})
        if layout is not None:  # the state's own key order (a Dict twin) stays on record, the loader sees "state"
            prov["state_layout"] = {"keys": list(layout.keys), "shapes": [list(s) for s in layout.shapes]}
        layout = None
    env = spec.gym_env_id
    if env and (spec.extra.get("gym_env_kwargs") or spec.extra.get("max_episode_steps")):
        import copy

        env = copy.deepcopy(gym.spec(env))  # the twin's task as it ran: kwargs and time limit recorded too
        env.kwargs = {**env.kwargs, **dict(spec.extra.get("gym_env_kwargs") or {})}
        if spec.extra.get("max_episode_steps"):
            env.max_episode_steps = int(spec.extra["max_episode_steps"])
    return write_dataset(dataset_id, episodes, env=env, observation_space=obs_space, action_space=act_space,
                         provenance=prov, obs_layout=layout, root=root, overwrite=overwrite,
                         description=description or f"episodes deployed on {spec.name} through the robotrl real-robot bridge")
