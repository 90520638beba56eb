// test_broadcast_matmul.cpp: the CUDA glue around nn.MultiheadAttention's
// in-projection on hand-built IR graphs of CUDA values (no GPU needed:
// nothing runs): pass broadcast_matmul turns the bmm that ATen's matmul makes
// of F.linear on a transposed 3-d input (batch > 1 under autocast) into one
// addmm on the query's contiguous copy, library_patterns makes it a cuBLASLt
// linear with the bias, split_projection (now in the CUDA pipeline) removes
// the heads' copy, and fusion puts the query's copy (a clone: a pointwise
// identity) into the kernel of its producer, the autocast _to_copy.
#include "compiler/passes/pipeline.h"
#include "cuda_emulation.h"
#include "ir/ir.h"
#include "ir/verifier.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace torch_plugin::compiler {
namespace {

const c10::Device kCuda(c10::kCUDA, 0);

// A node whose tensor arguments come first, then `consts`; one output of the
// given sizes and strides (contiguous when empty), dtype and CUDA device.
Value* node(
    Graph& g,
    const std::string& op,
    const std::string& overload,
    std::vector<Value*> ins,
    std::vector<AttrValue> consts,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides = {},
    c10::ScalarType dtype = at::kBFloat16,
    bool may_alias = false) {
  std::vector<Arg> args;
  for (size_t i = 0; i < ins.size(); ++i)
    args.push_back(Arg::tensor(static_cast<int64_t>(i)));
  for (AttrValue& c : consts)
    args.push_back(Arg::constant(std::move(c)));
  Node* n = g.create_node(op, overload, ins, args, 1);
  n->may_alias = may_alias;
  if (strides.empty())
    strides = contiguous_strides(sizes);
  Graph::set_type(n->outputs[0], dtype, sizes, strides, kCuda);
  return n->outputs[0];
}

Value* view_like(
    Graph& g,
    const std::string& op,
    Value* x,
    std::vector<AttrValue> consts,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides) {
  return node(
      g, op, "default", {x}, std::move(consts), sizes, strides, x->dtype, true);
}

Value* constant(Graph& g, const at::Tensor& t) {
  Value* c = g.add_constant(t);
  c->device = kCuda; // the IR's device (nothing runs)
  return c;
}

int count(const Graph& g, const std::string& qualified) {
  int c = 0;
  for (const auto& n : g.node_list())
    c += n->qualified_name() == qualified || n->op == qualified;
  return c;
}

const Node* first(const Graph& g, const std::string& op) {
  for (const auto& n : g.node_list())
    if (n->op == op)
      return n.get();
  return nullptr;
}

void run(Graph& g, const char* pass) {
  PassOptions options;
  options.verify = true;
  run_pass(find_pass(pass), g, options);
  verify(g);
}

// F.multi_head_attention_forward's packed in-projection of a batch_first
// [B, L, E] fp32 input under bf16 autocast, as AOTAutograd lowers it at
// batch > 1 (the IR of torchvision's ViT): permute, _to_copy, expand + bmm
// with the weight broadcast over L, the bias added alone, then the heads'
// views, clone and selects; q + k + v stands for their uses.
struct InProjection {
  Graph g;
  Value* query_cast = nullptr; // the autocast _to_copy
  int64_t b, l, e;

