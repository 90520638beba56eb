// library_patterns.cpp: pass "library_patterns".
//
// Rewrites convolutions and matrix products with constant weights (freezing)
// into library nodes, then grows each library node's epilogue. The rules are
// data: kRules lists them in the order they are tried, each with the rewrite it
// does. A library node's schema (csrc/ops/library_ops.cpp):
//   conv_pointwise(x, w, b?, residual?, stride, padding, dilation, groups,
//                  activation, alpha, beta)
//   linear_pointwise(x, w, b?, residual?, activation, alpha, beta)
// Their outputs: conv_pointwise writes channels_last (oneDNN's fast layout);
// the propagate_strides pass then updates the strides downstream.
// Each rule is for one device and fires only on nodes whose tensors are there:
// the oneDNN rules on CPU values (a CUDA graph never gets a oneDNN node).
//
// CUDA values have rules of their own (kCudaRules, tried first; built with the
// CUDA toolkit only, where linear_pointwise has its cuBLASLt kernel and step):
// mm/addmm of any weight (no freezing needed: training graphs too) become
// linear_pointwise with the bias, and a single-use relu or tanh-GELU after it
// joins as the cuBLASLt epilogue. The oneDNN rules are for CPU values.
#include "compiler/passes/pass.h"

#include <ATen/ATen.h>
#include <c10/util/Logging.h>

namespace torch_plugin::compiler {
namespace {

bool is_const(const Value* v) {
  return v && v->kind == ValueKind::kConstant;
}
bool single_use(const Value* v, const Graph& g) {
  return v->uses.size() == 1 && !g.is_output(v);
}
bool is_library(const Node* n) {
  return n->op == "torch_plugin::conv_pointwise" ||
      n->op == "torch_plugin::linear_pointwise";
}
size_t activation_arg(const Node* lib) {
  return lib->op == "torch_plugin::conv_pointwise" ? 8 : 4;
}
bool is_one(const AttrValue& v) {
  return std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v) == 1
                                            : std::get<double>(v) == 1.0;
}

// A copy of library node `lib`, inserted before `before`, whose schema argument
// `arg` (2: bias, 3: residual) is the tensor `v`; its output has lib's type.
Node* with_tensor_arg(
    Graph& g,
    const Node* lib,
    size_t arg,
    Value* v,
    Node* before) {
  std::vector<Value*> inputs = lib->inputs;
  std::vector<Arg> args = lib->args;
  inputs.push_back(v);
  args[arg] = Arg::tensor(static_cast<int64_t>(inputs.size()) - 1);
  Node* copy = g.create_node(lib->op, lib->overload, inputs, args, 1, before);
  const Value* out = lib->outputs[0];
  Graph::set_type(
      copy->outputs[0], out->dtype, out->sizes, out->strides, out->device);
  return copy;
}

// The producer of y (single use), looking through one single-use view of its
// output: then *view is that view node (else nullptr).
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
  args.push_back(Arg::constant(std::string()));
  args.push_back(Arg::constant(0.0));
  args.push_back(Arg::constant(0.0));
  Node* n = g.create_node(op, "default", inputs, args, 1, before);
  Graph::set_type(
      n->outputs[0], like->dtype, like->sizes, like->strides, like->device);
  return n;
}

