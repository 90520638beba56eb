// library_ops.h: the torch_plugin:: operator library (see library_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_plugin::ops {

// Referenced by init_compiler so that the linker keeps the registrations of
// library_ops.cpp and cpu/library_ops_kernel.cpp from the static library.
void link_library_ops();
void link_library_ops_cpu();
// ops/attention_op.cpp.
void link_attention_op();
// ops/cuda/library_ops_cuda.cpp (builds with the CUDA toolkit only).
void link_library_ops_cuda();

// Raises c10::Error unless `activation` is one of the library ops' activation
// names (library_ops.cpp).
void check_activation(c10::string_view activation);

// act(y) for the activation names of the library ops (reference, ATen).
at::Tensor apply_activation(
    const at::Tensor& y,
    c10::string_view activation,
    double alpha,
    double beta);

} // namespace torch_plugin::ops
