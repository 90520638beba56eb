// shape_guards.cpp: reading symbols from the frame and running the check
// programs (see shape_guards.h).
#include "capture/shape_guards.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <unordered_map>
#include <utility>

#include "capture/guards.h"

namespace py = pybind11;

namespace torch_plugin::capture {
namespace {

// Stack effect of each op: values popped, values pushed is always 1.
int arity(ShapeOp op) {
  switch (op) {
    case ShapeOp::kConst:
    case ShapeOp::kSymbol:
      return 0;
    case ShapeOp::kNeg:
    case ShapeOp::kNot:
      return 1;
    default:
      return 2;
  }
}

// Python's floor division and modulo (CPython's long_div / long_mod).
bool floordiv(int64_t a, int64_t b, int64_t* out) {
  if (b == 0 || (a == INT64_MIN && b == -1)) {
    return false;
  }
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) {
    --q;
  }
  *out = q;
  return true;
}

bool pymod(int64_t a, int64_t b, int64_t* out) {
  if (b == 0) {
    return false;
  }
  int64_t r = b == -1 ? 0 : a % b;
  if (r != 0 && ((r < 0) != (b < 0))) {
    r += b;
  }
  *out = r;
  return true;
}

bool ipow(int64_t base, int64_t exp, int64_t* out) {
  if (exp < 0 || exp > 62) {
    return false;
  }
  int64_t r = 1;
  for (int64_t i = 0; i < exp; ++i) {
    r *= base;
  }
  *out = r;
  return true;
}

} // namespace

ShapeOp shape_op_from_name(const std::string& name) {
  static const std::unordered_map<std::string, ShapeOp> kOps = {
      {"const", ShapeOp::kConst}, {"symbol", ShapeOp::kSymbol},
      {"add", ShapeOp::kAdd},     {"mul", ShapeOp::kMul},
      {"neg", ShapeOp::kNeg},     {"floordiv", ShapeOp::kFloorDiv},
      {"mod", ShapeOp::kMod},     {"pow", ShapeOp::kPow},
      {"min", ShapeOp::kMin},     {"max", ShapeOp::kMax},
      {"eq", ShapeOp::kEq},       {"ne", ShapeOp::kNe},
      {"lt", ShapeOp::kLt},       {"le", ShapeOp::kLe},
      {"gt", ShapeOp::kGt},       {"ge", ShapeOp::kGe},
      {"and", ShapeOp::kAnd},     {"or", ShapeOp::kOr},
      {"not", ShapeOp::kNot},
  };
  auto it = kOps.find(name);
  if (it == kOps.end()) {
    throw py::value_error("unknown shape-guard op '" + name + "'");
  }
  return it->second;
}

SymbolKind symbol_kind_from_name(const std::string& name) {
  if (name == "size") {
    return SymbolKind::kSize;
  }
  if (name == "stride") {
    return SymbolKind::kStride;
  }
  if (name == "int") {
    return SymbolKind::kInt;
  }
  throw py::value_error(
      "unknown shape symbol kind '" + name +
      "' (expected 'size', 'stride' or 'int')");
}

int ShapeGuards::add_symbol(
    const GuardManager& node,
    SymbolKind kind,
    int64_t dim,
    std::string name) {
  if (dim < 0) {
    throw py::value_error(
        "add_shape_symbol: dim must be >= 0, got " + std::to_string(dim));
  }
  symbols_.push_back({&node, kind, dim, std::move(name)});
  return static_cast<int>(symbols_.size()) - 1;
}

void ShapeGuards::add_check(
    std::vector<ShapeInstr> program,
    std::string description) {
  int depth = 0;
  std::vector<int> used;
  for (const ShapeInstr& instr : program) {
    int pops = arity(instr.op);
    if (depth < pops) {
      throw py::value_error(
          "add_shape_check: the program for '" + description +
          "' pops an empty stack");
    }
    if (instr.op == ShapeOp::kSymbol) {
      if (instr.arg < 0 || instr.arg >= static_cast<int64_t>(symbols_.size())) {
        throw py::value_error(
            "add_shape_check: '" + description + "' reads symbol " +
            std::to_string(instr.arg) + ", but " +
            std::to_string(symbols_.size()) + " were added");
      }
      used.push_back(static_cast<int>(instr.arg));
    }
    depth = depth - pops + 1;
    if (depth > kMaxDepth) {
      throw py::value_error(
          "add_shape_check: '" + description + "' needs a stack deeper than " +
          std::to_string(kMaxDepth));
    }
  }
  if (depth != 1) {
    throw py::value_error(
        "add_shape_check: the program for '" + description + "' leaves " +
        std::to_string(depth) + " values, expected 1");
  }
  checks_.push_back({std::move(program), std::move(description), used});
}

