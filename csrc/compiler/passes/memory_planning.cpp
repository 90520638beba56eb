// memory_planning.cpp: pass "memory_planning".
//
// Assigns the outputs of the nodes whose executor steps write into a given
// buffer (kArenaOps: the oneDNN library nodes and the generated kernels of
// fusion groups) a byte offset in one per-run
// arena, so that values whose lifetimes do not overlap share memory and a run
// allocates nothing for them (the executor keeps arenas between runs;
// runtime/executor.h).
//
// Lifetimes: value v lives over node indices [producer, last user], both ends
// included (a node's output never shares memory with its inputs). A node whose
// schema says its outputs may alias its inputs (a view) extends its inputs'
// lifetimes to its outputs' last use, transitively. Not planned: graph inputs,
// constants, graph outputs and every value a graph output may alias (outputs go
// to the caller and must not be overwritten by the next run), values with no
// elements, and values of other producers (ATen fallback steps allocate their
// outputs).
//
// Offsets: "greedy by size" (Pisarchyk and Lee, "Efficient Memory Management
// for Deep Neural Net Inference", 2020, section 4.3): buffers in decreasing
// size; each goes into the smallest gap, between already placed buffers whose
// lifetimes overlap its own, that fits it, else after the last of them. Each
// buffer's size is its value's storage span times the element size, rounded up
// to kAlignment bytes. Result: Value::arena_offset and Graph::arena_bytes
// (reset first; with the option off nothing is planned). Run last: a later
// rewrite would invalidate the plan.
#include "compiler/passes/pass.h"

#include <algorithm>
#include <set>
#include <unordered_map>

namespace torch_plugin::compiler {
namespace {

// Cache-line and AVX-512 alignment of every buffer (PyTorch's CPU allocator
// aligns to 64 bytes too).
constexpr int64_t kAlignment = 64;

// Ops whose executor steps write their outputs into planned buffers
// (csrc/libs/library_step.cpp, csrc/runtime/kernel_step.cpp).
const std::set<std::string> kArenaOps = {
    "torch_plugin::conv_pointwise",
    "torch_plugin::linear_pointwise",
    "torch_plugin::fused"};

struct Buffer {
  Value* value;
  int64_t first, last; // node indices, inclusive
  int64_t size; // bytes, aligned
  int64_t offset = -1;
};

bool run(Graph& g, const PassOptions& options) {
  std::vector<Node*> nodes = g.nodes();
  bool had_plan = g.arena_bytes > 0;
  g.arena_bytes = 0;
  for (Node* n : nodes) {
    for (Value* out : n->outputs)
      out->arena_offset = -1;
  }
  if (!options.memory_planning)
    return had_plan;

  std::unordered_map<const Value*, int64_t> def, last_use;
  std::set<const Value*> escapes(g.outputs().begin(), g.outputs().end());
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const Value* in : nodes[i]->inputs)
      last_use[in] = static_cast<int64_t>(i);
    for (const Value* out : nodes[i]->outputs)
      def[out] = static_cast<int64_t>(i);
  }
  // Aliases: outputs of a may_alias node keep its inputs alive (and escaping).
  for (size_t i = nodes.size(); i-- > 0;) {
    const Node* n = nodes[i];
    if (!n->may_alias)
      continue;
    int64_t extend = static_cast<int64_t>(i);
    bool escaping = false;
    for (const Value* out : n->outputs) {
      auto it = last_use.find(out);
      if (it != last_use.end())
        extend = std::max(extend, it->second);
      escaping |= escapes.count(out) > 0;
    }
    for (const Value* in : n->inputs) {
      auto it = last_use.find(in);
      it->second = std::max(it->second, extend);
      if (escaping)
        escapes.insert(in);
    }
  }

  std::vector<Buffer> buffers;
  for (Node* n : nodes) {
    if (!kArenaOps.count(n->op))
      continue;
    for (Value* out : n->outputs) {
      if (escapes.count(out) || out->numel() == 0)
        continue;
      int64_t bytes = out->storage_span() *
          static_cast<int64_t>(c10::elementSize(out->dtype));
      bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      auto it = last_use.find(out);
      int64_t first = def.at(out);
      buffers.push_back(
          {out, first, it == last_use.end() ? first : it->second, bytes});
    }
  }
  std::stable_sort(
      buffers.begin(), buffers.end(), [](const Buffer& a, const Buffer& b) {
        return a.size > b.size;
      });

  std::vector<const Buffer*> placed;
  int64_t arena = 0;
  for (Buffer& b : buffers) {
    std::vector<const Buffer*> overlapping;
    for (const Buffer* p : placed) {
      if (p->first <= b.last && b.first <= p->last)
        overlapping.push_back(p);
    }
    std::sort(
        overlapping.begin(),
        overlapping.end(),
        [](const Buffer* x, const Buffer* y) { return x->offset < y->offset; });
    int64_t best = -1, best_gap = 0, end = 0;
    for (const Buffer* p : overlapping) {
      int64_t gap = p->offset - end;
      if (gap >= b.size && (best < 0 || gap < best_gap)) {
        best = end;
        best_gap = gap;
      }
      end = std::max(end, p->offset + p->size);
    }
    b.offset = best >= 0 ? best : end;
    arena = std::max(arena, b.offset + b.size);
    placed.push_back(&b);
  }
  for (const Buffer& b : buffers)
    b.value->arena_offset = b.offset;
  g.arena_bytes = arena;
  return !buffers.empty() || had_plan;
}

} // namespace

const PassInfo kMemoryPlanning = {
    "memory_planning",
    "Gives the outputs of library nodes offsets in one per-run arena, sharing memory "
    "between values whose lifetimes (views included) do not overlap; graph outputs and "
    "their aliases are never planned.",
    run};

} // namespace torch_plugin::compiler
