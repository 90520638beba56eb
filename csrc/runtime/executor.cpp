// executor.cpp: the plan of a compiled graph and its run loop (see executor.h).
#include "runtime/executor.h"

#include "runtime/step_registry.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <unordered_set>

namespace torch_plugin::runtime {

using ir::Value;
using ir::ValueKind;

Executor::Executor(const ir::Graph& g) {
  build(g, false);
}

Executor::Executor(ir::Graph& g, ReleaseOwnedConstants) {
  build(g, true);
}

void Executor::build(const ir::Graph& g, bool release_owned) {
  SlotMap slots;
  auto assign = [&](const Value* v) {
    if (!slots.slot_of.count(v->id))
      slots.slot_of[v->id] = num_slots_++;
  };
  for (const Value* v : g.inputs()) {
    assign(v);
    input_slots_.push_back(slots.slot(v));
    input_specs_.push_back({v->dtype, v->sizes, v->strides});
  }
  const std::vector<Value*> constants = g.constants();
  for (const Value* c : constants)
    assign(c);
  std::vector<const ir::Node*> nodes;
  for (const auto& n : g.node_list()) {
    nodes.push_back(n.get());
    for (const Value* out : n->outputs)
      assign(out);
  }
  for (const Value* out : g.outputs()) {
    output_slots_.push_back(slots.slot(out));
    output_specs_.push_back({out->dtype, out->sizes, out->strides});
  }
  device_ = ir::graph_device(g);
  arena_bytes_ = g.arena_bytes;
  if (arena_bytes_ > 0) {
    arena_slot_ = num_slots_++;
    slots.arena = arena_slot_;
    for (const ir::Node* n : nodes) {
      for (const Value* out : n->outputs)
        num_planned_ += out->arena_offset >= 0;
    }
  }

  // Liveness: a slot dies after its last user, unless it is a graph output, or
  // a value something still alive may alias (outputs of ops that may return
  // views keep their inputs alive until they die themselves). An output no
  // step reads dies right after the step that made it (the indices of
  // max_pool2d_with_indices in inference: 49 MiB held through the rest of
  // ResNet-50 at batch 32 on CUDA, above eager's peak, until this).
  std::unordered_set<int> keep(output_slots_.begin(), output_slots_.end());
  for (const Value* c : constants)
    keep.insert(slots.slot(c));
  std::vector<int> last_use(num_slots_, -1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* out : nodes[i]->outputs)
      last_use[slots.slot(out)] = static_cast<int>(i);
    for (const Value* in : nodes[i]->inputs)
      last_use[slots.slot(in)] = static_cast<int>(i);
  }
  for (size_t i = nodes.size(); i-- > 0;) {
    const ir::Node* n = nodes[i];
    if (!n->may_alias)
      continue;
    int extend = static_cast<int>(i);
    bool escapes = false;
    for (const Value* out : n->outputs) {
      extend = std::max(extend, last_use[slots.slot(out)]);
      escapes |= keep.count(slots.slot(out)) > 0;
    }
    for (const Value* in : n->inputs) {
      int s = slots.slot(in);
      last_use[s] = std::max(last_use[s], extend);
      if (escapes)
        keep.insert(s);
    }
  }
  free_after_.resize(nodes.size());
  for (int s = 0; s < num_slots_; ++s) {
    if (last_use[s] >= 0 && !keep.count(s))
      free_after_[last_use[s]].push_back(s);
  }
  // For a split run (run_prefix): who makes each slot, the last step that
  // reads it (not extended for aliases: a view's base is carried only if a
  // later step reads it too), its bytes, and which slots may share memory (a
  // union-find over the steps that may return views of their inputs).
  made_by_.assign(num_slots_, -1);
  read_until_.assign(num_slots_, -1);
  slot_bytes_.assign(num_slots_, 0);
  alias_root_.resize(num_slots_);
  for (int s = 0; s < num_slots_; ++s)
    alias_root_[s] = s;
  auto root = [&](int s) {
    while (alias_root_[s] != s)
      s = alias_root_[s] = alias_root_[alias_root_[s]];
    return s;
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* in : nodes[i]->inputs)
      read_until_[slots.slot(in)] = static_cast<int>(i);
    for (const Value* out : nodes[i]->outputs) {
      int s = slots.slot(out);
      made_by_[s] = static_cast<int>(i);
      int64_t numel = 1;
      for (int64_t d : out->sizes)
        numel *= d;
      slot_bytes_[s] = numel * c10::elementSize(out->dtype);
      if (!nodes[i]->may_alias)
        continue;
      for (const Value* in : nodes[i]->inputs)
        alias_root_[root(s)] = root(slots.slot(in));
    }
  }
  for (int s : output_slots_)
    read_until_[s] = static_cast<int>(nodes.size());
  for (int s = 0; s < num_slots_; ++s)
    alias_root_[s] = root(s);

  // Compile every generated kernel of the graph first, in parallel: each
  // device's preloader (runtime/step_registry.h) takes its own kernels (C++
  // with the host compiler, runtime/cpu; CUDA with NVRTC, runtime/cuda).
  preload_kernels(nodes);

  // Readers of each constant (a graph output counts as one that never holds
  // a copy): when every reader's step holds its own copy, the constant is not
  // needed at run time. With release_owned, the last such reader releases it
  // from the graph as soon as its step is built (see executor.h).
  std::unordered_map<const Value*, std::atomic<int>> unowned_readers;
  for (const Value* c : constants)
    unowned_readers[c] = 0;
  for (const ir::Node* n : nodes) {
    for (const Value* in : n->inputs) {
      auto it = unowned_readers.find(in);
      if (it != unowned_readers.end())
        it->second++;
    }
  }
  for (const Value* out : g.outputs()) {
    auto it = unowned_readers.find(out);
    if (it != unowned_readers.end())
      it->second++;
  }
  // Released constants are dropped on this (the calling) thread only: the
  // last reference to a tensor with a Python object takes the GIL, which the
  // caller may hold while it waits for the workers.
  std::vector<at::Tensor> released;
  std::mutex released_mutex;
  auto note_owned = [&](const ir::Node& n, const Step& step) {
    for (const Value* in : n.inputs) {
      auto it = unowned_readers.find(in);
      if (it == unowned_readers.end() || !step.owns_copy_of(*in))
        continue;
      if (--it->second == 0 && release_owned) {
        std::lock_guard<std::mutex> lock(released_mutex);
        // g is non-const here (the releasing constructor).
        released.push_back(std::move(const_cast<Value*>(in)->constant));
      }
    }
  };
  auto drop_released = [&] {
    std::vector<at::Tensor> drop;
    std::lock_guard<std::mutex> lock(released_mutex);
    drop.swap(released);
  };

  // Library steps (oneDNN primitive creation, which JIT-compiles kernels, and
  // weight prepacking) are most of the build time and independent of each
  // other: build them on a few threads. The other steps are cheap and built
  // here, in order.
  steps_.resize(nodes.size());
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto build_library_steps = [&](bool calling_thread) {
    for (size_t i; (i = next++) < nodes.size();) {
      try {
        steps_[i] = make_library_step(*nodes[i], slots);
        if (steps_[i])
          note_owned(*nodes[i], *steps_[i]);
        if (calling_thread)
          drop_released();
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error)
          error = std::current_exception();
      }
    }
  };
  // CUDA library steps (cuBLASLt plans, whose tuning is serialised anyway)
  // are built on the calling thread alone: torch keeps a cuBLAS handle per
  // thread and a workspace per (handle, stream), so each worker thread would
  // leave a workspace of its own allocated for the life of the process
  // (32 MiB each on Hopper) that eager never holds.
  size_t workers = device_.is_cuda()
      ? 1
      : std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), 4);
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t)
    threads.emplace_back(build_library_steps, false);
  build_library_steps(true);
  for (std::thread& t : threads)
    t.join();
  drop_released();
  if (error)
    std::rethrow_exception(error);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!steps_[i])
      steps_[i] = make_kernel_step(*nodes[i], slots);
    if (!steps_[i])
      steps_[i] = make_view_step(*nodes[i], slots);
    if (!steps_[i])
      steps_[i] = make_fallback_step(*nodes[i], slots);
  }
  // The constants some step reads at run time; the others live in their
  // steps' copies only.
  for (const Value* c : constants) {
    if (unowned_readers.at(c) > 0 && c->constant.defined())
      constants_.emplace_back(slots.slot(c), c->constant);
  }
  step_names_.reserve(steps_.size());
  step_info_.reserve(steps_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    std::string d = steps_[i]->describe();
    step_names_.push_back("torch_plugin: " + d);
    const ir::Node& n = *nodes[i];
    step_info_.push_back(
        {d.substr(0, d.find(' ')),
         n.qualified_name(),
         n.outputs.empty() ? device_ : n.outputs[0]->device});
  }
}

