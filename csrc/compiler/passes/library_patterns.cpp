// library_patterns.cpp: pass "library_patterns" (placeholder; see below).
#include "compiler/passes/pass.h"

namespace torch_plugin::compiler {
namespace {
bool run(Graph&, const PassOptions&) { return false; }
}  // namespace

const PassInfo kLibraryPatterns = {"library_patterns", "Not yet implemented.", run};

}  // namespace torch_plugin::compiler
