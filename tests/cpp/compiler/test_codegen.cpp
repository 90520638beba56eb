// test_codegen.cpp: unit tests of code generation as a stage after fusion
// (csrc/compiler/passes/codegen.cpp, codegen/renderer.h) and of the pass
// pipeline per device (passes/pipeline.cpp): the codegen pass stores each
// group's kernel attrs; a group no renderer handles is un-fused (unfuse_group)
// and the graph still computes the same values; a CUDA graph's pipeline makes
// no oneDNN library node. CUDA graphs are IR graphs whose values are on
// c10::Device(kCUDA, 0): the passes run without a GPU as long as nothing
// executes on it.
#include "compiler/codegen/op_semantics.h"
#include "compiler/codegen/renderer.h"
#include "compiler/passes/fusion_group.h"
#include "compiler/passes/pipeline.h"
#include "ir/verifier.h"
#include "runtime/executor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace torch_plugin::compiler {
namespace {

using c10::ScalarType;

// A small graph builder on one device.
struct Builder {
  Graph g;
  c10::Device device;
  explicit Builder(c10::Device d = c10::Device(c10::kCPU)) : device(d) {}

  Value* input(
      std::vector<int64_t> sizes,
      ScalarType dtype = ScalarType::Float) {
    return g.add_input(dtype, sizes, contiguous_strides(sizes), device);
  }
  // Tensor inputs first (schema args 0..n), then constants.
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
        n->outputs[0], dtype, sizes, contiguous_strides(sizes), device);
    return n->outputs[0];
  }
  std::vector<Node*> nodes(const std::string& op) const {
    std::vector<Node*> out;
    for (Node* n : g.nodes())
      if (n->op == op)
        out.push_back(n);
    return out;
  }
};

std::vector<std::string> ops(const Graph& g) {
  std::vector<std::string> out;
  for (const auto& n : g.node_list())
    out.push_back(n->qualified_name());
  return out;
}

// x [6, 33], y [33]: w = relu(x * x + y); out = w / sum(w, 1, keepdim);
// sm = _softmax(out, 1); m = amax(x, [1]). A pointwise prologue, a reduction
// with an epilogue and a row-wise op in one group; a lone reduction in another.
void softmax_graph(Builder& b, ScalarType dtype = ScalarType::Float) {
  Value* x = b.input({6, 33}, dtype);
  Value* y = b.input({33}, dtype);
  Value* xx = b.op("aten::mul", "Tensor", {x, x}, {}, {6, 33}, dtype);
  Value* a = b.op("aten::add", "Tensor", {xx, y}, {int64_t{1}}, {6, 33}, dtype);
  Value* w = b.op("aten::relu", "default", {a}, {}, {6, 33}, dtype);
  Value* s = b.op(
      "aten::sum",
      "dim_IntList",
      {w},
      {std::vector<int64_t>{1}, true, std::monostate{}},
      {6, 1},
      dtype);
  Value* out = b.op("aten::div", "Tensor", {w, s}, {}, {6, 33}, dtype);
  Value* sm = b.op(
      "aten::_softmax", "default", {out}, {int64_t{1}, false}, {6, 33}, dtype);
  Value* m = b.op(
      "aten::amax",
      "default",
      {x},
      {std::vector<int64_t>{1}, false},
      {6},
      dtype);
  b.g.set_outputs({out, sm, m});
}

void fuse(Graph& g, const PassOptions& o) {
  run_pass(find_pass("fusion"), g, o);
  run_pass(find_pass("codegen"), g, o);
  verify(g);
}

