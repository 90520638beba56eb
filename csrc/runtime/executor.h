// executor.h: runs one compiled graph.
//
// Owns: the plan of a compiled Graph — its steps in order (library call,
// generated kernel, or ATen fallback through the dispatcher), the constants,
// the slot of each value, and which slots die after each step (so a tensor is
// freed as soon as its last user ran) — and a pool of arenas: with a memory
// plan (memory_planning pass: Graph::arena_bytes > 0) each run takes one arena
// of arena_bytes from the pool (allocating one only when all are in use by
// concurrent runs) and library steps write their outputs into it at their
// planned offsets; the arena goes back to the pool when the run ends. Steps
// without a planned output (ATen fallbacks, generated kernels) allocate theirs.
// run() is thread-safe and re-entrant (each call has its own slots and its own
// arena). Each step runs inside a torch.profiler range named
// "torch_plugin: <step>" (RECORD_USER_SCOPE). Outputs come back with the
// strides the graph promised and never live
// in an arena (the plan excludes graph outputs and their aliases; an arena
// still referenced after a run, which would mean a bug in that plan, is not
// reused). No Python objects; the GIL is not needed (callers release it).
#pragma once

#include "ir/ir.h"
#include "runtime/step.h"

#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace torch_plugin::runtime {

struct OutputSpec {
  c10::ScalarType dtype;
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
};

// One step of the plan, as data: its kind ("fallback", "kernel", "onednn",
// "cublaslt", ...: the first word of the step's description), the IR node's
// op ("aten::add.Tensor", "torch_plugin::fused") and the device it runs on.
struct StepInfo {
  std::string kind;
  std::string op;
  c10::Device device = c10::Device(c10::kCPU);
};

class Executor {
 public:
  // Builds the plan of `g`, which must have been through the compiler pipeline.
  // A constant that every step reading it holds a copy of (Step::owns_copy_of:
  // oneDNN's prepacked weights and biases) is not held by the executor.
  explicit Executor(const ir::Graph& g);
  // The same, and such a constant is also released from `g` (its
  // Value::constant reset) as soon as the last step reading it is built, so
  // that a folded weight and its prepacked copy are not both held while the
  // other steps are built. `g` then cannot be run or exported again (its
  // owner lowers again when it needs the graph). The caller must not use `g`
  // from another thread meanwhile.
  enum class ReleaseOwnedConstants { kYes };
  Executor(ir::Graph& g, ReleaseOwnedConstants);

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;

  // A run in two parts, steps [0, k) then [k, n): run_prefix returns the
  // values the prefix made that are still needed after it (read by a later
  // step or graph outputs: carried_slots(k), in slot order), and run_suffix
  // takes the same inputs and those values and returns the graph's outputs.
  // Used to capture a prefix into a CUDA graph and run a short tail whose
  // outputs are large outside it (the tail allocates them on each call, so no
  // static output buffer is held: GPT-2's LM head). 0 < k <= n; not for a
  // graph with a memory plan (an arena lives for one whole run).
  std::vector<at::Tensor> run_prefix(
      const std::vector<at::Tensor>& inputs,
      int k) const;
  std::vector<at::Tensor> run_suffix(
      const std::vector<at::Tensor>& inputs,
      const std::vector<at::Tensor>& carried,
      int k) const;
  // The slots of carried values at split point k (see run_prefix).
  std::vector<int> carried_slots(int k) const;
  // The split point k for such a run: the largest k in [n - max_tail, n)
  // whose carried values take at most max_carried_bytes (from the IR's sizes
  // and dtypes; a view counts its own elements), and whose tail makes every
  // graph output that is larger than max_carried_bytes, with no two carried
  // values that may share memory (views); -1 if none (or the graph has an
  // arena, or fewer than two steps).
  int split_point(int64_t max_carried_bytes, int max_tail) const;
  // Bytes of the graph's outputs (from their sizes, strides and dtypes).
  int64_t output_bytes() const;

