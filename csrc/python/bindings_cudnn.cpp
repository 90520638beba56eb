// bindings_cudnn.cpp: torch_plugin._C._cudnn — the cuDNN convolution library's
// process-wide counters and availability (libs/cudnn_conv.h), for tests and
// diagnostics. Built with the cuDNN parts only (csrc/CMakeLists.txt).
#include "libs/cudnn_conv.h"
#include "python/device_bindings.h"

#include <pybind11/stl.h>

namespace py = pybind11;

namespace torch_plugin::python {

namespace {

void init_cudnn(py::module_& parent) {
  namespace cd = libs::cudnn;
  py::module_ m = parent.def_submodule(
      "_cudnn", "torch_plugin's cuDNN convolutions (graph API)");
  m.def(
      "available",
      [] {
        std::string why;
        bool ok = cd::available(&why);
        return py::make_tuple(ok, why);
      },
      "(ok, why): whether cuDNN 9 (torch's libcudnn.so.9) is loaded.");
  m.def(
      "counters",
      [] {
        cd::Counters c = cd::counters();
        py::dict d;
        d["executions"] = c.executions;
        d["fused"] = c.fused;
        d["plans"] = c.plans;
        d["no_engine"] = c.no_engine;
        d["split"] = c.split;
        d["aten"] = c.aten;
        d["disk_hits"] = c.disk_hits;
        d["disk_replays"] = c.disk_replays;
        d["disk_writes"] = c.disk_writes;
        d["disk_rejected"] = c.disk_rejected;
        d["parallel_builds"] = c.parallel_builds;
        return d;
      },
      "Process-wide counts: cuDNN executions (fused: with an epilogue), plans "
      "made (built or loaded), descriptors without an engine, split runs (conv "
      "through cuDNN, epilogue with ATen), ATen convolutions; the plan store's "
      "hits (deserialized plans), replays (engine and knobs rebuilt), writes "
      "and rejected entries; plan_convs calls that used several threads.");
  m.def("reset_counters", &cd::reset_counters, "Sets every counter to 0.");
  m.def(
      "build_threads",
      [](std::optional<int> threads) {
        if (threads)
          cd::set_build_threads(*threads);
        return cd::build_threads();
      },
      py::arg("threads") = py::none(),
      "Threads that build a compiled graph's cuDNN plans at once (sets it "
      "first when given: 0 for the default, min(8, cores)); returns it.");
  m.def(
      "store_key",
      [](const std::vector<int64_t>& x,
         const std::vector<int64_t>& w,
         const std::string& dtype,
         int device) {
        cd::ConvDesc d;
        d.x_sizes = x;
        d.w_sizes = w;
        d.dtype = dtype == "bf16" ? c10::ScalarType::BFloat16
            : dtype == "fp16"     ? c10::ScalarType::Half
                                  : c10::ScalarType::Float;
        d.device = device;
        return cd::plan_store_key(d);
      },
      "The plan store key of a bare descriptor (tests: what it names).");
}

const DeviceBindings kCudnnBindings(init_cudnn);

} // namespace

} // namespace torch_plugin::python