void Executor::set_frozen(std::vector<at::Tensor> frozen) {
  frozen_versions_.clear();
  frozen_.clear();
  for (const at::Tensor& t : frozen) {
    frozen_versions_.push_back(t._version());
    frozen_.emplace_back(t.getIntrusivePtr());
  }
}

Slots Executor::start(const std::vector<at::Tensor>& inputs) const {
  TORCH_CHECK(
      inputs.size() == input_slots_.size(),
      "compiled graph takes ",
      input_slots_.size(),
      " inputs, got ",
      inputs.size());
  Slots slots(num_slots_);
  for (size_t i = 0; i < inputs.size(); ++i) {
    TORCH_CHECK(
        !inputs[i].defined() || inputs[i].device() == device_,
        "compiled graph: input ",
        i,
        " is on ",
        inputs[i].device(),
        ", the graph was compiled for ",
        device_);
    const c10::ScalarType want = input_specs_[i].dtype;
    if (inputs[i].defined() && inputs[i].scalar_type() != want) {
      // The IR's dtypes are FakeTensor's, and a few real kernels return
      // another floating dtype than their meta kernel (fp32 statistics of
      // CPU batch/layer/group norm of bf16/fp16 inputs, saved for a backward
      // graph by a forward graph that ran as ATen ops): converted, never
      // reinterpreted by a kernel compiled for the IR's dtype.
      TORCH_CHECK(
          at::isFloatingType(inputs[i].scalar_type()) &&
              at::isFloatingType(want),
          "compiled graph: input ",
          i,
          " is ",
          inputs[i].scalar_type(),
          ", the graph was compiled for ",
          want);
      slots[input_slots_[i]] = inputs[i].to(want);
      continue;
    }
    slots[input_slots_[i]] = inputs[i];
  }
  for (const auto& [slot, t] : constants_)
    slots[slot] = t;
  return slots;
}