// convolution(x, W, b) [2-d, fp32, W and b constant, not transposed] =>
// conv_pointwise(x, W, b)
bool conv_to_library(Graph& g, Node* n) {
  if (n->op != "aten::convolution")
    return false;
  Value* x = n->tensor_arg(0);
  Value* w = n->tensor_arg(1);
  Value* b = n->tensor_arg(2);
  if (!is_const(w) || (b && !is_const(b)) || w->sizes.size() != 4 ||
      std::get<bool>(n->const_arg(6)) || x->dtype != at::kFloat)
    return false;
  Value* y = n->outputs[0];
  Node* lib = make_library_node(
      g,
      "torch_plugin::conv_pointwise",
      n,
      x,
      w,
      b,
      {Arg::constant(n->const_arg(3)),
       Arg::constant(n->const_arg(4)),
       Arg::constant(n->const_arg(5)),
       Arg::constant(n->const_arg(8))},
      y);
  Value* out = lib->outputs[0];
  const auto& s = out->sizes; // channels_last strides
  out->strides = {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
  g.replace_all_uses(y, out);
  g.erase_node(n);
  return true;
}

// addmm(b, x, Wt) [Wt constant [K, N], fp32] => linear_pointwise(x, Wt^T, b)
// mm(x, Wt)       [Wt constant [K, N], fp32] => linear_pointwise(x, Wt^T, None)
bool matmul_to_library(Graph& g, Node* n) {
  bool addmm = n->op == "aten::addmm";
  if (!addmm && n->op != "aten::mm")
    return false;
  Value* b = addmm ? n->tensor_arg(0) : nullptr;
  Value* x = n->tensor_arg(addmm ? 1 : 0);
  Value* wt = n->tensor_arg(addmm ? 2 : 1);
  if (!x || !is_const(wt) || x->dtype != at::kFloat ||
      (addmm && (!is_const(b) || b->sizes.size() > 1)))
    return false;
  if (addmm) {
    for (size_t i = 3; i < 5 && i < n->args.size(); ++i) { // beta, alpha
      const AttrValue& v = n->const_arg(i);
      double s = std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v)
                                                    : std::get<double>(v);
      if (s != 1.0)
        return false;
    }
  }
  // A view: the executor's oneDNN step reads [N, K] or its transpose as it is.
  Value* w = g.add_constant(wt->constant.t());
  Value* bias = b;
  if (b && b->sizes.size() == 0)
    bias = g.add_constant(b->constant.expand({wt->sizes[1]}).contiguous());
  Node* lib = make_library_node(
      g, "torch_plugin::linear_pointwise", n, x, w, bias, {}, n->outputs[0]);
  g.replace_all_uses(n->outputs[0], lib->outputs[0]);
  g.erase_node(n);
  return true;
}

// add(linear(x, W), c) or add(c, linear(x, W)), also through one view of the
// linear's output [linear has no bias, residual or activation yet, single use;
// c a constant of the output's dtype whose sizes are all 1 but the last, which
// is the linear's N; alpha 1] => linear(x, W, c as [N]). What a 3-d F.linear
// decomposes into when its input needs a copy first (nn.MultiheadAttention's
// in-projection on a transposed input: clone, view, mm, view, add).
bool fuse_bias_add(Graph& g, Node* n) {
  if (n->op != "aten::add" || n->overload != "Tensor")
    return false;
  if (!is_one(n->const_arg(2)))
    return false; // alpha
  for (int side = 0; side < 2; ++side) {
    Value* y = n->tensor_arg(side);
    Value* c = n->tensor_arg(1 - side);
    if (!y || !is_const(c) || !y->producer || !single_use(y, g))
      continue;
    Node* view = nullptr;
    Node* lib = producer_through_view(y, g, &view);
    if (lib->op != "torch_plugin::linear_pointwise" || lib->tensor_arg(2) ||
        lib->tensor_arg(3) ||
        !std::get<std::string>(lib->const_arg(activation_arg(lib))).empty())
      continue;
    const int64_t out_features = lib->outputs[0]->sizes.back();
    if (c->dtype != y->dtype || c->sizes.empty() ||
        c->sizes.back() != out_features || c->sizes.size() > y->sizes.size() ||
        n->outputs[0]->sizes != y->sizes)
      continue;
    bool only_last = true;
    for (size_t i = 0; i + 1 < c->sizes.size(); ++i)
      only_last &= c->sizes[i] == 1;
    if (!only_last)
      continue;
    Value* bias =
        g.add_constant(c->constant.reshape({out_features}).contiguous());
    Node* fused = with_tensor_arg(g, lib, 2, bias, lib);
    g.replace_all_uses(lib->outputs[0], fused->outputs[0]);
    g.replace_all_uses(
        n->outputs[0], view ? view->outputs[0] : fused->outputs[0]);
    g.erase_node(n);
    g.erase_node(lib);
    return true;
  }
  return false;
}

