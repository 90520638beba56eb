// cuda_renderer.cpp: render_cuda (cuda_renderer.h): picks the kernel kind of a
// fusion group — pointwise (no reduce_dims) or row reduction — and checks
// what both need; registered as the CUDA renderer.
#include "compiler/codegen/cuda/cuda_renderer.h"

#include "compiler/codegen/cuda/cuda_common.h"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace torch_plugin::compiler {

namespace {

// A profiler-readable entry name for `group`'s kernel: "tp_" + kind ("pw",
// "red", "scan") + the body's distinct op names in order ("aten::" dropped),
// at most 60 characters (then "_etc"). Only [A-Za-z0-9_]: a C identifier.
std::string entry_name(const Node& group, const char* kind) {
  std::string name = std::string("tp_") + kind;
  std::vector<std::string> seen;
  bool cut = false;
  for (const auto& n : group.body->node_list()) {
    std::string op = n->op;
    if (op.rfind("aten::", 0) == 0)
      op = op.substr(6);
    for (char& c : op)
      if (!std::isalnum(static_cast<unsigned char>(c)))
        c = '_';
    if (std::find(seen.begin(), seen.end(), op) != seen.end())
      continue;
    seen.push_back(op);
    if (name.size() + op.size() + 1 > 60) {
      cut = true;
      break;
    }
    name += "_" + op;
  }
  return cut ? name + "_etc" : name;
}

// `k` with its entry renamed from "kernel" to entry_name(group, kind): the
// name profilers (nsys, ncu, torch.profiler) show for the kernel.
std::optional<KernelSource> named(
    std::optional<KernelSource> k,
    const Node& group,
    const char* kind) {
  if (!k || k->entry != "kernel")
    return k;
  const std::string from = ") kernel(";
  const size_t at = k->source.find(from);
  if (at == std::string::npos ||
      k->source.find(from, at + 1) != std::string::npos)
    return k;
  k->entry = entry_name(group, kind);
  k->source.replace(at, from.size(), ") " + k->entry + "(");
  return k;
}

} // namespace

std::optional<KernelSource> render_cuda(const Node& group) {
  // A pointwise group may have no inputs (random ops, codegen/random_ops.h).
  if (!group.body || group.outputs.empty() ||
      (group.inputs.empty() && group.attrs.count("reduce_dims")) ||
      group.body->inputs().size() != group.inputs.size() ||
      group.body->outputs().size() != group.outputs.size())
    return std::nullopt;
  for (const Value* v : group.outputs)
    if (v->numel() == 0)
      return std::nullopt;
  if (group.attrs.count("reduce_dims")) {
    if (auto k = cuda::render_row_reduction(group))
      return named(std::move(k), group, "red");
    // nullopt without a scan
    return named(cuda::render_scan(group), group, "scan");
  }
  return named(cuda::render_pointwise(group), group, "pw");
}

namespace {
const bool registered = register_renderer(
    {c10::DeviceType::CUDA,
     "cuda",
     render_cuda,
     cuda::pointwise_cuda_dtype,
     cuda::cuda_dtype});
} // namespace

} // namespace torch_plugin::compiler
