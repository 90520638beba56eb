// cudnn_conv_run.cpp: the at::Tensor glue of cuDNN's conv_pointwise (see
// cudnn_conv.h): descriptors from tensors and torch's settings, the fallbacks,
// and the counters.
#include "libs/cudnn_conv.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <atomic>

namespace torch_plugin::libs::cudnn {

namespace detail {
int64_t plans_built();
int64_t no_engine();
void reset_plan_counters();
} // namespace detail

namespace {

std::atomic<int64_t> g_executions{0}, g_fused{0}, g_split{0}, g_aten{0};

constexpr auto kChannelsLast = at::MemoryFormat::ChannelsLast;

bool plan_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.const_data_ptr()) % 16 == 0;
}

bool is_nhwc(const at::Tensor& t) {
  return t.dim() == 4 && t.is_contiguous(kChannelsLast);
}

// A per-channel vector [K] the plan reads: contiguous, aligned, on x's device.
bool channel_vector(const at::Tensor& v, int64_t k, const at::Tensor& x) {
  return v.dim() == 1 && v.size(0) == k && v.is_contiguous() &&
      v.device() == x.device() && aligned16(v);
}

// ((y + b) * scale + shift) + residual with ATen ops after the convolution's
// output y (b added unless `bias_done`), computed in float32 when a vector is
// float32 and y is narrower (the unfused graph's order: mul and add in
// float32, then the conversion, then the residual add), then act.
at::Tensor epilogue_aten(
    const ConvArgs& a,
    at::Tensor y,
    bool bias_done,
    Activation activation) {
  const c10::ScalarType dtype = a.x.scalar_type();
  auto channels = [](const at::Tensor& v) {
    return v.reshape({1, -1, 1, 1});
  };
  const bool wide = (a.scale.defined() && a.scale.scalar_type() != dtype) ||
      (a.shift.defined() && a.shift.scalar_type() != dtype);
  if (!bias_done && a.b.defined())
    y = y + channels(a.b);
  if (wide)
    y = y.to(at::kFloat);
  if (a.scale.defined())
    y = y * channels(a.scale);
  if (a.shift.defined())
    y = y + channels(a.shift);
  if (wide)
    y = y.to(dtype);
  if (a.residual.defined())
    y = y + a.residual;
  if (!a.activation.empty())
    y = activation(y, a.activation, a.alpha, a.beta);
  return y;
}

// Writes `value` into out (when defined, channels-last) or returns it as
// channels-last.
at::Tensor deliver(at::Tensor value, at::Tensor out) {
  if (!out.defined())
    return value.contiguous(kChannelsLast);
  out.copy_(value);
  return out;
}

} // namespace

Counters counters() {
  Counters c;
  c.executions = g_executions.load();
  c.fused = g_fused.load();
  c.plans = detail::plans_built();
  c.no_engine = detail::no_engine();
  c.split = g_split.load();
  c.aten = g_aten.load();
  return c;
}

void reset_counters() {
  g_executions = 0;
  g_fused = 0;
  g_split = 0;
  g_aten = 0;
  detail::reset_plan_counters();
}

std::optional<ConvDesc> conv_desc(
    const ConvArgs& a,
    const at::Tensor& y,
    bool with_epilogue) {
  const at::Tensor& x = a.x;
  const at::Tensor& w = a.w;
  const c10::ScalarType dtype = x.scalar_type();
  if (!x.is_cuda() || !plan_dtype(dtype) || w.scalar_type() != dtype ||
      y.scalar_type() != dtype || w.device() != x.device() ||
      y.device() != x.device() || !is_nhwc(x) || !is_nhwc(w) || !is_nhwc(y) ||
      x.numel() == 0 || w.numel() == 0 || y.numel() == 0 || a.groups < 1 ||
      a.stride.size() != 2 || a.padding.size() != 2 || a.dilation.size() != 2)
    return std::nullopt;
  const int64_t k = w.size(0);
  if (x.size(1) != w.size(1) * a.groups || k % a.groups != 0 ||
      y.size(1) != k || !aligned16(x) || !aligned16(w) || !aligned16(y))
    return std::nullopt;
  ConvDesc d;
  d.x_sizes = x.sizes().vec();
  d.x_strides = x.strides().vec();
  d.w_sizes = w.sizes().vec();
  d.w_strides = w.strides().vec();
  d.y_sizes = y.sizes().vec();
  d.y_strides = y.strides().vec();
  d.stride = a.stride;
  d.padding = a.padding;
  d.dilation = a.dilation;
  d.dtype = dtype;
  d.vector_dtype = dtype;
  d.device = x.device().index();
  d.allow_tf32 = dtype == at::kFloat &&
      at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  d.deterministic = at::globalContext().deterministicCuDNN();
  if (!with_epilogue)
    return d;
  if (a.b.defined()) {
    if (a.b.scalar_type() != dtype || !channel_vector(a.b, k, x))
      return std::nullopt;
    d.bias = true;
  }
  for (const at::Tensor* v : {&a.scale, &a.shift}) {
    if (!v->defined())
      continue;
    const c10::ScalarType t = v->scalar_type();
    if ((t != dtype && t != at::kFloat) || !channel_vector(*v, k, x))
      return std::nullopt;
    if (d.scale || d.shift) {
      if (t != d.vector_dtype)
        return std::nullopt;
    }
    d.vector_dtype = t;
    (v == &a.scale ? d.scale : d.shift) = true;
  }
  if (a.residual.defined()) {
    const at::Tensor& r = a.residual;
    if (r.scalar_type() != dtype || r.sizes() != y.sizes() || !is_nhwc(r) ||
        r.device() != x.device() || !aligned16(r))
      return std::nullopt;
    d.residual = true;
    d.r_strides = r.strides().vec();
  }
  if (fuses_activation(a.activation))
    d.activation = a.activation;
  return d;
}

