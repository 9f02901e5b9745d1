#include "io/tensor_source.h"

#include "io/safetensors.h"

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

}  // namespace

std::unique_ptr<TensorSource> open_safetensors_source(const std::string& path) {
  return std::make_unique<SafetensorsSource>(SafetensorsFile::open(path));
}

}  // namespace tachyon
