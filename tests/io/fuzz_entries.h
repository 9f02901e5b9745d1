// The entry points of the io fuzz targets, shared with the corpus replay test so the
// same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
// Each returns true when the input was accepted; any typed Error is a clean refusal,
// and anything else (a crash, a sanitizer report, another exception) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "core/error.h"
#include "core/logging.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "io/torch_file.h"
#include "io/torch_pickle.h"
#include "io/torch_test_util.h"
#include "io/zip.h"

namespace tachyon::fuzz {

// Reads every byte of a tensor so the sanitizer sees any out-of-bounds view.
inline uint64_t touch(const Tensor& t) {
  uint64_t sum = 0;
  const auto* p = static_cast<const uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) sum += p[i];
  return sum;
}

inline bool safetensors_one(const uint8_t* data, size_t size) {
  set_log_level(LogLevel::kOff);
  try {
    SafetensorsHeader h = parse_safetensors_header(data, size, "fuzz.safetensors");
    for (const auto& e : h.entries) touch(view_or_copy(data + e.offset, e.shape, e.dtype, nullptr));
    return true;
  } catch (const Error&) {
    return false;
  }
}

inline void torch_tensors(const TorchFile& f) {
  for (const auto& t : f.tensors()) touch(f.get(t.name));
}

// A zip is read as a whole checkpoint; anything else as data.pkl, which then gets
// storages of the sizes it declares (when small) so its tensors are built too.
inline bool pickle_one(const uint8_t* data, size_t size) {
  set_log_level(LogLevel::kOff);
  try {
    if (looks_like_zip(data, size)) {
      torch_tensors(*TorchFile::parse(data, size, nullptr, "fuzz.bin"));
      return true;
    }
    std::string pkl(reinterpret_cast<const char*>(data), size);
    UnpickleLimits limits;
    limits.max_ops = 1 << 20;
    TorchStateDict sd = unpickle_torch_state_dict(pkl, "fuzz.pkl", limits);
    std::vector<std::pair<std::string, std::string>> storages;
    uint64_t total = 0;
    for (const auto& st : sd.storages) {
      if (st.numel > (1 << 20) || st.key.size() > 1000) return true;
      total += static_cast<uint64_t>(st.numel) * dtype_size(st.dtype);
      if (total > (16 << 20)) return true;
      storages.emplace_back(st.key, std::string(st.numel * dtype_size(st.dtype), '\x5a'));
    }
    std::string zip = testing::torch_zip(pkl, storages);
    torch_tensors(*TorchFile::parse(reinterpret_cast<const uint8_t*>(zip.data()), zip.size(),
                                    nullptr, "fuzz.bin"));
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Every value of a tree read as data, each shared one once.
inline size_t walk(const PyValue& v, std::set<const PyValue*>& seen) {
  if (!seen.insert(&v).second) return 0;
  size_t n = v.describe().size();
  for (const auto& c : v.items) n += walk(*c, seen);
  if (v.state) n += walk(*v.state, seen);
  return n;
}

// The same inputs read as any object torch.save wrote (a training checkpoint): opaque
// globals, every tensor named by its path and built.
inline bool pickle_object_one(const uint8_t* data, size_t size) {
  set_log_level(LogLevel::kOff);
  try {
    std::set<const PyValue*> seen;
    if (looks_like_zip(data, size)) {
      auto f = TorchFile::parse_object(data, size, nullptr, "fuzz.pt");
      torch_tensors(*f);
      walk(*f->root(), seen);
      return true;
    }
    std::string pkl(reinterpret_cast<const char*>(data), size);
    UnpickleLimits limits;
    limits.max_ops = 1 << 20;
    TorchObject o = unpickle_torch_object(pkl, "fuzz.pkl", limits);
    walk(*o.root, seen);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace tachyon::fuzz
