// device_bindings.h: the parts of torch_plugin._C that only some builds have
// (a device's own submodule, e.g. _C._cuda), registered from their own
// translation units so that module.cpp names no device.
//
// Owns: the list of registered initializers, run by module.cpp after the
// device-neutral parts, in registration order. Registrations are static
// constructors of files built as part of the python OBJECT library (so they are
// always linked when built). GIL: held (module init).
#pragma once

#include <pybind11/pybind11.h>

namespace torch_plugin::python {

using BindingsInit = void (*)(pybind11::module_& m);

// Static registration, in the device's bindings file:
//   const DeviceBindings kCuda(init_cuda);
struct DeviceBindings {
  explicit DeviceBindings(BindingsInit init);
};

// Runs every registered initializer on `m`.
void init_device_bindings(pybind11::module_& m);

} // namespace torch_plugin::python