bool ShapeGuards::read_symbols(
    const FrameValues& frame,
    int64_t* values,
    std::string* error) const {
  const GuardManager* last_node = nullptr;
  PyObject* last_value = nullptr; // NEW reference
  bool ok = true;
  for (size_t i = 0; i < symbols_.size() && ok; ++i) {
    const Symbol& sym = symbols_[i];
    if (sym.node != last_node) {
      Py_XDECREF(last_value);
      last_node = sym.node;
      last_value = sym.node->read_value(frame);
    }
    if (sym.kind == SymbolKind::kInt) {
      if (last_value == nullptr || !PyLong_CheckExact(last_value)) {
        if (error != nullptr) {
          *error = sym.node->source() + " is not an int";
        }
        ok = false;
        break;
      }
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(last_value, &overflow);
      if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
        if (error != nullptr) {
          *error = sym.node->source() + " does not fit in 64 bits";
        }
        ok = false;
        break;
      }
      values[i] = v;
      continue;
    }
    if (last_value == nullptr || !THPVariable_Check(last_value)) {
      if (error != nullptr) {
        *error = sym.node->source() + " is not a tensor";
      }
      ok = false;
      break;
    }
    try {
      const at::Tensor& t = THPVariable_Unpack(last_value);
      if (sym.dim >= t.dim()) {
        if (error != nullptr) {
          *error = sym.name + ": the tensor has " + std::to_string(t.dim()) +
              " dimensions";
        }
        ok = false;
        break;
      }
      std::optional<int64_t> v = sym.kind == SymbolKind::kStride
          ? t.sym_strides()[sym.dim].maybe_as_int()
          : t.sym_sizes()[sym.dim].maybe_as_int();
      if (!v) {
        if (error != nullptr) {
          *error = sym.name + " is symbolic";
        }
        ok = false;
        break;
      }
      values[i] = *v;
    } catch (const std::exception& e) {
      if (error != nullptr) {
        *error = sym.name + ": " + e.what();
      }
      ok = false;
    }
  }
  Py_XDECREF(last_value);
  PyErr_Clear();
  return ok;
}

bool ShapeGuards::passes(const Check& check, const int64_t* values) {
  std::array<int64_t, kMaxDepth> stack;
  int sp = 0;
  for (const ShapeInstr& instr : check.program) {
    int64_t r = 0;
    switch (instr.op) {
      case ShapeOp::kConst:
        stack[sp++] = instr.arg;
        continue;
      case ShapeOp::kSymbol:
        stack[sp++] = values[instr.arg];
        continue;
      case ShapeOp::kNeg:
        stack[sp - 1] = -stack[sp - 1];
        continue;
      case ShapeOp::kNot:
        stack[sp - 1] = stack[sp - 1] == 0;
        continue;
      default:
        break;
    }
    int64_t a = stack[sp - 2];
    int64_t b = stack[sp - 1];
    switch (instr.op) {
      case ShapeOp::kAdd:
        r = a + b;
        break;
      case ShapeOp::kMul:
        r = a * b;
        break;
      case ShapeOp::kFloorDiv:
        if (!floordiv(a, b, &r)) {
          return false;
        }
        break;
      case ShapeOp::kMod:
        if (!pymod(a, b, &r)) {
          return false;
        }
        break;
      case ShapeOp::kPow:
        if (!ipow(a, b, &r)) {
          return false;
        }
        break;
      case ShapeOp::kMin:
        r = a < b ? a : b;
        break;
      case ShapeOp::kMax:
        r = a > b ? a : b;
        break;
      case ShapeOp::kEq:
        r = a == b;
        break;
      case ShapeOp::kNe:
        r = a != b;
        break;
      case ShapeOp::kLt:
        r = a < b;
        break;
      case ShapeOp::kLe:
        r = a <= b;
        break;
      case ShapeOp::kGt:
        r = a > b;
        break;
      case ShapeOp::kGe:
        r = a >= b;
        break;
      case ShapeOp::kAnd:
        r = (a != 0) && (b != 0);
        break;
      case ShapeOp::kOr:
        r = (a != 0) || (b != 0);
        break;
      default:
        return false;
    }
    sp -= 1;
    stack[sp - 1] = r;
  }
  return stack[0] != 0;
}

const std::string ShapeGuards::kReadFailure =
    "shape guards: a tensor with dynamic sizes could not be read";

bool ShapeGuards::check(const FrameValues& frame) const {
  constexpr size_t kInline = 16;
  std::array<int64_t, kInline> inline_values;
  std::vector<int64_t> heap_values;
  int64_t* values = inline_values.data();
  if (symbols_.size() > kInline) {
    heap_values.resize(symbols_.size());
    values = heap_values.data();
  }
  last_failed_ = nullptr;
  if (!read_symbols(frame, values, nullptr)) {
    last_failed_ = &kReadFailure;
    return false;
  }
  for (const Check& c : checks_) {
    if (!passes(c, values)) {
      last_failed_ = &c.description;
      return false;
    }
  }
  return true;
}

std::optional<std::string> ShapeGuards::failure_reason(
    const FrameValues& frame) const {
  std::vector<int64_t> values(symbols_.size());
  std::string error;
  if (!read_symbols(frame, values.data(), &error)) {
    return "shape guards: " + error;
  }
  for (const Check& c : checks_) {
    if (passes(c, values.data())) {
      continue;
    }
    std::string got;
    std::vector<int> seen;
    for (int s : c.symbols) {
      bool dup = false;
      for (int t : seen) {
        dup = dup || t == s;
      }
      if (dup) {
        continue;
      }
      seen.push_back(s);
      got += (got.empty() ? "" : ", ") + symbols_[s].name + " = " +
          std::to_string(values[s]);
    }
    return c.description + " failed" + (got.empty() ? "" : ": got " + got);
  }
  return std::nullopt;
}

} // namespace torch_plugin::capture
