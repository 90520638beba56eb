// pattern_rules.h: rewrite rules as rows of data, and the matcher that runs
// them (the library_patterns pass's rules are such rows).
//
// A rule is one row: its source position (TP_RULE_SOURCE, first), its name,
// the devices it is for, the library op its rewrite makes (the rule fires only
// where that op has a kernel for the device: a build without the CUDA parts
// has no CUDA linear_pointwise, so the cuBLASLt rows never fire there), the
// ops it starts from (its roots), a binder that finds the candidate pieces
// around a root (the library node behind a view, the two sides of an add),
// its named constraints and the rewrite. The matcher tries each rule on every
// node on one of its devices, in order; a candidate whose constraints all hold
// is rewritten. With PassOptions::log_patterns (TORCH_PLUGIN_LOGS=patterns)
// each rule that fires, and each candidate a constraint rejects (with that
// constraint's name), goes to stderr with the rule's name and source line;
// firings also go to VLOG(1). Models: tinygrad's PatternMatcher (rules as
// (pattern, rewrite) pairs), Triton's Combine.td (declarative patterns with
// named constraints).
#pragma once

#include "compiler/passes/pass.h"
#include "ir/op_table.h"

#include <c10/core/DeviceType.h>

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace torch_plugin::compiler {

// The pieces of one candidate match that constraints and rewrites read.
struct Match {
  Node* root = nullptr; // the node the rule starts from
  Node* lib = nullptr; // the library node the root follows (or nullptr)
  Node* view = nullptr; // a single-use view between lib and root (or nullptr)
  Value* y = nullptr; // the root's operand that lib (or view) produced
  Value* other = nullptr; // the root's other operand (addend, bias, residual)
  Node* mid = nullptr; // an op between lib and root (fuse_scale_shift's mul)
  Value* mid_other = nullptr; // mid's other operand (the scale)
};

// Rule::devices of the rules that run on one device.
inline const std::vector<c10::DeviceType> kCpu = {c10::DeviceType::CPU};
inline const std::vector<c10::DeviceType> kCuda = {c10::DeviceType::CUDA};

struct Constraint {
  const char* name; // what must hold, as logged when it does not
  bool (*holds)(const Graph& g, const Match& m);
};

struct Rule {
  const char* file; // where the row is: TP_RULE_SOURCE
  int line;
  const char* name;
  std::vector<c10::DeviceType> devices; // every tensor of the root is on one
  // The library op the rewrite makes or extends: the rule fires on a device
  // only where this op has a kernel for it.
  const char* makes;
  std::vector<std::string> roots; // qualified op names the rule starts from
  // The candidates at `root` (already of one of `roots` and on a device of the
  // rule), tried in order; none: the rule does not apply.
  std::vector<Match> (*bind)(const Graph& g, Node* root);
  std::vector<Constraint> constraints;
  void (*rewrite)(Graph& g, const Match& m);
};

// The source position of a row: `Rule{TP_RULE_SOURCE, "name", ...}`.
#define TP_RULE_SOURCE __FILE__, __LINE__

// Runs `rules` in order, each over every node of `g` (a snapshot; nodes the
// rewrites erase are skipped). `pass` names the log lines. Returns whether a
// rule fired.
bool run_rules(
    const char* pass,
    const std::vector<Rule>& rules,
    Graph& g,
    const PassOptions& options);

// Binders shared by rule rows.
// Just the root.
std::vector<Match> bind_root(const Graph& g, Node* root);
// The root's schema argument 0 (y, made by a node), through one single-use
// view of it: lib = y's producer, or the producer of the view's input.
std::vector<Match> bind_through_view(const Graph& g, Node* root);

// The producer of y, looking through one view (aten::view, _unsafe_view) of
// a single-use value: then *view is that view node (else nullptr).
Node* producer_through_view(Value* y, const Graph& g, Node** view);

// The two ways round of a commutative add(a, b): y = a, other = b and the
// reverse, each with y's producer as lib; through one single-use view of y
// (then m.view is it) in the second form.
std::vector<Match> bind_add_sides(const Graph& g, Node* root);
std::vector<Match> bind_add_sides_through_view(const Graph& g, Node* root);

// Common predicates.
bool is_const(const Value* v);
bool single_use(const Value* v, const Graph& g);
bool is_one(const AttrValue& v); // an int 1 or a double 1.0
// Constraints: the root add's alpha is 1; the root's operand m.y is used once.
bool alpha_one(const Graph& g, const Match& m);
bool y_single_use(const Graph& g, const Match& m);

// Library nodes (torch_plugin::conv_pointwise, linear_pointwise; their
// arguments: ir::schema::library).
// Whether `lib` has an activation already.
bool has_activation(const Node* lib);
// A new library node of `op` before `before`: (x, w, b?, residual=None,
// `middle`..., activation "", alpha 0, beta 0), its output typed as `like`.
Node* make_library_node(
    Graph& g,
    const std::string& op,
    Node* before,
    Value* x,
    Value* w,
    Value* b,
    std::vector<Arg> middle,
    const Value* like);
// A copy of library node `lib`, inserted before `before`, whose schema
// arguments `extra` (bias, residual, scale, shift) are the given tensors; its
// output has lib's type.
Node* with_tensor_args(
    Graph& g,
    const Node* lib,
    std::initializer_list<std::pair<size_t, Value*>> extra,
    Node* before);
// Replaces the root by the library node `lib` (or by m.view of it).
void replace_root(Graph& g, const Match& m, Node* lib);
// Rewrites shared by the CPU and CUDA rows:
// add(lib(...), r) [bind_add_sides] => lib(..., residual=r), lib moved down to
// the add (r must be computed before it runs);
void fuse_residual_add(Graph& g, const Match& m);
// act(lib(...)) [bind_through_view; an op with an epilogue in the op table] =>
// lib(..., activation).
void fuse_activation(Graph& g, const Match& m);

} // namespace torch_plugin::compiler
