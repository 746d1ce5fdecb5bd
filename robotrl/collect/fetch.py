"""Fetch Push / PickAndPlace datasets from a scripted expert, with noisy and mixed variants.

Recipe:

* Env: ``FetchPush-v4`` / ``FetchPickAndPlace-v4`` (gymnasium-robotics), sparse reward
  (-1 per step until the object is within 5 cm of the goal, then 0), 50-step episodes
  that end in a truncation (the task never terminates). Episode ``k`` resets with
  seed ``seed + k``.
* Actions (4,) in [-1, 1]: ``dx, dy, dz`` (1.0 = 5 cm of end-effector motion per step)
  and the gripper (+1 opens, -1 closes).
* Expert (:class:`FetchExpert`), a closed-loop script on the observation
  (``observation[0:3]`` gripper xyz, ``[3:6]`` object xyz, ``[9:11]`` finger positions):

  - push: fingers closed; hover 6 cm above a point 5 cm behind the object on the
    object->goal line, descend to the object's height, then push along the line while
    servoing to stay behind the object; if the object slips off the line, lift and
    re-approach; hold still once the object is within 1.5 cm of the goal.
  - pick-and-place: above the object with the gripper open, descend, close for a few
    steps, lift and carry so that the object moves to the goal, keep closed; if the
    object is dropped, start over.

* Quality: ``expert`` = the script; ``noisy`` = the script plus Gaussian noise of
  std ``sigma`` (default 0.3, on all 4 action dims) and, with probability ``epsilon``
  (default 0.3) per step, a uniform random action instead; clipped to [-1, 1].
  ``mixed`` = alternating episodes expert / noisy (even ``k`` expert). This follows the
  expert/noisy Fetch datasets used in offline goal-conditioned RL (e.g. WGCSL).
* Reference scores on the same env (stored as ``eval_env_spec`` too): random uniform
  actions and the noise-free expert, each averaged over ``ref_episodes`` (default 100)
  episodes seeded ``123 + i``.

Observations stay the env's Dict; ``infos["success"]`` (T+1,) is the env's
``is_success`` (reset entry computed from the initial observation) and
``infos["noisy"]`` (T+1,) marks steps of the noisy policy.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from robotrl.collect._common import (
    EpisodeRecorder,
    base_provenance,
    camera_facts,
    make_env,
    mean_return,
    progress_bar,
    random_policy,
    task_spec,
    with_cameras,
)
from robotrl.data.writer import write_dataset
from robotrl.errors import ConfigError

__all__ = ["collect_fetch", "FetchExpert", "FETCH_TASKS", "NoisyPolicy"]

FETCH_TASKS = {"push": "FetchPush-v4", "pickandplace": "FetchPickAndPlace-v4"}
QUALITIES = ("expert", "noisy", "mixed")


class FetchExpert:
    """Scripted expert for FetchPush / FetchPickAndPlace (see the module docstring).

    Args:
        task: ``"push"`` or ``"pickandplace"``.
        gain: proportional gain; action = ``gain * error_m / 0.05``, clipped to [-1, 1].

    ``policy(obs) -> (4,) float32``. Call :meth:`reset` at every env reset.
    """

    def __init__(self, task: str, gain: float = 2.0):
        if task not in FETCH_TASKS:
            raise ConfigError(f"unknown Fetch task {task!r}; choose one of {sorted(FETCH_TASKS)}")
        self.task = task
        self.gain = gain
        self.reset()

    def reset(self) -> None:
        """Clear the script's phase (call at each env reset)."""
        self.phase = "approach"
        self.close_steps = 0

    def _move(self, err) -> np.ndarray:
        return np.clip(self.gain * np.asarray(err) / 0.05, -1.0, 1.0)

    def __call__(self, obs) -> np.ndarray:
        o = np.asarray(obs["observation"], dtype=np.float64)
        grip, obj, goal = o[0:3], o[3:6], np.asarray(obs["desired_goal"], dtype=np.float64)
        fn = self._push if self.task == "push" else self._pick
        return fn(grip, obj, goal, o[9:11]).astype(np.float32)

    def _push(self, grip, obj, goal, fingers) -> np.ndarray:
        to_goal = goal[:2] - obj[:2]
        dist = float(np.linalg.norm(to_goal))
        if dist < 0.015:
            return np.array([0.0, 0.0, 0.0, -1.0])
        d = to_goal / dist
        behind = obj[:2] - d * 0.06
        rel = grip[:2] - obj[:2]
        along = float(rel @ d)  # negative: gripper behind the object
        lateral = abs(float(rel[0] * d[1] - rel[1] * d[0]))
        low_z, high_z = obj[2], obj[2] + 0.07
        if self.phase == "push" and (lateral > 0.03 or along > -0.02):
            self.phase = "approach"  # object slipped off the line or gripper got ahead of it
        if self.phase == "approach":
            xy_err = behind - grip[:2]
            if np.linalg.norm(xy_err) > 0.015:
                if grip[2] < high_z - 0.02 and np.linalg.norm(rel) < 0.1:
                    return np.array([0.0, 0.0, 1.0, -1.0])  # lift clear of the object first
                return np.r_[self._move(xy_err), self._move(high_z - grip[2]), -1.0]
            if grip[2] - low_z > 0.01:
                return np.r_[self._move(xy_err), self._move(low_z - grip[2]), -1.0]
            self.phase = "push"
        # push: servo onto the line just behind the object and advance toward the goal
        contact = obj[:2] - d * 0.04
        lat_err = contact - grip[:2]
        lat_err = lat_err - (lat_err @ d) * d
        speed = np.clip(dist / 0.05, 0.2, 0.6)
        xy = np.clip(self._move(lat_err) + d * speed, -1.0, 1.0)
        return np.r_[xy, self._move(low_z - grip[2]), -1.0]

    def _pick(self, grip, obj, goal, fingers) -> np.ndarray:
        rel = obj - grip
        if self.phase in ("carry", "close") and np.linalg.norm(rel) > 0.04:
            self.reset()  # dropped: start over
        if self.phase == "approach":
            above = rel + np.array([0.0, 0.0, 0.06])
            if np.linalg.norm(rel[:2]) > 0.01:
                z = above[2] if abs(rel[2]) < 0.05 or grip[2] > obj[2] + 0.04 else 0.0
                return np.r_[self._move(np.r_[rel[:2], z]), 1.0]
            self.phase = "descend"
        if self.phase == "descend":
            if abs(rel[2]) > 0.008 or np.linalg.norm(rel[:2]) > 0.01:
                return np.r_[self._move(rel), 1.0]
            self.phase, self.close_steps = "close", 0
        if self.phase == "close":
            self.close_steps += 1
            if self.close_steps < 4:
                return np.array([0.0, 0.0, 0.0, -1.0])
            self.phase = "carry"
        err = goal - obj
        if np.linalg.norm(err) < 0.01:
            return np.array([0.0, 0.0, 0.0, -1.0])
        return np.r_[self._move(err), -1.0]


