// test_shape_guards.cpp: csrc/capture/shape_guards.h: symbols read sizes and
// strides through the tree's accessors, the programs follow Python's integer
// semantics, malformed programs are rejected when added, and a failing
// relation is named with the values that broke it.
#include "capture/shape_guards.h"

#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <string>
#include <vector>

#include "capture/guards.h"

namespace py = pybind11;
using namespace torch_plugin::capture;

namespace {

class ShapeGuardsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    torch_ = py::module_::import("torch");
  }

  py::object randn(const std::vector<int64_t>& sizes) {
    py::tuple shape(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      shape[i] = py::int_(sizes[i]);
    }
    return torch_.attr("randn")(shape);
  }

  FrameValues frame(const std::vector<py::object>& args) {
    args_.clear();
    for (const py::object& a : args) {
      args_.push_back(a.ptr());
    }
    FrameValues values;
    values.args = args_.data();
    values.nargs = static_cast<Py_ssize_t>(args_.size());
    values.globals = globals_.ptr();
    values.builtins = globals_.ptr();
    return values;
  }

  py::module_ torch_;
  py::dict globals_;
  std::vector<PyObject*> args_;
};

ShapeInstr op(ShapeOp o, int64_t arg = 0) {
  return {o, arg};
}

TEST_F(ShapeGuardsTest, ReadsSizesAndStridesAndChecksRelations) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  GuardManager& y = root.local(1, "L['y']");
  int s0 = root.shape_guards().add_symbol(
      x, SymbolKind::kSize, 0, "L['x'].size()[0]");
  int s1 = root.shape_guards().add_symbol(
      y, SymbolKind::kSize, 0, "L['y'].size()[0]");
  int st = root.shape_guards().add_symbol(
      x, SymbolKind::kStride, 0, "L['x'].stride()[0]");
  // 2 <= s0
  root.shape_guards().add_check(
      {op(ShapeOp::kConst, 2), op(ShapeOp::kSymbol, s0), op(ShapeOp::kLe)},
      "2 <= L['x'].size()[0]");
  // s1 == 2 * s0
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s1),
       op(ShapeOp::kConst, 2),
       op(ShapeOp::kSymbol, s0),
       op(ShapeOp::kMul),
       op(ShapeOp::kEq)},
      "Eq(L['y'].size()[0], 2*L['x'].size()[0])");
  // stride(0) == 5 (x is [n, 5] contiguous)
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, st), op(ShapeOp::kConst, 5), op(ShapeOp::kEq)},
      "Eq(L['x'].stride()[0], 5)");

  EXPECT_TRUE(root.check(frame({randn({3, 5}), randn({6})})));
  EXPECT_TRUE(root.check(frame({randn({7, 5}), randn({14})})));
  EXPECT_FALSE(root.check(frame({randn({3, 5}), randn({7})})));
  EXPECT_EQ(
      root.last_failure().value_or(""),
      "Eq(L['y'].size()[0], 2*L['x'].size()[0])");
  std::optional<std::string> reason =
      root.failure_reason(frame({randn({1, 5}), randn({2})}));
  ASSERT_TRUE(reason.has_value());
  EXPECT_EQ(*reason, "2 <= L['x'].size()[0] failed: got L['x'].size()[0] = 1");
  // A transposed x has stride 1 in dim 0.
  py::object xt = randn({5, 4}).attr("t")();
  EXPECT_FALSE(root.check(frame({xt, randn({8})})));
  EXPECT_FALSE(PyErr_Occurred());
}

TEST_F(ShapeGuardsTest, NotATensorOrTooFewDimensionsFails) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  int s = root.shape_guards().add_symbol(
      x, SymbolKind::kSize, 1, "L['x'].size()[1]");
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s), op(ShapeOp::kConst, 2), op(ShapeOp::kGe)},
      "L['x'].size()[1] >= 2");
  EXPECT_TRUE(root.check(frame({randn({1, 3})})));
  EXPECT_FALSE(root.check(frame({randn({4})})));
  EXPECT_FALSE(root.check(frame({py::int_(3)})));
  EXPECT_FALSE(root.check(frame({})));
  EXPECT_FALSE(PyErr_Occurred());
  std::optional<std::string> reason = root.failure_reason(frame({randn({4})}));
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("1 dimensions"), std::string::npos) << *reason;
}

TEST_F(ShapeGuardsTest, FloorDivAndModFollowPython) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  int s = root.shape_guards().add_symbol(
      x, SymbolKind::kSize, 0, "L['x'].size()[0]");
  // (-s // 4) == -2 holds for s in 5..8 (Python rounds toward -inf).
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s),
       op(ShapeOp::kNeg),
       op(ShapeOp::kConst, 4),
       op(ShapeOp::kFloorDiv),
       op(ShapeOp::kConst, -2),
       op(ShapeOp::kEq)},
      "floordiv");
  // (-s % 3) == 1 holds for s = 5 and 8 (the remainder has the divisor's sign).
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s),
       op(ShapeOp::kNeg),
       op(ShapeOp::kConst, 3),
       op(ShapeOp::kMod),
       op(ShapeOp::kConst, 1),
       op(ShapeOp::kEq)},
      "mod");
  EXPECT_TRUE(root.check(frame({randn({5})})));
  EXPECT_TRUE(root.check(frame({randn({8})})));
  EXPECT_FALSE(root.check(frame({randn({6})}))); // -6 % 3 == 0
  EXPECT_FALSE(root.check(frame({randn({4})}))); // -4 // 4 == -1
}

