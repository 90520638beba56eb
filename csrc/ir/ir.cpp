// ir.cpp: Graph construction, mutation and printing (see ir.h).
#include "ir/ir.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

namespace torch_plugin::ir {

int64_t Value::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

bool Value::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected)
      return false;
    expected *= sizes[i];
  }
  return true;
}

int64_t Value::storage_span() const {
  int64_t span = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0)
      return 0;
    span += (sizes[i] - 1) * strides[i];
  }
  return span;
}

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

std::vector<int64_t> channels_last_strides(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t s = sizes.size() > 1 ? sizes[1] : 1;
  for (size_t i = sizes.size(); i-- > 2;) {
    strides[i] = s;
    s *= sizes[i];
  }
  if (!sizes.empty())
    strides[0] = s;
  return strides;
}

std::string Node::qualified_name() const {
  return overload.empty() || overload == "default" ? op : op + "." + overload;
}

bool Node::is_in_place() const {
  return !op.empty() && op.back() == '_' && op.rfind("aten::", 0) == 0;
}

const AttrValue& Node::const_arg(size_t i) const {
  TORCH_CHECK(
      i < args.size() && args[i].kind == Arg::Kind::kConst,
      qualified_name(),
      ": argument ",
      i,
      " should be a constant");
  return args[i].value;
}

Value* Node::tensor_arg(size_t i) const {
  if (i >= args.size() || args[i].kind != Arg::Kind::kTensor)
    return nullptr;
  return inputs[args[i].inputs[0]];
}

int64_t Node::int_attr(const std::string& name, int64_t fallback) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return fallback;
  return std::get<int64_t>(it->second);
}

std::string Node::str_attr(const std::string& name, const std::string& fallback)
    const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return fallback;
  return std::get<std::string>(it->second);
}

Value* Graph::new_value() {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->id = next_id_++;
  return v;
}

Value* Graph::add_input(
    c10::ScalarType dtype,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides,
    c10::Device device) {
  Value* v = new_value();
  v->kind = ValueKind::kInput;
  set_type(v, dtype, std::move(sizes), std::move(strides), device);
  v->input_index = static_cast<int64_t>(inputs_.size());
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(const at::Tensor& t) {
  Value* v = new_value();
  v->kind = ValueKind::kConstant;
  set_type(v, t.scalar_type(), t.sizes().vec(), t.strides().vec(), t.device());
  v->constant = t;
  return v;
}

void Graph::set_type(
    Value* v,
    c10::ScalarType dtype,
    std::vector<int64_t> sizes,
    std::vector<int64_t> strides,
    c10::Device device) {
  TORCH_CHECK(
      sizes.size() == strides.size(),
      "value %",
      v->id,
      " has ",
      sizes.size(),
      " sizes but ",
      strides.size(),
      " strides");
  v->dtype = dtype;
  v->sizes = std::move(sizes);
  v->strides = std::move(strides);
  v->device = device;
}

Node* Graph::create_node(
    std::string op,
    std::string overload,
    std::vector<Value*> inputs,
    std::vector<Arg> args,
    size_t num_outputs,
    Node* before) {
  auto owned = std::make_unique<Node>();
  Node* n = owned.get();
  n->op = std::move(op);
  n->overload = std::move(overload);
  n->inputs = std::move(inputs);
  n->args = std::move(args);
  n->owner = this;
  for (size_t i = 0; i < n->inputs.size(); ++i) {
    TORCH_CHECK(n->inputs[i] != nullptr, n->op, ": input ", i, " is null");
    n->inputs[i]->uses.push_back({n, i});
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    Value* v = new_value();
    v->producer = n;
    v->output_index = i;
    n->outputs.push_back(v);
  }
  auto pos = before ? before->self : nodes_.end();
  n->self = nodes_.insert(pos, std::move(owned));
  return n;
}

void Graph::set_outputs(std::vector<Value*> outputs) {
  outputs_ = std::move(outputs);
}

void Graph::replace_input(Node* node, size_t i, Value* to) {
  Value* from = node->inputs[i];
  auto& uses = from->uses;
  uses.erase(
      std::remove_if(
          uses.begin(),
          uses.end(),
          [&](const Use& u) { return u.user == node && u.input_index == i; }),
      uses.end());
  node->inputs[i] = to;
  to->uses.push_back({node, i});
}

void Graph::replace_all_uses(Value* from, Value* to) {
  if (from == to)
    return;
  for (const Use& u : std::vector<Use>(from->uses))
    replace_input(u.user, u.input_index, to);
  for (Value*& out : outputs_) {
    if (out == from)
      out = to;
  }
}

void Graph::erase_node(Node* node) {
  for (Value* out : node->outputs) {
    TORCH_CHECK(
        out->uses.empty() && !is_output(out),
        "cannot erase ",
        node->qualified_name(),
        ": its output %",
        out->id,
        " is still used");
  }
  for (size_t i = 0; i < node->inputs.size(); ++i) {
    auto& uses = node->inputs[i]->uses;
    uses.erase(
        std::remove_if(
            uses.begin(),
            uses.end(),
            [&](const Use& u) { return u.user == node; }),
        uses.end());
  }
  for (Value* out : node->outputs)
    out->producer = nullptr;
  nodes_.erase(node->self);
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_)
    out.push_back(n.get());
  return out;
}

