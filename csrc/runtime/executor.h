// executor.h: runs one compiled graph.
//
// Owns: the plan of a compiled Graph — its steps in order (library call,
// generated kernel, or ATen fallback through the dispatcher), the constants, the
// slot of each value, and which slots die after each step (so a tensor is freed
// as soon as its last user ran). run() is thread-safe and re-entrant (each call
// has its own slots). Outputs come back with the strides the graph promised.
// No Python objects; the GIL is not needed (callers release it).
#pragma once

#include "compiler/ir.h"
#include "runtime/step.h"

#include <memory>
#include <string>
#include <vector>

namespace torch_plugin::runtime {

struct OutputSpec {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

class Executor {
 public:
  // Builds the plan of `g`, which must have been through the compiler pipeline.
  explicit Executor(const compiler::Graph& g);

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  const std::vector<OutputSpec>& output_specs() const { return output_specs_; }
  size_t num_inputs() const { return input_slots_.size(); }
  // One line per step: "3: fallback aten::max_pool2d_with_indices".
  std::string describe() const;
  // Step kind -> count, e.g. {"fallback": 3, "kernel": 5, "onednn": 20}.
  std::vector<std::pair<std::string, int>> step_counts() const;

 private:
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<std::vector<int>> free_after_;  // slots released after step i
  std::vector<std::pair<int, at::Tensor>> constants_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<OutputSpec> output_specs_;
  int num_slots_ = 0;
};

}  // namespace torch_plugin::runtime
