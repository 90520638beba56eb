// fusion.cpp: pass "fusion".
//
// Groups pointwise ATen ops (codegen/op_semantics.cpp), reductions
// (aten::sum.dim_IntList, mean.dim/default, amax, amin, max/min (default and
// .dim with int64 indices), argmax/argmin, prod, var.correction,
// var_mean.correction, logsumexp) and row-wise ops (aten::_softmax,
// _log_softmax, native_layer_norm, cumsum/cumprod scans) — the op table's
// pointwise and reduction rows (ir/op_table.h) — into fusion groups, each
// becoming one torch_plugin::fused node whose body holds the ops. Only values
// whose dtype the device's kernels can load and store join
// (codegen/renderer.h: pointwise kernels kernel_dtype_supported, bool,
// integers, fp16/bf16/fp32/fp64 on CPU and CUDA; reductions
// reduction_dtype_supported, CPU float32/bfloat16, CUDA also float16), and a
// pointwise op only when op semantics types it for its dtypes
// (typed_pointwise_supported: an fp64 or int64 value is never computed in
// float). Reduction kernels compute in fp32: only float nodes
// (is_float_pointwise) share a group with a reduction; a typed node (a
// comparison, where over a bool mask, integer arithmetic) forms pointwise
// groups, mixing dtypes freely. The "codegen" pass, next, renders each
// group's kernel for its device or un-fuses it (unfuse_group, fusion_group.h,
// below).
//
// A group is either pointwise (all members have the same output sizes) or a
// reduction group with a domain: sizes F and reduced dims R, shared by all its
// reductions and row-wise ops (see codegen/reduction_kernel.h). Each member
// value has a level: "full" (sizes F), "outer" or "outer_keep" (one value per
// kept index, without or with the reduced dims as size 1). Nodes are visited in
// graph order; a node joins the group(s) of its operands' producers when:
//   - pointwise: its sizes are those of its in-group operands at the outer
//   level
//     (an epilogue: sum(x) * 2), or F (a prologue, x * y before a sum; or a
//     consumer of reduced values, x * rsqrt(mean(x^2) + eps)). A non-keepdim
//     reduced value is broadcast into F only when R are F's leading dims (so
//     that right-aligned broadcasting lines it up with the kept dims);
//   - reduction / row-wise op: its input is a full-level value of a pointwise
//     group of sizes F, or of a reduction group with the same F and R;
// and no node already visited outside the group uses a member's output (that
// node runs before the group, so joining would need a value the group makes
// after it: this also rules out every cycle); a pointwise op never joins
// through an int64 index output (argmax's; the kernels compute in fp32).
// Several operand groups merge
// when their domains agree. A member output used outside the group, or by the
// graph, becomes an output of the group. Groups with a reduction, and pointwise
// groups of two or more ops, become kernels; a lone pointwise op stays an ATen
// call (already vectorized; nothing to save), except a lone layout-changing
// clone on CUDA (lone_layout_copy: ATen's strided copy is not vectorized). A
// random op (codegen/random_ops.h, unless PassOptions::fallback_random) starts
// a group of its own, a kernel even alone, which never joins a reduction nor is
// computed at a broadcast consumer's sizes (each element's number is its own).
// Before grouping, a dtype conversion of a view becomes the view of a
// conversion (fusion_casts.h), so that autocast's casts of flattened
// activations join the kernel that computed them.
// After grouping, a cheap producer that one pointwise group hands out to
// other pointwise groups (a mask) is cloned into each of them
// (fusion_share.h): each kernel recomputes it instead of loading it.
#include "compiler/passes/fusion_casts.h"
#include "compiler/passes/fusion_group.h"
#include "compiler/passes/fusion_reduction.h"
#include "compiler/passes/fusion_share.h"
#include "compiler/passes/pass.h"

#include "compiler/codegen/op_semantics.h"
#include "compiler/codegen/random_ops.h"
#include "compiler/codegen/renderer.h"
#include "ir/op_schema.h"
#include "ir/op_table.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

