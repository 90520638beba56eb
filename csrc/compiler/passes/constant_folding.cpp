// constant_folding.cpp: pass "constant_folding".
//
// With freezing on, parameters are constants; a node whose tensor inputs are
// all constants (a weight's transpose, a dtype conversion, a reshape of a bias)
// is run once, now, through the dispatcher, and its outputs become constants.
// Nodes that are not deterministic functions of their inputs (random ops,
// in-place ops, ops with no tensor input such as aten::empty, whose result we
// must not share between calls) and outputs that are graph outputs (the caller
// owns those) are left alone, and so are nodes whose results would hold more
// bytes than their constant inputs (an expand to the batch size).
//
// Folded results are shared across compilations in the process: a graph
// compiled once per concrete size (compiler/size_variants.py), or compiled
// again, folds the same nodes of the same frozen parameters (ViT-B/16 under
// autocast: 165 MB of bf16 weight copies per variant). FoldCache memoizes each
// folded node's outputs, keyed by the node's op and constant arguments, by
// each input's dtype, sizes, strides and offset, and by the identity of its
// storage and its version (each compilation sees its own detached alias of a
// parameter: same storage and version counter, another TensorImpl); it holds
// weak references only (input storages and outputs), so an entry neither
// keeps a weight nor a folded copy alive, and an entry whose input was freed
// or changed in place never matches (a live StorageImpl's address cannot be
// reused; an in-place write bumps the version, as the frozen-parameter check
// of compiled graphs assumes too).
#include "compiler/passes/pass.h"
#include "ir/aten_call.h"

#include <algorithm>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace torch_plugin::compiler {
namespace {

using WeakImpl =
    c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
using WeakStorage = c10::weak_intrusive_ptr<c10::StorageImpl>;

// Process-wide memo of folded nodes (see the file comment). Thread-safe.
class FoldCache {
 public:
  // The outputs folded before for `key` from exactly `inputs` (same tensors,
  // same versions), or an empty vector.
  std::vector<at::Tensor> find(
      const std::string& key,
      const std::vector<at::Tensor>& inputs) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it == entries_.end())
      return {};
    const Entry& e = it->second;
    std::vector<at::Tensor> outputs;
    if (e.inputs.size() != inputs.size())
      return {};
    for (size_t i = 0; i < inputs.size(); ++i) {
      auto held = e.inputs[i].lock();
      if (!held || held.get() != inputs[i].storage().unsafeGetStorageImpl() ||
          inputs[i]._version() != e.versions[i])
        return {};
    }
    for (const WeakImpl& w : e.outputs) {
      auto held = w.lock();
      if (!held)
        return {};
      outputs.emplace_back(std::move(held));
    }
    return outputs;
  }

  void insert(
      const std::string& key,
      const std::vector<at::Tensor>& inputs,
      const std::vector<at::Tensor>& outputs) {
    Entry e;
    for (const at::Tensor& t : inputs) {
      e.inputs.push_back(t.storage().getWeakStorageImpl());
      e.versions.push_back(t._version());
    }
    for (const at::Tensor& t : outputs)
      e.outputs.emplace_back(t.getIntrusivePtr());
    std::lock_guard<std::mutex> lock(mutex_);
    if (++inserts_ % 256 == 0)
      prune();
    entries_[key] = std::move(e);
  }

 private:
  struct Entry {
    std::vector<WeakStorage> inputs;
    std::vector<int64_t> versions;
    std::vector<WeakImpl> outputs;
  };
  // Drops entries whose inputs or outputs are gone (mutex held).
  void prune() {
    for (auto it = entries_.begin(); it != entries_.end();) {
      bool dead = false;
      for (const WeakStorage& w : it->second.inputs)
        dead = dead || w.expired();
      for (const WeakImpl& w : it->second.outputs)
        dead = dead || w.expired();
      it = dead ? entries_.erase(it) : std::next(it);
    }
  }
  std::mutex mutex_;
  std::unordered_map<std::string, Entry> entries_;
  size_t inserts_ = 0;
};

FoldCache& fold_cache() {
  static FoldCache* cache = new FoldCache(); // never destroyed: no exit order
  return *cache;
}

// The node's op and constant arguments, its inputs by position, and each
// input's dtype, sizes and strides: with the inputs' identities (checked by
// FoldCache::find), what determines the folded outputs.
std::string fold_key(const Node& n) {
  std::ostringstream os;
  os << n.qualified_name() << '(';
  for (const Arg& a : n.args) {
    if (a.kind == Arg::Kind::kConst) {
      os << 'c' << ir::to_string(a.value);
    } else {
      os << (a.kind == Arg::Kind::kTensor ? 't' : 'l');
      for (int64_t i : a.inputs)
        os << i << ' ';
    }
    os << ',';
  }
  os << ')';
  for (const Value* in : n.inputs) {
    const at::Tensor& t = in->constant;
    os << '|' << static_cast<int>(t.scalar_type()) << t.sizes() << t.strides()
       << t.storage_offset();
  }
  for (const auto& [name, value] : n.attrs)
    os << '#' << name << '=' << ir::to_string(value);
  return os.str();
}

