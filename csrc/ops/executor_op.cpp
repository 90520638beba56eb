// executor_op.cpp: torch_plugin::run_graph's CPU, CUDA and Meta kernels (see
// executor_op.h; the schema and the custom class are in library_ops.cpp).
#include "ops/executor_op.h"

#include <ATen/ops/empty_strided.h>
#include <c10/util/irange.h>
#include <torch/library.h>

namespace torch_plugin::ops {
namespace {

const runtime::Executor& unwrap(
    const c10::intrusive_ptr<ExecutorObject>& object) {
  TORCH_CHECK(
      object && object->executor,
      "torch_plugin::run_graph: the executor object is empty");
  return *object->executor;
}

void check_inputs(
    const runtime::Executor& e,
    const std::vector<at::Tensor>& inputs) {
  const auto& specs = e.input_specs();
  TORCH_CHECK(
      inputs.size() == specs.size(),
      "torch_plugin::run_graph: the compiled graph takes ",
      specs.size(),
      " inputs, got ",
      inputs.size());
  for (const auto i : c10::irange(inputs.size())) {
    const at::Tensor& t = inputs[i];
    TORCH_CHECK(
        t.scalar_type() == specs[i].dtype,
        "torch_plugin::run_graph: input ",
        i,
        " has dtype ",
        t.scalar_type(),
        ", the graph was compiled for ",
        specs[i].dtype);
    TORCH_CHECK(
        t.sym_sizes() == c10::fromIntArrayRefSlow(specs[i].sizes),
        "torch_plugin::run_graph: input ",
        i,
        " has sizes ",
        t.sym_sizes(),
        ", the graph was compiled for ",
        c10::IntArrayRef(specs[i].sizes),
        " (compiled graphs have static shapes)");
  }
}

// The CPU and CUDA kernel: runs the executor on the device it was compiled
// for.
std::vector<at::Tensor> run_graph_device(
    const c10::intrusive_ptr<ExecutorObject>& object,
    std::vector<at::Tensor> inputs) {
  const runtime::Executor& e = unwrap(object);
  check_inputs(e, inputs);
  for (const auto i : c10::irange(inputs.size())) {
    TORCH_CHECK(
        inputs[i].device() == e.device(),
        "torch_plugin::run_graph: input ",
        i,
        " is on ",
        inputs[i].device(),
        "; the graph was compiled for ",
        e.device());
  }
  return e.run(inputs);
}

std::vector<at::Tensor> run_graph_meta(
    const c10::intrusive_ptr<ExecutorObject>& object,
    std::vector<at::Tensor> inputs) {
  const runtime::Executor& e = unwrap(object);
  check_inputs(e, inputs);
  std::vector<at::Tensor> outputs;
  for (const runtime::OutputSpec& o : e.output_specs()) {
    outputs.push_back(at::empty_strided(
        o.sizes,
        o.strides,
        at::TensorOptions().dtype(o.dtype).device(c10::kMeta)));
  }
  return outputs;
}

} // namespace


} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, CPU, m) {
  m.impl("run_graph", torch_plugin::ops::run_graph_device);
}

TORCH_LIBRARY_IMPL(torch_plugin, CUDA, m) {
  m.impl("run_graph", torch_plugin::ops::run_graph_device);
}

TORCH_LIBRARY_IMPL(torch_plugin, Meta, m) {
  m.impl("run_graph", torch_plugin::ops::run_graph_meta);
}
