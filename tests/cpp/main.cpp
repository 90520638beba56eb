// main.cpp: GoogleTest entry point for tests/cpp with an embedded interpreter.
//
// Owns: the interpreter's lifetime (started before any test, finalized after
// all). Python is the one that ran the build (TORCH_PLUGIN_TEST_PYTHON, its
// sys.executable), so its site-packages, and torch, are found. torch is
// imported once here: tensor guards need torch's Python types
// (THPVariableClass). GIL: held by the main thread for the whole run.
#include <gtest/gtest.h>
#include <pybind11/embed.h>

namespace py = pybind11;

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  PyConfig config;
  PyConfig_InitPythonConfig(&config);
  config.parse_argv = 0;
  PyStatus status = PyConfig_SetBytesString(
      &config, &config.program_name, TORCH_PLUGIN_TEST_PYTHON);
  if (PyStatus_Exception(status)) {
    PyConfig_Clear(&config);
    return 2;
  }
  py::scoped_interpreter interpreter(&config); // clears `config`
  py::module_::import("torch");
  return RUN_ALL_TESTS();
}
