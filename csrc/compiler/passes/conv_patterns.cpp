// conv_patterns.cpp: the convolution rows of pass "library_patterns" (see
// library_patterns.cpp for the rows' form and the library node's schema).
//
// CPU rows (oneDNN): convolutions with constant weights (freezing), fp32,
// become conv_pointwise, then an inference batch norm's scale and shift join
// them; the residual add and the activation join through library_patterns'
// own CPU rows. Outputs channels_last (oneDNN's fast layout).
//
// CUDA rows (cuDNN's graph API: libs/cudnn_conv.h, runtime/cuda/cudnn_step.cpp;
// firing only where conv_pointwise has a CUDA kernel, i.e. in a build with
// cudnn-frontend's headers):
//   cuda_conv_to_library   convolution(x, w, b?) [2-d, not transposed, x, w, b
//                          and the output of one dtype: fp32, bf16 or fp16; any
//                          weight, constant or not (no freezing needed); not
//                          grouped and input channels a multiple of 8: where
//                          cuDNN's fused engines were measured faster]
//                          => conv_pointwise(x, w, b), channels-last output
//   cuda_conv_scale_shift  add(mul(conv, s), t) [s, t per-channel constants
//                          of the output's dtype], or
//                          _to_copy(add(mul(conv, s), t), dtype=conv's) [s, t
//                          float32, conv bf16/fp16: a batch norm under
//                          autocast, batch_norm_scale_shift]
//                          => conv_pointwise(..., scale=s, shift=t)
//   cuda_conv_residual_add add(conv, r) [r of the output's sizes and dtype]
//                          => conv_pointwise(..., residual=r)
//   cuda_conv_activation   act(conv) [an activation cuDNN's pointwise modes
//                          compute as ATen: relu, silu, gelu, gelu_tanh,
//                          sigmoid, tanh] => conv_pointwise(..., act)
// Layout: every CUDA conv_pointwise writes channels-last (NHWC); its input is
// made channels-last by the step (a graph input once; a convolution's output
// already is), and propagate_strides makes the ATen nodes and generated
// kernels between convolutions read and write NHWC. restore_output_strides
// gives graph outputs back eager's strides.
#include "compiler/passes/conv_patterns.h"

#include "ir/op_schema.h"

#include <ATen/ATen.h>

