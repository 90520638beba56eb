// test_guards.cpp: the guard tree of csrc/capture/guards.h: accessors read the
// right values (argument slots, globals then builtins, closure cells,
// attributes, items), nodes are created once, checks run leaves then children,
// errors fail checks without escaping, and failure_reason names the source.
#include "capture/guards.h"

#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>
#include <pybind11/embed.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace py = pybind11;
using namespace torch_plugin::capture;

namespace {

// Python objects for the tests, made once per test.
class GuardTreeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scope_["torch"] = py::module_::import("torch");
    py::exec(
        R"(
class Layer:
    def __init__(self):
        self.weight = torch.zeros(4, 8)
        self.training = True
    @property
    def broken(self):
        raise RuntimeError("property raised")

class Model:
    def __init__(self):
        self.layers = [Layer(), Layer()]
        self.config = {"act": "relu", "depth": 2}

def make_closure():
    k = 5
    empty = None
    def inner():
        return k, empty
    del empty
    return inner

model = Model()
closure = make_closure().__closure__
g = {"W": 3, "model": model}
b = {"len": len, "W": "builtin W", "B": 7}
)",
        scope_);
  }

  py::object get(const char* expr) {
    return py::eval(expr, scope_);
  }

  // A frame whose argument slots are `args`, with the globals/builtins above.
  FrameValues frame(
      const std::vector<py::object>& args,
      bool with_closure = true) {
    args_.clear();
    for (const py::object& a : args) {
      args_.push_back(a.ptr());
    }
    FrameValues values;
    values.args = args_.data();
    values.nargs = static_cast<Py_ssize_t>(args_.size());
    values.globals = get("g").ptr();
    values.builtins = get("b").ptr();
    values.closure = with_closure ? get("closure").ptr() : nullptr;
    return values;
  }

  // check() and failure_reason() agree, and neither leaves an error set.
  std::optional<std::string> reason(
      const RootGuardManager& root,
      const FrameValues& values) {
    bool pass = root.check(values);
    EXPECT_FALSE(PyErr_Occurred());
    std::optional<std::string> why = root.failure_reason(values);
    EXPECT_FALSE(PyErr_Occurred());
    PyErr_Clear();
    EXPECT_EQ(pass, !why.has_value()) << why.value_or("");
    return why;
  }

  py::dict scope_;
  std::vector<PyObject*> args_;
};

} // namespace

TEST_F(GuardTreeTest, EmptyTreePasses) {
  RootGuardManager root;
  EXPECT_EQ(reason(root, frame({})), std::nullopt);
  EXPECT_EQ(root.num_checks(), 0u);
}

TEST_F(GuardTreeTest, LocalSlots) {
  RootGuardManager root;
  root.local(1, "L['y']")
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("2"), "L['y'] == 2"));
  EXPECT_EQ(reason(root, frame({get("1"), get("2")})), std::nullopt);
  EXPECT_EQ(
      reason(root, frame({get("1"), get("3")})), "L['y'] == 2 failed: got 3");
  EXPECT_EQ(
      reason(root, frame({get("1")})), "L['y']: argument slot 1 is not set");
}

TEST_F(GuardTreeTest, NodesAreCreatedOnce) {
  RootGuardManager root;
  EXPECT_EQ(&root.local(0, "L['x']"), &root.local(0, "L['x']"));
  EXPECT_NE(&root.local(0, "L['x']"), &root.local(1, "L['y']"));
  GuardManager& x = root.local(0, "L['x']");
  EXPECT_EQ(&x.attr("a"), &x.attr("a"));
  EXPECT_EQ(&x.item(get("0")), &x.item(get("0")));
  EXPECT_NE(&x.item(get("0")), &x.item(get("False"))); // 0 == False, other type
  EXPECT_EQ(&root.global("W"), &root.global("W"));
  EXPECT_EQ(&root.closure(0, "C['k']"), &root.closure(0, "C['k']"));
  EXPECT_EQ(x.attr("a").item(get("'k'")).source(), "L['x'].a['k']");
}

