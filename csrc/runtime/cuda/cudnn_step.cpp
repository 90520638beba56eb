// cudnn_step.cpp: the executor's cuDNN step for CUDA
// torch_plugin::conv_pointwise nodes (libs/cudnn_conv.h), which the
// library_patterns pass makes from CUDA convolutions (conv_patterns.cpp).
//
// Built once per compiled graph: the node's shapes are static, so its cuDNN
// descriptor is derived here from the IR values (every operand channels-last,
// as the run passes them; a 1-d convolution as the 2-d one the run makes of
// it; pointers 16-byte aligned, as planned buffers are) and its plan is fetched
// from (or built into) the process-wide plan cache and pinned in the step. Each
// run derives the descriptor again from the actual tensors and torch's current
// settings (libs::cudnn::conv_desc, a few integer compares): when it equals the
// pinned one (the usual case) the pinned plan runs; when something differs
// (torch's TF32 or determinism setting changed after compilation, a misaligned
// pointer) the plan of the new descriptor comes from the cache, so a setting
// change is honoured at the next run and never runs a stale plan. Activations
// cuDNN does not compute, and the fallbacks, are run_conv_pointwise's.
// Registered for (CUDA, library) beside the cuBLASLt step (the registry tries
// each factory of a key in turn).
#include "ir/op_schema.h"
#include "ir/op_table.h"
#include "libs/cudnn_conv.h"
#include "runtime/step_registry.h"

#include <ATen/ATen.h>

namespace torch_plugin::runtime::cuda {

namespace {

namespace cd = libs::cudnn;
namespace cp = ir::schema::conv_pointwise;
using ir::Node;
using ir::Value;

const std::vector<int64_t>& ints(const Node& n, size_t arg) {
  return std::get<std::vector<int64_t>>(n.const_arg(arg));
}

// sizes as the plan sees them: a 1-d convolution's [N, C, L] as [N, C, 1, L]
// (run_conv_pointwise runs it as 2-d).
std::vector<int64_t> plan_sizes(std::vector<int64_t> sizes) {
  if (sizes.size() == 3)
    sizes.insert(sizes.begin() + 2, 1);
  return sizes;
}

// The descriptor the run will derive for n (see the file comment), or nullopt.
// Planned buffers are at least 16-byte aligned.
std::optional<cd::ConvDesc> desc_of(const Node& n) {
  const Value* x = n.tensor_arg(cp::kX);
  const Value* w = n.tensor_arg(cp::kW);
  const Value* out = n.outputs[0];
  const size_t rank = out->sizes.size();
  if (!x || !w || rank < 3 || rank > 5 || x->sizes.size() != rank ||
      w->sizes.size() != rank ||
      out->strides != ir::channels_last_strides(out->sizes))
    return std::nullopt;
  cd::ConvDesc d;
  auto channels_last = [](const std::vector<int64_t>& sizes) {
    return ir::channels_last_strides(plan_sizes(sizes));
  };
  d.x_sizes = plan_sizes(x->sizes);
  d.x_strides = channels_last(x->sizes);
  d.w_sizes = plan_sizes(w->sizes);
  d.w_strides = channels_last(w->sizes);
  d.y_sizes = plan_sizes(out->sizes);
  d.y_strides = channels_last(out->sizes);
  d.stride = ints(n, cp::kStride);
  d.padding = ints(n, cp::kPadding);
  d.dilation = ints(n, cp::kDilation);
  if (rank == 3) {
    d.stride.insert(d.stride.begin(), 1);
    d.padding.insert(d.padding.begin(), 0);
    d.dilation.insert(d.dilation.begin(), 1);
  }
  d.dtype = out->dtype;
  d.vector_dtype = out->dtype;
  d.device = out->device.index();
  d.allow_tf32 = d.dtype == at::kFloat &&
      at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  d.deterministic = at::globalContext().deterministicCuDNN();
  d.bias = n.tensor_arg(cp::kBias) != nullptr;
  for (size_t arg : {size_t{cp::kScale}, size_t{cp::kShift}}) {
    const Value* v = n.tensor_arg(arg);
    if (!v)
      continue;
    d.vector_dtype = v->dtype;
    (arg == cp::kScale ? d.scale : d.shift) = true;
  }
  if (const Value* r = n.tensor_arg(cp::kResidual)) {
    if (r->sizes != out->sizes || r->dtype != out->dtype)
      return std::nullopt;
    d.residual = true;
    d.r_strides = channels_last(r->sizes);
  }
  const std::string& act = std::get<std::string>(n.const_arg(cp::kActivation));
  if (cd::fuses_activation(act))
    d.activation = act;
  return d;
}

int slot_or(const Node& n, size_t arg, const SlotMap& slots) {
  const Value* v = n.tensor_arg(arg);
  return v ? slots.slot(v) : -1;
}

// Whether the operand is in the channels-last layout the plans read (1-d:
// [N, C, L] with stride 1 on C); run_conv_pointwise copies it otherwise.
bool channels_last(const at::Tensor& t) {
  switch (t.dim()) {
    case 3:
      return t.stride(1) == 1 || t.size(1) == 1;
    case 4:
      return t.is_contiguous(at::MemoryFormat::ChannelsLast);
    case 5:
      return t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
    default:
      return true;
  }
}

class CudnnConvStep final : public Step {
 public:
  CudnnConvStep(
      const Node& n,
      const SlotMap& slots,
      std::shared_ptr<const cd::ConvPlan> plan)
      : x_(slots.slot(n.tensor_arg(cp::kX))),
        w_(slots.slot(n.tensor_arg(cp::kW))),
        b_(slot_or(n, cp::kBias, slots)),
        r_(slot_or(n, cp::kResidual, slots)),
        scale_(slot_or(n, cp::kScale, slots)),
        shift_(slot_or(n, cp::kShift, slots)),
        out_(slots.slot(n.outputs[0])),
        plan_(std::move(plan)),
        buffer_(*n.outputs[0], slots) {
    args_.stride = ints(n, cp::kStride);
    args_.padding = ints(n, cp::kPadding);
    args_.dilation = ints(n, cp::kDilation);
    args_.groups = std::get<int64_t>(n.const_arg(cp::kGroups));
    args_.activation = std::get<std::string>(n.const_arg(cp::kActivation));
    args_.alpha = std::get<double>(n.const_arg(cp::kAlpha));
    args_.beta = std::get<double>(n.const_arg(cp::kBeta));
  }

