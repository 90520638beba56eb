// executor_op.h: a compiled graph's Executor as an op of the PyTorch
// dispatcher.
//
// Schema (registered in library_ops.cpp, with the custom class):
//   run_graph(__torch__.torch.classes.torch_plugin.Executor executor,
//             Tensor[] inputs) -> Tensor[]
//
// `executor` is a torch.ScriptObject wrapping one runtime::Executor (made by
// torch_plugin._C._compiler.Executor.script_object()); `inputs` are the
// graph's inputs (frozen parameters are constants inside the executor). The
// CPU and CUDA kernels (one function: inputs must be on the executor's device)
// run the executor's steps and return its outputs with the strides
// the graph promised; the Meta kernel (FakeTensor, make_fx) checks the inputs'
// count, sizes and dtypes against the graph's and returns empty outputs of the
// promised sizes, strides and dtypes. An input that does not match is an error
// naming the input, its sizes or dtype and the graph's.
//
// The executor object cannot be pickled (it holds oneDNN primitives and loaded
// kernels): a saved compiled graph is the step-level FX graph instead
// (torch_plugin/compiler/fx_artifact.py). Autograd: none (see
// library_ops.cpp).
#pragma once

#include "runtime/executor.h"

#include <torch/custom_class.h>

#include <memory>

namespace torch_plugin::ops {

// The custom class torch.classes.torch_plugin.Executor.
struct ExecutorObject : torch::CustomClassHolder {
  explicit ExecutorObject(std::shared_ptr<const runtime::Executor> e)
      : executor(std::move(e)) {}
  std::shared_ptr<const runtime::Executor> executor;
};

} // namespace torch_plugin::ops