namespace torch_plugin::compiler {
namespace {

using namespace fusion_detail;

// A lone aten::clone on CUDA that changes the layout (its input's strides
// are not its output's): ATen copies it with its non-vectorized strided
// elementwise kernel (about 0.8 TB/s on an H100; the attention output's
// [L, B, H, D] copy in nn.MultiheadAttention), where the generated kernel
// moves 16-byte vectors along the innermost dim both share: a kernel alone.
bool lone_layout_copy(const std::vector<Node*>& members) {
  if (members.size() != 1)
    return false;
  const Node* n = members[0];
  return n->op == "aten::clone" && n->inputs.size() == 1 &&
      n->outputs.size() == 1 && n->outputs[0]->device.is_cuda() &&
      n->outputs[0]->numel() > 0 &&
      n->inputs[0]->strides != n->outputs[0]->strides;
}

// Node positions are multiples of this, so that the clones of a shared
// producer (at most kMaxSharedOps) sort just before their consumer.
constexpr size_t kPosStep = 8;

struct Group {
  std::vector<Node*> members;
  Domain domain;
  bool alive = true;
  bool typed = false; // has a member that is not a float node
  // Has a random op (codegen/random_ops.h): a kernel even alone, never
  // computed at broadcast sizes (inlinable), never with a reduction (typed).
  bool random = false;
};

// All of `n`'s tensors are on one device whose kernels (pointwise, or
// reduction when `reduction`) can load and store their dtypes.
bool tensor_dtypes_ok(const Node& n, bool reduction = false) {
  if (n.outputs.empty())
    return false;
  const c10::Device device = n.outputs[0]->device;
  auto ok = [&](const Value* v) {
    return v->device == device &&
        (reduction ? reduction_dtype_supported(device.type(), v->dtype)
                   : kernel_dtype_supported(device.type(), v->dtype));
  };
  for (const Value* v : n.inputs)
    if (!ok(v))
      return false;
  for (const Value* v : n.outputs)
    if (!ok(v))
      return false;
  for (const Arg& a : n.args)
    if (a.kind == Arg::Kind::kTensorList)
      return false;
  return true;
}

bool pointwise(const Node& n) {
  if (n.outputs.size() != 1 || n.inputs.empty() || !is_fusible_pointwise(n) ||
      !tensor_dtypes_ok(n))
    return false;
  return typed_pointwise_supported(n);
}

// A pointwise node that may share a group with a reduction (fp32 kernels).
bool reduction_member(const Node& n) {
  return tensor_dtypes_ok(n, true) && is_float_pointwise(n);
}

class Fusion {
 public:
  explicit Fusion(Graph& g, bool fallback_random = false)
      : g_(g), fallback_random_(fallback_random) {
    size_t pos = 0;
    for (const auto& n : g.node_list())
      pos_[n.get()] = kPosStep * pos++;
    observable_views_ = observable_views(g);
  }

  void group_nodes() {
    for (Node* n : g_.nodes()) {
      if (is_random_op(*n)) {
        if (!fallback_random_ && random_op(*n) && tensor_dtypes_ok(*n)) {
          start(n, {n->outputs[0]->sizes, {}}, {Level::kFull});
          groups_.back().random = groups_.back().typed = true;
        }
      } else if (auto info = reduction_info(*n)) {
        add_reduction(n, *info);
      } else if (pointwise(*n) && !observable_views_.count(n)) {
        add_pointwise(n);
      }
    }
  }

  // A cheap producer (fusion_share.h) that a pointwise group hands out only to
  // other pointwise groups is cloned into each of them, and dropped from its
  // own group where nothing there reads it: each kernel recomputes the mask
  // instead of one storing it and the others loading it.
  void share_producers() {
    for (size_t gid = 0; gid < groups_.size(); ++gid) {
      if (!groups_[gid].alive || groups_[gid].random ||
          !groups_[gid].domain.reduce.empty())
        continue;
      for (Node* m : sorted(groups_[gid].members)) {
        const auto it = group_of_.find(m); // not dropped by an earlier share
        if (it != group_of_.end() && it->second == static_cast<int>(gid))
          share(static_cast<int>(gid), m);
      }
    }
  }

  std::vector<Node*> sorted(std::vector<Node*> members) const {
    std::sort(members.begin(), members.end(), [&](Node* a, Node* b) {
      return pos_.at(a) < pos_.at(b);
    });
    return members;
  }

  // The members of group `gid` that `m`'s value is computed from, `m` last.
  std::vector<Node*> slice_of(int gid, Node* m) const {
    std::vector<Node*> slice = {m};
    for (size_t i = 0; i < slice.size(); ++i)
      for (const Value* in : slice[i]->inputs)
        if (group_of(in) == gid &&
            std::find(slice.begin(), slice.end(), in->producer) == slice.end())
          slice.push_back(in->producer);
    return sorted(slice);
  }

