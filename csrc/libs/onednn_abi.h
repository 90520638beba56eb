// onednn_abi.h: the C interface of torch_plugin/_onednn.so, the separately
// built library that holds the oneDNN wrappers (libs/onednn.{h,cpp}) and links
// libdnnl. The extension torch_plugin._C does not link libdnnl: it dlopen's
// _onednn.so on first use (libs/onednn_loader.h), so a machine without oneDNN
// imports torch_plugin and runs convolutions and products through ATen.
//
// Each call returns 0 on success; on failure nonzero with a message in `err`
// (NUL-terminated, truncated to err_size). Handles are opaque.
#pragma once

#include <cstddef>
#include <cstdint>

extern "C" {

// Bumped when a signature below changes; the loader refuses another version.
constexpr int kTorchPluginOneDnnAbi = 3;
int tp_onednn_abi_version();

// libs::OneDnnConv (see onednn.h for the arguments' meaning); act: the
// epilogue's activation name; scale, shift: the epilogue's per-channel scale
// and shift ([OC] or nullptr); packed: 1 = kPacked, 0 = kBorrowed (version 2:
// weight_strides and packed added; version 3: scale and shift).
int tp_onednn_conv_create(
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
    size_t err_size);
int tp_onednn_conv_execute(
    const void* handle,
    const float* input,
    const float* residual,
    float* output,
    char* err,
    size_t err_size);

// libs::OneDnnLinear; packed: 1 = kPacked, 0 = kBorrowed.
int tp_onednn_linear_create(
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
    size_t err_size);
int tp_onednn_linear_execute(
    const void* handle,
    const float* input,
    const float* residual,
    float* output,
    char* err,
    size_t err_size);

// oneDNN's implementation name of a handle's primitive into `out`.
void tp_onednn_implementation(
    const void* handle,
    int is_conv,
    char* out,
    size_t size);
void tp_onednn_destroy(void* handle, int is_conv);
}
