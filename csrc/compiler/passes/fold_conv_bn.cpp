// fold_conv_bn.cpp: pass "fold_conv_bn".
//
// Rule (freezing only):
//   _native_batch_norm_legit_no_training(convolution(x, W, b), g, beta, mean,
//   var, eps)
//     => convolution(x, W * s, (b - mean) * s + beta)   with s = g / sqrt(var +
//     eps)
// Constraints: W, b (or None), g, beta, mean, var are constants; the
// convolution's output has the batch norm as its only user; only output 0 of
// the batch norm is used. The folded weight keeps W's dtype: s is computed in
// fp64, W * s in W's dtype or fp32 if narrower (one rounding per element); the
// bias arithmetic in fp64.
#include "compiler/passes/pass.h"

#include <ATen/ATen.h>

namespace torch_plugin::compiler {
namespace {

bool is_const(const Value* v) {
  return v && v->kind == ValueKind::kConstant;
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.freeze)
    return false;
  bool changed = false;
  for (Node* bn : g.nodes()) {
    if (bn->op != "aten::_native_batch_norm_legit_no_training")
      continue;
    Value* y = bn->tensor_arg(0);
    if (!y || !y->producer || y->producer->op != "aten::convolution" ||
        y->uses.size() != 1)
      continue;
    Node* conv = y->producer;
    bool transposed = std::get<bool>(conv->const_arg(6));
    Value* w = conv->tensor_arg(1);
    Value* b = conv->tensor_arg(2);
    Value* gamma = bn->tensor_arg(1);
    Value* beta = bn->tensor_arg(2);
    Value* mean = bn->tensor_arg(3);
    Value* var = bn->tensor_arg(4);
    if (transposed || !is_const(w) || (b && !is_const(b)) || !is_const(gamma) ||
        !is_const(beta) || !is_const(mean) || !is_const(var))
      continue;
    if (!bn->outputs[1]->uses.empty() || !bn->outputs[2]->uses.empty() ||
        g.is_output(bn->outputs[1]) || g.is_output(bn->outputs[2]))
      continue;
    double eps = std::get<double>(bn->const_arg(6));
    // The per-channel vectors in fp64; the weight (most of the data: a cast of
    // it to fp64 and back was most of this pass's time) is scaled in fp32 (or
    // its own wider dtype), so each element is rounded once, as Inductor's
    // freezing does.
    auto f = [](const Value* v) {
      return v->constant.to(at::kDouble);
    };
    at::Tensor scale = f(gamma) / (f(var) + eps).sqrt();
    std::vector<int64_t> shape(w->sizes.size(), 1);
    shape[0] = -1;
    at::ScalarType compute = at::promote_types(w->dtype, at::kFloat);
    at::Tensor new_w =
        at::mul(w->constant.to(compute), scale.to(compute).reshape(shape))
            .to(w->dtype)
            .contiguous();
    at::Tensor b0 = b ? f(b) : at::zeros_like(f(mean));
    at::Tensor new_b = ((b0 - f(mean)) * scale + f(beta)).to(w->dtype);

    std::vector<Arg> args = conv->args;
    std::vector<Value*> inputs = {
        conv->tensor_arg(0), g.add_constant(new_w), g.add_constant(new_b)};
    args[0] = Arg::tensor(0);
    args[1] = Arg::tensor(1);
    args[2] = Arg::tensor(2);
    Node* folded =
        g.create_node("aten::convolution", "default", inputs, args, 1, bn);
    Value* out = bn->outputs[0];
    Graph::set_type(
        folded->outputs[0], out->dtype, out->sizes, out->strides, out->device);
    g.replace_all_uses(out, folded->outputs[0]);
    g.erase_node(bn);
    g.erase_node(conv);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kFoldConvBatchNorm = {
    "fold_conv_bn",
    "Folds an inference batch norm into the preceding convolution's weight and bias when "
    "both are constants (freezing only).",
    run};

} // namespace torch_plugin::compiler