TEST_F(GuardTreeTest, AttributesItemsAndTensors) {
  RootGuardManager root;
  GuardManager& model = root.local(0, "L['self']");
  model.add_leaf_guard(
      std::make_unique<TypeMatch>(get("Model"), "L['self'] type"));
  GuardManager& layers = model.attr("layers");
  layers.add_leaf_guard(std::make_unique<LenMatch>(2, "len(L['self'].layers)"));
  GuardManager& weight = layers.item(get("1")).attr("weight");
  weight.add_leaf_guard(std::make_unique<TensorMatch>(
      get("model.layers[1].weight"),
      "L['self'].layers[1].weight tensor",
      true));
  layers.item(get("-1"))
      .attr("training")
      .add_leaf_guard(std::make_unique<IdMatch>(get("True"), "training"));
  GuardManager& act = model.attr("config").item(get("'act'"));
  act.add_leaf_guard(
      std::make_unique<EqualsMatch>(get("'relu'"), "L['self'].config['act']"));
  EXPECT_EQ(root.num_checks(), 5u);
  EXPECT_EQ(weight.source(), "L['self'].layers[1].weight");

  EXPECT_EQ(reason(root, frame({get("model")})), std::nullopt);
  py::exec("model.layers[1].weight = torch.zeros(16, 8)", scope_);
  EXPECT_EQ(
      reason(root, frame({get("model")})),
      "L['self'].layers[1].weight.size()[0] == 4 failed: got 16 (expected size [4, 8], got [16, 8])");
  py::exec(
      "model.layers[1].weight = torch.zeros(4, 8); model.layers.pop()", scope_);
  EXPECT_EQ(
      reason(root, frame({get("model")})),
      "len(L['self'].layers) == 2 failed: got 1");
  EXPECT_EQ(
      reason(root, frame({get("1")})),
      "type(L['self']) is Model failed: got int");
}

TEST_F(GuardTreeTest, ReadErrorsFailTheCheck) {
  RootGuardManager root;
  GuardManager& layer = root.local(0, "L['layer']");
  layer.attr("broken").add_leaf_guard(
      std::make_unique<EqualsMatch>(get("1"), "broken"));
  EXPECT_EQ(
      reason(root, frame({get("model.layers[0]")})),
      "L['layer'].broken: reading attribute 'broken' raised RuntimeError: property raised");

  RootGuardManager missing;
  missing.local(0, "L['layer']")
      .attr("nope")
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("1"), "nope"));
  std::optional<std::string> why =
      reason(missing, frame({get("model.layers[0]")}));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(
      why->find(
          "L['layer'].nope: reading attribute 'nope' raised AttributeError"),
      std::string::npos)
      << *why;

  RootGuardManager items;
  items.local(0, "L['xs']")
      .item(get("5"))
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("1"), "xs[5]"));
  items.local(1, "L['d']")
      .item(get("'missing'"))
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("1"), "d['missing']"));
  EXPECT_EQ(
      reason(items, frame({get("[1, 2]"), get("{}")})),
      "L['xs'][5]: item 5 is not set");
  EXPECT_EQ(
      reason(items, frame({get("[0, 0, 0, 0, 0, 1]"), get("{}")})),
      "L['d']['missing']: item 'missing' is not set");
}

TEST_F(GuardTreeTest, ItemAccessOnOtherContainers) {
  RootGuardManager root;
  root.local(0, "L['t']")
      .item(get("-1"))
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("3"), "t[-1]"));
  EXPECT_EQ(reason(root, frame({get("(1, 2, 3)")})), std::nullopt);
  EXPECT_EQ(reason(root, frame({get("[1, 2, 3]")})), std::nullopt);
  EXPECT_EQ(
      reason(root, frame({get("range(4)")})), std::nullopt); // __getitem__
  EXPECT_EQ(
      reason(root, frame({get("[1, 2, 4]")})), "L['t'][-1] == 3 failed: got 4");
  EXPECT_EQ(reason(root, frame({get("[]")})), "L['t'][-1]: item -1 is not set");
}

TEST_F(GuardTreeTest, GlobalsThenBuiltins) {
  RootGuardManager root;
  root.global("W").add_leaf_guard(
      std::make_unique<EqualsMatch>(get("3"), "G['W']"));
  root.global("B").add_leaf_guard(
      std::make_unique<EqualsMatch>(get("7"), "G['B']"));
  root.global("len").add_leaf_guard(
      std::make_unique<IdMatch>(get("len"), "G['len']"));
  EXPECT_EQ(reason(root, frame({})), std::nullopt);
  py::exec("g['W'] = 4", scope_);
  EXPECT_EQ(reason(root, frame({})), "G['W'] == 3 failed: got 4");
  py::exec("g['W'] = 3; del b['B']", scope_);
  EXPECT_EQ(reason(root, frame({})), "G['B']: global 'B' is not set");
}

TEST_F(GuardTreeTest, ClosureCells) {
  RootGuardManager root;
  root.closure(1, "C['k']")
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("5"), "L['k']"));
  EXPECT_EQ(reason(root, frame({})), std::nullopt);
  EXPECT_EQ(
      reason(root, frame({}, /*with_closure=*/false)),
      "C['k']: closure cell 1 is not set");
  RootGuardManager empty;
  empty.closure(0, "C['empty']")
      .add_leaf_guard(std::make_unique<TypeMatch>(get("int"), "L['empty']"));
  EXPECT_EQ(reason(empty, frame({})), "C['empty']: closure cell 0 is not set");
}

