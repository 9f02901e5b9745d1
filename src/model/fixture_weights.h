// Conformance fixture weights from a manifest (a fixture folder's weights.json; the
// format is described in tests/conformance/fixtures/README.md): seeded normal streams
// (NormalStream, bit for bit PyTorch's), each stream tensor's float32 values, and the
// checkpoint files built from them: tensors that gather rows of stream tensors (cast to
// the file's dtype) or carry their bytes inline, written as safetensors (one file or
// shards with an index). scripts/fixture_weights.py is the same recipe in Python.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/json.h"
#include "core/tensor.h"

namespace tachyon {

struct FixtureStreamTensor {
  enum Kind { kScaled, kScaled64, kNorm };
  std::string name;
  Shape shape;
  Kind kind = kScaled;
  double std = 1.0;  // kScaled: float32(z) * float32(std); kScaled64: float32(z * std)
};

struct FixtureStream {
  uint32_t seed = 0;
  uint64_t skip = 0;  // 32-bit outputs discarded first
  std::vector<FixtureStreamTensor> tensors;
};

// Rows [first, first + count) of a stream tensor's first dimension.
struct FixtureRows {
  std::string source;
  int64_t first = 0;
  int64_t count = 0;
};

struct FixtureTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<FixtureRows> rows;  // concatenated, then cast to dtype (F32, BF16 or F16)
  // Inline contents (when rows is empty); the only source of the integer and float8
  // tensors (I64, I32, I8, U8, F8_E4M3) of quantized checkpoints.
  std::string bytes;
};

struct FixtureFile {
  std::string name;
  std::map<std::string, std::string> metadata;
  std::vector<FixtureTensor> tensors;
};

struct FixtureManifest {
  std::string references;  // the fixture whose reference files this one uses, or ""
  std::vector<FixtureStream> streams;
  std::vector<FixtureFile> files;
  std::string index_name;  // "" when there is no index
  Json index_metadata;
  std::map<std::string, uint64_t> checksums;  // file name -> FNV-1a 64 of its bytes
};

// Parses and validates a manifest (untrusted input: every field's type, range and
// reference is checked; errors are InvalidArgument naming the field).
FixtureManifest parse_fixture_manifest(std::string_view text);
FixtureManifest load_fixture_manifest(const std::string& path);

// The checkpoint files (name -> bytes) a manifest describes. Throws InvalidArgument if a
// file's checksum differs from the one the manifest recorded.
std::map<std::string, std::string> build_fixture_files(const FixtureManifest& m);

// Writes build_fixture_files' files into dir (created if needed).
void write_fixture_weights(const FixtureManifest& m, const std::string& dir);

uint64_t fnv1a64(std::string_view bytes);

}  // namespace tachyon
