// bindings_cuda.cpp: torch_plugin._C._cuda — Python access to runtime/cuda for
// tests and diagnostics: compile-only NVRTC checks (no GPU needed), launching a
// hand-written kernel on tensors, and the CUDA kernel cache's statistics.
//
// Python objects: tensors cross as borrowed PyObject* (THPVariable_Unpack).
// GIL: released while NVRTC compiles and while a kernel is loaded and launched.
#include "python/bindings_cuda.h"
#include "python/device_bindings.h"
#include "python/gil_release.h"

#include "libs/cublaslt.h"
#include "runtime/cuda/cuda_kernels.h"

#include <pybind11/stl.h>
#include <torch/csrc/autograd/python_variable.h>

namespace py = pybind11;

namespace torch_plugin::python {

void init_cuda(py::module_& parent) {
  namespace rc = runtime::cuda;
  py::module_ m = parent.def_submodule(
      "_cuda", "torch_plugin's CUDA runtime (NVRTC + driver API)");
  m.def(
      "nvrtc_compile_check",
      [](const std::string& source, const std::string& arch) {
        GilRelease no_gil; // parks at interpreter exit (gil_release.h)
        return rc::nvrtc_compile_check(source, arch);
      },
      py::arg("source"),
      py::arg("arch"),
      "Compiles CUDA C++ `source` with NVRTC for `arch` ('sm_90' or "
      "'compute_90') and returns the PTX; raises RuntimeError with NVRTC's "
      "log and the failing source lines. Needs NVRTC only (no GPU).");
  m.def(
      "nvrtc_version",
      [] {
        int v = rc::nvrtc_version();
        return py::make_tuple(v / 1000, (v % 1000) / 10);
      },
      "(major, minor) of the NVRTC in use.");
  m.def(
      "launch",
      [](const std::string& source,
         const std::string& entry,
         int64_t grid,
         int64_t block,
         int64_t shared_bytes,
         const std::vector<py::handle>& tensors) {
        std::vector<at::Tensor> ts;
        for (py::handle h : tensors) {
          if (!THPVariable_Check(h.ptr()))
            throw py::type_error("launch: expected torch.Tensor arguments");
          ts.push_back(THPVariable_Unpack(h.ptr()));
        }
        TORCH_CHECK(!ts.empty(), "launch: give at least one tensor");
        const c10::Device device = ts[0].device();
        std::vector<void*> pointers;
        for (const at::Tensor& t : ts) {
          TORCH_CHECK(
              t.device() == device,
              "launch: every tensor must be on ",
              device,
              ", got one on ",
              t.device());
          pointers.push_back(t.data_ptr());
        }
        TORCH_CHECK(device.is_cuda(), "launch: tensors must be on CUDA");
        GilRelease no_gil; // parks at interpreter exit (gil_release.h)
        rc::CudaFunction f =
            rc::load_cuda_kernel(source, entry, device.index(), entry);
        rc::launch_cuda_kernel(f, grid, block, shared_bytes, pointers);
      },
      py::arg("source"),
      py::arg("entry"),
      py::arg("grid"),
      py::arg("block"),
      py::arg("shared_bytes"),
      py::arg("tensors"),
      "Compiles (or finds in the kernel cache) `source` for the tensors' "
      "device and launches `entry` 1-d on the current stream with one pointer "
      "parameter per tensor (each tensor's data_ptr, in order).");
  m.def(
      "cache_stats",
      [] {
        auto s = rc::cuda_kernel_cache_stats();
        py::dict d;
        d["compiled"] = s.compiled;
        d["disk_hits"] = s.disk_hits;
        d["memory_hits"] = s.memory_hits;
        d["disk_rejected"] = s.disk_rejected;
        return d;
      },
      "Counters of the CUDA kernel cache in this process.");
  m.def(
      "cache_dir",
      &rc::cuda_kernel_cache_dir,
      "The folder of cached CUDA kernels (<kernel cache dir>/cuda).");
  m.def(
      "cublaslt_padding",
      [](std::optional<int64_t> scratch_bytes, std::optional<bool> in_place) {
        namespace lt = libs::cublaslt;
        const int64_t before = lt::padded_scratch_bytes();
        const bool in_place_before = lt::padded_in_place();
        if (scratch_bytes)
          lt::set_padded_scratch_bytes(*scratch_bytes);
        if (in_place)
          lt::set_padded_in_place(*in_place);
        py::dict d;
        d["scratch_bytes"] = before;
        d["in_place_on"] = in_place_before;
        d["products"] = lt::padded_products();
        d["in_place"] = lt::split_products();
        return d;
      },
      py::arg("scratch_bytes") = py::none(),
      py::arg("in_place") = py::none(),
      "cuBLASLt products whose output rows are not 16-byte aligned, computed "
      "padded (libs/cublaslt.h, padded_chunk_desc): {'scratch_bytes': the "
      "scratch limit before this call, 'products': padded products run in "
      "this process, 'in_place': those of them computed in place by row "
      "classes (padded_split), 'in_place_on': whether row classes were on "
      "before this call}; `scratch_bytes` sets the limit (0: off) and "
      "`in_place` turns row classes on or off (off: chunks) for plans and "
      "runs from now on.");
  m.def(
      "padded_split",
      [](int64_t m_rows,
         int64_t n,
         int64_t k,
         const std::string& dtype,
         std::optional<int64_t> ldd,
         bool residual) {
        namespace lt = libs::cublaslt;
        lt::MatmulDesc d;
        d.m = m_rows;
        d.n = n;
        d.k = k;
        d.dtype = dtype == "fp32" ? lt::DType::kFloat32
            : dtype == "fp16"     ? lt::DType::kFloat16
                                  : lt::DType::kBFloat16;
        d.lda = k; // x [m, k] row-major, w [n, k] row-major (B transposed)
        d.trans_b = true;
        d.ldb = k;
        d.ldd = ldd.value_or(n);
        d.has_c = residual;
        d.ldc = residual ? d.ldd : 0;
        py::object out = py::none();
        const std::optional<lt::PaddedSplit> split = lt::padded_split(d);
        if (!split)
          return out;
        py::list parts;
        for (const lt::PaddedSplit::Part& p : split->parts) {
          py::dict e;
          e["row0"] = p.row0;
          e["col0"] = p.col0;
          e["m"] = p.desc.m;
          e["n"] = p.desc.n;
          e["lda"] = p.desc.lda;
          e["ldd"] = p.desc.ldd;
          e["ldc"] = p.desc.ldc;
          e["align_a"] = p.desc.align_a;
          e["align_b"] = p.desc.align_b;
          e["align_c"] = p.desc.align_c;
          e["align_d"] = p.desc.align_d;
          parts.append(e);
        }
        py::dict r;
        r["period"] = split->period;
        r["parts"] = parts;
        r["head_n"] = split->head.n;
        r["head_ldd"] = split->head.ldd;
        r["head_m"] = split->head.m;
        r["tail_col0"] = split->tail_col0;
        r["tail_n"] = split->tail.n;
        r["tail_ldd"] = split->tail.ldd;
        return py::object(r);
      },
      py::arg("m"),
      py::arg("n"),
      py::arg("k"),
      py::arg("dtype"),
      py::arg("ldd") = py::none(),
      py::arg("residual") = false,
      "The in-place split (libs/cublaslt.h, padded_split) of the product of "
      "x [m, k] and w [n, k], both row-major and 256-byte aligned, into an "
      "output of row stride ldd (default n): None where it does not apply, "
      "else {'period', 'parts': [{row0, col0, m, n, lda, ldd, ldc, align_a, "
      "align_b, align_c, align_d}], 'head_m', 'head_n', 'head_ldd', "
      "'tail_col0', 'tail_n', 'tail_ldd'}. No GPU needed (tests).");
}

namespace {

const DeviceBindings kCudaBindings(init_cuda);

} // namespace

} // namespace torch_plugin::python
