// conv_patterns.h: the convolution rows of the library_patterns pass
// (conv_patterns.cpp), which library_patterns.cpp puts among its own rows.
#pragma once

#include "compiler/passes/pattern_rules.h"

#include <vector>

namespace torch_plugin::compiler {

// The CPU rows (oneDNN: conv_to_library, fuse_scale_shift), tried where the
// CPU convolution rows always were, then the CUDA rows (cuDNN:
// cuda_conv_to_library, cuda_conv_scale_shift, cuda_conv_residual_add,
// cuda_conv_activation), in that order.
const std::vector<Rule>& conv_rules();

// After every rule ran on a CUDA graph with a cuDNN convolution: each 2-d
// convolution left to ATen (the 3-channel stem, depthwise) whose input is not
// channels-last reads a channels-last copy of it (one copy of the stem's
// small input rather than copies of every activation after it: CUDA's
// convolution then writes channels-last, and so do the ops after it, up to
// the next cuDNN convolution); then each graph output whose strides the
// channels-last convolutions changed gets a copy back to the strides it had
// (eager's), so a user observes eager's strides.
// `before`: the graph outputs' strides before the rules ran.
bool restore_output_strides(
    Graph& g,
    const std::vector<std::vector<int64_t>>& before,
    const PassOptions& options);

} // namespace torch_plugin::compiler