  // `folded`: the expanded weight is a constant (constant_folding
  // materializes expands of at most 64 KiB).
  InProjection(
      int64_t b_,
      int64_t l_,
      int64_t e_,
      bool bias = true,
      bool folded = false)
      : b(b_), l(l_), e(e_) {
    const int64_t n = 3 * e;
    Value* x = g.add_input(at::kFloat, {b, l, e}, {l * e, e, 1}, kCuda);
    Value* xp = view_like(
        g,
        "aten::permute",
        x,
        {std::vector<int64_t>{1, 0, 2}},
        {l, b, e},
        {e, l * e, 1});
    query_cast = node(
        g,
        "aten::_to_copy",
        "default",
        {xp},
        {int64_t{15},
         std::monostate{},
         std::monostate{},
         std::monostate{},
         false,
         std::monostate{}},
        {l, b, e},
        {e, l * e, 1});
    Value* xe = view_like(
        g,
        "aten::expand",
        query_cast,
        {std::vector<int64_t>{l, b, e}, false},
        {l, b, e},
        {e, l * e, 1});
    Value* xv = view_like(
        g,
        "aten::view",
        xe,
        {std::vector<int64_t>{l, b, e}},
        {l, b, e},
        {e, l * e, 1});
    at::Tensor w = at::randn({n, e}).to(at::kBFloat16);
    Value* wt = constant(g, w.t());
    Value* we = folded
        ? constant(g, w.t().unsqueeze(0).expand({l, e, n}).contiguous())
        : view_like(
              g,
              "aten::expand",
              wt,
              {std::vector<int64_t>{l, e, n}, false},
              {l, e, n},
              {0, 1, e});
    Value* y = node(g, "aten::bmm", "default", {xv, we}, {}, {l, b, n});
    Value* yv = view_like(
        g, "aten::view", y, {std::vector<int64_t>{l, b, n}}, {l, b, n}, {});
    Value* z = yv;
    if (bias) {
      Value* c = constant(g, at::randn({n}).to(at::kBFloat16));
      z = node(g, "aten::add", "Tensor", {yv, c}, {int64_t{1}}, {l, b, n});
    }
    Value* z4 = view_like(
        g,
        "aten::view",
        z,
        {std::vector<int64_t>{l, b, 3, e}},
        {l, b, 3, e},
        {});
    Value* z5 =
        view_like(g, "aten::unsqueeze", z4, {int64_t{0}}, {1, l, b, 3, e}, {});
    Value* z6 = view_like(
        g,
        "aten::permute",
        z5,
        {std::vector<int64_t>{3, 1, 2, 0, 4}},
        {3, l, b, 1, e},
        {e, b * n, n, l * b * n, 1});
    Value* z7 = node(
        g,
        "aten::squeeze",
        "dims",
        {z6},
        {std::vector<int64_t>{-2}},
        {3, l, b, e},
        {e, b * n, n, 1},
        at::kBFloat16,
        true);
    Value* heads =
        node(g, "aten::clone", "default", {z7}, {int64_t{0}}, {3, l, b, e});
    std::vector<Value*> qkv;
    for (int64_t j = 0; j < 3; ++j)
      qkv.push_back(node(
          g,
          "aten::select",
          "int",
          {heads},
          {int64_t{0}, j},
          {l, b, e},
          {},
          at::kBFloat16,
          true));
    Value* s = node(
        g, "aten::add", "Tensor", {qkv[0], qkv[1]}, {int64_t{1}}, {l, b, e});
    s = node(g, "aten::add", "Tensor", {s, qkv[2]}, {int64_t{1}}, {l, b, e});
    g.set_outputs({s});
    verify(g);
  }
};

TEST(BroadcastMatmul, BmmWithBroadcastWeightAndBiasBecomesOneAddmm) {
  InProjection p(4, 9, 16);
  run(p.g, "broadcast_matmul");
  EXPECT_EQ(count(p.g, "aten::bmm"), 0);
  EXPECT_EQ(count(p.g, "aten::expand"), 0);
  EXPECT_EQ(count(p.g, "aten::addmm"), 1);
  EXPECT_EQ(count(p.g, "aten::add.Tensor"), 2); // q + k + v only
  // The query's rows copied once, contiguous, from the autocast cast.
  const Node* copy = first(p.g, "aten::clone");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->inputs[0], p.query_cast);
  EXPECT_TRUE(copy->outputs[0]->is_contiguous());
  const Node* mm = first(p.g, "aten::addmm");
  EXPECT_EQ(mm->outputs[0]->sizes, (std::vector<int64_t>{p.l * p.b, 3 * p.e}));
  EXPECT_EQ(mm->tensor_arg(0)->sizes, (std::vector<int64_t>{3 * p.e}));
  // The heads' views downstream see the bmm's [L, B, 3E] contiguous layout.
  const Node* mm_view = mm->outputs[0]->uses.at(0).user;
  EXPECT_EQ(mm_view->op, "aten::view");
  EXPECT_EQ(
      mm_view->outputs[0]->sizes, (std::vector<int64_t>{p.l, p.b, 3 * p.e}));
  EXPECT_TRUE(mm_view->outputs[0]->is_contiguous());
}

