// library_ops.h: the torch_plugin:: operator library (see library_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>

namespace torch_plugin::ops {

// Raises c10::Error unless `activation` is one of the library ops' activation
// names (the epilogue rows of ir/op_table.h).
void check_activation(c10::string_view activation);

// Raises c10::Error unless conv_pointwise's x and w are both 3-d, 4-d or 5-d
// and stride, padding and dilation have one entry per spatial dimension.
void check_conv_ranks(
    const at::Tensor& x,
    const at::Tensor& w,
    at::IntArrayRef stride,
    at::IntArrayRef padding,
    at::IntArrayRef dilation);

// act(y) for the activation names of the library ops (reference, ATen; the
// op table's ir::apply_epilogue).
at::Tensor apply_activation(
    const at::Tensor& y,
    c10::string_view activation,
    double alpha,
    double beta);

} // namespace torch_plugin::ops
