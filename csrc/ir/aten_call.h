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

  // Calls the op on the node's inputs in `table` and stores its outputs there,
  // each converted to its IR value's dtype where the op returned another one.
  // The IR's dtypes are the meta kernels' (FakeTensor propagation), and a few
  // real kernels disagree with their meta kernel: CPU native_batch_norm,
  // native_layer_norm and native_group_norm of a bf16/fp16 input with fp32
  // weights return fp32 statistics (mean, rstd) where the meta kernel says
  // bf16/fp16. Left unconverted, a generated kernel reading such a slot
  // reinterprets its bytes (garbage, NaN).
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
  std::vector<c10::ScalarType> out_dtypes_; // the IR's, per output
};

} // namespace torch_plugin::ir