bool foldable(const Node* n, const Graph& g) {
  if (n->body || n->inputs.empty() || n->op.rfind("aten::", 0) != 0)
    return false;
  if (n->is_in_place() || n->op.find("rand") != std::string::npos ||
      n->op.find("dropout") != std::string::npos ||
      n->op.find("bernoulli") != std::string::npos)
    return false;
  for (const Value* in : n->inputs) {
    if (in->kind != ValueKind::kConstant)
      return false;
  }
  for (const Value* out : n->outputs) {
    if (g.is_output(out))
      return false;
  }
  // Folding must not grow memory: an op whose results hold more bytes than its
  // constant inputs (an expand of a weight to the batch, a repeat) runs at call
  // time instead, as in eager (ViT-B/16 under autocast at batch 32 folded
  // 8 GB of expanded projection weights). Small results (<= 64 KiB) fold.
  int64_t in_bytes = 0, out_bytes = 0;
  for (const Value* in : n->inputs)
    in_bytes += in->constant.defined()
        ? static_cast<int64_t>(in->constant.storage().nbytes())
        : 0;
  for (const Value* out : n->outputs)
    out_bytes +=
        out->numel() * static_cast<int64_t>(c10::elementSize(out->dtype));
  if (out_bytes > std::max<int64_t>(in_bytes, int64_t{64} << 10))
    return false;
  return true;
}

bool run(Graph& g, const PassOptions& options) {
  if (!options.freeze)
    return false;
  bool changed = false;
  for (Node* n : g.nodes()) {
    if (!foldable(n, g))
      continue;
    std::unordered_map<int64_t, int> slot_of;
    std::vector<at::Tensor> values;
    // Value id -> index in `values`, the table AtenCall reads and writes.
    auto index_of = [&](const Value* v) {
      return slot_of.at(v->id);
    };
    for (const Value* in : n->inputs) {
      if (slot_of.emplace(in->id, static_cast<int>(values.size())).second)
        values.push_back(in->constant);
    }
    for (const Value* out : n->outputs) {
      slot_of[out->id] = static_cast<int>(values.size());
      values.emplace_back();
    }
    std::vector<at::Tensor> inputs;
    bool cacheable = true; // every input has a storage whose identity counts
    for (const Value* in : n->inputs) {
      inputs.push_back(in->constant);
      // An inference tensor (made under torch.inference_mode) has no version
      // counter: a write to it could not be seen, so it is never a key.
      cacheable = cacheable && in->constant.defined() &&
          in->constant.has_storage() && !in->constant.is_inference();
    }
    const std::string key = cacheable ? fold_key(*n) : std::string();
    std::vector<at::Tensor> cached =
        cacheable ? fold_cache().find(key, inputs) : std::vector<at::Tensor>();
    if (cached.size() == n->outputs.size()) {
      for (size_t i = 0; i < cached.size(); ++i)
        values[slot_of.at(n->outputs[i]->id)] = cached[i];
    } else {
      AtenCall(*n, index_of).run(values);
    }
    std::vector<at::Tensor> folded;
    for (const Value* out : n->outputs) {
      const at::Tensor& t = values[slot_of.at(out->id)];
      if (!t.defined())
        continue;
      // A dense view of a constant (a weight's transpose or reshape) stays a
      // view: a copy would hold a second copy of every weight (BERT-base: +327
      // MB). The parameter it views is frozen, and a change to it recompiles
      // (its version is guarded). Other views (expand, a strided slice) become
      // dense tensors of their own, the layout later passes expect of a
      // constant. A fresh dense result (a dtype conversion of a weight under
      // autocast) is kept as it is: cloning it held the constant twice while
      // folding.
      const bool dense = t.is_non_overlapping_and_dense();
      Value* c =
          g.add_constant(dense ? t : t.clone(at::MemoryFormat::Preserve));
      g.replace_all_uses(const_cast<Value*>(out), c);
      folded.push_back(c->constant);
    }
    if (cacheable && cached.size() != n->outputs.size() &&
        folded.size() == n->outputs.size())
      fold_cache().insert(key, inputs, folded);
    g.erase_node(n);
    changed = true;
  }
  return changed;
}

} // namespace

const PassInfo kConstantFolding = {
    "constant_folding",
    "Runs deterministic ATen nodes whose inputs are all constants once at compile time "
    "and replaces their outputs by constants (freezing only).",
    run};

} // namespace torch_plugin::compiler