TEST(BroadcastMatmul, FoldedBroadcastWeightIsItsFirstSlice) {
  InProjection p(2, 5, 8, true, /*folded=*/true);
  run(p.g, "broadcast_matmul");
  EXPECT_EQ(count(p.g, "aten::bmm"), 0);
  const Node* mm = first(p.g, "aten::addmm");
  ASSERT_NE(mm, nullptr);
  EXPECT_EQ(mm->tensor_arg(2)->sizes, (std::vector<int64_t>{8, 24}));
}

// A constant batch operand with different slices is a real batched product.
TEST(BroadcastMatmul, ConstantWithDifferentSlicesStaysBmm) {
  Graph g;
  Value* a = g.add_input(at::kFloat, {3, 4, 5}, {20, 5, 1}, kCuda);
  Value* b = constant(g, at::randn({3, 5, 6}));
  Value* y =
      node(g, "aten::bmm", "default", {a, b}, {}, {3, 4, 6}, {}, at::kFloat);
  g.set_outputs({y});
  run(g, "broadcast_matmul");
  EXPECT_EQ(count(g, "aten::bmm"), 1);
}

TEST(BroadcastMatmul, WithoutBiasBecomesMm) {
  InProjection p(2, 5, 8, /*bias=*/false);
  run(p.g, "broadcast_matmul");
  EXPECT_EQ(count(p.g, "aten::bmm"), 0);
  EXPECT_EQ(count(p.g, "aten::mm"), 1);
  EXPECT_EQ(count(p.g, "aten::addmm"), 0);
}

// A batch operand that is not broadcast (attention's own q @ k^T) stays bmm.
TEST(BroadcastMatmul, BmmOfTwoActivationsIsLeftAlone) {
  Graph g;
  Value* a = g.add_input(at::kBFloat16, {4, 6, 8}, {48, 8, 1}, kCuda);
  Value* b = g.add_input(at::kBFloat16, {4, 8, 5}, {40, 5, 1}, kCuda);
  Value* y = node(g, "aten::bmm", "default", {a, b}, {}, {4, 6, 5});
  g.set_outputs({y});
  run(g, "broadcast_matmul");
  EXPECT_EQ(count(g, "aten::bmm"), 1);
}

// The fp32 form (parameters requiring a gradient: ATen's matmul folds the
// transposed query with a copy): clone, view, mm, view, add of the bias, then
// the heads' views, clone and selects.
void fp32_in_projection(Graph& g, int64_t b, int64_t l, int64_t e) {
  const int64_t n = 3 * e;
  const auto f32 = at::kFloat;
  Value* x = g.add_input(f32, {b, l, e}, {l * e, e, 1}, kCuda);
  Value* xp = view_like(
      g,
      "aten::permute",
      x,
      {std::vector<int64_t>{1, 0, 2}},
      {l, b, e},
      {e, l * e, 1});
  Value* xc =
      node(g, "aten::clone", "default", {xp}, {int64_t{0}}, {l, b, e}, {}, f32);
  Value* x2 = view_like(
      g, "aten::view", xc, {std::vector<int64_t>{l * b, e}}, {l * b, e}, {});
  Value* wt = constant(g, at::randn({n, e}).t());
  Value* y = node(g, "aten::mm", "default", {x2, wt}, {}, {l * b, n}, {}, f32);
  Value* y3 = view_like(
      g, "aten::view", y, {std::vector<int64_t>{l, b, n}}, {l, b, n}, {});
  Value* c = constant(g, at::randn({n}));
  Value* z =
      node(g, "aten::add", "Tensor", {y3, c}, {int64_t{1}}, {l, b, n}, {}, f32);
  Value* z4 = view_like(
      g, "aten::view", z, {std::vector<int64_t>{l, b, 3, e}}, {l, b, 3, e}, {});
  Value* z5 =
      view_like(g, "aten::unsqueeze", z4, {int64_t{0}}, {1, l, b, 3, e}, {});
  Value* z6 = view_like(
      g,
      "aten::permute",
      z5,
      {std::vector<int64_t>{3, 1, 2, 0, 4}},
      {3, l, b, 1, e},
      {e, b * n, n, l * b * n, 1});
  Value* z7 = node(
      g,
      "aten::squeeze",
      "dims",
      {z6},
      {std::vector<int64_t>{-2}},
      {3, l, b, e},
      {e, b * n, n, 1},
      f32,
      true);
  Value* heads = node(
      g, "aten::clone", "default", {z7}, {int64_t{0}}, {3, l, b, e}, {}, f32);
  Value* s = nullptr;
  for (int64_t j = 0; j < 3; ++j) {
    Value* q = node(
        g,
        "aten::select",
        "int",
        {heads},
        {int64_t{0}, j},
        {l, b, e},
        {},
        f32,
        true);
    s = s ? node(
                g,
                "aten::add",
                "Tensor",
                {s, q},
                {int64_t{1}},
                {l, b, e},
                {},
                f32)
          : q;
  }
  g.set_outputs({s});
  verify(g);
}