void Executor::run_steps(Slots& slots, size_t begin, size_t end) const {
  for (size_t i = begin; i < end; ++i) {
    // A range per step for torch.profiler (one flag check when none runs).
    RECORD_USER_SCOPE(step_names_[i].c_str());
    steps_[i]->run(slots);
    for (int s : free_after_[i])
      slots[s].reset();
  }
}

std::vector<at::Tensor> Executor::run(
    const std::vector<at::Tensor>& inputs) const {
  Slots slots = start(inputs);
  if (arena_slot_ >= 0)
    slots[arena_slot_] = acquire_arena();
  // Returns the arena to the pool on every exit, exceptions included.
  struct ArenaGuard {
    const Executor* e;
    Slots* slots;
    ~ArenaGuard() {
      if (e->arena_slot_ < 0)
        return;
      at::Tensor arena = std::move((*slots)[e->arena_slot_]);
      for (at::Tensor& t : *slots)
        t.reset(); // views into the arena die first
      e->release_arena(std::move(arena));
    }
  };
  std::vector<at::Tensor> outputs;
  {
    ArenaGuard guard{this, &slots};
    run_steps(slots, 0, steps_.size());
    outputs = collect_outputs(slots);
  }
  return outputs;
}

std::vector<int> Executor::carried_slots(int k) const {
  std::vector<int> carried;
  for (int s = 0; s < num_slots_; ++s) {
    if (made_by_[s] >= 0 && made_by_[s] < k && read_until_[s] >= k)
      carried.push_back(s);
  }
  return carried;
}

Slots Executor::start_split(const std::vector<at::Tensor>& inputs, int k)
    const {
  TORCH_CHECK(
      arena_slot_ < 0 && k > 0 && k <= static_cast<int>(steps_.size()),
      "compiled graph: no split at step ",
      k);
  return start(inputs);
}

std::vector<at::Tensor> Executor::run_prefix(
    const std::vector<at::Tensor>& inputs,
    int k) const {
  Slots slots = start_split(inputs, k);
  run_steps(slots, 0, k);
  std::vector<at::Tensor> carried;
  for (int s : carried_slots(k))
    carried.push_back(std::move(slots[s]));
  return carried;
}

std::vector<at::Tensor> Executor::run_suffix(
    const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& carried,
    int k) const {
  Slots slots = start_split(inputs, k);
  const std::vector<int> at = carried_slots(k);
  TORCH_CHECK(
      carried.size() == at.size(),
      "compiled graph: the tail at step ",
      k,
      " takes ",
      at.size(),
      " carried values, got ",
      carried.size());
  for (size_t i = 0; i < at.size(); ++i)
    slots[at[i]] = carried[i];
  run_steps(slots, k, steps_.size());
  return collect_outputs(slots);
}

int64_t Executor::output_bytes() const {
  int64_t total = 0;
  for (const OutputSpec& o : output_specs_) {
    int64_t span = 1;
    for (size_t d = 0; d < o.sizes.size(); ++d)
      span += (o.sizes[d] - 1) * o.strides[d];
    if (!o.sizes.empty() &&
        std::find(o.sizes.begin(), o.sizes.end(), 0) != o.sizes.end())
      span = 0;
    total += span * c10::elementSize(o.dtype);
  }
  return total;
}