// add(lib(...), r) or add(r, lib(...)) [lib has no residual and no activation
// yet, single use, r has the output's sizes and dtype, alpha 1] => lib(...,
// residual=r)
bool fuse_residual_add(Graph& g, Node* n) {
  if (n->op != "aten::add" || n->overload != "Tensor")
    return false;
  for (int side = 0; side < 2; ++side) {
    Value* y = n->tensor_arg(side);
    Value* r = n->tensor_arg(1 - side);
    if (!y || !r || !y->producer || !is_library(y->producer) ||
        !single_use(y, g))
      continue;
    Node* lib = y->producer;
    if (lib->tensor_arg(3) ||
        !std::get<std::string>(lib->const_arg(activation_arg(lib))).empty())
      continue;
    if (!is_one(n->const_arg(2)))
      continue; // alpha
    if (r->sizes != y->sizes || r->dtype != y->dtype || r == y)
      continue;
    // r must be computed before lib runs: move lib down to the add.
    Node* fused = with_tensor_arg(g, lib, 3, r, n);
    g.replace_all_uses(n->outputs[0], fused->outputs[0]);
    g.erase_node(n);
    g.erase_node(lib);
    return true;
  }
  return false;
}

// relu|silu|gelu|sigmoid|tanh|hardswish|hardtanh|clamp(lib(...)) [single use,
// no activation yet] => lib(..., activation); also through one view of a 2-d
// linear.
bool fuse_activation(Graph& g, Node* n) {
  static const std::map<std::string, std::string> kActivations = {
      {"aten::relu", "relu"},
      {"aten::silu", "silu"},
      {"aten::gelu", "gelu"},
      {"aten::sigmoid", "sigmoid"},
      {"aten::tanh", "tanh"},
      {"aten::hardswish", "hardswish"},
      {"aten::hardtanh", "clamp"},
      {"aten::clamp", "clamp"},
  };
  auto it = kActivations.find(n->op);
  if (it == kActivations.end())
    return false;
  Value* y = n->tensor_arg(0);
  if (!y || !y->producer || !single_use(y, g))
    return false;
  Node* view = nullptr;
  Node* lib = producer_through_view(y, g, &view);
  if (!is_library(lib))
    return false;
  size_t act = activation_arg(lib);
  if (!std::get<std::string>(lib->const_arg(act)).empty())
    return false;
  std::string name = it->second;
  double alpha = 0, beta = 0;
  if (name == "gelu" && std::get<std::string>(n->const_arg(1)) == "tanh")
    name = "gelu_tanh";
  if (name == "clamp") {
    auto num = [](const AttrValue& v, double dflt) {
      if (std::holds_alternative<int64_t>(v))
        return static_cast<double>(std::get<int64_t>(v));
      if (std::holds_alternative<double>(v))
        return std::get<double>(v);
      return dflt;
    };
    alpha = num(n->const_arg(1), -3.4e38);
    beta = num(n->const_arg(2), 3.4e38);
  }
  lib->args[act] = Arg::constant(name);
  lib->args[act + 1] = Arg::constant(alpha);
  lib->args[act + 2] = Arg::constant(beta);
  g.replace_all_uses(n->outputs[0], view ? view->outputs[0] : lib->outputs[0]);
  g.erase_node(n);
  return true;
}

struct Rule {
  const char* name;
  c10::DeviceType device; // the rule fires only on nodes on this device
  bool (*apply)(Graph& g, Node* n);
};

