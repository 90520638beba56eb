// library_patterns.cpp: pass "library_patterns".
//
// Rewrites convolutions and matrix products into library nodes, then grows
// each library node's epilogue. The rules are rows of data (pattern_rules.h):
// kRules lists them in the order they are tried, each with the devices it is
// for, the ops it starts from, its named constraints (schema positions by name:
// ir/op_schema.h) and its rewrite. A library node's schema
// (csrc/ops/library_ops.cpp):
//   conv_pointwise(x, w, b?, residual?, stride, padding, dilation, groups,
//                  activation, alpha, beta)
//   linear_pointwise(x, w, b?, residual?, activation, alpha, beta)
// Which ops become which epilogue (activation) is the op table's
// (ir/op_table.h, epilogue_of); which epilogues cuBLASLt fuses is its
// epilogue table's `cublaslt` column.
//
// CUDA rows (cuBLASLt: libs/cublaslt.h, runtime/cuda/cublaslt_step.cpp; tried
// first, firing only where linear_pointwise has a CUDA kernel, i.e. in a build
// with the CUDA parts): mm/addmm of any weight (no freezing needed: training
// graphs too) become linear_pointwise with the bias, and a single-use
// activation that cuBLASLt fuses (relu, tanh-GELU) joins as the epilogue.
// CPU rows (oneDNN): convolutions and matrix products with constant weights
// (freezing), then a bias add, a residual add and any activation. Their
// outputs: conv_pointwise writes channels_last (oneDNN's fast layout); the
// propagate_strides pass then updates the strides downstream. The convolution
// rows, CPU (oneDNN) and CUDA (cuDNN), are conv_patterns.cpp's; after the
// rows, a CUDA graph's outputs get eager's strides back (conv_patterns.h,
// restore_output_strides).
#include "compiler/passes/conv_patterns.h"
#include "compiler/passes/pattern_rules.h"
#include "ir/op_schema.h"

#include <ATen/ATen.h>