  const std::vector<OutputSpec>& output_specs() const {
    return output_specs_;
  }
  // The dtype, sizes and strides the graph was compiled for, per input.
  const std::vector<OutputSpec>& input_specs() const {
    return input_specs_;
  }
  size_t num_inputs() const {
    return input_slots_.size();
  }
  // One line per step: "3: fallback aten::max_pool2d_with_indices".
  std::string describe() const;
  // Step kind -> count, e.g. {"fallback": 3, "kernel": 5, "onednn": 20}.
  std::vector<std::pair<std::string, int>> step_counts() const;
  // The steps in order, as data (what describe() prints, structured).
  const std::vector<StepInfo>& steps() const {
    return step_info_;
  }

  // Frozen arguments: the tensors the graph's leading arguments were frozen
  // to (freezing made them constants), each with its version counter's value
  // now. A caller that passes the frozen arguments along with the inputs (the
  // boxed convention: frozen arguments first) checks each with
  // frozen_unchanged() before running only the rest.
  void set_frozen(std::vector<at::Tensor> frozen);
  size_t num_frozen() const {
    return frozen_.size();
  }
  // Whether `t` is frozen argument `i` (the same TensorImpl: the same Python
  // tensor object) at the version it had when frozen.
  // The executor keeps only weak references: it must not keep the frozen
  // tensors alive (a TensorImpl held from C++ keeps its Python object, which
  // may reach the model, alive where Python's garbage collector cannot see
  // it); its caller holds them.
  bool frozen_unchanged(size_t i, const at::Tensor& t) const {
    return !frozen_[i].expired() &&
        t.unsafeGetTensorImpl() == frozen_[i]._unsafe_get_target() &&
        t._version() == frozen_versions_[i];
  }
  // The constants the executor holds and puts in its slots on every run (not
  // those only its steps' own copies hold).
  std::vector<at::Tensor> constants() const {
    std::vector<at::Tensor> out;
    for (const auto& [slot, t] : constants_)
      out.push_back(t);
    return out;
  }
  // Bytes of one run's arena (0: no memory plan), and how many of the steps'
  // outputs are written into it.
  int64_t arena_bytes() const {
    return arena_bytes_;
  }
  int num_planned() const {
    return num_planned_;
  }
  // The device of the graph's tensors (ir::graph_device): where the arena is
  // allocated and where run() expects its inputs.
  c10::Device device() const {
    return device_;
  }

 private:
  std::vector<std::unique_ptr<Step>> steps_;
  std::vector<StepInfo> step_info_;
  std::vector<
      c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>>
      frozen_;
  std::vector<int64_t> frozen_versions_;
  // "torch_plugin: <describe()>" per step: its torch.profiler range name.
  std::vector<std::string> step_names_;
  std::vector<std::vector<int>> free_after_; // slots released after step i
  std::vector<std::pair<int, at::Tensor>> constants_;
  std::vector<int> input_slots_;
  std::vector<int> output_slots_;
  std::vector<OutputSpec> output_specs_;
  std::vector<OutputSpec> input_specs_;
  int num_slots_ = 0;
  int arena_slot_ = -1;
  int64_t arena_bytes_ = 0;
  c10::Device device_ = c10::Device(c10::kCPU);
  int num_planned_ = 0;
  mutable std::mutex pool_mutex_;
  mutable std::vector<at::Tensor> arena_pool_; // arenas not in use by a run

  // Per slot: the step that makes it (-1: an input, a constant or the
  // arena), the last step that reads it (steps_.size() for a graph output),
  // its bytes from the IR (0 for inputs and constants), and a representative
  // of the slots it may share memory with (views).
  std::vector<int> made_by_;
  std::vector<int> read_until_;
  std::vector<int64_t> slot_bytes_;
  std::vector<int> alias_root_;

  void build(const ir::Graph& g, bool release_owned);
  // The slots of one run with its inputs and constants in place (inputs
  // checked and converted as run() says).
  Slots start(const std::vector<at::Tensor>& inputs) const;
  // start() for a split run at k (run_prefix, run_suffix), which it checks.
  Slots start_split(const std::vector<at::Tensor>& inputs, int k) const;
  void run_steps(Slots& slots, size_t begin, size_t end) const;
  at::Tensor acquire_arena() const;
  std::vector<at::Tensor> collect_outputs(const Slots& slots) const;
  void release_arena(at::Tensor arena) const;
};

} // namespace torch_plugin::runtime
