"""Machine facts and library versions recorded with every benchmark run."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
import time

from robotrl.provenance import cpu_model

#: Distributions whose versions the README block states (missing ones are left out).
VERSIONED = ("torch", "numpy", "gymnasium", "mujoco", "minari", "stable-baselines3", "pyzmq", "hydra-core")


def load_average() -> list[float] | None:
    """The 1-, 5- and 15-minute load averages (None where the OS has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed versions of the benchmark-relevant distributions (``python`` included)."""
    out = {"python": platform.python_version()}
    for name in (*VERSIONED, *extra):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        out["robotrl"] = importlib.metadata.version("robotrl")
    except importlib.metadata.PackageNotFoundError:
        pass
    return out


def _success_convention() -> str:
    from robotrl.evaluation import SUCCESS_CONVENTION  # success numbers measured from here on follow it

    return SUCCESS_CONVENTION


def torch_threads() -> int | None:
    """torch's intra-op thread count, if torch is already imported (never imports it)."""
    torch = sys.modules.get("torch")
    return torch.get_num_threads() if torch is not None else None


def command_argv() -> list[str]:
    """This process's command line as a user types it: ``sys.argv`` with a suite module's file (``python -m
    robotrl.bench.tasks.x``) as its script ``benchmarks/bench_x.py`` (:func:`robotrl.bench.suite.task_script`), so a
    result records one command whether the runner or a user started it."""
    from robotrl.bench.suite import task_script

    return [task_script(sys.argv[0]), *sys.argv[1:]] if sys.argv else []


def environment(extra: tuple[str, ...] = ()) -> dict:
    """The one record of where a result was measured, for the suite and every benchmark script.

    Args:
        extra: further distributions whose versions to record (e.g. ``("d3rlpy",)``).

    Returns:
        ``cpu_count``, ``cpu_model``, ``load_average`` (1/5/15 min), ``platform``,
        ``torch_threads`` (``None`` before torch is imported), ``versions`` (python, robotrl
        and :data:`VERSIONED`), ``success_convention`` (:data:`robotrl.evaluation.SUCCESS_CONVENTION`),
        ``argv`` (the process's command line, :func:`command_argv`: the suite's resume key) and ``when`` (UTC, ISO 8601).
    """
    return {"cpu_count": os.cpu_count(), "cpu_model": cpu_model(), "load_average": load_average(),
            "platform": platform.platform(), "torch_threads": torch_threads(), "versions": versions(extra),
            "success_convention": _success_convention(), "argv": command_argv(),
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
