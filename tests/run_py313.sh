#!/usr/bin/env bash
# Capture on CPython 3.13 (issue #28): in a virtual environment of its own, install the
# requirements and the package, then run the capture tests and the real-model tests
# (ResNet-18 and BERT, one graph each against eager) on 3.13.
#
# The interpreter: $PY313, else `python3.13` on PATH, else pyenv's 3.13.x. Without one the
# step is skipped with a message (exit 0). The venv lives in $TORCH_PLUGIN_VENV313 (default
# ~/.cache/torch_plugin/venv313) and is reused: pip's own cache makes a fresh one cheap and an
# existing one is only topped up; the extension builds in build/<cp313 wheel tag>, beside the
# default Python's, so a rerun is incremental (and compiles through ccache where it is installed,
# so a fresh clone's first build reuses earlier objects). Under CI (CI=true) a missing 3.13 is an
# error, not a skip; a failing test fails the step (exit status of pytest).
#
# Usage: tests/run_py313.sh [pytest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# The first candidate that runs as a 3.13 (pyenv's `python3.13` shim exists, and fails, where
# 3.13 is installed but not selected).
is_313() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2> /dev/null; }
FOUND=""
for candidate in ${PY313:-} python3.13 "$HOME"/.pyenv/versions/3.13.*/bin/python; do
  if is_313 "$candidate"; then
    FOUND="$candidate"
    break
  fi
done
PY313="$FOUND"
if [[ -z "$PY313" ]]; then
  echo "tests/run_py313.sh: no CPython 3.13 found (set PY313): skipped" >&2
  [[ "${CI:-}" == true ]] && exit 1
  exit 0
fi
START=$SECONDS

VENV="${TORCH_PLUGIN_VENV313:-$HOME/.cache/torch_plugin/venv313}"
[[ -x "$VENV/bin/python" ]] || "$PY313" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q -r "$ROOT/requirements.txt" -r "$ROOT/requirements-test.txt"
LAUNCHER=()
if command -v ccache > /dev/null; then
  # Paths under the checkout hash relative to it: a fresh clone elsewhere (CI) reuses the
  # objects of the last run; the venv's headers are at the same absolute path every run.
  export CCACHE_BASEDIR="$ROOT"
  LAUNCHER=(-C cmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
"$PY" -m pip install -q --no-build-isolation "${LAUNCHER[@]}" "$ROOT"
echo "tests/run_py313.sh: venv and package ready in $((SECONDS - START)) s" >&2

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
XDIST=()  # one worker per core, as tests/run.sh (pytest-xdist from requirements-test.txt)
"$PY" -c 'import xdist' 2> /dev/null && XDIST=(-n auto)
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$PY" -m pytest "${XDIST[@]}" --import-mode=importlib -p no:cacheprovider \
  --rootdir="$ROOT" "$ROOT/tests/python/capture" \
  "$ROOT/tests/python/models/test_real_models.py" -m "not slow" -q -rfE "$@"
echo "tests/run_py313.sh: passed, $((SECONDS - START)) s in all" >&2
