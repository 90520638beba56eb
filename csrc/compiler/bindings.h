// bindings.h: the compiler's and runtime's part of torch_plugin._C (submodule
// torch_plugin._C._compiler); see torch_plugin/_C.pyi and torch_plugin/compiler.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_plugin::compiler {

void init_compiler(pybind11::module_& m);

}  // namespace torch_plugin::compiler
