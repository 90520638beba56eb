// pattern_rules.cpp: the matcher of rule rows (see pattern_rules.h).
#include "compiler/passes/pattern_rules.h"

#include "ir/op_schema.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Logging.h>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <sstream>
#include <utility>

namespace torch_plugin::compiler {
namespace {

// Whether every tensor of `n` is on `device`.
bool on_device(const Node* n, c10::DeviceType device) {
  for (const Value* v : n->inputs)
    if (v->device.type() != device)
      return false;
  for (const Value* v : n->outputs)
    if (v->device.type() != device)
      return false;
  return true;
}

// Whether library op `op` has a kernel registered for `device` (the ops of
// csrc/ops register theirs with the dispatcher).
bool has_kernel(const char* op, c10::DeviceType device) {
  c10::DispatchKey key;
  if (device == c10::DeviceType::CPU)
    key = c10::DispatchKey::CPU;
  else if (device == c10::DeviceType::CUDA)
    key = c10::DispatchKey::CUDA;
  else
    return false;
  auto handle = c10::Dispatcher::singleton().findOp(c10::OperatorName(op, ""));
  return handle && handle->hasKernelForDispatchKey(key);
}

// "csrc/compiler/passes/library_patterns.cpp:123" from __FILE__, __LINE__.
std::string source_of(const Rule& r) {
  const char* f = r.file;
  if (const char* c = std::strstr(f, "csrc/"))
    f = c;
  return std::string(f) + ":" + std::to_string(r.line);
}

std::string node_of(const Node* n) {
  std::ostringstream s;
  s << n->qualified_name();
  if (!n->outputs.empty())
    s << " (%" << n->outputs[0]->id << ")";
  return s.str();
}

void log(
    const PassOptions& options,
    const char* pass,
    const Rule& r,
    const std::string& what) {
  if (options.log_patterns)
    std::cerr << "[torch_plugin patterns] " << pass << ": rule " << r.name
              << " (" << source_of(r) << ") " << what << std::endl;
}

// Appends one decision to options.pattern_events (the compile trace); the
// caller checks that it is set.
void record(
    const PassOptions& options,
    const char* pass,
    const Rule& r,
    const char* outcome,
    const Node* n,
    c10::DeviceType device,
    std::string reason) {
  options.pattern_events->push_back(PatternEvent{
      pass,
      r.name,
      source_of(r),
      outcome,
      n ? node_of(n) : std::string(),
      c10::DeviceTypeName(device, true),
      std::move(reason)});
}

// Whether `g` has a node the rule starts from with its tensors on `device`.
bool has_root_on(const Graph& g, const Rule& r, c10::DeviceType device) {
  for (Node* n : g.nodes())
    if (std::find(r.roots.begin(), r.roots.end(), n->qualified_name()) !=
            r.roots.end() &&
        on_device(n, device))
      return true;
  return false;
}

} // namespace

bool is_const(const Value* v) {
  return v && v->kind == ValueKind::kConstant;
}

bool single_use(const Value* v, const Graph& g) {
  return v->uses.size() == 1 && !g.is_output(v);
}

std::vector<Match> bind_root(const Graph& g, Node* root) {
  Match m;
  m.root = root;
  return {m};
}

Node* producer_through_view(Value* y, const Graph& g, Node** view) {
  Node* p = y->producer;
  *view = nullptr;
  if ((p->op == "aten::view" || p->op == "aten::_unsafe_view") &&
      p->inputs.size() == 1 && p->inputs[0]->producer &&
      single_use(p->inputs[0], g)) {
    *view = p;
    p = p->inputs[0]->producer;
  }
  return p;
}

std::vector<Match> bind_through_view(const Graph& g, Node* root) {
  Match m;
  m.root = root;
  m.y = root->tensor_arg(0);
  if (!m.y || !m.y->producer)
    return {};
  m.lib = producer_through_view(m.y, g, &m.view);
  return {m};
}

bool is_one(const AttrValue& v) {
  return std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v) == 1
                                            : std::get<double>(v) == 1.0;
}
bool alpha_one(const Graph&, const Match& m) {
  return is_one(m.root->const_arg(schema::add::kAlpha));
}
bool y_single_use(const Graph& g, const Match& m) {
  return single_use(m.y, g);
}

namespace {
std::vector<Match> add_sides(const Graph& g, Node* root, bool view) {
  namespace add = schema::add;
  std::vector<Match> out;
  for (size_t side : {add::kSelf, add::kOther}) {
    Match m;
    m.root = root;
    m.y = root->tensor_arg(side);
    m.other = root->tensor_arg(side == add::kSelf ? add::kOther : add::kSelf);
    if (!m.y || !m.other || !m.y->producer)
      continue;
    m.lib = view ? producer_through_view(m.y, g, &m.view) : m.y->producer;
    out.push_back(m);
  }
  return out;
}
} // namespace

std::vector<Match> bind_add_sides(const Graph& g, Node* root) {
  return add_sides(g, root, false);
}
std::vector<Match> bind_add_sides_through_view(const Graph& g, Node* root) {
  return add_sides(g, root, true);
}

