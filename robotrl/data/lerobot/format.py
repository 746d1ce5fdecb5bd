"""The LeRobotDataset v3.0 layout (paths, codecs) and the records :mod:`robotrl.data.lerobot` reads and writes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from robotrl.errors import RobotRLError


CODEBASE_VERSION = "v3.0"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
#: codec name -> (PyAV encoder, pixel format, encoder options); ``crf`` is filled in for the lossy ones.
CODECS: dict[str, tuple[str, str, dict[str, str]]] = {
    # HEVC in planar RGB, x265's lossless mode: bit-exact, and a (codec, pix_fmt) pair LeRobot 0.6's encoder checks
    # accept (its editing tools re-encode with what info.json declares; libx264rgb/rgb24 is refused there)
    "lossless": ("libx265", "gbrp", {"x265-params": "lossless=1:log-level=error", "preset": "veryfast"}),
    "h264": ("libx264", "yuv420p", {"preset": "veryfast"}),
    "av1": ("libsvtav1", "yuv420p", {"g": "2", "preset": "8"}),  # LeRobot's own default (keyframe every 2 frames)
}
_CODEC_NAME = {"libx265": "hevc", "libx264": "h264", "libsvtav1": "av1"}
#: the quantiles LeRobot >= 0.4 writes into its stats (``q01`` ... ``q99``; its QUANTILES normaliser reads them)
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
_PROV_KEY = "lerobot"


class ConvertError(RobotRLError, ValueError):
    """A dataset that cannot be converted (wrong layout, unsupported version or feature)."""


def _need_av():
    try:
        import av
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ConvertError("converting videos needs PyAV: pip install 'robotrl[video]' (or pip install av)") from exc
    return av


@dataclass
class LeRobotEpisode:
    """One LeRobotDataset episode of ``N`` frames.

    Attributes:
        observations: ``{feature name: array (N, ...)}``, e.g. ``"observation.state"``
            float32 ``(N, Ds)`` and ``"observation.images.front"`` uint8 ``(N, H, W, 3)``.
        action: float32 ``(N, Da)``.
        reward: float32 ``(N,)`` (``next.reward``).
        done: bool ``(N,)`` (``next.done``).
        task_index: int64 ``(N,)``.
    """

    observations: dict[str, np.ndarray]
    action: np.ndarray
    reward: np.ndarray
    done: np.ndarray
    task_index: np.ndarray

    def __len__(self) -> int:
        return int(self.action.shape[0])


@dataclass
class LeRobotInfo:
    """What a LeRobotDataset says about itself besides its frames."""

    fps: float
    features: dict[str, dict]
    tasks: list[str]
    robot_type: str | None = None
    codebase_version: str = CODEBASE_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB of two uint8 arrays of one shape (``inf`` when equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)
