#!/usr/bin/env bash
# Issue 44 item 7: build robotrl's wheel, install it in a clean virtual environment with the core dependencies only
# (no extras: no stable-baselines3, onnx/onnxruntime, pyzmq/msgpack, ray, test tools), then run `robotrl train agent=bc`
# there, from a folder outside the source checkout, so nothing of the checkout is importable.
#
#   tools/check_wheel.sh [WORK_DIR]       # default WORK_DIR: a fresh mktemp -d under /tmp; prints PASS or exits non-zero
#
# Environment: PYTHON (the interpreter that builds the venv; default python3), STEPS (BC updates; default 300),
# DATA_STEPS (transitions in the generated dataset; default 5000). pip's own configuration (find-links, index)
# applies, so an offline wheel house (e.g. /opt/wheels with the CPU torch) is used when pip is configured for it;
# PIP_FIND_LINKS=/opt/wheels adds one by hand.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python3}"
WORK="${1:-$(mktemp -d /tmp/robotrl-wheel.XXXXXX)}"
STEPS="${STEPS:-300}"
DATA_STEPS="${DATA_STEPS:-5000}"
mkdir -p "$WORK"
echo "[check_wheel] work dir: $WORK"

# 1. the wheel, built in isolation from the source tree (the PEP 517 backend in pyproject.toml)
"$PY" -m pip wheel --no-deps --wheel-dir "$WORK/dist" "$ROOT" -q
WHEEL="$(ls "$WORK"/dist/robotrl-*.whl)"
echo "[check_wheel] built $(basename "$WHEEL")"

# 2. a clean venv (no system site-packages) with the wheel and its core dependencies only
"$PY" -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
"$VPY" -m pip install -q --upgrade pip >/dev/null
"$VPY" -m pip install -q "$WHEEL"
for extra_only in stable_baselines3 onnx onnxruntime zmq msgpack ray pytest; do
  if "$VPY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('$extra_only') is None)"; then
    echo "[check_wheel] FAIL: $extra_only is installed with the core dependencies" >&2; exit 1
  fi
done
"$VPY" -m pip list --format=freeze > "$WORK/pip-freeze.txt"
echo "[check_wheel] core install: $(wc -l < "$WORK/pip-freeze.txt") packages ($WORK/pip-freeze.txt)"

# 3. `robotrl train agent=bc` from outside the checkout: the installed package, its packaged configs, a dataset
#    generated on first use into a private Minari folder
cd "$WORK"
"$VPY" -c "import robotrl, sys; p = robotrl.__file__; print('[check_wheel] robotrl from', p); sys.exit('$ROOT' in p)"
export MINARI_DATASETS_PATH="$WORK/minari" OMP_NUM_THREADS=1
"$WORK/venv/bin/robotrl" train agent=bc "trainer.offline_steps=$STEPS" \
  "dataset.recipe_args.num_steps=$DATA_STEPS" run_dir="$WORK/run" 2>&1 | tee "$WORK/train.out"
test -s "$WORK/run/cli.log" || { echo "[check_wheel] FAIL: no cli.log in $WORK/run" >&2; exit 1; }
ls "$WORK/run" | grep -q -E 'report.json|checkpoint' || { echo "[check_wheel] FAIL: no report/checkpoint in $WORK/run" >&2; exit 1; }
echo "[check_wheel] PASS: wheel $(basename "$WHEEL") installed with core dependencies only; robotrl train agent=bc ran ($WORK/run)"
