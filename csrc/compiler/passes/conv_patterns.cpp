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
//   cuda_conv_to_library   convolution(x, w, b?) [1-d or 2-d (3-d stays
//   ATen's), not
//                          transposed, grouped, input channels per group a
//                          multiple of 8 (depthwise and the 3-channel stem stay
//                          ATen's: measured slower); x, w, b and the output of
//                          one dtype: fp32, bf16 or fp16; any weight, constant
//                          or not (no freezing needed)]
//                          => conv_pointwise(x, w, b), channels-last output
//   cuda_conv_scale_shift  add(mul(conv, s), t) [s, t per-channel constants
//                          [C, 1, ...] of the output's dtype], or
//                          _to_copy(add(mul(conv, s), t), dtype=conv's) [s, t
//                          float32, conv bf16/fp16: a batch norm under
//                          autocast, batch_norm_scale_shift]
//                          => conv_pointwise(..., scale=s, shift=t)
//   cuda_conv_residual_add add(conv, r) [r of the output's sizes and dtype]
//                          => conv_pointwise(..., residual=r)
//   cuda_conv_activation   act(conv) [an activation cuDNN's pointwise modes
//                          compute as ATen: relu, silu, gelu, gelu_tanh,
//                          sigmoid, tanh] => conv_pointwise(..., act)
// Layout: every CUDA conv_pointwise writes channels-last (NLC for 1-d, NHWC,
// NDHWC for 3-d: ir::channels_last_strides); its input is
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

bool cudnn_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool is_cuda_conv(const Node* n) {
  return n && n->op == kConv && n->outputs[0]->device.is_cuda();
}
bool no_epilogue_yet(const Node* lib) {
  return !lib->tensor_arg(lib_args::kResidual) && !has_activation(lib) &&
      !lib->tensor_arg(cp::kScale) && !lib->tensor_arg(cp::kShift);
}

