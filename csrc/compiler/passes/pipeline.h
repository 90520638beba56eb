// pipeline.h: the compiler's passes, in the order they run.
#pragma once

#include "compiler/passes/pass.h"

#include <vector>

namespace torch_plugin::compiler {

// The passes run by run_pipeline, in order.
const std::vector<const PassInfo*>& pipeline();
// Runs one pass, verifying and dumping around it as the options say.
bool run_pass(const PassInfo& pass, Graph& g, const PassOptions& options);
// Runs every pass of pipeline() on `g`.
void run_pipeline(Graph& g, const PassOptions& options);
// A pass by name (tests); throws for an unknown name.
const PassInfo& find_pass(const std::string& name);

}  // namespace torch_plugin::compiler
