// cuda_graph_builder.h: IR graphs of CUDA values for the CUDA renderer's
// tests (test_cuda_renderer.cpp: NVRTC compile checks; test_cuda_emulation.cpp:
// the kernels run on the CPU): a small builder of ATen nodes, and the fusion
// pass plus render_cuda over every group.
#pragma once

#include "compiler/codegen/cuda/cuda_renderer.h"
#include "compiler/passes/pass.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torch_plugin::compiler::testing {

using c10::ScalarType;

inline const c10::Device kCuda(c10::kCUDA, 0);

struct Builder {
  Graph g;
  Value* input(
      std::vector<int64_t> sizes,
      ScalarType dtype = ScalarType::Float,
      std::vector<int64_t> strides = {}) {
    if (strides.empty())
      strides = contiguous_strides(sizes);
    return g.add_input(dtype, sizes, strides, kCuda);
  }
  Value* op(
      const std::string& name,
      const std::string& overload,
      std::vector<Value*> ins,
      std::vector<AttrValue> consts,
      std::vector<int64_t> sizes,
      ScalarType dtype = ScalarType::Float) {
    std::vector<Arg> args;
    for (size_t i = 0; i < ins.size(); ++i)
      args.push_back(Arg::tensor(static_cast<int64_t>(i)));
    for (auto& c : consts)
      args.push_back(Arg::constant(c));
    Node* n = g.create_node(name, overload, ins, args, 1);
    Graph::set_type(
        n->outputs[0], dtype, sizes, contiguous_strides(sizes), kCuda);
    return n->outputs[0];
  }
  Value* binary(
      const std::string& name,
      Value* a,
      Value* b,
      std::vector<int64_t> sizes,
      ScalarType dt = ScalarType::Float) {
    std::vector<AttrValue> consts;
    if (name == "aten::add" || name == "aten::sub")
      consts.push_back(int64_t{1});
    return op(name, "Tensor", {a, b}, consts, sizes, dt);
  }
  Value* unary(const std::string& name, Value* a) {
    return op(name, "default", {a}, {}, a->sizes, a->dtype);
  }
  Value* gelu(Value* a, const std::string& approximate) {
    return op("aten::gelu", "default", {a}, {approximate}, a->sizes, a->dtype);
  }
  Value* softmax(const std::string& name, Value* x, int64_t dim) {
    return op(name, "default", {x}, {dim, false}, x->sizes, x->dtype);
  }
  Value* reduce(
      const std::string& name,
      const std::string& overload,
      Value* x,
      std::vector<int64_t> dims,
      bool keepdim,
      std::vector<int64_t> sizes) {
    std::vector<AttrValue> consts = {dims, keepdim};
    if (name != "aten::amax")
      consts.push_back(std::monostate{});
    if (name == "aten::var")
      consts = {dims, int64_t{1}, keepdim};
    return op(name, overload, {x}, consts, sizes, x->dtype);
  }
  Node* layer_norm(Value* x, Value* w, Value* b, double eps) {
    const int64_t c = x->sizes.back();
    std::vector<Value*> ins = {x};
    std::vector<Arg> args = {
        Arg::tensor(0),
        Arg::constant(std::vector<int64_t>{c}),
        Arg::constant(std::monostate{}),
        Arg::constant(std::monostate{}),
        Arg::constant(eps)};
    if (w) {
      ins.push_back(w);
      args[2] = Arg::tensor(1);
    }
    if (b) {
      ins.push_back(b);
      args[3] = Arg::tensor(static_cast<int64_t>(ins.size()) - 1);
    }
    Node* n = g.create_node("aten::native_layer_norm", "default", ins, args, 3);
    std::vector<int64_t> stat = x->sizes;
    stat.back() = 1;
    Graph::set_type(
        n->outputs[0], x->dtype, x->sizes, contiguous_strides(x->sizes), kCuda);
    for (size_t i : {1, 2})
      Graph::set_type(
          n->outputs[i],
          ScalarType::Float,
          stat,
          contiguous_strides(stat),
          kCuda);
    return n;
  }

  std::vector<Node*> nodes(const std::string& op) const {
    std::vector<Node*> out;
    for (Node* n : g.nodes())
      if (n->op == op)
        out.push_back(n);
    return out;
  }
};

inline std::vector<KernelSource> render_all(Builder& b) {
  PassOptions o;
  kFusion.run(b.g, o);
  std::vector<KernelSource> out;
  for (Node* n : b.g.nodes()) {
    if (n->op != "torch_plugin::fused")
      continue;
    auto k = render_cuda(*n);
    EXPECT_TRUE(k.has_value()) << n->body->str();
    if (k)
      out.push_back(*k);
  }
  return out;
}

} // namespace torch_plugin::compiler::testing