// Constraints shared by rows (and pattern_rules.h's alpha_one, y_single_use).
bool not_transposed(const Graph&, const Match& m) {
  return !std::get<bool>(m.root->const_arg(conv::kTransposed));
}
// The CPU rows' (oneDNN) convolutions.
bool conv_2d(const Graph&, const Match& m) {
  return m.root->tensor_arg(conv::kWeight)->sizes.size() == 4 &&
      m.root->tensor_arg(conv::kInput)->sizes.size() == 4;
}
// 1-d, 2-d or 3-d: input and weight of one rank (3 to 5), stride, padding
// and dilation one entry per spatial dimension, groups an integer dividing
// the channels.
bool conv_nd(const Graph&, const Match& m) {
  const size_t rank = m.root->tensor_arg(conv::kInput)->sizes.size();
  const Value* w = m.root->tensor_arg(conv::kWeight);
  if (rank < 3 || rank > 5 || w->sizes.size() != rank)
    return false;
  for (size_t i : {conv::kStride, conv::kPadding, conv::kDilation}) {
    const auto* v = std::get_if<std::vector<int64_t>>(&m.root->const_arg(i));
    if (!v || v->size() != rank - 2)
      return false;
  }
  const auto* groups = std::get_if<int64_t>(&m.root->const_arg(conv::kGroups));
  const int64_t c = m.root->tensor_arg(conv::kInput)->sizes[1];
  return groups && *groups >= 1 && c == w->sizes[1] * *groups &&
      w->sizes[0] % *groups == 0;
}
bool after_plain_conv(const Graph&, const Match& m) {
  return m.lib->op == kConv && no_epilogue_yet(m.lib);
}
bool after_plain_cuda_conv(const Graph&, const Match& m) {
  return is_cuda_conv(m.lib) && no_epilogue_yet(m.lib);
}
bool after_cuda_conv(const Graph&, const Match& m) {
  return is_cuda_conv(m.lib);
}
// convolution(x, W, b) => conv_pointwise(x, W, b), output channels-last
// (NLC, NHWC, NDHWC).
void conv_to_library(Graph& g, const Match& m) {
  Node* n = m.root;
  Value* y = n->outputs[0];
  std::vector<Arg> middle;
  for (size_t i :
       {conv::kStride, conv::kPadding, conv::kDilation, conv::kGroups})
    middle.push_back(Arg::constant(n->const_arg(i)));
  Node* lib = make_library_node(
      g,
      kConv,
      n,
      n->tensor_arg(conv::kInput),
      n->tensor_arg(conv::kWeight),
      n->tensor_arg(conv::kBias),
      std::move(middle),
      y);
  lib->outputs[0]->strides = channels_last_strides(y->sizes);
  g.replace_all_uses(y, lib->outputs[0]);
  g.erase_node(n);
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

// A per-channel constant of y [N, C, spatial...]: [C, 1, ...] (the batch
// norm's, batch_norm_scale_shift) or [1, C, 1, ...], of y's rank less one or
// y's rank.
bool is_channel_constant(
    const Value* c,
    const Value* y,
    c10::ScalarType dtype) {
  const size_t rank = y->sizes.size();
  if (!is_const(c) || !c->constant.defined() || c->dtype != dtype || rank < 3)
    return false;
  std::vector<int64_t> shape(rank - 1, 1);
  shape[0] = y->sizes[1];
  if (c->sizes == shape)
    return true;
  shape.insert(shape.begin(), 1);
  return c->sizes == shape;
}
bool channel_constants(const Match& m, c10::ScalarType dtype) {
  return is_channel_constant(m.mid_other, m.y, dtype) &&
      is_channel_constant(m.other, m.y, dtype);
}

void fuse_scale_shift(Graph& g, const Match& m) {
  const int64_t channels = m.y->sizes[1];
  auto as_channels = [&](const Value* c) {
    Value* v = g.add_constant(c->constant.reshape({channels}).contiguous());
    v->device = c->device;
    return v;
  };
  Node* fused = with_tensor_args(
      g,
      m.lib,
      {{cp::kScale, as_channels(m.mid_other)},
       {cp::kShift, as_channels(m.other)}},
      m.lib);
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
        {"2-d (a 4-d input and weight)", conv_2d},
        {"not transposed", not_transposed},
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
           return channel_constants(m, at::kFloat);
         }}},
       fuse_scale_shift},
      // Grouped and depthwise convolutions and any channel count too: cuDNN
      // has engines for them (fp32 without alignment needs; bf16/fp16 ones
      // of odd channels); what it has none for runs ATen's convolution at run
      // time (run_conv_pointwise's fallbacks).
      {TP_RULE_SOURCE,
       "cuda_conv_to_library",
       kCuda,
       kConv,
       {"aten::convolution"},
       bind_root,
       {{"1-d, 2-d or 3-d (input and weight of one rank, 3 to 5; stride, "
         "padding and dilation one entry per spatial dimension; groups an "
         "integer dividing the channels)",
         conv_nd},
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
        {"1-d or 2-d (a 3-d convolution's fused cuDNN graph is not yet verified "
         "in a model on the GPU: an fp32 grouped 3-d block failed its check on an H200; "
         "the conv_pointwise op itself takes 3-d)",
         [](const Graph&, const Match& m) {
           return m.root->tensor_arg(conv::kInput)->sizes.size() <= 4;
         }},
        {"input channels per group a multiple of 8 (measured on H100, b3e56a6: "
         "cuDNN's fused NHWC engines ran MobileNetV3's depthwise convolutions "
         "and ResNet's 3-channel stem slower than ATen's convolution, which "
         "keeps them)",
         [](const Graph&, const Match& m) {
           return m.root->tensor_arg(conv::kWeight)->sizes[1] % 8 == 0;
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
         after_plain_cuda_conv},
        {"the convolution's output used once, by the mul, used once",
         chain_single_use},
        {"mul, add and per-channel constants of the convolution's dtype",
         [](const Graph&, const Match& m) {
           const c10::ScalarType t = m.y->dtype;
           return m.mid->outputs[0]->dtype == t &&
               m.root->outputs[0]->dtype == t && channel_constants(m, t);
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
         after_plain_cuda_conv},
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
                {to_copy::kLayout,
                 to_copy::kDevice,
                 to_copy::kPinMemory,
                 to_copy::kMemoryFormat}) {
             const AttrValue& v = r->args[i].value;
             if (!std::holds_alternative<std::monostate>(v) &&
                 !(i == to_copy::kPinMemory && std::get_if<bool>(&v) &&
                   !std::get<bool>(v)))
               return false;
           }
           return channel_constants(m, at::kFloat);
         }}},
       fuse_scale_shift},
      {TP_RULE_SOURCE,
       "cuda_conv_residual_add",
       kCuda,
       kConv,
       {"aten::add.Tensor"},
       bind_add_sides,
       {{"after a CUDA conv_pointwise", after_cuda_conv},
        {"its operand used once", y_single_use},
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
        {"its operand used once", y_single_use},
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
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (n->op != "aten::convolution" || n->inputs.size() < 2)
      continue;
    Value* x = n->tensor_arg(conv::kInput);
    const Value* out = n->outputs.empty() ? nullptr : n->outputs[0];
    if (!x || !out || !out->device.is_cuda() || x->sizes.size() != 4 ||
        x->dtype == c10::ScalarType::Double ||
        x->strides == channels_last_strides(x->sizes))
      continue;
    Node* copy = g.create_node(
        "aten::clone",
        "default",
        {x},
        {Arg::tensor(0), Arg::constant(int64_t{2})}, // channels_last
        1,
        n);
    Graph::set_type(
        copy->outputs[0],
        x->dtype,
        x->sizes,
        channels_last_strides(x->sizes),
        x->device);
    for (size_t i = 0; i < n->inputs.size(); ++i)
      if (n->inputs[i] == x)
        g.replace_input(n, i, copy->outputs[0]);
    changed = true;
  }
  kPropagateStrides.run(g, options);
  std::vector<Value*> outputs = g.outputs();
  for (size_t i = 0; i < outputs.size() && i < before.size(); ++i) {
    Value* v = outputs[i];
    if (v->strides == before[i] || !v->producer || v->sizes.empty())
      continue;
    int64_t format = -1; // lowering.py's memory_format codes
    const size_t rank = v->sizes.size();
    if (before[i] == contiguous_strides(v->sizes))
      format = 0;
    else if (
        (rank == 4 || rank == 5) &&
        before[i] == channels_last_strides(v->sizes))
      format = rank == 4 ? 2 : 3; // channels_last, channels_last_3d
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
