// library_step.cpp: placeholder.
#include "runtime/step.h"
namespace torch_plugin::runtime {
std::unique_ptr<Step> make_library_step(const compiler::Node&, const SlotMap&) { return nullptr; }
}  // namespace torch_plugin::runtime
