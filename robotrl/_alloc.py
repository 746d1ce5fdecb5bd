"""glibc allocator setup: keep large freed blocks in the process instead of returning them to the OS.

Why: a CQL/Cal-QL update on the default network (10 critic heads, batch 256, 10 sampled
actions per kind) builds temporaries of ~80 MiB and peaks near 1.5 GB. glibc serves
blocks above its mmap threshold (dynamic, at most 32 MiB) with a fresh ``mmap`` and gives
them back with ``munmap`` on free, and trims the heap top once more than
``M_TRIM_THRESHOLD`` of it is free; every update then touches new pages and pays one minor
page fault per 4 KiB page (~360k faults per update, measured by
``benchmarks/bench_qlearning.py --malloc-compare``). With ``M_MMAP_THRESHOLD`` = 256 MiB
those blocks come from the heap; with ``M_TRIM_THRESHOLD`` = 1 GiB the heap top freed after
an update stays for the next one (256 MiB still trimmed ~30k pages per update).

:func:`tune_malloc` runs first thing in the ``robotrl`` command line (:func:`robotrl.cli.main`),
so every ``robotrl`` command gets it; ``import robotrl`` does not change the process's allocator
(a library must not): scripts and library users that want it call ``robotrl._alloc.tune_malloc()``
themselves, before the first large allocation. It does nothing

* when the C library is not glibc (macOS, Windows, musl),
* when ``ROBOTRL_MALLOC_TUNE=0`` (opt out),
* when the user configured the allocator already (``MALLOC_MMAP_THRESHOLD_``,
  ``MALLOC_TRIM_THRESHOLD_``, ``MALLOC_TOP_PAD_`` or ``glibc.malloc`` in ``GLIBC_TUNABLES``).

Cost: up to 1 GiB of freed memory at the top of a malloc arena's heap stays mapped (memory
the process used at its peak), and blocks below 256 MiB share the heap instead of getting
their own mapping (peak RSS of the CQL update above: 1.1 -> 1.5 GB). :data:`STATE` records
what was done.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 256 << 20
TRIM_THRESHOLD = 1 << 30
OPT_OUT_ENV = "ROBOTRL_MALLOC_TUNE"
_USER_ENV = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")

STATE: dict = {"applied": False, "reason": "not run"}


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        version = libc.gnu_get_libc_version  # absent from musl
        libc.mallopt  # noqa: B018
    except (OSError, AttributeError):
        return None
    version.restype = ctypes.c_char_p
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc, version().decode()


def tune_malloc(mmap_threshold: int = MMAP_THRESHOLD, trim_threshold: int = TRIM_THRESHOLD) -> dict:
    """Set glibc's ``M_MMAP_THRESHOLD`` and ``M_TRIM_THRESHOLD`` (bytes; once per process).

    Returns:
        :data:`STATE`: ``applied`` (bool), ``reason`` (why not, or ``"ok"``), and when
        applied ``glibc`` (version), ``mmap_threshold`` and ``trim_threshold`` (bytes).
    """
    if STATE["reason"] != "not run":
        return STATE
    if os.environ.get(OPT_OUT_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        STATE.update(applied=False, reason=f"{OPT_OUT_ENV}=0")
        return STATE
    user = [k for k in _USER_ENV if k in os.environ]
    if "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""):
        user.append("GLIBC_TUNABLES")
    if user:
        STATE.update(applied=False, reason=f"allocator configured by the user ({', '.join(user)})")
        return STATE
    found = _glibc()
    if found is None:
        STATE.update(applied=False, reason="not glibc")
        return STATE
    libc, version = found
    ok_mmap = libc.mallopt(M_MMAP_THRESHOLD, int(mmap_threshold)) == 1
    ok_trim = libc.mallopt(M_TRIM_THRESHOLD, int(trim_threshold)) == 1
    STATE.update(applied=ok_mmap and ok_trim, reason="ok" if ok_mmap and ok_trim else "mallopt refused",
                 glibc=version, mmap_threshold=int(mmap_threshold) if ok_mmap else None,
                 trim_threshold=int(trim_threshold) if ok_trim else None)
    return STATE
