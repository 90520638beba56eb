// pass_test_helpers.h: what the pass tests share (test_passes.cpp,
// test_library_patterns.cpp): small hand-built IR graphs (an input, a node, a
// convolution), the op list of a graph, frozen PassOptions, running one pass
// with the verifier after it, and the Passes fixture (a fresh random seed per
// test, recorded in the test's XML/JSON record).
#pragma once

#include "compiler/passes/pipeline.h"
#include "ir/ir.h"
#include "ir/verifier.h"
#include "runtime/executor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace torch_plugin::compiler::pass_test {

using runtime::Executor;

inline const c10::Device kCpuDevice(c10::kCPU);

inline Value* input(
    Graph& g,
    std::vector<int64_t> sizes,
    at::MemoryFormat format = at::MemoryFormat::Contiguous) {
  std::vector<int64_t> strides =
      at::empty(sizes, at::TensorOptions().memory_format(format))
          .strides()
          .vec();
  return g.add_input(c10::ScalarType::Float, sizes, strides, kCpuDevice);
}

// A node whose every argument is a tensor input (in order) followed by
// `consts`.
inline Node* node(
    Graph& g,
    const std::string& op,
    const std::string& overload,
    std::vector<Value*> ins,
    std::vector<AttrValue> consts,
    std::vector<std::vector<int64_t>> out_sizes) {
  std::vector<Arg> args;
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  for (AttrValue& c : consts)
    args.push_back(Arg::constant(std::move(c)));
  Node* n = g.create_node(op, overload, ins, args, out_sizes.size());
  for (size_t i = 0; i < out_sizes.size(); ++i)
    Graph::set_type(
        n->outputs[i],
        c10::ScalarType::Float,
        out_sizes[i],
        contiguous_strides(out_sizes[i]),
        kCpuDevice);
  return n;
}

// aten::convolution(x, w, b, stride 1, padding 1, dilation 1, not transposed,
// `groups`); the output has x's dtype and device, contiguous strides.
inline Node* conv(Graph& g, Value* x, Value* w, Value* b, int64_t groups = 1) {
  std::vector<int64_t> out = {
      x->sizes[0], w->sizes[0], x->sizes[2], x->sizes[3]};
  std::vector<Value*> ins = {x, w};
  std::vector<Arg> args = {Arg::tensor(0), Arg::tensor(1)};
  if (b) {
    ins.push_back(b);
    args.push_back(Arg::tensor(2));
  } else {
    args.push_back(Arg::constant(std::monostate{}));
  }
  for (AttrValue v : std::vector<AttrValue>{
           std::vector<int64_t>{1, 1},
           std::vector<int64_t>{1, 1},
           std::vector<int64_t>{1, 1},
           false,
           std::vector<int64_t>{0, 0},
           groups})
    args.push_back(Arg::constant(v));
  Node* n = g.create_node("aten::convolution", "default", ins, args, 1);
  Graph::set_type(
      n->outputs[0], x->dtype, out, contiguous_strides(out), x->device);
  return n;
}

inline at::Tensor conv_ref(
    const at::Tensor& x,
    const at::Tensor& w,
    const at::Tensor& b) {
  return at::conv2d(x, w, b, {1, 1}, {1, 1});
}

inline std::vector<std::string> ops(const Graph& g) {
  std::vector<std::string> out;
  for (Node* n : g.nodes())
    out.push_back(n->qualified_name());
  return out;
}

inline PassOptions frozen() {
  PassOptions o;
  o.freeze = true;
  return o;
}

inline bool run(const char* pass, Graph& g, const PassOptions& o = frozen()) {
  bool changed = run_pass(find_pass(pass), g, o);
  verify(g);
  return changed;
}

class Passes : public ::testing::Test {
 protected:
  void SetUp() override {
    // Fresh random inputs on every run; the seed is in the test's XML/JSON
    // record.
    uint64_t seed = std::random_device{}();
    RecordProperty("seed", std::to_string(seed));
    at::manual_seed(seed);
  }
};

} // namespace torch_plugin::compiler::pass_test
