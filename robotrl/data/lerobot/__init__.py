"""LeRobotDataset (v3.0) ↔ Minari conversion, without the ``lerobot`` package.

``robotrl convert --from lerobot SRC --to minari DST`` and the reverse call
:func:`lerobot_to_minari` and :func:`minari_to_lerobot`. Needs PyAV (``av``) for the videos
and pyarrow for the parquet files: ``pip install robotrl[video]``. ``dataset.id=lerobot:<repo_id or folder>``
reads a LeRobot dataset through LeRobot's own library instead (the ``[lerobot]`` extra;
:mod:`robotrl.data.lerobot.library`); ``benchmarks/check_lerobot_interop.py`` checks this package's output
with LeRobot's reader, editing tools, QUANTILES normaliser and dataloader.

LeRobotDataset v3.0 layout (as written by lerobot >= 0.4)::

    meta/info.json                                  codebase_version "v3.0", fps, features, path templates
    meta/stats.json                                 per-feature min/max/mean/std/count and quantiles q01..q99
    meta/tasks.parquet                              task string -> task_index
    meta/episodes/chunk-000/file-000.parquet        one row per episode: length, tasks, data and video locations,
                                                    and its own stats (columns stats/<feature>/<stat>)
    data/chunk-000/file-000.parquet                 one row per frame (many episodes per file)
    videos/<camera key>/chunk-000/file-000.mp4      frames of many episodes back to back

A frame row holds ``observation.state`` float32 ``(Ds,)``, ``action`` float32 ``(Da,)``,
``next.reward`` float32, ``next.done`` bool, ``timestamp`` float32 (s from the episode's
start), ``frame_index``, ``episode_index``, ``index``, ``task_index`` int64. A camera
``observation.images.<cam>`` (feature dtype ``"video"``) is the frame of
``videos/<key>/chunk-C/file-F.mp4`` at time ``from_timestamp + timestamp``, where
``from_timestamp`` and the file's chunk/file index come from the episode's row in
``meta/episodes``.

Mapping to a Minari episode of ``T = N`` steps (``N`` frames):

- observations: ``Dict`` ``{"state": float32 (N+1, Ds), "<cam>": uint8 (N+1, H, W, 3), ...}``;
  ``observation.state`` -> ``"state"``, ``observation.images.<cam>`` -> ``"<cam>"``, any other
  ``observation.<name>`` -> ``"<name>"``. LeRobot stores no observation after the last
  action, so the final Minari observation repeats the last frame's (LeRobot's own replay
  buffer does the same); the Minari metadata records this.
- actions ``action``; rewards ``next.reward`` (zeros if absent); terminations ``next.done``
  (false if absent); truncations: true on the last step unless it terminated.
- infos ``{"task_index": int64 (N+1,)}``; the task strings, fps, robot type and feature
  names are kept in the dataset's ``robotrl_provenance`` metadata so that converting back
  restores them.

Minari -> LeRobot is the reverse: ``N = T`` frames from observations ``0..T-1`` (the final
observation has no place in a LeRobotDataset and is dropped), ``next.done`` =
terminations. Cameras are the ``uint8 (H, W, 3)`` entries of a ``Dict`` observation; a
``Box`` observation becomes ``observation.state``. Video codecs (``codec=``):

- ``"lossless"`` (default): HEVC in planar RGB (``libx265``, ``lossless=1``, pixel format ``gbrp``;
  declared ``video.codec: hevc``, ``video.pix_fmt: gbrp``): frames decode bit-exactly; files are larger;
  any ffmpeg-based reader (PyAV, torchcodec) decodes them, and LeRobot 0.6's editing tools
  (``delete_episodes``, ``split_dataset``), which re-encode with the declared codec and pixel format,
  accept it (they refuse the ``h264``/``rgb24`` pair robotrl wrote before).
- ``"h264"``: H.264 ``libx264``/``yuv420p`` with ``crf`` (default 18): small, lossy
  (chroma subsampled), the most widely playable; H and W must be even.
- ``"av1"``: AV1 ``libsvtav1``/``yuv420p``, keyframe every 2 frames, with ``crf``: what
  lerobot itself writes (it uses crf 30); lossy; H and W must be even.

Reading decodes whatever the file holds (AV1, H.264, HEVC, ... through PyAV's FFmpeg).

A feature of one value per frame (a 1-DoF action, a scalar state) is a scalar column (feature shape
``[1]``), as LeRobot writes it; LeRobot cannot open a one-element list column there. Stats are
LeRobot's: ``min``/``max``/``mean``/``std``/``count`` and the quantiles ``q01``, ``q10``, ``q50``,
``q90``, ``q99`` (exact ``numpy.quantile`` where LeRobot approximates them from histograms), images per
channel in ``[0, 1]`` shaped ``(3, 1, 1)``; for the whole dataset in ``meta/stats.json`` and per episode
in ``meta/episodes``.

Everything is written atomically: into a hidden sibling folder, moved into place with one
``os.replace`` when complete.
"""

from __future__ import annotations

from robotrl.data.lerobot.convert import lerobot_to_minari, minari_to_lerobot
from robotrl.data.lerobot.format import CODECS, ConvertError, LeRobotEpisode, LeRobotInfo, psnr
from robotrl.data.lerobot.read import read_lerobot
from robotrl.data.lerobot.write import write_lerobot

__all__ = ["LeRobotEpisode", "LeRobotInfo", "ConvertError", "read_lerobot", "write_lerobot", "lerobot_to_minari",
           "minari_to_lerobot", "CODECS", "psnr"]
