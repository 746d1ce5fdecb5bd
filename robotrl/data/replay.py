"""One replay buffer for offline data and online experience.

Symbols: ``C`` capacity, ``B`` batch, ``Do``/``Da`` observation/action size, ``n`` the
n-step horizon, ``To`` observation history, ``Ta`` action chunk length, ``γ`` discount.

Storage is preallocated NumPy (``C`` rows); when full, the oldest transitions are
overwritten (circular). Each transition records its episode and links to its
predecessor and successor *in the same episode*. Links make offline data (episodes back
to back) and vectorised online rollouts (``N`` envs writing interleaved) the same kind
of object: n-step returns and ``(To, Ta)`` windows follow links, so they never cross an
episode end and never mix two envs' steps, whatever the storage order.

Monte Carlo return-to-go (Cal-QL's ``V^μ``) is filled in when an episode closes; it is
``-inf`` (no bound known) for transitions of episodes still running; agents that use it
sample with ``complete_only=True``.

Cameras (``image_shapes={key: (H, W, C)}``): each transition's observation frame is
stored once, uint8, in its own slot; its next observation's frame is read by index from
its successor's slot. Only an episode's last transition (and each env's newest step,
until its successor arrives) keeps its next frame separately, so memory is about one
frame per transition instead of two (and a quarter of a float32 copy). Sampled frames
come back uint8 in ``Batch.extras`` as ``"obs/<key>"`` and ``"next_obs/<key>"``
(see :meth:`Batch.images`); sequence windows stack frames by index.

Frame stacking (``frame_stack = k > 1``, DrQ/SERL): transition batches carry each camera as the last
``k`` frames along channels, uint8 ``(B, H, W, k·C)`` oldest first (:mod:`robotrl.vision.stack`),
gathered by index from the single stored copy of each frame through the episode links: the
observation's stack holds the frames of steps ``t−k+1 .. t``, the next observation's those of
``t−k+2 .. t`` and the next frame; before the episode's first step its first frame is repeated (a
stack never reaches into the previous episode; where the ring has overwritten an episode's start, its
oldest kept frame is repeated). Nothing is stored per stack: memory stays about one frame per
transition, against ``2k`` frames per transition for a naive stacked copy of observation and next
observation.

Every frame write also gets a process-wide unique id (:mod:`robotrl.data.frames`): a slot that is
overwritten, a separately kept next frame and a buffer restored from a checkpoint all get
fresh ids, never an old one. Transition batches carry them as int64 ``"obs_uid"`` /
``"next_obs_uid"`` ``(B,)`` in ``Batch.extras``, so a frozen encoder's features can be
cached per stored frame (:class:`robotrl.vision.cache.FrozenFeatureCache`) and are never
served for a frame that has been replaced.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from robotrl.data.batch import Batch
from robotrl.data.dataset import OfflineData
from robotrl.data.frames import FrameStore, slot_history
from robotrl.data.returns import mc_returns as _mc_returns
from robotrl.errors import BatchSizeError

if TYPE_CHECKING:
    from robotrl.data.her import GoalRelabeler

__all__ = ["ReplayBuffer"]

_NO_LINK = -1


class ReplayBuffer:
    """Preallocated circular transition store with n-step, MC-return and sequence sampling.

    Args:
        capacity: ``C``, maximum number of transitions kept.
        obs_dim: ``Do`` (flat observations).
        action_dim: ``Da``.
        gamma: discount ``γ`` for n-step sums and MC returns.
        num_envs: number of parallel envs that call :meth:`add` with batched arrays.
        mc_sparse_fill: Cal-QL's fill for never-solved sparse episodes (see
            :func:`robotrl.data.returns.mc_returns`); ``None`` disables it.
        device: torch device of sampled batches (storage stays in host memory).
        seed: seed of the sampling generator.
        image_shapes: cameras ``{key: (H, W, C)}`` stored as uint8 frames beside the flat
            observations (``obs_dim`` may then be 0).
        frame_stack: ``k``, frames per camera in sampled transitions (module doc; 1: the frame alone).
        extra_dims: float fields stored per transition beside the action, ``{name: d}`` (e.g. a residual
            agent's executed base action, ``{"base_action": Da}``; :meth:`add_extra_field`): NaN where a
            transition was written without it (offline data). Sampled batches carry ``extras[name]``
            ``(B, d)`` of the transition and ``extras["next_" + name]`` ``(B, d)`` of the step that followed
            its (n-step) next observation in the same episode, NaN where that step is not stored (episode end,
            the env's newest step).

    Raises:
        ValueError: non-positive capacity, sizes or ``frame_stack``.
    """

    _SLOT_ARRAYS = ("observations", "next_observations", "actions", "rewards", "terminated", "truncated",
                    "mc_returns", "episode_id", "next_idx", "prev_idx")

    def __init__(
        self,
        capacity: int,
        obs_dim: int,
        action_dim: int,
        *,
        gamma: float = 0.99,
        num_envs: int = 1,
        mc_sparse_fill: float | None = None,
        device: torch.device | str = "cpu",
        seed: int | None = None,
        image_shapes: dict[str, tuple[int, ...]] | None = None,
        frame_stack: int = 1,
        extra_dims: dict[str, int] | None = None,
    ):
        if int(frame_stack) < 1:
            raise ValueError(f"frame_stack must be >= 1, got {frame_stack}")
        if capacity <= 0 or obs_dim < 0 or (obs_dim == 0 and not image_shapes) or action_dim <= 0 or num_envs <= 0:
            raise ValueError(
                f"capacity, obs_dim, action_dim and num_envs must be positive, got {capacity}, {obs_dim}, {action_dim}, {num_envs}"
            )
        self.capacity, self.obs_dim, self.action_dim = int(capacity), int(obs_dim), int(action_dim)
        self.gamma, self.num_envs, self.mc_sparse_fill = float(gamma), int(num_envs), mc_sparse_fill
        self.device = torch.device(device)
        self.rng = np.random.default_rng(seed)
        C = self.capacity
        self.observations = np.zeros((C, obs_dim), np.float32)
        self.next_observations = np.zeros((C, obs_dim), np.float32)
        self.actions = np.zeros((C, action_dim), np.float32)
        self.rewards = np.zeros(C, np.float32)
        self.terminated = np.zeros(C, bool)
        self.truncated = np.zeros(C, bool)
        self.mc_returns = np.full(C, -np.inf, np.float32)
        self.episode_id = np.full(C, -1, np.int64)
        self.next_idx = np.full(C, _NO_LINK, np.int64)
        self.prev_idx = np.full(C, _NO_LINK, np.int64)
        self.ptr = 0
        self.size = 0
        self.total_added = 0
        self._next_episode = 0
        self._open_episode = np.full(self.num_envs, -1, np.int64)  # episode id per env
        self._open_last = np.full(self.num_envs, _NO_LINK, np.int64)  # last slot per env
        self.image_shapes = {k: tuple(int(d) for d in v) for k, v in (image_shapes or {}).items()}
        self.frame_stack = int(frame_stack)
        #: HER goal relabelling of sampled batches (:class:`robotrl.data.her.GoalRelabeler`), ``None``: off
        self.relabeler: GoalRelabeler | None = None
        #: the cameras' frames (:class:`~robotrl.data.frames.FrameStore`), ``None`` without cameras
        self.cameras = FrameStore(C, self.image_shapes, self.frame_stack) if self.image_shapes else None
        #: float fields per transition (``extra_dims``), NaN where unknown
        self.extra: dict[str, np.ndarray] = {}
        for name, d in (extra_dims or {}).items():
            self.add_extra_field(name, d)

    def add_extra_field(self, name: str, dim: int) -> None:
        """Store a float field ``name`` ``(d,)`` per transition from now on (``extra_dims``); the transitions
        already stored (offline data) get NaN. A field that exists with the same size is kept as is.

        Raises:
            ValueError: ``dim < 1``, or the field exists with another size.
        """
        if int(dim) < 1:
            raise ValueError(f"extra field {name!r} needs a positive size, got {dim}")
        have = self.extra.get(name)
        if have is not None:
            if have.shape[1] != int(dim):
                raise ValueError(f"extra field {name!r} exists with size {have.shape[1]}, asked for {dim}")
            return
        self.extra[name] = np.full((self.capacity, int(dim)), np.nan, np.float32)

    @property
    def frames(self) -> dict[str, np.ndarray]:
        """Each camera's slot frames, uint8 ``{key: (C, H, W, C_img)}`` (empty without cameras)."""
        return self.cameras.frames if self.cameras is not None else {}

    def image_bytes(self) -> int:
        """Bytes held by the stored camera frames (slot frames plus separately kept next frames)."""
        return self.cameras.nbytes() if self.cameras is not None else 0

    def naive_stacked_bytes(self) -> int:
        """Bytes a naive store would hold for the stored transitions: each one's observation and next
        observation stacks copied, ``size · 2k · H·W·C`` summed over cameras (compare :meth:`image_bytes`)."""
        return self.cameras.naive_stacked_bytes(self.size) if self.cameras is not None else 0

    # ------------------------------------------------------------------ writing
    def __len__(self) -> int:
        return self.size

    def _claim(self, n: int) -> np.ndarray:
        """Slots for ``n`` new transitions, unlinking whatever they overwrite."""
        slots = (self.ptr + np.arange(n)) % self.capacity
        old = slots[self.episode_id[slots] >= 0]
        if old.size:
            nxt = self.next_idx[old]
            nxt = nxt[nxt >= 0]
            self.prev_idx[nxt] = _NO_LINK
            prv = self.prev_idx[old]
            prv = prv[prv >= 0]
            self.next_idx[prv] = _NO_LINK
            self.next_idx[old] = _NO_LINK
            self.prev_idx[old] = _NO_LINK
            self.episode_id[old] = -1  # overwritten: no open episode may link to these slots
        if self.cameras is not None:
            self.cameras.release(slots)
        self.ptr = int((self.ptr + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.total_added += n
        return slots

    def add(self, observation, action, reward, next_observation, terminated, truncated, env_ids=None,
            images=None, next_images=None, extras=None) -> None:
        """Append one step from each of ``N`` envs (all ``num_envs``, or those in ``env_ids``).

        Args:
            observation, next_observation: ``(N, Do)`` (or ``(Do,)`` when ``N == 1``).
            action: ``(N, Da)`` in raw env units.
            reward, terminated, truncated: ``(N,)``.
            env_ids: ``(N,)`` which envs these rows come from (default: all, in order).

        With gymnasium 1.x vector envs (next-step autoreset) the step that follows an
        episode end only resets that env: leave that env out via ``env_ids``.
        ``next_observation`` of an ending step is then the true final observation.

        Cameras: ``images`` / ``next_images`` ``{key: uint8 (N, H, W, C)}`` (required when
        the buffer has ``image_shapes``). A next frame equal to the frame the env's next
        step brings is dropped then (stored once, read through the link).

        ``extras``: ``{name: (N, d)}`` for the buffer's extra fields (``extra_dims``); a field left out is NaN.

        Raises:
            KeyError: an extra that is not one of the buffer's fields.
        """
        env_ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
        N = env_ids.shape[0]
        if N == 0:
            return
        obs = np.asarray(observation, np.float32).reshape(N, self.obs_dim)
        nobs = np.asarray(next_observation, np.float32).reshape(N, self.obs_dim)
        act = np.asarray(action, np.float32).reshape(N, self.action_dim)
        rew = np.asarray(reward, np.float32).reshape(N)
        term = np.asarray(terminated, bool).reshape(N)
        trunc = np.asarray(truncated, bool).reshape(N)
        if self.cameras is not None:
            imgs, nimgs = self.cameras.check(images, N, "images"), self.cameras.check(next_images, N, "next_images")
        slots = self._claim(N)
        self.observations[slots], self.next_observations[slots], self.actions[slots] = obs, nobs, act
        self.rewards[slots], self.terminated[slots], self.truncated[slots] = rew, term, trunc
        self.mc_returns[slots] = -np.inf
        unknown = set(extras or {}) - set(self.extra)
        if unknown:
            raise KeyError(f"extras {sorted(unknown)} are not fields of this buffer ({sorted(self.extra)}); "
                           "declare them with extra_dims / add_extra_field")
        for name, arr in self.extra.items():
            arr[slots] = np.nan if extras is None or name not in extras else \
                np.asarray(extras[name], np.float32).reshape(N, arr.shape[1])
        # vectorised linking (one row per env): claimed slots already carry episode_id -1, so a
        # predecessor overwritten by this very claim is never linked
        fresh = self._open_episode[env_ids] < 0
        self._open_episode[env_ids[fresh]] = self._next_episode + np.arange(int(fresh.sum()))
        self._next_episode += int(fresh.sum())
        self._open_last[env_ids[fresh]] = _NO_LINK
        ep = self._open_episode[env_ids]
        last = self._open_last[env_ids]
        ok = (last >= 0) & (last != slots)
        ok[ok] = self.episode_id[last[ok]] == ep[ok]
        self.prev_idx[slots[ok]] = last[ok]
        self.next_idx[last[ok]] = slots[ok]
        self.episode_id[slots] = ep
        self._open_last[env_ids] = slots
        if self.cameras is not None:  # the predecessor's next frame is this step's frame: kept once
            self.cameras.write_steps(slots, imgs, nimgs, np.flatnonzero(ok), last)
        for row in np.flatnonzero(term | trunc):
            self._close_episode(int(slots[row]))
            self._open_episode[env_ids[row]] = -1
            self._open_last[env_ids[row]] = _NO_LINK

    def end_open_episodes(self, env_ids=None) -> np.ndarray:
        """End the episodes still open in the envs ``env_ids`` (default: every env), e.g. after a resume (the
        envs restart), or for one actor of several when it was killed mid-episode or a takeover segment ended.

        Only those envs' episodes end: every other env's open episode goes on linking its next steps. Each
        ended episode's stored steps stay valid transitions (their next observations are real, so they still
        bootstrap) and get their Monte Carlo return-to-go computed over the steps stored (the cut is where the
        episode ended for the buffer: Cal-QL gets its lower bound there too, as for an episode that ended by
        truncation). The next :meth:`add` for such an env starts a new episode instead of linking to the old
        one. An env with no open episode, or whose open episode's newest step was overwritten, is left as is.

        Args:
            env_ids: ``(N,)`` env indices, or ``None`` for all ``num_envs``.

        Returns:
            int64 ``(K,)``: the episode ids that were ended here (those with a stored step).

        Raises:
            ValueError: an env index outside ``0 .. num_envs - 1``.
        """
        envs = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, np.int64).reshape(-1)
        if envs.size and (envs.min() < 0 or envs.max() >= self.num_envs):
            raise ValueError(f"env_ids {envs.tolist()} outside 0..{self.num_envs - 1} (this buffer's num_envs)")
        ended = []
        for e in envs:
            ep, last = int(self._open_episode[e]), int(self._open_last[e])
            if ep >= 0 and last >= 0 and self.episode_id[last] == ep:
                self._close_episode(last)
                ended.append(ep)
            self._open_episode[e] = -1
            self._open_last[e] = _NO_LINK
        return np.asarray(ended, np.int64)

    def _close_episode(self, last: int) -> None:
        chain = [last]
        while self.prev_idx[chain[-1]] >= 0:
            chain.append(int(self.prev_idx[chain[-1]]))
        chain = np.asarray(chain[::-1])
        r = self.rewards[chain]
        self.mc_returns[chain] = _mc_returns(r, np.array([0]), np.array([len(r)]), self.gamma, sparse_fill=self.mc_sparse_fill)

    def add_offline(self, data: OfflineData) -> None:
        """Bulk-append a whole dataset (episodes keep their boundaries and MC returns).

        Raises:
            BatchSizeError: the dataset is larger than the capacity.
            ValueError: the dataset's cameras differ from the buffer's ``image_shapes``.
        """
        M = data.num_transitions
        have = {k: tuple(v.shape[1:]) for k, v in (data.images or {}).items()}
        if have != self.image_shapes:
            raise ValueError(f"dataset cameras {have} differ from the buffer's image_shapes {self.image_shapes}; "
                             "build the buffer with ReplayBuffer.from_offline(data) or matching image_shapes")
        if M > self.capacity:
            raise BatchSizeError(
                f"dataset has {M} transitions but the buffer holds {self.capacity}; raise the buffer capacity"
            )
        if data.obs_dim != self.obs_dim or data.action_dim != self.action_dim:
            raise BatchSizeError(
                f"dataset has Do={data.obs_dim}, Da={data.action_dim}; buffer was built for {self.obs_dim}, {self.action_dim}"
            )
        slots = self._claim(M)
        self.observations[slots], self.next_observations[slots] = data.observations, data.next_observations
        self.actions[slots], self.rewards[slots] = data.actions, data.rewards
        self.terminated[slots], self.truncated[slots] = data.terminated, data.truncated
        self.mc_returns[slots] = _mc_returns(
            data.rewards, data.episode_starts, data.episode_ends, self.gamma, sparse_fill=self.mc_sparse_fill
        )
        ep_of = np.repeat(np.arange(data.num_episodes), data.episode_ends - data.episode_starts)
        self.episode_id[slots] = self._next_episode + ep_of
        self._next_episode += data.num_episodes
        is_last = np.zeros(M, bool)
        is_last[data.episode_ends - 1] = True
        self.next_idx[slots] = np.where(is_last, _NO_LINK, np.roll(slots, -1))
        is_first = np.zeros(M, bool)
        is_first[data.episode_starts] = True
        self.prev_idx[slots] = np.where(is_first, _NO_LINK, np.roll(slots, 1))
        if self.cameras is not None:
            self.cameras.write_episodes(slots, data.images, data.image_index, is_last)

    @classmethod
    def from_offline(cls, data: OfflineData, *, capacity: int | None = None, **kwargs) -> "ReplayBuffer":
        """A buffer holding ``data`` (capacity defaults to exactly its size)."""
        if data.images and "image_shapes" not in kwargs:
            kwargs["image_shapes"] = {k: tuple(v.shape[1:]) for k, v in data.images.items()}
        buf = cls(capacity or data.num_transitions, data.obs_dim, data.action_dim, **kwargs)
        buf.add_offline(data)
        return buf

    # ------------------------------------------------------------------ sampling
    def _indices(self, batch_size: int, complete_only: bool = False) -> np.ndarray:
        if self.size == 0:
            raise BatchSizeError("the replay buffer is empty; collect or load data before sampling")
        if batch_size <= 0:
            raise BatchSizeError(f"batch size must be positive, got {batch_size}")
        if complete_only:
            done = self.complete_indices()
            if done.size == 0:
                raise BatchSizeError("no episode in the replay buffer has ended yet (no MC return known); "
                                     "wait for the first complete episode before sampling complete_only")
            return done[self.rng.integers(0, done.size, size=batch_size)]
        return self.rng.integers(0, self.size, size=batch_size)

    def complete_indices(self) -> np.ndarray:
        """Slots of transitions whose episode has ended (their MC return-to-go is known), ``(M,)``."""
        return np.flatnonzero(np.isfinite(self.mc_returns[: self.size]))

    def _check_batch(self, batch_size: int) -> None:
        if batch_size > self.size:
            raise BatchSizeError(
                f"batch size {batch_size} is larger than the {self.size} transitions stored; "
                "lower the batch size or collect/load more data"
            )

    def nstep(self, idx: np.ndarray, n: int, step_fields=None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """n-step sums along the episodes of slots ``idx (B,)``, stopping at a terminal, a truncation or the newest step.

        Args:
            step_fields: ``(slots (M,), rows (M,)) -> (rewards (M,), terminated (M,))`` of the steps in ``slots``,
                which belong to batch rows ``rows``; ``None``: the stored ones. HER
                (:meth:`robotrl.data.her.GoalRelabeler.relabel`) recomputes them for relabelled goals.

        Returns:
            ``(rewards (B,), discounts γ^m (B,), last slot (B,), terminated of the last step (B,))``.
        """
        def stored(slots: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return self.rewards[slots], self.terminated[slots]

        fields = step_fields or stored
        g = self.gamma
        last = idx.copy()
        r, t = fields(idx, np.arange(idx.size))
        ret, term = np.array(r, np.float32), np.array(t, bool)
        disc = np.full(idx.shape, g, np.float32)
        done = term | self.truncated[idx] | (self.next_idx[idx] < 0)
        for _ in range(1, n):
            rows = np.flatnonzero(~done)
            if rows.size == 0:
                break
            last[rows] = self.next_idx[last[rows]]
            r, t = fields(last[rows], rows)
            ret[rows] += disc[rows] * r
            disc[rows] *= g
            term[rows] = t
            done[rows] = t | self.truncated[last[rows]] | (self.next_idx[last[rows]] < 0)
        return ret, disc, last, term

    def sample(self, batch_size: int, *, n_step: int = 1, indices: np.ndarray | None = None,
               allow_small: bool = False, complete_only: bool = False) -> Batch:
        """Uniformly sample transitions (``n_step > 1``: n-step returns along the episode).

        Sampling is with replacement; ``batch_size`` larger than the data is refused unless
        ``allow_small`` (e.g. the online share of a mixed batch while the buffer fills).
        ``complete_only`` samples only transitions of ended episodes, whose MC return-to-go
        is known (Cal-QL's reference adds online data a whole trajectory at a time).

        Returns:
            :class:`Batch` with ``(B, ·)`` fields; ``rewards`` the n-step sum,
            ``discounts`` ``γ^m`` for the ``m ≤ n`` steps summed, ``terminated``/
            ``truncated`` of the last step, ``mc_returns`` of the first; cameras uint8 ``(B, H, W, C)``
            in ``extras`` (``(B, H, W, k·C)`` stacks with ``frame_stack = k > 1``, module doc).

        Raises:
            BatchSizeError: empty buffer or ``batch_size`` larger than the data.
        """
        if not allow_small:
            self._check_batch(batch_size)
        idx = self._indices(batch_size, complete_only) if indices is None else np.asarray(indices)
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if self.relabeler is not None:  # HER: goals relabelled, rewards/terminations recomputed (robotrl.data.her)
            f = self.relabeler.relabel(self, idx, n_step)
            last = f.pop("last")
            return Batch.from_numpy(self.device, actions=self.actions[idx], mc_returns=self.mc_returns[idx],
                                    extras=self._camera_extras(idx, last), **f)
        ret, disc, last, term = self.nstep(idx, n_step)
        extras = self._camera_extras(idx, last)
        if self.extra:
            extras = {**(extras or {}), **self._field_extras(idx, last)}
        return Batch.from_numpy(
            self.device,
            observations=self.observations[idx],
            actions=self.actions[idx],
            rewards=ret,
            next_observations=self.next_observations[last],
            terminated=term,
            truncated=self.truncated[last],
            discounts=disc,
            mc_returns=self.mc_returns[idx],
            extras=extras,
        )

    def _field_extras(self, idx: np.ndarray, last: np.ndarray) -> dict[str, np.ndarray]:
        """The extra fields of slots ``idx`` and (``"next_"``) of the successors of ``last`` (NaN: none stored)."""
        succ = self.next_idx[last]
        has = succ >= 0
        out = {}
        for name, arr in self.extra.items():
            nxt = np.full((idx.shape[0], arr.shape[1]), np.nan, np.float32)
            nxt[has] = arr[succ[has]]
            out[name], out["next_" + name] = arr[idx], nxt
        return out

    def sample_sequences(
        self, batch_size: int, obs_horizon: int, action_horizon: int, *, indices: np.ndarray | None = None
    ) -> Batch:
        """Sample ``(To, Ta)`` windows for chunked policies, never crossing an episode end.

        The window at step ``t`` holds observations ``o_{t-To+1..t}`` (before the
        episode's start, the first observation is repeated, as Diffusion Policy does)
        and actions ``a_{t..t+Ta-1}``; steps past the episode's end repeat the last
        valid action and are marked ``mask=False``.

        Returns:
            :class:`Batch`: ``observations (B, To, Do)``, ``actions (B, Ta, Da)``,
            ``rewards/terminated/truncated/discounts/mc_returns/mask (B, Ta)``,
            ``next_observations (B, Ta, Do)``.
        """
        self._check_batch(batch_size)
        if obs_horizon < 1 or action_horizon < 1:
            raise ValueError(f"obs_horizon and action_horizon must be >= 1, got {obs_horizon}, {action_horizon}")
        idx = self._indices(batch_size) if indices is None else np.asarray(indices)
        hist = slot_history(self.prev_idx, idx, obs_horizon)
        fut = np.empty((idx.shape[0], action_horizon), np.int64)
        mask = np.ones((idx.shape[0], action_horizon), bool)
        fut[:, 0] = idx
        for k in range(1, action_horizon):
            cur = fut[:, k - 1]
            nxt = self.next_idx[cur]
            ended = self.terminated[cur] | self.truncated[cur] | (nxt < 0) | ~mask[:, k - 1]
            mask[:, k] = ~ended
            fut[:, k] = np.where(ended, cur, nxt)
        g = np.float32(self.gamma)
        return Batch.from_numpy(
            self.device,
            observations=self.observations[hist],
            actions=self.actions[fut],
            rewards=np.where(mask, self.rewards[fut], 0.0).astype(np.float32),
            next_observations=self.next_observations[fut],
            terminated=self.terminated[fut] & mask,
            truncated=self.truncated[fut] & mask,
            discounts=np.tile(g ** np.arange(1, action_horizon + 1, dtype=np.float32), (mask.shape[0], 1)),
            mc_returns=self.mc_returns[fut],
            mask=mask,
            extras=self._camera_extras(hist, fut),
        )

    def _camera_extras(self, idx: np.ndarray, next_idx_of: np.ndarray) -> dict[str, np.ndarray] | None:
        """The cameras' batch extras (:meth:`FrameStore.extras`), ``None`` without cameras."""
        if self.cameras is None:
            return None
        return self.cameras.extras(idx, next_idx_of, self.prev_idx, self.next_idx)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, np.ndarray | int]:
        """Arrays and counters for checkpointing (plain arrays, loadable without pickle)."""
        n = self.size
        out: dict = {k: getattr(self, k)[:n].copy() for k in self._SLOT_ARRAYS}
        out["open_episode"], out["open_last"] = self._open_episode.copy(), self._open_last.copy()
        out.update(ptr=self.ptr, size=self.size, total_added=self.total_added, next_episode=self._next_episode)
        if self.cameras is not None:
            out.update(self.cameras.state_dict(n))
        out.update({f"extra/{k}": v[:n].copy() for k, v in self.extra.items()})
        return out

    def load_state_dict(self, state: dict) -> None:
        """Inverse of :meth:`state_dict` (capacity and sizes must match)."""
        n = int(state["size"])
        if n > self.capacity:
            raise BatchSizeError(f"saved buffer holds {n} transitions, more than this buffer's capacity {self.capacity}")
        if np.asarray(state["open_episode"]).shape[0] != self.num_envs:
            raise BatchSizeError(f"saved buffer was written by {np.asarray(state['open_episode']).shape[0]} envs, "
                                 f"this buffer expects num_envs={self.num_envs}")
        self.episode_id[:] = -1
        self.next_idx[:] = _NO_LINK
        self.prev_idx[:] = _NO_LINK
        for k in self._SLOT_ARRAYS:
            getattr(self, k)[:n] = np.asarray(state[k])[:n]
        self._open_episode[:] = np.asarray(state["open_episode"])
        self._open_last[:] = np.asarray(state["open_last"])
        # a saved ring that was full at a smaller capacity (a run resumed with a larger online budget) continues in
        # the free slots n.. here; its own ptr would overwrite old rows and leave never-written slots inside size
        self.ptr, self.size = (n if n < self.capacity else int(state["ptr"]) % self.capacity), n
        self.total_added, self._next_episode = int(state["total_added"]), int(state["next_episode"])
        if self.cameras is not None:  # restored frames get fresh ids (no cache may hold them)
            self.cameras.load_state_dict(state, n)
        for k, arr in self.extra.items():  # a buffer saved without the field: NaN (unknown)
            arr[:] = np.nan
            if f"extra/{k}" in state:
                arr[:n] = np.asarray(state[f"extra/{k}"])[:n]
