"""Recording of the online actor's episodes: a per-step journal and one ``.npz`` per episode,
assembled into a Minari dataset (:class:`EpisodeRecorder`)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from robotrl.checkpoint import load_arrays, save_arrays
from robotrl.real_robot.interface import ProtocolError, RobotSpec


def _base_action(row: dict, da: int) -> np.ndarray:
    """A row's executed base action ``(Da,)`` float32 (NaN when the policy has no base, or the row predates it)."""
    b = row.get("base_action")
    return np.full(da, np.nan, np.float32) if b is None else np.asarray(b, np.float32).reshape(da)


class EpisodeRecorder:
    """Finished episodes as atomically written ``.npz`` files, assembled into a Minari dataset.

    File ``<dir>/episodes/ep_<episode>.npz``: ``observations (T+1, Do)``, ``actions (T, Da)``
    (applied), ``rewards``, ``terminations``, ``truncations`` ``(T,)`` and ``info_<name>``
    arrays with ``T+1`` entries (reset entry first, as Minari's infos): ``requested_action``,
    ``policy_action`` (NaN where none), ``base_action`` (the frozen base's action the step executed under a
    residual policy, ``PolicyHolder.last_base_action``; NaN where none), ``intervention``, ``safety_modified``, ``held``,
    ``success``, ``learner_connected``, ``weights_version``, ``n`` (link index), ``step``,
    ``time``, ``rtt_s``, ``jitter_s``. A robot with cameras (:attr:`RobotSpec.cameras`) adds
    ``frames_<camera>`` uint8 ``(T+1, H, W, C)`` (each step's frames, then the final observation's),
    taken from the rows: every row carries ``images`` and ``next_images`` (``{camera: uint8 (H, W, C)}``,
    the frames taken with ``obs`` and ``next_obs``; the learner link sends both to a pixel learner). The journal
    keeps each frame once (the first row's ``images``, every row's ``next_images``; :meth:`recover` gives each
    recovered row its ``images`` back from its predecessor), so a recovered episode keeps them;
    :meth:`to_minari` writes them as ``Dict`` observations ``{"state", "<camera>"}`` like
    :func:`robotrl.real_robot.recording.to_episode`.
    """

    def __init__(self, directory: str | os.PathLike, spec: RobotSpec):
        self.dir = Path(directory) / "episodes"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.spec = spec
        self.journal_path = Path(directory) / "current.journal"
        self._journal = None
        self._journal_rows = 0

    # The episode in progress goes to an append-only journal (length-prefixed msgpack records,
    # written through to the OS at every step), so a killed actor loses no step it took:
    # :meth:`recover` turns a journal left behind into a truncated episode.
    def append(self, row: dict) -> None:
        """Journal one step of the episode in progress (before it is handed to the link)."""
        from robotrl.real_robot.protocol import encode

        if self._journal is None:
            self._journal = open(self.journal_path, "ab")
            self._journal_rows = 0
        if self._journal_rows and row.get("images") is not None:  # a row's frames are its predecessor's next ones
            row = {k: v for k, v in row.items() if k != "images"}
        self._journal_rows += 1
        payload = encode({"v": 2, "type": "step", "dir": "req", "src": "journal", "dst": "", "epoch": "", "seq": 0,
                          "ts": time.time(), "body": row})
        self._journal.write(len(payload).to_bytes(4, "little") + payload)
        self._journal.flush()

    def _read_journal(self) -> list[dict]:
        from robotrl.real_robot.learner_link import camera_link_limits, link_limits
        from robotrl.real_robot.protocol import decode

        limits = camera_link_limits(self.spec.cameras, link_limits())
        data, rows, i = self.journal_path.read_bytes(), [], 0
        while i + 4 <= len(data):
            n = int.from_bytes(data[i:i + 4], "little")
            if i + 4 + n > len(data):
                break  # the record being written when the process died
            try:
                rows.append(decode(data[i + 4:i + 4 + n], limits)["body"])
            except ProtocolError:
                break
            i += 4 + n
        return rows

    def recover(self) -> list[dict]:
        """Close an episode a killed actor left in the journal: its steps become a recorded
        episode ending truncated (the last step's next observation as the final one).
        Returns its rows (empty: nothing to recover)."""
        if not self.journal_path.exists():
            return []
        rows = self._read_journal()
        for prev, row in zip(rows, rows[1:]):  # each frame was journaled once: a row's are its predecessor's next
            if row.get("images") is None and prev.get("next_images") is not None:
                row["images"] = prev["next_images"]
        if rows:
            rows[-1]["truncated"] = True
            self.write(int(rows[0]["episode"]), rows, np.asarray(rows[-1]["next_obs"], np.float32), None)
        self.journal_path.unlink(missing_ok=True)
        return rows

    def episodes_done(self) -> list[int]:
        """Episode numbers recorded so far (sorted)."""
        return sorted(int(p.stem.split("_")[1]) for p in self.dir.glob("ep_*.npz"))

    def write(self, episode: int, rows: list[dict], final_obs: np.ndarray, seed: int | None) -> Path:
        """Write one episode from its transitions (rows with :data:`TRANSITION_FIELDS` keys)."""
        if not rows:
            raise ValueError("episode has no steps; nothing to record")
        col = lambda k, dt: np.asarray([r[k] for r in rows], dt)  # noqa: E731
        first = lambda x: np.concatenate([np.zeros(1, x.dtype), x])  # noqa: E731  the reset entry (same dtype)
        da = self.spec.action.dim
        nan = np.full((1, da), np.nan, np.float32)
        out = {"observations": np.concatenate([np.stack([r["obs"] for r in rows]), final_obs[None]]).astype(np.float32),
               "actions": np.stack([r["action"] for r in rows]).astype(np.float32),
               "rewards": col("reward", np.float64), "terminations": col("terminated", bool),
               "truncations": col("truncated", bool),
               "info_requested_action": np.concatenate([nan, np.stack([r["requested"] for r in rows])]),
               "info_policy_action": np.concatenate([nan, np.stack([r["policy_action"] for r in rows])]),
               "info_base_action": np.concatenate([nan, np.stack([_base_action(r, da) for r in rows])]),
               "seed": np.asarray(-1 if seed is None else seed, np.int64)}
        out.update(self._frames(rows))
        for k, dt in (("intervention", bool), ("safety_modified", bool), ("held", bool), ("success", bool),
                      ("learner_connected", bool), ("weights_version", np.int64), ("n", np.int64), ("step", np.int64),
                      ("time", np.float64), ("rtt_s", np.float64), ("jitter_s", np.float64)):
            out[f"info_{k}"] = first(col(k, dt))
        path = save_arrays(self.dir / f"ep_{episode:06d}.npz", out)
        if self._journal is not None:  # the episode is durable as a file: its journal goes
            self._journal.close()
            self._journal = None
        self.journal_path.unlink(missing_ok=True)
        return path

    def _frames(self, rows: list[dict]) -> dict[str, np.ndarray]:
        """``{"frames_<camera>": uint8 (T+1, H, W, C)}`` of an episode's rows (empty for a robot without cameras,
        or rows recorded without frames).

        Raises:
            ValueError: as :func:`robotrl.real_robot.recording.camera_frames` (a camera missing from a row's
                frames, of another shape or dtype, or named ``state``).
        """
        if not self.spec.cameras or rows[0].get("images") is None:
            return {}
        from robotrl.real_robot.recording import camera_frames

        seq = [rows[0]["images"]] + [r.get("next_images") for r in rows]
        return {f"frames_{name}": frames for name, frames in camera_frames(self.spec, seq).items()}

    def load(self, episode: int) -> dict[str, np.ndarray]:
        return load_arrays(self.dir / f"ep_{episode:06d}.npz")

    def to_minari(self, dataset_id: str, root: str | os.PathLike | None = None, provenance: dict | None = None) -> Path:
        """(Re)write every recorded episode as Minari dataset ``dataset_id`` (replacing an older version of it);
        episodes with camera frames become ``Dict`` observations ``{"state": (T+1, Do), "<camera>": uint8 (T+1, H, W, C)}``.

        Raises:
            DatasetFormatError: no episode recorded yet.
            ValueError: some episodes carry camera frames and others do not.
        """
        from robotrl.data.writer import Episode
        from robotrl.real_robot.recording import record_episodes

        eps = []
        for i in self.episodes_done():
            z = self.load(i)
            infos = {k[5:]: z[k] for k in z if k.startswith("info_")}
            seed = int(z["seed"])
            frames = {k[7:]: z[k] for k in z if k.startswith("frames_")}
            obs = {"state": z["observations"], **frames} if frames else z["observations"]
            eps.append(Episode(obs, z["actions"], z["rewards"], z["terminations"], z["truncations"],
                               infos=infos, seed=None if seed < 0 else seed))
        return record_episodes(dataset_id, eps, self.spec, root=root, provenance=provenance, overwrite=True,
                               description=f"online RL episodes on {self.spec.name} (robotrl actor)")