  void share(int gid, Node* m) {
    Value* v = m->outputs[0];
    std::vector<int> homes; // the consumers' groups
    std::vector<Node*> users;
    for (const Use& use : v->uses) {
      const auto it = group_of_.find(use.user);
      if (it != group_of_.end() && it->second == gid)
        continue;
      if (it == group_of_.end())
        return; // an ATen call reads it: stored anyway
      const Group& h = groups_[it->second];
      if (h.random || !h.domain.reduce.empty() ||
          !broadcasts_to(v->sizes, h.domain.sizes))
        return;
      users.push_back(use.user);
      if (std::find(homes.begin(), homes.end(), it->second) == homes.end())
        homes.push_back(it->second);
    }
    const std::vector<Node*> slice = slice_of(gid, m);
    if (homes.empty() || !shareable_members(g_, slice))
      return;
    // The slice's other values stay inside the group (else they are stored).
    for (const Node* s : slice)
      for (const Use& use : s->outputs[0]->uses)
        if (s != m &&
            (!group_of_.count(use.user) || group_of_.at(use.user) != gid))
          return;
    for (int hid : homes) {
      Node* first = nullptr; // the group's first reader of v
      for (Node* u : users)
        if (group_of_.at(u) == hid && (!first || pos_.at(u) < pos_.at(first)))
          first = u;
      std::unordered_map<const Value*, Value*> copy_of;
      const std::vector<Node*> clones =
          clone_members(g_, slice, first, copy_of);
      for (size_t i = 0; i < clones.size(); ++i) {
        pos_[clones[i]] = pos_.at(first) - kPosStep + 1 + i;
        group_of_[clones[i]] = hid;
        level_[clones[i]->outputs[0]] = Level::kFull;
        groups_[hid].members.push_back(clones[i]);
      }
      for (Node* u : users)
        if (group_of_.at(u) == hid)
          for (size_t i = 0; i < u->inputs.size(); ++i)
            if (u->inputs[i] == v)
              g_.replace_input(u, i, copy_of.at(v));
    }
    // The originals nothing reads any more leave their group and the graph.
    for (auto it = slice.rbegin(); it != slice.rend(); ++it) {
      Node* s = *it;
      if (!s->outputs[0]->uses.empty())
        continue;
      std::vector<Node*>& members = groups_[gid].members;
      members.erase(std::find(members.begin(), members.end(), s));
      groups_[gid].alive &= !members.empty();
      group_of_.erase(s);
      level_.erase(s->outputs[0]);
      g_.erase_node(s);
    }
  }

  static bool broadcasts_to(
      const std::vector<int64_t>& s,
      const std::vector<int64_t>& t) {
    if (s.size() > t.size())
      return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t a = s[s.size() - 1 - i];
      if (a != t[t.size() - 1 - i] && a != 1)
        return false;
    }
    return true;
  }

  bool build() {
    bool changed = false;
    int index = 0;
    for (Group& grp : groups_) {
      if (!grp.alive || grp.members.empty())
        continue;
      if (grp.domain.reduce.empty() && grp.members.size() < 2 && !grp.random &&
          !lone_layout_copy(grp.members))
        continue;
      std::sort(
          grp.members.begin(),
          grp.members.end(),
          [&](const Node* a, const Node* b) { return pos_[a] < pos_[b]; });
      make_group(grp, index++);
      changed = true;
    }
    return changed;
  }

 private:
  int group_of(const Value* v) const {
    if (!v->producer)
      return -1;
    auto it = group_of_.find(v->producer);
    return it == group_of_.end() ? -1 : it->second;
  }

  // No node visited before `n`, outside the groups `u` (and not `n`), uses one
  // of their members' outputs.
  bool can_join(const Node* n, const std::vector<int>& u) const {
    for (int gid : u) {
      for (const Node* m : groups_[gid].members) {
        for (const Value* out : m->outputs) {
          for (const Use& use : out->uses) {
            if (use.user == n)
              continue;
            auto it = group_of_.find(use.user);
            const bool inside = it != group_of_.end() &&
                std::find(u.begin(), u.end(), it->second) != u.end();
            if (!inside && pos_.at(use.user) < pos_.at(n))
              return false;
          }
        }
      }
    }
    return true;
  }

