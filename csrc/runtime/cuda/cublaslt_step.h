// cublaslt_step.h: the executor step of torch_plugin::linear_pointwise nodes
// on CUDA devices (cuBLASLt, libs/cublaslt.h). Built with the CUDA toolkit
// only; registered for (CUDA, library) (runtime/step_registry.h), so the
// executor's make_library_step comes here for nodes whose output is on a CUDA
// device. Also hands the runtime's cuBLASLt options to libs/cublaslt.h.
#pragma once

#include "runtime/step.h"

namespace torch_plugin::runtime::cuda {

// A step computing the whole node with one cublasLtMatmul — bias epilogue,
// residual as cuBLASLt's C (output's sizes and dtype), no activation or one
// with a cuBLASLt epilogue (libs/cublaslt.h, epilogue_for) — whose plan
// (algorithm) is chosen now, once, for the node's static shapes and torch's
// current settings. nullptr for any other node, or when cuBLASLt has no
// algorithm: the executor then calls the op through the dispatcher (its CUDA
// kernel, ops/cuda/library_ops_cuda.cpp, applies the rest with ATen ops). Needs
// a CUDA device (heuristics query it).
std::unique_ptr<Step> make_cublaslt_step(
    const ir::Node& node,
    const SlotMap& slots);

} // namespace torch_plugin::runtime::cuda
