// kernel_cache.cpp: compile, load and cache generated kernels (see
// kernel_cache.h).
#include "runtime/cpu/kernel_cache.h"

#include "runtime/cache_file.h"
#include "runtime/options.h"

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <utime.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

extern char** environ;

namespace torch_plugin::runtime::cpu {
namespace {

constexpr const char* kFlags =
    "-O3 -march=native -fopenmp -fPIC -shared -fno-math-errno -std=c++17";
// Part of every key: bump when the entry format or the kernels' calling
// convention changes.
constexpr const char* kCacheFormat = "torch_plugin kernel cache 2";

// Whitespace-separated words of `s` (no quoting: the compiler command and the
// flags are plain words).
std::vector<std::string> words(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;)
    out.push_back(w);
  return out;
}

// The executable `name` as execvp would find it (a PATH search when it has no
// '/'), or "".
std::string find_program(const std::string& name) {
  if (name.empty())
    return "";
  if (name.find('/') != std::string::npos)
    return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos)
      end = path.size();
    std::string dir = path.substr(start, end - start);
    std::string full = (dir.empty() ? std::string(".") : dir) + "/" + name;
    if (access(full.c_str(), X_OK) == 0)
      return full;
    start = end + 1;
  }
  return "";
}

// Runs argv (argv[0] a path) without a shell, its stdout and stderr into
// `log_path` (created 0600); the exit status, or -1 when it could not run or
// died of a signal.
int run_program(
    const std::vector<std::string>& argv,
    const std::string& log_path) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(
      &actions, 2, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 2, 1);
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(
      &pid, argv[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0)
    return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR)
      return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Creates `dir` and its missing parents, each new folder 0700 (mkdir -p without
// a shell).
void make_dirs(const std::string& dir) {
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    const std::string part = dir.substr(0, pos);
    if (!part.empty() && mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      TORCH_CHECK(
          false,
          "torch_plugin: cannot create the kernel cache folder ",
          part,
          ": ",
          std::strerror(errno));
    if (pos == std::string::npos)
      break;
  }
}

std::mutex mu;
std::unordered_map<std::string, KernelFn> loaded; // hash -> entry point
KernelCacheStats stats;

std::string cpu_id() {
  std::ifstream f("/proc/cpuinfo");
  std::string line, id;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("flags", 0) == 0)
      id += line;
    if (line.empty() && !id.empty())
      break;
  }
  return id;
}

// The compiler command as words for the compiler option `cxx`
// (RuntimeOptions::cxx, split on whitespace, its first word found on PATH),
// else the first of c++, g++, clang++ on PATH. Run without a shell
// (run_program).
std::vector<std::string> find_compiler(const std::string& cxx) {
  std::vector<std::vector<std::string>> candidates;
  candidates.push_back(words(cxx));
  for (const char* c : {"c++", "g++", "clang++"})
    candidates.push_back({c});
  for (std::vector<std::string> c : candidates) {
    if (c.empty())
      continue;
    std::string path = find_program(c[0]);
    if (path.empty())
      continue;
    c[0] = path;
    return c;
  }
  return std::vector<std::string>();
}

// The compiler command as words and as one string (part of every kernel key),
// found once per value of the compiler option.
struct Compiler {
  std::vector<std::string> argv;
  std::string joined;
};

const Compiler& compiler() {
  static std::mutex found_mu;
  static std::unordered_map<std::string, Compiler> found;
  const std::string cxx = runtime_options().cxx;
  std::lock_guard<std::mutex> lock(found_mu);
  auto it = found.find(cxx);
  if (it == found.end()) {
    Compiler c;
    c.argv = find_compiler(cxx);
    for (const std::string& w : c.argv)
      c.joined += (c.joined.empty() ? "" : " ") + w;
    it = found.emplace(cxx, std::move(c)).first;
  }
  TORCH_CHECK(
      !it->second.argv.empty(),
      "torch_plugin: no C++ compiler found for generated kernels (tried $CXX, c++, g++, "
      "clang++); install one, e.g. `apt-get install g++`, or set "
      "TORCH_PLUGIN_FUSION=0 to run without generated kernels");
  return it->second;
}

// SHA-256 over everything a kernel depends on: the cache format, the source,
// the compiler command and flags, the CPU (model and flags: -march=native) and
// the torch version.
std::string key_of(const std::string& source) {
  static const std::string target = cpu_id();
  std::string all = kCacheFormat;
  for (const std::string& part :
       {source,
        compiler().joined + " " + kFlags,
        target,
        std::string(TORCH_VERSION)}) {
    all.push_back('\0');
    all += part;
  }
  return sha256_hex(all);
}

// Compiles `source` into a shared library and returns its bytes: the source
// goes to a temporary file with an unpredictable name in `dir` (mkstemps,
// 0600), the compiler runs without a shell on an argument vector (paths with
// spaces, quotes or $(...) are plain arguments) and writes a temporary .so
// beside it, which is read back and removed.
std::string compile(const std::string& source, const std::string& dir) {
  std::string tmpl = dir + "/.tmp-kernel-XXXXXX.cpp";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  int fd = mkstemps(buf.data(), 4);
  TORCH_CHECK(
      fd >= 0,
      "torch_plugin: cannot create a temporary file in ",
      dir,
      ": ",
      std::strerror(errno));
  const std::string cpp(buf.data());
  const std::string base = cpp.substr(0, cpp.size() - 4);
  size_t written = 0;
  while (written < source.size()) {
    ssize_t n = write(fd, source.data() + written, source.size() - written);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    written += static_cast<size_t>(n);
  }
  close(fd);
  std::vector<std::string> argv = compiler().argv;
  for (const std::string& f : words(kFlags))
    argv.push_back(f);
  argv.insert(argv.end(), {"-o", base + ".so", cpp});
  int rc = written == source.size() ? run_program(argv, base + ".log") : -1;
  std::ostringstream log;
  log << std::ifstream(base + ".log").rdbuf();
  std::ostringstream image;
  if (rc == 0)
    image << std::ifstream(base + ".so", std::ios::binary).rdbuf();
  std::remove(cpp.c_str());
  std::remove((base + ".log").c_str());
  std::remove((base + ".so").c_str());
  std::string cmd;
  for (const std::string& a : argv)
    cmd += (cmd.empty() ? "" : " ") + a;
  TORCH_CHECK(
      rc == 0,
      "torch_plugin: compiling a generated kernel failed (",
      cmd,
      "):\n",
      log.str(),
      "\nsource:\n",
      source);
  return image.str();
}