TEST(BroadcastMatmul, BiasAddBehindViewsOfMmBecomesAddmm) {
  Graph g;
  fp32_in_projection(g, 3, 5, 8);
  run(g, "broadcast_matmul");
  EXPECT_EQ(count(g, "aten::mm"), 0);
  EXPECT_EQ(count(g, "aten::addmm"), 1);
  EXPECT_EQ(count(g, "aten::add.Tensor"), 2); // q + k + v only
  const Node* mm = first(g, "aten::addmm");
  EXPECT_EQ(mm->tensor_arg(0)->sizes, (std::vector<int64_t>{24}));
}

#ifdef TORCH_PLUGIN_HAVE_CUDA // library_patterns' cuBLASLt rows

TEST(BroadcastMatmul, Fp32InProjectionSplitsIntoHeadsOnCuda) {
  Graph g;
  fp32_in_projection(g, 8, 350, 256);
  for (const char* pass :
       {"broadcast_matmul",
        "library_patterns",
        "split_projection",
        "propagate_strides",
        "fusion"})
    run(g, pass);
  EXPECT_EQ(count(g, "torch_plugin::linear_pointwise"), 3);
  EXPECT_EQ(count(g, "aten::select.int"), 0);
  EXPECT_EQ(
      count(g, "aten::add.Tensor"), 0); // bias in the products, q+k+v fused
  EXPECT_EQ(count(g, "aten::clone"), 0); // the query's copy: a kernel
}

// The CUDA pipeline's passes after folding, on the whole in-projection: one
// product per head, no copy of the product, the query's copy in the cast's
// kernel.
TEST(BroadcastMatmul, InProjectionSplitsIntoHeadsOnCuda) {
  // [2800, 768]: a packed product of at least 2^21 elements (split_projection
  // leaves smaller ones whole on CUDA).
  InProjection p(8, 350, 256);
  for (const char* pass :
       {"broadcast_matmul",
        "library_patterns",
        "split_projection",
        "propagate_strides",
        "fusion"})
    run(p.g, pass);
  EXPECT_EQ(count(p.g, "torch_plugin::linear_pointwise"), 3);
  EXPECT_EQ(count(p.g, "aten::select.int"), 0);
  EXPECT_EQ(count(p.g, "aten::clone"), 0); // both copies gone or fused
  EXPECT_EQ(count(p.g, "aten::_to_copy"), 0);
  bool cast_and_copy = false;
  for (const auto& n : p.g.node_list()) {
    if (n->op != "torch_plugin::fused")
      continue;
    int cast = 0, copy = 0;
    for (const auto& m : n->body->node_list()) {
      cast += m->op == "aten::_to_copy";
      copy += m->op == "aten::clone";
    }
    if (cast && copy) {
      cast_and_copy = true;
      // One output: the contiguous bf16 rows (the cast's strided value is
      // not materialized).
      ASSERT_EQ(n->outputs.size(), 1u);
      EXPECT_TRUE(n->outputs[0]->is_contiguous());
      EXPECT_EQ(n->outputs[0]->dtype, at::kBFloat16);
    }
  }
  EXPECT_TRUE(cast_and_copy) << p.g.str();
  for (const auto& n : p.g.node_list()) {
    if (n->op != "torch_plugin::linear_pointwise")
      continue;
    EXPECT_EQ(n->inputs[0]->sizes, (std::vector<int64_t>{p.l * p.b, p.e}));
    EXPECT_EQ(n->outputs[0]->sizes, (std::vector<int64_t>{p.l * p.b, p.e}));
    EXPECT_NE(n->tensor_arg(2), nullptr); // its bias block
  }
}

