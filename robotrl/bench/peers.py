"""Peer libraries that cannot share the project's environment: d3rlpy in a side venv.

d3rlpy 2.8.1 pins ``gymnasium==1.0.0`` while robotrl needs a newer one, so the suite
runs d3rlpy's benchmarks with the python of a separate venv that still sees the
project's packages (torch, gymnasium, robotrl, ...). The first task that needs it sets
it up in ``<repo>/.bench/peers-venv`` (git-ignored)::

    python -m venv --system-site-packages .bench/peers-venv
    .bench/peers-venv/bin/pip install --no-deps d3rlpy==2.8.1 gym==0.26.2 gym-notices structlog \\
        colorama dataclasses-json marshmallow typing-inspect mypy-extensions cloudpickle
    .bench/peers-venv/bin/pip install scikit-learn

plus a ``.pth`` file listing this interpreter's site-packages, so the venv sees the
project's packages even when robotrl itself is installed in a venv (whose packages
``--system-site-packages`` would not include).

``ROBOTRL_D3RLPY_PYTHON=/path/to/python`` uses an existing interpreter with d3rlpy
instead (e.g. ``/tmp/d3rlpy-venv/bin/python`` made by the commands above), and nothing
is installed. When set-up fails (no network, no pip) the suite reports the peer as
"peer not installed" and goes on with the other tasks.
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from robotrl.errors import RobotRLError

D3RLPY_VERSION = "2.8.1"
D3RLPY_NO_DEPS = [f"d3rlpy=={D3RLPY_VERSION}", "gym==0.26.2", "gym-notices", "structlog", "colorama",
                  "dataclasses-json", "marshmallow", "typing-inspect", "mypy-extensions", "cloudpickle"]
D3RLPY_WITH_DEPS = ["scikit-learn"]
ENV_VAR = "ROBOTRL_D3RLPY_PYTHON"


class PeerUnavailable(RobotRLError, RuntimeError):
    """A peer library that is not installed and could not be set up."""


def _imports(python: Path | str, module: str) -> tuple[bool, str]:
    try:
        p = subprocess.run([str(python), "-c", f"import {module}; print({module}.__version__)"],
                           capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    return p.returncode == 0, (p.stdout.strip() if p.returncode == 0 else p.stderr.strip()[-800:])


def _venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _share_site_packages(python: Path) -> None:
    """Add a .pth to the venv's site-packages that lists this interpreter's package directories."""
    out = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    if site.ENABLE_USER_SITE:
        ours.add(site.getusersitepackages())
    # `import` lines of a .pth run at start-up; addsitedir also processes the .pth files there (editable installs)
    lines = [f"import site; site.addsitedir({p!r})" for p in sorted(ours) if Path(p).is_dir()]
    Path(out, "robotrl_project_site.pth").write_text("\n".join(lines) + "\n")


def setup_d3rlpy(venv: Path, log=print) -> Path:
    """Create ``venv`` with d3rlpy (commands in the module docstring); returns its python.

    Raises:
        PeerUnavailable: venv creation or a pip install failed (its output's tail is in the message).
    """
    python = _venv_python(venv)
    steps = [[sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
             [str(python), "-m", "pip", "install", "--no-deps", *D3RLPY_NO_DEPS],
             [str(python), "-m", "pip", "install", *D3RLPY_WITH_DEPS]]
    for cmd in steps:
        log(f"[peers] {' '.join(cmd)}")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise PeerUnavailable(f"d3rlpy set-up failed at `{' '.join(cmd)}`: {exc}") from exc
        if p.returncode != 0:
            raise PeerUnavailable(f"d3rlpy set-up failed at `{' '.join(cmd)}`: {(p.stdout + p.stderr).strip()[-600:]}")
        if cmd[1] == "-m" and cmd[2] == "venv":
            _share_site_packages(python)
    return python


def d3rlpy_python(root: Path, setup: bool = True, log=print) -> Path:
    """A python interpreter that imports d3rlpy and robotrl's packages.

    Order: ``$ROBOTRL_D3RLPY_PYTHON``; ``<root>/.bench/peers-venv``; a new venv there
    (only when ``setup``).

    Raises:
        PeerUnavailable: the interpreter named by the env var lacks d3rlpy, or set-up is
            off or failed.
    """
    given = os.environ.get(ENV_VAR)
    if given:
        ok, msg = _imports(given, "d3rlpy")
        if not ok:
            raise PeerUnavailable(f"{ENV_VAR}={given} cannot import d3rlpy: {msg}")
        return Path(given)
    venv = Path(root) / ".bench" / "peers-venv"
    python = _venv_python(venv)
    if python.exists() and _imports(python, "d3rlpy")[0]:
        return python
    if not setup:
        raise PeerUnavailable(f"d3rlpy is not installed (no {venv}; set {ENV_VAR} or let the suite set it up)")
    python = setup_d3rlpy(venv, log=log)
    ok, msg = _imports(python, "d3rlpy")
    if not ok:
        raise PeerUnavailable(f"d3rlpy installed in {venv} but does not import: {msg}")
    return python
