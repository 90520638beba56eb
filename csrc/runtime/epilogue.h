// epilogue.h: the activations of the library ops' epilogues
// (torch_plugin::conv_pointwise, linear_pointwise), as ATen ops: the reference
// that the ops' CPU kernels, the CUDA kernel's fallback and the executor's
// cuBLASLt step apply. A runtime-level header so that runtime/cuda needs
// nothing of csrc/ops (ops build on the runtime, not the other way).
// No Python objects.
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_plugin::runtime {

// Raises c10::Error unless `activation` is one of the library ops' activation
// names: "", "relu", "silu", "gelu", "gelu_tanh", "sigmoid", "tanh",
// "hardswish", "clamp" (alpha=min, beta=max).
void check_activation(c10::string_view activation);

// act(y) for the activation names of the library ops (reference, ATen).
at::Tensor apply_activation(
    const at::Tensor& y,
    c10::string_view activation,
    double alpha,
    double beta);

} // namespace torch_plugin::runtime
