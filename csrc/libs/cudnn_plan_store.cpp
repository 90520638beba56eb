// cudnn_plan_store.cpp: cuDNN plans across processes (libs/cudnn_conv.h,
// PlanStore): the key of a descriptor, the payload of a built plan (its
// engine's name, workspace, engine id and knob choices, and the execution plan
// serialized by cudnn-frontend's Graph::serialize when cuDNN can: its
// runtime-compiled engines) and the plan from a payload (Graph::deserialize;
// else Graph::create_execution_plan replaying the engine id and knobs, with
// no heuristics query). The store itself (files) is the runtime's.
#include "libs/cudnn_conv_detail.h"

#include <ATen/cuda/CUDAContext.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace torch_plugin::libs::cudnn {

namespace fe = cudnn_frontend;

namespace {

std::atomic<int64_t> g_disk_hits{0}, g_disk_replays{0}, g_disk_writes{0},
    g_disk_rejected{0};

// The plan store, set from other files' static constructors (function-local:
// no initialization order between files).
struct StoreSlot {
  std::mutex mu;
  std::shared_ptr<PlanStore> store;
};
StoreSlot& store_slot() {
  static StoreSlot slot;
  return slot;
}

std::shared_ptr<PlanStore> store() {
  StoreSlot& slot = store_slot();
  std::lock_guard<std::mutex> lock(slot.mu);
  return slot.store;
}

constexpr const char* kStoreFormat =
    "torch_plugin cudnn plan 1: heuristics A then FALLBACK, PyTorch's note "
    "filters, workspace cap then any, first candidate that builds";

// The GPU of `device` as the store key names it.
std::string gpu_of(int device) {
  const cudaDeviceProp* p =
      at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(device));
  std::ostringstream s;
  s << p->name << " sm_" << p->major << p->minor << " SMs "
    << p->multiProcessorCount;
  return s.str();
}

void put(
    std::ostringstream& s,
    const char* name,
    const std::vector<int64_t>& v) {
  s << ' ' << name << '[';
  for (int64_t x : v)
    s << x << ',';
  s << ']';
}

// Splits the payload's NUL-terminated fields; the rest (the serialized plan,
// binary) in *rest.
bool split_fields(
    const std::string& payload,
    size_t count,
    std::vector<std::string>* fields,
    std::string* rest) {
  size_t at = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t nul = payload.find('\0', at);
    if (nul == std::string::npos)
      return false;
    fields->push_back(payload.substr(at, nul - at));
    at = nul + 1;
  }
  *rest = payload.substr(at);
  return true;
}

// The engine id and knob choices of g's chosen plan: the candidate whose name
// is the chosen plan's (the graph does not expose the candidate's index).
bool engine_of(
    fe::graph::Graph& g,
    const std::string& name,
    int64_t* engine,
    std::unordered_map<fe::KnobType_t, int64_t>* knobs) {
  const int64_t count = g.get_execution_plan_count();
  for (int64_t i = 0; i < count; ++i) {
    std::string n;
    if (g.get_plan_name_at_index(i, n).is_good() && n == name)
      return g.get_engine_and_knobs_at_index(i, *engine, *knobs).is_good();
  }
  return false;
}

// The payload of a built plan (see PlanStore).
std::string payload_of(const std::string& key, const ConvPlan::Impl& m) {
  int64_t engine = -1;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  if (!engine_of(*m.graph, m.name, &engine, &knobs))
    engine = -1;
  std::ostringstream k;
  for (const auto& [type, value] : knobs)
    k << static_cast<int64_t>(type) << ':' << value << ';';
  std::vector<uint8_t> blob;
  try {
    if (m.graph->serialize(blob, /*serialize_structure=*/false).is_bad())
      blob.clear(); // an engine cuDNN cannot serialize (not runtime-compiled)
  } catch (const std::exception&) {
    blob.clear();
  }
  std::string p = key;
  p.push_back('\0');
  p += m.name;
  p.push_back('\0');
  p += std::to_string(m.workspace);
  p.push_back('\0');
  p += std::to_string(engine);
  p.push_back('\0');
  p += k.str();
  p.push_back('\0');
  p.append(blob.begin(), blob.end());
  return p;
}

