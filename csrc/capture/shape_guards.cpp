// shape_guards.cpp: reading symbols from the frame and running the check
// programs (see shape_guards.h).
#include "capture/shape_guards.h"

#include <pybind11/pybind11.h>
#include <torch/csrc/autograd/python_variable.h>

#include <array>
#include <cmath>
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
    case ShapeOp::kConstFloat:
    case ShapeOp::kSymbol:
      return 0;
    case ShapeOp::kNeg:
    case ShapeOp::kNot:
    case ShapeOp::kToFloat:
    case ShapeOp::kFloor:
    case ShapeOp::kCeil:
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
      {"const", ShapeOp::kConst},     {"symbol", ShapeOp::kSymbol},
      {"add", ShapeOp::kAdd},         {"mul", ShapeOp::kMul},
      {"neg", ShapeOp::kNeg},         {"floordiv", ShapeOp::kFloorDiv},
      {"mod", ShapeOp::kMod},         {"pow", ShapeOp::kPow},
      {"min", ShapeOp::kMin},         {"max", ShapeOp::kMax},
      {"eq", ShapeOp::kEq},           {"ne", ShapeOp::kNe},
      {"lt", ShapeOp::kLt},           {"le", ShapeOp::kLe},
      {"gt", ShapeOp::kGt},           {"ge", ShapeOp::kGe},
      {"and", ShapeOp::kAnd},         {"or", ShapeOp::kOr},
      {"not", ShapeOp::kNot},         {"constf", ShapeOp::kConstFloat},
      {"truediv", ShapeOp::kTrueDiv}, {"tofloat", ShapeOp::kToFloat},
      {"floor", ShapeOp::kFloor},     {"ceil", ShapeOp::kCeil},
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

namespace {

// A value on the evaluation stack: an int, or a float once an op made one.
struct Num {
  int64_t i = 0;
  double f = 0.0;
  bool is_float = false;
  double as_double() const {
    return is_float ? f : static_cast<double>(i);
  }
  bool truthy() const {
    return is_float ? f != 0.0 : i != 0;
  }
};

Num int_num(int64_t v) {
  return {v, 0.0, false};
}
Num float_num(double v) {
  return {0, v, true};
}

// a OP b in double (some operand is a float); false when undefined.
bool float_binary(ShapeOp op, double a, double b, Num* out) {
  switch (op) {
    case ShapeOp::kAdd:
      *out = float_num(a + b);
      return true;
    case ShapeOp::kMul:
      *out = float_num(a * b);
      return true;
    case ShapeOp::kTrueDiv:
      if (b == 0.0) {
        return false;
      }
      *out = float_num(a / b);
      return true;
    case ShapeOp::kFloorDiv:
      if (b == 0.0) {
        return false;
      }
      *out = float_num(std::floor(a / b));
      return true;
    case ShapeOp::kMod: {
      if (b == 0.0) {
        return false;
      }
      double r = std::fmod(a, b);
      if (r != 0.0 && ((r < 0) != (b < 0))) {
        r += b;
      }
      *out = float_num(r);
      return true;
    }
    case ShapeOp::kPow:
      *out = float_num(std::pow(a, b));
      return true;
    case ShapeOp::kMin:
      *out = float_num(a < b ? a : b);
      return true;
    case ShapeOp::kMax:
      *out = float_num(a > b ? a : b);
      return true;
    case ShapeOp::kEq:
      *out = int_num(a == b);
      return true;
    case ShapeOp::kNe:
      *out = int_num(a != b);
      return true;
    case ShapeOp::kLt:
      *out = int_num(a < b);
      return true;
    case ShapeOp::kLe:
      *out = int_num(a <= b);
      return true;
    case ShapeOp::kGt:
      *out = int_num(a > b);
      return true;
    case ShapeOp::kGe:
      *out = int_num(a >= b);
      return true;
    default:
      return false;
  }
}

// a OP b on ints; false when undefined.
bool int_binary(ShapeOp op, int64_t a, int64_t b, Num* out) {
  int64_t r = 0;
  switch (op) {
    case ShapeOp::kAdd:
      r = a + b;
      break;
    case ShapeOp::kMul:
      r = a * b;
      break;
    case ShapeOp::kTrueDiv:
      return float_binary(
          op, static_cast<double>(a), static_cast<double>(b), out);
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
    default:
      return false;
  }
  *out = int_num(r);
  return true;
}

} // namespace

bool ShapeGuards::passes(const Check& check, const int64_t* values) {
  std::array<Num, kMaxDepth> stack;
  int sp = 0;
  for (const ShapeInstr& instr : check.program) {
    switch (instr.op) {
      case ShapeOp::kConst:
        stack[sp++] = int_num(instr.arg);
        continue;
      case ShapeOp::kConstFloat:
        stack[sp++] = float_num(instr.farg);
        continue;
      case ShapeOp::kSymbol:
        stack[sp++] = int_num(values[instr.arg]);
        continue;
      case ShapeOp::kNeg: {
        Num& a = stack[sp - 1];
        a = a.is_float ? float_num(-a.f) : int_num(-a.i);
        continue;
      }
      case ShapeOp::kNot:
        stack[sp - 1] = int_num(!stack[sp - 1].truthy());
        continue;
      case ShapeOp::kToFloat:
        stack[sp - 1] = float_num(stack[sp - 1].as_double());
        continue;
      case ShapeOp::kFloor:
      case ShapeOp::kCeil: {
        Num& a = stack[sp - 1];
        if (a.is_float) {
          double v =
              instr.op == ShapeOp::kFloor ? std::floor(a.f) : std::ceil(a.f);
          if (!(v > -9.2e18 && v < 9.2e18)) {
            return false; // NaN, inf or out of int64 range
          }
          a = int_num(static_cast<int64_t>(v));
        }
        continue;
      }
      case ShapeOp::kAnd:
      case ShapeOp::kOr: {
        bool a = stack[sp - 2].truthy();
        bool b = stack[sp - 1].truthy();
        sp -= 1;
        stack[sp - 1] =
            int_num(instr.op == ShapeOp::kAnd ? (a && b) : (a || b));
        continue;
      }
      default:
        break;
    }
    const Num& a = stack[sp - 2];
    const Num& b = stack[sp - 1];
    Num r;
    bool ok = (a.is_float || b.is_float)
        ? float_binary(instr.op, a.as_double(), b.as_double(), &r)
        : int_binary(instr.op, a.i, b.i, &r);
    if (!ok) {
      return false;
    }
    sp -= 1;
    stack[sp - 1] = r;
  }
  return stack[0].truthy();
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
