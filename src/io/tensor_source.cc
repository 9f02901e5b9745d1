#include "io/tensor_source.h"

#include <cstring>

#include "io/safetensors.h"
#include "io/torch_file.h"

namespace tachyon {

namespace {

class SafetensorsSource : public TensorSource {
 public:
  explicit SafetensorsSource(std::shared_ptr<SafetensorsFile> file) : file_(std::move(file)) {}
  const std::string& path() const override { return file_->path(); }
  std::vector<TensorInfo> tensors() const override {
    std::vector<TensorInfo> out;
    for (const auto& e : file_->entries()) out.push_back({e.name, e.dtype, e.shape, path()});
    return out;
  }
  Tensor get(const std::string& name) const override { return file_->get(name); }

 private:
  std::shared_ptr<SafetensorsFile> file_;
};

class TorchSource : public TensorSource {
 public:
  explicit TorchSource(std::shared_ptr<TorchFile> file) : file_(std::move(file)) {}
  const std::string& path() const override { return file_->path(); }
  std::vector<TensorInfo> tensors() const override {
    std::vector<TensorInfo> out;
    for (const auto& t : file_->tensors())
      out.push_back({t.name, file_->dtype(t), t.shape, path()});
    return out;
  }
  Tensor get(const std::string& name) const override { return file_->get(name); }

 private:
  std::shared_ptr<TorchFile> file_;
};

}  // namespace

Tensor view_or_copy(const uint8_t* data, Shape shape, DType dtype, std::shared_ptr<void> owner) {
  if (reinterpret_cast<uintptr_t>(data) % dtype_size(dtype) == 0)
    return Tensor::wrap(const_cast<uint8_t*>(data), std::move(shape), dtype, std::move(owner));
  Tensor t = Tensor::empty(std::move(shape), dtype);
  if (t.nbytes() > 0) std::memcpy(t.raw(), data, t.nbytes());
  return t;
}

std::unique_ptr<TensorSource> open_torch_source(const std::string& path) {
  return std::make_unique<TorchSource>(TorchFile::open(path));
}

std::unique_ptr<TensorSource> open_safetensors_source(const std::string& path) {
  return std::make_unique<SafetensorsSource>(SafetensorsFile::open(path));
}

}  // namespace tachyon
