// test_leaf_guards.cpp: each leaf guard kind of csrc/capture/leaf_guards.h
// passes and fails when it should, never leaves a Python error set, and
// explains its mismatches. Objects come from the embedded interpreter (see
// ../main.cpp) and tensors from libtorch.
#include "capture/leaf_guards.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DefaultDtype.h>
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>
#include <pybind11/embed.h>
#include <torch/csrc/autograd/python_variable.h>

#include <string>
#include <vector>

namespace py = pybind11;
using namespace torch_plugin::capture;

namespace {

py::object eval(const char* expr) {
  py::dict scope;
  scope["torch"] = py::module_::import("torch");
  scope["collections"] = py::module_::import("collections");
  py::exec(
      R"(
class BadEq:
    def __eq__(self, other):
        raise ValueError("no comparing")
    __hash__ = object.__hash__

class BadLen:
    def __len__(self):
        raise RuntimeError("no len")
)",
      scope);
  return py::eval(expr, scope);
}

py::object wrap(const at::Tensor& tensor) {
  return py::reinterpret_steal<py::object>(THPVariable_Wrap(tensor));
}

// Checks `guard` on `value` and that no Python error is left behind.
bool passes(const LeafGuard& guard, const py::object& value) {
  bool result = guard.check(value.ptr());
  EXPECT_FALSE(PyErr_Occurred()) << guard.description();
  PyErr_Clear();
  return result;
}

} // namespace

TEST(TypeMatch, ExactTypeOnly) {
  TypeMatch guard(eval("int"), "L['x'] type");
  EXPECT_TRUE(passes(guard, eval("3")));
  EXPECT_FALSE(passes(guard, eval("3.0")));
  EXPECT_FALSE(passes(guard, eval("True"))); // bool is a subclass of int
  EXPECT_EQ(guard.mismatch(eval("3.0").ptr()), "expected type int, got float");
  EXPECT_EQ(
      TypeMatch(eval("torch.Tensor"), "t").mismatch(eval("1").ptr()),
      "expected type torch.Tensor, got int");
  EXPECT_THROW(TypeMatch(eval("3"), "not a type"), py::type_error);
}

TEST(IdMatch, IdentityAndStrongReference) {
  py::object obj = eval("[1, 2]");
  Py_ssize_t refs = Py_REFCNT(obj.ptr());
  IdMatch guard(obj, "L['x'] id");
  EXPECT_EQ(Py_REFCNT(obj.ptr()), refs + 1);
  EXPECT_TRUE(passes(guard, obj));
  EXPECT_FALSE(passes(guard, eval("[1, 2]"))); // equal, not the same object
  EXPECT_NE(
      guard.mismatch(eval("[3]").ptr()).find("got [3]"), std::string::npos);
}

TEST(EqualsMatch, TypeAndValue) {
  EqualsMatch guard(eval("3"), "L['n'] == 3");
  EXPECT_TRUE(passes(guard, eval("3")));
  EXPECT_FALSE(passes(guard, eval("4")));
  EXPECT_FALSE(passes(guard, eval("3.0"))); // equal, but another type
  EXPECT_EQ(guard.mismatch(eval("4").ptr()), "expected 3, got 4");
  EXPECT_EQ(guard.mismatch(eval("3.0").ptr()), "expected type int, got float");
  EqualsMatch strings(eval("'relu'"), "L['act']");
  EXPECT_TRUE(passes(strings, eval("'re' + 'lu'")));
}

TEST(EqualsMatch, RaisingEqFailsWithoutError) {
  py::tuple two = eval("(BadEq(), BadEq())"); // one class, two instances
  EqualsMatch guard(two[0], "L['o']");
  EXPECT_TRUE(passes(guard, two[0])); // identity short-cuts __eq__
  EXPECT_FALSE(passes(guard, two[1]));
  std::string why = guard.mismatch(two[1].ptr());
  EXPECT_NE(why.find("(== raised ValueError: no comparing)"), std::string::npos)
      << why;
}

