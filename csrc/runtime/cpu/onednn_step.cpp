// onednn_step.cpp: the CPU device's library steps, for library nodes
// (torch_plugin::conv_pointwise, torch_plugin::linear_pointwise), which the
// library_patterns pass creates: oneDNN primitives (libs/onednn_loader.h).
//
// A primitive built once, weights borrowed (or prepacked:
// onednn_weights=packed), per run one execute() into the output's preplanned
// arena buffer (memory_planning) or a new tensor. When oneDNN does not load (or
// for a node it cannot take), nullptr: the executor then calls the node's
// torch_plugin:: op through the dispatcher (csrc/ops). A runtime step (it reads
// IR nodes), so it lives here and not in csrc/libs, whose wrappers
// (libs/onednn.h) know nothing of the IR. Built only with oneDNN
// (csrc/CMakeLists.txt); registered for (CPU, library), with the library
// "onednn" (library_available) and an options listener that hands the oneDNN
// library's path to the loader (runtime/options.h).
#include "ir/op_schema.h"
#include "runtime/options.h"
#include "runtime/step_registry.h"

#include "libs/onednn_loader.h"

#include <ATen/ops/empty.h>

namespace torch_plugin::runtime::cpu {

namespace {

using ir::Node;
namespace conv = ir::schema::conv_pointwise;
namespace linear = ir::schema::linear_pointwise;

libs::Epilogue epilogue_of(const Node& n, size_t residual_arg, size_t act_arg) {
  libs::Epilogue e;
  e.residual = n.tensor_arg(residual_arg) != nullptr;
  e.activation = std::get<std::string>(n.const_arg(act_arg));
  e.alpha = static_cast<float>(std::get<double>(n.const_arg(act_arg + 1)));
  e.beta = static_cast<float>(std::get<double>(n.const_arg(act_arg + 2)));
  return e;
}

const float* data_or_null(const ir::Value* v) {
  return v ? v->constant.data_ptr<float>() : nullptr;
}

// A convolution's epilogue, with its per-channel scale and shift (contiguous
// [OC] constants, library_patterns' fuse_scale_shift) when it has them.
libs::Epilogue conv_epilogue(const Node& n) {
  libs::Epilogue e = epilogue_of(n, conv::kResidual, conv::kActivation);
  for (auto [arg, field] :
       {std::pair{conv::kScale, &libs::Epilogue::scale},
        std::pair{conv::kShift, &libs::Epilogue::shift}}) {
    const ir::Value* v = n.tensor_arg(arg);
    TORCH_CHECK(
        !v ||
            (v->constant.defined() && v->constant.is_contiguous() &&
             v->constant.dim() == 1),
        "conv_pointwise: a per-channel scale or shift must be a contiguous "
        "[OC] constant");
    e.*field = data_or_null(v);
  }
  return e;
}

// How convolution steps hold their weight (RuntimeOptions::onednn_weights:
// packed|borrowed, default borrowed): packed keeps a copy in oneDNN's blocked
// layout beside the user's parameter, borrowed reads the parameter itself.
libs::WeightMode weight_mode() {
  return runtime_options().onednn_weights == "packed"
      ? libs::WeightMode::kPacked
      : libs::WeightMode::kBorrowed;
}

// A constant oneDNN can describe by its strides as it lies (any dense layout),
// else a contiguous copy (an expanded or overlapping view: rare).
at::Tensor dense(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.contiguous();
}

class ConvStep final : public Step {
 public:
  // Borrowed (the default), the step reads the frozen weight where it lies (the
  // module's own parameter: no second copy; libs::WeightMode) and oneDNN
  // reorders it per run into a per-thread scratch buffer; packed, a blocked
  // copy is made once and the IR's constant may be released.
  ConvStep(const Node& n, const SlotMap& slots)
      : weight_(dense(n.tensor_arg(conv::kW)->constant)),
        conv_(
            n.tensor_arg(conv::kX)->sizes,
            n.outputs[0]->sizes,
            weight_.data_ptr<float>(),
            weight_.sizes().vec(),
            weight_.strides().vec(),
            data_or_null(n.tensor_arg(conv::kBias)),
            std::get<std::vector<int64_t>>(n.const_arg(conv::kStride)),
            std::get<std::vector<int64_t>>(n.const_arg(conv::kPadding)),
            std::get<std::vector<int64_t>>(n.const_arg(conv::kDilation)),
            std::get<int64_t>(n.const_arg(conv::kGroups)),
            conv_epilogue(n),
            weight_mode()),
        in_(slots.slot(n.tensor_arg(conv::kX))),
        residual_(
            n.tensor_arg(conv::kResidual)
                ? slots.slot(n.tensor_arg(conv::kResidual))
                : -1),
        out_(slots.slot(n.outputs[0])),
        buffer_(*n.outputs[0], slots),
        weight_id_(
            weight_mode() == libs::WeightMode::kPacked
                ? n.tensor_arg(conv::kW)->id
                : -1),
        bias_id_(
            n.tensor_arg(conv::kBias) ? n.tensor_arg(conv::kBias)->id : -1),
        scale_id_(
            n.tensor_arg(conv::kScale) ? n.tensor_arg(conv::kScale)->id : -1),
        shift_id_(
            n.tensor_arg(conv::kShift) ? n.tensor_arg(conv::kShift)->id : -1) {
    if (weight_id_ >= 0)
      weight_ = at::Tensor(); // packed: oneDNN holds its own copy
  }

  // The bias, scale and shift are always copies; the weight when packed, not
  // when borrowed.
  bool owns_copy_of(const ir::Value& v) const override {
    return v.id == weight_id_ || v.id == bias_id_ || v.id == scale_id_ ||
        v.id == shift_id_;
  }

