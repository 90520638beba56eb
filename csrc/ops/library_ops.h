// library_ops.h: the torch_plugin:: operator library (see library_ops.cpp).
#pragma once

#include "runtime/epilogue.h"

#include <ATen/core/Tensor.h>

namespace torch_plugin::ops {

// The library ops' activations (check_activation, apply_activation): defined
// in runtime/epilogue.h, which the runtime's steps share with the ops.
using runtime::apply_activation;
using runtime::check_activation;

} // namespace torch_plugin::ops
