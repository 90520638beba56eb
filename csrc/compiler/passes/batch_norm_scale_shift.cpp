// batch_norm_scale_shift.cpp: pass "batch_norm_scale_shift" (both pipelines).
//
// Rule (freezing only):
//   _native_batch_norm_legit_no_training(y, g, beta, mean, var, momentum, eps)
//   native_batch_norm(y, g, beta, mean, var, training=False, momentum, eps)
//     => add(mul(y, s), t)   s = g / sqrt(var + eps), t = beta - mean * s,
//                            both constants of shape [C, 1, ..., 1]
// Constraints: g, beta, mean, var are constants of y's dtype, which is
// float32 or float64 (for a narrower y, mul(y, s) would promote to s's dtype,
// and s rounded to y's dtype would lose precision: the batch norm stays an ATen
// call); y has at least two dimensions; only output 0 is used.
//
// Why not fold the batch norm into the convolution (the pass fold_conv_bn did
// that until issue #27): folding writes a scaled copy of the convolution's
// weight, which the module keeps too (a second copy of every convolution
// weight; ResNet-50: 90-100 MB, on the CPU held by oneDNN's prepacked copy);
// here the scale and shift are C numbers each, and fusion puts the mul and
// add into the generated kernel that follows anyway (the relu, the residual
// add), so the batch norm costs no weight copy. On the CPU the oneDNN
// convolution then reads the module's own weight (runtime/cpu/onednn_step.cpp)
// and the relu and residual add run in that generated kernel rather than as
// oneDNN post-ops.
// On CUDA, a bf16/fp16 y with float32 parameters (a batch norm under
// autocast, which ATen computes in float32 and rounds to y's dtype) becomes
// _to_copy(add(mul(y, s), t), y's dtype) with s and t float32: one generated
// kernel, or the float32 scale and shift of a cuDNN convolution's epilogue
// (conv_patterns.cpp, cuda_conv_scale_shift_autocast).
// Numerics: s and t are computed in float64 and rounded once to y's dtype; the
// kernel computes y * s + t (ATen computes (y - mean) * invstd * g + beta in
// y's accumulation type): the same up to a few ulps, as folding is.
#include "compiler/passes/pass.h"
#include "ir/op_schema.h"

#include <ATen/ATen.h>

namespace torch_plugin::compiler {
namespace {

bool is_const_of(const Value* v, c10::ScalarType dtype) {
  return v && v->kind == ValueKind::kConstant && v->dtype == dtype &&
      v->constant.defined();
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.freeze)
    return false;
  bool changed = false;
  for (Node* bn : g.nodes()) {
    // The eps argument's position: the inference op, or native_batch_norm
    // with training=False (a graph traced without AOTAutograd's
    // functionalization keeps it).
    int eps_index = -1;
    if (bn->op == "aten::_native_batch_norm_legit_no_training") {
      eps_index = 6;
    } else if (bn->op == "aten::native_batch_norm") {
      const AttrValue& training = bn->const_arg(5);
      if (!std::holds_alternative<bool>(training) || std::get<bool>(training))
        continue;
      eps_index = 7;
    } else {
      continue;
    }
    Value* y = bn->tensor_arg(0);
    if (!y || y->sizes.size() < 2)
      continue;
    // A bf16/fp16 y with float32 statistics (autocast) on CUDA: computed in
    // float32 and converted back (see the file comment).
    const bool narrow = y->device.is_cuda() &&
        (y->dtype == at::kBFloat16 || y->dtype == at::kHalf);
    if (y->dtype != at::kFloat && y->dtype != at::kDouble && !narrow)
      continue;
    const c10::ScalarType param = narrow ? at::kFloat : y->dtype;
    Value* gamma = bn->tensor_arg(1);
    Value* beta = bn->tensor_arg(2);
    Value* mean = bn->tensor_arg(3);
    Value* var = bn->tensor_arg(4);
    if (!is_const_of(mean, param) || !is_const_of(var, param) ||
        (gamma && !is_const_of(gamma, param)) ||
        (beta && !is_const_of(beta, param)))
      continue;
    if (!bn->outputs[1]->uses.empty() || !bn->outputs[2]->uses.empty() ||
        g.is_output(bn->outputs[1]) || g.is_output(bn->outputs[2]))
      continue;
    const AttrValue& eps_arg = bn->const_arg(eps_index);
    if (!std::holds_alternative<double>(eps_arg))
      continue;
    const double eps = std::get<double>(eps_arg);
    auto f = [](const Value* v) {
      return v->constant.to(at::kDouble);
    };
    at::Tensor inv = (f(var) + eps).rsqrt();
    at::Tensor scale = gamma ? f(gamma) * inv : inv;
    at::Tensor shift = -f(mean) * scale;
    if (beta)
      shift = shift + f(beta);
    std::vector<int64_t> shape(y->sizes.size() - 1, 1);
    shape[0] = -1;
    auto as_constant = [&](const at::Tensor& t) {
      return g.add_constant(t.to(param).reshape(shape).contiguous());
    };
    Value* out = bn->outputs[0];
    Node* mul = g.create_node(
        "aten::mul",
        "Tensor",
        {y, as_constant(scale)},
        {Arg::tensor(0), Arg::tensor(1)},
        1,
        bn);
    Graph::set_type(
        mul->outputs[0], param, out->sizes, out->strides, out->device);
    Node* add = g.create_node(
        "aten::add",
        "Tensor",
        {mul->outputs[0], as_constant(shift)},
        {Arg::tensor(0), Arg::tensor(1), Arg::constant(int64_t{1})},
        1,
        bn);
    Graph::set_type(
        add->outputs[0], param, out->sizes, out->strides, out->device);
    Value* result = add->outputs[0];
    if (narrow) {
      namespace to_copy = schema::to_copy;
      std::vector<Arg> args(to_copy::kCount, Arg::constant(std::monostate{}));
      args[to_copy::kSelf] = Arg::tensor(0);
      args[to_copy::kDtype] =
          Arg::constant(static_cast<int64_t>(out->dtype));
      args[to_copy::kNonBlocking] = Arg::constant(false);
      Node* back = g.create_node(
          "aten::_to_copy", "default", {result}, std::move(args), 1, bn);
      Graph::set_type(
          back->outputs[0], out->dtype, out->sizes, out->strides, out->device);
      result = back->outputs[0];
    }
    g.replace_all_uses(out, result);
    g.erase_node(bn);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kBatchNormScaleShift = {
    "batch_norm_scale_shift",
    "Rewrites an inference batch norm with constant statistics as a per-channel "
    "multiply and add (freezing only), which fusion puts into the next "
    "generated kernel: no folded copy of a convolution weight.",
    run};

} // namespace torch_plugin::compiler
