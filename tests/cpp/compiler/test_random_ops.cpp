// test_random_ops.cpp: random ops generated in kernels (codegen/random_ops.h).
// The same graph (uniform and normal in one kernel, fp32 / bf16 / fp16) is
// rendered by the C++ renderer (run here) and the CUDA renderer (run by the
// emulation of cuda_emulation.h, a few blocks of a grid-stride loop, vector
// and scalar paths); both must give, for the same (seed, offset), the numbers
// of ATen's own Philox engine (at::Philox4_32 with subsequence = the element's
// index and offset = offset / 4 + the op's stream): uniform values exactly,
// normal values to float rounding of Box-Muller.
#include "cuda_emulation.h"

#include "compiler/codegen/cpp/cpp_renderer.h"
#include "compiler/codegen/random_ops.h"
#include "runtime/cpu/kernel_cache.h"

#include <ATen/core/PhiloxRNGEngine.h>

#include <cmath>

namespace torch_plugin::compiler {
namespace {

using namespace testing;
using namespace emulation;

constexpr uint64_t kSeed = 0x123456789abcdef1ull;

// u = rand(sizes), z = randn(sizes), s = u + z on `device`: one group.
void random_graph(
    Graph& g,
    c10::Device device,
    std::vector<int64_t> sizes,
    ScalarType dt) {
  auto make = [&](const char* op) {
    Node* n = g.create_node(op, "default", {}, {Arg::constant(sizes)}, 1);
    Graph::set_type(
        n->outputs[0], dt, sizes, contiguous_strides(sizes), device);
    return n->outputs[0];
  };
  Value* u = make("aten::rand");
  Value* z = make("aten::randn");
  Node* add = g.create_node(
      "aten::add",
      "Tensor",
      {u, z},
      {Arg::tensor(0), Arg::tensor(1), Arg::constant(int64_t{1})},
      1);
  Graph::set_type(
      add->outputs[0], dt, sizes, contiguous_strides(sizes), device);
  g.set_outputs({u, z, add->outputs[0]});
  PassOptions o;
  kFusion.run(g, o);
}

// ATen's Philox: (uniform, normal) of element i for streams 0 and 1.
std::pair<at::Tensor, at::Tensor> reference(
    int64_t n,
    uint64_t offset,
    ScalarType dt) {
  const int bits = dt == ScalarType::Float ? 24
      : dt == ScalarType::Half             ? 11
                                           : 8;
  at::Tensor u = at::empty({n}, at::kDouble), z = at::empty({n}, at::kDouble);
  for (int64_t i = 0; i < n; ++i) {
    at::Philox4_32 e0(kSeed, i, offset / 4);
    const uint32_t w = e0();
    u[i] = std::ldexp(static_cast<double>(w & ((1u << bits) - 1)), -bits);
    at::Philox4_32 e1(kSeed, i, offset / 4 + 1);
    const float u1 = std::ldexp(static_cast<float>(e1() & 0xFFFFFFu), -24);
    const float u2 = std::ldexp(static_cast<float>(e1() & 0xFFFFFFu), -24);
    z[i] = std::sqrt(-2.0f * std::log(1.0f - u2)) *
        std::cos(6.2831853071795864769f * u1);
  }
  return {u, z};
}

void expect_random_outputs(
    const std::string& tag,
    const std::vector<at::Tensor>& outs, // u, z, u + z as stored
    uint64_t offset,
    ScalarType dt,
    int d) {
  const int64_t n = outs[0].numel();
  auto [u, z] = reference(n, offset, dt);
  const at::Tensor gu = outs[0].to(at::kDouble).flatten();
  const at::Tensor gz = outs[1].to(at::kDouble).flatten();
  EXPECT_TRUE(at::equal(gu, u))
      << tag << ": uniform values differ from ATen's Philox";
  EXPECT_TRUE(gu.lt(1).all().item<bool>() && gu.ge(0).all().item<bool>())
      << tag;
  const double tol = dt == ScalarType::Float ? 2e-6 : 1e-2;
  EXPECT_LE((gz - as_stored(z, d)).abs().max().item<double>(), tol * 6) << tag;
  const at::Tensor s = outs[2].to(at::kDouble).flatten();
  EXPECT_LE(
      (s - as_stored(u + z, d)).abs().max().item<double>(),
      dt == ScalarType::Float ? 1e-5 : 6e-2)
      << tag;
}

TEST(RandomOps, CppAndCudaKernelsMatchATenPhilox) {
  if (!have_compiler())
    GTEST_SKIP() << "no host C++ compiler";
  for (int d = 0; d < 3; ++d) {
    const ScalarType dt = dt_of(d);
    for (const std::vector<int64_t>& sizes :
         {std::vector<int64_t>{3, 37, 5}, std::vector<int64_t>{2048 + 3}}) {
      {
        const uint64_t offset = uint64_t{4} * 1000003 * d; // 0 too
        const std::string tag = std::string("rand_") + dt_name(d) + "_" +
            std::to_string(sizes.size()) + "_" + std::to_string(offset);
        const uint64_t rng[2] = {kSeed, offset};
        // C++ renderer.
        Graph cg;
        random_graph(cg, c10::Device(c10::kCPU), sizes, dt);
        ASSERT_EQ(cg.num_nodes(), 1u) << cg.str();
        const Node* cgroup = cg.nodes()[0];
        EXPECT_EQ(count_random_ops(*cgroup->body), 2);
        auto ck = render_cpp(*cgroup);
        ASSERT_TRUE(ck.has_value());
        auto fn = runtime::cpu::load_kernels({ck->source})[0];
        std::vector<at::Tensor> couts;
        std::vector<void*> cargs;
        for (const Value* v : cgroup->outputs) {
          couts.push_back(make(v, true));
          cargs.push_back(couts.back().data_ptr());
        }
        cargs.push_back(const_cast<uint64_t*>(rng));
        fn(cargs.data());
        expect_random_outputs(tag + "_cpp", couts, offset, dt, d);
        // CUDA renderer, emulated (3 blocks at most: grid-stride loops).
        Graph g;
        random_graph(g, kCuda, sizes, dt);
        ASSERT_EQ(g.num_nodes(), 1u) << g.str();
        const Node* group = g.nodes()[0];
        auto k = render_cuda(*group);
        ASSERT_TRUE(k.has_value());
        Launch launch = build(*k, *group, tag);
        ASSERT_NE(launch, nullptr);
        std::vector<at::Tensor> outs;
        std::vector<void*> args;
        for (const Value* v : group->outputs) {
          outs.push_back(make(v, true));
          args.push_back(outs.back().data_ptr());
        }
        const uint64_t* no_pointer = nullptr;
        args.push_back(const_cast<uint64_t*>(&rng[0]));
        args.push_back(const_cast<uint64_t*>(&rng[1]));
        args.push_back(&no_pointer);
        args.push_back(&no_pointer);
        launch(
            args.data(),
            static_cast<unsigned>(std::min<int64_t>(k->grid, 3)),
            static_cast<unsigned>(k->block));
        expect_random_outputs(tag + "_cuda", outs, offset, dt, d);
        for (size_t i = 0; i < outs.size(); ++i)
          EXPECT_TRUE(at::equal(outs[i], couts[i]))
              << tag << ": C++ and CUDA kernels differ in output " << i;
        // As inside a CUDA graph capture (at::PhiloxCudaState captured_):
        // the seed and the graph's base offset are read through pointers,
        // the value arguments are (unused seed, offset within the graph).
        const uint64_t intragraph = offset >= 4 ? 4 : 0;
        const uint64_t graph_seed = kSeed, graph_offset = offset - intragraph;
        const uint64_t captured[2] = {kSeed + 1, intragraph};
        const uint64_t* seed_ptr = &graph_seed;
        const uint64_t* offset_ptr = &graph_offset;
        args.resize(outs.size());
        for (size_t i = 0; i < outs.size(); ++i) {
          outs[i].zero_();
          args[i] = outs[i].data_ptr();
        }
        args.push_back(const_cast<uint64_t*>(&captured[0]));
        args.push_back(const_cast<uint64_t*>(&captured[1]));
        args.push_back(&seed_ptr);
        args.push_back(&offset_ptr);
        launch(
            args.data(),
            static_cast<unsigned>(std::min<int64_t>(k->grid, 3)),
            static_cast<unsigned>(k->block));
        expect_random_outputs(tag + "_cuda_captured", outs, offset, dt, d);
      }
    }
  }
}

// Random ops never join a reduction group, never compute at a broadcast
// consumer's sizes, and form a kernel even alone.
TEST(RandomOps, FusionKeepsRandomGroupsApart) {
  Builder b;
  Node* r = b.g.create_node(
      "aten::rand",
      "default",
      {},
      {Arg::constant(std::vector<int64_t>{1, 8})},
      1);
  Graph::set_type(r->outputs[0], ScalarType::Float, {1, 8}, {8, 1}, kCuda);
  Value* x = b.input({4, 8});
  Value* m = b.binary("aten::mul", x, r->outputs[0], {4, 8});
  Value* s = b.reduce("aten::sum", "dim_IntList", m, {1}, false, {4});
  Node* lone = b.g.create_node(
      "aten::randn",
      "default",
      {},
      {Arg::constant(std::vector<int64_t>{5})},
      1);
  Graph::set_type(lone->outputs[0], ScalarType::Float, {5}, {1}, kCuda);
  b.g.set_outputs({s, lone->outputs[0]});
  PassOptions o;
  kFusion.run(b.g, o);
  int groups_with_random = 0;
  for (const Node* n : b.g.nodes()) {
    if (n->op != "torch_plugin::fused")
      continue;
    const int streams = count_random_ops(*n->body);
    groups_with_random += streams > 0;
    if (streams > 0) {
      EXPECT_FALSE(n->attrs.count("reduce_dims")) << b.g.str();
      for (const auto& m : n->body->node_list())
        EXPECT_TRUE(
            !random_op(*m) || m->outputs[0]->sizes == n->outputs[0]->sizes)
            << "a random op computed at other sizes:\n"
            << b.g.str();
    }
  }
  EXPECT_EQ(groups_with_random, 2) << b.g.str();
  // fallback_random: no random op in a kernel.
  Builder f;
  Node* fr = f.g.create_node(
      "aten::rand", "default", {}, {Arg::constant(std::vector<int64_t>{5})}, 1);
  Graph::set_type(fr->outputs[0], ScalarType::Float, {5}, {1}, kCuda);
  f.g.set_outputs({f.unary("aten::neg", f.unary("aten::neg", fr->outputs[0]))});
  o.fallback_random = true;
  kFusion.run(f.g, o);
  for (const Node* n : f.g.nodes())
    EXPECT_TRUE(
        n->op != "torch_plugin::fused" || count_random_ops(*n->body) == 0)
        << f.g.str();
  EXPECT_TRUE(random_fallback_reason(*fr, true).has_value());
}

} // namespace
} // namespace torch_plugin::compiler