TEST(Codegen, PassStoresKernelAttrsOnEachGroup) {
  Builder b;
  softmax_graph(b);
  PassOptions o;
  ASSERT_TRUE(run_pass(find_pass("fusion"), b.g, o));
  for (Node* n : b.nodes("torch_plugin::fused"))
    EXPECT_EQ(n->attrs.count("source"), 0u) << "fusion renders nothing";
  ASSERT_TRUE(run_pass(find_pass("codegen"), b.g, o));
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_FALSE(fused.empty());
  for (Node* n : fused) {
    EXPECT_EQ(n->str_attr("target", ""), "cpp");
    EXPECT_EQ(n->str_attr("entry", ""), "kernel");
    EXPECT_NE(
        n->str_attr("source", "").find("extern \"C\" void kernel"),
        std::string::npos);
    EXPECT_EQ(n->int_attr("grid", -1), 0);
    EXPECT_EQ(n->int_attr("block", -1), 0);
    EXPECT_EQ(n->int_attr("shared_bytes", -1), 0);
  }
  // Rendered groups are left alone by a second run.
  EXPECT_FALSE(run_pass(find_pass("codegen"), b.g, o));
}

TEST(Codegen, RendererDispatchAndDtypesPerDevice) {
  // Pointwise kernels: every dtype with a compute type, on both devices.
  for (ScalarType t :
       {ScalarType::Bool,
        ScalarType::Byte,
        ScalarType::Char,
        ScalarType::Short,
        ScalarType::Int,
        ScalarType::Long,
        ScalarType::Half,
        ScalarType::BFloat16,
        ScalarType::Float,
        ScalarType::Double}) {
    EXPECT_TRUE(kernel_dtype_supported(c10::kCPU, t)) << t;
    EXPECT_TRUE(kernel_dtype_supported(c10::kCUDA, t)) << t;
  }
  EXPECT_FALSE(kernel_dtype_supported(c10::kCPU, ScalarType::ComplexFloat));
  // Reductions compute in fp32: CPU fp32/bf16, CUDA also fp16.
  EXPECT_TRUE(reduction_dtype_supported(c10::kCPU, ScalarType::BFloat16));
  EXPECT_FALSE(reduction_dtype_supported(c10::kCPU, ScalarType::Half));
  EXPECT_TRUE(reduction_dtype_supported(c10::kCUDA, ScalarType::Half));
  EXPECT_FALSE(reduction_dtype_supported(c10::kCUDA, ScalarType::Double));
  EXPECT_FALSE(kernel_dtype_supported(c10::kMeta, ScalarType::Float));
  Builder b;
  softmax_graph(b);
  run_pass(find_pass("fusion"), b.g, PassOptions());
  const Node* group = b.nodes("torch_plugin::fused").at(0);
  EXPECT_TRUE(render_fusion_group(*group, c10::kCPU).has_value());
  EXPECT_FALSE(render_fusion_group(*group, c10::kMeta).has_value());
}

TEST(Codegen, OpTableUsesOnlyTheHelpers) {
  // The device-neutral table spells no std:: call (contract: tp_* helpers
  // only).
  Builder b;
  Value* x = b.input({4});
  for (const char* op :
       {"aten::relu",
        "aten::sqrt",
        "aten::rsqrt",
        "aten::abs",
        "aten::log",
        "aten::exp",
        "aten::tanh",
        "aten::sigmoid",
        "aten::erf"}) {
    Value* y = b.op(op, "default", {x}, {}, {4});
    auto e = pointwise_expression(*y->producer, {"x"});
    ASSERT_TRUE(e.has_value()) << op;
    EXPECT_EQ(e->find("std::"), std::string::npos) << op << ": " << *e;
    EXPECT_NE(e->find("tp_"), std::string::npos) << op << ": " << *e;
  }
  Value* h = b.op(
      "aten::_to_copy",
      "default",
      {x},
      {int64_t{5},
       std::monostate{},
       std::string("cpu"),
       std::monostate{},
       false,
       std::monostate{}},
      {4},
      ScalarType::Half);
  EXPECT_EQ(
      pointwise_expression(*h->producer, {"x"}).value_or(""),
      "tp_round_f16(x)");
}