TEST(LenMatch, LengthOrFailure) {
  LenMatch guard(2, "len(L['xs'])");
  EXPECT_TRUE(passes(guard, eval("[1, 2]")));
  EXPECT_TRUE(passes(guard, eval("(1, 2)")));
  EXPECT_TRUE(passes(guard, eval("{'a': 1, 'b': 2}")));
  EXPECT_FALSE(passes(guard, eval("[1]")));
  EXPECT_FALSE(passes(guard, eval("3"))); // no len()
  EXPECT_FALSE(passes(guard, eval("BadLen()")));
  EXPECT_EQ(guard.mismatch(eval("[1]").ptr()), "expected len 2, got 1");
  EXPECT_NE(
      guard.mismatch(eval("BadLen()").ptr()).find("RuntimeError: no len"),
      std::string::npos);
}

TEST(DictKeysMatch, KeysInOrder) {
  py::list keys = eval("['a', 'b']");
  std::vector<py::object> key_list;
  for (py::handle k : keys) {
    key_list.push_back(py::reinterpret_borrow<py::object>(k));
  }
  DictKeysMatch guard(key_list, "L['d'] keys");
  EXPECT_TRUE(passes(guard, eval("{'a': 1, 'b': 2}")));
  EXPECT_FALSE(passes(guard, eval("{'b': 2, 'a': 1}")));
  EXPECT_FALSE(passes(guard, eval("{'a': 1}")));
  EXPECT_FALSE(passes(guard, eval("{'a': 1, 'b': 2, 'c': 3}")));
  EXPECT_FALSE(passes(guard, eval("['a', 'b']")));
  EXPECT_TRUE(passes(guard, eval("collections.OrderedDict(a=1, b=2)")));
  EXPECT_FALSE(passes(
      guard,
      eval("(lambda d: (d.move_to_end('a'), d)[1])"
           "(collections.OrderedDict(a=1, b=2))")));
  EXPECT_EQ(
      guard.mismatch(eval("{'b': 2}").ptr()),
      "expected keys ['a', 'b'], got ['b']");
}

TEST(TensorMatch, PassesOnSameMetadata) {
  TensorMatch guard(wrap(at::randn({4, 8})), "L['x'] tensor", true);
  EXPECT_TRUE(passes(guard, wrap(at::zeros({4, 8}))));
  EXPECT_TRUE(passes(guard, eval("torch.ones(4, 8)")));
}

TEST(TensorMatch, FailsAndExplains) {
  TensorMatch guard(wrap(at::randn({4, 8})), "L['x'] tensor", true);
  auto reason = [&](const py::object& v) {
    EXPECT_FALSE(passes(guard, v));
    return guard.description() + ": " + guard.mismatch(v.ptr());
  };
  EXPECT_EQ(
      reason(wrap(at::randn({16, 8}))),
      "L['x'] tensor: expected size [4, 8], got [16, 8]");
  EXPECT_EQ(
      reason(wrap(at::randn({4, 8}, at::kDouble))),
      "L['x'] tensor: expected dtype torch.float32, got torch.float64");
  EXPECT_EQ(
      reason(eval("torch.randn(4, 8, requires_grad=True)")),
      "L['x'] tensor: expected requires_grad False, got True");
  EXPECT_EQ(
      reason(wrap(at::randn({8, 4}).t())),
      "L['x'] tensor: expected stride [8, 1], got [1, 4]");
  EXPECT_EQ(
      reason(
          eval("torch.nn.Parameter(torch.randn(4, 8), requires_grad=False)")),
      "L['x'] tensor: expected type torch.Tensor, got torch.nn.parameter.Parameter");
  EXPECT_EQ(
      reason(eval("[4, 8]")),
      "L['x'] tensor: expected type torch.Tensor, got list");
  std::string meta = reason(eval("torch.empty(4, 8, device='meta')"));
  EXPECT_NE(meta.find("expected dispatch keys"), std::string::npos) << meta;
}

TEST(TensorMatch, StridesOptional) {
  TensorMatch guard(wrap(at::randn({4, 8})), "L['x'] tensor", false);
  EXPECT_TRUE(passes(guard, wrap(at::randn({8, 4}).t())));
  EXPECT_FALSE(passes(guard, wrap(at::randn({4, 9}))));
}

TEST(TensorMatch, DispatchKeysFollowTlsModifiers) {
  TensorMatch guard(wrap(at::randn({2})), "L['x'] tensor", true);
  {
    c10::InferenceMode inference;
    // Inference mode changes the thread's dispatch key modifiers.
    EXPECT_FALSE(passes(guard, wrap(at::randn({2}))));
  }
  EXPECT_TRUE(passes(guard, wrap(at::randn({2}))));
}