TEST_F(ShapeGuardsTest, IntSymbolsReadExactInts) {
  RootGuardManager root;
  GuardManager& n = root.local(0, "L['n']");
  int s = root.shape_guards().add_symbol(n, SymbolKind::kInt, 0, "L['n']");
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s), op(ShapeOp::kConst, 2), op(ShapeOp::kGe)},
      "2 <= L['n']");
  EXPECT_TRUE(root.check(frame({py::int_(7)})));
  EXPECT_FALSE(root.check(frame({py::int_(1)})));
  EXPECT_FALSE(root.check(frame({py::bool_(true)})));
  EXPECT_FALSE(root.check(frame({py::float_(3.0)})));
  EXPECT_FALSE(root.check(frame({py::eval("10 ** 30")})));
  EXPECT_FALSE(PyErr_Occurred());
  EXPECT_THROW(symbol_kind_from_name("value"), py::value_error);
}

TEST_F(ShapeGuardsTest, TrueDivisionAndFloatsFollowPython) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  int s = root.shape_guards().add_symbol(
      x, SymbolKind::kSize, 0, "L['x'].size()[0]");
  // 10 * s / (s + 10) >= 5.0 (an Inductor-style heuristic): holds for s >= 10.
  ShapeInstr half{ShapeOp::kConstFloat};
  half.farg = 5.0;
  root.shape_guards().add_check(
      {op(ShapeOp::kConst, 10),
       op(ShapeOp::kSymbol, s),
       op(ShapeOp::kMul),
       op(ShapeOp::kSymbol, s),
       op(ShapeOp::kConst, 10),
       op(ShapeOp::kAdd),
       op(ShapeOp::kTrueDiv),
       half,
       op(ShapeOp::kGe)},
      "truediv");
  // ceil(s / 4) == floor((s + 3) / 4)
  root.shape_guards().add_check(
      {op(ShapeOp::kSymbol, s),
       op(ShapeOp::kConst, 4),
       op(ShapeOp::kTrueDiv),
       op(ShapeOp::kCeil),
       op(ShapeOp::kSymbol, s),
       op(ShapeOp::kConst, 3),
       op(ShapeOp::kAdd),
       op(ShapeOp::kToFloat),
       op(ShapeOp::kConst, 4),
       op(ShapeOp::kTrueDiv),
       op(ShapeOp::kFloor),
       op(ShapeOp::kEq)},
      "ceil/floor");
  EXPECT_TRUE(root.check(frame({randn({10})})));
  EXPECT_TRUE(root.check(frame({randn({13})})));
  EXPECT_FALSE(root.check(frame({randn({9})})));
  EXPECT_EQ(root.last_failure().value_or(""), "truediv");
  EXPECT_FALSE(root.check(frame({randn({0})}))); // 0 / 10 < 5
  EXPECT_EQ(shape_op_from_name("truediv"), ShapeOp::kTrueDiv);
}

TEST_F(ShapeGuardsTest, DivisionByZeroFailsTheCheck) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  int s = root.shape_guards().add_symbol(
      x, SymbolKind::kSize, 0, "L['x'].size()[0]");
  root.shape_guards().add_check(
      {op(ShapeOp::kConst, 8),
       op(ShapeOp::kSymbol, s),
       op(ShapeOp::kFloorDiv),
       op(ShapeOp::kConst, 0),
       op(ShapeOp::kGe)},
      "8 // s >= 0");
  EXPECT_TRUE(root.check(frame({randn({2})})));
  EXPECT_FALSE(root.check(frame({randn({0})})));
  EXPECT_FALSE(PyErr_Occurred());
}

TEST_F(ShapeGuardsTest, MalformedProgramsAreRejected) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  root.shape_guards().add_symbol(x, SymbolKind::kSize, 0, "L['x'].size()[0]");
  EXPECT_THROW(
      root.shape_guards().add_check({op(ShapeOp::kAdd)}, "pops nothing"),
      py::value_error);
  EXPECT_THROW(
      root.shape_guards().add_check(
          {op(ShapeOp::kConst, 1), op(ShapeOp::kConst, 2)}, "two values"),
      py::value_error);
  EXPECT_THROW(
      root.shape_guards().add_check({op(ShapeOp::kSymbol, 3)}, "no symbol"),
      py::value_error);
  EXPECT_THROW(shape_op_from_name("xor"), py::value_error);
  EXPECT_EQ(shape_op_from_name("floordiv"), ShapeOp::kFloorDiv);
  EXPECT_TRUE(root.shape_guards().empty());
}

TEST_F(ShapeGuardsTest, TensorMatchSkipsDynamicSizesAndStrides) {
  TensorMatch match(
      randn({4, 5}), "L['x'] tensor", true, {true, false}, {true, false});
  EXPECT_TRUE(match.check(randn({9, 5}).ptr()));
  EXPECT_FALSE(match.check(randn({9, 6}).ptr()));
  EXPECT_FALSE(match.check(randn({9, 5, 1}).ptr()));
  EXPECT_THROW(
      TensorMatch(randn({4}), "too many flags", true, {true, true}),
      py::value_error);
}

} // namespace
