#!/usr/bin/env bash
# The supported Pythons (requires-python and the classifiers in pyproject.toml: 3.10 to 3.12) beside the suite's
# (3.11), run by CI (.ci/run). For each interpreter given:
# 1. byte-compile every module of robotrl (warnings as errors, so a SyntaxWarning such as an invalid escape fails);
# 2. in a fresh venv with robotrl's torch-free layer only (hydra-core, numpy, gymnasium; robotrl itself --no-deps):
#    compose every agent and experiment config (the settings schemas from robotrl/configs/agent_settings.json, the
#    typed settings blocks) and the collect, eval and robot-server configs without importing torch, and run
#    `robotrl collect list=true`.
# torch is not installed there: PyPI's Linux torch wheels bring ~2.5 GB of CUDA libraries per interpreter, and this
# machine's wheel house has the CPU torch for 3.11 only (a full install on another version: tools/check_wheel.sh
# with PYTHON=...). An unreachable package index skips step 2 with a line; any failing check fails.
#
#   tools/check_python_versions.sh [PYTHON ...]     # default: python3.10 python3.12 (and python3.13 if found)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PYS=("$@")
if [ ${#PYS[@]} -eq 0 ]; then
  for v in 3.10 3.12 3.13; do
    for cand in "python$v" /root/.pyenv/versions/"$v".*/bin/python3; do
      if [ -x "$(command -v "$cand" 2>/dev/null || true)" ] && "$cand" -c "" 2>/dev/null; then PYS+=("$cand"); break; fi
    done
  done
fi
[ ${#PYS[@]} -gt 0 ] || { echo "[check_python_versions] no interpreter found; pass some" >&2; exit 1; }
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
for py in "${PYS[@]}"; do
  ver="$("$py" -c 'import sys; print(sys.version.split()[0])')"
  rm -rf "$TMP/robotrl"; cp -r "$ROOT/robotrl" "$TMP/robotrl"; find "$TMP/robotrl" -name __pycache__ -prune -exec rm -rf {} +
  "$py" -W error -m compileall -q "$TMP/robotrl" > "$TMP/log" 2>&1 || { cat "$TMP/log"; echo "[check_python_versions] FAIL: $py"; exit 1; }
  echo "[check_python_versions] $ver: every module of robotrl compiles"
  rm -rf "$TMP/venv"; "$py" -m venv "$TMP/venv"
  if ! "$TMP/venv/bin/pip" install -q hydra-core numpy gymnasium > "$TMP/log" 2>&1; then
    echo "[check_python_versions] $ver: the package index is not reachable: configs not composed"; continue
  fi
  "$TMP/venv/bin/pip" install -q --no-deps -e "$ROOT" > "$TMP/log" 2>&1 || { cat "$TMP/log"; echo "[check_python_versions] FAIL: $py (pip install -e)"; exit 1; }
  (cd "$TMP" && "$TMP/venv/bin/python" - <<'PY') || { echo "[check_python_versions] FAIL: $py (composing the configs)"; exit 1; }
import sys
from importlib import resources

from hydra import compose, initialize_config_module

configs = resources.files("robotrl") / "configs"
groups = {g: sorted(p.name[:-5] for p in (configs / g).iterdir() if p.name.endswith(".yaml")) for g in ("agent", "experiment")}
with initialize_config_module(config_module="robotrl.configs", version_base="1.3"):
    for group, names in groups.items():
        for name in names:
            compose(config_name="train", overrides=[f"{group}={name}"])
    for name in ("collect", "eval", "robot_server"):
        compose(config_name=name, overrides=[])
assert "torch" not in sys.modules, "composing a config imported torch"
print(f"[check_python_versions] {sys.version.split()[0]}: {sum(map(len, groups.values()))} agent and experiment configs "
      "compose without torch")
PY
  (cd "$TMP" && "$TMP/venv/bin/python" -m robotrl.cli collect list=true > "$TMP/log" 2>&1) || { cat "$TMP/log"; echo "[check_python_versions] FAIL: $py (robotrl collect list=true)"; exit 1; }
  echo "[check_python_versions] $ver: robotrl collect list=true runs"
done
