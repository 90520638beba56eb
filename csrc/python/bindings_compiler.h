// bindings_compiler.h: the compiler's and runtime's part of torch_plugin._C
// (submodules torch_plugin._C._compiler and _runtime); see torch_plugin/_C.pyi
// and torch_plugin/compiler.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_plugin::python {

void init_compiler(pybind11::module_& m);

} // namespace torch_plugin::python