at::Tensor run_conv_pointwise(
    const ConvArgs& args,
    at::Tensor out,
    const ConvPlan* pinned,
    Activation activation) {
  c10::cuda::CUDAGuard guard(args.x.device());
  ConvArgs a = args;
  const bool planable = a.x.dim() == 4 && a.w.dim() == 4 &&
      plan_dtype(a.x.scalar_type()) && available();
  if (planable) {
    a.x = a.x.contiguous(kChannelsLast);
    a.w = a.w.contiguous(kChannelsLast);
    if (a.residual.defined() && a.residual.dim() == 4)
      a.residual = a.residual.contiguous(kChannelsLast);
  }
  at::Tensor y = out;
  if (planable && !y.defined()) {
    std::vector<int64_t> sizes = {a.x.size(0), a.w.size(0)};
    for (int i = 0; i < 2; ++i) {
      const int64_t kext = (a.w.size(2 + i) - 1) * a.dilation[i] + 1;
      sizes.push_back(
          (a.x.size(2 + i) + 2 * a.padding[i] - kext) / a.stride[i] + 1);
    }
    y = at::empty(sizes, a.x.options().memory_format(kChannelsLast));
  }
  std::optional<ConvDesc> d;
  if (planable)
    d = conv_desc(a, y, /*with_epilogue=*/true);
  if (d) {
    std::shared_ptr<const ConvPlan> held;
    const ConvPlan* plan = pinned;
    if (!plan || !(plan->desc() == *d)) {
      held = plan_conv(*d);
      plan = held.get();
    }
    ConvPointers p;
    p.x = a.x.const_data_ptr();
    p.w = a.w.const_data_ptr();
    p.b = d->bias ? a.b.const_data_ptr() : nullptr;
    p.scale = d->scale ? a.scale.const_data_ptr() : nullptr;
    p.shift = d->shift ? a.shift.const_data_ptr() : nullptr;
    p.r = d->residual ? a.residual.const_data_ptr() : nullptr;
    p.y = y.data_ptr();
    if (plan && plan->execute(p)) {
      ++g_executions;
      const bool all = d->bias == a.b.defined() &&
          d->scale == a.scale.defined() && d->shift == a.shift.defined() &&
          d->residual == a.residual.defined() &&
          d->activation == a.activation;
      if (d->bias || d->scale || d->shift || d->residual ||
          !d->activation.empty())
        ++g_fused;
      if (all)
        return y;
      // Only an activation cuDNN does not compute is left.
      return deliver(activation(y, a.activation, a.alpha, a.beta), out);
    }
  }
  // The convolution alone through cuDNN, the epilogue with ATen ops.
  std::optional<ConvDesc> alone;
  if (planable && y.defined())
    alone = conv_desc(a, y, /*with_epilogue=*/false);
  if (alone) {
    std::shared_ptr<const ConvPlan> plan = plan_conv(*alone);
    ConvPointers p;
    p.x = a.x.const_data_ptr();
    p.w = a.w.const_data_ptr();
    p.y = y.data_ptr();
    if (plan && plan->execute(p)) {
      ++g_executions;
      ++g_split;
      return deliver(epilogue_aten(a, y, /*bias_done=*/false, activation), out);
    }
  }
  ++g_aten;
  at::Tensor conv = at::convolution(
      args.x,
      args.w,
      args.b.defined() ? std::optional<at::Tensor>(args.b) : std::nullopt,
      args.stride,
      args.padding,
      args.dilation,
      false,
      std::vector<int64_t>(args.stride.size(), 0),
      args.groups);
  return deliver(epilogue_aten(args, conv, /*bias_done=*/true, activation), out);
}

} // namespace torch_plugin::libs::cudnn