TEST_F(GuardTreeTest, FixedObjects) {
  RootGuardManager root;
  py::object g = get("g");
  GuardManager& node = root.object(g, "M['g']");
  EXPECT_EQ(&node, &root.object(g, "M['g']"));
  EXPECT_NE(&node, &root.object(get("b"), "M['b']"));
  node.item(get("'W'"))
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("3"), "M['g']['W']"));
  EXPECT_EQ(reason(root, frame({})), std::nullopt);
  py::exec("g['W'] = 5", scope_);
  EXPECT_EQ(reason(root, frame({})), "M['g']['W'] == 3 failed: got 5");
}

TEST_F(GuardTreeTest, LeavesRunBeforeChildrenInOrder) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  x.attr("real").add_leaf_guard(
      std::make_unique<EqualsMatch>(get("1"), "child"));
  x.add_leaf_guard(std::make_unique<TypeMatch>(get("int"), "first leaf"));
  x.add_leaf_guard(std::make_unique<EqualsMatch>(get("1"), "second leaf"));
  EXPECT_EQ(
      reason(root, frame({get("'s'")})), "type(L['x']) is int failed: got str");
  EXPECT_EQ(reason(root, frame({get("2")})), "L['x'] == 1 failed: got 2");
  EXPECT_EQ(reason(root, frame({get("1")})), std::nullopt);
}

TEST_F(GuardTreeTest, GlobalStateOnTheRoot) {
  RootGuardManager root;
  root.add_global_state_match();
  EXPECT_EQ(root.num_checks(), 1u);
  EXPECT_EQ(reason(root, frame({})), std::nullopt);
  {
    at::AutoGradMode no_grad(false);
    EXPECT_EQ(
        reason(root, frame({})),
        "torch.is_grad_enabled() == True failed: got False");
  }
}

TEST_F(GuardTreeTest, RootHasNoValue) {
  RootGuardManager root;
  EXPECT_THROW(
      root.add_leaf_guard(std::make_unique<TypeMatch>(get("int"), "on root")),
      py::type_error);
  EXPECT_THROW(root.attr("x"), py::type_error);
  EXPECT_THROW(root.item(get("0")), py::type_error);
  EXPECT_THROW(root.local(-1, "L['x']"), py::value_error);
}

// --- issue 4: nn.Module attribute reads, most-failed-first order, failure
// record

class ModuleAccessTest : public GuardTreeTest {
 protected:
  void SetUp() override {
    GuardTreeTest::SetUp();
    py::exec(
        R"(
import torch.nn as nn
reads = []

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.register_buffer("shift", torch.zeros(2))
        self.scale = 3

class Shadowed(Net):
    @property
    def fc(self):
        return "property wins"

class CustomGetattr(Net):
    def __getattr__(self, name):
        reads.append(name)
        return super().__getattr__(name)

class Counting(nn.Module):
    pass

net = Net()
shadowed = Shadowed.__new__(Shadowed)
nn.Module.__init__(shadowed)
shadowed._modules["fc"] = nn.Linear(2, 2)
custom = CustomGetattr()
)",
        scope_);
  }

  // getattr through the accessor: the node for `name` under argument slot 0.
  py::object read(const py::object& obj, const std::string& name) {
    RootGuardManager root;
    GuardManager& node = root.local(0, "L['m']").attr(name);
    py::object seen;
    struct Capture : LeafGuard {
      py::object* out;
      explicit Capture(py::object* o) : LeafGuard("capture"), out(o) {}
      bool check(PyObject* v) const override {
        *out = py::reinterpret_borrow<py::object>(v);
        return true;
      }
      std::string mismatch(PyObject*) const override {
        return "";
      }
    };
    node.add_leaf_guard(std::make_unique<Capture>(&seen));
    EXPECT_TRUE(root.check(frame({obj})));
    EXPECT_FALSE(PyErr_Occurred());
    return seen;
  }
};

TEST_F(ModuleAccessTest, ReadsParametersBuffersModulesAndDictLikeGetattr) {
  py::object net = get("net");
  EXPECT_TRUE(read(net, "fc").is(get("net.fc")));
  EXPECT_TRUE(read(get("net.fc"), "weight").is(get("net.fc.weight")));
  EXPECT_TRUE(read(net, "shift").is(get("net.shift")));
  EXPECT_TRUE(read(net, "scale").is(get("net.scale")));
  EXPECT_TRUE(read(net, "training").is(get("True")));
  // A class attribute (here a property) wins over _modules, as in getattr.
  EXPECT_EQ(read(get("shadowed"), "fc").cast<std::string>(), "property wins");
  // A class with its own __getattr__ goes through it.
  size_t before = get("reads").cast<py::list>().size();
  EXPECT_TRUE(read(get("custom"), "fc").is(get("custom.fc")));
  EXPECT_EQ(get("reads").cast<py::list>().size(), before + 2); // ours, eval
}

