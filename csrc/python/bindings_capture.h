// bindings_capture.h: the Python API of csrc/capture (the functions and classes of
// torch_plugin/_C.pyi that belong to capture).
//
// Owns: pybind11 declarations only; behaviour lives in eval_frame, extra_state,
// guards and leaf_guards. GIL: held (module init).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_plugin::python {

// Registers FrameInfo, the hook functions, the cache functions and the guard
// tree classes on `m`, and initializes the hook's state.
void init_capture(pybind11::module_& m);

} // namespace torch_plugin::python
