// pipeline.cpp: the pass lists per device and the code that runs them (see
// pipeline.h).
//
// Order: dead code first (less to fold), copies that cannot be observed
// (remove_clones), then freezing's rewrites of constants
// (batch norm as scale and shift, constant folding), then library patterns
// (they claim convolutions and matrix products with their epilogues; each rule
// is for one device: oneDNN's for CPU values), strides after those rewrites,
// then fusion of what is left into groups (on CUDA, attention_patterns first
// turns attention written op by op into one fused attention call), codegen
// (each group's kernel for its device, or the group un-fused), dead code again,
// and memory planning last (it plans the final graph; the executor frees the
// unplanned values after their last use). On both devices a batch norm becomes
// a scale and shift for the next kernel (batch_norm_scale_shift) rather than a
// folded weight copy; CUDA graphs are not memory-planned (the caching
// allocator serves each step). constant_folding and
// the batch-norm passes run ATen ops on the graph's own (frozen) constants,
// i.e. on the GPU for a CUDA graph, and propagate_strides on Meta tensors.
#include "compiler/passes/pipeline.h"

#include "ir/verifier.h"

#include <c10/util/Exception.h>

#include <fstream>

namespace torch_plugin::compiler {

const std::vector<const PassInfo*>& pipeline(c10::DeviceType device) {
  // CPU: batch_norm_scale_shift too, not fold_conv_bn (a scaled copy of each
  // convolution weight beside the module's own: ResNet-50 100 MB of resident
  // memory over eager's); the oneDNN convolution reads the module's weight.
  // split_projection after library_patterns: it splits oneDNN linear nodes.
  static const std::vector<const PassInfo*> cpu = {
      &kDeadCodeElimination,
      &kRemoveClones,
      &kBatchNormScaleShift,
      &kConstantFolding,
      &kLibraryPatterns,
      &kSplitProjection,
      &kPropagateStrides,
      &kFusion,
      &kCodegen,
      &kDeadCodeElimination,
      &kMemoryPlanning,
  };
  // CUDA: a batch norm after a convolution becomes a per-channel scale and
  // shift that fusion puts into the following generated kernel
  // (batch_norm_scale_shift), rather than a folded copy of the convolution's
  // weight (the module keeps its own; convolutions are ATen calls here); no
  // memory plan: outputs come from the caching allocator at their step and go
  // back to it after their last use, as eager's do, where a per-run arena
  // holds every planned value's bytes for the whole run and between calls.
  // broadcast_matmul before library_patterns (its addmm becomes a cuBLASLt
  // linear), split_projection after (it splits linear nodes).
  static const std::vector<const PassInfo*> cuda = {
      &kDeadCodeElimination,
      &kRemoveClones,
      &kBatchNormScaleShift,
      &kConstantFolding,
      &kBroadcastMatmul,
      &kAttentionPatterns,
      &kLibraryPatterns,
      &kSplitProjection,
      &kPropagateStrides,
      &kFusion,
      &kCodegen,
      &kDeadCodeElimination,
  };
  static const std::vector<const PassInfo*> other = {
      &kDeadCodeElimination,
      &kRemoveClones,
      &kDeadCodeElimination,
  };
  switch (device) {
    case c10::DeviceType::CPU:
      return cpu;
    case c10::DeviceType::CUDA:
      return cuda;
    default:
      return other;
  }
}

bool run_pass(const PassInfo& pass, Graph& g, const PassOptions& options) {
  static int counter = 0;
  int index = counter++;
  if (!options.dump_dir.empty()) {
    std::ofstream(
        options.dump_dir + "/" + std::to_string(index) + "_" + pass.name +
        ".before.txt")
        << g.str();
  }
  bool changed = pass.run(g, options);
  if (options.verify) {
    try {
      verify(g);
    } catch (const c10::Error& e) {
      TORCH_CHECK(
          false, "after pass ", pass.name, ": ", e.what_without_backtrace());
    }
  }
  if (!options.dump_dir.empty()) {
    std::ofstream(
        options.dump_dir + "/" + std::to_string(index) + "_" + pass.name +
        ".after.txt")
        << g.str();
  }
  return changed;
}

void run_pipeline(Graph& g, const PassOptions& options) {
  if (options.verify)
    verify(g);
  for (const PassInfo* pass : pipeline(graph_device(g).type()))
    run_pass(*pass, g, options);
}

const PassInfo& find_pass(const std::string& name) {
  for (c10::DeviceType device : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
    for (const PassInfo* pass : pipeline(device)) {
      if (name == pass->name)
        return *pass;
    }
  }
  TORCH_CHECK(false, "unknown pass '", name, "'");
}

} // namespace torch_plugin::compiler
