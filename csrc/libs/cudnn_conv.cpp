// cudnn_conv.cpp: cuDNN graphs and plans of conv_pointwise (see cudnn_conv.h),
// their process-wide cache and their parallel builds (plan_convs). Includes
// cudnn-frontend (cudnn_conv_detail.h; cudnn_plan_store.cpp is the other file
// that does) with its dynamic loading: every cuDNN call goes through dlsym on
// the handle of the libcudnn.so.9 torch has loaded
// (cudnn_frontend::cudnn_dlhandle, set here).
//
// Graph (uids fixed, so the per-call variant pack is a sorted pointer array:
// Graph::execute(handle, ptrs, n, workspace), no map):
//   conv_fprop(X 1, W 2) [+ B 3] [* SCALE 4] [+ SHIFT 5] [+ R 6] [act] -> Y 7
// Plans: heuristics mode A then FALLBACK; PyTorch's filters
// (ATen/native/cudnn/Conv_v8.cpp): no engine that down-converts inputs, none
// with tensor cores for fp32 without allow_tf32, none non-deterministic when
// deterministic; the first candidate that builds (HEURISTICS_CHOICE).
// Plans are loaded from and saved to the PlanStore by cudnn_plan_store.cpp.
#include "libs/cudnn_conv_detail.h"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cudnn/Handle.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <mutex>
#include <sstream>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace cudnn_frontend {
// cudnn-frontend's dynamic loading reads its symbols from this handle.
void* cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend

namespace torch_plugin::libs::cudnn {

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { kX = 1, kW, kB, kScale, kShift, kR, kY };

struct Loaded {
  bool ok = false;
  std::string why;
  size_t version = 0; // cudnnGetVersion()
};

const Loaded& loaded() {
  static const Loaded l = [] {
    Loaded r;
    void* h = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_NOLOAD);
    if (!h) {
      r.why =
          "libcudnn.so.9 is not loaded in this process (torch without cuDNN)";
      return r;
    }
    fe::cudnn_dlhandle = h;
    using GetVersion = size_t (*)();
    auto get_version =
        reinterpret_cast<GetVersion>(dlsym(h, "cudnnGetVersion"));
    const size_t version = get_version ? get_version() : 0;
    r.version = version;
    if (version < 90000) {
      r.why = "cuDNN " + std::to_string(version) + " is older than 9.0";
      return r;
    }
    r.ok = true;
    return r;
  }();
  return l;
}

fe::DataType_t fe_type(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float:
      return fe::DataType_t::FLOAT;
    case c10::ScalarType::BFloat16:
      return fe::DataType_t::BFLOAT16;
    case c10::ScalarType::Half:
      return fe::DataType_t::HALF;
    default:
      return fe::DataType_t::NOT_SET;
  }
}

std::optional<fe::PointwiseMode_t> activation_mode(std::string_view name) {
  if (name == "relu")
    return fe::PointwiseMode_t::RELU_FWD;
  if (name == "silu")
    return fe::PointwiseMode_t::SWISH_FWD;
  if (name == "gelu")
    return fe::PointwiseMode_t::GELU_FWD;
  if (name == "gelu_tanh")
    return fe::PointwiseMode_t::GELU_APPROX_TANH_FWD;
  if (name == "sigmoid")
    return fe::PointwiseMode_t::SIGMOID_FWD;
  if (name == "tanh")
    return fe::PointwiseMode_t::TANH_FWD;
  return std::nullopt;
}

struct Hash {
  size_t operator()(const ConvDesc& d) const {
    size_t h = 1469598103934665603ull;
    auto mix = [&](int64_t v) {
      h ^= static_cast<size_t>(v) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    for (const auto* v :
         {&d.x_sizes,
          &d.x_strides,
          &d.w_sizes,
          &d.w_strides,
          &d.y_sizes,
          &d.y_strides,
          &d.r_strides,
          &d.stride,
          &d.padding,
          &d.dilation})
      for (int64_t x : *v)
        mix(x);
    mix(static_cast<int64_t>(d.dtype));
    mix(static_cast<int64_t>(d.vector_dtype));
    mix(d.bias | d.scale << 1 | d.shift << 2 | d.residual << 3 |
        d.allow_tf32 << 4 | d.deterministic << 5);
    mix(d.device);
    mix(d.alignment);
    mix(static_cast<int64_t>(std::hash<std::string>()(d.activation)));
    return h;
  }
};

std::atomic<int64_t> g_plans{0}, g_no_engine{0}, g_parallel_builds{0};
std::atomic<int> g_build_threads{0}; // 0: the default

} // namespace

