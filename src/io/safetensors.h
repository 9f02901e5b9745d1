// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON
// ({"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}),
// then the data section the offsets are relative to. Files are memory-mapped and every
// field is validated before a tensor view is handed out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/mmap.h"
#include "core/tensor.h"

namespace tachyon {

// Largest header accepted (the format's own limit).
inline constexpr uint64_t kSafetensorsMaxHeader = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  uint64_t offset = 0;  // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in data-offset order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // 8 + header length
};

// Validates a whole safetensors image of `size` bytes (header and data extents);
// throws InvalidArgument naming `what` (and the tensor) on any inconsistency.
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t size, std::string_view what);

// The safetensors spelling of a dtype ("F32", "BF16", ...), and back.
std::string_view safetensors_dtype_name(DType dtype);
std::optional<DType> parse_safetensors_dtype(std::string_view name);

class SafetensorsFile {
 public:
  // Maps and validates the file. Throws NotFound / InvalidArgument naming the path.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  const std::vector<SafetensorsEntry>& entries() const { return header_.entries; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  // nullptr when absent.
  const SafetensorsEntry* find(const std::string& name) const;
  // A zero-copy view into the mapping (which the tensor keeps alive); a copy only when
  // the data is not aligned to its element size. Throws NotFound naming the tensor.
  Tensor get(const std::string& name) const;

 private:
  std::shared_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes CPU tensors (names unique) and string metadata as a safetensors file,
// atomically: a temporary file in the same folder, then a rename.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The file image write_safetensors would write (for tests and in-memory use).
std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata = {});

}  // namespace tachyon