TEST(Codegen, TypedExpressionsFollowTypePromotion) {
  using ST = ScalarType;
  Builder b;
  Value* i = b.input({4}, ST::Long);
  Value* h = b.input({4}, ST::BFloat16);
  auto expr = [](const Value* v) {
    std::vector<TypedExpr> ins;
    for (const Value* in : v->producer->inputs)
      ins.push_back({"x", *compute_type_of(in->dtype)});
    return typed_pointwise_expression(*v->producer, ins);
  };
  // int64 == 0.5: promoted to float (the default dtype), result bool.
  auto e = expr(b.op("aten::eq", "Scalar", {i}, {0.5}, {4}, ST::Bool));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, ST::Bool);
  EXPECT_EQ(e->code, "(((float)(x)) == 5.000000000e-01f)");
  // bf16 == 0.1: the scalar rounded to bf16 first (ATen's common dtype).
  e = expr(b.op("aten::eq", "Scalar", {h}, {0.1}, {4}, ST::Bool));
  ASSERT_TRUE(e.has_value());
  EXPECT_NE(e->code.find("1.000976562e-01f"), std::string::npos) << e->code;
  // int64 + int64 wraps (the unsigned type), computed in int64 (x + alpha * y
  // as tpt_fma: int64 arithmetic in the unsigned type).
  e = expr(b.op("aten::add", "Tensor", {i, i}, {int64_t{1}}, {4}, ST::Long));
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->type, ST::Long);
  EXPECT_NE(e->code.find("tpt_fma"), std::string::npos);
  // Integer remainder by a tensor may divide by zero: not generated; by a
  // nonzero constant it is.
  EXPECT_FALSE(
      expr(b.op("aten::remainder", "Tensor", {i, i}, {}, {4}, ST::Long)));
  EXPECT_TRUE(expr(
      b.op("aten::remainder", "Scalar", {i}, {int64_t{3}}, {4}, ST::Long)));
  EXPECT_FALSE(expr(
      b.op("aten::remainder", "Scalar", {i}, {int64_t{0}}, {4}, ST::Long)));
  // A float-only row takes no integer or float64 tensor.
  EXPECT_FALSE(expr(b.op("aten::exp", "default", {i}, {}, {4}, ST::Float)));
  EXPECT_FALSE(expr(b.op(
      "aten::exp",
      "default",
      {b.input({4}, ST::Double)},
      {},
      {4},
      ST::Double)));
}

TEST(Codegen, UnrenderedGroupsAreUnfusedAndTheGraphStaysEquivalent) {
  Builder ref, unfused, rendered;
  softmax_graph(ref);
  softmax_graph(unfused);
  softmax_graph(rendered);
  PassOptions off;
  off.codegen = false; // no renderer: every group goes back to its ATen ops
  fuse(unfused.g, off);
  EXPECT_TRUE(unfused.nodes("torch_plugin::fused").empty());
  EXPECT_EQ(ops(unfused.g), ops(ref.g));
  fuse(rendered.g, PassOptions());
  EXPECT_EQ(rendered.nodes("torch_plugin::fused").size(), 2u);

  runtime::Executor e_ref(ref.g), e_unfused(unfused.g), e_rendered(rendered.g);
  for (int run = 0; run < 2; ++run) {
    std::vector<at::Tensor> in = {at::randn({6, 33}), at::randn({33})};
    auto r = e_ref.run(in), u = e_unfused.run(in), k = e_rendered.run(in);
    ASSERT_EQ(r.size(), 3u);
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_TRUE(at::equal(r[i], u[i])) << "output " << i;
      EXPECT_TRUE(at::allclose(r[i], k[i], 1e-5, 1e-6)) << "output " << i;
    }
  }
}

TEST(Codegen, UnfuseGroupPutsTheBodyBackInPlace) {
  Builder b;
  Value* x = b.input({8});
  Value* m = b.op("aten::mul", "Tensor", {x, x}, {}, {8});
  Value* r = b.op("aten::relu", "default", {m}, {}, {8});
  Value* n = b.op("aten::neg", "default", {x}, {}, {8}); // after the group
  Value* t =
      b.op("aten::add", "Tensor", {r, n}, {int64_t{1}}, {8}, ScalarType::Float);
  b.g.set_outputs({t, r});
  run_pass(find_pass("fusion"), b.g, PassOptions());
  auto fused = b.nodes("torch_plugin::fused");
  ASSERT_EQ(fused.size(), 1u);
  unfuse_group(b.g, fused[0]);
  verify(b.g);
  EXPECT_EQ(
      ops(b.g),
      (std::vector<std::string>{
          "aten::mul.Tensor", "aten::relu", "aten::neg", "aten::add.Tensor"}));
  for (const auto& node : b.g.node_list())
    EXPECT_EQ(node->attrs.count("level"), 0u);
  EXPECT_EQ(b.g.outputs()[1]->producer->op, "aten::relu");
  EXPECT_THROW(unfuse_group(b.g, b.g.outputs()[1]->producer), c10::Error);
}

