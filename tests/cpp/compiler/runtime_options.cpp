// runtime_options.cpp: the runtime's options for test_compiler, set once
// before any test runs (a GoogleTest global environment), as
// torch_plugin/__init__.py sets them for the Python module: the oneDNN
// wrappers from the build's _onednn.so (TORCH_PLUGIN_TEST_ONEDNN_LIBRARY, with
// oneDNN only). The other options keep their defaults (runtime/options.h).
#include "runtime/options.h"

#include <gtest/gtest.h>

namespace {

class RuntimeOptionsEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    torch_plugin::runtime::RuntimeOptions options =
        torch_plugin::runtime::runtime_options();
#ifdef TORCH_PLUGIN_TEST_ONEDNN_LIBRARY
    options.onednn_library = TORCH_PLUGIN_TEST_ONEDNN_LIBRARY;
#endif
    torch_plugin::runtime::configure(options);
  }
};

::testing::Environment* const kRuntimeOptions =
    ::testing::AddGlobalTestEnvironment(new RuntimeOptionsEnvironment);

} // namespace
