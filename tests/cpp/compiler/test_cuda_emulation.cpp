// test_cuda_emulation.cpp: the CUDA renderer's kernels (pointwise, softmax,
// layer norm, row and column reductions) run on the CPU against ATen; the
// emulation itself: cuda_emulation.h.
#include "cuda_emulation.h"

namespace torch_plugin::compiler {
namespace {

using namespace testing;
using namespace emulation;

TEST(CudaEmulation, PointwiseContiguousBroadcastAndStrided) {
  for (int d = 0; d < 3; ++d)
    for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{1001}}) {
      const ScalarType dt = dt_of(d);
      check(
          std::string("pw_") + dt_name(d) + "_" + std::to_string(n),
          [&](Builder& b) {
            Value* x = b.input({n, 24}, dt);
            Value* y = b.input({24}, dt);
            Value* s = b.input({}, dt);
            Value* xt = b.input({n, 24}, dt, {1, n}); // transposed
            Value* h = b.binary("aten::add", x, y, {n, 24}, dt);
            Value* g = b.gelu(b.binary("aten::mul", h, s, {n, 24}, dt), "tanh");
            b.g.set_outputs({b.binary("aten::sub", g, xt, {n, 24}, dt), h});
          },
          [&](const std::vector<at::Tensor>& in) {
            at::Tensor h = in[0] + in[1];
            at::Tensor g = at::gelu(h * in[2], "tanh");
            return std::vector<at::Tensor>{
                as_stored(g - in[3], d), as_stored(h, d)};
          },
          tol_of(dt));
    }
}

TEST(CudaEmulation, PointwiseVectorizedOddTail) {
  for (int d = 0; d < 3; ++d) {
    const ScalarType dt = dt_of(d);
    const int64_t n = 8 * 256 * 3 + 5; // grid-stride, then a scalar tail
    check(
        std::string("pwv_") + dt_name(d),
        [&](Builder& b) {
          Value* x = b.input({n}, dt);
          Value* y = b.input({n}, dt);
          b.g.set_outputs(
              {b.unary("aten::sigmoid", b.binary("aten::mul", x, y, {n}, dt))});
        },
        [&](const std::vector<at::Tensor>& in) {
          return std::vector<at::Tensor>{
              as_stored(at::sigmoid(in[0] * in[1]), d)};
        },
        tol_of(dt),
        2);
  }
  check(
      "pwv_misaligned",
      [&](Builder& b) {
        Value* x = b.input({4096});
        b.g.set_outputs({b.unary("aten::exp", b.unary("aten::neg", x))});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::exp(-in[0])};
      },
      1e-5,
      2,
      1);
}

TEST(CudaEmulation, SoftmaxLogSoftmaxRows) {
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{4096}, int64_t{5003}})
      for (int d = 0; d < 3; ++d) {
        const ScalarType dt = dt_of(d);
        const bool log = std::string(op) == "aten::_log_softmax";
        check(
            std::string(log ? "lsm_" : "sm_") + dt_name(d) + "_" +
                std::to_string(n),
            [&](Builder& b) {
              Value* x = b.input({3, n}, dt);
              Value* s = b.op("aten::mul", "Scalar", {x}, {2.0}, x->sizes, dt);
              b.g.set_outputs({b.softmax(op, s, 1)});
            },
            [&](const std::vector<at::Tensor>& in) {
              at::Tensor s = in[0] * 2.0;
              return std::vector<at::Tensor>{as_stored(
                  log ? at::log_softmax(s, 1) : at::softmax(s, 1), d)};
            },
            tol_of(dt));
      }
}