bool available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.ok && why)
    *why = l.why;
  return l.ok;
}

bool fuses_activation(std::string_view name) {
  return name.empty() || activation_mode(name).has_value();
}

bool ConvDesc::operator==(const ConvDesc& o) const {
  return x_sizes == o.x_sizes && x_strides == o.x_strides &&
      w_sizes == o.w_sizes && w_strides == o.w_strides &&
      y_sizes == o.y_sizes && y_strides == o.y_strides &&
      r_strides == o.r_strides && stride == o.stride && padding == o.padding &&
      dilation == o.dilation && dtype == o.dtype &&
      vector_dtype == o.vector_dtype && bias == o.bias && scale == o.scale &&
      shift == o.shift && residual == o.residual &&
      activation == o.activation && allow_tf32 == o.allow_tf32 &&
      deterministic == o.deterministic && device == o.device &&
      alignment == o.alignment;
}

std::string ConvDesc::str() const {
  std::ostringstream s;
  s << "conv x" << c10::IntArrayRef(x_sizes) << " w"
    << c10::IntArrayRef(w_sizes) << " " << c10::toString(dtype);
  if (x_sizes.size() > 1 && w_sizes.size() > 1 && w_sizes[1] != x_sizes[1])
    s << " groups=" << x_sizes[1] / w_sizes[1];
  if (bias)
    s << "+bias";
  if (scale)
    s << "*scale";
  if (shift)
    s << "+shift";
  if (residual)
    s << "+residual";
  if (!activation.empty())
    s << "+" << activation;
  return s.str();
}