  void run(Slots& s) const override {
    constexpr auto cl = at::MemoryFormat::ChannelsLast;
    at::Tensor x = s[in_].contiguous(cl);
    at::Tensor y = buffer_.get(s); // channels_last strides (library_patterns)
    at::Tensor r = residual_ >= 0 ? s[residual_].contiguous(cl) : at::Tensor();
    conv_.execute(
        x.data_ptr<float>(),
        r.defined() ? r.data_ptr<float>() : nullptr,
        y.data_ptr<float>());
    s[out_] = std::move(y);
  }
  std::string describe() const override {
    return "onednn conv_pointwise " + conv_.implementation();
  }

 private:
  at::Tensor weight_; // the frozen weight oneDNN reads (borrowed)
  libs::OneDnnConvRef conv_;
  int in_, residual_, out_;
  OutputBuffer buffer_;
  int64_t weight_id_, bias_id_, scale_id_, shift_id_;
};

// How linear steps hold their weight (RuntimeOptions::onednn_weights:
// packed|borrowed).
libs::OneDnnLinear::Weights linear_weights() {
  return runtime_options().onednn_weights == "packed"
      ? libs::OneDnnLinear::Weights::kPacked
      : libs::OneDnnLinear::Weights::kBorrowed;
}

// The [N, K] weight as oneDNN reads it: row-major [N, K], or the transpose of a
// row-major [K, N] (GPT-2's Conv1D weight), without a copy; else a contiguous
// copy.
at::Tensor linear_weight(const at::Tensor& w) {
  if (w.is_contiguous() || w.t().is_contiguous())
    return w;
  return w.contiguous();
}

class LinearStep final : public Step {
 public:
  LinearStep(const Node& n, const SlotMap& slots)
      : weight_(linear_weight(n.tensor_arg(linear::kW)->constant)),
        linear_(
            n.tensor_arg(linear::kX)->sizes[0],
            n.tensor_arg(linear::kW)->sizes[0],
            n.tensor_arg(linear::kW)->sizes[1],
            weight_.data_ptr<float>(),
            data_or_null(n.tensor_arg(linear::kBias)),
            epilogue_of(n, linear::kResidual, linear::kActivation),
            linear_weights(),
            !weight_.is_contiguous()),
        in_(slots.slot(n.tensor_arg(linear::kX))),
        residual_(
            n.tensor_arg(linear::kResidual)
                ? slots.slot(n.tensor_arg(linear::kResidual))
                : -1),
        out_(slots.slot(n.outputs[0])),
        buffer_(*n.outputs[0], slots),
        weight_id_(
            linear_weights() == libs::OneDnnLinear::Weights::kPacked
                ? n.tensor_arg(linear::kW)->id
                : -1),
        bias_id_(
            n.tensor_arg(linear::kBias) ? n.tensor_arg(linear::kBias)->id
                                        : -1) {
    if (weight_id_ >= 0)
      weight_ = at::Tensor(); // packed: oneDNN holds its own copy
  }

  // The bias is always a copy; the weight when packed (kPacked), not when
  // borrowed (weight_ reads the constant itself).
  bool owns_copy_of(const ir::Value& v) const override {
    return v.id == weight_id_ || v.id == bias_id_;
  }

  void run(Slots& s) const override {
    at::Tensor x = s[in_].contiguous();
    at::Tensor y = buffer_.get(s);
    at::Tensor r = residual_ >= 0 ? s[residual_].contiguous() : at::Tensor();
    linear_.execute(
        x.data_ptr<float>(),
        r.defined() ? r.data_ptr<float>() : nullptr,
        y.data_ptr<float>());
    s[out_] = std::move(y);
  }
  std::string describe() const override {
    return "onednn linear_pointwise " + linear_.implementation();
  }

 private:
  at::Tensor weight_; // the frozen [N, K] weight oneDNN reads (kBorrowed)
  libs::OneDnnLinearRef linear_;
  int in_, residual_, out_;
  OutputBuffer buffer_;
  int64_t weight_id_, bias_id_;
};

bool takes(const Node& n) {
  for (const ir::Value* v : n.inputs) {
    if (v->dtype != c10::ScalarType::Float)
      return false;
  }
  const ir::Value* w = n.tensor_arg(ir::schema::library::kW);
  return w && w->kind == ir::ValueKind::kConstant;
}

std::unique_ptr<Step> make_onednn_step(
    const ir::Node& node,
    const SlotMap& slots) {
  if (node.outputs.empty() || !node.outputs[0]->device.is_cpu())
    return nullptr;
  if (!libs::onednn_available()) // _onednn.so not loadable: the ATen kernel
                                 // runs
    return nullptr;
  if (node.op == "torch_plugin::conv_pointwise" && takes(node))
    return std::make_unique<ConvStep>(node, slots);
  if (node.op == "torch_plugin::linear_pointwise" && takes(node) &&
      node.tensor_arg(linear::kX)->sizes.size() == 2 &&
      node.outputs[0]->is_contiguous())
    return std::make_unique<LinearStep>(node, slots);
  return nullptr;
}

bool onednn_probe(std::string* why) {
  return libs::onednn_available(why);
}

void hand_options_to_loader(const RuntimeOptions& options) {
  libs::set_onednn_library(options.onednn_library);
}

const StepRegistration kLibraryStep(
    c10::kCPU,
    StepKind::kLibrary,
    make_onednn_step);
const LibraryRegistration kOneDnn("onednn", onednn_probe);
const OptionsListenerRegistration kOptionsListener(hand_options_to_loader);

} // namespace

} // namespace torch_plugin::runtime::cpu
