"""Where each part of a run ran: one hardware record per segment (issue 43, item 8).

A run may be pretrained on one machine, fine-tuned on another, killed and resumed on a
third (a GPU box, then a CPU laptop). :class:`ProvenanceLog` keeps one record per
*segment* — the stretch of a run between a (re)start and its end or kill — with the
machine it ran on (:func:`machine_record`), the loop phases it covered (``offline`` =
pretraining, ``online`` = fine-tuning), the steps it started and ended at, its
evaluations, and, for a resume, the evaluation points recorded after the checkpoint it
resumed from (they are evaluated again, so the earlier values were overwritten).

The :class:`~robotrl.runner.Runner` opens a segment when a run starts or resumes,
updates it on every evaluation and checkpoint, closes it when the run ends, and stores
the records in ``checkpoints/latest.pt`` (key ``provenance``), in
``run_dir/provenance.json`` (written atomically at every update, so it outlives a kill
between two checkpoints) and in the run's summary (``report.json``). Benchmark scripts
copy a run's records into their result JSON (:func:`read_provenance`).

A record (all JSON types; times UTC, ISO 8601)::

    segment         0, 1, ...                   start           "new" | "resume"
    host            socket.gethostname()        cpu_model       /proc/cpuinfo "model name"
    cpu_count       os.cpu_count()              cpu_bf16        AVX512-BF16 or AMX-BF16 flag (None: unknown)
    gpu             CUDA device name, or None   device          the agent's device ("cpu", "cuda:0")
    python, torch   versions                    platform        platform.platform()
    argv            the process's command line  started, last_seen, ended (None: killed or still running)
    step_start, step_end, phase_start, phase_end, evals (steps evaluated in this segment)
    overwrites_evals (resume only: steps of earlier evaluations after the checkpoint's step)
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from robotrl.files import atomic_write
from robotrl.utils import native_bf16

if TYPE_CHECKING:  # torch is imported by machine_record only: robotrl.bench reads cpu_model without it
    import torch

FILE = "provenance.json"


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def now() -> str:
    """The time now, UTC, ISO 8601 to the second (the records' time format)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine_record(device: str | torch.device | None = None) -> dict:
    """The hardware and software this process runs on.

    Args:
        device: the device the run computes on (recorded as ``device``; ``None``: not stated).

    Returns:
        ``host``, ``cpu_model``, ``cpu_count``, ``cpu_bf16`` (the CPU's AVX512-BF16/AMX-BF16 flag,
        :func:`robotrl.utils.native_bf16`), ``gpu`` (name of the current CUDA device, ``None`` without
        one), ``device``, ``python``, ``torch``, ``platform`` and ``argv``.
    """
    import torch

    gpu = torch.cuda.get_device_name(torch.cuda.current_device()) if torch.cuda.is_available() else None
    return {"host": socket.gethostname(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "cpu_bf16": native_bf16("cpu"), "gpu": gpu, "device": None if device is None else str(device),
            "python": platform.python_version(), "torch": str(torch.__version__), "platform": platform.platform(),
            "argv": list(sys.argv)}


def phase_record(phase: str, started: str, device: str | torch.device | None = None) -> dict:
    """A record of a phase that ran in this process without a :class:`~robotrl.runner.Runner` (e.g. a benchmark
    script's in-process pretraining), ended now: :func:`machine_record` plus ``phase``, ``started`` (from
    :func:`now`) and ``ended``."""
    return {"phase": phase, **machine_record(device), "started": started, "ended": now()}


def read_provenance(run_dir: str | os.PathLike) -> list[dict]:
    """The segment records of the run in ``run_dir`` (``[]`` when it has none, e.g. a run from before
    provenance was recorded, or an unreadable file)."""
    try:
        records = json.loads((Path(run_dir) / FILE).read_text())
    except (OSError, ValueError):
        return []
    return records if isinstance(records, list) else []


class ProvenanceLog:
    """The segment records of one run directory (see the module doc).

    Args:
        run_dir: the run's directory (``provenance.json`` goes there).
    """

    def __init__(self, run_dir: str | os.PathLike):
        self.path = Path(run_dir) / FILE
        self.records: list[dict] = []

    def begin(self, *, resumed: bool, step: int, phase: str, checkpoint_records: list | None = None,
              device: str | torch.device | None = None) -> dict:
        """Open a segment at ``step`` in ``phase``; returns its record.

        Args:
            resumed: whether the run resumed from a checkpoint.
            step: the loop's step now (the checkpoint's step on resume).
            phase: the loop's phase now (``"offline"`` / ``"online"``).
            checkpoint_records: the records stored in the checkpoint resumed from; the file's records are
                used instead when they hold more (the file is written between checkpoints too).
            device: the agent's device.
        """
        earlier: list[dict] = []
        if resumed:
            earlier = [dict(r) for r in (checkpoint_records or [])]
            on_disk = read_provenance(self.path.parent)
            if len(on_disk) >= len(earlier):
                earlier = on_disk
        overwritten: list[int] = []
        for r in earlier:
            if r.get("ended") is None:  # killed: it ended when last seen
                r["killed"] = True
            overwritten += [s for s in r.get("evals", []) if s > step]
            r["evals"] = [s for s in r.get("evals", []) if s <= step]  # those after the checkpoint are redone
        t = now()
        rec = {"segment": len(earlier), "start": "resume" if resumed else "new", **machine_record(device),
               "started": t, "last_seen": t, "ended": None, "step_start": int(step), "step_end": int(step),
               "phase_start": phase, "phase_end": phase, "evals": []}
        if resumed:
            rec["overwrites_evals"] = sorted(set(overwritten))
        self.records = [*earlier, rec]
        self.write()
        return rec

    @property
    def current(self) -> dict | None:
        """The open segment's record (``None`` before :meth:`begin`)."""
        return self.records[-1] if self.records else None

    def update(self, *, step: int, phase: str, evaluated: bool = False, ended: bool = False) -> None:
        """Advance the open segment to ``step``/``phase`` (``evaluated``: an evaluation at ``step``;
        ``ended``: the run finished) and rewrite the file. Does nothing before :meth:`begin`."""
        rec = self.current
        if rec is None:
            return
        rec.update(step_end=int(step), phase_end=phase, last_seen=now())
        if evaluated:
            rec["evals"].append(int(step))
        if ended:
            rec["ended"] = rec["last_seen"]
        self.write()

    def write(self) -> None:
        """Write the records to ``run_dir/provenance.json`` atomically."""
        atomic_write(self.path, json.dumps(self.records, indent=1), mode=0o644)
