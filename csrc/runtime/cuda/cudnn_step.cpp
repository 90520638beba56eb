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
//
// Before the steps are built, a CUDA preloader makes the plans of every
// convolution of the graph at once (libs::cudnn::plan_convs: a few threads,
// RuntimeOptions::cudnn_threads), in the background while NVRTC compiles the
// graph's generated kernels, so that the steps find them cached. Plans
// persist across processes in the kernel cache folder's cudnn/ subfolder (one
// verified file per plan, runtime/cache_file.h, named by the SHA-256 of the
// plan's key: libs::cudnn::PlanStore).
#include "ir/op_schema.h"
#include "ir/op_table.h"
#include "libs/cudnn_conv.h"
#include "runtime/cache_file.h"
#include "runtime/options.h"
#include "runtime/step_registry.h"

#include <cstdlib>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <sys/stat.h>
#include <unistd.h>
#include <utime.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

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

// Plans built before the steps on background threads and kept on disk: on by
// default (they passed test_cudnn_conv.py and test_cudnn_plans.py on an H100);
// TORCH_PLUGIN_CUDNN_PLAN_CACHE=0 turns them off, and each step then builds
// its plan on the calling thread when it is made.
bool early_plans() {
  static const bool on = [] {
    const char* v = std::getenv("TORCH_PLUGIN_CUDNN_PLAN_CACHE");
    return !(v && std::string(v) == "0");
  }();
  return on;
}

// The plans of the graph's CUDA convolutions, built in parallel before the
// steps (which then find them in the cache). Runs on a thread of its own
// (a background preloader): never throws; a descriptor it cannot derive is
// left to its step (make_cudnn_step, on the calling thread).
void preload_cudnn_plans(const std::vector<const Node*>& nodes) {
  if (!early_plans())
    return;
  try {
    std::vector<cd::ConvDesc> descs;
    for (const Node* n : nodes) {
      if (n->op != "torch_plugin::conv_pointwise" || n->outputs.size() != 1 ||
          !n->outputs[0]->device.is_cuda())
        continue;
      if (std::optional<cd::ConvDesc> d = desc_of(*n))
        descs.push_back(std::move(*d));
    }
    if (!descs.empty() && cd::available())
      cd::plan_convs(descs);
  } catch (...) {
    // The steps build what is missing.
  }
}

bool make_dirs(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      const std::string part = path.substr(0, i);
      if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
        return false;
    }
  }
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// cuDNN plans on disk: <kernel cache>/cudnn/<sha256 of the key>.plan, each a
// verified cache entry (runtime/cache_file.h). The key is in the payload too
// (libs::cudnn checks it). Failures to write are warnings: the plan is then
// only kept in memory.
class DiskPlanStore final : public cd::PlanStore {
 public:
  bool load(const std::string& key, std::string* payload) override {
    const std::string path = path_of(key);
    std::string why;
    if (read_cache_entry(path, payload, &why)) {
      utime(path.c_str(), nullptr); // used now (least-recently-used eviction)
      return true;
    }
    if (why != "missing") {
      TORCH_WARN(
          "torch_plugin: the cached cuDNN plan ",
          path,
          " is damaged (",
          why,
          "); building the plan again");
      unlink(path.c_str());
    }
    return false;
  }

  void save(const std::string& key, const std::string& payload) override {
    const std::string dir = dir_of();
    if (!make_dirs(dir)) {
      TORCH_WARN_ONCE(
          "torch_plugin: cannot create the cuDNN plan cache folder ",
          dir,
          ": ",
          std::strerror(errno),
          " (plans are not cached on disk)");
      return;
    }
    std::string why;
    if (!write_cache_entry(dir, name_of(key), payload, &why))
      TORCH_WARN(
          "torch_plugin: cannot write ", dir, "/", name_of(key), ": ", why);
  }

  void remove(const std::string& key) override {
    unlink(path_of(key).c_str());
  }

 private:
  static std::string dir_of() {
    return kernel_cache_dir() + "/cudnn";
  }
  static std::string name_of(const std::string& key) {
    return sha256_hex(key) + ".plan";
  }
  static std::string path_of(const std::string& key) {
    return dir_of() + "/" + name_of(key);
  }
};

// The plan builders' thread count comes from the runtime options (libs knows
// nothing of the runtime).
void hand_options_to_cudnn(const RuntimeOptions& options) {
  int threads = 0;
  try {
    threads =
        options.cudnn_threads.empty() ? 0 : std::stoi(options.cudnn_threads);
  } catch (const std::exception&) {
    threads = 0;
  }
  cd::set_build_threads(std::max(threads, 0));
}

const bool kStoreSet = [] {
  if (early_plans())
    cd::set_plan_store(std::make_shared<DiskPlanStore>());
  return true;
}();

const StepRegistration kLibraryStep(
    c10::kCUDA,
    StepKind::kLibrary,
    make_cudnn_step);
const KernelPreloaderRegistration kPlanPreloader(
    c10::kCUDA,
    preload_cudnn_plans,
    /*background=*/true);
const LibraryRegistration kCudnn("cudnn", cudnn_probe);
const OptionsListenerRegistration kOptionsListener(hand_options_to_cudnn);

} // namespace

} // namespace torch_plugin::runtime::cuda
