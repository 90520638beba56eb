// onednn_loader.h: the oneDNN wrappers as the extension uses them, through
// torch_plugin/_onednn.so loaded at run time (libs/onednn_abi.h says why).
//
// onednn_available() loads the library on its first call: from the path
// given to set_onednn_library if any (the runtime's onednn_library option,
// runtime/cpu/onednn_step.cpp), else _onednn.so beside the module that holds
// this code (torch_plugin/_C). When it cannot be loaded (libdnnl is not
// installed, or the file is missing) it returns false with dlerror()'s reason,
// and the executor runs convolutions and products through ATen instead.
// OneDnnConvRef / OneDnnLinearRef forward to libs::OneDnnConv / OneDnnLinear in
// that library (same arguments, see onednn.h); their calls raise c10::Error
// with oneDNN's message on failure. Only built with oneDNN
// (TORCH_PLUGIN_HAVE_ONEDNN). Thread safety: as onednn.h.
#pragma once

#include "libs/onednn.h" // Epilogue, WeightMode

#include <cstdint>
#include <string>
#include <vector>

namespace torch_plugin::libs {

// The library to load ("": _onednn.so beside the module); no effect once
// onednn_available() has run.
void set_onednn_library(const std::string& path);
bool onednn_available(std::string* why = nullptr);

class OneDnnConvRef {
 public:
  OneDnnConvRef(
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
      OneDnnConv::Weights weights);
  ~OneDnnConvRef();
  OneDnnConvRef(const OneDnnConvRef&) = delete;
  OneDnnConvRef& operator=(const OneDnnConvRef&) = delete;
  void execute(const float* input, const float* residual, float* output) const;
  std::string implementation() const;

 private:
  void* handle_ = nullptr;
};

class OneDnnLinearRef {
 public:
  OneDnnLinearRef(
      int64_t m,
      int64_t n,
      int64_t k,
      const float* weight,
      const float* bias,
      Epilogue epilogue,
      OneDnnLinear::Weights weights,
      bool weight_transposed);
  ~OneDnnLinearRef();
  OneDnnLinearRef(const OneDnnLinearRef&) = delete;
  OneDnnLinearRef& operator=(const OneDnnLinearRef&) = delete;
  void execute(const float* input, const float* residual, float* output) const;
  std::string implementation() const;

 private:
  void* handle_ = nullptr;
};

} // namespace torch_plugin::libs