int Executor::split_point(int64_t max_carried_bytes, int max_tail) const {
  const int n = static_cast<int>(steps_.size());
  if (arena_slot_ >= 0 || n < 2)
    return -1;
  // Outputs larger than the budget must be made by the tail.
  int last_big = -1;
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    int s = output_slots_[i];
    if (slot_bytes_[s] > max_carried_bytes)
      last_big = std::max(last_big, made_by_[s] < 0 ? n : made_by_[s]);
  }
  for (int k = n - 1; k >= std::max(1, n - max_tail); --k) {
    int64_t bytes = 0;
    bool big_in_prefix = false;
    // Two carried values that may share memory would come back from a CUDA
    // graph as copies of their own, no longer sharing it.
    std::unordered_set<int> roots;
    bool shared = false;
    for (int s : carried_slots(k)) {
      bytes += slot_bytes_[s];
      big_in_prefix |= slot_bytes_[s] > max_carried_bytes;
      shared |= !roots.insert(alias_root_[s]).second;
    }
    if (shared)
      continue;
    if (!big_in_prefix && bytes <= max_carried_bytes && last_big < n)
      return k;
  }
  return -1;
}

at::Tensor Executor::acquire_arena() const {
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (!arena_pool_.empty()) {
      at::Tensor arena = std::move(arena_pool_.back());
      arena_pool_.pop_back();
      return arena;
    }
  }
  return at::empty(
      {arena_bytes_}, at::TensorOptions().dtype(at::kByte).device(device_));
}

void Executor::release_arena(at::Tensor arena) const {
  // Another reference to the arena's storage (a view that escaped the run)
  // means someone may still read it: never hand it to another run.
  if (arena.storage().use_count() != 1)
    return;
  std::lock_guard<std::mutex> lock(pool_mutex_);
  arena_pool_.push_back(std::move(arena));
}

namespace {
std::mutex g_layout_copies_mutex;
std::map<std::string, int64_t> g_layout_copies;
} // namespace

void count_layout_copy(const std::string& what) {
  std::lock_guard<std::mutex> lock(g_layout_copies_mutex);
  ++g_layout_copies[what];
}

std::map<std::string, int64_t> layout_copies() {
  std::lock_guard<std::mutex> lock(g_layout_copies_mutex);
  return g_layout_copies;
}

void reset_layout_copies() {
  std::lock_guard<std::mutex> lock(g_layout_copies_mutex);
  g_layout_copies.clear();
}

std::vector<at::Tensor> Executor::collect_outputs(const Slots& slots) const {
  std::vector<at::Tensor> outputs;
  outputs.reserve(output_slots_.size());
  for (size_t i = 0; i < output_slots_.size(); ++i) {
    at::Tensor t = slots[output_slots_[i]];
    const OutputSpec& spec = output_specs_[i];
    if (t.defined() && t.numel() > 1 &&
        t.strides() != c10::IntArrayRef(spec.strides) &&
        t.sizes() == c10::IntArrayRef(spec.sizes)) {
      at::Tensor promised =
          at::empty_strided(spec.sizes, spec.strides, t.options());
      promised.copy_(t);
      t = promised;
      count_layout_copy("graph output");
    }
    outputs.push_back(std::move(t));
  }
  return outputs;
}

OutputBuffer::OutputBuffer(const ir::Value& v, const SlotMap& slots)
    : dtype_(v.dtype), device_(v.device), sizes_(v.sizes), strides_(v.strides) {
  if (v.arena_offset >= 0 && slots.arena >= 0) {
    int64_t item = static_cast<int64_t>(c10::elementSize(v.dtype));
    TORCH_CHECK(
        v.arena_offset % item == 0,
        "arena offset ",
        v.arena_offset,
        " is not a multiple of the element size ",
        item);
    arena_slot_ = slots.arena;
    offset_elements_ = v.arena_offset / item;
  }
}

at::Tensor OutputBuffer::get(const Slots& slots) const {
  if (arena_slot_ < 0) {
    return at::empty_strided(
        sizes_, strides_, at::TensorOptions().dtype(dtype_).device(device_));
  }
  const at::Tensor& arena = slots[arena_slot_];
  // The arena is allocated on the CPU (acquire_arena); never hand out a CPU
  // buffer for a value planned on another device.
  TORCH_CHECK(
      arena.device().type() == device_.type(),
      "torch_plugin: value planned in the ",
      arena.device(),
      " arena is on ",
      device_);
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(arena.storage()),
      arena.key_set(),
      caffe2::TypeMeta::fromScalarType(dtype_));
  impl->set_sizes_and_strides(sizes_, strides_, offset_elements_);
  return at::Tensor(std::move(impl));
}

std::string Executor::describe() const {
  std::ostringstream os;
  for (size_t i = 0; i < steps_.size(); ++i)
    os << i << ": " << steps_[i]->describe() << "\n";
  return os.str();
}

std::vector<std::pair<std::string, int>> Executor::step_counts() const {
  std::map<std::string, int> counts;
  for (const auto& s : steps_) {
    std::string d = s->describe();
    counts[d.substr(0, d.find(' '))]++;
  }
  return {counts.begin(), counts.end()};
}

} // namespace torch_plugin::runtime
