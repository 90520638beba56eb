// pipeline.cpp: the pass list and the code that runs it (see pipeline.h).
//
// Order: dead code first (less to fold), copies that cannot be observed
// (remove_clones), then freezing's rewrites of constants
// (conv+batch-norm folding, constant folding), then library patterns (they
// claim convolutions and matrix products with their epilogues), then fusion of
// what is left, dead code again, and memory planning last (it plans the final
// graph; the executor frees the unplanned values after their last use).
#include "compiler/passes/pipeline.h"

#include "ir/verifier.h"

#include <c10/util/Exception.h>

#include <fstream>

namespace torch_plugin::compiler {

const std::vector<const PassInfo*>& pipeline() {
  static const std::vector<const PassInfo*> passes = {
      &kDeadCodeElimination,
      &kRemoveClones,
      &kFoldConvBatchNorm,
      &kConstantFolding,
      &kLibraryPatterns,
      &kPropagateStrides,
      &kFusion,
      &kCodegen,
      &kDeadCodeElimination,
      &kMemoryPlanning,
  };
  return passes;
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
  for (const PassInfo* pass : pipeline())
    run_pass(*pass, g, options);
}

const PassInfo& find_pass(const std::string& name) {
  for (const PassInfo* pass : pipeline()) {
    if (name == pass->name)
      return *pass;
  }
  TORCH_CHECK(false, "unknown pass '", name, "'");
}

} // namespace torch_plugin::compiler
