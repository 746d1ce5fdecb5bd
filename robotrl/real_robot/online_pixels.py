"""Pixel policies in online RL on a robot: the camera conventions shared by ``robotrl learner`` and ``robotrl actor``.

A robot with cameras (:attr:`RobotSpec.cameras`, e.g. the twin's ``robot.cameras=[topdown] robot.image_size=N``)
sends each observation's frames ``{camera: uint8 (H, W, C)}`` beside its state ``(Ds,)``. A pixel agent
(``agent=rlpd obs=pixels``: :class:`~robotrl.agents.qlearning.QLAgent` with cameras; ``agent=residual-offpolicy obs=pixels``:
:class:`~robotrl.agents.residual.ResidualOffPolicyAgent` with cameras) learns from both; its cameras are named as
``robotrl train`` names them (``"pixels/<camera>"``, :class:`robotrl.envs.pixels.PixelObservation`), so a ``bc-pixels``
run is a residual base here and the pushed policies take ``(state (B, Ds), {"pixels/<camera>": uint8 (B, H, W, C)})``
like every exported pixel policy.

Demonstrations are a Minari dataset with ``Dict`` observations: an actor's or ``robotrl deploy``'s recording
(``{"state", "<camera>"}``) or a ``robotrl collect ... cameras=[...]`` dataset (``{..., "pixels": {"<camera>"}}``);
their cameras and frame size must be the robot's. The robot, the demonstrations and the agent must agree on every
camera and its ``(H, W, C)``; :func:`check_demo_cameras` (learner start), the learner's ``hello`` check and
:meth:`~robotrl.real_robot.online_actor.PolicyHolder.check_cameras` (actor start) refuse a difference with a
:class:`~robotrl.errors.ConfigError` naming it and the way out.

Symbols: ``B`` batch, ``Ds`` state size (the robot's ``Do``), ``Da`` action size, ``H, W, C`` frame size.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from robotrl.data.dataset import OfflineData
from robotrl.errors import ConfigError

__all__ = ["PREFIX", "camera_shapes", "check_demo_cameras", "demo_cameras", "drop_frames", "mismatch",
           "policy_images", "with_policy_cameras"]

#: key prefix of a camera in a pixel agent's ``image_shapes`` (robotrl's camera envs and datasets)
PREFIX = "pixels/"
_WAY_OUT = ("set the robot's cameras to the demonstrations' (for the twin robot.cameras=[...] robot.image_size=N, the "
            "same on the learner and the actor), or record demonstrations with the robot's cameras (a `robotrl actor` "
            "or `robotrl deploy` recording on this robot, or `robotrl collect recipe=<task> cameras=[...] "
            "image_size=N`)")


def camera_shapes(cameras: Iterable) -> dict[str, list[int]]:
    """A robot's cameras (:class:`CameraSpec` items) as a pixel agent's ``image_shapes``: ``{"pixels/<camera>": [H, W, C]}``."""
    return {f"{PREFIX}{c.name}": [int(d) for d in c.shape] for c in cameras}


def policy_images(images: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The robot's frames ``{camera: uint8 (..., H, W, C)}`` keyed as a pixel policy takes them (``"pixels/<camera>"``)."""
    return {f"{PREFIX}{k}": v for k, v in images.items()}


def mismatch(have: Mapping[str, Any], want: Mapping[str, Any]) -> tuple[dict, dict] | None:
    """``None`` if two ``{key: [H, W, C]}`` maps agree, else both (as plain dicts of lists, for messages)."""
    a = {str(k): [int(d) for d in v] for k, v in have.items()}
    b = {str(k): [int(d) for d in v] for k, v in want.items()}
    return None if a == b else (a, b)


def demo_cameras(data: OfflineData) -> dict[str, list[int]]:
    """The demonstrations' cameras as a pixel agent names them: ``{"pixels/<camera>": [H, W, C]}`` (a recording's
    ``<camera>`` and a camera dataset's ``pixels/<camera>`` both become ``pixels/<camera>``; empty without frames)."""
    out = {}
    for k, v in (data.images or {}).items():
        out[k if k.startswith(PREFIX) else f"{PREFIX}{k}"] = [int(d) for d in v.shape[1:]]
    return out


def with_policy_cameras(data: OfflineData) -> OfflineData:
    """``data`` with its frames keyed ``pixels/<camera>`` (:func:`demo_cameras`); the arrays are not copied."""
    if not data.images:
        return data
    return dataclasses.replace(data, images={(k if k.startswith(PREFIX) else f"{PREFIX}{k}"): v
                                             for k, v in data.images.items()})


def check_demo_cameras(data: OfflineData, cameras: Iterable, robot: str, demos: str) -> None:
    """Refuse demonstrations a pixel agent on this robot cannot learn from.

    Args:
        data: the loaded demonstrations.
        cameras: the robot's :class:`CameraSpec` items.
        robot, demos: names for the message (the robot's spec name, the ``demos=`` value).

    Raises:
        ConfigError: the demonstrations have no frames, or other cameras or frame sizes than the robot
            (both listed as ``{key: [H, W, C]}``, with the way out).
    """
    mine, theirs = camera_shapes(cameras), demo_cameras(data)
    if not theirs:
        raise ConfigError(f"demos={demos} hold no camera frames, and a pixel agent learns from the robot's cameras "
                          f"{mine}: " + _WAY_OUT + "; or train a state agent (agent=rlpd) on them")
    diff = mismatch(theirs, mine)
    if diff:
        raise ConfigError(f"demos={demos} were recorded with cameras {diff[0]} ({{key: [H, W, C]}}), robot {robot} sends "
                          f"{diff[1]}: the pixel policy would learn from other images than it acts on. " + _WAY_OUT)


def drop_frames(data: OfflineData) -> OfflineData:
    """``data`` without its camera frames (a state agent learns from the flat observations only)."""
    return dataclasses.replace(data, images=None, image_index=None) if data.images else data
