// kernel_args.h: what every caller of a generated kernel (the executor's
// kernel steps and the torch_plugin::fused op, on any device) checks of its
// operands. No Python objects.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace torch_plugin::runtime {

// Whether `t` can be passed to a kernel generated for `strides` as it is: equal
// strides in every dimension of size > 1 (a size-1 dimension's index is always
// 0, so its stride never moves the kernel's pointer). Otherwise the caller
// copies `t` into the planned strides first.
inline bool has_kernel_strides(
    const at::Tensor& t,
    const std::vector<int64_t>& strides) {
  if (t.dim() != static_cast<int64_t>(strides.size()))
    return false;
  for (size_t d = 0; d < strides.size(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != strides[d])
      return false;
  }
  return true;
}

} // namespace torch_plugin::runtime