// A small packed product stays one product on CUDA (three latency-bound
// products cost more than one and the copy); the copy is a kernel.
TEST(BroadcastMatmul, SmallInProjectionIsNotSplitOnCuda) {
  InProjection p(4, 9, 16);
  for (const char* pass :
       {"broadcast_matmul",
        "library_patterns",
        "split_projection",
        "propagate_strides",
        "fusion"})
    run(p.g, pass);
  EXPECT_EQ(count(p.g, "torch_plugin::linear_pointwise"), 1);
  EXPECT_EQ(count(p.g, "aten::clone"), 0); // in kernels
}

// Row blocks of W that would start off 16 bytes (E = 250 bf16: 125000-byte
// blocks) keep
// the one product and the heads' copy, a generated kernel.
TEST(BroadcastMatmul, MisalignedRowBlocksAreNotSplit) {
  InProjection p(16, 700, 250);
  for (const char* pass :
       {"broadcast_matmul",
        "library_patterns",
        "split_projection",
        "propagate_strides",
        "fusion"})
    run(p.g, pass);
  EXPECT_EQ(count(p.g, "torch_plugin::linear_pointwise"), 1);
  EXPECT_EQ(count(p.g, "aten::bmm"), 0);
  EXPECT_EQ(count(p.g, "aten::clone"), 0); // in kernels
}

#endif // TORCH_PLUGIN_HAVE_CUDA

// A lone layout-changing clone on CUDA is a kernel of its own (ATen's strided
// copy is not vectorized); a clone that keeps the layout is removed earlier
// (remove_clones) and one on the CPU stays ATen's.
TEST(BroadcastMatmul, LoneLayoutCopyIsAKernelOnCuda) {
  Graph g;
  Value* x = g.add_input(
      at::kBFloat16, {2, 12, 7, 16}, contiguous_strides({2, 12, 7, 16}), kCuda);
  Value* p = view_like(
      g,
      "aten::permute",
      x,
      {std::vector<int64_t>{2, 0, 1, 3}},
      {7, 2, 12, 16},
      {16, 12 * 7 * 16, 7 * 16, 1});
  Value* c =
      node(g, "aten::clone", "default", {p}, {int64_t{0}}, {7, 2, 12, 16});
  g.set_outputs({c});
  run(g, "fusion");
  EXPECT_EQ(count(g, "aten::clone"), 0);
  EXPECT_EQ(count(g, "torch_plugin::fused"), 1);

  Graph h;
  Value* xc = h.add_input(at::kFloat, {3, 4}, {1, 3}, c10::Device(c10::kCPU));
  Node* cn = h.create_node(
      "aten::clone",
      "default",
      {xc},
      {Arg::tensor(0), Arg::constant(int64_t{0})},
      1);
  Graph::set_type(cn->outputs[0], at::kFloat, {3, 4}, {4, 1}, xc->device);
  h.set_outputs({cn->outputs[0]});
  run(h, "fusion");
  EXPECT_EQ(count(h, "aten::clone"), 1);
}

// The lone layout copy's kernel, run on the CPU (cuda_emulation.h): the
// heads' copy [L, B, 3, E] -> [3, L, B, E] (bf16, 16-byte vectors along E)
// and an fp32 one whose inner dim is not contiguous in the input (scalar
// path).
TEST(BroadcastMatmul, LoneLayoutCopyKernelCopiesExactly) {
  using namespace emulation;
  for (int d : {0, 1}) {
    const ScalarType dt = dt_of(d);
    check(
        std::string("heads_copy_") + dt_name(d),
        [&](Builder& b) {
          Value* x = b.input({3, 5, 2, 16}, dt, {16, 96, 48, 1});
          b.g.set_outputs({b.op(
              "aten::clone", "default", {x}, {int64_t{0}}, x->sizes, dt)});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].clone()};
        },
        0.0);
    check(
        std::string("transposed_copy_") + dt_name(d),
        [&](Builder& b) {
          Value* x = b.input({6, 5}, dt, {1, 6});
          b.g.set_outputs({b.op(
              "aten::clone", "default", {x}, {int64_t{0}}, x->sizes, dt)});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].clone()};
        },
        0.0);
  }
}

} // namespace
} // namespace torch_plugin::compiler
