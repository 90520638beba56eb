#!/usr/bin/env bash
# Runs the GPU part of the test suite on a machine with a CUDA GPU (the GPU machine of
# docs/getting_started.md): installs the bytecode wheel from .whl/ when present (that machine
# has no network), builds and installs the package, then runs the tests that need a GPU
# (they skip without one, so CI never runs them). Logs go to $OUT (default: /tmp/gpu-tests).
#
# Usage: bash tests/run_gpu.sh [pytest args...]
set -u -o pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${OUT:-/tmp/gpu-tests}"
mkdir -p "$OUT"
if compgen -G "$ROOT/.whl/*.whl" > /dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site "$ROOT"/.whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
# TP_INSTALLED=1: the package is already installed from this tree (skip the build).
if [[ "${TP_INSTALLED:-0}" != 1 ]]; then
  (cd "$ROOT" && python3 -m pip install -q --no-build-isolation --no-deps .) > "$OUT/install.log" 2>&1 \
    || { tail -40 "$OUT/install.log"; exit 2; }
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
GPU_TESTS=(
  tests/python/compiler/test_cuda_graphs.py
  tests/python/compiler/test_cuda_attention.py
  tests/python/compiler/test_cuda_kernels.py
  tests/python/compiler/test_cuda_runtime.py
  tests/python/compiler/test_devices.py
  tests/python/compiler/test_fusion_share.py
  tests/python/compiler/test_output_aliasing.py
  tests/python/compiler/test_cublaslt.py
  tests/python/compiler/test_cublaslt_padded.py
  tests/python/compiler/test_cudnn_conv.py
  tests/python/compiler/test_cudnn_plans.py
  tests/python/compiler/test_cuda_glue.py
  tests/python/compiler/test_cuda_graph_inputs.py
  tests/python/compiler/test_fusion_casts.py
  tests/python/models/test_cuda_models.py
  tests/python/distributed/test_ddp.py
  tests/python/compiler/op_coverage/test_op_coverage.py
  tests/python/compiler/test_typed_kernels.py
  tests/python/compiler/test_symbolic_sizes.py
  tests/python/compiler/test_peak_memory.py
  tests/python/compiler/test_random_ops.py
  tests/python/compiler/test_optimizer_step.py
  tests/python/compiler/test_attention_training.py
  tests/python/compiler/test_training_graphs.py
  tests/python/models/test_cuda_training_compiled.py
)
existing=()
for t in "${GPU_TESTS[@]}"; do [[ -f "$ROOT/$t" ]] && existing+=("$ROOT/$t"); done
cd "$(mktemp -d)" && python3 -m pytest --import-mode=importlib -p no:cacheprovider \
  --rootdir="$ROOT" -q -rfE "${existing[@]}" "$@" 2>&1 | tee "$OUT/pytest.log" | tail -40