namespace torch_plugin::compiler {
namespace {

namespace conv = schema::convolution;
namespace add = schema::add;
namespace cp = schema::conv_pointwise;
namespace lib_args = schema::library;
namespace to_copy = schema::to_copy;

const char* const kConv = "torch_plugin::conv_pointwise";

// The activations cuDNN's pointwise modes compute as ATen does (the mapping:
// libs/cudnn_conv.cpp, activation_mode; the two lists must agree).
bool cudnn_activation(std::string_view name) {
  return name == "relu" || name == "silu" || name == "gelu" ||
      name == "gelu_tanh" || name == "sigmoid" || name == "tanh";
}

bool has_activation(const Node* lib) {
  return !std::get<std::string>(lib->const_arg(activation_arg(*lib))).empty();
}
bool is_one(const AttrValue& v) {
  return std::holds_alternative<int64_t>(v) ? std::get<int64_t>(v) == 1
                                            : std::get<double>(v) == 1.0;
}
bool alpha_one(const Graph&, const Match& m) {
  return is_one(m.root->const_arg(add::kAlpha));
}
bool is_cuda_conv(const Node* n) {
  return n && n->op == kConv && n->outputs[0]->device.is_cuda();
}
bool no_epilogue_yet(const Node* lib) {
  return !lib->tensor_arg(lib_args::kResidual) && !has_activation(lib) &&
      !lib->tensor_arg(cp::kScale) && !lib->tensor_arg(cp::kShift);
}
std::vector<int64_t> channels_last(const std::vector<int64_t>& s) {
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

// convolution(x, W, b) => conv_pointwise(x, W, b), channels_last output.
void conv_to_library(Graph& g, const Match& m) {
  Node* n = m.root;
  Value* y = n->outputs[0];
  std::vector<Value*> inputs = {
      n->tensor_arg(conv::kInput), n->tensor_arg(conv::kWeight)};
  std::vector<Arg> args = {Arg::tensor(0), Arg::tensor(1)};
  if (Value* b = n->tensor_arg(conv::kBias)) {
    inputs.push_back(b);
    args.push_back(Arg::tensor(2));
  } else {
    args.push_back(Arg::constant(std::monostate{}));
  }
  args.push_back(Arg::constant(std::monostate{})); // residual
  for (size_t i : {conv::kStride, conv::kPadding, conv::kDilation, conv::kGroups})
    args.push_back(Arg::constant(n->const_arg(i)));
  args.push_back(Arg::constant(std::string())); // activation, alpha, beta
  args.push_back(Arg::constant(0.0));
  args.push_back(Arg::constant(0.0));
  Node* lib = g.create_node(kConv, "default", inputs, args, 1, n);
  Graph::set_type(
      lib->outputs[0], y->dtype, y->sizes, channels_last(y->sizes), y->device);
  g.replace_all_uses(y, lib->outputs[0]);
  g.erase_node(n);
}

bool conv_2d(const Graph&, const Match& m) {
  return m.root->tensor_arg(conv::kWeight)->sizes.size() == 4 &&
      m.root->tensor_arg(conv::kInput)->sizes.size() == 4;
}
bool not_transposed(const Graph&, const Match& m) {
  return !std::get<bool>(m.root->const_arg(conv::kTransposed));
}

// add(mul(y, s), t), either operand order of each; with `convert`, root is
// _to_copy(add(...)) and the add is found behind it.
std::vector<Match> bind_scale_shift_at(Node* root, Node* add_node) {
  std::vector<Match> out;
  if (!add_node || add_node->op != "aten::add" ||
      add_node->overload != "Tensor")
    return out;
  for (size_t side : {add::kSelf, add::kOther}) {
    Value* product = add_node->tensor_arg(side);
    Value* t =
        add_node->tensor_arg(side == add::kSelf ? add::kOther : add::kSelf);
    Node* mul = product ? product->producer : nullptr;
    if (!t || !mul || mul->op != "aten::mul" || mul->overload != "Tensor" ||
        mul->outputs.size() != 1)
      continue;
    for (size_t mside : {size_t{0}, size_t{1}}) {
      Value* y = mul->tensor_arg(mside);
      Value* s = mul->tensor_arg(1 - mside);
      if (!y || !s || !y->producer)
        continue;
      Match m;
      m.root = root;
      m.view = root == add_node ? nullptr : add_node; // the add behind a copy
      m.mid = mul;
      m.y = y;
      m.lib = y->producer;
      m.mid_other = s;
      m.other = t;
      out.push_back(m);
    }
  }
  return out;
}
std::vector<Match> bind_scale_shift(const Graph&, Node* root) {
  return bind_scale_shift_at(root, root);
}
std::vector<Match> bind_converted_scale_shift(const Graph&, Node* root) {
  Value* in = root->tensor_arg(to_copy::kSelf);
  return bind_scale_shift_at(root, in ? in->producer : nullptr);
}
Node* add_of(const Match& m) {
  return m.view ? m.view : m.root;
}

bool is_channel_constant(
    const Value* c,
    const Value* y,
    c10::ScalarType dtype) {
  if (!is_const(c) || !c->constant.defined() || c->dtype != dtype ||
      y->sizes.size() != 4)
    return false;
  const int64_t channels = y->sizes[1];
  return c->sizes == std::vector<int64_t>{channels, 1, 1} ||
      c->sizes == std::vector<int64_t>{1, channels, 1, 1};
}

void fuse_scale_shift(Graph& g, const Match& m) {
  const int64_t channels = m.y->sizes[1];
  auto as_channels = [&](const Value* c) {
    Value* v = g.add_constant(c->constant.reshape({channels}).contiguous());
    v->device = c->device;
    return v;
  };
  const Node* lib = m.lib;
  std::vector<Value*> inputs = lib->inputs;
  std::vector<Arg> args = lib->args;
  args.resize(cp::kShift + 1, Arg::constant(std::monostate{}));
  inputs.push_back(as_channels(m.mid_other));
  args[cp::kScale] = Arg::tensor(static_cast<int64_t>(inputs.size()) - 1);
  inputs.push_back(as_channels(m.other));
  args[cp::kShift] = Arg::tensor(static_cast<int64_t>(inputs.size()) - 1);
  Node* fused = g.create_node(lib->op, lib->overload, inputs, args, 1, m.lib);
  const Value* out = lib->outputs[0];
  Graph::set_type(
      fused->outputs[0], out->dtype, out->sizes, out->strides, out->device);
  g.replace_all_uses(m.root->outputs[0], fused->outputs[0]);
  g.erase_node(m.root);
  if (m.view)
    g.erase_node(m.view);
  g.erase_node(m.mid);
  g.erase_node(m.lib);
}

// The scale-shift chain's values: conv output used once by the mul, the mul's
// output once by the add (and the add's once by the copy), same sizes.
bool chain_single_use(const Graph& g, const Match& m) {
  const Node* a = add_of(m);
  return single_use(m.y, g) && single_use(m.mid->outputs[0], g) &&
      (!m.view || single_use(a->outputs[0], g)) &&
      m.mid->outputs[0]->sizes == m.y->sizes &&
      a->outputs[0]->sizes == m.y->sizes;
}

// The CPU rows' constraint on the convolution before the chain.
bool after_plain_conv(const Graph&, const Match& m) {
  return m.lib->op == kConv && no_epilogue_yet(m.lib);
}

// The bind_add_sides of library_patterns.cpp: y = one operand of the add
// (produced by lib), other = the other.
std::vector<Match> bind_add_sides(const Graph&, Node* root) {
  std::vector<Match> out;
  for (size_t side : {add::kSelf, add::kOther}) {
    Match m;
    m.root = root;
    m.y = root->tensor_arg(side);
    m.other = root->tensor_arg(side == add::kSelf ? add::kOther : add::kSelf);
    if (!m.y || !m.other || !m.y->producer)
      continue;
    m.lib = m.y->producer;
    out.push_back(m);
  }
  return out;
}

// add(conv, r) => conv(..., residual=r), the node moved down to the add (r
// must be computed before it runs).
void fuse_residual_add(Graph& g, const Match& m) {
  const Node* lib = m.lib;
  std::vector<Value*> inputs = lib->inputs;
  std::vector<Arg> args = lib->args;
  inputs.push_back(m.other);
  args[lib_args::kResidual] =
      Arg::tensor(static_cast<int64_t>(inputs.size()) - 1);
  Node* fused = g.create_node(lib->op, lib->overload, inputs, args, 1, m.root);
  const Value* out = lib->outputs[0];
  Graph::set_type(
      fused->outputs[0], out->dtype, out->sizes, out->strides, out->device);
  g.replace_all_uses(m.root->outputs[0], fused->outputs[0]);
  g.erase_node(m.root);
  g.erase_node(m.lib);
}

// act(conv) => conv(..., act).
void fuse_activation(Graph& g, const Match& m) {
  const EpilogueUse e = *epilogue_of(*m.root);
  const size_t act = activation_arg(*m.lib);
  m.lib->args[act] = Arg::constant(std::string(epilogue_info(e.kind).name));
  m.lib->args[act + 1] = Arg::constant(e.alpha);
  m.lib->args[act + 2] = Arg::constant(e.beta);
  g.replace_all_uses(m.root->outputs[0], m.lib->outputs[0]);
  g.erase_node(m.root);
}

std::vector<std::string> activation_roots() {
  std::vector<std::string> out;
  for (const OpInfo& op : op_table()) {
    if (op.category != OpCategory::kPointwise)
      continue;
    bool any = op.epilogue != EpilogueKind::kNone &&
        cudnn_activation(epilogue_info(op.epilogue).name);
    for (const OpVariant& v : op.variants)
      any |= v.epilogue != EpilogueKind::kNone &&
          cudnn_activation(epilogue_info(v.epilogue).name);
    if (any)
      out.push_back(op.name);
  }
  return out;
}

bool cudnn_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

std::vector<Rule> make_rules() {
  return {
      {TP_RULE_SOURCE,
       "conv_to_library",
       kCpu,
       kConv,
       {"aten::convolution"},
       bind_root,
       {{"a constant weight",
         [](const Graph&, const Match& m) {
           return is_const(m.root->tensor_arg(conv::kWeight));
         }},
        {"a constant bias or none",
         [](const Graph&, const Match& m) {
           const Value* b = m.root->tensor_arg(conv::kBias);
           return !b || is_const(b);
         }},
        {"2-d (a 4-d weight)",
         [](const Graph&, const Match& m) {
           return m.root->tensor_arg(conv::kWeight)->sizes.size() == 4;
         }},
        {"transposed", not_transposed},
        {"of a float32 input",
         [](const Graph&, const Match& m) {
           return m.root->tensor_arg(conv::kInput)->dtype == at::kFloat;
         }}},
       conv_to_library},
      {TP_RULE_SOURCE,
       "fuse_scale_shift",
       kCpu,
       kConv,
       {"aten::add.Tensor"},
       bind_scale_shift,
       {{"alpha = 1", alpha_one},
        {"after a conv_pointwise without residual, activation, scale or shift",
         after_plain_conv},
        {"the convolution's output used once, by the mul, used once",
         chain_single_use},
        {"a float32 output",
         [](const Graph&, const Match& m) {
           return m.y->dtype == at::kFloat &&
               m.mid->outputs[0]->dtype == at::kFloat &&
               m.root->outputs[0]->dtype == at::kFloat;
         }},
        {"per-channel constants [C, 1, 1] or [1, C, 1, 1]",
         [](const Graph&, const Match& m) {
           return is_channel_constant(m.mid_other, m.y, at::kFloat) &&
               is_channel_constant(m.other, m.y, at::kFloat);
         }}},
       fuse_scale_shift},
      {TP_RULE_SOURCE,
       "cuda_conv_to_library",
       kCuda,
       kConv,
       {"aten::convolution"},
       bind_root,
       {{"2-d (a 4-d input and weight)", conv_2d},
        {"not transposed", not_transposed},
        {"input, weight, bias and output of one dtype cuDNN convolves "
         "(fp32, bf16, fp16)",
         [](const Graph&, const Match& m) {
           const c10::ScalarType t = m.root->outputs[0]->dtype;
           const Value* b = m.root->tensor_arg(conv::kBias);
           const Value* x = m.root->tensor_arg(conv::kInput);
           const Value* w = m.root->tensor_arg(conv::kWeight);
           return cudnn_dtype(t) && x && w && x->dtype == t && w->dtype == t &&
               (!b || (b->dtype == t && b->sizes.size() == 1));
         }},
        {"not grouped, input channels a multiple of 8 (measured on H100: cuDNN's "
         "fused NHWC engines for depthwise convolutions and for the 3-channel stem ran "
         "slower than ATen's convolution, which keeps them)",
         [](const Graph&, const Match& m) {
           const auto* groups = std::get_if<int64_t>(&m.root->const_arg(conv::kGroups));
           return groups && *groups == 1 &&
               m.root->tensor_arg(conv::kInput)->sizes[1] % 8 == 0;
         }},
        {"stride, padding and dilation of 2 entries, groups an integer",
         [](const Graph&, const Match& m) {
           for (size_t i : {conv::kStride, conv::kPadding, conv::kDilation}) {
             const auto* v =
                 std::get_if<std::vector<int64_t>>(&m.root->const_arg(i));
             if (!v || v->size() != 2)
               return false;
           }
           return std::holds_alternative<int64_t>(
               m.root->const_arg(conv::kGroups));
         }}},
       conv_to_library},
      {TP_RULE_SOURCE,
       "cuda_conv_scale_shift",
       kCuda,
       kConv,
       {"aten::add.Tensor"},
       bind_scale_shift,
       {{"alpha = 1", alpha_one},
        {"after a CUDA conv_pointwise without residual, activation, scale or "
         "shift",
         [](const Graph&, const Match& m) {
           return is_cuda_conv(m.lib) && no_epilogue_yet(m.lib);
         }},
        {"the convolution's output used once, by the mul, used once",
         chain_single_use},
        {"mul, add and per-channel constants of the convolution's dtype",
         [](const Graph&, const Match& m) {
           const c10::ScalarType t = m.y->dtype;
           return m.mid->outputs[0]->dtype == t &&
               m.root->outputs[0]->dtype == t &&
               is_channel_constant(m.mid_other, m.y, t) &&
               is_channel_constant(m.other, m.y, t);
         }}},
       fuse_scale_shift},
      {TP_RULE_SOURCE,
       "cuda_conv_scale_shift_autocast",
       kCuda,
       kConv,
       {"aten::_to_copy"},
       bind_converted_scale_shift,
       {{"add's alpha = 1",
         [](const Graph&, const Match& m) {
           return is_one(m.view->const_arg(add::kAlpha));
         }},
        {"after a CUDA conv_pointwise without residual, activation, scale or "
         "shift",
         [](const Graph&, const Match& m) {
           return is_cuda_conv(m.lib) && no_epilogue_yet(m.lib);
         }},
        {"the convolution's output used once, by the mul, used once",
         chain_single_use},
        {"a bf16/fp16 convolution, float32 mul, add and constants, converted "
         "back to the convolution's dtype on its device",
         [](const Graph&, const Match& m) {
           const c10::ScalarType t = m.y->dtype;
           const Node* r = m.root;
           if (t == at::kFloat || r->outputs[0]->dtype != t ||
               r->args.size() < to_copy::kCount ||
               m.mid->outputs[0]->dtype != at::kFloat ||
               m.view->outputs[0]->dtype != at::kFloat ||
               r->outputs[0]->device != m.y->device)
             return false;
           for (size_t i :
                {to_copy::kLayout, to_copy::kDevice, to_copy::kPinMemory,
                 to_copy::kMemoryFormat}) {
             const AttrValue& v = r->args[i].value;
             if (!std::holds_alternative<std::monostate>(v) &&
                 !(i == to_copy::kPinMemory && std::get_if<bool>(&v) &&
                   !std::get<bool>(v)))
               return false;
           }
           return is_channel_constant(m.mid_other, m.y, at::kFloat) &&
               is_channel_constant(m.other, m.y, at::kFloat);
         }}},
       fuse_scale_shift},
      {TP_RULE_SOURCE,
       "cuda_conv_residual_add",
       kCuda,
       kConv,
       {"aten::add.Tensor"},
       bind_add_sides,
       {{"after a CUDA conv_pointwise",
         [](const Graph&, const Match& m) {
           return is_cuda_conv(m.lib);
         }},
        {"its operand used once",
         [](const Graph& g, const Match& m) {
           return single_use(m.y, g);
         }},
        {"after a conv_pointwise without residual or activation",
         [](const Graph&, const Match& m) {
           return !m.lib->tensor_arg(lib_args::kResidual) &&
               !has_activation(m.lib);
         }},
        {"alpha = 1", alpha_one},
        {"an addend of the output's sizes and dtype, not the output itself",
         [](const Graph&, const Match& m) {
           return m.other->sizes == m.y->sizes &&
               m.other->dtype == m.y->dtype && m.other != m.y &&
               m.root->outputs[0]->dtype == m.y->dtype &&
               m.other->device == m.y->device;
         }}},
       fuse_residual_add},
      {TP_RULE_SOURCE,
       "cuda_conv_activation",
       kCuda,
       kConv,
       activation_roots(),
       bind_through_view,
       {{"directly after a CUDA conv_pointwise",
         [](const Graph&, const Match& m) {
           return is_cuda_conv(m.lib) && !m.view;
         }},
        {"its operand used once",
         [](const Graph& g, const Match& m) {
           return single_use(m.y, g);
         }},
        {"after a conv_pointwise without an activation",
         [](const Graph&, const Match& m) {
           return !has_activation(m.lib);
         }},
        {"an activation cuDNN computes as ATen (relu, silu, gelu, gelu_tanh, "
         "sigmoid, tanh), of its operand's dtype",
         [](const Graph&, const Match& m) {
           auto e = epilogue_of(*m.root);
           return e && cudnn_activation(epilogue_info(e->kind).name) &&
               m.root->outputs[0]->dtype == m.y->dtype;
         }}},
       fuse_activation},
  };
}

} // namespace

const std::vector<Rule>& conv_rules() {
  static const std::vector<Rule> rows = make_rules();
  return rows;
}

bool restore_output_strides(
    Graph& g,
    const std::vector<std::vector<int64_t>>& before,
    const PassOptions& options) {
  bool any = false;
  for (const Node* n : g.nodes())
    any |= is_cuda_conv(n);
  if (!any)
    return false;
  kPropagateStrides.run(g, options);
  bool changed = false;
  std::vector<Value*> outputs = g.outputs();
  for (size_t i = 0; i < outputs.size() && i < before.size(); ++i) {
    Value* v = outputs[i];
    if (v->strides == before[i] || !v->producer || v->sizes.empty())
      continue;
    int64_t format = -1; // lowering.py's memory_format codes
    if (before[i] == contiguous_strides(v->sizes))
      format = 0;
    else if (v->sizes.size() == 4 && before[i] == channels_last(v->sizes))
      format = 2;
    if (format < 0)
      continue; // strides no memory format gives: left as they are
    Node* copy = g.create_node(
        "aten::clone",
        "default",
        {v},
        {Arg::tensor(0), Arg::constant(format)},
        1,
        nullptr);
    Graph::set_type(copy->outputs[0], v->dtype, v->sizes, before[i], v->device);
    outputs[i] = copy->outputs[0];
    changed = true;
  }
  if (changed)
    g.set_outputs(outputs);
  return changed;
}

} // namespace torch_plugin::compiler
