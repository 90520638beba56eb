// codegen.cpp: pass "codegen".
//
// Renders each fusion group the "fusion" pass formed (torch_plugin::fused
// nodes without a kernel yet) for its device (codegen/renderer.h,
// render_fusion_group: the device of the group's outputs) and stores the kernel
// on the group node as attrs "source", "target" ("cpp" or "cuda"), "entry"
// (the entry symbol), "grid", "block" and "shared_bytes" (CUDA's 1-d launch
// configuration; 0 for C++ kernels), and "random_streams" (how many random
// ops it holds, codegen/random_ops.h; absent when none). A group that no
// renderer handles (nullopt), or every group when PassOptions::codegen is off,
// is put back as its ATen ops (unfuse_group, fusion_group.h), so every group
// that reaches the executor has a kernel. With PassOptions::log_kernels
// (TORCH_PLUGIN_LOGS= kernels) each group's body (with each member's level) and
// its source, or that it was un-fused, go to stderr.
#include "compiler/passes/fusion_group.h"
#include "compiler/passes/pass.h"

#include "compiler/codegen/random_ops.h"
#include "compiler/codegen/renderer.h"

#include <iostream>

namespace torch_plugin::compiler {
namespace {

bool run(Graph& g, const PassOptions& options) {
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op != "torch_plugin::fused" || !n->body ||
        n->attrs.count("source") || n->outputs.empty())
      continue;
    const c10::DeviceType device = n->outputs[0]->device.type();
    const std::string name = n->str_attr("name", "fused");
    std::optional<KernelSource> k;
    if (options.codegen)
      k = render_fusion_group(*n, device);
    changed = true;
    if (!k) {
      if (options.log_kernels) {
        std::cerr << "[torch_plugin kernels] " << name << ": no "
                  << c10::DeviceTypeName(device, /*lower_case=*/true)
                  << " kernel; un-fused into its ATen ops:\n"
                  << n->body->str() << std::flush;
      }
      unfuse_group(g, n);
      continue;
    }
    n->attrs["source"] = k->source;
    n->attrs["target"] = k->target;
    n->attrs["entry"] = k->entry;
    n->attrs["grid"] = k->grid;
    n->attrs["block"] = k->block;
    n->attrs["shared_bytes"] = k->shared_bytes;
    // Kernels with random ops take (seed, offset) per call: the runtime's
    // kernel steps read "random_streams" (codegen/random_ops.h).
    if (const int streams = count_random_ops(*n->body))
      n->attrs["random_streams"] = static_cast<int64_t>(streams);
    if (options.log_kernels) {
      std::cerr << "[torch_plugin kernels] " << name << " (" << k->target
                << "):\n"
                << n->body->str() << k->source << std::endl;
    }
  }
  return changed;
}

} // namespace

const PassInfo kCodegen = {
    "codegen",
    "Renders each fusion group's kernel for its device (attrs source, target, entry, grid, "
    "block, shared_bytes); a group no renderer handles is put back as its ATen ops.",
    run};

} // namespace torch_plugin::compiler