namespace torch_plugin::compiler {
namespace {

namespace addmm = schema::addmm;
namespace mm = schema::mm;
namespace add = schema::add;
namespace lib_args = schema::library;

const char* const kLinear = "torch_plugin::linear_pointwise";
const char* const kConv = "torch_plugin::conv_pointwise";

bool is_addmm(const Node* n) {
  return n->op == "aten::addmm";
}
// The operands of mm(x, wt) / addmm(c, x, wt).
Value* mat_x(const Node* n) {
  return n->tensor_arg(is_addmm(n) ? size_t{addmm::kMat1} : size_t{mm::kSelf});
}
Value* mat_wt(const Node* n) {
  return n->tensor_arg(is_addmm(n) ? size_t{addmm::kMat2} : size_t{mm::kMat2});
}
Value* mat_c(const Node* n) {
  return is_addmm(n) ? n->tensor_arg(addmm::kSelf) : nullptr;
}
// addmm's beta and alpha are 1 (mm has none).
bool scales_one(const Graph&, const Match& m) {
  if (!is_addmm(m.root))
    return true;
  for (size_t i : {addmm::kBeta, addmm::kAlpha}) {
    if (i >= m.root->args.size())
      continue;
    const AttrValue& v = m.root->const_arg(i);
    double s = std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v)
                                                  : std::get<double>(v);
    if (s != 1.0)
      return false;
  }
  return true;
}
// ---- CPU (oneDNN) ---------------------------------------------------------

// addmm(b, x, Wt) [Wt constant [K, N], fp32] => linear_pointwise(x, Wt^T, b)
// mm(x, Wt)       [Wt constant [K, N], fp32] => linear_pointwise(x, Wt^T, None)
void matmul_to_library(Graph& g, const Match& m) {
  Node* n = m.root;
  Value* b = mat_c(n);
  Value* wt = mat_wt(n);
  // A view: the executor's oneDNN step reads [N, K] or its transpose as it is.
  Value* w = g.add_constant(wt->constant.t());
  Value* bias = b;
  if (b && b->sizes.size() == 0)
    bias = g.add_constant(b->constant.expand({wt->sizes[1]}).contiguous());
  Node* lib =
      make_library_node(g, kLinear, n, mat_x(n), w, bias, {}, n->outputs[0]);
  g.replace_all_uses(n->outputs[0], lib->outputs[0]);
  g.erase_node(n);
}

// add(linear(x, W), c) or add(c, linear(x, W)), also through one view of the
// linear's output [linear has no bias, residual or activation yet, single use;
// c a constant of the output's dtype whose sizes are all 1 but the last, which
// is the linear's N; alpha 1] => linear(x, W, c as [N]). What a 3-d F.linear
// decomposes into when its input needs a copy first (nn.MultiheadAttention's
// in-projection on a transposed input: clone, view, mm, view, add).
bool bias_fits(const Graph&, const Match& m) {
  const Value* c = m.other;
  const int64_t out_features = m.lib->outputs[0]->sizes.back();
  if (c->dtype != m.y->dtype || c->sizes.empty() ||
      c->sizes.back() != out_features || c->sizes.size() > m.y->sizes.size() ||
      m.root->outputs[0]->sizes != m.y->sizes)
    return false;
  for (size_t i = 0; i + 1 < c->sizes.size(); ++i)
    if (c->sizes[i] != 1)
      return false;
  return true;
}
void fuse_bias_add(Graph& g, const Match& m) {
  const int64_t out_features = m.lib->outputs[0]->sizes.back();
  Value* bias =
      g.add_constant(m.other->constant.reshape({out_features}).contiguous());
  Node* fused = with_tensor_args(g, m.lib, {{lib_args::kBias, bias}}, m.lib);
  g.replace_all_uses(m.lib->outputs[0], fused->outputs[0]);
  replace_root(g, m, fused);
  g.erase_node(m.lib);
}

// ---- CUDA (cuBLASLt) ------------------------------------------------------

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
  namespace permute = schema::permute;
  if (p && p->inputs.size() == 1 && p->inputs[0]->sizes.size() == 2) {
    bool transposes = p->op == "aten::t";
    if (p->op == "aten::permute" && p->args.size() > permute::kDims &&
        p->args[permute::kDims].kind == Arg::Kind::kConst &&
        std::holds_alternative<std::vector<int64_t>>(
            p->args[permute::kDims].value))
      transposes =
          std::get<std::vector<int64_t>>(p->args[permute::kDims].value) ==
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
// with w [N, K] = wt^T (see transposed_weight); beta = alpha = 1. A scalar or
// [1, N] addend stays ATen's addmm.
bool addend_fits(const Graph&, const Match& m) {
  const Value* c = mat_c(m.root);
  return !c || c->sizes == std::vector<int64_t>{mat_wt(m.root)->sizes[1]} ||
      c->sizes == m.root->outputs[0]->sizes;
}
void cuda_matmul_to_library(Graph& g, const Match& m) {
  Node* n = m.root;
  Value* y = n->outputs[0];
  Value* c = mat_c(n);
  Value* wt = mat_wt(n);
  const bool is_bias = c && c->sizes == std::vector<int64_t>{wt->sizes[1]};
  Value* w = transposed_weight(g, wt, n);
  Node* lib = make_library_node(
      g, kLinear, n, mat_x(n), w, is_bias ? c : nullptr, {}, y);
  if (c && !is_bias) {
    Node* with_c = with_tensor_args(g, lib, {{lib_args::kResidual, c}}, n);
    g.erase_node(lib);
    lib = with_c;
  }
  lib->outputs[0]->strides =
      contiguous_strides(y->sizes); // the op's output is contiguous
  g.replace_all_uses(y, lib->outputs[0]);
  g.erase_node(n);
}

// The ops whose epilogue (some use of them) the library op can fuse: every
// pointwise op of the op table with an epilogue; with `cublaslt`, those with
// one cuBLASLt fuses.
std::vector<std::string> epilogue_ops(bool cublaslt) {
  std::vector<std::string> out;
  for (const OpInfo& op : op_table()) {
    if (op.category != OpCategory::kPointwise)
      continue;
    bool any = op.epilogue != EpilogueKind::kNone &&
        (!cublaslt || epilogue_info(op.epilogue).cublaslt);
    for (const OpVariant& v : op.variants)
      any |= v.epilogue != EpilogueKind::kNone &&
          (!cublaslt || epilogue_info(v.epilogue).cublaslt);
    if (any)
      out.push_back(op.name);
  }
  return out;
}

// The rows, tried in this order on every node until none applies: this
// file's, with conv_patterns.cpp's rows after the two CUDA matmul rows.
const std::vector<Rule>& rules() {
  static const std::vector<Rule> rows = [] {
    std::vector<Rule> own = {
      {TP_RULE_SOURCE,
       "cuda_matmul_to_library",
       kCuda,
       kLinear,
       {"aten::mm", "aten::addmm"},
       bind_root,
       {{"of a dtype cuBLASLt multiplies (fp32, bf16, fp16)",
         [](const Graph&, const Match& m) {
           return cublaslt_dtype(m.root->outputs[0]->dtype);
         }},
        {"all operands tensors",
         [](const Graph&, const Match& m) {
           return mat_x(m.root) && mat_wt(m.root) &&
               (!is_addmm(m.root) || mat_c(m.root));
         }},
        {"operands of the output's dtype and device",
         [](const Graph&, const Match& m) {
           const Value* y = m.root->outputs[0];
           for (const Value* v : m.root->inputs)
             if (v->dtype != y->dtype || v->device != y->device)
               return false;
           return true;
         }},
        {"2-d",
         [](const Graph&, const Match& m) {
           return mat_x(m.root)->sizes.size() == 2 &&
               mat_wt(m.root)->sizes.size() == 2 &&
               m.root->outputs[0]->sizes.size() == 2;
         }},
        {"beta = alpha = 1", scales_one},
        {"an addend that is a bias [N] or a residual [M, N]", addend_fits}},
       cuda_matmul_to_library},
      {TP_RULE_SOURCE,
       "cuda_fuse_activation",
       kCuda,
       kLinear,
       epilogue_ops(/*cublaslt=*/true),
       bind_through_view,
       {{"an activation cuBLASLt fuses (relu, tanh-GELU)",
         [](const Graph&, const Match& m) {
           auto e = epilogue_of(*m.root);
           return e && epilogue_info(e->kind).cublaslt;
         }},
        {"its operand used once", y_single_use},
        {"after a CUDA linear_pointwise",
         [](const Graph&, const Match& m) {
           return m.lib->op == kLinear && m.lib->outputs[0]->device.is_cuda();
         }},
        {"after a library node without an activation",
         [](const Graph&, const Match& m) {
           return !has_activation(m.lib);
         }},
        {"of its operand's dtype",
         [](const Graph&, const Match& m) {
           return m.root->outputs[0]->dtype == m.y->dtype;
         }}},
       fuse_activation},
      // conv_to_library, fuse_scale_shift (CPU) and the CUDA convolution
      // rows are conv_patterns.cpp's: inserted here (make_rules).
      {TP_RULE_SOURCE,
       "matmul_to_library",
       kCpu,
       kLinear,
       {"aten::mm", "aten::addmm"},
       bind_root,
       {{"a tensor input",
         [](const Graph&, const Match& m) {
           return mat_x(m.root) != nullptr;
         }},
        {"a constant weight",
         [](const Graph&, const Match& m) {
           return is_const(mat_wt(m.root));
         }},
        {"of a float32 input",
         [](const Graph&, const Match& m) {
           return mat_x(m.root)->dtype == at::kFloat;
         }},
        {"a constant bias of at most 1 dim",
         [](const Graph&, const Match& m) {
           const Value* b = mat_c(m.root);
           return !is_addmm(m.root) || (is_const(b) && b->sizes.size() <= 1);
         }},
        {"beta = alpha = 1", scales_one}},
       matmul_to_library},
      {TP_RULE_SOURCE,
       "fuse_bias_add",
       kCpu,
       kLinear,
       {"aten::add.Tensor"},
       bind_add_sides_through_view,
       {{"alpha = 1", alpha_one},
        {"a constant addend",
         [](const Graph&, const Match& m) {
           return is_const(m.other);
         }},
        {"its operand used once", y_single_use},
        {"after a linear_pointwise without bias, residual or activation",
         [](const Graph&, const Match& m) {
           return m.lib->op == kLinear && !m.lib->tensor_arg(lib_args::kBias) &&
               !m.lib->tensor_arg(lib_args::kResidual) &&
               !has_activation(m.lib);
         }},
        {"an addend [1, ..., N] of the output's dtype", bias_fits}},
       fuse_bias_add},
      {TP_RULE_SOURCE,
       "fuse_residual_add",
       kCpu,
       kConv, // and linear_pointwise: both have their CPU kernels together
       {"aten::add.Tensor"},
       bind_add_sides,
       {{"after a library node",
         [](const Graph&, const Match& m) {
           return is_library_node(*m.lib);
         }},
        {"its operand used once", y_single_use},
        {"after a library node without residual or activation",
         [](const Graph&, const Match& m) {
           return !m.lib->tensor_arg(lib_args::kResidual) &&
               !has_activation(m.lib);
         }},
        {"alpha = 1", alpha_one},
        {"an addend of the output's sizes and dtype, not the output itself",
         [](const Graph&, const Match& m) {
           return m.other->sizes == m.y->sizes &&
               m.other->dtype == m.y->dtype && m.other != m.y;
         }}},
       fuse_residual_add},
      {TP_RULE_SOURCE,
       "fuse_activation",
       kCpu,
       kConv, // and linear_pointwise
       epilogue_ops(/*cublaslt=*/false),
       bind_through_view,
       {{"its operand used once", y_single_use},
        {"after a library node",
         [](const Graph&, const Match& m) {
           return is_library_node(*m.lib);
         }},
        {"after a library node without an activation",
         [](const Graph&, const Match& m) {
           return !has_activation(m.lib);
         }},
        {"an op with an epilogue for this use",
         [](const Graph&, const Match& m) {
           return epilogue_of(*m.root).has_value();
         }}},
       fuse_activation},
    };
    const std::vector<Rule>& conv = conv_rules();
    own.insert(own.begin() + 2, conv.begin(), conv.end());
    return own;
  }();
  return rows;
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.library_patterns)
    return false;
  std::vector<std::vector<int64_t>> strides;
  for (const Value* v : g.outputs())
    strides.push_back(v->strides);
  // Without channels-last CUDA convolutions: every rule but conv_rules()'
  // cuda_conv_* ones (PassOptions::cuda_conv_channels_last says why).
  static const std::vector<Rule> without_cuda_convs = [] {
    std::vector<Rule> kept;
    for (const Rule& r : rules())
      if (std::string(r.name).rfind("cuda_conv_", 0) != 0)
        kept.push_back(r);
    return kept;
  }();
  bool changed = run_rules(
      "library_patterns",
      options.cuda_conv_channels_last ? rules() : without_cuda_convs,
      g,
      options);
  return restore_output_strides(g, strides, options) || changed;
}

} // namespace

const PassInfo kLibraryPatterns = {
    "library_patterns",
    "Convolutions and matrix products with constant weights become oneDNN library nodes; "
    "a following bias add (linear), residual add and activation join them. On CUDA, "
    "mm/addmm become cuBLASLt linear nodes with their bias and a relu/tanh-GELU epilogue.",
    run};

} // namespace torch_plugin::compiler
