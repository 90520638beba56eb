// cudnn_conv_run.cpp: the at::Tensor glue of cuDNN's conv_pointwise (see
// cudnn_conv.h): descriptors from tensors and torch's settings, the fallbacks,
// and the counters.
#include "libs/cudnn_conv.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>

#include <atomic>

namespace torch_plugin::libs::cudnn {

namespace detail {
void plan_counters(Counters* c);
void reset_plan_counters();
} // namespace detail

namespace {

std::atomic<int64_t> g_executions{0}, g_fused{0}, g_split{0}, g_aten{0};

bool plan_dtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf;
}

// PyTorch's getAlignment (ATen/native/cudnn/Conv_v8.cpp), at most 16: the
// largest power of two dividing the pointer.
int64_t alignment(const at::Tensor& t) {
  const auto address = reinterpret_cast<uintptr_t>(t.const_data_ptr());
  int64_t a = 1;
  while (a < 16 && address % (2 * a) == 0)
    a *= 2;
  return a;
}

bool is_channels_last(const at::Tensor& t) {
  switch (t.dim()) {
    case 3:
      return t.transpose(1, 2).is_contiguous();
    case 4:
      return t.is_contiguous(at::MemoryFormat::ChannelsLast);
    case 5:
      return t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
    default:
      return false;
  }
}

// The channels-last strides of `sizes` (channels innermost). A tensor that
// is_channels_last has them in every dimension of a size above 1; the plan
// key takes them rather than the tensor's own, which may differ in a
// dimension of size 1 (a depthwise weight [C, 1, R, S] contiguous is
// channels-last too) and would miss the step's pinned plan.
std::vector<int64_t> channels_last_strides(c10::IntArrayRef sizes) {
  std::vector<int64_t> strides(sizes.size(), 1);
  int64_t s = sizes[1];
  for (size_t i = sizes.size(); i-- > 2;) {
    strides[i] = s;
    s *= sizes[i];
  }
  strides[0] = s;
  return strides;
}

// t (3-d, 4-d or 5-d) channels-last: itself when it is, else a copy.
at::Tensor to_channels_last(const at::Tensor& t) {
  switch (t.dim()) {
    case 3:
      return t.transpose(1, 2).contiguous().transpose(1, 2);
    case 4:
      return t.contiguous(at::MemoryFormat::ChannelsLast);
    case 5:
      return t.contiguous(at::MemoryFormat::ChannelsLast3d);
    default:
      return t;
  }
}

// A per-channel vector [K] the plan reads: contiguous, on x's device.
bool channel_vector(const at::Tensor& v, int64_t k, const at::Tensor& x) {
  return v.dim() == 1 && v.size(0) == k && v.is_contiguous() &&
      v.device() == x.device();
}

// A 1-d convolution's arguments as a 2-d one's over [N, C, 1, L] (PyTorch's
// view1d_as_2d): x, w and a 3-d residual channels-last (NLC) and unsqueezed,
// so that they are NHWC (a residual of fewer dimensions keeps broadcasting as
// against [N, K, L]); stride 1, padding 0, dilation 1 in the unit dimension.
ConvArgs as_2d(const ConvArgs& args) {
  ConvArgs a = args;
  a.x = to_channels_last(a.x).unsqueeze(2);
  a.w = to_channels_last(a.w).unsqueeze(2);
  if (a.residual.defined() && a.residual.dim() >= 2)
    a.residual = to_channels_last(a.residual).unsqueeze(-2);
  a.stride.insert(a.stride.begin(), 1);
  a.padding.insert(a.padding.begin(), 0);
  a.dilation.insert(a.dilation.begin(), 1);
  return a;
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
  std::vector<int64_t> vshape(y.dim(), 1);
  vshape[1] = -1;
  auto channels = [&](const at::Tensor& v) {
    return v.reshape(vshape);
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
    return to_channels_last(value);
  out.copy_(value);
  return out;
}

} // namespace

Counters counters() {
  Counters c;
  c.executions = g_executions.load();
  c.fused = g_fused.load();
  detail::plan_counters(&c);
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
  const int64_t rank = x.dim();
  const size_t spatial = static_cast<size_t>(rank - 2);
  if (!x.is_cuda() || (rank != 4 && rank != 5) || w.dim() != rank ||
      y.dim() != rank || !plan_dtype(dtype) || w.scalar_type() != dtype ||
      y.scalar_type() != dtype || w.device() != x.device() ||
      y.device() != x.device() || !is_channels_last(x) ||
      !is_channels_last(w) || !is_channels_last(y) || x.numel() == 0 ||
      w.numel() == 0 || y.numel() == 0 || a.groups < 1 ||
      a.stride.size() != spatial || a.padding.size() != spatial ||
      a.dilation.size() != spatial)
    return std::nullopt;
  const int64_t k = w.size(0);
  if (x.size(1) != w.size(1) * a.groups || k % a.groups != 0 || y.size(1) != k)
    return std::nullopt;
  int64_t align = std::min({alignment(x), alignment(w), alignment(y)});
  ConvDesc d;
  d.x_sizes = x.sizes().vec();
  d.x_strides = channels_last_strides(x.sizes());
  d.w_sizes = w.sizes().vec();
  d.w_strides = channels_last_strides(w.sizes());
  d.y_sizes = y.sizes().vec();
  d.y_strides = channels_last_strides(y.sizes());
  d.stride = a.stride;
  d.padding = a.padding;
  d.dilation = a.dilation;
  d.dtype = dtype;
  d.vector_dtype = dtype;
  d.device = x.device().index();
  d.allow_tf32 = dtype == at::kFloat &&
      at::globalContext().allowTF32CuDNN(at::Float32Op::CONV);
  d.deterministic = at::globalContext().deterministicCuDNN();
  d.alignment = align;
  if (!with_epilogue)
    return d;
  if (a.b.defined()) {
    if (a.b.scalar_type() != dtype || !channel_vector(a.b, k, x))
      return std::nullopt;
    d.bias = true;
    align = std::min(align, alignment(a.b));
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
    align = std::min(align, alignment(*v));
  }
  if (a.residual.defined()) {
    const at::Tensor& r = a.residual;
    if (r.scalar_type() != dtype || r.sizes() != y.sizes() ||
        !is_channels_last(r) || r.device() != x.device())
      return std::nullopt;
    d.residual = true;
    d.r_strides = channels_last_strides(r.sizes());
    align = std::min(align, alignment(r));
  }
  d.alignment = align;
  if (fuses_activation(a.activation))
    d.activation = a.activation;
  return d;
}

at::Tensor run_conv_pointwise(
    const ConvArgs& args,
    at::Tensor out,
    const ConvPlan* pinned,
    Activation activation) {
  if (args.x.dim() == 3 && args.w.dim() == 3 && args.stride.size() == 1 &&
      args.padding.size() == 1 && args.dilation.size() == 1) {
    at::Tensor out2d = out.defined() ? out.unsqueeze(2) : out;
    return run_conv_pointwise(as_2d(args), out2d, pinned, activation)
        .squeeze(2);
  }
  c10::cuda::CUDAGuard guard(args.x.device());
  ConvArgs a = args;
  const int64_t rank = a.x.dim();
  const bool planable = (rank == 4 || rank == 5) && a.w.dim() == rank &&
      a.stride.size() == static_cast<size_t>(rank - 2) &&
      a.padding.size() == a.stride.size() &&
      a.dilation.size() == a.stride.size() && plan_dtype(a.x.scalar_type()) &&
      available();
  if (planable) {
    a.x = to_channels_last(a.x);
    a.w = to_channels_last(a.w);
    if (a.residual.defined() && a.residual.dim() == rank)
      a.residual = to_channels_last(a.residual);
  }
  at::Tensor y = out;
  if (planable && !y.defined()) {
    std::vector<int64_t> sizes = {a.x.size(0), a.w.size(0)};
    for (int64_t i = 0; i < rank - 2; ++i) {
      const int64_t kext = (a.w.size(2 + i) - 1) * a.dilation[i] + 1;
      sizes.push_back(
          (a.x.size(2 + i) + 2 * a.padding[i] - kext) / a.stride[i] + 1);
    }
    y = at::empty(
        sizes,
        a.x.options().memory_format(
            rank == 4 ? at::MemoryFormat::ChannelsLast
                      : at::MemoryFormat::ChannelsLast3d));
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
          d->residual == a.residual.defined() && d->activation == a.activation;
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
  return deliver(
      epilogue_aten(args, conv, /*bias_done=*/true, activation), out);
}

} // namespace torch_plugin::libs::cudnn
