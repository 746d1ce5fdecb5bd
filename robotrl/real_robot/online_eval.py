"""Short online runs on the MuJoCo twin and their evaluation (the learning test and benchmark).

:func:`run_twin_trial` starts a real ``robotrl learner`` and ``robotrl actor`` process (the
twin in the actor's process), optionally with the scripted "human", and stops both once the
actor is done and the learner has made the updates its schedule allows. The learner saves
every pushed version (``pushed_weights_dir``: ``v<version>.npz``, named arrays, no pickle);
:func:`pushed_policy` rebuilds one and :func:`evaluate_on_twin` runs it deterministically on
fixed seeds, so versions along the run (:func:`evaluate_trial`) are compared on the same
starts and goals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from robotrl.errors import CheckpointError
from robotrl.real_robot.protocol import write_key_file
from robotrl.real_robot.sim import DEADEND_MAP, LCORRIDOR_MAP, ZCORRIDOR_MAP


def pushed_versions(weights_dir: str | os.PathLike) -> list[int]:
    """Versions saved in ``weights_dir`` (sorted)."""
    return sorted(int(p.stem[1:]) for p in Path(weights_dir).glob("v*.npz"))


def pushed_policy(weights_dir: str | os.PathLike, version: int, target: str, kwargs: dict) -> torch.nn.Module:
    """The policy of pushed ``version`` (class ``target`` with ``kwargs``, e.g. the learner
    checkpoint's ``policy`` entry), in eval mode.

    Raises:
        CheckpointError: no such version saved, or weights that do not fit the class.
    """
    from robotrl.checkpoint import load_arrays
    from robotrl.policy import policy_class

    path = Path(weights_dir) / f"v{int(version)}.npz"
    if not path.exists():
        raise CheckpointError(f"{path} does not exist; versions saved: {pushed_versions(weights_dir)}")
    pol = policy_class(target)(**kwargs)
    try:
        pol.load_state_dict({k: torch.from_numpy(np.array(a)) for k, a in load_arrays(path).items()})
    except RuntimeError as exc:
        raise CheckpointError(f"weights {path} do not fit {target}: {exc}") from exc
    return pol.eval()


@torch.no_grad()
def evaluate_on_twin(policy: torch.nn.Module, task: str, seeds: list[int], max_steps: int,
                     env_kwargs: dict | None = None) -> dict:
    """Run ``policy`` (``(B, Do) -> (B, Da)``, deterministic) for one episode per seed on a
    :class:`~robotrl.real_robot.sim.MuJoCoTwin` of ``task`` without pacing.

    Returns:
        ``{"success_rate", "mean_return", "successes" [bool], "returns" [float], "steps_to_success"
        [int or None]}``: success means the twin reported success at some step (within ``max_steps``).
    """
    from robotrl.real_robot.sim import MuJoCoTwin

    twin = MuJoCoTwin(task, realtime=False, max_episode_steps=max_steps, env_kwargs=env_kwargs)
    twin.connect()
    succ, rets, first = [], [], []
    try:
        for s in seeds:
            o = twin.reset(int(s))
            ret, hit = 0.0, None
            for k in range(max_steps):
                a = policy(torch.as_tensor(o.state[None], dtype=torch.float32))[0].numpy()
                twin.send_action(a)
                o = twin.get_observation()
                ret += float(o.reward)
                if o.success and hit is None:
                    hit = k + 1
                if o.terminated or o.truncated:
                    break
            succ.append(hit is not None)
            rets.append(ret)
            first.append(hit)
    finally:
        twin.disconnect()
    return {"success_rate": float(np.mean(succ)), "mean_return": float(np.mean(rets)), "successes": succ,
            "returns": rets, "steps_to_success": first}


#: SAC settings for a short run: the dense reward ``exp(-distance)`` shifted by -1 (every step costs, so
#: reaching the goal, which ends the episode, is best; unshifted, hovering near the goal without
#: ending pays more), a near-sighted discount (the shaped reward already points to the goal), faster
#: learning rates and a lower initial temperature than the offline-to-online defaults
LEARNER = ("agent.gamma=0.9", "agent.reward_bias=-1.0", "agent.model.actor_lr=1e-3", "agent.model.critic_lr=1e-3", "agent.model.alpha_lr=1e-3",
           "agent.model.init_alpha=0.1")

#: The settings of :func:`run_twin_trial`
MODES = ("human", "demos", "none", "pretrained", "pretrained-human")
#: How :func:`run_twin_trial`'s scripted "human" takes over: by a schedule (whole episodes) or when the policy fails
OPERATORS = ("schedule", "on-failure")

#: SAC settings for the sparse-reward corridor (:data:`MAZES` ``lcorridor``): as :data:`LEARNER` but a far-sighted
#: discount, since the only reward is at the goal, about 135 steps from the start; a **fixed temperature** 0.01
#: (SAC's tuned one aims at entropy −Da = −2 nats, while a policy fitted to the controller's deterministic demos sits
#: near −7 to −15 nats: the tuning raised α 0.1 → 0.40 in Cal-QL pretraining and 0.65 online, the entropy rose
#: −6.6 → −0.4 nats, and with a cost of 1 per step the entropy bonus outweighed the Q gaps, so the pretrained policy
#: collapsed online); the critic started at the demonstrations' mean return (``critic_init=data``: it started 39
#: above it); and 10-step TD targets (with 1-step ones the ``human`` arm stayed at 0.00, with 10 it reached 1.00 in
#: the same pilot). Tuned on seed 100 only (the benchmark reports seeds 0, 1, 2).
LEARNER_SPARSE = ("agent.gamma=0.99", *LEARNER[1:], "agent.model.fixed_alpha=0.01", "agent.model.critic_init=data",
                  "trainer.n_step=10")

#: PointMaze maps: ``open`` a 2×2 room without inner walls; ``umaze`` the task's own U-maze; ``lcorridor``
#: an L-shaped corridor one cell (1 m) wide, fixed start ``r`` at the bottom of the vertical leg and goal
#: ``g`` at the end of the horizontal one (:data:`robotrl.real_robot.sim.LCORRIDOR_MAP`); ``zcorridor`` a corridor with
#: two turns where the ball must reverse (right, up, left: :data:`robotrl.real_robot.sim.ZCORRIDOR_MAP`); ``deadend``
#: the Z corridor's path with dead-end branches off it (:data:`robotrl.real_robot.sim.DEADEND_MAP`)
MAZES = {"open": [[1, 1, 1, 1], [1, 0, 0, 1], [1, 0, 0, 1], [1, 1, 1, 1]], "umaze": None, "lcorridor": LCORRIDOR_MAP,
         "zcorridor": ZCORRIDOR_MAP, "deadend": DEADEND_MAP}
#: the mazes with a robot config of their own (``robot=sim-<maze>``: map, sparse reward, a workspace box that holds it)
ROBOT_CONFIGS = ("lcorridor", "zcorridor", "deadend")


def _twin_episode(twin, policy, seed: int, max_steps: int, cameras: tuple[str, ...], hold_steps: int | None = None):
    """One episode of ``policy`` (flat state ``(Do,)`` -> action ``(Da,)``) on the connected ``twin`` from reset ``seed``,
    as an :class:`~robotrl.data.writer.Episode` with the twin's per-step success flag (``infos["success"]``) and, with
    ``cameras``, ``Dict`` observations ``{"state", "<camera>": uint8 (T+1, H, W, C)}``. It ends when the twin ends it
    (success or time limit), after at most ``max_steps`` steps, or ``hold_steps`` steps after the first success (a twin
    that does not end at the goal, ``continuing_task``; ``None``: no such end)."""
    from robotrl.data.writer import Episode

    o = twin.reset(seed)
    obs, acts, rews, terms, truncs, succ = [o.state], [], [], [], [], [o.success]
    frames = {c: [o.images[c]] for c in cameras}
    first = None
    for k in range(max_steps):
        acts.append(twin.send_action(policy(o.state)))
        o = twin.get_observation()
        obs.append(o.state)
        for c in cameras:
            frames[c].append(o.images[c])
        rews.append(o.reward)
        terms.append(o.terminated)
        truncs.append(o.truncated)
        succ.append(o.success)
        first = k if first is None and o.success else first
        if o.terminated or o.truncated or (hold_steps is not None and first is not None and k - first >= hold_steps):
            break
    truncs[-1] = truncs[-1] or not terms[-1]
    states = np.asarray(obs, np.float32)
    observations = {"state": states, **{c: np.stack(f) for c, f in frames.items()}} if cameras else states
    return Episode(observations, np.asarray(acts, np.float32), np.asarray(rews, np.float64), np.asarray(terms, bool),
                   np.asarray(truncs, bool), infos={"success": np.asarray(succ, bool)}, seed=seed)


def record_controller_demos(path: str | os.PathLike, *, episodes: int, max_steps: int, maze: str, reward: str,
                            seed: int = 0, cameras: list[str] | tuple[str, ...] = (), image_size: int = 64) -> Path:
    """Demonstrations of the scripted "human" (:func:`~robotrl.real_robot.teleop.maze_controller`: the P-D controller
    along the map's path from start to goal, straight to the goal on maps without fixed cells) on the twin, as a
    Minari dataset at ``path`` (``demos=<path>`` for the learner).

    With ``cameras`` (the twin's, rendered at ``image_size`` px) the dataset has ``Dict`` observations
    ``{"state": (T+1, Do), "<camera>": uint8 (T+1, H, W, C)}`` as the actor records them: demonstrations for a
    pixel learner (``agent=rlpd obs=pixels``) on the twin with the same cameras.

    Raises:
        DatasetExistsError: ``path`` already holds a dataset.
    """
    from robotrl.real_robot.recording import record_episodes
    from robotrl.real_robot.sim import MuJoCoTwin
    from robotrl.real_robot.teleop import maze_controller

    ctrl = maze_controller(MAZES[maze])
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=max_steps, env_kwargs=env_kwargs(maze, reward),
                      cameras=tuple(cameras), image_size=image_size, camera_views=camera_views(maze))
    twin.connect()
    try:
        eps = [_twin_episode(twin, ctrl, seed + i, max_steps, tuple(cameras)) for i in range(episodes)]
        spec = twin.spec()
    finally:
        twin.disconnect()
    p = Path(path)
    return record_episodes(p.name, eps, spec, root=p.parent, description="P-D controller demonstrations on the twin")


def dead_end_cells(maze: str) -> list[tuple[int, int]]:
    """(row, col) of ``maze``'s free cells off its start-to-goal path (:func:`~robotrl.real_robot.teleop.maze_path`):
    the dead ends of :data:`robotrl.real_robot.sim.DEADEND_MAP`; on a map whose free cells are all on the path (the
    corridors) its path cells short of the goal cell. Raises ValueError on a map without start and goal cells."""
    from robotrl.real_robot.teleop import maze_cell, maze_path

    m = MAZES[maze]
    pts = None if m is None else maze_path(m)
    if pts is None:
        raise ValueError(f"maze {maze!r} has no start and goal cells (r, g): the classifier recording needs them")
    path = [maze_cell(m, xy) for xy in pts]
    off = [(i, j) for i, row in enumerate(m) for j, v in enumerate(row) if v != 1 and (i, j) not in path]
    return off or path[:-1]


def _steer_to_cell(maze: str, cell: tuple[int, int]):
    """The path controller of ``maze`` with its goal moved to ``cell``: it drives from the start along the route to that
    cell's centre and holds there (flat state ``(Do,)`` -> action ``(2,)``)."""
    from robotrl.real_robot.teleop import cell_centre, maze_controller

    m = [[0 if v == "g" else v for v in row] for row in MAZES[maze]]
    m[cell[0]][cell[1]] = "g"
    centre = cell_centre(m, cell).astype(np.float32)
    ctrl = maze_controller(m)

    def policy(state: np.ndarray) -> np.ndarray:
        s = np.array(state, np.float32)
        s[2:4] = centre  # the controller's "goal": the dead end's centre, not the twin's goal
        return ctrl(s)

    return policy


def record_classifier_episodes(path: str | os.PathLike, *, episodes: int, max_steps: int, maze: str, reward: str,
                               seed: int = 0, cameras: list[str] | tuple[str, ...] = (), image_size: int = 64,
                               hold_steps: int = 20, noise: float = 0.3) -> Path:
    """A labelled recording for a success classifier on the twin, as HIL-SERL's operator records one: successes and
    failures, each step labelled by the twin's success flag (the ball within 0.45 m of the goal). Even episodes
    (``seed + i``): the path controller (:func:`~robotrl.real_robot.teleop.maze_controller`) to the goal, then
    ``hold_steps`` more steps around it (the twin does not end at the goal here: ``continuing_task``), so each
    success episode holds about ``hold_steps`` positive frames; odd ones: failures, the controller steering into the
    dead ends of :func:`dead_end_cells` in turn and staying there until ``max_steps``. Every action has Gaussian noise
    of std ``noise`` (clipped to the action box), so the frames vary; the noise is seeded by ``seed``.

    Returns:
        The Minari dataset's directory (``Dict`` observations ``{"state", "<camera>"}`` with ``cameras``, flat
        states without: the same episodes, the twin being deterministic given its reset seeds).

    Raises:
        DatasetExistsError: ``path`` already holds a dataset.
        ValueError: ``maze`` has no start and goal cells.
    """
    from robotrl.real_robot.recording import record_episodes
    from robotrl.real_robot.sim import MuJoCoTwin
    from robotrl.real_robot.teleop import maze_controller

    rng = np.random.default_rng(seed)
    ends = dead_end_cells(maze)
    to_goal = maze_controller(MAZES[maze])
    twin = MuJoCoTwin("pointmaze-umaze", realtime=False, max_episode_steps=max_steps + hold_steps,
                      env_kwargs={**env_kwargs(maze, reward), "continuing_task": True}, cameras=tuple(cameras),
                      image_size=image_size, camera_views=camera_views(maze))

    def noisy(ctrl):
        return lambda s: np.clip(ctrl(s) + rng.normal(0.0, noise, 2), -1.0, 1.0).astype(np.float32)

    twin.connect()
    try:
        eps = [_twin_episode(twin, noisy(to_goal), seed + i, max_steps + hold_steps, tuple(cameras), hold_steps)
               if i % 2 == 0 else
               _twin_episode(twin, noisy(_steer_to_cell(maze, ends[(i // 2) % len(ends)])), seed + i, max_steps,
                             tuple(cameras))
               for i in range(episodes)]
        spec = twin.spec()
    finally:
        twin.disconnect()
    p = Path(path)
    return record_episodes(p.name, eps, spec, root=p.parent,
                           description="labelled classifier episodes on the twin: controller to the goal and into dead ends")


def train_twin_classifier(work: str | os.PathLike, *, episodes: int, max_steps: int, maze: str, reward: str,
                          seed: int = 0, steps: int = 2000, threshold: float | None = None,
                          cameras: list[str] | tuple[str, ...] = (), image_size: int = 48,
                          encoder: str = "resnet10", channels: int = 8, pooling: str = "spatial_softmax") -> tuple[Path, dict]:
    """A success classifier (:mod:`robotrl.real_robot.reward_classifier`) for the twin, trained on the labelled
    recording of :func:`record_classifier_episodes` (``episodes`` episodes from reset seed ``seed``: half the
    controller to the goal, half into the dead ends, labelled by the twin's success flag), as an operator's marked
    recording would be; written to ``<work>/classifier.pt``.

    Without ``cameras``: the state classifier (the normalised flat state, a ``[256, 256]`` head). With ``cameras``
    (rendered at ``image_size`` px): HIL-SERL's camera classifier on the frames alone (``state=False``): a frozen
    ResNet-10 of width ``channels`` read from a local weights file (``<work>/resnet10.pt``, written here from a seeded
    random initialisation: no pretrained weights can be downloaded, so it is a floor for a pretrained trunk),
    spatial-softmax pooling, a 32-feature projection and a ``[64]`` head; ``encoder="drq"``: DrQ's small encoder
    trained from scratch instead. Both train with :func:`~robotrl.real_robot.reward_classifier.fit_success_classifier`
    (class-balanced BCE, ``steps`` Adam steps; 20 % of the episodes held out, stratified, half choosing the threshold
    unless ``threshold`` is given, half reporting the metrics).

    Returns:
        The classifier's path and its metrics (``fit_success_classifier``'s: precision, recall, F1, AUC... on the
        training, threshold and held-out episodes), plus ``"recording"``: its episodes, frames, positive frames and
        the SHA-256 of its states (the same recording for the state and the camera classifier of a seed).

    Raises:
        DatasetFormatError: the episodes hold only one class.
    """
    import hashlib

    from robotrl.data.dataset import load_dataset
    from robotrl.real_robot.reward_classifier import LabelledFrames, fit_success_classifier, save_classifier
    from robotrl.real_robot.reward_classifier import SuccessClassifier

    w = Path(work)
    w.mkdir(parents=True, exist_ok=True)
    data = load_dataset(str(record_classifier_episodes(w / "minari" / "classifier-data", episodes=episodes,
                                                       max_steps=max_steps, maze=maze, reward=reward, seed=seed,
                                                       cameras=cameras, image_size=image_size)))
    # the next observation of each step and its success flag: frames alone with cameras, the state alone without
    frames = LabelledFrames.from_dataset(data, cameras=bool(cameras), state=not cameras)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if cameras:
            kw: dict = {"encoder": encoder, "channels": channels, "pooling": pooling}
            if encoder == "resnet10":
                from robotrl.vision.encoders import ResNet10

                torch.save(ResNet10(3, channels).state_dict(), w / "resnet10.pt")
                kw["encoder_weights"] = str(w / "resnet10.pt")
            clf = SuccessClassifier(0, int(data.actions.shape[1]), hidden=[64], feature_dim=32,
                                    image_shapes={k: list(v.shape[1:]) for k, v in frames.images.items()}, **kw)
        else:
            clf = SuccessClassifier(frames.state.shape[1], int(data.actions.shape[1]), hidden=[256, 256])
    metrics = fit_success_classifier(clf, frames, steps=steps, batch_size=256 if not cameras else 64, holdout=0.2,
                                     threshold=threshold, seed=seed)
    metrics["recording"] = {"episodes": int(len(data.episode_starts)), "frames": len(frames),
                            "positive_frames": int(frames.labels.sum()),
                            "success_episodes": int(sum(bool(frames.labels[frames.episode == e].any())
                                                        for e in np.unique(frames.episode))),
                            "states_sha256": hashlib.sha256(np.ascontiguousarray(data.next_observations,
                                                                                 np.float32).tobytes()).hexdigest()}
    metrics["inputs"] = {"cameras": clf.camera_shapes(), "state_dim": clf.obs_dim}
    return save_classifier(w / "classifier.pt", clf, metrics["threshold"], metrics), metrics


def _cli(args: list[str], log: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "robotrl.real_robot.online_cli", *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, env=env)


def _status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / "status.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}


def camera_views(maze: str) -> dict:
    """The named camera views of ``maze``'s robot config (``robotrl/configs/robot/sim-<maze>.yaml``'s
    ``camera_views``, e.g. ``sim-deadend``'s ``goal``); ``{}`` for a maze without a robot config or views. The robot
    config is their one source: the recorders here and the actor's twin (``robot=sim-<maze>``) read the same views."""
    from importlib import resources

    from omegaconf import OmegaConf

    if maze not in ROBOT_CONFIGS:
        return {}
    cfg = OmegaConf.load(str(resources.files("robotrl") / "configs" / "robot" / f"sim-{maze}.yaml"))
    return dict(OmegaConf.to_container(cfg.get("camera_views") or OmegaConf.create({})))


def robot_overrides(maze: str, reward: str, max_steps: int, paced: bool = False) -> list[str]:
    """Hydra overrides of the twin (learner and actor): PointMaze, ``maze`` map, ``reward`` type; ``paced``: the
    twin keeps to wall-clock time (real-time pacing, as a physical robot), else it steps as fast as asked.
    ``lcorridor``, ``zcorridor`` and ``deadend`` are the robot configs ``robot=sim-lcorridor`` / ``robot=sim-zcorridor``
    / ``robot=sim-deadend``."""
    paced_s = f"robot.realtime={str(bool(paced)).lower()}"
    if maze in ROBOT_CONFIGS:  # its own robot config (map, sparse reward, a workspace box that holds the map)
        return [f"robot=sim-{maze}", paced_s, f"robot.max_episode_steps={max_steps}",
                *(["robot.env_kwargs.reward_type=dense"] if reward == "dense" else [])]
    out = ["robot.task=pointmaze-umaze", paced_s, f"robot.max_episode_steps={max_steps}"]
    if MAZES[maze] is not None:
        out.append(f"+robot.env_kwargs.maze_map={json.dumps(MAZES[maze]).replace(' ', '')}")
    if reward == "dense":
        out.append("+robot.env_kwargs.reward_type=dense")
    return out


def env_kwargs(maze: str, reward: str) -> dict:
    """The twin's ``env_kwargs`` of ``maze`` and ``reward`` (for :func:`evaluate_on_twin`)."""
    kw: dict = {}
    if MAZES[maze] is not None:
        kw["maze_map"] = MAZES[maze]
    if reward == "dense":
        kw["reward_type"] = "dense"
    return kw


def run_twin_trial(work: Path, *, mode: str = "human", seed: int = 0, episodes: int = 30, max_steps: int = 150,
                   rate: float = 100.0, utd: float = 1.0, push_s: float = 1.0, every: int = 2, maze: str = "open",
                   reward: str = "dense", hidden: int = 64, batch: int = 128, warmup: int = 500,
                   learner_overrides: list[str] | tuple[str, ...] = LEARNER, catch_up_s: float = 300.0,
                   demo_episodes: int = 20, pretrain_steps: int = 1000, paced: bool = False,
                   reward_classifier: str | os.PathLike | None = None, operator: str = "schedule",
                   cameras: list[str] | tuple[str, ...] = (), image_size: int = 64) -> dict:
    """One short online run on the PointMaze twin: a ``robotrl learner`` and a ``robotrl actor`` process.

    Args:
        work: directory for the key, logs, learner run dir (``learner/``), actor work dir
            (``actor/``) and the pushed versions (``pushed/``).
        mode: ``"human"``: the scripted "human" (:func:`~robotrl.real_robot.teleop.maze_controller`) drives every
            ``every``-th episode, its steps also enter the demonstration buffer, batches are
            half demonstrations (``offline_ratio`` 0.5); ``"demos"``: no human, the learner starts
            with ``demo_episodes`` controller demonstrations (:func:`record_controller_demos`),
            ``offline_ratio`` 0.5; ``"none"``: no human, no demonstrations, ``offline_ratio`` 0;
            ``"pretrained"``: offline-pretrained then online: the same demonstrations, ``pretrain_steps``
            Cal-QL updates on them in the learner before the actor starts (``trainer.offline_steps``), then
            SAC online (``online_algo=sac``) with the demonstrations kept at ``offline_ratio`` 0.5;
            ``"pretrained-human"``: as ``"pretrained"``, and the scripted "human" drives as in ``"human"``.
        seed: learner seed; the actor's reset seeds start at ``1000 · seed``.
        episodes, max_steps: actor episodes and their step limit (also the twin's time limit).
        rate: actor control rate (Hz).
        paced: the actor's twin keeps to wall-clock time (``robot.realtime=true``); else it is unpaced and
            only the actor's loop sets the rate.
        utd: the learner's critic updates per transition received (``trainer.utd``).
        push_s: weights push period (s).
        maze, reward: :data:`MAZES` key and ``"dense"``/``"sparse"`` (the twin's reward).
        hidden, batch, warmup: SAC width (2 critics), batch size, transitions before updates.
        learner_overrides: more learner Hydra overrides (default :data:`LEARNER`).
        catch_up_s: how long to wait for the learner's remaining updates after the actor is done (s).
        operator: how the scripted "human" of ``"human"`` / ``"pretrained-human"`` takes over: ``"schedule"`` drives every
            ``every``-th episode in full; ``"on-failure"`` (HIL-SERL's operator, ``scripted.on_failure=true``:
            :class:`~robotrl.real_robot.teleop.OnFailureTakeover`) watches every episode and takes over only when the
            policy is stuck or heading back, drives 50 steps, then hands back.
        reward_classifier: a success classifier (``classifier.pt``, e.g. :func:`train_twin_classifier`): the
            actor's reward is its thresholded score of the observation each step led to (the state, or with a camera
            classifier the frames) and its success ends the episode (``reward=classifier``, HIL-SERL) instead of the
            twin's reward, and the actor's twin does not end at its goal (``continuing_task``): only the classifier or
            the time limit ends an episode, as on a robot without a reward of its own (the twin's success flag is
            kept as the episode log's ``robot_success``, the audit of the verdicts); ``None``: the twin's.
        cameras, image_size: cameras the actor's twin renders (``robot.cameras=[...] robot.image_size=N``), e.g. the
            ones a camera classifier reads. The learner stays a state learner on the twin without cameras: its
            ``welcome`` asks for no frames, so the actor sends the transitions without them (it still records them).

    Returns:
        ``{"run_dir", "weights_dir", "t0" (wall clock at the actor's start, s), "actor_s", "wall_s",
        "learner_start_s" (learner launch to ready: start-up plus any offline pretraining, s),
        "summary" (the actor's), "status" (the learner's last), "episode_log" (the actor's line per episode:
        ``steps``, ``return``, ``success``, ``interventions``, ...), "learner_args", "actor_args" (the two processes'
        command lines after ``python -m robotrl.real_robot.online_cli``), "updates_target" (the updates the schedule
        allows for the transitions received: the learner caught up if its ``updates`` reached it within ``catch_up_s``)}``.

    Raises:
        ValueError: ``mode`` is not one of :data:`MODES`, or ``operator`` not one of :data:`OPERATORS`.
        RuntimeError: the learner did not start or the actor failed (with the end of its log).
    """
    work.mkdir(parents=True, exist_ok=True)
    key = write_key_file(work / "online.key")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MINARI_DATASETS_PATH": str(work / "minari")}
    robot = robot_overrides(maze, reward, max_steps)
    actor_robot = robot_overrides(maze, reward, max_steps, paced)
    if cameras:  # the actor's twin renders them (a camera classifier's); the learner learns from states
        actor_robot += [f"robot.cameras=[{','.join(cameras)}]", f"robot.image_size={int(image_size)}"]
    run_dir, actor_dir, wdir = work / "learner", work / "actor", work / "pushed"
    h = f"[{hidden},{hidden}]"
    demos = []
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if operator not in OPERATORS:
        raise ValueError(f"operator must be one of {', '.join(OPERATORS)}, got {operator!r}")
    pretrain, human = mode.startswith("pretrained"), mode in ("human", "pretrained-human")
    if mode in ("demos", "pretrained", "pretrained-human"):
        path = record_controller_demos(work / "minari" / "demos", episodes=demo_episodes, max_steps=max_steps,
                                       maze=maze, reward=reward, seed=10 ** 6 + seed * 1000)
        demos = [f"demos={path}"]
    learner_args = ["learner", f"key_file={key}", *robot, "endpoint=tcp://127.0.0.1:0", f"run_dir={run_dir}",
                    f"ready_file={work / 'learner.ready'}", f"agent={'calql' if pretrain else 'sac'}",
                    "agent.model.num_critics=2",
                    f"agent.model.hidden={h}", f"agent.model.critic_hidden={h}", f"trainer.batch_size={batch}",
                    f"trainer.online_warmup_steps={warmup}", f"trainer.utd={utd}",
                    f"trainer.offline_ratio={0.0 if mode == 'none' else 0.5}", *demos, f"push_period_s={push_s}",
                    "checkpoint_every_s=10", f"pushed_weights_dir={wdir}", f"seed={seed}", *learner_overrides]
    if pretrain:
        learner_args += ["agent.model.online_algo=sac", f"trainer.offline_steps={pretrain_steps}"]
    t_launch = time.time()
    learner = _cli(learner_args, work / "learner.log", env)
    end = time.monotonic() + 300 + (pretrain_steps / 4 if pretrain else 0)  # generous: a loaded shared machine
    while not (work / "learner.ready").exists():
        if learner.poll() is not None or time.monotonic() > end:
            learner.kill()  # a learner still starting (too slow) is not left running
            learner.wait()
            raise RuntimeError(f"learner did not start: {(work / 'learner.log').read_text()[-2000:]}")
        time.sleep(0.1)
    endpoint = json.loads((work / "learner.ready").read_text())["endpoint"]
    learner_start_s = time.time() - t_launch  # start-up, and the offline pretraining of mode "pretrained"
    actor_args = ["actor", f"key_file={key}", *actor_robot, f"learner={endpoint}", f"episodes={episodes}",
                  f"max_steps={max_steps}", f"rate_hz={rate}", f"work_dir={actor_dir}", f"seed={1000 * seed}",
                  f"teleop={'scripted' if human else 'none'}", f"scripted.every={every}", "scripted.start=0",
                  f"scripted.length={max_steps}", f"scripted.on_failure={str(operator == 'on-failure').lower()}",
                  f"dataset_id=robot/bench/online-{mode}-{seed}-v0"]
    if reward_classifier is not None:  # a robot without a reward of its own: the twin no longer ends at its goal, only
        # the classifier's success does (else the twin's termination at the goal would tell the learner the goal)
        actor_args += ["reward=classifier", f"reward_classifier={reward_classifier}",
                       "+robot.env_kwargs.continuing_task=true"]
    t0 = time.time()
    actor = _cli(actor_args, work / "actor.log", env)
    try:
        if actor.wait() != 0:
            raise RuntimeError(f"actor failed: {(work / 'actor.log').read_text()[-2000:]}")
        t_actor = time.time() - t0
        st = _status(run_dir)  # the learner catches up with the updates its schedule allows
        target = int((st["ingested"] - warmup + 1) * utd) - 1
        end = time.monotonic() + catch_up_s
        while _status(run_dir).get("updates", 0) < target and time.monotonic() < end:
            time.sleep(0.5)
        learner.send_signal(signal.SIGTERM)
        learner.wait(timeout=120)
    finally:
        for p in (actor, learner):
            if p.poll() is None:
                p.kill()
                p.wait()
    summary = json.loads((actor_dir / "summary.json").read_text())
    st = _status(run_dir)
    episode_log = [json.loads(line)["episode"] for line in (work / "actor.log").read_text().splitlines()
                   if line.startswith('{"episode"')]
    return {"run_dir": run_dir, "weights_dir": wdir, "t0": t0, "actor_s": t_actor, "wall_s": time.time() - t0,
            "learner_start_s": learner_start_s, "summary": summary, "status": st, "episode_log": episode_log,
            "learner_args": learner_args, "actor_args": actor_args, "updates_target": target}


def evaluate_trial(r: dict, *, maze: str, reward: str, max_steps: int, seeds: list[int], every_s: float) -> dict:
    """Success of the saved versions along the run (version nearest each ``every_s`` mark, and the last)."""
    from robotrl.checkpoint import load_checkpoint

    ck = load_checkpoint(r["run_dir"] / "checkpoints" / "latest.pt")
    target, kwargs = ck["policy"]["target"], ck["policy"]["kwargs"]
    wdir = r["weights_dir"]
    versions = pushed_versions(wdir)
    at = {v: (wdir / f"v{v}.npz").stat().st_mtime - r["t0"] for v in versions}
    picks, mark = [versions[0]], every_s
    for v in versions:
        if at[v] >= mark:
            picks.append(v)
            while mark <= at[v]:
                mark += every_s
    if picks[-1] != versions[-1]:
        picks.append(versions[-1])
    curve = []
    for v in picks:
        ev = evaluate_on_twin(pushed_policy(wdir, v, target, kwargs), "pointmaze-umaze", seeds, max_steps,
                              env_kwargs(maze, reward))
        curve.append({"version": v, "minutes": round(max(at[v], 0.0) / 60, 3), "success": ev["success_rate"],
                      "mean_return": ev["mean_return"]})
    return {"curve": curve, "before": curve[0], "after": curve[-1]}