class NoisyPolicy:
    """Wraps a policy: Gaussian noise of std ``sigma`` on each action dim, and with
    probability ``epsilon`` a uniform random action in [-1, 1] instead; clipped to [-1, 1]."""

    def __init__(self, policy, sigma: float, epsilon: float, rng: np.random.Generator):
        self.policy, self.sigma, self.epsilon, self.rng = policy, sigma, epsilon, rng

    def reset(self) -> None:
        """Reset the wrapped policy."""
        self.policy.reset()

    def __call__(self, obs) -> np.ndarray:
        a = self.policy(obs)  # always called so the script's phase stays up to date
        if self.rng.random() < self.epsilon:
            return self.rng.uniform(-1.0, 1.0, size=a.shape).astype(np.float32)
        return np.clip(a + self.rng.normal(0.0, self.sigma, size=a.shape), -1.0, 1.0).astype(np.float32)


def _reset_success(env, obs) -> bool:
    return bool(env.unwrapped._is_success(obs["achieved_goal"], obs["desired_goal"]))


def rollout_fetch(env, policy, seed: int, *, noisy_flag: bool = False):
    """One episode of ``policy`` on a Fetch env, reset with ``seed``; returns an :class:`Episode`."""
    obs, info = env.reset(seed=seed)
    policy.reset()
    rec = EpisodeRecorder(obs, {"is_success": _reset_success(env, obs)}, seed=seed, success_key="is_success")
    while True:
        action = policy(obs)
        obs, r, term, trunc, info = env.step(action)
        rec.add(action, obs, r, term, trunc, info)
        if term or trunc:
            break
    ep = rec.finish()
    ep.infos["noisy"] = np.full(len(ep) + 1, noisy_flag, dtype=bool)
    return ep