TEST(CudaEmulation, MaskedAndLongSoftmaxRows) {
  // Rows too long for registers (one pass of max and sum, online), and rows
  // with -inf entries (log(relu(y)): about half the entries), both paths.
  for (const char* op : {"aten::_softmax", "aten::_log_softmax"})
    for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{30011}})
      for (int d = 0; d < 2; ++d) {
        const ScalarType dt = dt_of(d);
        const bool log = std::string(op) == "aten::_log_softmax";
        check(
            std::string(log ? "mlsm_" : "msm_") + dt_name(d) + "_" +
                std::to_string(n),
            [&](Builder& b) {
              Value* x = b.input({2, n}, dt);
              Value* y = b.input({2, n}, dt);
              Value* mask = b.unary("aten::log", b.unary("aten::relu", y));
              Value* h = b.binary("aten::add", x, mask, {2, n}, dt);
              b.g.set_outputs({b.softmax(op, h, 1)});
            },
            [&](const std::vector<at::Tensor>& in) {
              at::Tensor h = in[0] + at::log(at::relu(in[1]));
              return std::vector<at::Tensor>{as_stored(
                  log ? at::log_softmax(h, 1) : at::softmax(h, 1), d)};
            },
            tol_of(dt));
      }
}

TEST(CudaEmulation, LayerNormResidualAndStatistics) {
  for (int64_t c : {int64_t{48}, int64_t{1001}, int64_t{4096}})
    for (int d = 0; d < 2; ++d) {
      const ScalarType dt = dt_of(d);
      check(
          std::string("ln_") + dt_name(d) + "_" + std::to_string(c),
          [&](Builder& b) {
            Value* x = b.input({2, 5, c}, dt);
            Value* r = b.input({2, 5, c}, dt);
            Value* w = b.input({c}, dt);
            Value* bias = b.input({c}, dt);
            Value* h = b.binary("aten::add", x, r, {2, 5, c}, dt);
            Node* ln = b.layer_norm(h, w, bias, 1e-5);
            b.g.set_outputs(
                {b.gelu(ln->outputs[0], "none"),
                 h,
                 ln->outputs[1],
                 ln->outputs[2]});
          },
          [&](const std::vector<at::Tensor>& in) {
            at::Tensor h = in[0] + in[1];
            if (d)
              h = as_stored(
                  h, d); // the stored residual feeds ATen's layer norm
            auto [y, mean, rstd] =
                at::native_layer_norm(h, {c}, in[2], in[3], 1e-5);
            return std::vector<at::Tensor>{
                as_stored(at::gelu(y), d), as_stored(h, d), mean, rstd};
          },
          d == 0 ? 1e-5 : 3e-2);
    }
}

