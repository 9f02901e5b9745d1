#include "io/zip.h"

#include "core/checked.h"
#include "core/error.h"

namespace tachyon {

namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64LocatorSize = 20;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kCentralSize = 46;
constexpr size_t kLocalSize = 30;
constexpr uint16_t kZip64ExtraId = 0x0001;

uint64_t le(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool looks_like_zip(const uint8_t* data, size_t size) {
  return size >= 4 && le(data, 4) == kLocalSig;
}

ZipReader::ZipReader(const uint8_t* data, size_t size, std::string what)
    : data_(data), size_(size), what_(std::move(what)) {
  Directory dir = find_directory();
  // Each central record is at least 46 bytes, which bounds a hostile count.
  if (dir.count > dir.size / kCentralSize)
    raise<InvalidArgument>("{}: zip directory claims {} entries in {} bytes", what_, dir.count,
                           dir.size);
  entries_.reserve(dir.count);
  size_t pos = dir.offset;
  const size_t end = dir.offset + dir.size;
  for (uint64_t i = 0; i < dir.count; ++i) {
    ZipEntry e;
    pos = parse_central_entry(pos, e);
    if (pos > end)
      raise<InvalidArgument>("{}: zip entry '{}' runs past the directory", what_, e.name);
    locate_data(e);
    if (!index_.emplace(e.name, entries_.size()).second)
      raise<InvalidArgument>("{}: zip entry '{}' appears twice", what_, e.name);
    entries_.push_back(std::move(e));
  }
}

ZipReader::Directory ZipReader::find_directory() const {
  if (size_ < kEndSize)
    raise<InvalidArgument>("{}: not a zip archive (too short: {} bytes)", what_, size_);
  // The end record sits in the last 22 + 65535 (comment) bytes; search backwards.
  size_t lowest = size_ - kEndSize > 0xffff ? size_ - kEndSize - 0xffff : 0;
  size_t eocd = size_;
  for (size_t p = size_ - kEndSize + 1; p-- > lowest;) {
    if (le(data_ + p, 4) == kEndSig && p + kEndSize + le(data_ + p + 20, 2) <= size_) {
      eocd = p;
      break;
    }
  }
  if (eocd == size_)
    raise<InvalidArgument>("{}: not a zip archive (no end of central directory)", what_);
  const uint8_t* r = data_ + eocd;
  if (le(r + 4, 2) != 0 || le(r + 6, 2) != 0)
    raise<InvalidArgument>("{}: multi-part zip archives are not supported", what_);
  Directory dir{le(r + 10, 2), le(r + 16, 4), le(r + 12, 4)};
  if (dir.count == 0xffff || dir.offset == 0xffffffff || dir.size == 0xffffffff)
    read_zip64_directory(eocd, dir);
  uint64_t dir_end = add_or_throw<uint64_t>(dir.offset, dir.size, what_);
  if (dir_end > eocd)
    raise<InvalidArgument>("{}: zip central directory [{}, {}) lies outside the archive", what_,
                           dir.offset, dir_end);
  return dir;
}

void ZipReader::read_zip64_directory(size_t eocd, Directory& dir) const {
  if (eocd < kZip64LocatorSize || le(data_ + eocd - kZip64LocatorSize, 4) != kZip64LocatorSig)
    raise<InvalidArgument>("{}: zip needs a ZIP64 directory locator but has none", what_);
  uint64_t off = le(data_ + eocd - kZip64LocatorSize + 8, 8);
  if (off > eocd - kZip64LocatorSize || eocd - kZip64LocatorSize - off < kZip64EndSize)
    raise<InvalidArgument>("{}: ZIP64 end of directory offset {} is out of range", what_, off);
  const uint8_t* r = data_ + off;
  if (le(r, 4) != kZip64EndSig)
    raise<InvalidArgument>("{}: bad ZIP64 end of directory signature at {}", what_, off);
  if (le(r + 16, 4) != 0 || le(r + 20, 4) != 0)
    raise<InvalidArgument>("{}: multi-part zip archives are not supported", what_);
  dir.count = le(r + 32, 8);
  dir.size = le(r + 40, 8);
  dir.offset = le(r + 48, 8);
  if (add_or_throw<uint64_t>(dir.offset, dir.size, what_) > off)
    raise<InvalidArgument>("{}: ZIP64 central directory overlaps its end record", what_);
}

size_t ZipReader::parse_central_entry(size_t pos, ZipEntry& e) const {
  if (pos > size_ || size_ - pos < kCentralSize || le(data_ + pos, 4) != kCentralSig)
    raise<InvalidArgument>("{}: bad zip central directory record at offset {}", what_, pos);
  const uint8_t* r = data_ + pos;
  e.flags = static_cast<uint16_t>(le(r + 8, 2));
  e.method = static_cast<uint16_t>(le(r + 10, 2));
  e.crc32 = static_cast<uint32_t>(le(r + 16, 4));
  e.compressed_size = le(r + 20, 4);
  e.size = le(r + 24, 4);
  size_t name_len = le(r + 28, 2), extra_len = le(r + 30, 2), comment_len = le(r + 32, 2);
  uint64_t disk = le(r + 34, 2);
  e.local_header_offset = le(r + 42, 4);
  size_t var = name_len + extra_len + comment_len;
  if (size_ - pos - kCentralSize < var)
    raise<InvalidArgument>("{}: zip central record at {} runs past the end", what_, pos);
  e.name.assign(reinterpret_cast<const char*>(r + kCentralSize), name_len);
  // ZIP64: the fields that overflowed 32 bits follow, in order, in extra block 0x0001.
  const uint8_t* x = r + kCentralSize + name_len;
  for (size_t i = 0; i + 4 <= extra_len;) {
    size_t id = le(x + i, 2), len = le(x + i + 2, 2);
    if (i + 4 + len > extra_len) break;
    if (id == kZip64ExtraId) {
      const uint8_t* f = x + i + 4;
      size_t left = len;
      auto next = [&](uint64_t& field, int bytes) {
        if (left < static_cast<size_t>(bytes))
          raise<InvalidArgument>("{}: zip entry '{}' has a short ZIP64 field", what_, e.name);
        field = le(f, bytes);
        f += bytes;
        left -= bytes;
      };
      if (e.size == 0xffffffff) next(e.size, 8);
      if (e.compressed_size == 0xffffffff) next(e.compressed_size, 8);
      if (e.local_header_offset == 0xffffffff) next(e.local_header_offset, 8);
      if (disk == 0xffff) next(disk, 4);
    }
    i += 4 + len;
  }
  if (disk != 0) raise<InvalidArgument>("{}: zip entry '{}' is on another disk", what_, e.name);
  return pos + kCentralSize + var;
}

void ZipReader::locate_data(ZipEntry& e) const {
  uint64_t off = e.local_header_offset;
  if (off > size_ || size_ - off < kLocalSize || le(data_ + off, 4) != kLocalSig)
    raise<InvalidArgument>("{}: zip entry '{}': bad local header offset {}", what_, e.name, off);
  uint64_t start = off + kLocalSize + le(data_ + off + 26, 2) + le(data_ + off + 28, 2);
  uint64_t end = add_or_throw<uint64_t>(start, e.compressed_size, what_);
  if (start > size_ || end > size_)
    raise<InvalidArgument>("{}: zip entry '{}': data [{}, {}) runs past the end ({} bytes)", what_,
                           e.name, start, end, size_);
  e.data_offset = start;
}

const ZipEntry* ZipReader::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::span<const uint8_t> ZipReader::read(const ZipEntry& e) const {
  if (e.flags & 1) raise<InvalidArgument>("{}: zip entry '{}' is encrypted", what_, e.name);
  if (e.method != 0)
    raise<InvalidArgument>(
        "{}: zip entry '{}' is compressed (method {}); only stored entries are supported, "
        "as torch.save writes them",
        what_, e.name, e.method);
  if (e.size != e.compressed_size)
    raise<InvalidArgument>("{}: stored zip entry '{}' has sizes {} and {}", what_, e.name, e.size,
                           e.compressed_size);
  return {data_ + e.data_offset, static_cast<size_t>(e.size)};
}

std::span<const uint8_t> ZipReader::read(std::string_view name) const {
  const ZipEntry* e = find(name);
  if (e == nullptr) raise<NotFound>("{}: no zip entry named '{}'", what_, name);
  return read(*e);
}

}  // namespace tachyon
