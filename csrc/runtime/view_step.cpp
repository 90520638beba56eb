// view_step.cpp: native steps for the view ops of the IR (aten::view,
// permute, transpose, unsqueeze, squeeze, select, slice, split, ...) and for a
// concatenation all of whose inputs but one are empty (a key/value cache's
// first step: cat([past, k]) with an empty past).
//
// Why: a transformer's graph holds about as many views as it holds other ops
// (GPT-2 with 4 layers: 54 views, 16 permutes, 8 cats, 4 splits of its 140
// steps). As fallback steps each one builds a boxed argument stack and calls
// the op through the dispatcher's boxed path (about 2 us; GPT-2 batch 1 spends
// 0.2-0.3 ms of a 5 ms call there); here each is one unboxed ATen call whose
// constant arguments were converted once, when the step was built. The result
// is the one the ATen op returns (same function, same dispatch keys below the
// boxing: views stay views of their input, with ATen's own view metadata), so
// aliasing, lifetimes (Executor: aliases extend their inputs' lifetimes) and
// what a user observes are unchanged. The cat step writes the one non-empty
// input into the output buffer the IR promised (its sizes and strides), which
// is what ATen's cat returns: the concatenation's values, in a new tensor.
//
// Anything else (a symbolic or tensor argument, an op not listed, a cat of
// several non-empty inputs or mixed dtypes) returns nullptr: the fallback
// step runs the op.
#include "runtime/step.h"

#include <ATen/ATen.h>

#include <functional>
#include <optional>

namespace torch_plugin::runtime {
namespace {

using ir::AttrValue;
using ir::Node;

// The i-th argument as an int / int list / optional int, or nullopt when it is
// not a constant of that type.
std::optional<int64_t> int_arg(const Node& n, size_t i) {
  if (i >= n.args.size() || n.args[i].kind != ir::Arg::Kind::kConst)
    return std::nullopt;
  if (auto* v = std::get_if<int64_t>(&n.args[i].value))
    return *v;
  return std::nullopt;
}

std::optional<std::vector<int64_t>> ints_arg(const Node& n, size_t i) {
  if (i >= n.args.size() || n.args[i].kind != ir::Arg::Kind::kConst)
    return std::nullopt;
  if (auto* v = std::get_if<std::vector<int64_t>>(&n.args[i].value))
    return *v;
  return std::nullopt;
}

// An optional int argument (slice's start/end): a value, None, or absent
// (the schema default None). `ok` is false for anything else.
std::optional<int64_t> opt_int_arg(const Node& n, size_t i, bool& ok) {
  if (i >= n.args.size())
    return std::nullopt;
  if (n.args[i].kind != ir::Arg::Kind::kConst) {
    ok = false;
    return std::nullopt;
  }
  if (std::holds_alternative<std::monostate>(n.args[i].value))
    return std::nullopt;
  if (auto* v = std::get_if<int64_t>(&n.args[i].value))
    return *v;
  ok = false;
  return std::nullopt;
}

// One view op with its converted arguments: computes the outputs from the
// input tensor.
using ViewFn = std::function<std::vector<at::Tensor>(const at::Tensor&)>;

std::optional<ViewFn> view_fn(const Node& n) {
  const std::string op = n.qualified_name();
  auto one = [](at::Tensor t) {
    return std::vector<at::Tensor>{std::move(t)};
  };
  if (op == "aten::view" || op == "aten::_unsafe_view" ||
      op == "aten::reshape") {
    auto size = ints_arg(n, 1);
    if (!size)
      return std::nullopt;
    if (op == "aten::view")
      return [s = *size, one](const at::Tensor& t) {
        return one(t.view(s));
      };
    if (op == "aten::_unsafe_view")
      return [s = *size, one](const at::Tensor& t) {
        return one(at::_unsafe_view(t, s));
      };
    return [s = *size, one](const at::Tensor& t) {
      return one(t.reshape(s));
    };
  }
  if (op == "aten::permute") {
    auto dims = ints_arg(n, 1);
    if (!dims)
      return std::nullopt;
    return [d = *dims, one](const at::Tensor& t) {
      return one(t.permute(d));
    };
  }
  if (op == "aten::t")
    return [one](const at::Tensor& t) {
      return one(t.t());
    };
  if (op == "aten::transpose.int") {
    auto a = int_arg(n, 1), b = int_arg(n, 2);
    if (!a || !b)
      return std::nullopt;
    return [a = *a, b = *b, one](const at::Tensor& t) {
      return one(t.transpose(a, b));
    };
  }
  if (op == "aten::unsqueeze" || op == "aten::squeeze.dim") {
    auto d = int_arg(n, 1);
    if (!d)
      return std::nullopt;
    if (op == "aten::unsqueeze")
      return [d = *d, one](const at::Tensor& t) {
        return one(t.unsqueeze(d));
      };
    return [d = *d, one](const at::Tensor& t) {
      return one(t.squeeze(d));
    };
  }
  // squeeze.dims (F.multi_head_attention_forward's `.squeeze(-2)` after a
  // transpose traces as squeeze.dims([-2])) and squeeze of every size-1 dim.
  if (op == "aten::squeeze.dims") {
    auto dims = ints_arg(n, 1);
    if (!dims)
      return std::nullopt;
    return [d = *dims, one](const at::Tensor& t) {
      return one(t.squeeze(d));
    };
  }
  if (op == "aten::squeeze" && n.args.size() == 1)
    return [one](const at::Tensor& t) {
      return one(t.squeeze());
    };
  if (op == "aten::select.int") {
    auto d = int_arg(n, 1), i = int_arg(n, 2);
    if (!d || !i)
      return std::nullopt;
    return [d = *d, i = *i, one](const at::Tensor& t) {
      return one(t.select(d, i));
    };
  }
  if (op == "aten::slice.Tensor") {
    bool ok = true;
    auto d = int_arg(n, 1);
    auto start = opt_int_arg(n, 2, ok), end = opt_int_arg(n, 3, ok);
    auto step = n.args.size() > 4 ? int_arg(n, 4) : std::optional<int64_t>(1);
    if (!d || !step || !ok)
      return std::nullopt;
    return [d = *d, start, end, step = *step, one](const at::Tensor& t) {
      return one(t.slice(d, start, end, step));
    };
  }
  if (op == "aten::expand") {
    auto size = ints_arg(n, 1);
    if (!size || n.args.size() > 3)
      return std::nullopt;
    // `implicit` (AOTAutograd's matmul decomposition gives False) only marks
    // the view for autograd's error messages.
    bool implicit = false;
    if (n.args.size() == 3) {
      const auto* b = n.args[2].kind == ir::Arg::Kind::kConst
          ? std::get_if<bool>(&n.args[2].value)
          : nullptr;
      if (!b)
        return std::nullopt;
      implicit = *b;
    }
    return [s = *size, implicit, one](const at::Tensor& t) {
      return one(t.expand(s, implicit));
    };
  }
  if (op == "aten::split_with_sizes" || op == "aten::split.Tensor") {
    auto d = n.args.size() > 2 ? int_arg(n, 2) : std::optional<int64_t>(0);
    if (!d)
      return std::nullopt;
    if (op == "aten::split.Tensor") {
      auto size = int_arg(n, 1);
      if (!size)
        return std::nullopt;
      return [s = *size, d = *d](const at::Tensor& t) {
        return t.split(s, d);
      };
    }
    auto sizes = ints_arg(n, 1);
    if (!sizes)
      return std::nullopt;
    return [s = *sizes, d = *d](const at::Tensor& t) {
      return t.split_with_sizes(s, d);
    };
  }
  if (op == "aten::alias")
    return [one](const at::Tensor& t) {
      return one(at::alias(t));
    };
  if (op == "aten::view.dtype") { // a bitcast outside a kernel
    auto d = int_arg(n, 1);
    if (!d)
      return std::nullopt;
    return [one, t = static_cast<c10::ScalarType>(*d)](const at::Tensor& x) {
      return one(x.view(t));
    };
  }
  return std::nullopt;
}

class ViewStep final : public Step {
 public:
  ViewStep(const Node& n, const SlotMap& slots, ViewFn fn)
      : fn_(std::move(fn)),
        in_(slots.slot(n.tensor_arg(0))),
        name_(n.qualified_name()) {
    for (const ir::Value* v : n.outputs)
      outs_.push_back(slots.slot(v));
  }

