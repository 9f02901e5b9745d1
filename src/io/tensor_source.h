// One weights file as the checkpoint facade sees it: a list of tensors it holds and a
// way to fetch each as a CPU tensor. Implemented per file format.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tachyon {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string file;  // path of the file holding the tensor
};

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const std::string& path() const = 0;
  virtual std::vector<TensorInfo> tensors() const = 0;
  // Throws NotFound naming the tensor and file when absent.
  virtual Tensor get(const std::string& name) const = 0;
};

// Opens one weights file by its extension: *.safetensors or a torch zip (*.bin, *.pt,
// *.pth). Throws NotFound / InvalidArgument naming the path.
// A view of the tensor's bytes at `data`, owned by `owner`; copied into fresh aligned
// memory when `data` is not aligned to the element size.
Tensor view_or_copy(const uint8_t* data, Shape shape, DType dtype, std::shared_ptr<void> owner);

std::unique_ptr<TensorSource> open_tensor_source(const std::string& path);
std::unique_ptr<TensorSource> open_safetensors_source(const std::string& path);
std::unique_ptr<TensorSource> open_torch_source(const std::string& path);

}  // namespace tachyon
