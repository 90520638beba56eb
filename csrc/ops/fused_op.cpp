// fused_op.cpp: torch_plugin::fused's argument reader and its Meta kernel
// (see fused_op.h; the schema is in library_ops.cpp, the CPU kernel in
// cpu/fused_kernel.cpp).
#include "ops/fused_op.h"

#include <ATen/ops/empty_strided.h>
#include <c10/util/irange.h>
#include <torch/library.h>

namespace torch_plugin::ops {
namespace {

std::vector<std::vector<int64_t>> int_lists(const c10::IValue& v) {
  std::vector<std::vector<int64_t>> out;
  for (const c10::IValue& e : v.toListRef())
    out.push_back(e.toIntVector());
  return out;
}

std::vector<c10::ScalarType> dtypes(const c10::IValue& v) {
  std::vector<c10::ScalarType> out;
  for (const c10::IValue& e : v.toListRef())
    out.push_back(e.toScalarType());
  return out;
}

std::vector<FusedOperand> operands(
    const std::string& name,
    const char* what,
    const c10::IValue& sizes,
    const c10::IValue& strides,
    const c10::IValue& types) {
  auto s = int_lists(sizes);
  auto st = int_lists(strides);
  auto d = dtypes(types);
  TORCH_CHECK(
      s.size() == st.size() && s.size() == d.size(),
      "torch_plugin::fused (",
      name,
      "): ",
      what,
      "_sizes, ",
      what,
      "_strides and ",
      what,
      "_dtypes have different lengths (",
      s.size(),
      ", ",
      st.size(),
      ", ",
      d.size(),
      ")");
  std::vector<FusedOperand> out(s.size());
  for (const auto i : c10::irange(s.size())) {
    TORCH_CHECK(
        s[i].size() == st[i].size(),
        "torch_plugin::fused (",
        name,
        "): ",
        what,
        " ",
        i,
        " has ",
        s[i].size(),
        " sizes but ",
        st[i].size(),
        " strides");
    out[i] = {std::move(s[i]), std::move(st[i]), d[i]};
  }
  return out;
}

// Meta (and FakeTensor) kernel: checks the inputs, returns empty outputs of the
// planned types.
void fused_meta(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  FusedCall call = read_fused_call(*stack);
  std::vector<at::Tensor> outputs;
  for (const FusedOperand& o : call.output_types) {
    outputs.push_back(at::empty_strided(
        o.sizes,
        o.strides,
        at::TensorOptions().dtype(o.dtype).device(c10::kMeta)));
  }
  torch::jit::drop(*stack, kFusedNumArguments);
  torch::jit::push(*stack, c10::IValue(std::move(outputs)));
}

} // namespace

FusedCall read_fused_call(const torch::jit::Stack& stack) {
  TORCH_CHECK(
      stack.size() >= kFusedNumArguments,
      "torch_plugin::fused: expected ",
      kFusedNumArguments,
      " arguments");
  const c10::IValue* a = stack.data() + stack.size() - kFusedNumArguments;
  FusedCall call;
  call.name = &a[8].toStringRef();
  const std::string& name = *call.name;
  call.inputs = a[0].toTensorVector();
  call.source = &a[1].toStringRef();
  call.input_types = operands(name, "input", a[2], a[3], a[4]);
  call.output_types = operands(name, "output", a[5], a[6], a[7]);
  call.target = &a[9].toStringRef();
  call.entry = &a[10].toStringRef();
  call.grid = a[11].toInt();
  call.block = a[12].toInt();
  call.shared_bytes = a[13].toInt();
  TORCH_CHECK(
      *call.target == "cpp" || *call.target == "cuda",
      "torch_plugin::fused (",
      name,
      "): unknown target '",
      *call.target,
      "' (expected \"cpp\" or \"cuda\")");
  TORCH_CHECK(
      call.inputs.size() == call.input_types.size(),
      "torch_plugin::fused (",
      name,
      "): ",
      call.inputs.size(),
      " inputs given, the kernel takes ",
      call.input_types.size());
  for (const auto i : c10::irange(call.inputs.size())) {
    const at::Tensor& t = call.inputs[i];
    const FusedOperand& want = call.input_types[i];
    TORCH_CHECK(
        t.scalar_type() == want.dtype,
        "torch_plugin::fused (",
        name,
        "): input ",
        i,
        " has dtype ",
        t.scalar_type(),
        ", the kernel was generated for ",
        want.dtype);
    c10::SymIntArrayRef sizes = t.sym_sizes();
    bool same = sizes.size() == want.sizes.size();
    for (size_t d = 0; same && d < sizes.size(); ++d) {
      same = sizes[d] == want.sizes[d];
    }
    TORCH_CHECK(
        same,
        "torch_plugin::fused (",
        name,
        "): input ",
        i,
        " has sizes ",
        sizes,
        ", the kernel was generated for ",
        c10::IntArrayRef(want.sizes),
        " (generated kernels have static shapes)");
  }
  return call;
}


} // namespace torch_plugin::ops

TORCH_LIBRARY_IMPL(torch_plugin, Meta, m) {
  m.impl(
      "fused",
      torch::CppFunction::makeFromBoxedFunction<
          &torch_plugin::ops::fused_meta>());
}
