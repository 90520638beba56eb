// onednn_shim.cpp: the C interface of _onednn.so (libs/onednn_abi.h) over the
// oneDNN wrappers of libs/onednn.{h,cpp}. Built only into _onednn.so.
#include "libs/onednn.h"
#include "libs/onednn_abi.h"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

using torch_plugin::libs::Epilogue;
using torch_plugin::libs::OneDnnConv;
using torch_plugin::libs::OneDnnLinear;

void set_error(const char* what, char* err, size_t err_size) {
  if (err && err_size) {
    std::strncpy(err, what, err_size - 1);
    err[err_size - 1] = '\0';
  }
}

Epilogue epilogue(int residual, const char* act, float alpha, float beta) {
  Epilogue e;
  e.residual = residual != 0;
  e.activation = act ? act : "";
  e.alpha = alpha;
  e.beta = beta;
  return e;
}

std::vector<int64_t> four(const int64_t* p) {
  return std::vector<int64_t>(p, p + 4);
}

std::vector<int64_t> two(const int64_t* p) {
  return std::vector<int64_t>(p, p + 2);
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) int tp_onednn_abi_version() {
  return kTorchPluginOneDnnAbi;
}

__attribute__((visibility("default"))) int tp_onednn_conv_create(
    const int64_t* input_sizes,
    const int64_t* output_sizes,
    const float* weight,
    const int64_t* weight_sizes,
    const int64_t* weight_strides,
    const float* bias,
    const float* scale,
    const float* shift,
    const int64_t* stride,
    const int64_t* padding,
    const int64_t* dilation,
    int64_t groups,
    int residual,
    const char* act,
    float alpha,
    float beta,
    int packed,
    void** handle,
    char* err,
    size_t err_size) {
  try {
    Epilogue e = epilogue(residual, act, alpha, beta);
    e.scale = scale;
    e.shift = shift;
    *handle = new OneDnnConv(
        four(input_sizes),
        four(output_sizes),
        weight,
        four(weight_sizes),
        four(weight_strides),
        bias,
        two(stride),
        two(padding),
        two(dilation),
        groups,
        e,
        packed ? OneDnnConv::Weights::kPacked : OneDnnConv::Weights::kBorrowed);
    return 0;
  } catch (const std::exception& e) {
    set_error(e.what(), err, err_size);
    return 1;
  }
}

__attribute__((visibility("default"))) int tp_onednn_conv_execute(
    const void* handle,
    const float* input,
    const float* residual,
    float* output,
    char* err,
    size_t err_size) {
  try {
    static_cast<const OneDnnConv*>(handle)->execute(input, residual, output);
    return 0;
  } catch (const std::exception& e) {
    set_error(e.what(), err, err_size);
    return 1;
  }
}

__attribute__((visibility("default"))) int tp_onednn_linear_create(
    int64_t m,
    int64_t n,
    int64_t k,
    const float* weight,
    const float* bias,
    int residual,
    const char* act,
    float alpha,
    float beta,
    int packed,
    int weight_transposed,
    void** handle,
    char* err,
    size_t err_size) {
  try {
    *handle = new OneDnnLinear(
        m,
        n,
        k,
        weight,
        bias,
        epilogue(residual, act, alpha, beta),
        packed ? OneDnnLinear::Weights::kPacked
               : OneDnnLinear::Weights::kBorrowed,
        weight_transposed != 0);
    return 0;
  } catch (const std::exception& e) {
    set_error(e.what(), err, err_size);
    return 1;
  }
}

__attribute__((visibility("default"))) int tp_onednn_linear_execute(
    const void* handle,
    const float* input,
    const float* residual,
    float* output,
    char* err,
    size_t err_size) {
  try {
    static_cast<const OneDnnLinear*>(handle)->execute(input, residual, output);
    return 0;
  } catch (const std::exception& e) {
    set_error(e.what(), err, err_size);
    return 1;
  }
}

__attribute__((visibility("default"))) void tp_onednn_implementation(
    const void* handle,
    int is_conv,
    char* out,
    size_t size) {
  std::string name = is_conv
      ? static_cast<const OneDnnConv*>(handle)->implementation()
      : static_cast<const OneDnnLinear*>(handle)->implementation();
  set_error(name.c_str(), out, size);
}

__attribute__((visibility("default"))) void tp_onednn_destroy(
    void* handle,
    int is_conv) {
  if (is_conv)
    delete static_cast<OneDnnConv*>(handle);
  else
    delete static_cast<OneDnnLinear*>(handle);
}
}