  // The domain of the groups `u` merged, if they agree (and a group with a
  // reduction has no typed member: `typed` says whether the joining node is
  // typed).
  // Groups in `inlined` count with domain `inlined_sizes` (broadcast
  // producers, see inlinable).
  std::optional<Domain> merged_domain(
      const std::vector<int>& u,
      bool typed = false,
      const std::vector<int>& inlined = {},
      const std::vector<int64_t>& inlined_sizes = {}) const {
    auto domain_of = [&](int gid) {
      const bool in =
          std::find(inlined.begin(), inlined.end(), gid) != inlined.end();
      return in ? Domain{inlined_sizes, {}} : groups_[gid].domain;
    };
    Domain d = domain_of(u[0]);
    for (int gid : u)
      typed |= groups_[gid].typed;
    for (int gid : u) {
      const Domain o = domain_of(gid);
      if (typed && !o.reduce.empty())
        return std::nullopt;
      if (o.sizes != d.sizes)
        return std::nullopt;
      if (o.reduce.empty())
        continue;
      if (!d.reduce.empty() && d.reduce != o.reduce)
        return std::nullopt;
      d.reduce = o.reduce;
    }
    return d;
  }

  // The level of pointwise `n` in a group of domain `d` made of the groups `u`.
  std::optional<Level> pointwise_level(
      const Node* n,
      const Domain& d,
      const std::vector<int>& u) const {
    const std::vector<int64_t>& sizes = n->outputs[0]->sizes;
    if (d.reduce.empty()) {
      if (sizes != d.sizes)
        return std::nullopt;
      return Level::kFull;
    }
    std::vector<const Value*> outer;
    bool any_full = false;
    for (const Value* in : n->inputs) {
      int gid = group_of(in);
      if (gid < 0 || std::find(u.begin(), u.end(), gid) == u.end())
        continue;
      Level l = level_.at(in);
      if (l == Level::kFull)
        any_full = true;
      else
        outer.push_back(in);
    }
    if (!any_full && !outer.empty()) {
      const Level l = level_.at(outer[0]);
      bool same = true;
      for (const Value* v : outer)
        same &= level_.at(v) == l && v->sizes == sizes;
      if (same)
        return l;
    }
    if (sizes != d.sizes)
      return std::nullopt;
    bool leading = true;
    for (size_t i = 0; i < d.reduce.size(); ++i)
      leading &= d.reduce[i] == static_cast<int64_t>(i);
    for (const Value* v : outer) {
      if (level_.at(v) == Level::kOuter && !leading)
        return std::nullopt;
    }
    return Level::kFull;
  }

  void join(
      Node* n,
      const std::vector<int>& u,
      const Domain& d,
      const std::vector<Level>& levels) {
    int primary = u[0];
    Group& grp = groups_[primary];
    for (size_t i = 1; i < u.size(); ++i) {
      Group& o = groups_[u[i]];
      for (Node* m : o.members)
        group_of_[m] = primary;
      grp.members.insert(grp.members.end(), o.members.begin(), o.members.end());
      o.members.clear();
      o.alive = false;
    }
    grp.domain = d;
    for (size_t i = 1; i < u.size(); ++i) {
      grp.typed |= groups_[u[i]].typed;
      grp.random |= groups_[u[i]].random;
    }
    const OpInfo* op = find_op(*n);
    const bool reduces = op && op->category == OpCategory::kReduction;
    grp.typed |= !reduces && !reduction_member(*n);
    grp.members.push_back(n);
    group_of_[n] = primary;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      level_[n->outputs[i]] = levels[i];
  }

  void start(Node* n, const Domain& d, const std::vector<Level>& levels) {
    groups_.push_back({{}, d, true});
    join(n, {static_cast<int>(groups_.size()) - 1}, d, levels);
  }

  // Whether pointwise group `gid` (sizes S) can be computed inside the group
  // of `n` (sizes T) at T's elements: S broadcasts to T, and only the group
  // and `n` use its members' outputs (so none must be stored at S). Pointwise
  // ops commute with broadcasting, so each member is computed from its inputs
  // broadcast to T (a mask `m == 0` of [B, 1, 1, S] feeding a where over
  // [B, H, S, S]).
  bool inlinable(int gid, const Node* n) const {
    const Group& g = groups_[gid];
    const std::vector<int64_t>& t = n->outputs[0]->sizes;
    const std::vector<int64_t>& s = g.domain.sizes;
    if (g.random || !g.domain.reduce.empty() || s == t || s.size() > t.size())
      return false;
    for (size_t i = 0; i < s.size(); ++i) {
      const int64_t a = s[s.size() - 1 - i], b = t[t.size() - 1 - i];
      if (a != b && a != 1)
        return false;
    }
    for (const Node* m : g.members) {
      for (const Value* out : m->outputs) {
        if (g_.is_output(out))
          return false;
        for (const Use& use : out->uses) {
          auto it = group_of_.find(use.user);
          if (use.user != n && (it == group_of_.end() || it->second != gid))
            return false;
        }
      }
    }
    return true;
  }

