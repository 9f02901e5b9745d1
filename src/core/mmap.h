// Read-only memory-mapped files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace tachyon {

class MappedFile {
 public:
  // Maps the whole file read-only. Throws NotFound / InvalidArgument with the path.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Hints that [offset, offset+len) will be read soon / sequentially.
  void advise_willneed(size_t offset, size_t len) const;

 private:
  MappedFile() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Reads a whole (small) file into a string. Throws NotFound naming the path.
std::string read_file(const std::string& path, size_t max_bytes = size_t{1} << 30);
bool file_exists(const std::string& path);

}  // namespace tachyon