ConvPlan::ConvPlan(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ConvPlan::~ConvPlan() = default;

const ConvDesc& ConvPlan::desc() const {
  return impl_->desc;
}

std::string ConvPlan::describe() const {
  return "cudnn " + impl_->desc.str() + " " + impl_->name;
}

namespace detail {

size_t cudnn_version() {
  return loaded().version;
}

// The operation graph of d (tensors and operations, not yet built), or
// nullptr for a dtype or activation the plan cannot take.
std::shared_ptr<fe::graph::Graph> make_graph(const ConvDesc& d) {
  const fe::DataType_t io = fe_type(d.dtype);
  if (io == fe::DataType_t::NOT_SET)
    return nullptr;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(io)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  // Every operand at the descriptor's pointer alignment.
  auto tensor = [&](const char* name,
                    Uid uid,
                    const std::vector<int64_t>& dim,
                    const std::vector<int64_t>& stride,
                    fe::DataType_t t) {
    return g->tensor(fe::graph::Tensor_attributes()
                         .set_name(name)
                         .set_uid(uid)
                         .set_dim(dim)
                         .set_stride(stride)
                         .set_data_type(t)
                         .set_alignment(d.alignment));
  };
  auto x = tensor("x", kX, d.x_sizes, d.x_strides, io);
  auto w = tensor("w", kW, d.w_sizes, d.w_strides, io);
  auto y = g->conv_fprop(
      x,
      w,
      fe::graph::Conv_fprop_attributes()
          .set_padding(d.padding)
          .set_stride(d.stride)
          .set_dilation(d.dilation)
          .set_compute_data_type(fe::DataType_t::FLOAT));
  // A per-channel vector [K] as [1, K, 1, ...] of y's rank.
  const int64_t k = d.w_sizes[0];
  std::vector<int64_t> vdim(d.y_sizes.size(), 1), vstride(d.y_sizes.size(), k);
  vdim[1] = k;
  vstride[1] = 1;
  auto channel_vector = [&](const char* name, Uid uid, fe::DataType_t t) {
    return tensor(name, uid, vdim, vstride, t);
  };
  auto binary = [&](auto a, auto b, fe::PointwiseMode_t mode) {
    return g->pointwise(
        a,
        b,
        fe::graph::Pointwise_attributes().set_mode(mode).set_compute_data_type(
            fe::DataType_t::FLOAT));
  };
  if (d.bias)
    y = binary(y, channel_vector("b", kB, io), fe::PointwiseMode_t::ADD);
  const fe::DataType_t vt = fe_type(d.vector_dtype);
  if (d.scale)
    y = binary(
        y, channel_vector("scale", kScale, vt), fe::PointwiseMode_t::MUL);
  if (d.shift)
    y = binary(
        y, channel_vector("shift", kShift, vt), fe::PointwiseMode_t::ADD);
  if (d.residual) {
    auto r = tensor("r", kR, d.y_sizes, d.r_strides, io);
    y = binary(y, r, fe::PointwiseMode_t::ADD);
  }
  if (!d.activation.empty()) {
    auto mode = activation_mode(d.activation);
    if (!mode)
      return nullptr;
    auto attrs =
        fe::graph::Pointwise_attributes().set_mode(*mode).set_compute_data_type(
            fe::DataType_t::FLOAT);
    if (*mode == fe::PointwiseMode_t::SWISH_FWD)
      attrs.set_swish_beta(1.0f);
    y = g->pointwise(y, attrs);
  }
  y->set_output(true)
      .set_uid(kY)
      .set_dim(d.y_sizes)
      .set_stride(d.y_strides)
      .set_data_type(io)
      .set_alignment(d.alignment);
  return g;
}

// The plan of a built graph g: its workspace and engine name.
std::unique_ptr<ConvPlan::Impl> finish(
    const ConvDesc& d,
    std::shared_ptr<fe::graph::Graph> g) {
  auto impl = std::make_unique<ConvPlan::Impl>();
  if (g->get_workspace_size(impl->workspace).is_bad())
    return nullptr;
  if (g->get_plan_name(impl->name).is_bad())
    impl->name = "(unnamed plan)";
  impl->desc = d;
  impl->graph = std::move(g);
  return impl;
}

} // namespace detail

namespace {

cudnnHandle_t torch_handle() {
  cudnnHandle_t h = at::native::getCudnnHandle();
  fe::detail::set_stream(h, c10::cuda::getCurrentCUDAStream().stream());
  return h;
}

int64_t numel(const std::vector<int64_t>& sizes) {
  int64_t n = 1;
  for (int64_t s : sizes)
    n *= s;
  return n;
}

// The workspace a convolution of d may ask for: the bytes of its own input and
// output, at least 16 MiB. Engines asking for more are dropped, so that a
// convolution never raises the peak far above eager's (a small conv+BN graph's
// first heuristic engine asked for more than 32 MiB;
// tests/python/compiler/test_peak_memory.py).
int64_t workspace_cap(const ConvDesc& d) {
  const int64_t bytes = (numel(d.x_sizes) + numel(d.y_sizes)) *
      static_cast<int64_t>(c10::elementSize(d.dtype));
  return std::max<int64_t>(bytes, int64_t{16} << 20);
}

// The plan of d from cuDNN's heuristics among the engines whose workspace is at
// most max_workspace, or nullptr (no engine, or a build error).
std::unique_ptr<ConvPlan::Impl> build(
    const ConvDesc& d,
    int64_t max_workspace,
    cudnnHandle_t handle) {
  std::shared_ptr<fe::graph::Graph> g = detail::make_graph(d);
  if (!g || g->validate().is_bad() ||
      g->build_operation_graph(handle).is_bad() ||
      g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})
          .is_bad())
    return nullptr;
  std::vector<fe::NumericalNote_t> barred = {
      fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
  if (d.dtype == c10::ScalarType::Float && !d.allow_tf32)
    barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
  if (d.deterministic)
    barred.push_back(fe::NumericalNote_t::NONDETERMINISTIC);
  g->deselect_numeric_notes(barred);
  g->deselect_workspace_greater_than(max_workspace);
  if (g->check_support(handle).is_bad() ||
      g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE).is_bad())
    return nullptr;
  return detail::finish(d, std::move(g));
}

// The plan of d: from the store, else built (and saved there).
std::unique_ptr<ConvPlan::Impl> make_plan(const ConvDesc& d) {
  cudnnHandle_t handle = torch_handle();
  if (auto impl = detail::load_stored(d, handle))
    return impl;
  // Within the workspace cap first; where no engine fits, any workspace (a
  // cuDNN plan beats ATen's convolution, which asks for workspace too).
  auto impl = build(d, workspace_cap(d), handle);
  if (!impl)
    impl = build(d, std::numeric_limits<int64_t>::max(), handle);
  if (impl)
    detail::save_stored(d, *impl);
  return impl;
}

} // namespace