  void run(Slots& s) const override {
    cd::ConvArgs a = args_;
    a.x = s[x_];
    a.w = s[w_];
    if (b_ >= 0)
      a.b = s[b_];
    if (r_ >= 0)
      a.residual = s[r_];
    if (scale_ >= 0)
      a.scale = s[scale_];
    if (shift_ >= 0)
      a.shift = s[shift_];
    at::Tensor y = buffer_.get(s); // channels-last (library_patterns)
    if (!channels_last(a.x))
      count_layout_copy(
          "cudnn conv input: sizes " + c10::str(a.x.sizes()) + " strides " +
          c10::str(a.x.strides()));
    if (!channels_last(a.w))
      count_layout_copy("cudnn conv weight");
    if (a.residual.defined() && !channels_last(a.residual))
      count_layout_copy(
          "cudnn conv residual: sizes " + c10::str(a.residual.sizes()) +
          " strides " + c10::str(a.residual.strides()));
    s[out_] = cd::run_conv_pointwise(
        a, std::move(y), plan_.get(), ir::apply_epilogue);
  }

  std::string describe() const override {
    return plan_ ? plan_->describe() : "cudnn conv_pointwise (no plan)";
  }

 private:
  int x_, w_, b_, r_, scale_, shift_, out_;
  cd::ConvArgs args_;
  std::shared_ptr<const cd::ConvPlan> plan_;
  OutputBuffer buffer_;
};

} // namespace

std::unique_ptr<Step> make_cudnn_step(const Node& node, const SlotMap& slots) {
  if (node.op != "torch_plugin::conv_pointwise" || node.outputs.size() != 1 ||
      !node.outputs[0]->device.is_cuda() || !cd::available())
    return nullptr;
  std::optional<cd::ConvDesc> d = desc_of(node);
  if (!d)
    return nullptr; // the op's CUDA kernel (the dispatcher) runs it
  return std::make_unique<CudnnConvStep>(node, slots, cd::plan_conv(*d));
}

namespace {

bool cudnn_probe(std::string* why) {
  return cd::available(why);
}

const StepRegistration kLibraryStep(
    c10::kCUDA,
    StepKind::kLibrary,
    make_cudnn_step);
const LibraryRegistration kCudnn("cudnn", cudnn_probe);

} // namespace

} // namespace torch_plugin::runtime::cuda