  void add_pointwise(Node* n) {
    std::vector<int> candidates;
    for (const Value* in : n->inputs) {
      int gid = group_of(in);
      if (gid >= 0 &&
          std::find(candidates.begin(), candidates.end(), gid) ==
              candidates.end())
        candidates.push_back(gid);
    }
    std::vector<int> u;
    std::optional<Domain> dom;
    std::optional<Level> level;
    const bool typed = !reduction_member(*n);
    std::vector<int> inlined;
    for (int gid : candidates)
      if (inlinable(gid, n))
        inlined.push_back(gid);
    for (int gid : candidates) {
      bool reads_index = false; // an int64 index of a reduction (argmax)
      for (const Value* in : n->inputs)
        reads_index |= group_of(in) == gid && index_values_.count(in);
      if (reads_index)
        continue;
      std::vector<int> trial = u;
      trial.push_back(gid);
      auto d = merged_domain(trial, typed, inlined, n->outputs[0]->sizes);
      if (!d)
        continue;
      auto l = pointwise_level(n, *d, trial);
      if (!l || !can_join(n, trial))
        continue;
      u = trial;
      dom = d;
      level = l;
    }
    if (u.empty()) {
      start(n, {n->outputs[0]->sizes, {}}, {Level::kFull});
    } else {
      // A group that computes a broadcast producer at larger sizes stays
      // out of reduction kernels (their members have the domain's sizes).
      bool broadcast = false;
      for (int gid : u)
        broadcast |= groups_[gid].domain.sizes != dom->sizes;
      join(n, u, *dom, {*level});
      groups_[u[0]].typed |= broadcast;
    }
  }

  void add_reduction(Node* n, const ReductionInfo& info) {
    if (info.integer) { // exact int64: a group of its own
      start(n, info.domain, info.levels);
      groups_.back().typed = true;
      return;
    }
    const Value* x = n->tensor_arg(0);
    int gid = group_of(x);
    bool others_inside = false;
    for (size_t i = 1; i < n->inputs.size(); ++i)
      others_inside |= n->inputs[i] != x && group_of(n->inputs[i]) == gid;
    if (gid >= 0 && !others_inside && !groups_[gid].typed &&
        level_.at(x) == Level::kFull) {
      const Domain& d = groups_[gid].domain;
      const bool fits = d.sizes == info.domain.sizes &&
          (d.reduce.empty() || d.reduce == info.domain.reduce);
      if (fits && can_join(n, {gid})) {
        join(n, {gid}, info.domain, info.levels);
        mark_index(n, info);
        return;
      }
    }
    start(n, info.domain, info.levels);
    mark_index(n, info);
  }

  void mark_index(const Node* n, const ReductionInfo& info) {
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (info.index[i])
        index_values_.insert(n->outputs[i]);
  }

  Node* make_group(const Group& grp, int index) {
    std::vector<std::string> levels;
    for (const Node* m : grp.members)
      levels.emplace_back(level_name(level_.at(m->outputs[0])));
    return make_fused_node(
        g_, grp.members, levels, grp.domain.sizes, grp.domain.reduce, index);
  }

  Graph& g_;
  bool fallback_random_;
  std::unordered_map<const Node*, size_t> pos_;
  std::unordered_map<const Node*, int> group_of_;
  std::unordered_map<const Value*, Level> level_;
  std::unordered_set<const Value*> index_values_;
  std::unordered_set<const Node*> observable_views_;
  std::vector<Group> groups_;
};

bool run(Graph& g, const PassOptions& options) {
  if (!options.fusion)
    return false;
  if (options.log_kernels) // ATen pointwise ops that stay ATen calls, and why
    for (const Node* n : g.nodes()) {
      auto why = pointwise_fallback_reason(*n);
      if (!why)
        why = random_fallback_reason(*n, options.fallback_random);
      if (why)
        std::cerr << "[torch_plugin kernels] " << n->qualified_name()
                  << " stays an ATen call: " << *why << std::endl;
    }
  // A cast after a view joins the kernel before the view (fusion_casts.h).
  sink_casts_below_views(g);
  Fusion f(g, options.fallback_random);
  f.group_nodes();
  f.share_producers();
  return f.build();
}

} // namespace

const PassInfo kFusion = {
    "fusion",
    "Groups pointwise ops, reductions, softmax and layer norms whose dtypes the device's "
    "kernels handle into fusion groups (torch_plugin::fused nodes with a body; the codegen "
    "pass renders their kernels).",
    run};

} // namespace torch_plugin::compiler
