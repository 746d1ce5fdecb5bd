"""Errors that robotrl raises for bad input.

Every error names the problem and the way out, so the CLI can print it as one clear
message instead of a traceback from deep inside a library. All derive from
:class:`RobotRLError`; each is also a subclass of the builtin error a caller would
naturally catch (``FileNotFoundError``, ``ValueError``), so generic handlers still work.
"""

from __future__ import annotations


class RobotRLError(Exception):
    """Base class of every error raised for bad user input or bad data."""


class DatasetNotFoundError(RobotRLError, FileNotFoundError):
    """A dataset id or path that is not present locally."""


class DatasetFormatError(RobotRLError, ValueError):
    """A dataset file that is empty, truncated, corrupt or holds NaN/inf values."""


class SpaceMismatchError(RobotRLError, ValueError):
    """A dataset whose observation or action space does not match the environment."""


class BatchSizeError(RobotRLError, ValueError):
    """A batch size larger than the data, or otherwise impossible to sample."""


class DatasetExistsError(RobotRLError, FileExistsError):
    """Writing a dataset under a name that is already taken (nothing was overwritten)."""


class CheckpointError(RobotRLError, ValueError):
    """A checkpoint that is missing, corrupt, or does not match the configured run."""


class ConfigError(RobotRLError, ValueError):
    """A configuration value that cannot work (unknown env, agent, recipe, ...)."""


class RunDirInUseError(RobotRLError, RuntimeError):
    """A run directory another live process is training in (:class:`robotrl.files.DirLock`)."""


class MissingExtraError(RobotRLError, ImportError):
    """A feature whose optional libraries are not installed; the message names the extra to install."""


def require(module: str, extra: str, feature: str) -> None:
    """Raise :class:`MissingExtraError` unless ``module`` can be imported.

    Args:
        module: the import name (``"zmq"``).
        extra: robotrl's extra that installs it (``"robot"``).
        feature: what needs it, for the message (``"the robot bridge"``).
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(f"{feature} needs {module}, which is not installed: "
                                f"python3 -m pip install \"robotrl[{extra}]\" (from a checkout: pip install -e \".[{extra}]\")")