// Tried in this order on every node until none applies.
const Rule kRules[] = {
    {"conv_to_library", c10::kCPU, conv_to_library},
    {"matmul_to_library", c10::kCPU, matmul_to_library},
    {"fuse_bias_add", c10::kCPU, fuse_bias_add},
    {"fuse_residual_add", c10::kCPU, fuse_residual_add},
    {"fuse_activation", c10::kCPU, fuse_activation},
};

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

#ifdef TORCH_PLUGIN_HAVE_CUDA
// --- CUDA rules (cuBLASLt: libs/cublaslt.h, runtime/cuda/cublaslt_step.cpp)
// ---

bool on_cuda(const Value* v) {
  return v && v->device.is_cuda();
}
bool cublaslt_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// The [N, K] weight of a matmul whose right operand wt is [K, N]: the input of
// the permute(w, [1, 0]) / t(w) that made wt (what AOTAutograd emits for
// F.linear); for a constant wt (freezing folded the permute), a constant that
// views it transposed (no copy); else a new view permute(wt, [1, 0]) inserted
// before `before`.
Value* transposed_weight(Graph& g, Value* wt, Node* before) {
  if (is_const(wt) && wt->constant.defined()) {
    Value* w = g.add_constant(wt->constant.t());
    w->device = wt->device; // the IR's device, also where a test moved it
    return w;
  }
  const Node* p = wt->producer;
  if (p && p->inputs.size() == 1 && p->inputs[0]->sizes.size() == 2) {
    bool transposes = p->op == "aten::t";
    if (p->op == "aten::permute" && p->args.size() > 1 &&
        p->args[1].kind == Arg::Kind::kConst &&
        std::holds_alternative<std::vector<int64_t>>(p->args[1].value))
      transposes = std::get<std::vector<int64_t>>(p->args[1].value) ==
          std::vector<int64_t>{1, 0};
    if (transposes)
      return p->inputs[0];
  }
  Node* perm = g.create_node(
      "aten::permute",
      "default",
      {wt},
      {Arg::tensor(0), Arg::constant(std::vector<int64_t>{1, 0})},
      1,
      before);
  perm->may_alias = true; // a view of wt
  Graph::set_type(
      perm->outputs[0],
      wt->dtype,
      {wt->sizes[1], wt->sizes[0]},
      {wt->strides[1], wt->strides[0]},
      wt->device);
  return perm->outputs[0];
}

// On CUDA values of one dtype (fp32, bf16, fp16), any operands:
//   mm(x, wt)                   => linear_pointwise(x, w, None)
//   addmm(b [N], x, wt)         => linear_pointwise(x, w, b)
//   addmm(c [M, N], x, wt)      => linear_pointwise(x, w, None, residual=c)
// with w [N, K] = wt^T (see transposed_weight); beta = alpha = 1.
bool cuda_matmul_to_library(Graph& g, Node* n) {
  bool addmm = n->op == "aten::addmm";
  if (!addmm && n->op != "aten::mm")
    return false;
  Value* y = n->outputs[0];
  if (!on_cuda(y) || !cublaslt_dtype(y->dtype))
    return false;
  Value* c = addmm ? n->tensor_arg(0) : nullptr;
  Value* x = n->tensor_arg(addmm ? 1 : 0);
  Value* wt = n->tensor_arg(addmm ? 2 : 1);
  if (!x || !wt || (addmm && !c))
    return false;
  for (const Value* v : {x, wt, c}) {
    if (v && (v->dtype != y->dtype || v->device != y->device))
      return false;
  }
  if (x->sizes.size() != 2 || wt->sizes.size() != 2 || y->sizes.size() != 2)
    return false;
  if (addmm) {
    for (size_t i = 3; i < 5 && i < n->args.size(); ++i) { // beta, alpha
      const AttrValue& v = n->const_arg(i);
      double s = std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v)
                                                    : std::get<double>(v);
      if (s != 1.0)
        return false;
    }
  }
  Value* bias = nullptr;
  Value* residual = nullptr;
  if (c && c->sizes == std::vector<int64_t>{wt->sizes[1]}) {
    bias = c;
  } else if (c && c->sizes == y->sizes) {
    residual = c;
  } else if (c) {
    return false; // a scalar or [1, N] addend: ATen's addmm
  }
  Value* w = transposed_weight(g, wt, n);
  Node* lib = make_library_node(
      g, "torch_plugin::linear_pointwise", n, x, w, bias, {}, y);
  if (residual) {
    Node* with_c = with_tensor_arg(g, lib, 3, residual, n);
    g.erase_node(lib);
    lib = with_c;
  }
  lib->outputs[0]->strides =
      contiguous_strides(y->sizes); // the op's output is contiguous
  g.replace_all_uses(y, lib->outputs[0]);
  g.erase_node(n);
  return true;
}

