// bindings_cuda.h: torch_plugin._C._cuda, the CUDA runtime's part of the
// extension (built only with the CUDA parts; registered through
// device_bindings.h); see torch_plugin/_C.pyi.
#pragma once

#include <pybind11/pybind11.h>

namespace torch_plugin::python {

void init_cuda(pybind11::module_& m);

} // namespace torch_plugin::python