bool has_activation(const Node* lib) {
  return !std::get<std::string>(lib->const_arg(activation_arg(*lib))).empty();
}

Node* make_library_node(
    Graph& g,
    const std::string& op,
    Node* before,
    Value* x,
    Value* w,
    Value* b,
    std::vector<Arg> middle,
    const Value* like) {
  std::vector<Value*> inputs = {x, w};
  std::vector<Arg> args = {Arg::tensor(0), Arg::tensor(1)};
  if (b) {
    inputs.push_back(b);
    args.push_back(Arg::tensor(2));
  } else {
    args.push_back(Arg::constant(std::monostate{}));
  }
  args.push_back(Arg::constant(std::monostate{})); // residual
  for (Arg& a : middle)
    args.push_back(std::move(a));
  args.push_back(Arg::constant(std::string())); // activation, alpha, beta
  args.push_back(Arg::constant(0.0));
  args.push_back(Arg::constant(0.0));
  Node* n = g.create_node(op, "default", inputs, args, 1, before);
  Graph::set_type(
      n->outputs[0], like->dtype, like->sizes, like->strides, like->device);
  return n;
}

Node* with_tensor_args(
    Graph& g,
    const Node* lib,
    std::initializer_list<std::pair<size_t, Value*>> extra,
    Node* before) {
  std::vector<Value*> inputs = lib->inputs;
  std::vector<Arg> args = lib->args;
  for (const auto& [arg, v] : extra) {
    inputs.push_back(v);
    if (args.size() <= arg)
      args.resize(arg + 1, Arg::constant(std::monostate{}));
    args[arg] = Arg::tensor(static_cast<int64_t>(inputs.size()) - 1);
  }
  Node* copy = g.create_node(lib->op, lib->overload, inputs, args, 1, before);
  const Value* out = lib->outputs[0];
  Graph::set_type(
      copy->outputs[0], out->dtype, out->sizes, out->strides, out->device);
  return copy;
}

void replace_root(Graph& g, const Match& m, Node* lib) {
  g.replace_all_uses(
      m.root->outputs[0], m.view ? m.view->outputs[0] : lib->outputs[0]);
  g.erase_node(m.root);
}

void fuse_residual_add(Graph& g, const Match& m) {
  Node* fused = with_tensor_args(
      g, m.lib, {{schema::library::kResidual, m.other}}, m.root);
  g.replace_all_uses(m.root->outputs[0], fused->outputs[0]);
  g.erase_node(m.root);
  g.erase_node(m.lib);
}

void fuse_activation(Graph& g, const Match& m) {
  const EpilogueUse e = *epilogue_of(*m.root);
  const size_t act = activation_arg(*m.lib);
  m.lib->args[act] = Arg::constant(std::string(epilogue_info(e.kind).name));
  m.lib->args[act + 1] = Arg::constant(e.alpha);
  m.lib->args[act + 2] = Arg::constant(e.beta);
  replace_root(g, m, m.lib);
}

bool run_rules(
    const char* pass,
    const std::vector<Rule>& rules,
    Graph& g,
    const PassOptions& options) {
  bool changed = false;
  for (const Rule& rule : rules) {
    std::vector<c10::DeviceType> devices;
    for (c10::DeviceType d : rule.devices) {
      if (has_kernel(rule.makes, d)) {
        devices.push_back(d);
        continue;
      }
      const std::string why =
          std::string("no ") + rule.makes + " kernel for it in this build";
      log(options,
          pass,
          rule,
          std::string("is off on ") + c10::DeviceTypeName(d, true) + ": " +
              why);
      // The trace names a rule that is off only where it had a node to try.
      if (options.pattern_events && has_root_on(g, rule, d))
        record(options, pass, rule, "off", nullptr, d, why);
    }
    if (devices.empty())
      continue;
    for (Node* n : g.nodes()) {
      if (n->owner != &g)
        continue; // erased by an earlier rewrite
      if (std::find(
              rule.roots.begin(), rule.roots.end(), n->qualified_name()) ==
          rule.roots.end())
        continue;
      const auto device =
          std::find_if(devices.begin(), devices.end(), [&](c10::DeviceType d) {
            return on_device(n, d);
          });
      if (device == devices.end())
        continue;
      for (const Match& m : rule.bind(g, n)) {
        const Constraint* failed = nullptr;
        for (const Constraint& c : rule.constraints) {
          if (!c.holds(g, m)) {
            failed = &c;
            break;
          }
        }
        if (failed) {
          log(options,
              pass,
              rule,
              "rejected at " + node_of(n) + ": not " + failed->name);
          if (options.pattern_events)
            record(
                options,
                pass,
                rule,
                "rejected",
                n,
                *device,
                std::string("not ") + failed->name);
          continue;
        }
        const std::string at = node_of(n);
        if (options.pattern_events)
          record(options, pass, rule, "fired", n, *device, "");
        rule.rewrite(g, m);
        changed = true;
        VLOG(1) << pass << ": rule " << rule.name << " (" << source_of(rule)
                << ") fired at " << at;
        log(options, pass, rule, "fired at " + at);
        break;
      }
    }
  }
  return changed;
}

} // namespace torch_plugin::compiler
