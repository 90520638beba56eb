// module.cpp: the extension module torch_plugin._C.
//
// Owns: nothing but the module object; each part of csrc registers its own API
// through an init_<part>(m) function (pybind11 FAQ, "How can I reduce the build
// time?"), and the parts only some builds have (a device's submodule) through
// device_bindings.h. `import torch` first, so that torch's Python types
// (THPVariableClass, used by tensor guards) exist before any of our code runs.
// GIL: held (module init). Python objects: none kept here.
#include <pybind11/pybind11.h>

#include "python/bindings_capture.h"
#include "python/bindings_compiler.h"
#include "python/device_bindings.h"

#include <vector>

namespace torch_plugin::python {
namespace {

std::vector<BindingsInit>& device_initializers() {
  static std::vector<BindingsInit> inits;
  return inits;
}

} // namespace

DeviceBindings::DeviceBindings(BindingsInit init) {
  device_initializers().push_back(init);
}

void init_device_bindings(pybind11::module_& m) {
  for (BindingsInit init : device_initializers())
    init(m);
}

} // namespace torch_plugin::python

PYBIND11_MODULE(_C, m) {
  m.doc() =
      "torch_plugin's C++ extension: see torch_plugin/_C.pyi for the contract.";
  pybind11::module_::import("torch");
  torch_plugin::python::init_capture(m);
  torch_plugin::python::init_compiler(m);
  torch_plugin::python::init_device_bindings(m);
}
