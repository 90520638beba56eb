// cudnn_conv_detail.h: what the files of the cuDNN wrapper share
// (cudnn_conv.cpp: graphs, plans, their cache and parallel builds;
// cudnn_plan_store.cpp: plans across processes, libs/cudnn_conv.h's
// PlanStore). Private to csrc/libs/cudnn_*.cpp. Includes cudnn-frontend with
// its dynamic loading (every cuDNN call through dlsym on torch's
// libcudnn.so.9: cudnn_frontend::cudnn_dlhandle, defined in cudnn_conv.cpp)
// and its bundled JSON library (plan serialization needs it:
// CUDNN_FRONTEND_SKIP_JSON_LIB is not defined).
#pragma once

#ifndef NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#endif
#include "libs/cudnn_conv.h"

#include <cudnn_frontend.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch_plugin::libs::cudnn {

struct ConvPlan::Impl {
  ConvDesc desc;
  std::shared_ptr<cudnn_frontend::graph::Graph> graph;
  int64_t workspace = 0;
  std::string name;
};

namespace detail {

// --- cudnn_conv.cpp ---------------------------------------------------------
// cudnnGetVersion() of the loaded library (0 when none).
size_t cudnn_version();
// The operation graph of d (tensors and operations, not yet built), or
// nullptr for a dtype or activation the plan cannot take.
std::shared_ptr<cudnn_frontend::graph::Graph> make_graph(const ConvDesc& d);
// The plan of a graph whose plans are built: its workspace and engine name;
// nullptr when cuDNN reports no workspace size.
std::unique_ptr<ConvPlan::Impl> finish(
    const ConvDesc& d,
    std::shared_ptr<cudnn_frontend::graph::Graph> g);

// --- cudnn_plan_store.cpp ---------------------------------------------------
// The plan of d from the store (see PlanStore), or nullptr: no store, no
// entry, or an entry that gives no plan (removed, counted as rejected).
std::unique_ptr<ConvPlan::Impl> load_stored(
    const ConvDesc& d,
    cudnnHandle_t handle);
// Saves a plan just built for d to the store (if any).
void save_stored(const ConvDesc& d, const ConvPlan::Impl& plan);
// The store's counters (disk_*), and their reset.
void store_counters(Counters* c);
void reset_store_counters();

} // namespace detail
} // namespace torch_plugin::libs::cudnn