  void run(Slots& s) const override {
    std::vector<at::Tensor> r = fn_(s[in_]);
    TORCH_CHECK(
        r.size() == outs_.size(),
        name_,
        ": ",
        r.size(),
        " results, the graph has ",
        outs_.size());
    for (size_t i = 0; i < outs_.size(); ++i)
      s[outs_[i]] = std::move(r[i]);
  }
  std::string describe() const override {
    return "view " + name_;
  }

 private:
  ViewFn fn_;
  int in_;
  std::vector<int> outs_;
  std::string name_;
};

// cat(tensors, dim) where every input but one has no elements (its legacy 1-d
// [0] form included) and all share the output's dtype: the output is a copy of
// that input, into the buffer with the output's promised sizes and strides.
class CatOneStep final : public Step {
 public:
  CatOneStep(const Node& n, const SlotMap& slots, const ir::Value* kept)
      : in_(slots.slot(kept)),
        out_(slots.slot(n.outputs[0])),
        buffer_(*n.outputs[0], slots) {}

  void run(Slots& s) const override {
    at::Tensor y = buffer_.get(s);
    y.copy_(s[in_]);
    s[out_] = std::move(y);
  }
  std::string describe() const override {
    return "view aten::cat (one non-empty input: a copy)";
  }

 private:
  int in_, out_;
  OutputBuffer buffer_;
};

std::unique_ptr<Step> make_cat_step(const Node& n, const SlotMap& slots) {
  if (n.args.empty() || n.args[0].kind != ir::Arg::Kind::kTensorList ||
      n.outputs.size() != 1)
    return nullptr;
  const ir::Value* out = n.outputs[0];
  const ir::Value* kept = nullptr;
  for (int64_t i : n.args[0].inputs) {
    if (i < 0)
      return nullptr;
    const ir::Value* v = n.inputs[static_cast<size_t>(i)];
    if (v->dtype != out->dtype || v->device != out->device)
      return nullptr; // type promotion or a device move: the ATen op
    if (v->numel() == 0)
      continue;
    if (kept)
      return nullptr; // two non-empty inputs: a real concatenation
    kept = v;
  }
  if (!kept || kept->sizes != out->sizes)
    return nullptr;
  return std::make_unique<CatOneStep>(n, slots, kept);
}

} // namespace

std::unique_ptr<Step> make_view_step(const Node& node, const SlotMap& slots) {
  if (node.op == "aten::cat")
    return make_cat_step(node, slots);
  if (node.outputs.empty() || !node.tensor_arg(0))
    return nullptr;
  for (size_t i = 1; i < node.args.size(); ++i) {
    if (node.args[i].kind != ir::Arg::Kind::kConst)
      return nullptr; // a tensor argument (a symbolic size): the fallback
  }
  std::optional<ViewFn> fn = view_fn(node);
  if (!fn)
    return nullptr;
  return std::make_unique<ViewStep>(node, slots, std::move(*fn));
}

} // namespace torch_plugin::runtime
