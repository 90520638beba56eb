// ir.h: the "plugin" compiler's graph IR.
//
// Owns: Graph, Node, Value, Arg and AttrValue — the one small IR every pass
// reads and rewrites. A Value is a tensor with static sizes, strides, dtype and
// device (symbolic sizes never reach the IR: the Python lowering falls back
// before that). A Node is an op name ("aten::convolution", overload "default";
// or a native "torch_plugin::*" op made by a pass) with its inputs, outputs,
// schema-ordered arguments (Arg: a constant, a tensor input, or a list of them)
// and named attributes for native ops. A fused kernel node owns its body as a
// subgraph. Shared by the passes (csrc/compiler) and the runtime
// (csrc/runtime), which build on it and not on each other; includes nothing
// else of the project. Does not own: execution (csrc/runtime); op knowledge
// is the op table's (ir/op_table.h). No Python objects cross this header; no
// GIL requirement.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <iosfwd>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace torch_plugin::ir {

struct Node;
struct Graph;

// A constant argument: None, int, float, bool, str or a list of int/float/bool.
// dtype, layout and memory_format travel as their c10 enum value (int); a
// device as its string ("cpu"); the executor converts by the op schema's
// argument type.
using AttrValue = std::variant<
    std::monostate,
    int64_t,
    double,
    bool,
    std::string,
    std::vector<int64_t>,
    std::vector<double>,
    std::vector<bool>>;

enum class ValueKind { kInput, kConstant, kIntermediate };

struct Use {
  Node* user;
  size_t input_index;
};

struct Value {
  int64_t id = -1;
  ValueKind kind = ValueKind::kIntermediate;
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::kCPU);
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  Node* producer = nullptr; // kIntermediate only
  size_t output_index = 0;
  int64_t input_index = -1; // kInput only: position in Graph::inputs()
  at::Tensor constant; // kConstant only
  std::vector<Use> uses;
  // memory_planning: byte offset of this value's buffer in the executor's
  // per-run arena (Graph::arena_bytes), or -1 when its producer allocates it.
  int64_t arena_offset = -1;

  int64_t numel() const;
  bool is_contiguous() const;
  // Smallest storage span in elements (1 + sum((size-1)*stride)), 0 when empty.
  int64_t storage_span() const;
};

// One argument of a node, in the order of the op's schema.
struct Arg {
  enum class Kind { kConst, kTensor, kTensorList };
  Kind kind = Kind::kConst;
  AttrValue value; // kConst
  std::vector<int64_t> inputs; // kTensor: one index into Node::inputs;
                               // kTensorList: indices, -1 for a None entry
  static Arg constant(AttrValue v) {
    return Arg{Kind::kConst, std::move(v), {}};
  }
  static Arg tensor(int64_t i) {
    return Arg{Kind::kTensor, {}, {i}};
  }
};

struct Node {
  std::string op; // "aten::add", "torch_plugin::conv_pointwise", ...
  std::string overload; // "Tensor", "default" or ""
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::vector<Arg> args;
  std::map<std::string, AttrValue> attrs;
  std::shared_ptr<Graph> body; // fusion group nodes: the fused ops
  bool may_alias = false; // outputs may be views of inputs (schema alias info)

  std::string qualified_name() const; // "aten::add.Tensor"
  // An in-place or out= ATen op, which mutates an input (aten::copy_,
  // aten::add_, ...; by PyTorch's naming convention, a trailing '_').
  bool is_in_place() const;
  Graph* owner = nullptr;
  std::list<std::unique_ptr<Node>>::iterator self;

  // The i-th schema argument as a constant (checked).
  const AttrValue& const_arg(size_t i) const;
  // The value of the i-th schema argument if it is a tensor, else nullptr.
  Value* tensor_arg(size_t i) const;
  int64_t int_attr(const std::string& name, int64_t fallback) const;
  std::string str_attr(const std::string& name, const std::string& fallback)
      const;
};

// A graph in topological order. Owns its nodes and values.
struct Graph {
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* add_input(
      c10::ScalarType dtype,
      std::vector<int64_t> sizes,
      std::vector<int64_t> strides,
      c10::Device device);
  Value* add_constant(const at::Tensor& t);
  // Appends a node (before `before` when given) with outputs of the given
  // types. Each tensor arg's indices refer to `inputs`.
  Node* create_node(
      std::string op,
      std::string overload,
      std::vector<Value*> inputs,
      std::vector<Arg> args,
      size_t num_outputs,
      Node* before = nullptr);
  // Gives an output of `node` its type.
  static void set_type(
      Value* v,
      c10::ScalarType dtype,
      std::vector<int64_t> sizes,
      std::vector<int64_t> strides,
      c10::Device device);
  void set_outputs(std::vector<Value*> outputs);
  // Every use of `from` (node inputs and graph outputs) becomes a use of `to`.
  void replace_all_uses(Value* from, Value* to);
  void replace_input(Node* node, size_t i, Value* to);
  // Erases a node whose outputs have no uses (checked).
  void erase_node(Node* node);

  const std::vector<Value*>& inputs() const {
    return inputs_;
  }
  const std::vector<Value*>& outputs() const {
    return outputs_;
  }
  std::vector<Node*> nodes()
      const; // a snapshot, safe against erasure while iterating
  const std::list<std::unique_ptr<Node>>& node_list() const {
    return nodes_;
  }
  std::vector<Value*> constants() const;
  bool is_output(const Value* v) const;
  size_t num_nodes() const {
    return nodes_.size();
  }
  std::string str() const;

  // memory_planning: bytes of the arena the executor allocates (or reuses) per
  // run for the values with an arena_offset; 0 when nothing is planned.
  int64_t arena_bytes = 0;

 private:
  Value* new_value();
  std::vector<std::unique_ptr<Value>> values_;
  std::list<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  int64_t next_id_ = 0;
};

std::string to_string(const AttrValue& v);
std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes);
// [N, C, spatial...] with the channels innermost: torch's channels_last
// (4-d) and channels_last_3d (5-d) strides, NLC for 3-d.
std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes);
// The one device of `g`'s tensors (inputs, constants, node outputs): what the
// pass pipeline and the executor are chosen by. CPU for a graph without
// tensors. Throws c10::Error naming two of them when they are on several
// devices (the lowering makes one-device graphs only).
c10::Device graph_device(const Graph& g);

} // namespace torch_plugin::ir
