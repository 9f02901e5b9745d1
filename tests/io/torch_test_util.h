// Hand-built pickles and zip archives for the PyTorch checkpoint tests: the bytes
// torch.save would write, assembled opcode by opcode so no Python is needed.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace tachyon::testing {

inline std::string le_bytes(uint64_t v, int n) {
  std::string s;
  for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

inline uint64_t read_le(const std::string& s, size_t at, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

class PickleBuilder {
 public:
  PickleBuilder& raw(const std::string& s) {
    b_ += s;
    return *this;
  }
  PickleBuilder& op(char c) {
    b_.push_back(c);
    return *this;
  }
  PickleBuilder& proto(int v) {
    b_ += '\x80';
    b_.push_back(static_cast<char>(v));
    return *this;
  }
  PickleBuilder& str(const std::string& s) {
    b_ += 'X';
    b_ += le_bytes(s.size(), 4) + s;
    return *this;
  }
  PickleBuilder& short_str(const std::string& s) {
    b_ += '\x8c';
    b_.push_back(static_cast<char>(s.size()));
    b_ += s;
    return *this;
  }
  PickleBuilder& integer(int64_t v) {
    if (v >= 0 && v < 256) {
      b_ += 'K';
      b_.push_back(static_cast<char>(v));
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      b_ += 'J';
      b_ += le_bytes(static_cast<uint64_t>(v), 4);
    } else {
      b_ += "\x8a\x08";
      b_ += le_bytes(static_cast<uint64_t>(v), 8);
    }
    return *this;
  }
  PickleBuilder& global(const std::string& module, const std::string& name) {
    b_ += 'c' + module + '\n' + name + '\n';
    return *this;
  }
  PickleBuilder& stack_global(const std::string& module, const std::string& name) {
    short_str(module).short_str(name);
    b_ += '\x93';
    return *this;
  }
  PickleBuilder& put(int i) {
    b_ += 'q';
    b_.push_back(static_cast<char>(i));
    return *this;
  }
  PickleBuilder& get(int i) {
    b_ += 'h';
    b_.push_back(static_cast<char>(i));
    return *this;
  }
  PickleBuilder& int_tuple(const std::vector<int64_t>& v) {
    op('(');
    for (int64_t x : v) integer(x);
    return op('t');
  }
  const std::string& bytes() const { return b_; }

 private:
  std::string b_;
};

struct TensorSpec {
  std::string name;
  std::string storage_class = "FloatStorage";
  std::string key;
  int64_t storage_numel = 0;
  int64_t offset = 0;
  Shape shape;
  Shape stride;
};

// A state dict pickle as torch.save writes it: an OrderedDict (or a plain dict) of
// _rebuild_tensor_v2 calls whose storages are persistent ids.
inline std::string state_dict_pickle(const std::vector<TensorSpec>& specs,
                                     bool ordered_dict = true) {
  PickleBuilder p;
  p.proto(2);
  if (ordered_dict)
    p.global("collections", "OrderedDict").op(')').op('R');
  else
    p.op('}');
  p.op('(');
  for (const auto& s : specs) {
    p.str(s.name).global("torch._utils", "_rebuild_tensor_v2").op('(');
    p.op('(').str("storage").global("torch", s.storage_class).str(s.key).str("cpu");
    p.integer(s.storage_numel).op('t').op('Q');
    p.integer(s.offset).int_tuple(s.shape).int_tuple(s.stride).op('\x89');
    p.global("collections", "OrderedDict").op(')').op('R').op('t').op('R');
  }
  p.op('u').op('.');
  return p.bytes();
}

struct ZipOptions {
  bool zip64 = false;
  uint16_t method = 0;
  size_t align = 64;  // data alignment, as torch.save pads
};

// A zip archive of stored entries, written the way torch.save lays it out.
inline std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries,
                            const ZipOptions& opt = {}) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    uint64_t offset = out.size();
    size_t pad = 0;
    size_t base = out.size() + 30 + name.size() + 4;
    if (opt.align > 1) pad = (opt.align - base % opt.align) % opt.align;
    std::string extra = le_bytes(0x4246, 2) + le_bytes(pad, 2) + std::string(pad, 'Z');
    out += le_bytes(0x04034b50, 4) + le_bytes(20, 2) + le_bytes(0, 2) + le_bytes(opt.method, 2);
    out += le_bytes(0, 4) + le_bytes(0, 4) + le_bytes(data.size(), 4) + le_bytes(data.size(), 4);
    out += le_bytes(name.size(), 2) + le_bytes(extra.size(), 2) + name + extra + data;
    std::string cextra;
    uint32_t size32 = static_cast<uint32_t>(data.size()), off32 = static_cast<uint32_t>(offset);
    if (opt.zip64) {
      cextra = le_bytes(1, 2) + le_bytes(24, 2) + le_bytes(data.size(), 8) +
               le_bytes(data.size(), 8) + le_bytes(offset, 8);
      size32 = off32 = 0xffffffff;
    }
    central += le_bytes(0x02014b50, 4) + le_bytes(45, 2) + le_bytes(45, 2) + le_bytes(0, 2);
    central += le_bytes(opt.method, 2) + le_bytes(0, 4) + le_bytes(0, 4);
    central += le_bytes(size32, 4) + le_bytes(size32, 4) + le_bytes(name.size(), 2);
    central += le_bytes(cextra.size(), 2) + le_bytes(0, 2) + le_bytes(0, 2) + le_bytes(0, 2);
    central += le_bytes(0, 4) + le_bytes(off32, 4) + name + cextra;
  }
  uint64_t cd_offset = out.size();
  out += central;
  uint64_t n = entries.size();
  if (opt.zip64) {
    uint64_t z64 = out.size();
    out += le_bytes(0x06064b50, 4) + le_bytes(44, 8) + le_bytes(45, 2) + le_bytes(45, 2);
    out += le_bytes(0, 4) + le_bytes(0, 4) + le_bytes(n, 8) + le_bytes(n, 8);
    out += le_bytes(central.size(), 8) + le_bytes(cd_offset, 8);
    out += le_bytes(0x07064b50, 4) + le_bytes(0, 4) + le_bytes(z64, 8) + le_bytes(1, 4);
    out += le_bytes(0x06054b50, 4) + le_bytes(0, 4) + le_bytes(0xffff, 2) + le_bytes(0xffff, 2);
    out += le_bytes(0xffffffff, 4) + le_bytes(0xffffffff, 4) + le_bytes(0, 2);
  } else {
    out += le_bytes(0x06054b50, 4) + le_bytes(0, 4) + le_bytes(n, 2) + le_bytes(n, 2);
    out += le_bytes(central.size(), 4) + le_bytes(cd_offset, 4) + le_bytes(0, 2);
  }
  return out;
}

inline std::string float_bytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

// A torch.save-style archive "archive/..." holding `pickle` and the storages.
inline std::string torch_zip(const std::string& pickle,
                             const std::vector<std::pair<std::string, std::string>>& storages,
                             const ZipOptions& opt = {}) {
  std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", pickle},
                                                              {"archive/byteorder", "little"}};
  for (const auto& [key, data] : storages) entries.emplace_back("archive/data/" + key, data);
  entries.emplace_back("archive/version", "3\n");
  return make_zip(entries, opt);
}

}  // namespace tachyon::testing
