// A read-only zip reader over bytes in memory (usually a memory-mapped file), enough
// for the archives torch.save writes: central directory, ZIP64 sizes and offsets, and
// stored (uncompressed) entries handed out zero-copy. Every offset and size from the
// file is bounds- and overflow-checked when the directory is parsed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon {

struct ZipEntry {
  std::string name;
  uint16_t method = 0;  // 0 = stored, 8 = deflate, ...
  uint16_t flags = 0;
  uint32_t crc32 = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
  uint64_t data_offset = 0;  // first byte of the entry's data in the image
};

class ZipReader {
 public:
  // Parses the directory of a zip image. `what` names it in errors (a path). The
  // bytes must outlive the reader. Throws InvalidArgument on any inconsistency.
  ZipReader(const uint8_t* data, size_t size, std::string what);

  const std::vector<ZipEntry>& entries() const { return entries_; }
  // nullptr when absent.
  const ZipEntry* find(std::string_view name) const;
  // The bytes of a stored entry, without a copy. Throws InvalidArgument for a
  // compressed or encrypted entry.
  std::span<const uint8_t> read(const ZipEntry& entry) const;
  // As read(), by name; throws NotFound naming the entry.
  std::span<const uint8_t> read(std::string_view name) const;
  const std::string& what() const { return what_; }

 private:
  struct Directory {
    uint64_t count = 0;
    uint64_t offset = 0;
    uint64_t size = 0;
  };
  Directory find_directory() const;
  void read_zip64_directory(size_t eocd, Directory& dir) const;
  size_t parse_central_entry(size_t pos, ZipEntry& e) const;
  void locate_data(ZipEntry& e) const;

  const uint8_t* data_;
  size_t size_;
  std::string what_;
  std::vector<ZipEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;
};

// True when the bytes start like a zip archive (a local file header).
bool looks_like_zip(const uint8_t* data, size_t size);

}  // namespace tachyon
