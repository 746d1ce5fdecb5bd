"""Camera frames of the replay buffer's slots (:class:`robotrl.data.replay.ReplayBuffer`'s ``image_shapes``).

Symbols: ``C`` capacity, ``B`` batch, ``k`` frames per stack, ``H, W, C_img`` one camera's frame.

Each slot's observation frame is stored once, uint8; its next observation's frame is read through the
buffer's successor link (``next_idx``) from the successor's slot. Only an episode's last transition (and
each env's newest step, until its successor arrives) keeps its next frame separately ("pending"), so memory
is about one frame per transition. Stacks of ``k`` frames are gathered by index along the predecessor links
(``prev_idx``); nothing is stored per stack. Every frame write gets a process-wide unique id
(:func:`new_frame_uids`), so caches keyed by it never serve a replaced frame. The link arrays stay the
buffer's: every method that follows them takes them as arguments.
"""

from __future__ import annotations

import threading

import numpy as np

from robotrl.errors import BatchSizeError

__all__ = ["FrameStore", "new_frame_uids", "slot_history", "stack_channels"]


def stack_channels(frames: np.ndarray) -> np.ndarray:
    """uint8 ``(B, k, H, W, C)`` frames (oldest first) -> ``(B, H, W, k·C)`` (a copy, C-contiguous).

    The channel layout of a stacked camera input (DrQ, SERL; :mod:`robotrl.vision.stack`)."""
    B, k, H, W, C = frames.shape
    return np.ascontiguousarray(np.moveaxis(frames, 1, -2)).reshape(B, H, W, k * C)


_UID_LOCK = threading.Lock()
_UID_NEXT = 0


def new_frame_uids(n: int) -> np.ndarray:
    """``n`` fresh frame ids, int64 ``(n,)``, unique within the process (never reused)."""
    global _UID_NEXT
    with _UID_LOCK:
        start = _UID_NEXT
        _UID_NEXT += int(n)
    return np.arange(start, start + int(n), dtype=np.int64)


