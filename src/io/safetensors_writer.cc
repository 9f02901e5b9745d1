// Writing safetensors files. The layout matches what the reference implementation
// accepts: the header padded with spaces to a multiple of 8, tensors packed without
// gaps in order of decreasing element size (so every tensor stays aligned), then name.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "core/checked.h"
#include "core/error.h"
#include "core/json.h"
#include "io/safetensors.h"

namespace tachyon {

namespace {

struct Layout {
  std::string header;                // 8-byte length + padded JSON
  std::vector<const Tensor*> order;  // data section order
};

Layout plan_layout(const NamedTensors& tensors, const std::map<std::string, std::string>& meta) {
  std::set<std::string> seen;
  std::vector<size_t> idx(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, t] = tensors[i];
    if (name == "__metadata__" || !seen.insert(name).second)
      raise<InvalidArgument>("write_safetensors: duplicate or reserved tensor name '{}'", name);
    if (!t.device().is_cpu())
      raise<InvalidArgument>("write_safetensors: tensor '{}' is on {}", name, t.device().str());
    if (t.raw() == nullptr && t.nbytes() > 0)
      raise<InvalidArgument>("write_safetensors: tensor '{}' has no data", name);
    idx[i] = i;
  }
  std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    size_t sa = dtype_size(tensors[a].second.dtype()), sb = dtype_size(tensors[b].second.dtype());
    return sa != sb ? sa > sb : tensors[a].first < tensors[b].first;
  });
  // Keys in sorted order; each entry's fields as the reference implementation writes
  // them (dtype, shape, data_offsets), so that equal tensors give equal files.
  std::map<std::string, std::string> entries;
  if (!meta.empty()) entries["__metadata__"] = Json(meta).dump();
  Layout out;
  uint64_t offset = 0;
  for (size_t i : idx) {
    const auto& [name, t] = tensors[i];
    uint64_t end = add_or_throw<uint64_t>(offset, t.nbytes(), "write_safetensors");
    entries[name] = fmt::format(R"({{"dtype":{},"shape":{},"data_offsets":{}}})",
                                Json(safetensors_dtype_name(t.dtype())).dump(),
                                Json(t.shape()).dump(), Json({offset, end}).dump());
    offset = end;
    out.order.push_back(&t);
  }
  std::string text = "{";
  for (const auto& [key, value] : entries) {
    if (text.size() > 1) text += ',';
    text += Json(key).dump() + ':' + value;
  }
  text += '}';
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.header.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.header += text;
  return out;
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      raise<InvalidArgument>("cannot write {}: {}", path, std::strerror(errno));
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_file_atomically(const std::string& path,
                           const std::function<void(int fd, const std::string& tmp)>& body) {
  std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) raise<InvalidArgument>("cannot create {}: {}", tmp, std::strerror(errno));
  try {
    body(fd, tmp);
    if (::fsync(fd) != 0) raise<InvalidArgument>("cannot sync {}: {}", tmp, std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int e = errno;
    ::unlink(tmp.c_str());
    raise<InvalidArgument>("cannot rename {} to {}: {}", tmp, path, std::strerror(e));
  }
}

}  // namespace

std::string serialize_safetensors(const NamedTensors& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  Layout layout = plan_layout(tensors, metadata);
  std::string out = std::move(layout.header);
  for (const Tensor* t : layout.order)
    if (t->nbytes() > 0) out.append(static_cast<const char*>(t->raw()), t->nbytes());
  return out;
}

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  Layout layout = plan_layout(tensors, metadata);
  write_file_atomically(path, [&](int fd, const std::string& tmp) {
    write_all(fd, layout.header.data(), layout.header.size(), tmp);
    for (const Tensor* t : layout.order)
      if (t->nbytes() > 0) write_all(fd, t->raw(), t->nbytes(), tmp);
  });
}

}  // namespace tachyon