TEST(Codegen, ExecutorRefusesAKernelTargetItCannotRun) {
  Builder b;
  softmax_graph(b);
  fuse(b.g, PassOptions());
  Node* group = b.nodes("torch_plugin::fused").at(0);
  group->attrs["target"] = std::string("metal");
  try {
    runtime::Executor e(b.g);
    FAIL() << "the executor built a step for target 'metal'";
  } catch (const c10::Error& err) {
    const std::string what = err.what_without_backtrace();
    EXPECT_NE(what.find("target 'metal'"), std::string::npos) << what;
    EXPECT_NE(what.find(group->str_attr("name", "?")), std::string::npos)
        << what;
  }
}

// The pass pipeline per device.

std::vector<std::string> pass_names(c10::DeviceType device) {
  std::vector<std::string> names;
  for (const PassInfo* p : pipeline(device))
    names.push_back(p->name);
  return names;
}

TEST(Pipeline, PassListsPerDevice) {
  const std::vector<std::string> expected = {
      "dead_code_elimination",
      "remove_clones",
      "batch_norm_scale_shift",
      "constant_folding",
      "library_patterns",
      "split_projection",
      "propagate_strides",
      "fusion",
      "codegen",
      "dead_code_elimination",
      "memory_planning"};
  EXPECT_EQ(pass_names(c10::kCPU), expected);
  // CUDA: attention written op by op becomes one fused attention call first;
  // a batch norm becomes a scale and shift in the next kernel on both devices
  // (no folded copy of a convolution weight); no memory plan on CUDA (the
  // caching allocator serves each step's output, freed after its last use).
  // broadcast_matmul makes the autocast bmm of a transposed query one addmm
  // before library_patterns; split_projection splits cuBLASLt linear nodes.
  std::vector<std::string> cuda = expected;
  cuda.insert(cuda.begin() + 4, "attention_patterns");
  cuda.insert(cuda.begin() + 4, "broadcast_matmul");
  cuda.pop_back();
  EXPECT_EQ(pass_names(c10::kCUDA), cuda);
  for (const std::string& name : pass_names(c10::kMeta))
    EXPECT_TRUE(name == "dead_code_elimination" || name == "remove_clones")
        << name;
}

TEST(Pipeline, GraphDeviceIsTheOneDeviceOfItsTensors) {
  Builder cpu;
  softmax_graph(cpu);
  EXPECT_EQ(graph_device(cpu.g), c10::Device(c10::kCPU));
  Builder cuda(c10::Device(c10::kCUDA, 0));
  softmax_graph(cuda);
  EXPECT_EQ(graph_device(cuda.g), c10::Device(c10::kCUDA, 0));
  EXPECT_EQ(graph_device(Graph()), c10::Device(c10::kCPU));
  cuda.g.add_input(ScalarType::Float, {2}, {1}, c10::Device(c10::kCPU));
  EXPECT_THROW(graph_device(cuda.g), c10::Error);
}

