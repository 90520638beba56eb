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
// its source, or that it was un-fused, go to stderr. A group output whose one
// use is a permute copied by a contiguous clone is written in the clone's
// layout and the clone dropped (consumer_layouts below).
#include "compiler/passes/fusion_group.h"
#include "compiler/passes/pass.h"

#include "compiler/codegen/random_ops.h"
#include "compiler/codegen/renderer.h"

#include <iostream>

namespace torch_plugin::compiler {
namespace {

std::vector<int64_t> row_major(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * sizes[i + 1];
  return s;
}

// A group output written in its consumer's layout: output v used only by
// p = permute(v, dims) (dims keeping the last dim), used only by a contiguous
// c = clone(p), not a graph output. The kernel then writes v with the strides
// that make p contiguous, and c is p: no copy (nn.MultiheadAttention's
// `query.transpose(1, 0)` of a layer norm's output before a batch_first
// in-projection: ViT-B/16 batch 8, 4.8 MB per layer).
struct LayoutChoice {
  Value* v;
  std::vector<int64_t> old_strides, old_permute_strides;
  Node* permute;
  Node* clone;
};
std::vector<LayoutChoice> consumer_layouts(const Graph& g, const Node& group) {
  std::vector<LayoutChoice> out;
  for (Value* v : group.outputs) {
    if (g.is_output(v) || v->uses.size() != 1)
      continue;
    Node* p = v->uses[0].user;
    if (p->op != "aten::permute" || p->inputs.size() != 1 ||
        p->args.size() < 2 || p->args[1].kind != Arg::Kind::kConst)
      continue;
    const auto* dims = std::get_if<std::vector<int64_t>>(&p->args[1].value);
    const size_t rank = v->sizes.size();
    Value* pv = p->outputs[0];
    if (!dims || dims->size() != rank || rank < 2 ||
        dims->back() != static_cast<int64_t>(rank) - 1 || g.is_output(pv) ||
        pv->uses.size() != 1)
      continue;
    Node* c = pv->uses[0].user;
    if (c->op != "aten::clone" || c->inputs.size() != 1 ||
        g.is_output(c->outputs[0]) || c->outputs[0]->sizes != pv->sizes ||
        c->outputs[0]->strides != row_major(pv->sizes) ||
        c->outputs[0]->dtype != pv->dtype)
      continue;
    out.push_back({v, v->strides, pv->strides, p, c});
  }
  return out;
}
void apply_layouts(const std::vector<LayoutChoice>& choices) {
  for (const LayoutChoice& l : choices) {
    Value* pv = l.permute->outputs[0];
    const auto& dims = std::get<std::vector<int64_t>>(l.permute->args[1].value);
    const std::vector<int64_t> contiguous = row_major(pv->sizes);
    for (size_t i = 0; i < dims.size(); ++i)
      l.v->strides[dims[i]] = contiguous[i];
    pv->strides = contiguous;
  }
}

bool run(Graph& g, const PassOptions& options) {
  bool changed = false;
  std::vector<Node*> spent_clones;
  for (Node* n : g.nodes()) {
    if (n->op != "torch_plugin::fused" || !n->body ||
        n->attrs.count("source") || n->outputs.empty())
      continue;
    const c10::DeviceType device = n->outputs[0]->device.type();
    const std::string name = n->str_attr("name", "fused");
    std::optional<KernelSource> k;
    std::vector<LayoutChoice> layouts;
    if (options.codegen) {
      layouts = consumer_layouts(g, *n);
      apply_layouts(layouts);
      k = render_fusion_group(*n, device);
    }
    changed = true;
    if (k) {
      for (const LayoutChoice& l : layouts) {
        g.replace_all_uses(l.clone->outputs[0], l.permute->outputs[0]);
        spent_clones.push_back(l.clone); // erased after the loop's snapshot
      }
    } else {
      for (const LayoutChoice& l : layouts) { // the ATen ops' own layouts
        l.v->strides = l.old_strides;
        l.permute->outputs[0]->strides = l.old_permute_strides;
      }
    }
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
  for (Node* c : spent_clones)
    g.erase_node(c);
  return changed;
}

} // namespace

const PassInfo kCodegen = {
    "codegen",
    "Renders each fusion group's kernel for its device (attrs source, target, entry, grid, "
    "block, shared_bytes); a group no renderer handles is put back as its ATen ops.",
    run};

} // namespace torch_plugin::compiler
