#include "model/cuda_module.h"

#include <dlfcn.h>

#include <filesystem>
#include <string>
#include <system_error>

#include "core/error.h"
#include "core/logging.h"

// Defined when this binary links the CUDA backend itself: the backend's library asks
// the linker for it (src/CMakeLists.txt), and the reference below, weak, then resolves
// to it. In the `tachyon` binary, which does not link the backend, it stays null.
extern "C" const tachyon::CudaEntry* tachyon_cuda_entry() __attribute__((weak));

namespace tachyon {

namespace {

struct Loaded {
  const CudaEntry* entry = nullptr;
  std::string error;  // why entry is null
};

std::string executable_dir() {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

Loaded load() {
  Loaded r;
  if (tachyon_cuda_entry) {
    r.entry = tachyon_cuda_entry();
    return r;
  }
  // Beside the executable first (where the build and the install put it), so that a
  // binary always gets the module built with it; else the loader's search path.
  std::string path = kCudaModuleName;
  const std::string dir = executable_dir();
  if (!dir.empty()) {
    std::error_code ec;
    const std::string beside = dir + "/" + kCudaModuleName;
    if (std::filesystem::exists(beside, ec)) path = beside;
  }
  // RTLD_NOW: a module that cannot resolve a symbol fails here, with the loader's
  // reason, instead of at its first call. RTLD_LOCAL: its symbols (and cuBLAS's) stay
  // out of the lookups of everything loaded later.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    r.error = fmt::format("cuda: cannot load {}: {}", kCudaModuleName, dl_error());
    return r;
  }
  using EntryFn = const CudaEntry* (*)();
  auto fn = reinterpret_cast<EntryFn>(dlsym(handle, "tachyon_cuda_entry"));
  if (!fn) {
    r.error = fmt::format("cuda: {} has no entry point: {}", path, dl_error());
    dlclose(handle);
    return r;
  }
  const CudaEntry* entry = fn();
  if (!entry || entry->version != kCudaEntryVersion) {
    r.error = fmt::format("cuda: {} is from another build of tachyon (entry version {}, want {})",
                          path, entry ? entry->version : 0, kCudaEntryVersion);
    dlclose(handle);
    return r;
  }
  log_debug("cuda: loaded {}", path);
  r.entry = entry;  // the module stays loaded for the life of the process
  return r;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

// Whether the CUDA driver library can be opened; without it no device is visible, so
// the backend module (and cuBLAS) need not be loaded to find that out.
bool driver_present() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (!h) return false;
  dlclose(h);
  return true;
}

}  // namespace

const CudaEntry& cuda_entry() {
  const Loaded& l = loaded();
  if (!l.entry) raise<Unavailable>("{}", l.error);
  return *l.entry;
}

const CudaEntry* probe_cuda_entry() {
  if (!tachyon_cuda_entry && !driver_present()) return nullptr;
  const Loaded& l = loaded();
  if (!l.entry) {
    static const bool warned = (log_warning("{}; using the CPU", l.error), true);
    (void)warned;
  }
  return l.entry;
}

}  // namespace tachyon