bool ConvPlan::execute(const ConvPointers& p) const {
  const Impl& m = *impl_;
  const ConvDesc& d = m.desc;
  void* ptrs[7];
  int n = 0;
  ptrs[n++] = const_cast<void*>(p.x);
  ptrs[n++] = const_cast<void*>(p.w);
  if (d.bias)
    ptrs[n++] = const_cast<void*>(p.b);
  if (d.scale)
    ptrs[n++] = const_cast<void*>(p.scale);
  if (d.shift)
    ptrs[n++] = const_cast<void*>(p.shift);
  if (d.residual)
    ptrs[n++] = const_cast<void*>(p.r);
  ptrs[n++] = p.y;
  c10::DataPtr ws;
  void* workspace = p.y; // any non-null pointer: an empty workspace is unread
  if (m.workspace > 0) {
    ws = c10::cuda::CUDACachingAllocator::get()->allocate(
        static_cast<size_t>(m.workspace));
    workspace = ws.get();
  }
  return m.graph->execute(torch_handle(), ptrs, n, workspace).is_good();
}

namespace {

std::mutex g_cache_mu;
std::unordered_map<ConvDesc, std::shared_ptr<const ConvPlan>, Hash> g_cache;

// The cached plan of desc; *found false when it has none yet.
std::shared_ptr<const ConvPlan> cached(const ConvDesc& desc, bool* found) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  auto it = g_cache.find(desc);
  *found = it != g_cache.end();
  return *found ? it->second : nullptr;
}

} // namespace

std::shared_ptr<const ConvPlan> plan_conv(const ConvDesc& desc) {
  if (!available())
    return nullptr;
  bool found = false;
  std::shared_ptr<const ConvPlan> plan = cached(desc, &found);
  if (found)
    return plan;
  try {
    if (auto impl = make_plan(desc))
      plan = std::make_shared<ConvPlan>(std::move(impl));
  } catch (...) {
    plan = nullptr; // a frontend exception (a missing symbol): no plan
  }
  ++(plan ? g_plans : g_no_engine);
  std::lock_guard<std::mutex> lock(g_cache_mu);
  return g_cache.emplace(desc, plan).first->second;
}

int build_threads() {
  const int n = g_build_threads.load();
  if (n > 0)
    return n;
  return static_cast<int>(
      std::min(8u, std::max(1u, std::thread::hardware_concurrency())));
}

void set_build_threads(int threads) {
  g_build_threads.store(std::max(threads, 0));
}

void plan_convs(const std::vector<ConvDesc>& descs) {
  if (!available())
    return;
  std::vector<const ConvDesc*> todo;
  {
    std::unordered_set<ConvDesc, Hash> seen;
    std::lock_guard<std::mutex> lock(g_cache_mu);
    for (const ConvDesc& d : descs) {
      if (!g_cache.count(d) && seen.insert(d).second)
        todo.push_back(&d);
    }
  }
  const size_t workers =
      std::min<size_t>(todo.size(), static_cast<size_t>(build_threads()));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next++) < todo.size();) {
      try {
        c10::cuda::CUDAGuard guard(
            static_cast<c10::DeviceIndex>(todo[i]->device));
        plan_conv(*todo[i]);
      } catch (...) {
        // plan_conv catches its own; a device guard failure leaves the
        // descriptor to the step's own plan_conv call (the calling thread).
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) {
    try {
      threads.emplace_back(work);
    } catch (const std::system_error&) {
      break; // no more threads: the others (and this one) do the rest
    }
  }
  if (!threads.empty())
    ++g_parallel_builds;
  work();
  for (std::thread& t : threads)
    t.join();
}

namespace detail {
// For cudnn_conv_run.cpp's counters.
void plan_counters(Counters* c) {
  c->plans = g_plans.load();
  c->no_engine = g_no_engine.load();
  c->parallel_builds = g_parallel_builds.load();
  store_counters(c);
}
void reset_plan_counters() {
  g_plans = 0;
  g_no_engine = 0;
  g_parallel_builds = 0;
  reset_store_counters();
}
} // namespace detail

} // namespace torch_plugin::libs::cudnn