def collect_fetch(
    task: str = "push",
    quality: str = "expert",
    num_episodes: int = 1000,
    seed: int = 0,
    dataset_id: str | None = None,
    data_format: str = "hdf5",
    root: str | os.PathLike | None = None,
    overwrite: bool = False,
    progress: bool = True,
    *,
    sigma: float = 0.3,
    epsilon: float = 0.3,
    ref_episodes: int = 100,
    cameras: list[str] | None = None,
    image_size: int | None = None,
) -> Path:
    """Generate a Fetch dataset with the scripted expert (optionally noisy) and write it.

    Args:
        task: ``"push"`` or ``"pickandplace"``.
        quality: ``"expert"``, ``"noisy"`` or ``"mixed"`` (alternating episodes).
        num_episodes: 50-step episodes to record.
        seed: episode ``k`` resets with ``seed + k``; the noise generator uses ``seed``.
        dataset_id: default ``robotrl/fetch-<task>/<quality>-v0``.
        data_format, root, overwrite, progress: as in :func:`robotrl.data.writer.write_dataset`;
            ``progress`` shows a tqdm bar over episodes.
        sigma: Gaussian action-noise std of the noisy policy (action units; 1 = 5 cm).
        epsilon: per-step probability of a uniform random action in the noisy policy.
        ref_episodes: episodes for each reference score (random, expert).
        cameras: record camera frames too (e.g. ``["external_camera_0"]``; see
            :class:`robotrl.envs.pixels.PixelObservation`): observations gain
            ``"pixels": {camera: uint8 (H, W, 3)}``, stored uint8 in the Minari dataset.
        image_size: frame size ``H = W`` in pixels (default 64).

    Returns:
        The dataset directory.

    Raises:
        ConfigError: unknown task or quality. DatasetExistsError: id taken.
    """
    if task not in FETCH_TASKS:
        raise ConfigError(f"unknown Fetch task {task!r}; choose one of {sorted(FETCH_TASKS)}")
    if quality not in QUALITIES:
        raise ConfigError(f"unknown quality {quality!r}; choose one of {list(QUALITIES)}")
    if num_episodes < 1:
        raise ConfigError(f"num_episodes must be >= 1, got {num_episodes}")
    dataset_id = dataset_id or f"robotrl/fetch-{task}/{quality}-v0"
    env_id = FETCH_TASKS[task]
    env = with_cameras(make_env(env_id), cameras, image_size)
    rng = np.random.default_rng(seed)
    expert = FetchExpert(task)
    noisy = NoisyPolicy(FetchExpert(task), sigma, epsilon, rng)
    t0 = time.time()
    episodes = []
    bar = progress_bar(num_episodes, f"collect {dataset_id}", progress, unit="ep")
    for k in range(num_episodes):
        use_noisy = quality == "noisy" or (quality == "mixed" and k % 2 == 1)
        env.action_space.seed(seed + k)
        episodes.append(rollout_fetch(env, noisy if use_noisy else expert, seed + k, noisy_flag=use_noisy))
        bar.update(1)
    bar.close()
    collect_s = time.time() - t0
    spec, obs_space, cams = task_spec(env), env.observation_space, camera_facts(env)
    env.close()

    t1 = time.time()
    rnd = mean_return(spec, random_policy, ref_episodes, success_key="is_success")
    exp = mean_return(spec, lambda e: FetchExpert(task), ref_episodes, success_key="is_success")
    final_success = [bool(ep.infos["success"][-1]) for ep in episodes]
    prov = base_provenance(
        f"fetch-{task}-{quality}",
        env_id=env_id,
        policy=f"scripted FetchExpert({task!r})",
        quality=quality,
        noise_sigma=sigma if quality != "expert" else 0.0,
        random_action_epsilon=epsilon if quality != "expert" else 0.0,
        mixed_rule="even episodes expert, odd episodes noisy" if quality == "mixed" else None,
        seed=seed,
        num_episodes=num_episodes,
        dataset_success_rate=float(np.mean(final_success)),
        dataset_mean_return=float(np.mean([ep.rewards.sum() for ep in episodes])),
        ref_episodes=ref_episodes,
        ref_random=rnd,
        ref_expert=exp,
        collect_seconds=round(collect_s, 2),
        ref_seconds=round(time.time() - t1, 2),
        **cams,
    )
    return write_dataset(
        dataset_id,
        episodes,
        env=spec,
        eval_env=spec,
        observation_space=obs_space,
        ref_min_score=rnd["mean"],
        ref_max_score=exp["mean"],
        algorithm_name=f"scripted-{quality}",
        description=f"{env_id}: {num_episodes} episodes of a scripted {task} expert ({quality}).",
        provenance=prov,
        data_format=data_format,
        root=root,
        overwrite=overwrite,
    )

