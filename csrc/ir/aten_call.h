// aten_call.h: an IR node's ATen op, called through the PyTorch dispatcher.
//
// Owns: turning a node's schema-ordered arguments into a boxed stack, once, and
// calling the op on it. Constants are converted by the schema's argument type
// (a device travels as its string, dtype/layout/memory_format as ints); tensor
// arguments are read from a table of tensors on every call, and the returns,
// flattened in order (a Tensor[] return fills consecutive outputs), are written
// back into it. The table is the caller's: the runtime's fallback step passes
// its executor slots, constant_folding and propagate_strides a few tensors of
// their own (real constants, or Meta tensors).
// Does not own: when a node runs, nor where its tensors live.
// No Python objects; the GIL is not needed.
#pragma once

#include "ir/ir.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <functional>
#include <string>
#include <vector>

namespace torch_plugin::ir {

class AtenCall {
 public:
  // Index of a value (an input or output of `node`) in the tensor table.
  using TableIndex = std::function<int(const Value*)>;

  // Looks up the op's schema (throws c10::Error for an unknown op) and converts
  // the constant arguments.
  AtenCall(const Node& node, const TableIndex& index_of);

  // Calls the op on the node's inputs in `table` and stores its outputs there.
  // Const: one AtenCall may run many times, from several threads at once.
  void run(std::vector<at::Tensor>& table) const;

  // "aten::add.Tensor"
  const std::string& name() const {
    return name_;
  }

 private:
  struct TensorArg {
    size_t position;
    bool is_list;
    bool optional_elements;
    std::vector<int> slots; // -1: None entry
  };
  std::string name_;
  c10::OperatorHandle op_;
  torch::jit::Stack stack_template_;
  std::vector<TensorArg> tensor_args_;
  std::vector<int> out_slots_;
};

} // namespace torch_plugin::ir
