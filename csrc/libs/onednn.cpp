// onednn.cpp: oneDNN convolution and matmul with post-ops (see onednn.h).
#include "libs/onednn.h"

#include <dnnl.hpp>

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>
#include <stdexcept>
#include <unordered_map>

namespace torch_plugin::libs {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

#if defined(DNNL_CPU_RUNTIME) && DNNL_CPU_RUNTIME == DNNL_RUNTIME_SYCL
// Intel's PyPI wheel `onednn` is the SYCL build: its CPU engine is a SYCL CPU
// device, which the OpenCL CPU runtime (libintelocl.so, from the wheel
// intel-opencl-rt, installed beside libdnnl.so) provides. Nothing registers
// that runtime with the OpenCL ICD loader (no /etc/OpenCL/vendors entry), so
// without OCL_ICD_FILENAMES engine creation fails with "SYCL cpu devices
// queried but not found". Name it, unless the user already set the variable;
// the ICD loader reads it on its first call, inside the engine's creation.
void point_opencl_at_cpu_runtime() {
  if (std::getenv("OCL_ICD_FILENAMES"))
    return;
  Dl_info info;
  if (!dladdr(reinterpret_cast<void*>(&dnnl_version), &info) || !info.dli_fname)
    return;
  std::string dir = info.dli_fname;
  size_t slash = dir.rfind('/');
  if (slash == std::string::npos)
    return;
  std::string ocl = dir.substr(0, slash) + "/libintelocl.so";
  struct stat st;
  if (stat(ocl.c_str(), &st) == 0)
    setenv("OCL_ICD_FILENAMES", ocl.c_str(), 0);
}
#else
void point_opencl_at_cpu_runtime() {}
#endif

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    point_opencl_at_cpu_runtime();
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// One stream per calling thread, made on its first call: a stream is cheap on
// oneDNN's OpenMP build but is a SYCL queue on the wheel's SYCL build, where
// making one per execute() doubled the fixed cost of a call (a 16x16x16 matmul
// on the 2-core dev machine: 13.7 us with a new stream, 7.0 us reused; Debian's
// 2.6: 0.6 us either way). execute() may run on several threads (onednn.h), so
// the stream is the thread's own.
dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

void append_eltwise(
    dnnl::post_ops& ops,
    dnnl::algorithm alg,
    float alpha,
    float beta) {
#if DNNL_VERSION_MAJOR >= 3
  ops.append_eltwise(alg, alpha, beta);
#else
  ops.append_eltwise(1.f, alg, alpha, beta);
#endif
}

// A convolution's per-channel scale and shift (Epilogue) on oneDNN 3.x: the
// scale multiplies the weight as it is reordered into oneDNN's layout (a
// reorder with per-output-channel source scales: borrowed weights are
// reordered before every execute() anyway, packed ones once), and the bias
// becomes b * scale + shift: conv(x, W * s) + (b * s + t), no post-op at all
// (ResNet-50 batch 8, one thread: binary mul and add post-ops cost the 1x1
// convolutions 8-15%, about what the separate kernel cost). The numerics of
// folding a batch norm into the weight (the old fold_conv_bn): each weight
// rounded once after the multiply. oneDNN 2.x: binary mul and add post-ops.
#if DNNL_VERSION_MAJOR >= 3
constexpr bool kFoldScaleIntoWeights = true;
#else
constexpr bool kFoldScaleIntoWeights = false;
#endif

// The post-ops of `e`, in its order: the per-channel scale and shift when not
// folded (binary mul and add with a [1, OC, 1, 1] operand, `channel_md`;
// convolutions only), the residual (binary add), the activation. execute()
// passes the binary operands by their post-op index.
dnnl::primitive_attr make_attr(
    const Epilogue& e,
    const memory::desc& residual_md,
    const memory::desc& channel_md = memory::desc()) {
  dnnl::post_ops ops;
  if (e.scale && !kFoldScaleIntoWeights)
    ops.append_binary(dnnl::algorithm::binary_mul, channel_md);
  if (e.shift && !kFoldScaleIntoWeights)
    ops.append_binary(dnnl::algorithm::binary_add, channel_md);
  if (e.residual)
    ops.append_binary(dnnl::algorithm::binary_add, residual_md);
  const std::string& a = e.activation;
  if (a == "relu")
    append_eltwise(ops, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
  else if (a == "silu")
    append_eltwise(ops, dnnl::algorithm::eltwise_swish, 1.f, 0.f);
  else if (a == "gelu")
    append_eltwise(ops, dnnl::algorithm::eltwise_gelu_erf, 0.f, 0.f);
  else if (a == "gelu_tanh")
    append_eltwise(ops, dnnl::algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  else if (a == "sigmoid")
    append_eltwise(ops, dnnl::algorithm::eltwise_logistic, 0.f, 0.f);
  else if (a == "tanh")
    append_eltwise(ops, dnnl::algorithm::eltwise_tanh, 0.f, 0.f);
  else if (a == "hardswish")
    append_eltwise(ops, dnnl::algorithm::eltwise_hardswish, 1.f / 6.f, 0.5f);
  else if (a == "clamp")
    append_eltwise(ops, dnnl::algorithm::eltwise_clip, e.alpha, e.beta);
  else if (!a.empty())
    throw std::invalid_argument(
        "oneDNN epilogue: unknown activation '" + a + "'");
  dnnl::primitive_attr attr;
  attr.set_post_ops(ops);
  // The caller passes the scratchpad (thread_scratchpad): in oneDNN's default
  // mode each primitive of a build with concurrent execution (the PyPI wheels)
  // allocates its own at creation and keeps it, so the scratchpads of all
  // primitives were held at once (BERT-base: 73 matmuls x 0.25-0.5 MB, 21 MB).
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

memory::dims dims(const std::vector<int64_t>& v) {
  return memory::dims(v.begin(), v.end());
}

// Reorders `src` (user layout) into a new memory of `desc`, once.
memory prepack(
    const memory::desc& user_md,
    const float* data,
    const memory::desc& desc) {
  memory user(user_md, engine(), const_cast<float*>(data));
  memory packed(desc, engine());
  dnnl::stream s(engine());
  dnnl::reorder(user, packed).execute(s, user, packed);
  s.wait();
  return packed;
}

#if DNNL_VERSION_MAJOR >= 3
// A weight reorder that multiplies output channel o by scales[o] (source
// scales over the weight's leading dims: OC, or G and OC/G grouped; in that
// order the channels are numbered as the caller's).
dnnl::reorder scaling_reorder(
    const memory::desc& from,
    const memory::desc& to,
    bool grouped) {
  dnnl::primitive_attr attr;
  attr.set_scales_mask(DNNL_ARG_SRC, grouped ? 0b11 : 0b1);
  return dnnl::reorder(
      dnnl::reorder::primitive_desc(engine(), from, engine(), to, attr));
}
#endif

std::string impl_name(const dnnl::primitive_desc_base& pd) {
  return pd.impl_info_str();
}

// A 64-byte aligned buffer (oneDNN's preference for its buffers) of at least
// `bytes`, grown and kept, so that a call neither maps nor faults in fresh
// pages.
struct GrowingBuffer {
  void* data = nullptr;
  size_t size = 0;
  ~GrowingBuffer() {
    std::free(data);
  }
  void* get(size_t bytes);
};

// This thread's buffer for borrowed convolution weights reordered per
// execute(): as large as the largest weight this thread has reordered
// (ResNet-50: 9.4 MB, a 3x3 512x512 kernel).
void* weight_scratch(size_t bytes) {
  thread_local GrowingBuffer b;
  return b.get(bytes);
}

// This thread's scratchpad, shared by every primitive it executes (they run
// one at a time on a thread): as large as the largest scratchpad needed, where
// oneDNN's library mode would hold one per primitive.
void* thread_scratchpad(size_t bytes) {
  thread_local GrowingBuffer b;
  return b.get(bytes);
}

void* GrowingBuffer::get(size_t bytes) {
  if (size < bytes) {
    std::free(data);
    size = (bytes + 63) / 64 * 64;
    data = std::aligned_alloc(64, size);
    if (!data) {
      size = 0;
      throw std::bad_alloc();
    }
  }
  return data;
}

// Passes this thread's scratchpad to a primitive whose attributes asked for a
// user scratchpad (make_attr) and that needs one (scratchpad: its descriptor).
void add_scratchpad(
    std::unordered_map<int, memory>& args,
    const memory::desc& scratchpad) {
  size_t bytes = scratchpad.get_size();
  if (bytes > 0)
    args[DNNL_ARG_SCRATCHPAD] =
        memory(scratchpad, engine(), thread_scratchpad(bytes));
}

} // namespace

struct OneDnnConv::Impl {
  dnnl::convolution_forward::primitive_desc pd;
  dnnl::convolution_forward prim;
  memory weights; // packed, or the caller's (borrowed)
  // Borrowed, when the kernel wants another layout than the caller's: the
  // reorder run before each execute() into weight_scratch().
  bool reorder_weights = false;
  dnnl::reorder reorder;
  memory bias;
  bool has_bias = false;
  bool residual = false;
  // The per-channel scale and shift post-ops' operands (Epilogue), copied;
  // folded (kFoldScaleIntoWeights), the scale only, read by the reorder.
  memory scale, shift;
  bool scaled_reorder = false;
  memory::desc src_md, dst_md;
  memory::desc scratchpad_md; // empty when it needs none
};

OneDnnConv::OneDnnConv(
    const std::vector<int64_t>& in,
    const std::vector<int64_t>& out,
    const float* weight,
    const std::vector<int64_t>& ws,
    const std::vector<int64_t>& wst,
    const float* bias,
    std::vector<int64_t> stride,
    std::vector<int64_t> padding,
    std::vector<int64_t> dilation,
    int64_t groups,
    Epilogue epilogue,
    Weights weights)
    : impl_(std::make_unique<Impl>()) {
  if (in.size() != 4 || out.size() != 4 || ws.size() != 4 || wst.size() != 4)
    throw std::invalid_argument(
        "oneDNN convolution: 2-d only, got input of rank " +
        std::to_string(in.size()));
  Impl& p = *impl_;
  p.residual = epilogue.residual;
  p.src_md = memory::desc(dims(in), dt::f32, tag::nhwc);
  p.dst_md = memory::desc(dims(out), dt::f32, tag::nhwc);
  // The caller's weight as it lies in memory (its strides: OIHW contiguous,
  // channels_last or another dense layout), [G, OC/G, IC/G, KH, KW] grouped.
  memory::dims w_dims, w_strides;
  if (groups == 1) {
    w_dims = dims(ws);
    w_strides = dims(wst);
  } else {
    w_dims = {groups, ws[0] / groups, ws[1], ws[2], ws[3]};
    w_strides = {wst[0] * (ws[0] / groups), wst[0], wst[1], wst[2], wst[3]};
  }
  memory::desc w_user(w_dims, dt::f32, w_strides);
  memory::desc w_any(w_dims, dt::f32, tag::any);
  memory::desc b_md({out[1]}, dt::f32, tag::x);
  memory::dims dil = {dilation[0] - 1, dilation[1] - 1};
  memory::dims pad_l = {padding[0], padding[1]};
  memory::dims pad_r;
  for (int i = 0; i < 2; ++i) {
    int64_t k = (ws[2 + i] - 1) * dilation[i] + 1;
    pad_r.push_back((out[2 + i] - 1) * stride[i] + k - in[2 + i] - padding[i]);
  }
  p.has_bias = bias != nullptr ||
      (kFoldScaleIntoWeights && (epilogue.scale || epilogue.shift));
  memory::desc channel_md({1, out[1], 1, 1}, dt::f32, tag::nchw);
  dnnl::primitive_attr attr = make_attr(epilogue, p.dst_md, channel_md);
  const memory::desc& bias_md = p.has_bias ? b_md : memory::desc();
#if DNNL_VERSION_MAJOR >= 3
  p.pd = dnnl::convolution_forward::primitive_desc(
      engine(),
      dnnl::prop_kind::forward_inference,
      dnnl::algorithm::convolution_direct,
      p.src_md,
      w_any,
      bias_md,
      p.dst_md,
      dims(stride),
      dil,
      pad_l,
      pad_r,
      attr);
#else
  dnnl::convolution_forward::desc desc(
      dnnl::prop_kind::forward_inference,
      dnnl::algorithm::convolution_direct,
      p.src_md,
      w_any,
      bias_md,
      p.dst_md,
      dims(stride),
      dil,
      pad_l,
      pad_r);
  p.pd = dnnl::convolution_forward::primitive_desc(desc, attr, engine());
#endif
  p.prim = dnnl::convolution_forward(p.pd);
  p.scratchpad_md = p.pd.scratchpad_desc();
  memory::desc oc_md({out[1]}, dt::f32, tag::x);
  if (epilogue.scale)
    p.scale = prepack(
        kFoldScaleIntoWeights ? oc_md : channel_md,
        epilogue.scale,
        kFoldScaleIntoWeights ? oc_md : channel_md);
  if (epilogue.shift && !kFoldScaleIntoWeights)
    p.shift = prepack(channel_md, epilogue.shift, channel_md);
#if DNNL_VERSION_MAJOR >= 3
  p.scaled_reorder = epilogue.scale != nullptr;
  if (p.scaled_reorder) {
    // Borrowed: reordered (and scaled) before every execute(), even where
    // the layouts agree; packed: scaled once, into the packed copy.
    p.reorder = scaling_reorder(w_user, p.pd.weights_desc(), groups != 1);
    memory user(w_user, engine(), const_cast<float*>(weight));
    if (weights == Weights::kPacked) {
      p.weights = memory(p.pd.weights_desc(), engine());
      dnnl::stream st(engine());
      p.reorder.execute(
          st,
          {{DNNL_ARG_FROM, user},
           {DNNL_ARG_TO, p.weights},
           {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, p.scale}});
      st.wait();
    } else {
      p.weights = user;
      p.reorder_weights = true;
    }
  }
#endif
  if (!p.scaled_reorder) {
    if (weights == Weights::kPacked) {
      p.weights = prepack(w_user, weight, p.pd.weights_desc());
    } else {
      p.weights = memory(w_user, engine(), const_cast<float*>(weight));
      p.reorder_weights = p.pd.weights_desc() != w_user;
      if (p.reorder_weights)
        p.reorder = dnnl::reorder(dnnl::reorder::primitive_desc(
            engine(), w_user, engine(), p.pd.weights_desc()));
    }
  }
  if (kFoldScaleIntoWeights && (epilogue.scale || epilogue.shift)) {
    // b * scale + shift (either may be absent), in double, rounded once.
    std::vector<float> b(out[1]);
    for (int64_t o = 0; o < out[1]; ++o) {
      double v = bias ? bias[o] : 0.0;
      if (epilogue.scale)
        v *= epilogue.scale[o];
      if (epilogue.shift)
        v += epilogue.shift[o];
      b[o] = static_cast<float>(v);
    }
    p.bias = prepack(b_md, b.data(), p.pd.bias_desc());
  } else if (p.has_bias) {
    p.bias = prepack(b_md, bias, p.pd.bias_desc());
  }
}

OneDnnConv::~OneDnnConv() = default;

void OneDnnConv::execute(
    const float* input,
    const float* residual,
    float* output) const {
  const Impl& p = *impl_;
  dnnl::stream& s = thread_stream();
  memory w = p.weights;
  if (p.reorder_weights) {
    const memory::desc& packed = p.pd.weights_desc();
    w = memory(packed, engine(), weight_scratch(packed.get_size()));
    memory user = p.weights;
    if (p.scaled_reorder)
      p.reorder.execute(
          s,
          {{DNNL_ARG_FROM, user},
           {DNNL_ARG_TO, w},
           {DNNL_ARG_ATTR_SCALES | DNNL_ARG_SRC, p.scale}});
    else
      p.reorder.execute(s, user, w);
  }
  memory src(p.src_md, engine(), const_cast<float*>(input));
  memory dst(p.dst_md, engine(), output);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, dst}};
  if (p.has_bias)
    args[DNNL_ARG_BIAS] = p.bias;
  int post_op = 0; // the binary post-ops' operands, in make_attr's order
  if (p.scale && !kFoldScaleIntoWeights)
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op++) | DNNL_ARG_SRC_1] = p.scale;
  if (p.shift)
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op++) | DNNL_ARG_SRC_1] = p.shift;
  if (p.residual) {
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(post_op) | DNNL_ARG_SRC_1] =
        memory(p.dst_md, engine(), const_cast<float*>(residual));
  }
  add_scratchpad(args, p.scratchpad_md);
  p.prim.execute(s, args);
  s.wait();
}

