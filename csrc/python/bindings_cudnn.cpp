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
        return d;
      },
      "Process-wide counts: cuDNN executions (fused: with an epilogue), plans "
      "built, descriptors without an engine, split runs (conv through cuDNN, "
      "epilogue with ATen) and ATen convolutions.");
  m.def("reset_counters", &cd::reset_counters, "Sets every counter to 0.");
}

const DeviceBindings kCudnnBindings(init_cudnn);

} // namespace

} // namespace torch_plugin::python