// relu(lib) or gelu(lib, approximate="tanh") [lib a CUDA linear_pointwise
// without an activation, single use; also through one view of it] =>
// lib(..., activation "relu" | "gelu_tanh"): cuBLASLt's RELU and GELU
// epilogues. The exact (erf) GELU and other activations stay separate ops
// (for the generated kernels): cuBLASLt has no epilogue for them.
bool cuda_fuse_activation(Graph& g, Node* n) {
  std::string name;
  if (n->op == "aten::relu") {
    name = "relu";
  } else if (
      n->op == "aten::gelu" && n->args.size() > 1 &&
      n->args[1].kind == Arg::Kind::kConst &&
      std::holds_alternative<std::string>(n->args[1].value) &&
      std::get<std::string>(n->args[1].value) == "tanh") {
    name = "gelu_tanh";
  } else {
    return false;
  }
  Value* y = n->tensor_arg(0);
  if (!on_cuda(y) || !y->producer || !single_use(y, g))
    return false;
  Node* view = nullptr;
  Node* lib = producer_through_view(y, g, &view);
  if (lib->op != "torch_plugin::linear_pointwise" ||
      !on_cuda(lib->outputs[0]) ||
      !std::get<std::string>(lib->const_arg(4)).empty() ||
      n->outputs[0]->dtype != y->dtype)
    return false;
  lib->args[4] = Arg::constant(name);
  lib->args[5] = Arg::constant(0.0);
  lib->args[6] = Arg::constant(0.0);
  g.replace_all_uses(n->outputs[0], view ? view->outputs[0] : lib->outputs[0]);
  g.erase_node(n);
  return true;
}

// Tried before kRules, in this order, on every node until none applies.
const Rule kCudaRules[] = {
    {"cuda_matmul_to_library", c10::kCUDA, cuda_matmul_to_library},
    {"cuda_fuse_activation", c10::kCUDA, cuda_fuse_activation},
};
#endif // TORCH_PLUGIN_HAVE_CUDA

bool run(Graph& g, const PassOptions& options) {
  if (!options.library_patterns)
    return false;
  bool changed = false;
#ifdef TORCH_PLUGIN_HAVE_CUDA
  for (const Rule& rule : kCudaRules) {
    for (Node* n : g.nodes()) {
      if (n->owner != &g)
        continue;
      if (rule.apply(g, n)) {
        changed = true;
        VLOG(1) << "library_patterns: rule " << rule.name << " fired";
      }
    }
  }
#endif
  for (const Rule& rule : kRules) {
    for (Node* n : g.nodes()) {
      if (n->owner != &g || !on_device(n, rule.device))
        continue;
      if (rule.apply(g, n)) {
        changed = true;
        VLOG(1) << "library_patterns: rule " << rule.name << " fired";
      }
    }
  }
  return changed;
}

} // namespace

const PassInfo kLibraryPatterns = {
    "library_patterns",
    "Convolutions and matrix products with constant weights become oneDNN library nodes; "
    "a following bias add (linear), residual add and activation join them. On CUDA, "
    "mm/addmm become cuBLASLt linear nodes with their bias and a relu/tanh-GELU epilogue.",
    run};

} // namespace torch_plugin::compiler
