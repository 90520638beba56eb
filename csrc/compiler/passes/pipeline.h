// pipeline.h: the compiler's passes, in the order they run, per device.
#pragma once

#include "compiler/passes/pass.h"

#include <c10/core/DeviceType.h>

#include <string>
#include <vector>

namespace torch_plugin::compiler {

// The passes run on a graph whose tensors are on `device`, in order. CPU:
// dead_code_elimination, remove_clones, batch_norm_scale_shift,
// constant_folding, library_patterns (oneDNN), propagate_strides, fusion,
// codegen, dead_code_elimination, memory_planning. CUDA: the same list with
// attention_patterns before library_patterns (whose oneDNN rules never fire on
// CUDA values) and without memory_planning. Any other
// device: the passes that need no kernel of their own (dead_code_elimination,
// remove_clones, dead_code_elimination), so its graph runs as ATen calls.
const std::vector<const PassInfo*>& pipeline(c10::DeviceType device);
// Runs one pass, verifying and dumping around it as the options say.
bool run_pass(const PassInfo& pass, Graph& g, const PassOptions& options);
// Runs every pass of pipeline(graph_device(g).type()) on `g` (graph_device:
// ir/ir.h; throws c10::Error for a graph on several devices).
void run_pipeline(Graph& g, const PassOptions& options);
// A pass by name, from any device's pipeline (tests); throws for an unknown
// name.
const PassInfo& find_pass(const std::string& name);

} // namespace torch_plugin::compiler