TEST_F(ModuleAccessTest, MissingAttributeFailsTheCheckWithoutAnError) {
  RootGuardManager root;
  root.local(0, "L['m']")
      .attr("nope")
      .add_leaf_guard(
          std::make_unique<TypeMatch>(get("int"), "type(L['m'].nope) is int"));
  EXPECT_FALSE(root.check(frame({get("net")})));
  EXPECT_FALSE(PyErr_Occurred());
  EXPECT_EQ(*root.last_failure(), "L['m'].nope: could not be read");
  std::optional<std::string> why = root.failure_reason(frame({get("net")}));
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("has no attribute 'nope'"), std::string::npos) << *why;
}

TEST_F(GuardTreeTest, MostFailedChecksMoveFirst) {
  RootGuardManager root;
  GuardManager& x = root.local(0, "L['x']");
  x.add_leaf_guard(std::make_unique<TypeMatch>(get("int"), "type"));
  x.add_leaf_guard(std::make_unique<EqualsMatch>(get("1"), "equals 1"));
  root.local(1, "L['y']")
      .add_leaf_guard(std::make_unique<EqualsMatch>(get("2"), "equals 2"));
  EXPECT_EQ(x.leaf_order(), (std::vector<std::string>{"type", "equals 1"}));
  EXPECT_FALSE(root.check(frame({get("5"), get("2")})));
  EXPECT_EQ(*root.last_failure(), "equals 1");
  EXPECT_EQ(x.leaf_order(), (std::vector<std::string>{"equals 1", "type"}));
  EXPECT_FALSE(root.check(frame({get("1"), get("3")})));
  EXPECT_FALSE(root.check(frame({get("1"), get("3")})));
  // L['y'] failed twice, L['x'] once: L['y'] is checked first now.
  EXPECT_EQ(root.child_order(), (std::vector<std::string>{"L['y']", "L['x']"}));
  EXPECT_TRUE(root.check(frame({get("1"), get("2")})));
  EXPECT_EQ(root.last_failure(), std::nullopt);
  EXPECT_EQ(root.failures(), 3u);
}

TEST_F(ModuleAccessTest, ContainerItemsReadLikeTheirGetitem) {
  py::exec(
      R"(
mlist = nn.ModuleList([nn.ReLU(), nn.Tanh(), nn.Sigmoid()])
seq = nn.Sequential(nn.ReLU(), nn.Tanh())
mdict = nn.ModuleDict({"a": nn.ReLU(), "b": nn.Tanh()})
odd = nn.ModuleList([nn.ReLU(), nn.Tanh()])
odd._modules = {"1": odd._modules["1"], "0": odd._modules["0"]}  # str keys, not order

class MyList(nn.ModuleList):
    def __getitem__(self, i):
        return "custom"

mine = MyList([nn.ReLU()])
)",
      scope_);
  auto item = [&](const char* obj, const char* key) {
    RootGuardManager root;
    GuardManager& node = root.local(0, "L['m']").item(get(key));
    py::object seen;
    struct Capture : LeafGuard {
      py::object* out;
      explicit Capture(py::object* o) : LeafGuard("capture"), out(o) {}
      bool check(PyObject* v) const override {
        *out = py::reinterpret_borrow<py::object>(v);
        return true;
      }
      std::string mismatch(PyObject*) const override {
        return "";
      }
    };
    node.add_leaf_guard(std::make_unique<Capture>(&seen));
    bool ok = root.check(frame({get(obj)}));
    EXPECT_FALSE(PyErr_Occurred());
    return ok ? seen : py::object();
  };
  for (const char* expr :
       {"mlist[1]",
        "mlist[-1]",
        "seq[0]",
        "seq[-1]",
        "mdict['b']",
        "odd[0]",
        "odd[1]",
        "mine[0]"}) {
    std::string text(expr);
    size_t open = text.find('[');
    std::string obj = text.substr(0, open);
    std::string key = text.substr(open + 1, text.size() - open - 2);
    py::object got = item(obj.c_str(), key.c_str());
    ASSERT_TRUE(got) << expr;
    EXPECT_TRUE(got.equal(get(expr))) << expr;
  }
  EXPECT_FALSE(item("mlist", "3")); // out of range: IndexError fails the check
  EXPECT_FALSE(item("mdict", "'zz'"));
}