def slot_history(prev_idx: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
    """int64 ``(B, n)``: slots of steps ``t−n+1 .. t`` of each ``t`` in ``idx (B,)`` along the predecessor
    links ``prev_idx (C,)`` (``-1``: none), the episode's first kept step repeated before it."""
    hist = np.empty((idx.shape[0], n), np.int64)
    hist[:, -1] = idx
    for j in range(n - 2, -1, -1):
        prev = prev_idx[hist[:, j + 1]]
        hist[:, j] = np.where(prev >= 0, prev, hist[:, j + 1])
    return hist


class FrameStore:
    """uint8 camera frames for ``capacity`` slots, one per slot, plus the pending next frames (module doc).

    Args:
        capacity: ``C`` slots.
        image_shapes: cameras ``{key: (H, W, C_img)}``.
        frame_stack: ``k``, frames per camera in sampled transitions (1: the frame alone).
    """

    def __init__(self, capacity: int, image_shapes: dict[str, tuple[int, ...]], frame_stack: int = 1):
        self.shapes = {k: tuple(int(d) for d in v) for k, v in image_shapes.items()}
        self.stack = int(frame_stack)
        self.frames = {k: np.zeros((capacity, *shape), np.uint8) for k, shape in self.shapes.items()}
        self.uid = np.full(capacity, -1, np.int64)  # id of each slot's frame write
        self.pending: dict[int, dict[str, np.ndarray]] = {}  # slot -> next frames no successor slot holds
        self.pending_uid: dict[int, int] = {}

    def nbytes(self) -> int:
        """Bytes held: slot frames plus pending next frames."""
        per = sum(int(np.prod(s)) for s in self.shapes.values())
        return sum(f.nbytes for f in self.frames.values()) + len(self.pending) * per

    def naive_stacked_bytes(self, size: int) -> int:
        """Bytes a naive store would hold for ``size`` transitions: each one's observation and next
        observation stacks copied, ``size · 2k · H·W·C_img`` summed over cameras."""
        per = sum(int(np.prod(s)) for s in self.shapes.values())
        return size * 2 * self.stack * per

    def check(self, images, N: int, name: str) -> dict[str, np.ndarray]:
        """``images`` as ``{key: uint8 (N, H, W, C_img)}``.

        Raises:
            ValueError: missing, a camera lacking, or the wrong dtype or shape (named, with the expected one).
        """
        if images is None:
            raise ValueError(f"this buffer stores cameras {sorted(self.shapes)}: pass {name}={{key: uint8 (N, H, W, C)}}")
        out = {}
        for k, shape in self.shapes.items():
            if k not in images:
                raise ValueError(f"{name} lacks camera {k!r} (has {sorted(images)})")
            a = np.asarray(images[k])
            if a.dtype != np.uint8 or a.reshape(-1, *shape).shape[0] != N:
                raise ValueError(f"{name}[{k!r}] must be uint8 ({N}, {', '.join(map(str, shape))}), got {a.dtype} {a.shape}")
            out[k] = a.reshape(N, *shape)
        return out

    def release(self, slots: np.ndarray) -> None:
        """Forget the pending next frames of ``slots`` (about to be overwritten)."""
        if self.pending:
            for s in set(self.pending).intersection(slots.tolist()):
                del self.pending[s]
                self.pending_uid.pop(s, None)

    def _keep_pending(self, slot: int, frames: dict[str, np.ndarray]) -> None:
        self.pending[slot] = frames
        self.pending_uid[slot] = int(new_frame_uids(1)[0])

    def write_steps(self, slots: np.ndarray, imgs: dict[str, np.ndarray], next_imgs: dict[str, np.ndarray],
                    linked_rows: np.ndarray, predecessors: np.ndarray) -> None:
        """Store one online step per env: frames ``imgs`` in ``slots (N,)``, next frames ``next_imgs`` pending.

        ``linked_rows``: the rows whose step was linked to its env's previous step ``predecessors[row]``; that
        predecessor's pending next frame is dropped when it equals this step's frame (stored once).
        """
        for k in self.shapes:
            self.frames[k][slots] = imgs[k]
        self.uid[slots] = new_frame_uids(len(slots))
        for r, slot in enumerate(slots.tolist()):
            self._keep_pending(slot, {k: next_imgs[k][r].copy() for k in self.shapes})
        for r in np.asarray(linked_rows).tolist():
            pred = int(predecessors[r])
            pend = self.pending.get(pred)
            if pend is not None and all(np.array_equal(pend[k], imgs[k][r]) for k in self.shapes):
                del self.pending[pred]
                self.pending_uid.pop(pred, None)

    def write_episodes(self, slots: np.ndarray, images: dict[str, np.ndarray], image_index: np.ndarray,
                       is_last: np.ndarray) -> None:
        """Store a dataset's frames (:class:`~robotrl.data.dataset.OfflineData` ``images`` / ``image_index``) in
        ``slots (M,)``; each episode's last transition (``is_last (M,)``) keeps its final frame pending."""
        for k in self.shapes:
            self.frames[k][slots] = images[k][image_index]
        self.uid[slots] = new_frame_uids(len(slots))
        for m in np.flatnonzero(is_last).tolist():
            self._keep_pending(int(slots[m]), {k: images[k][image_index[m] + 1].copy() for k in self.shapes})

    def next_frames(self, key: str, idx: np.ndarray, next_idx: np.ndarray) -> np.ndarray:
        """uint8 ``(*idx.shape, H, W, C_img)``: the next observation's frame of each slot in ``idx``.

        Raises:
            BatchSizeError: a slot has neither a successor nor a pending frame (a buffer bug, reported as such).
        """
        flat = np.asarray(idx).reshape(-1)
        out = self.frames[key][np.where(next_idx[flat] >= 0, next_idx[flat], flat)]
        for j, slot in enumerate(flat.tolist()):
            pend = self.pending.get(slot)
            if pend is not None:
                out[j] = pend[key]
            elif next_idx[slot] < 0:
                raise BatchSizeError(f"slot {slot} has no next frame of {key!r}: its successor was overwritten; "
                                     "this is a bug in the replay buffer, please report it")
        return out.reshape(*np.shape(idx), *self.shapes[key])

    def next_uids(self, idx: np.ndarray, next_idx: np.ndarray) -> np.ndarray:
        """int64 ``(B,)``: the id of the next observation's frame of each slot (as :meth:`next_frames` reads it)."""
        flat = np.asarray(idx).reshape(-1)
        out = self.uid[np.where(next_idx[flat] >= 0, next_idx[flat], flat)].copy()
        if self.pending_uid:
            for j, slot in enumerate(flat.tolist()):
                uid = self.pending_uid.get(slot)
                if uid is not None:
                    out[j] = uid
        return out

    def extras(self, idx: np.ndarray, next_idx_of: np.ndarray, prev_idx: np.ndarray,
               next_idx: np.ndarray) -> dict[str, np.ndarray]:
        """A batch's camera extras: ``"obs/<key>"`` and ``"next_obs/<key>"`` for observations at ``idx`` and next
        observations after ``next_idx_of`` (transitions ``(B,)``: with ``"obs_uid"``/``"next_obs_uid"``, or
        ``(B, H, W, k·C_img)`` stacks when ``k > 1``; windows ``(B, T)``: frames only)."""
        if np.ndim(idx) == 1 and self.stack > 1:
            return self._stacked(idx, next_idx_of, prev_idx, next_idx)
        out = {}
        for k in self.shapes:
            out[f"obs/{k}"] = self.frames[k][idx]
            out[f"next_obs/{k}"] = self.next_frames(k, next_idx_of, next_idx)
        if np.ndim(idx) == 1:  # transitions: the frames' ids (sequence windows carry none)
            out["obs_uid"] = self.uid[idx]
            out["next_obs_uid"] = self.next_uids(next_idx_of, next_idx)
        return out

    def _stacked(self, idx: np.ndarray, last: np.ndarray, prev_idx: np.ndarray, next_idx: np.ndarray) -> dict[str, np.ndarray]:
        """Stacked frames ``(B, H, W, k·C_img)`` of the observations at ``idx`` and the next observations after
        ``last``, gathered by index; no frame ids (a stack is not one stored frame)."""
        k = self.stack
        hist, next_hist = slot_history(prev_idx, idx, k), slot_history(prev_idx, last, k - 1)
        out = {}
        for key in self.shapes:
            nxt = np.concatenate([self.frames[key][next_hist], self.next_frames(key, last, next_idx)[:, None]], axis=1)
            out[f"obs/{key}"] = stack_channels(self.frames[key][hist])
            out[f"next_obs/{key}"] = stack_channels(nxt)
        return out

    def state_dict(self, n: int) -> dict[str, np.ndarray]:
        """The first ``n`` slots' frames and the pending next frames (plain arrays)."""
        slots = sorted(self.pending)
        out: dict[str, np.ndarray] = {"final_slots": np.asarray(slots, np.int64)}
        for k in self.shapes:
            out[f"frames/{k}"] = self.frames[k][:n].copy()
            out[f"final_frames/{k}"] = np.stack([self.pending[s][k] for s in slots]) if slots else \
                np.zeros((0, *self.shapes[k]), np.uint8)
        return out

    def load_state_dict(self, state: dict, n: int) -> None:
        """Inverse of :meth:`state_dict`; restored frames get fresh ids (no cache may hold them).

        Raises:
            BatchSizeError: the saved state holds no frames of a camera (written without cameras).
        """
        for k in self.shapes:
            if f"frames/{k}" not in state:
                raise BatchSizeError(f"saved buffer holds no frames of camera {k!r}; it was written without cameras")
            self.frames[k][:n] = np.asarray(state[f"frames/{k}"])[:n]
        slots = [int(s) for s in np.asarray(state["final_slots"]).tolist()]
        self.pending = {s: {k: np.asarray(state[f"final_frames/{k}"])[j].copy() for k in self.shapes}
                        for j, s in enumerate(slots)}
        self.uid[:] = -1
        self.uid[:n] = new_frame_uids(n)
        self.pending_uid = dict(zip(slots, new_frame_uids(len(slots)).tolist()))