TEST(CudaEmulation, RmsNormAndReductionsOverLastDims) {
  for (int64_t n : {int64_t{7}, int64_t{768}, int64_t{2051}}) {
    check(
        "rms_" + std::to_string(n),
        [&](Builder& b) {
          Value* x = b.input({4, n});
          Value* w = b.input({n});
          Value* p =
              b.op("aten::pow", "Tensor_Scalar", {x}, {int64_t{2}}, x->sizes);
          Value* m = b.op(
              "aten::mean",
              "dim",
              {p},
              {std::vector<int64_t>{1}, true, std::monostate{}},
              {4, 1});
          Value* e =
              b.op("aten::add", "Scalar", {m}, {1e-6, int64_t{1}}, {4, 1});
          Value* rs = b.unary("aten::rsqrt", e);
          b.g.set_outputs({b.binary(
              "aten::mul",
              b.binary("aten::mul", x, rs, x->sizes),
              w,
              x->sizes)});
        },
        [&](const std::vector<at::Tensor>& in) {
          at::Tensor r = at::rsqrt(in[0].pow(2).mean({1}, true) + 1e-6);
          return std::vector<at::Tensor>{in[0] * r * in[1]};
        },
        1e-5);
    using Red = std::function<Value*(Builder&, Value*)>;
    using Ref = std::function<at::Tensor(const at::Tensor&)>;
    const std::vector<std::pair<Red, Ref>> reductions = {
        {[&](Builder& b, Value* x) {
           return b.reduce(
               "aten::sum",
               "dim_IntList",
               b.binary("aten::mul", x, x, {5, n}),
               {1},
               false,
               {5});
         },
         [](const at::Tensor& x) {
           return (x * x).sum({1});
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::mean", "dim", x, {-1}, true, {5, 1});
         },
         [](const at::Tensor& x) {
           return x.mean({1}, true);
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::amax", "default", x, {1}, false, {5});
         },
         [](const at::Tensor& x) {
           return x.amax({1});
         }},
        {[&](Builder& b, Value* x) {
           return b.reduce("aten::var", "correction", x, {1}, false, {5});
         },
         [](const at::Tensor& x) {
           return x.var({1});
         }},
    };
    int i = 0;
    for (const auto& [red, ref] : reductions)
      check(
          "red_" + std::to_string(n) + "_" + std::to_string(i++),
          [&](Builder& b) {
            b.g.set_outputs({red(b, b.input({5, n}))});
          },
          [&](const std::vector<at::Tensor>& in) {
            return std::vector<at::Tensor>{ref(in[0])};
          },
          1e-5);
  }
  check(
      "sm_misaligned",
      [&](Builder& b) {
        Value* x = b.input({3, 768}, ScalarType::BFloat16);
        b.g.set_outputs({b.softmax("aten::_softmax", x, 1)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(at::softmax(in[0], 1), 1)};
      },
      2e-2,
      3,
      3);
  // mean over H, W of a contiguous NCHW tensor (rows of H*W), bf16.
  check(
      "mean_hw",
      [&](Builder& b) {
        Value* x = b.input({2, 3, 5, 7}, ScalarType::BFloat16);
        b.g.set_outputs(
            {b.reduce("aten::mean", "dim", x, {2, 3}, true, {2, 3, 1, 1})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(in[0].mean({2, 3}, true), 1)};
      },
      1e-2);
}

TEST(CudaEmulation, ColumnReductions) {
  check(
      "col_sum0",
      [&](Builder& b) {
        Value* x = b.input({64, 33});
        Value* s = b.reduce("aten::sum", "dim_IntList", x, {0}, false, {33});
        b.g.set_outputs({b.unary("aten::relu", s)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::relu(in[0].sum({0}))};
      },
      1e-5);
  check(
      "col_mean_hw_channels_last",
      [&](Builder& b) {
        Value* x = b.input({2, 8, 5, 7}, ScalarType::BFloat16, {280, 1, 56, 8});
        b.g.set_outputs(
            {b.reduce("aten::mean", "dim", x, {2, 3}, true, {2, 8, 1, 1})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{as_stored(in[0].mean({2, 3}, true), 1)};
      },
      1e-2);
  check(
      "col_softmax0",
      [&](Builder& b) {
        Value* x = b.input({37, 20});
        b.g.set_outputs({b.softmax("aten::_log_softmax", x, 0)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::log_softmax(in[0], 0)};
      },
      1e-5);
  // Column split (cuda_reduction.cpp): channels innermost, 74 kept indices
  // (the last block's lanes past them clamped), 2 warps per column; a
  // prologue whose value is stored too.
  check(
      "col_split_silu_mean_channels_last",
      [&](Builder& b) {
        const std::vector<int64_t> sizes = {2, 37, 6, 5};
        const std::vector<int64_t> nhwc = {37 * 30, 1, 5 * 37, 37};
        Value* x = b.input(sizes, ScalarType::Float, nhwc);
        Value* sc = b.input({1, 37, 1, 1});
        Value* y = b.unary("aten::silu", b.binary("aten::mul", x, sc, sizes));
        Graph::set_type(y, y->dtype, sizes, nhwc, kCuda);
        Value* m =
            b.reduce("aten::mean", "dim", y, {2, 3}, true, {2, 37, 1, 1});
        b.g.set_outputs({y, m});
      },
      [&](const std::vector<at::Tensor>& in) {
        at::Tensor y = at::silu(in[0] * in[1]);
        return std::vector<at::Tensor>{y, y.mean({2, 3}, true)};
      },
      1e-5);
  // Softmax's online max and sum across the split (4 warps per column).
  check(
      "col_split_log_softmax0",
      [&](Builder& b) {
        Value* x = b.input({37, 40});
        b.g.set_outputs({b.softmax("aten::_log_softmax", x, 0)});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{at::log_softmax(in[0], 0)};
      },
      1e-5);
  check(
      "col_var_middle",
      [&](Builder& b) {
        Value* x = b.input({6, 50, 9});
        b.g.set_outputs(
            {b.reduce("aten::var", "correction", x, {1}, true, {6, 1, 9})});
      },
      [&](const std::vector<at::Tensor>& in) {
        return std::vector<at::Tensor>{in[0].var({1}, true, true)};
      },
      1e-5);
}

} // namespace
} // namespace torch_plugin::compiler

namespace torch_plugin::compiler {
namespace {

// Typed loads and stores (bool, uint8, int8, int32, int64, float64 with
// bf16), vector path and scalar path (misaligned), and typed ops: a
// comparison of two integer dtypes, logical_and with a bool input, where
// promoting to float64 and to bfloat16, int64 multiplication that wraps,
// float64 -> int8 conversion, uint8 addition that wraps. Exact.
TEST(CudaEmulation, TypedLoadsStoresAndOps) {
  using ST = ScalarType;
  for (int64_t n : {int64_t{1001}, int64_t{8 * 256 * 3 + 5}})
    for (int64_t mis : {int64_t{0}, int64_t{1}}) {
      check(
          "typed_" + std::to_string(n) + "_" + std::to_string(mis),
          [&](Builder& b) {
            Value* a = b.input({n}, ST::Long);
            Value* i = b.input({n}, ST::Int);
            Value* e = b.input({n}, ST::Bool);
            Value* d = b.input({n}, ST::Double);
            Value* c = b.input({n}, ST::BFloat16);
            Value* u = b.input({n}, ST::Byte);
            Value* t1 = b.op("aten::ge", "Tensor", {a, i}, {}, {n}, ST::Bool);
            Value* t2 = b.op(
                "aten::logical_and", "default", {t1, e}, {}, {n}, ST::Bool);
            Value* t3 =
                b.op("aten::where", "self", {t2, d, a}, {}, {n}, ST::Double);
            Value* la =
                b.op("aten::where", "self", {t2, a, i}, {}, {n}, ST::Long);
            Value* t4 = b.op(
                "aten::mul", "Tensor", {la}, {int64_t{1000003}}, {n}, ST::Long);
            Value* t5 =
                b.op("aten::where", "self", {t1, c, u}, {}, {n}, ST::BFloat16);
            const AttrValue none = std::monostate{};
            Value* t6 = b.op(
                "aten::_to_copy",
                "default",
                {t3},
                {int64_t{1}, none, none, none, false, none},
                {n},
                ST::Char);
            Value* ub =
                b.op("aten::where", "self", {t1, u, u}, {}, {n}, ST::Byte);
            Value* t7 = b.op(
                "aten::add", "Tensor", {ub, u}, {int64_t{1}}, {n}, ST::Byte);
            b.g.set_outputs({t2, t3, t4, t5, t6, t7});
          },
          [&](const std::vector<at::Tensor>& in) {
            const at::Tensor a = in[0].to(at::kLong), i = in[1].to(at::kInt),
                             e = in[2].to(at::kBool), d = in[3],
                             c = in[4].to(at::kBFloat16),
                             u = in[5].to(at::kByte);
            const at::Tensor t1 = at::ge(a, i);
            const at::Tensor t2 = at::logical_and(t1, e);
            return std::vector<at::Tensor>{
                t2,
                at::where(t2, d, a),
                at::mul(at::where(t2, a, i), 1000003),
                at::where(t1, c, u),
                at::where(t2, d, a).to(at::kChar),
                at::add(u, u)};
          },
          0.0,
          3,
          mis);
    }
}

} // namespace
} // namespace torch_plugin::compiler
