// test_cuda_emulation_argmax.cpp: issue #27's reductions in the CUDA
// renderer's kernels, run on the CPU (cuda_emulation.h) against ATen: max.dim /
// min.dim values and int64 indices, argmax / argmin (a dim, dim=None), amin,
// prod, logsumexp; rows in warp and block mode, columns, a middle dim; inputs
// with index ties, all-equal rows, NaN (twice in a row), -inf and +inf.
#include "cuda_emulation.h"

namespace torch_plugin::compiler {
namespace {

using namespace testing;
using namespace emulation;

// Issue #27's reductions: small integers (index ties), all-equal, NaN and
// -inf rows, a +inf; in place on an input of any layout.
void ties(at::Tensor& t) {
  at::Tensor v = (t * 1.5).round();
  at::Tensor rows = v.reshape({-1, v.size(-1)});
  rows[0].fill_(2.0);
  if (rows.size(0) > 1) {
    rows[1][rows.size(1) / 3] = NAN;
    rows[1][rows.size(1) / 2] = NAN;
  }
  if (rows.size(0) > 2)
    rows[2].fill_(-INFINITY);
  if (rows.size(0) > 3)
    rows[3][1] = INFINITY;
  t.copy_(rows.view(v.sizes()));
}

// A (values, indices) reduction node (max.dim / min.dim).
std::pair<Value*, Value*> max_dim(
    Builder& b,
    const std::string& name,
    Value* x,
    int64_t dim,
    bool keepdim,
    std::vector<int64_t> sizes) {
  Node* n = b.g.create_node(
      name,
      "dim",
      {x},
      {Arg::tensor(0), Arg::constant(dim), Arg::constant(keepdim)},
      2);
  Graph::set_type(
      n->outputs[0], x->dtype, sizes, contiguous_strides(sizes), kCuda);
  Graph::set_type(
      n->outputs[1], ScalarType::Long, sizes, contiguous_strides(sizes), kCuda);
  return {n->outputs[0], n->outputs[1]};
}

Value* arg_reduce(
    Builder& b,
    const std::string& name,
    Value* x,
    AttrValue dim,
    bool keepdim,
    std::vector<int64_t> sizes) {
  return b.op(name, "default", {x}, {dim, keepdim}, sizes, ScalarType::Long);
}

TEST(CudaEmulation, ArgmaxMaxDimMinProdRows) {
  for (int64_t n : {int64_t{7}, int64_t{37}, int64_t{2051}}) {
    const std::string t = std::to_string(n);
    check(
        "maxdim_" + t,
        [&](Builder& b) {
          auto [v, i] = max_dim(b, "aten::max", b.input({5, n}), 1, false, {5});
          b.g.set_outputs({v, i});
        },
        [&](const std::vector<at::Tensor>& in) {
          auto [v, i] = at::max(in[0], 1);
          return std::vector<at::Tensor>{v, i};
        },
        0.0,
        3,
        0,
        ties);
    check(
        "mindim_keep_bf16_" + t,
        [&](Builder& b) {
          auto [v, i] = max_dim(
              b,
              "aten::min",
              b.input({5, n}, ScalarType::BFloat16),
              -1,
              true,
              {5, 1});
          b.g.set_outputs({v, i});
        },
        [&](const std::vector<at::Tensor>& in) {
          auto [v, i] = at::min(in[0], 1, true);
          return std::vector<at::Tensor>{v, i};
        },
        0.0,
        3,
        0,
        ties);
    for (bool mx : {true, false})
      check(
          (mx ? "argmax_" : "argmin_keep_") + t,
          [&](Builder& b) {
            b.g.set_outputs({arg_reduce(
                b,
                mx ? "aten::argmax" : "aten::argmin",
                b.input({5, n}),
                int64_t{mx ? 1 : -1},
                !mx,
                mx ? std::vector<int64_t>{5} : std::vector<int64_t>{5, 1})});
          },
          [&](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{
                mx ? in[0].argmax(1) : in[0].argmin(1, true)};
          },
          0.0,
          3,
          0,
          ties);
    check(
        "amin_" + t,
        [&](Builder& b) {
          b.g.set_outputs({b.op(
              "aten::amin",
              "default",
              {b.input({5, n})},
              {std::vector<int64_t>{1}, false},
              {5})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].amin({1})};
        },
        0.0,
        3,
        0,
        ties);
    check(
        "logsumexp_" + t,
        [&](Builder& b) {
          b.g.set_outputs({b.op(
              "aten::logsumexp",
              "default",
              {b.input({5, n})},
              {std::vector<int64_t>{1}, true},
              {5, 1})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{at::logsumexp(in[0], {1}, true)};
        },
        1e-5,
        3,
        0,
        ties);
    check(
        "prod_" + t,
        [&](Builder& b) {
          Value* x = b.input({5, n});
          b.g.set_outputs({b.op(
              "aten::prod",
              "dim_int",
              {x},
              {int64_t{1}, false, std::monostate{}},
              {5})});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].prod(1)};
        },
        1e-5,
        3,
        0,
        [](at::Tensor& t) { t.mul_(0.01).add_(1.0); });
  }
}

TEST(CudaEmulation, ArgmaxFlattenedAndColumns) {
  check(
      "argmax_none",
      [&](Builder& b) {
        b.g.set_outputs({arg_reduce(
            b, "aten::argmax", b.input({3, 37}), std::monostate{}, false, {})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].argmax()};
      },
      0.0,
      3,
      0,
      [](at::Tensor& t) { t.copy_((t * 1.5).round()); });
  check(
      "argmin_col0",
      [&](Builder& b) {
        b.g.set_outputs({arg_reduce(
            b, "aten::argmin", b.input({64, 33}), int64_t{0}, true, {1, 33})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].argmin(0, true)};
      },
      0.0,
      3,
      0,
      ties);
  check(
      "maxdim_middle",
      [&](Builder& b) {
        auto [v, i] =
            max_dim(b, "aten::max", b.input({6, 50, 9}), 1, false, {6, 9});
        b.g.set_outputs({v, i});
      },
      [&](const std::vector<at::Tensor>& in) {
        auto [v, i] = at::max(in[0], 1);
        return std::vector<at::Tensor>{v, i};
      },
      0.0,
      3,
      0,
      ties);
}

} // namespace
} // namespace torch_plugin::compiler
