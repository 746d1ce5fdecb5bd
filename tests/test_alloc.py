"""The glibc allocator setup that the ``robotrl`` command line applies (robotrl/_alloc.py, issue 11 item 10;
since issue 44 not on ``import robotrl``: the probe calls it as ``robotrl.cli.main`` does).

Checked in subprocesses (a clean allocator each) by counting minor page faults, not time:
a 64 MiB temporary tensor allocated and freed in a loop faults every page on every
iteration with glibc's defaults (mmap/munmap); with robotrl's setting it is served from
the heap and, once warm, faults (almost) nothing.
"""

import json
import os
import subprocess
import sys

import pytest

from robotrl import _alloc

glibc = pytest.mark.skipif(_alloc._glibc() is None, reason="the allocator setup is glibc-only")

PROBE = r"""
import json, resource
import robotrl
from robotrl import _alloc
_alloc.tune_malloc()  # what robotrl.cli.main does first
import torch
torch.set_num_threads(1)
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):  # warm: the heap settles after a few frees
    torch.empty(16 << 20).fill_(1.0)
f0 = faults()
for _ in range(10):
    torch.empty(16 << 20).fill_(1.0)  # 64 MiB, like a CQL update's temporaries
print(json.dumps({"state": _alloc.STATE, "faults_per_iter": (faults() - f0) / 10}))
"""


def _probe(**env) -> dict:
    e = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k not in ("GLIBC_TUNABLES", _alloc.OPT_OUT_ENV)}
    e.update(env)
    out = subprocess.run([sys.executable, "-c", PROBE], env=e, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@glibc
def test_the_setting_applies_and_page_faults_drop():
    tuned, default = _probe(), _probe(**{_alloc.OPT_OUT_ENV: "0"})
    assert tuned["state"]["applied"] and tuned["state"]["mmap_threshold"] == 256 << 20
    assert tuned["state"]["trim_threshold"] == 1 << 30
    assert default["state"] == {"applied": False, "reason": f"{_alloc.OPT_OUT_ENV}=0"}
    pages = (64 << 20) // 4096
    assert default["faults_per_iter"] > 0.5 * pages / 512  # glibc's default: fresh pages every time (THP or not)
    assert tuned["faults_per_iter"] < 0.05 * default["faults_per_iter"], (tuned, default)


@glibc
def test_user_allocator_settings_win():
    assert _probe(MALLOC_TRIM_THRESHOLD_="1048576")["state"] == {
        "applied": False, "reason": "allocator configured by the user (MALLOC_TRIM_THRESHOLD_)"}
