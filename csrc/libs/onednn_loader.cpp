// onednn_loader.cpp: dlopen of torch_plugin/_onednn.so and the forwarding
// classes (see onednn_loader.h).
#include "libs/onednn_loader.h"

#include "libs/onednn_abi.h"

#include <c10/util/Exception.h>

#include <dlfcn.h>

#include <mutex>

namespace torch_plugin::libs {
namespace {

struct Api {
  decltype(&tp_onednn_abi_version) abi_version = nullptr;
  decltype(&tp_onednn_conv_create) conv_create = nullptr;
  decltype(&tp_onednn_conv_execute) conv_execute = nullptr;
  decltype(&tp_onednn_linear_create) linear_create = nullptr;
  decltype(&tp_onednn_linear_execute) linear_execute = nullptr;
  decltype(&tp_onednn_implementation) implementation = nullptr;
  decltype(&tp_onednn_destroy) destroy = nullptr;
};

std::once_flag once;
Api api;
bool loaded = false;
std::string load_error;
std::mutex library_mu;
std::string library_path; // set_onednn_library's

// _onednn.so beside the shared object (or executable) that holds this code.
std::string default_path() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&default_path), &info) && info.dli_fname) {
    std::string self = info.dli_fname;
    size_t slash = self.rfind('/');
    return (slash == std::string::npos ? std::string(".")
                                       : self.substr(0, slash)) +
        "/_onednn.so";
  }
  return "_onednn.so";
}

template <typename F>
bool symbol(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  if (!*out)
    load_error = std::string("missing symbol ") + name;
  return *out != nullptr;
}

void load() {
  std::string path;
  {
    std::lock_guard<std::mutex> lock(library_mu);
    path = library_path;
  }
  if (path.empty())
    path = default_path();
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* err = dlerror();
    load_error = err ? err : ("cannot load " + path);
    return;
  }
  if (!symbol(lib, "tp_onednn_abi_version", &api.abi_version) ||
      !symbol(lib, "tp_onednn_conv_create", &api.conv_create) ||
      !symbol(lib, "tp_onednn_conv_execute", &api.conv_execute) ||
      !symbol(lib, "tp_onednn_linear_create", &api.linear_create) ||
      !symbol(lib, "tp_onednn_linear_execute", &api.linear_execute) ||
      !symbol(lib, "tp_onednn_implementation", &api.implementation) ||
      !symbol(lib, "tp_onednn_destroy", &api.destroy))
    return;
  if (api.abi_version() != kTorchPluginOneDnnAbi) {
    load_error = path + " has another interface version";
    return;
  }
  loaded = true; // the library stays loaded for the process's lifetime
}

const Api& require() {
  std::string why;
  TORCH_CHECK(
      onednn_available(&why), "torch_plugin: oneDNN is not available: ", why);
  return api;
}

} // namespace

void set_onednn_library(const std::string& path) {
  std::lock_guard<std::mutex> lock(library_mu);
  library_path = path;
}

bool onednn_available(std::string* why) {
  std::call_once(once, load);
  if (!loaded && why)
    *why = load_error;
  return loaded;
}

OneDnnConvRef::OneDnnConvRef(
    const std::vector<int64_t>& input_sizes,
    const std::vector<int64_t>& output_sizes,
    const float* weight,
    const std::vector<int64_t>& weight_sizes,
    const std::vector<int64_t>& weight_strides,
    const float* bias,
    std::vector<int64_t> stride,
    std::vector<int64_t> padding,
    std::vector<int64_t> dilation,
    int64_t groups,
    Epilogue epilogue,
    OneDnnConv::Weights weights) {
  TORCH_CHECK(
      input_sizes.size() == 4 && output_sizes.size() == 4 &&
          weight_sizes.size() == 4 && weight_strides.size() == 4 &&
          stride.size() == 2 && padding.size() == 2 && dilation.size() == 2,
      "torch_plugin: oneDNN convolution takes 2-d spatial sizes");
  char err[512] = {};
  int rc = require().conv_create(
      input_sizes.data(),
      output_sizes.data(),
      weight,
      weight_sizes.data(),
      weight_strides.data(),
      bias,
      epilogue.scale,
      epilogue.shift,
      stride.data(),
      padding.data(),
      dilation.data(),
      groups,
      epilogue.residual,
      epilogue.activation.c_str(),
      epilogue.alpha,
      epilogue.beta,
      weights == OneDnnConv::Weights::kPacked,
      &handle_,
      err,
      sizeof err);
  TORCH_CHECK(rc == 0, "torch_plugin: oneDNN convolution: ", err);
}

OneDnnConvRef::~OneDnnConvRef() {
  if (handle_)
    api.destroy(handle_, 1);
}

void OneDnnConvRef::execute(
    const float* input,
    const float* residual,
    float* output) const {
  char err[512] = {};
  int rc = api.conv_execute(handle_, input, residual, output, err, sizeof err);
  TORCH_CHECK(rc == 0, "torch_plugin: oneDNN convolution: ", err);
}

std::string OneDnnConvRef::implementation() const {
  char name[256] = {};
  api.implementation(handle_, 1, name, sizeof name);
  return name;
}

OneDnnLinearRef::OneDnnLinearRef(
    int64_t m,
    int64_t n,
    int64_t k,
    const float* weight,
    const float* bias,
    Epilogue epilogue,
    OneDnnLinear::Weights weights,
    bool weight_transposed) {
  char err[512] = {};
  int rc = require().linear_create(
      m,
      n,
      k,
      weight,
      bias,
      epilogue.residual,
      epilogue.activation.c_str(),
      epilogue.alpha,
      epilogue.beta,
      weights == OneDnnLinear::Weights::kPacked,
      weight_transposed,
      &handle_,
      err,
      sizeof err);
  TORCH_CHECK(rc == 0, "torch_plugin: oneDNN matrix product: ", err);
}

OneDnnLinearRef::~OneDnnLinearRef() {
  if (handle_)
    api.destroy(handle_, 0);
}

void OneDnnLinearRef::execute(
    const float* input,
    const float* residual,
    float* output) const {
  char err[512] = {};
  int rc =
      api.linear_execute(handle_, input, residual, output, err, sizeof err);
  TORCH_CHECK(rc == 0, "torch_plugin: oneDNN matrix product: ", err);
}

std::string OneDnnLinearRef::implementation() const {
  char name[256] = {};
  api.implementation(handle_, 0, name, sizeof name);
  return name;
}

} // namespace torch_plugin::libs
