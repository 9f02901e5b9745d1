#include "io/torch_file.h"

#include <cstring>

#include "core/checked.h"
#include "core/error.h"
#include "core/mmap.h"
#include "io/tensor_source.h"

namespace tachyon {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The archive's top folder ("archive/" or, for files torch.save named itself, the file
// stem), found from its single data.pkl.
std::string archive_prefix(const ZipReader& zip) {
  std::string prefix;
  int found = 0;
  for (const auto& e : zip.entries()) {
    if (e.name == "data.pkl") {
      prefix.clear();
      ++found;
    } else if (ends_with(e.name, "/data.pkl") &&
               e.name.find('/') == e.name.size() - std::string_view("/data.pkl").size()) {
      prefix = e.name.substr(0, e.name.size() - std::string_view("data.pkl").size());
      ++found;
    }
  }
  if (found == 0) raise<InvalidArgument>("{}: no data.pkl in the archive", zip.what());
  if (found > 1)
    raise<InvalidArgument>("{}: {} data.pkl entries in the archive", zip.what(), found);
  return prefix;
}

}  // namespace

std::shared_ptr<TorchFile> TorchFile::open(const std::string& path) {
  auto file = MappedFile::open(path);
  return parse(file->data(), file->size(), file, path);
}

std::shared_ptr<TorchFile> TorchFile::parse(const uint8_t* data, size_t size,
                                            std::shared_ptr<void> owner, std::string what) {
  std::shared_ptr<TorchFile> f(new TorchFile());
  f->what_ = std::move(what);
  f->owner_ = std::move(owner);
  f->load(data, size, false);
  return f;
}

std::shared_ptr<TorchFile> TorchFile::open_object(const std::string& path) {
  auto file = MappedFile::open(path);
  return parse_object(file->data(), file->size(), file, path);
}

std::shared_ptr<TorchFile> TorchFile::parse_object(const uint8_t* data, size_t size,
                                                   std::shared_ptr<void> owner, std::string what) {
  std::shared_ptr<TorchFile> f(new TorchFile());
  f->what_ = std::move(what);
  f->owner_ = std::move(owner);
  f->load(data, size, true);
  return f;
}

void TorchFile::load(const uint8_t* data, size_t size, bool object) {
  if (!looks_like_zip(data, size)) {
    if (size >= 2 && data[0] == 0x80)
      raise<InvalidArgument>(
          "{}: legacy (pre-1.6) torch.save format is not supported; re-save it with a newer "
          "PyTorch or convert it to safetensors",
          what_);
    raise<InvalidArgument>("{}: not a zip-format PyTorch checkpoint", what_);
  }
  zip_ = std::make_unique<ZipReader>(data, size, what_);
  std::string prefix = archive_prefix(*zip_);
  if (const ZipEntry* bo = zip_->find(prefix + "byteorder")) {
    auto b = zip_->read(*bo);
    std::string_view order(reinterpret_cast<const char*>(b.data()), b.size());
    if (order != "little")
      raise<InvalidArgument>("{}: byte order '{}' is not supported (only little-endian)", what_,
                             order.substr(0, 16));
  }
  auto pkl = zip_->read(prefix + "data.pkl");
  const std::string_view pickle(reinterpret_cast<const char*>(pkl.data()), pkl.size());
  if (object) {
    TorchObject o = unpickle_torch_object(pickle, what_ + ":" + prefix + "data.pkl");
    state_ = std::move(o.state);
    root_ = std::move(o.root);
  } else {
    state_ = unpickle_torch_state_dict(pickle, what_ + ":" + prefix + "data.pkl");
  }
  for (const auto& st : state_.storages) {
    std::string entry = prefix + "data/" + st.key;
    const ZipEntry* e = zip_->find(entry);
    if (e == nullptr)
      raise<InvalidArgument>("{}: storage '{}' has no entry {} in the archive", what_, st.key,
                             entry);
    auto bytes = zip_->read(*e);
    uint64_t need =
        mul_or_throw<uint64_t>(static_cast<uint64_t>(st.numel), dtype_size(st.dtype), what_);
    if (bytes.size() < need)
      raise<InvalidArgument>("{}: storage '{}' holds {} bytes but declares {} {} elements", what_,
                             st.key, bytes.size(), st.numel, dtype_name(st.dtype));
    storage_bytes_.push_back(bytes);
  }
  for (size_t i = 0; i < state_.tensors.size(); ++i) index_[state_.tensors[i].name] = i;
}

const TorchTensor* TorchFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &state_.tensors[it->second];
}

Tensor TorchFile::get(const std::string& name) const {
  const TorchTensor* t = find(name);
  if (t == nullptr) raise<NotFound>("{}: no tensor named '{}'", what_, name);
  DType dt = dtype(*t);
  if (shape_numel(t->shape) == 0) return Tensor::empty(t->shape, dt);
  if (!is_contiguous(t->shape, t->stride)) return gather(*t);
  const uint8_t* p =
      storage_bytes_[t->storage].data() + static_cast<size_t>(t->storage_offset) * dtype_size(dt);
  return view_or_copy(p, t->shape, dt, owner_);
}

// Copies a strided view into a new contiguous tensor. Extents were checked against
// the storage when the pickle was read.
Tensor TorchFile::gather(const TorchTensor& t) const {
  DType dt = dtype(t);
  size_t esz = dtype_size(dt);
  Tensor out = Tensor::empty(t.shape, dt);
  const uint8_t* base = storage_bytes_[t.storage].data();
  auto* dst = static_cast<uint8_t*>(out.raw());
  const size_t nd = t.shape.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t src = t.storage_offset;
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(dst + static_cast<size_t>(i) * esz, base + static_cast<size_t>(src) * esz, esz);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < t.shape[d]) {
        src += t.stride[d];
        break;
      }
      src -= t.stride[d] * (t.shape[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace tachyon