// Loads the shared library `image` (its bytes, already verified) and returns
// its entry point, or nullptr with the reason in *why. The bytes go to a new
// file with an unpredictable name (mkstemp, 0600) in the private cache folder
// `dir`, which is dlopen'ed and removed at once: the library loaded is the one
// verified (only the owner can write in `dir`). Every load has its own file
// name: the dynamic loader returns an already loaded library for a name it has
// seen, so reusing a name (such as /proc/self/fd/N of a memfd whose number was
// reused) would hand one kernel's code to another kernel's call.
KernelFn load_image(
    const std::string& image,
    const std::string& dir,
    std::string* why) {
  std::string path = dir + "/.tmp-load-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0) {
    *why = std::string("cannot create a file to load from: ") +
        std::strerror(errno);
    return nullptr;
  }
  size_t done = 0;
  while (done < image.size()) {
    ssize_t w = write(fd, image.data() + done, image.size() - done);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      break;
    done += static_cast<size_t>(w);
  }
  close(fd);
  void* handle = done == image.size()
      ? dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)
      : nullptr;
  if (!handle) {
    const char* err = done == image.size() ? dlerror() : nullptr;
    *why = err ? err : "cannot write the library to load";
  }
  unlink(path.c_str());
  if (!handle)
    return nullptr;
  auto fn = reinterpret_cast<KernelFn>(dlsym(handle, "kernel"));
  if (!fn)
    *why = "no symbol 'kernel'";
  return fn; // the library stays loaded for the process's lifetime
}

// The cache entry's file name for `key` (see cache_file.h for its format).
std::string entry_name(const std::string& key) {
  return key + ".kernel";
}

} // namespace

std::vector<KernelFn> load_kernels(const std::vector<std::string>& sources) {
  std::vector<KernelFn> out(sources.size(), nullptr);
  std::vector<std::string> keys;
  for (const std::string& s : sources)
    keys.push_back(key_of(s));
  const std::string d = kernel_cache_dir();
  make_dirs(d);
  std::vector<size_t> missing;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (size_t i = 0; i < sources.size(); ++i) {
      auto it = loaded.find(keys[i]);
      if (it != loaded.end()) {
        out[i] = it->second;
        stats.memory_hits++;
        continue;
      }
      // The disk cache: an entry is used only when its content hash holds and
      // it loads; a damaged one is reported, removed and compiled again.
      const std::string path = d + "/" + entry_name(keys[i]);
      std::string image, why;
      if (read_cache_entry(path, &image, &why)) {
        if (KernelFn fn = load_image(image, d, &why)) {
          out[i] = loaded[keys[i]] = fn;
          stats.disk_hits++;
          // Used now: least-recently-used eviction (torch_plugin/cache.py)
          // goes by modification time.
          utime(path.c_str(), nullptr);
          continue;
        }
        why = "does not load: " + why;
      }
      if (why != "missing") {
        TORCH_WARN(
            "torch_plugin: kernel cache entry ",
            path,
            " is damaged (",
            why,
            "); compiling it again");
        unlink(path.c_str());
        stats.disk_rejected++;
      }
      missing.push_back(i);
    }
  }
  // Compile the missing ones, at most one compiler per core at a time.
  std::vector<std::string> images(sources.size());
  size_t workers = std::max(1u, std::thread::hardware_concurrency());
  for (size_t start = 0; start < missing.size(); start += workers) {
    std::vector<std::future<void>> jobs;
    for (size_t k = start; k < std::min(missing.size(), start + workers); ++k) {
      size_t i = missing[k];
      jobs.push_back(std::async(std::launch::async, [&, i] {
        images[i] = compile(sources[i], d);
        std::string why;
        if (!write_cache_entry(d, entry_name(keys[i]), images[i], &why))
          TORCH_WARN(
              "torch_plugin: cannot write the kernel cache entry ",
              d,
              "/",
              entry_name(keys[i]),
              ": ",
              why);
      }));
    }
    for (auto& j : jobs)
      j.get();
  }
  std::lock_guard<std::mutex> lock(mu);
  for (size_t i : missing) {
    auto it = loaded.find(keys[i]);
    if (it != loaded.end()) {
      out[i] = it->second;
    } else {
      std::string why;
      KernelFn fn = load_image(images[i], d, &why);
      TORCH_CHECK(
          fn, "torch_plugin: cannot load a freshly compiled kernel: ", why);
      out[i] = loaded[keys[i]] = fn;
    }
    stats.compiled++;
  }
  return out;
}

void forget_loaded_kernels() {
  std::lock_guard<std::mutex> lock(mu);
  loaded.clear();
}

KernelCacheStats kernel_cache_stats() {
  std::lock_guard<std::mutex> lock(mu);
  return stats;
}

} // namespace torch_plugin::runtime::cpu
