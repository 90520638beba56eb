// test_cuda_emulation_scan.cpp: the CUDA renderer's scan kernels (cumsum,
// cumprod: rows of one block, columns of one thread; cuda_scan.cpp) and
// any/all reductions (bool, integer and float inputs, NaN, all-zero rows), run
// on the CPU (cuda_emulation.h) against ATen.
#include "cuda_emulation.h"

#include <limits>

namespace torch_plugin::compiler {
namespace {

using namespace testing;
using namespace emulation;

Value* scan(Builder& b, const std::string& name, Value* x, int64_t dim) {
  return b.op(
      name, "default", {x}, {dim, std::monostate{}}, x->sizes, x->dtype);
}

// Factors near 1 (long products stay finite).
void near_one(at::Tensor& t) {
  t.mul_(0.01).add_(1.0);
}

TEST(CudaEmulation, CumsumCumprodRowsAndColumns) {
  // Rows: one chunk (7), several warps (300), several chunks of a 512-thread
  // block (5000). fp32 sums of n terms in another order: tol ~ n * eps.
  for (int64_t n : {int64_t{7}, int64_t{300}, int64_t{5000}}) {
    const std::string t = std::to_string(n);
    for (int d = 0; d < 2; ++d) {
      const ScalarType dt = dt_of(d);
      check(
          std::string("cumsum_") + dt_name(d) + "_" + t,
          [&](Builder& b) {
            // An epilogue reading the scan and the input: cumsum(x) * 2 + x.
            Value* x = b.input({3, n}, dt);
            Value* c = scan(b, "aten::cumsum", x, -1);
            Value* y = b.op("aten::mul", "Tensor", {c}, {2.0}, {3, n}, dt);
            b.g.set_outputs(
                {b.op("aten::add", "Tensor", {y, x}, {1.0}, {3, n}, dt)});
          },
          [&](const std::vector<at::Tensor>& in) {
            const at::Tensor x = as_stored(in[0], d);
            return std::vector<at::Tensor>{as_stored(x.cumsum(1) * 2 + x, d)};
          },
          d == 0 ? 2e-6 * n : 2e-2,
          3);
    }
    check(
        "cumprod_" + t,
        [&](Builder& b) {
          b.g.set_outputs({scan(b, "aten::cumprod", b.input({3, n}), 1)});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{in[0].cumprod(1)};
        },
        2e-6 * n,
        3,
        0,
        near_one);
  }
  // A strided dim: one thread per column, in order.
  check(
      "cumsum_dim0",
      [&](Builder& b) {
        b.g.set_outputs({scan(b, "aten::cumsum", b.input({50, 33}), 0)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].cumsum(0)};
      },
      1e-4,
      3);
  check(
      "cumprod_middle",
      [&](Builder& b) {
        b.g.set_outputs({scan(b, "aten::cumprod", b.input({4, 20, 9}), 1)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].cumprod(1)};
      },
      1e-5,
      3,
      0,
      near_one);
}

// Integer scans (bool, int32, int64 into int64): exact, wrapping on overflow,
// rows and a strided dim.
TEST(CudaEmulation, IntegerCumsumCumprodExact) {
  auto full_range = [](at::Tensor& t) {
    if (t.scalar_type() == ScalarType::Bool)
      t.copy_(at::rand(t.sizes()) < 0.5);
    else
      // The harness hands the reference doubles: magnitudes below 2^52 stay
      // exact (int32: its whole range); sums and products still overflow.
      t.copy_(at::randint(
          t.scalar_type() == ScalarType::Int
              ? std::numeric_limits<int32_t>::min()
              : -(int64_t{1} << 52),
          t.scalar_type() == ScalarType::Int
              ? std::numeric_limits<int32_t>::max()
              : int64_t{1} << 52,
          t.sizes(),
          at::kLong));
  };
  for (ScalarType dt : {ScalarType::Bool, ScalarType::Int, ScalarType::Long})
    for (int64_t n : {int64_t{7}, int64_t{300}, int64_t{5000}})
      for (bool sum : {true, false})
        for (int64_t dim : {int64_t{0}, int64_t{1}}) {
          const std::string t = std::string(sum ? "cumsum_" : "cumprod_") +
              c10::toString(dt) + "_" + std::to_string(n) + "_dim" +
              std::to_string(dim);
          check(
              t,
              [&](Builder& b) {
                Value* x = b.input({3, n}, dt);
                b.g.set_outputs({b.op(
                    sum ? "aten::cumsum" : "aten::cumprod",
                    "default",
                    {x},
                    {dim, std::monostate{}},
                    {3, n},
                    ScalarType::Long)});
              },
              [&](const std::vector<at::Tensor>& in) {
                const at::Tensor x = in[0].to(dt); // back to the integers
                return std::vector<at::Tensor>{
                    sum ? x.cumsum(dim) : x.cumprod(dim)};
              },
              0.0,
              3,
              0,
              full_range);
        }
}

// Mostly zeros; row 0 all zero, row 1 all nonzero, a NaN alone in row 2
// (floats).
void sparse(at::Tensor& t) {
  at::Tensor z = at::rand(t.sizes()) < 0.9;
  t.masked_fill_(z, 0);
  at::Tensor rows = t.view({-1, t.size(-1)});
  rows[0].fill_(0);
  rows[1].fill_(1);
  if (at::isFloatingType(t.scalar_type())) {
    rows[2].fill_(-0.0);
    rows[2][3] = NAN;
  }
}

TEST(CudaEmulation, AnyAllEveryInputDtype) {
  for (ScalarType dt :
       {ScalarType::Bool,
        ScalarType::Long,
        ScalarType::Int,
        ScalarType::Float,
        ScalarType::BFloat16,
        ScalarType::Double}) {
    for (int64_t n : {int64_t{37}, int64_t{2051}}) {
      const std::string t =
          std::string(c10::toString(dt)) + "_" + std::to_string(n);
      for (bool any : {true, false})
        check(
            (any ? "any_" : "all_keep_") + t,
            [&](Builder& b) {
              Value* x = b.input({5, n}, dt);
              b.g.set_outputs({b.op(
                  any ? "aten::any" : "aten::all",
                  "dim",
                  {x},
                  {int64_t{1}, !any},
                  any ? std::vector<int64_t>{5} : std::vector<int64_t>{5, 1},
                  ScalarType::Bool)});
            },
            [&](const std::vector<at::Tensor>& in) {
              return std::vector<at::Tensor>{
                  any ? in[0].ne(0).any(1) : in[0].ne(0).all(1, true)};
            },
            0.0,
            3,
            0,
            sparse);
    }
  }
  // Over the outer dim (columns) and a whole tensor.
  check(
      "any_col0",
      [&](Builder& b) {
        b.g.set_outputs({b.op(
            "aten::any",
            "dims",
            {b.input({64, 33}, ScalarType::Long)},
            {std::vector<int64_t>{0}, false},
            {33},
            ScalarType::Bool)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].ne(0).any(0)};
      },
      0.0,
      3,
      0,
      sparse);
  check(
      "all_whole",
      [&](Builder& b) {
        b.g.set_outputs({b.op(
            "aten::all",
            "default",
            {b.input({3, 37})},
            {},
            {},
            ScalarType::Bool)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].ne(0).all()};
      },
      0.0,
      3,
      0,
      [](at::Tensor& t) { t.abs_().add_(0.5); });
}

} // namespace
} // namespace torch_plugin::compiler