// A graph on `device` with oneDNN patterns: addmm with a constant weight and
// bias, then relu; a convolution with constant weights, then relu; and a
// pointwise chain. Constants are host tensors whose IR values are moved to
// `device` (no GPU needed: nothing runs them there).
void library_graph(Builder& b) {
  auto constant = [&](at::Tensor t) {
    Value* c = b.g.add_constant(t);
    c->device = b.device;
    return c;
  };
  Value* x = b.input({4, 8});
  Value* w = constant(at::randn({8, 16}));
  Value* bias = constant(at::randn({16}));
  Value* mm = b.op(
      "aten::addmm",
      "default",
      {bias, x, w},
      {int64_t{1}, int64_t{1}},
      {4, 16});
  Value* r = b.op("aten::relu", "default", {mm}, {}, {4, 16});
  Value* t = b.op(
      "aten::tanh",
      "default",
      {b.op("aten::mul", "Tensor", {r, r}, {}, {4, 16})},
      {},
      {4, 16});
  Value* img = b.input({1, 3, 6, 6});
  Value* wc = constant(at::randn({5, 3, 3, 3}));
  Value* bc = constant(at::randn({5}));
  Value* conv = b.op(
      "aten::convolution",
      "default",
      {img, wc, bc},
      {std::vector<int64_t>{1, 1},
       std::vector<int64_t>{1, 1},
       std::vector<int64_t>{1, 1},
       false,
       std::vector<int64_t>{0, 0},
       int64_t{1}},
      {1, 5, 6, 6});
  Value* cr = b.op("aten::relu", "default", {conv}, {}, {1, 5, 6, 6});
  b.g.set_outputs({t, cr});
}

TEST(Pipeline, CudaGraphNeverGetsOneDnnNodesAndEveryGroupIsRenderedOrUnfused) {
  Builder b(c10::Device(c10::kCUDA, 0));
  library_graph(b);
  PassOptions o;
  o.freeze = true;
  o.verify = true;
  run_pipeline(b.g, o);
  verify(b.g);
  for (const auto& n : b.g.node_list()) {
    EXPECT_NE(n->op, "torch_plugin::conv_pointwise");
#ifndef TORCH_PLUGIN_HAVE_CUDA
    // With the CUDA parts, linear_pointwise on CUDA values is the cuBLASLt op
    // (library_patterns' CUDA rules); without them there is none.
    EXPECT_NE(n->op, "torch_plugin::linear_pointwise");
#endif
    if (n->op == "torch_plugin::fused")
      EXPECT_EQ(n->str_attr("target", ""), "cuda")
          << "a CUDA group without a CUDA kernel";
    for (const Value* v : n->outputs)
      EXPECT_EQ(v->device, c10::Device(c10::kCUDA, 0)) << n->qualified_name();
  }
  EXPECT_EQ(graph_device(b.g), c10::Device(c10::kCUDA, 0));
#ifdef TORCH_PLUGIN_HAVE_ONEDNN
  // The same graph on the CPU does get them.
  Builder cpu;
  library_graph(cpu);
  run_pipeline(cpu.g, o);
  EXPECT_EQ(cpu.nodes("torch_plugin::linear_pointwise").size(), 1u);
  EXPECT_EQ(cpu.nodes("torch_plugin::conv_pointwise").size(), 1u);
#endif
}

// fp16 pointwise kernels on both devices (typed kernels); fp16 reductions on
// CUDA only.
TEST(Pipeline, HalfPointwiseFusesOnBothDevicesHalfReductionOnCudaOnly) {
  for (c10::DeviceType device : {c10::kCPU, c10::kCUDA}) {
    Builder b(
        device == c10::kCPU ? c10::Device(c10::kCPU)
                            : c10::Device(c10::kCUDA, 0));
    Value* x = b.input({16}, ScalarType::Half);
    Value* m = b.op("aten::mul", "Tensor", {x, x}, {}, {16}, ScalarType::Half);
    b.g.set_outputs(
        {b.op("aten::relu", "default", {m}, {}, {16}, ScalarType::Half)});
    EXPECT_TRUE(run_pass(find_pass("fusion"), b.g, PassOptions()));
    Builder r(b.device);
    Value* ry = r.input({4, 16}, ScalarType::Half);
    r.g.set_outputs({r.op(
        "aten::amax",
        "default",
        {ry},
        {std::vector<int64_t>{1}, false},
        {4},
        ScalarType::Half)});
    EXPECT_EQ(
        run_pass(find_pass("fusion"), r.g, PassOptions()),
        device == c10::kCUDA);
  }
}

} // namespace
} // namespace torch_plugin::compiler
