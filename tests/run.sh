#!/usr/bin/env bash
# Runs torch_plugin's tests against the INSTALLED package:
#   1. pytest tests/python "$@" (without slow tests, one worker per core: see DEFAULTS)
#   2. tests/cpp (GoogleTest), configured with TORCH_PLUGIN_BUILD_TESTS=ON in
#      build/cpp-tests (incremental, ninja) and run by ctest.
# Exits non-zero if either fails. PYTHON selects the interpreter (default python3).
#
# Usage: pip install --no-build-isolation . && tests/run.sh [pytest args...]
set -u -o pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
PYTHON_EXE="$("$PYTHON" -c 'import sys; print(sys.executable)')" || exit 2

# --- 1. pytest --------------------------------------------------------------------
# `python -m pytest` puts its working directory on sys.path, and pytest's default
# "prepend" import mode puts the tests' rootdir (this repository, which holds the
# source tree's torch_plugin/) there too; either would shadow the installed
# package. So pytest runs from an empty temporary directory with
# --import-mode=importlib (test modules are imported without touching sys.path),
# and -p no:cacheprovider keeps it from writing .pytest_cache into the checkout.
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# Defaults, each dropped where the arguments choose for themselves:
# - tests marked slow (more than ~10 s each on 2 cores) are deselected; run them with
#   `-m slow` or `-m ""` (every test);
# - with pytest-xdist (requirements-test.txt), one worker per core (`-n auto`); `-n 0` runs
#   in this process.
DEFAULTS=()
[[ " $* " == *" -m "* || " $* " == *" -m="* ]] || DEFAULTS+=(-m "not slow")
if [[ " $* " != *" -n "* && " $* " != *" -n="* && " $* " != *"no:xdist"* ]] &&
  "$PYTHON_EXE" -c 'import xdist' 2> /dev/null; then
  DEFAULTS+=(-n auto)
fi
(
  cd "$WORK" &&
    "$PYTHON_EXE" -c 'import torch_plugin, sys; print("torch_plugin under test:", torch_plugin.__file__, file=sys.stderr)' &&
    "$PYTHON_EXE" -m pytest --import-mode=importlib -p no:cacheprovider \
      --rootdir="$ROOT" "$ROOT/tests/python" "${DEFAULTS[@]}" "$@"
)
PYTEST_STATUS=$?

# --- 2. tests/cpp -------------------------------------------------------------------
BUILD="$ROOT/build/cpp-tests"
CPP_STATUS=0
configured_python="$(sed -n 's/^Python_EXECUTABLE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)"
if [[ ! -f "$BUILD/build.ninja" || "$configured_python" != "$PYTHON_EXE" ]]; then
  # --fresh: another interpreter means another torch; drop every cached path.
  cmake --fresh -S "$ROOT" -B "$BUILD" -G Ninja \
    -DTORCH_PLUGIN_BUILD_TESTS=ON \
    -DTORCH_PLUGIN_MODULE_IN_SOURCE_TREE=OFF \
    -DPython_EXECUTABLE="$PYTHON_EXE" || CPP_STATUS=$?
fi
if [[ $CPP_STATUS -eq 0 ]]; then
  cmake --build "$BUILD" && ctest --test-dir "$BUILD" --output-on-failure
  CPP_STATUS=$?
fi

echo "tests/run.sh: pytest exit status $PYTEST_STATUS, C++ tests exit status $CPP_STATUS" >&2
[[ $PYTEST_STATUS -eq 0 && $CPP_STATUS -eq 0 ]]
