// pass.h: how a compiler pass is declared.
//
// Each pass lives in its own file under passes/, named after the pass, and
// declares itself with a PassInfo: its name (also its log channel and the
// suffix of its dump files), a one-paragraph description, and its entry point.
// The pipeline (pipeline.cpp) lists the passes in the order they run.
#pragma once

#include "ir/ir.h"

#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The graph IR (csrc/ir) that passes and codegen read and rewrite.
using namespace ::torch_plugin::ir;

// One decision of a pattern rule (pattern_rules.h) about one candidate, as
// the compile trace (TORCH_PLUGIN_TRACE) records it: "fired", "rejected" (the
// constraint that failed in `reason`) or "off" (the rule cannot fire on
// `device` in this build; `reason` says why).
struct PatternEvent {
  std::string pass; // the pass that runs the rule ("library_patterns")
  std::string rule; // the rule's name
  std::string source; // its row: "csrc/compiler/passes/<file>.cpp:<line>"
  std::string outcome; // "fired", "rejected", "off"
  std::string node; // the root node, "aten::relu (%7)"; "" for "off"
  std::string device; // the device of the node (or the rule is off on)
  std::string reason; // rejected: the failed constraint; off: why; else ""
};

// Options of the whole pipeline; each field names the pass it configures.
struct PassOptions {
  bool freeze = false; // batch_norm_scale_shift, constant_folding: constants
                       // may be rewritten
  bool library_patterns =
      true; // library_patterns: conv/matmul to oneDNN (when built with it)
  bool fusion = true; // fusion: pointwise/reduction groups to generated kernels
  bool verify =
      false; // run the verifier after every pass (TORCH_PLUGIN_VERIFY=1)
  std::string
      dump_dir; // write the graph before/after each pass here (empty: off)
  bool log_kernels =
      false; // codegen: print each generated kernel (TORCH_PLUGIN_LOGS=kernels)
  bool log_patterns = false; // library_patterns: print each rule that fires
                             // or is rejected (TORCH_PLUGIN_LOGS=patterns)
  // library_patterns: where each rule's decisions are appended (the compile
  // trace); nullptr (the default): none are recorded, and the matcher's
  // loop does no more than one test per rejected candidate.
  std::vector<PatternEvent>* pattern_events = nullptr;
  bool codegen = true; // codegen: render kernels (false: un-fuse every group)
  bool memory_planning =
      true; // memory_planning: library outputs share one per-run arena
  bool fallback_random = false; // fusion: random ops stay ATen calls
                                // (TORCH_PLUGIN_FALLBACK_RANDOM=1)
  // library_patterns: CUDA convolutions through cuDNN in channels-last (the
  // cuda_conv_* rules). Off for training graphs: their saved activations are
  // graph outputs, each copied back to eager's layout (ResNet-50 batch 32:
  // 105 copies, 5.5 ms of a 24.6 ms step on an H100); their convolutions stay
  // ATen's, in the graph's layout, as eager runs them.
  bool cuda_conv_channels_last = true;
};

struct PassInfo {
  const char* name;
  const char* description;
  // Returns whether the graph changed.
  bool (*run)(Graph& g, const PassOptions& options);
};

// Each pass file defines one of these.
extern const PassInfo kDeadCodeElimination;
extern const PassInfo kRemoveClones;
extern const PassInfo kConstantFolding;
extern const PassInfo kBatchNormScaleShift;
extern const PassInfo kAttentionPatterns;
extern const PassInfo kLibraryPatterns;
extern const PassInfo kSplitProjection;
extern const PassInfo kBroadcastMatmul;
extern const PassInfo kPropagateStrides;
extern const PassInfo kFusion;
extern const PassInfo kCodegen;
extern const PassInfo kMemoryPlanning;

} // namespace torch_plugin::compiler
