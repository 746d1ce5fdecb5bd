"""The one observation spec of a run: the flat state, the named cameras and the frame stack.

Every run — simulation on states or cameras, the robot learner, a Ray worker — derives one
:class:`ObservationSpec` once, from the env's spaces (checked against the dataset) or the robot's
spec, and every agent is built from it (:func:`robotrl.experiment.build_agent`): cameras are an
option of the observation that each policy's :class:`~robotrl.vision.frontend.ObservationFrontend`
takes, never a class of their own (LeRobot's habit: one policy reads state and images through its
input features).

Symbols: ``Do`` flat state size (beside the cameras), ``Da`` action size, ``H, W, C`` frame size,
``k`` frames per camera stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym

from robotrl.data.spaces import FlatLayout, flat_dim, split_images
from robotrl.vision.obs import PixelLayout, pixel_layout

__all__ = ["ObservationSpec", "CAMERA_PREFIX"]

#: the key prefix of camera frames in a camera env's ``Dict`` observation and in datasets
#: (:class:`robotrl.envs.pixels.PixelObservation`)
CAMERA_PREFIX = "pixels/"


@dataclass(frozen=True)
class ObservationSpec:
    """What a policy observes and outputs.

    Attributes:
        obs_dim: ``Do``, the flat state size beside the cameras (0: cameras only).
        action_dim: ``Da``.
        image_shapes: cameras ``{"pixels/<camera>": (H, W, C)}`` uint8 (empty: a state run).
        state_layout: :meth:`FlatLayout.to_json` of the state part of a camera env's ``Dict``
            observation (``None``: flat observations, or no state).
        frame_stack: ``k``, the last ``k`` frames of each camera the encoder reads (cameras only).
    """

    obs_dim: int
    action_dim: int
    image_shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    state_layout: str | None = None
    frame_stack: int = 1

    @property
    def has_cameras(self) -> bool:
        """Whether the observation has camera frames."""
        return bool(self.image_shapes)

    @property
    def cameras(self) -> list[str]:
        """The camera names (``image_shapes`` keys without ``pixels/``)."""
        return [k[len(CAMERA_PREFIX):] if k.startswith(CAMERA_PREFIX) else k for k in self.image_shapes]

    def layout(self) -> PixelLayout | None:
        """How a raw camera ``Dict`` observation splits into state and frames (``None``: a state run)."""
        if not self.has_cameras:
            return None
        return PixelLayout(FlatLayout.from_json(self.state_layout) if self.state_layout else None,
                           {k: tuple(v) for k, v in self.image_shapes.items()})

    def agent_kwargs(self) -> dict[str, Any]:
        """The sizes every agent constructor takes: ``obs_dim``, ``action_dim`` and, with cameras, the
        :class:`~robotrl.vision.frontend.ObservationFrontend` options ``image_shapes``, ``state_layout``,
        ``frame_stack``."""
        kw: dict[str, Any] = {"obs_dim": self.obs_dim, "action_dim": self.action_dim}
        if self.has_cameras:
            kw.update(image_shapes={k: list(v) for k, v in self.image_shapes.items()}, state_layout=self.state_layout,
                      frame_stack=self.frame_stack)
        return kw

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (recorded under ``derived.observation`` of every run)."""
        return {"obs_dim": self.obs_dim, "action_dim": self.action_dim,
                "image_shapes": {k: list(v) for k, v in self.image_shapes.items()},
                "state_layout": self.state_layout, "frame_stack": self.frame_stack}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ObservationSpec:
        """Inverse of :meth:`to_dict`."""
        return cls(int(d["obs_dim"]), int(d["action_dim"]),
                   {k: tuple(int(x) for x in v) for k, v in (d.get("image_shapes") or {}).items()},
                   d.get("state_layout"), int(d.get("frame_stack") or 1))

    @classmethod
    def from_spaces(cls, observation_space: gym.Space, action_space: gym.Space, frame_stack: int = 1) -> ObservationSpec:
        """The spec of an env: a flat (or flattenable) observation space is a state run; a ``Dict`` with
        ``pixels/<camera>`` entries a camera run (the rest is the state).

        Raises:
            ValueError: ``frame_stack < 1``.
        """
        if frame_stack < 1:
            raise ValueError(f"frame_stack={frame_stack}: the encoder reads at least the current frame (k >= 1)")
        da = flat_dim(action_space)
        state_space, images = split_images(observation_space)
        if not images:
            return cls(flat_dim(observation_space), da)
        layout = pixel_layout(observation_space)
        return cls(layout.state_dim, da, dict(layout.image_shapes),
                   layout.state.to_json() if layout.state is not None else None,
                   int(frame_stack))
