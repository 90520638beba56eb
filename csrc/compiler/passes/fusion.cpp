// fusion.cpp: pass "fusion" (placeholder).
#include "compiler/passes/pass.h"

namespace torch_plugin::compiler {
namespace {
bool run(Graph&, const PassOptions&) { return false; }
}  // namespace

const PassInfo kFusion = {"fusion", "Not yet implemented.", run};

}  // namespace torch_plugin::compiler
