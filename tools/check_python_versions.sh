#!/usr/bin/env bash
# The supported Pythons (requires-python and the classifiers in pyproject.toml: 3.10 to 3.12): byte-compile every
# module of robotrl with each interpreter given (warnings as errors, so a SyntaxWarning such as an invalid escape
# fails), so syntax that only a newer Python accepts, or that a newer one deprecates, is caught without installing
# the dependencies there. A full install on those versions needs their torch wheels (tools/check_wheel.sh with
# PYTHON=...); this machine's wheel house has torch for 3.11 only.
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
  rm -rf "$TMP/robotrl"; cp -r "$ROOT/robotrl" "$TMP/robotrl"; find "$TMP/robotrl" -name __pycache__ -prune -exec rm -rf {} +
  "$py" -W error -m compileall -q "$TMP/robotrl" > "$TMP/log" 2>&1 || { cat "$TMP/log"; echo "[check_python_versions] FAIL: $py"; exit 1; }
  echo "[check_python_versions] $("$py" -c 'import sys; print(sys.version.split()[0])'): every module of robotrl compiles"
done
