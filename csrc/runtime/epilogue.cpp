// epilogue.cpp: the library ops' activations as ATen ops (see epilogue.h).
// Moved unchanged from ops/library_ops.cpp (check_activation) and
// ops/cpu/library_ops_kernel.cpp (apply_activation).
#include "runtime/epilogue.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

namespace torch_plugin::runtime {

void check_activation(c10::string_view a) {
  for (const char* name :
       {"",
        "relu",
        "silu",
        "gelu",
        "gelu_tanh",
        "sigmoid",
        "tanh",
        "hardswish",
        "clamp"}) {
    if (a == name)
      return;
  }
  TORCH_CHECK(
      false,
      "unknown activation '",
      a,
      "'; expected relu, silu, gelu, gelu_tanh, sigmoid, tanh, hardswish or clamp");
}

at::Tensor apply_activation(
    const at::Tensor& y,
    c10::string_view a,
    double alpha,
    double beta) {
  if (a.empty())
    return y;
  if (a == "relu")
    return at::relu(y);
  if (a == "silu")
    return at::silu(y);
  if (a == "gelu")
    return at::gelu(y);
  if (a == "gelu_tanh")
    return at::gelu(y, "tanh");
  if (a == "sigmoid")
    return at::sigmoid(y);
  if (a == "tanh")
    return at::tanh(y);
  if (a == "hardswish")
    return at::hardswish(y);
  if (a == "clamp")
    return at::clamp(y, alpha, beta);
  check_activation(a); // raises: `a` is not an activation name
  TORCH_CHECK(false, "apply_activation: '", a, "' has no reference kernel");
}

} // namespace torch_plugin::runtime
