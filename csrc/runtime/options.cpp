// options.cpp: the runtime's options (see options.h).
#include "runtime/options.h"

#include <c10/util/Exception.h>

#include <pwd.h>
#include <unistd.h>

#include <mutex>
#include <vector>

namespace torch_plugin::runtime {
namespace {

// Function-local statics: device parts register listeners from their static
// constructors, in any order relative to this file's.
struct State {
  std::mutex mu;
  RuntimeOptions options;
  std::vector<OptionsListener> listeners;
};

State& state() {
  static State s;
  return s;
}

// <home>/.cache/torch_plugin, home from the password database: never a folder
// shared with other users such as /tmp.
std::string default_cache_dir() {
  const passwd* pw = getpwuid(getuid());
  TORCH_CHECK(
      pw && pw->pw_dir && *pw->pw_dir,
      "torch_plugin: no home folder for the kernel cache; set TORCH_PLUGIN_CACHE_DIR");
  return std::string(pw->pw_dir) + "/.cache/torch_plugin";
}

} // namespace

RuntimeOptions runtime_options() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.options;
}

void configure(const RuntimeOptions& options) {
  State& s = state();
  std::vector<OptionsListener> listeners;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.options = options;
    listeners = s.listeners;
  }
  for (OptionsListener l : listeners)
    l(options);
}

void set_kernel_cache_dir(const std::string& dir) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.options.cache_dir = dir;
}

std::string kernel_cache_dir() {
  std::string dir = runtime_options().cache_dir;
  return dir.empty() ? default_cache_dir() : dir;
}

void add_options_listener(OptionsListener listener) {
  State& s = state();
  RuntimeOptions now;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.listeners.push_back(listener);
    now = s.options;
  }
  listener(now);
}

} // namespace torch_plugin::runtime