TEST(TensorMatch, RejectsNonTensorExamples) {
  EXPECT_THROW(TensorMatch(eval("3"), "L['x']", true), py::type_error);
}

TEST(GlobalStateMatch, GradMode) {
  GlobalStateMatch guard("global state");
  EXPECT_FALSE(guard.needs_value());
  EXPECT_TRUE(guard.check(nullptr));
  {
    at::AutoGradMode no_grad(false);
    EXPECT_FALSE(guard.check(nullptr));
    EXPECT_EQ(
        guard.mismatch(nullptr), "expected grad mode enabled, got disabled");
  }
  EXPECT_TRUE(guard.check(nullptr));
}

TEST(MessageText, ReprIsCutAndSafe) {
  EXPECT_EQ(repr_for_message(eval("'x' * 100").ptr(), 10), "'xxxxxxxxx...");
  py::object bad = eval("type('R', (), {'__repr__': lambda self: 1 / 0})()");
  EXPECT_EQ(repr_for_message(bad.ptr()), "<R object (repr failed)>");
  EXPECT_FALSE(PyErr_Occurred());
}

// --- issue 4: the whole global state, explained in source terms

TEST(GlobalStateMatch, EveryFieldIsCompared) {
  GlobalState now = GlobalState::current();
  EXPECT_EQ(now, GlobalState::current());
  for (int i = 0; i < GlobalState::kNumFields; ++i) {
    GlobalState changed = now;
    changed.fields[i] ^= 1;
    EXPECT_EQ(now.first_difference(changed), i) << GlobalState::kNames[i];
  }
}

TEST(GlobalStateMatch, FlagsAndDtypesInSourceTerms) {
  GlobalStateMatch guard("global state");
  at::Context& ctx = at::globalContext();
  bool tf32 = ctx.allowTF32CuBLAS();
  ctx.setAllowTF32CuBLAS(!tf32);
  EXPECT_FALSE(guard.check(nullptr));
  EXPECT_EQ(
      guard.explain_failure(nullptr, "<frame>"),
      std::string("torch.backends.cuda.matmul.allow_tf32 == ") +
          (tf32 ? "True failed: got False" : "False failed: got True"));
  ctx.setAllowTF32CuBLAS(tf32);
  EXPECT_TRUE(guard.check(nullptr));

  c10::ScalarType saved = c10::get_default_dtype_as_scalartype();
  c10::set_default_dtype(caffe2::TypeMeta::Make<double>());
  EXPECT_FALSE(guard.check(nullptr));
  EXPECT_EQ(
      guard.explain_failure(nullptr, "<frame>"),
      "torch.get_default_dtype() == torch.float32 failed: got torch.float64");
  c10::set_default_dtype(c10::scalarTypeToTypeMeta(saved));
  EXPECT_TRUE(guard.check(nullptr));

  at::autocast::set_autocast_enabled(at::kCPU, true);
  EXPECT_FALSE(guard.check(nullptr));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  {
    GlobalStateMatch::Memo memo; // the state is read once while it lives
    EXPECT_TRUE(guard.check(nullptr));
    at::AutoGradMode no_grad(false);
    EXPECT_TRUE(guard.check(nullptr)); // memoized
  }
  {
    at::AutoGradMode no_grad(false);
    EXPECT_FALSE(guard.check(nullptr));
  }
}

TEST(TensorMatch, ExplainsTheFirstFailingPropertyInSourceTerms) {
  TensorMatch guard(wrap(at::zeros({8, 4})), "L['x'] tensor", true);
  EXPECT_EQ(
      guard.explain_failure(wrap(at::zeros({16, 4})).ptr(), "L['x']"),
      "L['x'].size()[0] == 8 failed: got 16 (expected size [8, 4], got [16, 4])");
  EXPECT_EQ(
      guard
          .explain_failure(wrap(at::zeros({8, 4}, at::kDouble)).ptr(), "L['x']")
          .rfind("L['x'].dtype == torch.float32 failed: got torch.float64", 0),
      0u);
  EXPECT_EQ(
      guard.explain_failure(wrap(at::zeros({4, 8}).t()).ptr(), "L['x']")
          .rfind("L['x'].stride()[0] == 4 failed: got 1", 0),
      0u);
}
