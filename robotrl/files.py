"""Atomic file writes: a reader sees the old file or the new one, never half of one.

The one implementation robotrl uses for every file it replaces: checkpoints and array files
(:mod:`robotrl.checkpoint`), the e-stop latch and the robot link's spill files
(:mod:`robotrl.real_robot`), benchmark results and README tables (:mod:`robotrl.bench`), videos
(:mod:`robotrl.envs.video`), cached indexes. Standard library only, so that the robot server and the
benchmark tables import it without torch. Whole datasets (folders) are committed by
:func:`robotrl.data.writer.commit_dir` instead.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

__all__ = ["DirLock", "atomic_path", "atomic_write"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike, *, mode: int = 0o600, make_dirs: bool = True) -> Iterator[Path]:
    """Write a file atomically through a temporary sibling path: a reader sees the old file or the new one,
    never half of one, and a kill leaves at most a hidden ``.<name>.<random>.tmp<suffix>`` file beside it.

    Yields the temporary path (it exists, empty, created with ``mode`` minus the umask, and ends in ``path``'s
    suffix so that writers choosing a format by extension, e.g. ffmpeg, see the right one); write it, then
    leave the block: the file is fsynced and moved over ``path`` with ``os.replace``. On any error it is removed.

    Args:
        path: the final file; its folder is created (``make_dirs``).
        mode: permission bits of a new file: ``0o600`` (owner only: checkpoints, robot state) or ``0o666``
            (as ``open`` creates files: results, tables, videos).
        make_dirs: create a missing folder; ``False``: a missing folder is an error (the e-stop latch: a folder
            that does not exist is a typo or a removed mount, never created behind the operator's back).

    Raises:
        OSError: the folder is not writable (nothing is left behind).
    """
    path = Path(path)
    if make_dirs:
        path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp{path.suffix}")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write(path: str | os.PathLike, content: bytes | str | Callable[[IO[bytes]], Any], *,
                 mode: int = 0o600, make_dirs: bool = True) -> Path:
    """Write ``content`` to ``path`` atomically (:func:`atomic_path`: temporary sibling, fsync, ``os.replace``).

    The one atomic file write of robotrl: checkpoints and array files (:mod:`robotrl.checkpoint`), the e-stop
    latch, the robot link's spill files, benchmark results, README tables, videos, cached indexes.

    Args:
        path: the final file.
        content: bytes, text (written UTF-8), or ``write(binary file)`` that writes the file (e.g.
            ``lambda f: torch.save(state, f)``).
        mode: permission bits of a new file (:func:`atomic_path`; default owner-only).
        make_dirs: create a missing folder (:func:`atomic_path`).

    Returns:
        ``Path(path)``.

    Raises:
        OSError: the folder is not writable; anything ``write`` raises (nothing is left behind either way).
    """
    with atomic_path(path, mode=mode, make_dirs=make_dirs) as tmp, open(tmp, "r+b") as f:
        if callable(content):
            content(f)
        else:
            f.write(content.encode() if isinstance(content, str) else content)
    return Path(path)



class DirLock:
    """An exclusive lock on a folder for the life of one process: ``<folder>/.lock``, held with ``flock``.

    The kernel drops the lock when its holder exits, however it ends (a ``kill -9`` too), so a killed run
    resumes at once; a second live process asking for it is refused. The file holds the holder's pid and
    start time (UTC), which the refusal names. Without ``fcntl`` (Windows) it locks nothing.

    Args:
        folder: the folder (created if missing).
        what: how the refusal names the folder's use (e.g. ``"run_dir"``).
    """

    def __init__(self, folder: str | os.PathLike, *, what: str = "folder"):
        self.path = Path(folder) / ".lock"
        self.what = what
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None

    def acquire(self) -> None:
        """Take the lock (a no-op when already held).

        Raises:
            BlockingIOError: another process holds it; the message names its pid and start and the way out.
        """
        if self._fd is not None:
            return
        try:
            import fcntl
        except ImportError:  # no flock on this platform: nothing is locked
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 200).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise BlockingIOError(f"{self.path.parent} is in use by {holder}: wait for it to end, stop it, or give "
                                  f"this run another {self.what}=") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"pid {os.getpid()} (since {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())})".encode())
        self._fd = fd

    def release(self) -> None:
        """Drop the lock (a no-op when not held)."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor releases the flock

    def __del__(self) -> None:  # an object dropped while holding (e.g. a run that failed before it ended)
        self.release()