std::string OneDnnConv::implementation() const {
  return impl_name(impl_->pd);
}

struct OneDnnLinear::Impl {
  dnnl::matmul::primitive_desc pd;
  dnnl::matmul prim;
  memory weights;
  memory bias;
  bool has_bias = false;
  bool residual = false;
  int64_t m = 0, n = 0, k = 0;
  memory::desc src_md, dst_md;
  memory::desc scratchpad_md; // empty when it needs none
};

OneDnnLinear::OneDnnLinear(
    int64_t m,
    int64_t n,
    int64_t k,
    const float* weight,
    const float* bias,
    Epilogue epilogue,
    Weights weights,
    bool weight_transposed)
    : impl_(std::make_unique<Impl>()) {
  Impl& p = *impl_;
  p.m = m;
  p.n = n;
  p.k = k;
  p.residual = epilogue.residual;
  p.src_md = memory::desc({m, p.k}, dt::f32, tag::ab);
  p.dst_md = memory::desc({m, p.n}, dt::f32, tag::ab);
  memory::desc w_user(
      {p.k, p.n}, dt::f32, weight_transposed ? tag::ab : tag::ba);
  memory::desc w_any({p.k, p.n}, dt::f32, tag::any);
  memory::desc b_md({1, p.n}, dt::f32, tag::ab);
  p.has_bias = bias != nullptr;
  dnnl::primitive_attr attr = make_attr(epilogue, p.dst_md);
  const memory::desc& bias_md = p.has_bias ? b_md : memory::desc();
  const memory::desc& w_md = weights == Weights::kBorrowed ? w_user : w_any;
#if DNNL_VERSION_MAJOR >= 3
  p.pd = dnnl::matmul::primitive_desc(
      engine(), p.src_md, w_md, bias_md, p.dst_md, attr);
#else
  dnnl::matmul::desc desc(p.src_md, w_md, bias_md, p.dst_md);
  p.pd = dnnl::matmul::primitive_desc(desc, attr, engine());
#endif
  p.prim = dnnl::matmul(p.pd);
  p.scratchpad_md = p.pd.scratchpad_desc();
  if (weights == Weights::kBorrowed)
    p.weights = memory(w_user, engine(), const_cast<float*>(weight));
  else
    p.weights = prepack(w_user, weight, p.pd.weights_desc());
  if (p.has_bias)
    p.bias = prepack(b_md, bias, p.pd.bias_desc());
}

OneDnnLinear::~OneDnnLinear() = default;

void OneDnnLinear::execute(
    const float* input,
    const float* residual,
    float* output) const {
  const Impl& p = *impl_;
  memory src(p.src_md, engine(), const_cast<float*>(input));
  memory dst(p.dst_md, engine(), output);
  std::unordered_map<int, memory> args = {
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, p.weights}, {DNNL_ARG_DST, dst}};
  if (p.has_bias)
    args[DNNL_ARG_BIAS] = p.bias;
  if (p.residual) {
    args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] =
        memory(p.dst_md, engine(), const_cast<float*>(residual));
  }
  add_scratchpad(args, p.scratchpad_md);
  dnnl::stream& s = thread_stream();
  p.prim.execute(s, args);
  s.wait();
}

std::string OneDnnLinear::implementation() const {
  return impl_name(impl_->pd);
}

} // namespace torch_plugin::libs
