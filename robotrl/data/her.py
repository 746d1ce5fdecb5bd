"""Hindsight experience replay (HER, Andrychowicz et al. 2017): goal relabelling at sample time.

For goal-conditioned tasks (gymnasium-robotics ``GoalEnv``: Fetch, PointMaze, ...), whose flat
observation holds ``achieved_goal`` and ``desired_goal`` (:class:`robotrl.data.spaces.FlatLayout`),
a share ``ratio`` of every sampled batch gets its desired goal replaced by the goal achieved at a
transition drawn uniformly from the same episode's present or future (HER's ``future`` strategy;
``ratio = 0.8`` is its ``k = 4``, as in baselines' ``her`` and stable-baselines3's
``HerReplayBuffer``). Rewards, and terminations that depend on the goal, are recomputed with the
env's own ``compute_reward`` / ``compute_terminated`` (and ``_is_success`` when training episodes
end at success), so a relabelled transition is one the task's MDP could have produced; n-step sums
are recomputed along the episode with the new goal. The other transitions are recomputed the same
way with their own goal, which reproduces the stored values (checked against the data when the
relabeller is built: :meth:`GoalRelabeler.check`).

Symbols: ``B`` batch, ``G`` goal size, ``Do`` flat observation size, ``n`` n-step horizon.
Rewards enter the buffers transformed (``scale·r + bias``, :func:`robotrl.experiment_parts.reward_transform`),
so recomputed rewards get the same transform.

Not for agents that read Monte-Carlo returns (Cal-QL's bound): a relabelled goal has no recorded
return-to-go (the trainer refuses the combination).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from robotrl.errors import ConfigError

if TYPE_CHECKING:
    from robotrl.data.replay import ReplayBuffer
    from robotrl.data.spaces import FlatLayout


class GoalRelabeler:
    """HER ``future`` relabelling of batches sampled from a :class:`~robotrl.data.ReplayBuffer`.

    Args:
        env: a gymnasium-robotics goal env (its ``unwrapped`` has vectorised ``compute_reward`` and
            ``compute_terminated``; ``_is_success`` when ``terminate_on_success``); only these
            functions are used, the env is never stepped.
        layout: the flat observation's layout, with ``achieved_goal`` and ``desired_goal`` keys.
        ratio: share of each batch relabelled, in ``[0, 1]`` (HER: 0.8).
        reward_scale, reward_bias: the transform the buffers' rewards carry.
        terminate_on_success: training episodes end at success (``env.train_terminate_on_success``):
            the relabelled goal's success ends the episode too.
        seed: of the relabelling draws.

    Raises:
        ConfigError: no goal keys in the layout, an env without the goal functions, or a ratio
            outside ``[0, 1]``.
    """

    def __init__(self, env, layout: FlatLayout | None, *, ratio: float = 0.8, reward_scale: float = 1.0,
                 reward_bias: float = 0.0, terminate_on_success: bool = False, seed: int | None = None):
        keys = set(layout.keys) if layout is not None else set()
        if not {"achieved_goal", "desired_goal"} <= keys:
            raise ConfigError("trainer.her_ratio > 0 relabels goals, but this task's observation has no "
                              f"achieved_goal/desired_goal (keys: {sorted(keys) or 'a flat Box'}): HER is for "
                              "goal-conditioned tasks (Fetch, PointMaze); set trainer.her_ratio=0")
        if not 0.0 <= float(ratio) <= 1.0:
            raise ConfigError(f"trainer.her_ratio must be in [0, 1] (HER: 0.8), got {ratio}")
        u = env.unwrapped
        for fn in ("compute_reward", "compute_terminated") + (("_is_success",) if terminate_on_success else ()):
            if not callable(getattr(u, fn, None)):
                raise ConfigError(f"trainer.her_ratio > 0 needs the env's goal function {fn}(achieved_goal, "
                                  f"desired_goal) ({type(u).__name__} has none); set trainer.her_ratio=0")
        assert layout is not None
        sl = layout.slices
        self.achieved, self.desired = sl["achieved_goal"], sl["desired_goal"]
        self.env, self.ratio = env, float(ratio)
        self.scale, self.bias = float(reward_scale), float(reward_bias)
        self.terminate_on_success = bool(terminate_on_success)
        self.rng = np.random.default_rng(seed)

    # ------------------------------------------------------------------ goal functions, (B, G) -> (B,)
    def rewards(self, achieved: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Transformed rewards ``scale·r + bias`` ``(B,)`` of reaching ``achieved (B, G)`` when aiming at ``goal``."""
        raw = np.asarray(self.env.unwrapped.compute_reward(achieved, goal, None), np.float32).reshape(-1)
        return (self.scale * raw + self.bias).astype(np.float32)

    def goal_terminal(self, achieved: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Whether reaching ``achieved`` ends the episode for ``goal`` ``(B,)``: the env's own termination
        (``compute_terminated``, e.g. PointMaze at its goal) or, with ``terminate_on_success``, success."""
        u = self.env.unwrapped
        out = np.array([bool(u.compute_terminated(a, g, None)) for a, g in zip(achieved, goal)], bool)
        if self.terminate_on_success:
            out |= np.asarray(u._is_success(achieved, goal), bool).reshape(-1)
        return out

    # ------------------------------------------------------------------ sampling
    def future_slots(self, buf: ReplayBuffer, idx: np.ndarray) -> np.ndarray:
        """For each slot ``(M,)``, a slot drawn uniformly from itself and the later steps of its episode."""
        cur, length = idx.copy(), np.zeros(idx.shape, np.int64)
        alive = buf.next_idx[cur] >= 0
        while alive.any():
            cur[alive] = buf.next_idx[cur[alive]]
            length[alive] += 1
            alive = buf.next_idx[cur] >= 0
        offset = np.floor(self.rng.random(idx.shape) * (length + 1)).astype(np.int64)
        out = idx.copy()
        for _ in range(int(offset.max(initial=0))):
            move = offset > 0
            out[move] = buf.next_idx[out[move]]
            offset[move] -= 1
        return out

    def relabel(self, buf: ReplayBuffer, idx: np.ndarray, n_step: int) -> dict[str, np.ndarray]:
        """The batch fields for slots ``idx (B,)``: observations with their (possibly relabelled) goals, n-step
        rewards, discounts and ``terminated`` recomputed for those goals; ``last`` the slot of the n-th step.

        Returns:
            ``{"observations" (B, Do), "next_observations" (B, Do), "rewards" (B,), "discounts" (B,),
            "terminated" (B,), "truncated" (B,), "last" (B,)}``.
        """
        goal = buf.observations[idx, self.desired].copy()  # (B, G)
        her = self.rng.random(idx.shape) < self.ratio
        if her.any():
            goal[her] = buf.next_observations[self.future_slots(buf, idx[her]), self.achieved]

        def step_fields(slots: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            ach = buf.next_observations[slots, self.achieved]
            own = buf.next_observations[slots, self.desired]  # the goal the step was recorded with
            term = (buf.terminated[slots] & ~self.goal_terminal(ach, own)) | self.goal_terminal(ach, goal[rows])
            return self.rewards(ach, goal[rows]), term

        ret, disc, last, term = buf.nstep(idx, n_step, step_fields)
        obs, nobs = buf.observations[idx].copy(), buf.next_observations[last].copy()
        obs[:, self.desired] = goal
        nobs[:, self.desired] = goal
        return {"observations": obs, "next_observations": nobs, "rewards": ret, "discounts": disc, "terminated": term,
                "truncated": buf.truncated[last], "last": last}

    def check(self, buf: ReplayBuffer, max_rows: int = 2000) -> None:
        """Refuse a buffer whose stored rewards / goal terminations are not what the env's goal functions give for
        their own goals (another reward transform, another task): relabelled rewards would then be in other units.

        Raises:
            ConfigError: naming the first mismatching transition and both values.
        """
        n = min(len(buf), int(max_rows))
        if n == 0:
            return
        rows = np.linspace(0, len(buf) - 1, n).astype(np.int64)
        ach, own = buf.next_observations[rows, self.achieved], buf.next_observations[rows, self.desired]
        r = self.rewards(ach, own)
        bad = np.flatnonzero(~np.isclose(r, buf.rewards[rows], atol=1e-4))
        if bad.size:
            i = int(rows[bad[0]])
            raise ConfigError(f"HER: the env's compute_reward gives {r[bad[0]]:.4g} (after the reward transform "
                              f"{self.scale}·r + {self.bias}) for stored transition {i}, whose reward is "
                              f"{buf.rewards[i]:.4g}: the data is not this task's reward; fix the reward transform "
                              "or set trainer.her_ratio=0")
        missed = self.goal_terminal(ach, own) & ~buf.terminated[rows]
        if missed.any():
            i = int(rows[np.flatnonzero(missed)[0]])
            raise ConfigError(f"HER: stored transition {i} reaches its goal where the task ends the episode, but is "
                              "not terminated: the data was recorded in another MDP (see env.train_terminate_on_success)")