// The plan of d from the store's payload, or nullptr.
std::unique_ptr<ConvPlan::Impl> from_payload(
    const ConvDesc& d,
    const std::string& key,
    const std::string& payload,
    cudnnHandle_t handle) {
  std::vector<std::string> f;
  std::string blob;
  if (!split_fields(payload, 5, &f, &blob) || f[0] != key)
    return nullptr;
  const std::string& name = f[1];
  int64_t workspace = 0, engine = -1;
  try {
    workspace = std::stoll(f[2]);
    engine = std::stoll(f[3]);
  } catch (const std::exception&) {
    return nullptr;
  }
  if (!blob.empty()) {
    auto g = std::make_shared<fe::graph::Graph>();
    const std::vector<uint8_t> data(blob.begin(), blob.end());
    bool good = false;
    try { // the UBJSON parser throws on bytes that are no plan
      good = g->deserialize(
                  handle,
                  data,
                  /*enforce_precompiled=*/true,
                  /*run_warmup=*/false)
                 .is_good();
    } catch (const std::exception&) {
      good = false;
    }
    if (good) {
      auto impl = std::make_unique<ConvPlan::Impl>();
      if (g->get_workspace_size(impl->workspace).is_bad())
        impl->workspace = workspace;
      impl->name = name;
      impl->desc = d;
      impl->graph = std::move(g);
      ++g_disk_hits;
      return impl;
    }
  }
  if (engine < 0)
    return nullptr;
  std::unordered_map<fe::KnobType_t, int64_t> knobs;
  std::istringstream k(f[4]);
  for (std::string item; std::getline(k, item, ';');) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos)
      return nullptr;
    try {
      knobs[static_cast<fe::KnobType_t>(std::stoll(item.substr(0, colon)))] =
          std::stoll(item.substr(colon + 1));
    } catch (const std::exception&) {
      return nullptr;
    }
  }
  std::shared_ptr<fe::graph::Graph> g = detail::make_graph(d);
  if (!g || g->validate().is_bad() ||
      g->build_operation_graph(handle).is_bad() ||
      g->create_execution_plan(engine, knobs).is_bad() ||
      g->check_support(handle).is_bad() ||
      g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE).is_bad())
    return nullptr;
  std::unique_ptr<ConvPlan::Impl> impl = detail::finish(d, std::move(g));
  if (impl)
    ++g_disk_replays;
  return impl;
}

} // namespace

void set_plan_store(std::shared_ptr<PlanStore> s) {
  StoreSlot& slot = store_slot();
  std::lock_guard<std::mutex> lock(slot.mu);
  slot.store = std::move(s);
}

std::string plan_store_key(const ConvDesc& d) {
  std::ostringstream s;
  s << kStoreFormat << "\ncuDNN " << detail::cudnn_version()
    << " cudnn-frontend " << CUDNN_FRONTEND_VERSION << "\n"
    << gpu_of(d.device) << "\n";
  put(s, "x", d.x_sizes);
  put(s, "xs", d.x_strides);
  put(s, "w", d.w_sizes);
  put(s, "ws", d.w_strides);
  put(s, "y", d.y_sizes);
  put(s, "ys", d.y_strides);
  put(s, "rs", d.r_strides);
  put(s, "stride", d.stride);
  put(s, "padding", d.padding);
  put(s, "dilation", d.dilation);
  s << " align " << d.alignment << " dtype " << c10::toString(d.dtype)
    << " vectors " << c10::toString(d.vector_dtype) << " bias " << d.bias
    << " scale " << d.scale << " shift " << d.shift << " residual "
    << d.residual << " act '" << d.activation << "' tf32 " << d.allow_tf32
    << " deterministic " << d.deterministic;
  return s.str();
}

namespace detail {

std::unique_ptr<ConvPlan::Impl> load_stored(
    const ConvDesc& d,
    cudnnHandle_t handle) {
  std::shared_ptr<PlanStore> s = store();
  if (!s)
    return nullptr;
  const std::string key = plan_store_key(d);
  std::string payload;
  if (!s->load(key, &payload))
    return nullptr;
  std::unique_ptr<ConvPlan::Impl> impl;
  try {
    impl = from_payload(d, key, payload, handle);
  } catch (const std::exception&) {
    impl = nullptr;
  }
  if (!impl) {
    ++g_disk_rejected;
    s->remove(key);
  }
  return impl;
}

void save_stored(const ConvDesc& d, const ConvPlan::Impl& plan) {
  std::shared_ptr<PlanStore> s = store();
  if (!s)
    return;
  const std::string key = plan_store_key(d);
  s->save(key, payload_of(key, plan));
  ++g_disk_writes;
}

void store_counters(Counters* c) {
  c->disk_hits = g_disk_hits.load();
  c->disk_replays = g_disk_replays.load();
  c->disk_writes = g_disk_writes.load();
  c->disk_rejected = g_disk_rejected.load();
}

void reset_store_counters() {
  g_disk_hits = 0;
  g_disk_replays = 0;
  g_disk_writes = 0;
  g_disk_rejected = 0;
}

} // namespace detail

} // namespace torch_plugin::libs::cudnn