std::vector<Value*> Graph::constants() const {
  std::vector<Value*> out;
  for (const auto& v : values_) {
    if (v->kind == ValueKind::kConstant &&
        (!v->uses.empty() || is_output(v.get())))
      out.push_back(v.get());
  }
  return out;
}

bool Graph::is_output(const Value* v) const {
  return std::find(outputs_.begin(), outputs_.end(), v) != outputs_.end();
}

namespace {

template <typename T>
void print_list(std::ostream& os, const std::vector<T>& xs) {
  os << "[";
  for (size_t i = 0; i < xs.size(); ++i)
    os << (i ? ", " : "") << xs[i];
  os << "]";
}

void print_type(std::ostream& os, const Value* v) {
  os << c10::toString(v->dtype);
  print_list(os, v->sizes);
  if (!v->is_contiguous())
    print_list(os, v->strides);
  if (v->arena_offset >= 0)
    os << "@arena+" << v->arena_offset;
}

} // namespace

std::string to_string(const AttrValue& v) {
  std::ostringstream os;
  std::visit(
      [&](const auto& x) {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          os << "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          os << (x ? "True" : "False");
        } else if constexpr (std::is_same_v<T, std::string>) {
          os << "'" << x << "'";
        } else if constexpr (std::is_same_v<T, std::vector<bool>>) {
          os << "[";
          for (size_t i = 0; i < x.size(); ++i)
            os << (i ? ", " : "") << (x[i] ? "True" : "False");
          os << "]";
        } else if constexpr (
            std::is_same_v<T, std::vector<int64_t>> ||
            std::is_same_v<T, std::vector<double>>) {
          print_list(os, x);
        } else {
          os << x;
        }
      },
      v);
  return os.str();
}

std::string Graph::str() const {
  std::ostringstream os;
  os << "graph(";
  for (size_t i = 0; i < inputs_.size(); ++i) {
    os << (i ? ", " : "") << "%" << inputs_[i]->id << ": ";
    print_type(os, inputs_[i]);
  }
  os << "):\n";
  for (Value* c : constants()) {
    os << "  %" << c->id << ": ";
    print_type(os, c);
    os << " = constant\n";
  }
  for (const auto& n : nodes_) {
    os << "  ";
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      os << (i ? ", " : "") << "%" << n->outputs[i]->id << ": ";
      print_type(os, n->outputs[i]);
    }
    os << " = " << n->qualified_name() << "(";
    bool first = true;
    for (const Arg& a : n->args) {
      os << (first ? "" : ", ");
      first = false;
      if (a.kind == Arg::Kind::kConst) {
        os << to_string(a.value);
      } else if (a.kind == Arg::Kind::kTensor) {
        os << "%" << n->inputs[a.inputs[0]]->id;
      } else {
        os << "[";
        for (size_t i = 0; i < a.inputs.size(); ++i) {
          os << (i ? ", " : "");
          if (a.inputs[i] < 0)
            os << "None";
          else
            os << "%" << n->inputs[a.inputs[i]]->id;
        }
        os << "]";
      }
    }
    for (const auto& [k, v] : n->attrs)
      os << (first ? "" : ", ") << k << "=" << to_string(v), first = false;
    os << ")\n";
    if (n->body) {
      std::istringstream body(n->body->str());
      for (std::string line; std::getline(body, line);)
        os << "    | " << line << "\n";
    }
  }
  os << "  return (";
  for (size_t i = 0; i < outputs_.size(); ++i)
    os << (i ? ", " : "") << "%" << outputs_[i]->id;
  os << ")\n";
  if (arena_bytes > 0)
    os << "  # arena: " << arena_bytes << " bytes\n";
  return os.str();
}

c10::Device graph_device(const Graph& g) {
  const Value* first = nullptr;
  auto check = [&](const Value* v) {
    if (!first) {
      first = v;
      return;
    }
    TORCH_CHECK(
        v->device == first->device,
        "graph_device: the graph's tensors are on several devices: %",
        first->id,
        " on ",
        first->device,
        ", %",
        v->id,
        " on ",
        v->device);
  };
  for (const Value* v : g.inputs())
    check(v);
  for (const Value* v : g.constants())
    check(v);
  for (const auto& n : g.node_list())
    for (const Value* v : n->outputs)
      check(v);
  return first ? first->device : c10::Device(c10::kCPU);
}

} // namespace torch_plugin::ir
