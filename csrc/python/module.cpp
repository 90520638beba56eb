// module.cpp: the extension module torch_plugin._C.
//
// Owns: nothing but the module object; each part of csrc registers its own API
// through an init_<part>(m) function (pybind11 FAQ, "How can I reduce the build
// time?"). `import torch` first, so that torch's Python types
// (THPVariableClass, used by tensor guards) exist before any of our code runs.
// GIL: held (module init). Python objects: none kept here.
#include <pybind11/pybind11.h>

#include "capture/bindings.h"
#include "compiler/bindings.h"
#ifdef TORCH_PLUGIN_HAVE_CUDA
#include "python/bindings_cuda.h"
#endif

PYBIND11_MODULE(_C, m) {
  m.doc() =
      "torch_plugin's C++ extension: see torch_plugin/_C.pyi for the contract.";
  pybind11::module_::import("torch");
  torch_plugin::capture::init_capture(m);
  torch_plugin::compiler::init_compiler(m);
#ifdef TORCH_PLUGIN_HAVE_CUDA
  torch_plugin::python::init_cuda(m);
#endif
}
