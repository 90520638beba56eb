// shape_guards.h: SHAPE_GUARDS, the integer relations between the sizes and
// strides of an entry's input tensors that a trace with symbolic sizes relied
// on (e.g. `2 <= s0`, `Eq(s1, 3*s0)`, `Eq(L['x'].stride()[0], s1)`).
//
// Owns: the symbols (each one size or stride of a tensor, or an int, reached
// by a node of the guard tree) and the checks, each a small integer program in
// reverse Polish notation over the symbols and constants. The Python side
// (torch_plugin/capture/shape_guards.py) translates PyTorch's ShapeEnv guards
// (sympy expressions) into these programs.
//
// Evaluation reads each symbol's tensor through its GuardManager's accessor
// chain (GuardManager::read_value), then runs the programs with 64-bit integer
// arithmetic and Python's semantics for // and % (floor division; the
// remainder has the divisor's sign); values become doubles only through
// truediv, tofloat or a float constant, and an op with a float operand
// computes in double (as Python mixes int and float); a check passes when its
// result is nonzero. Division or modulo by zero, a value that is not a tensor
// or a dimension out of range fails the check. No Python objects are created
// except what the accessors create (see guards.h). GIL: held by every caller.
#pragma once

#include <Python.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace torch_plugin::capture {

class GuardManager;
struct FrameValues;

enum class ShapeOp : uint8_t {
  kConst, // push arg
  kConstFloat, // push farg (a float)
  kSymbol, // push the value of symbol arg
  kAdd,
  kMul,
  kNeg,
  kFloorDiv,
  kMod,
  kPow, // exponent >= 0
  kMin,
  kMax,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kNot,
  kTrueDiv, // a / b as a float (sympy IntTrueDiv / FloatTrueDiv)
  kToFloat, // float(a)
  kFloor, // math.floor(a) as an int (FloorToInt)
  kCeil, // math.ceil(a) as an int (CeilToInt)
};

// What a symbol reads from its node's value.
enum class SymbolKind : uint8_t {
  kSize, // tensor.size(dim)
  kStride, // tensor.stride(dim)
  kInt, // the value itself, an int (exactly int: bool is not accepted)
};

// Parses "size", "stride" or "int"; throws pybind11::value_error otherwise.
SymbolKind symbol_kind_from_name(const std::string& name);

struct ShapeInstr {
  ShapeOp op;
  int64_t arg = 0; // the constant (kConst) or the symbol index (kSymbol)
  double farg = 0.0; // the constant of kConstFloat
};

// Parses an op name as Python spells it ("const", "constf", "symbol", "add",
// "mul", "neg", "floordiv", "mod", "pow", "min", "max", "eq", "ne", "lt", "le",
// "gt", "ge", "and", "or", "not", "truediv", "tofloat", "floor", "ceil").
// Throws pybind11::value_error for other names.
ShapeOp shape_op_from_name(const std::string& name);

class ShapeGuards {
 public:
  // A symbol: the size(dim) or stride(dim) of the tensor at `node`, or the
  // int at `node` (kInt; dim unused). `node` is a node of the same tree
  // (BORROWED; the tree outlives this object). `name` is printed in failure
  // reasons, e.g. "L['x'].size()[0]". Returns its index.
  int add_symbol(
      const GuardManager& node,
      SymbolKind kind,
      int64_t dim,
      std::string name);

  // A relation that must hold. Throws pybind11::value_error when the program
  // does not leave exactly one value, underflows the stack, is deeper than
  // kMaxDepth or names a symbol that was not added.
  void add_check(std::vector<ShapeInstr> program, std::string description);

  bool empty() const {
    return checks_.empty();
  }
  size_t num_checks() const {
    return checks_.size();
  }

  // True when every check passes on this frame. Never raises.
  bool check(const FrameValues& frame) const;
  // "<description> failed: got L['x'].size()[0] = 1" for the first failing
  // check, or nullopt.
  std::optional<std::string> failure_reason(const FrameValues& frame) const;
  // The description of the check that failed in the last check(), or nullptr.
  const std::string* last_failure() const {
    return last_failed_;
  }

  static constexpr int kMaxDepth = 64;
  static const std::string kReadFailure;

 private:
  struct Symbol {
    const GuardManager* node;
    SymbolKind kind;
    int64_t dim;
    std::string name;
  };
  struct Check {
    std::vector<ShapeInstr> program;
    std::string description;
    std::vector<int> symbols; // the symbols it reads, for messages
  };

  // Reads every symbol into `values`; false (error cleared) when one cannot be
  // read; `error` (optional) says which and why.
  bool read_symbols(
      const FrameValues& frame,
      int64_t* values,
      std::string* error) const;
  // Runs `check`; false when it fails or cannot be evaluated.
  static bool passes(const Check& check, const int64_t* values);

  std::vector<Symbol> symbols_;
  std::vector<Check> checks_;
  mutable const std::string* last_failed_ = nullptr;
};

} // namespace torch_plugin::capture
