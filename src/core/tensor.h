// A typed, shaped view of contiguous memory on one device. Tensors share ownership of
// the memory they view (a heap block, a memory-mapped file, a device allocation), so a
// weight can point straight into a mapped checkpoint without a copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tachyon {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::kCPU; }
  std::string str() const;
};

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& shape);
// Product of the dims; throws InvalidArgument on a negative dim or overflow.
int64_t shape_numel(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  // A new zero-initialised CPU tensor (64-byte aligned).
  static Tensor zeros(Shape shape, DType dtype);
  // A new uninitialised CPU tensor (64-byte aligned).
  static Tensor empty(Shape shape, DType dtype);
  // A view of memory owned by `owner` (kept alive as long as the tensor).
  static Tensor wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner,
                     Device device = {});

  explicit operator bool() const { return data_ != nullptr; }

  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  // Dim i; negative i counts from the end.
  int64_t dim(int i) const;
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }

  void* raw() { return data_; }
  const void* raw() const { return data_; }
  template <typename T>
  T* data() {
    return static_cast<T*>(data_);
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(data_);
  }

  // Same memory, new shape with the same number of elements (one dim may be -1).
  Tensor reshape(Shape shape) const;
  // Rows [begin, end) of the first dimension, sharing memory.
  Tensor slice_rows(int64_t begin, int64_t end) const;
  // A deep copy into fresh CPU memory (for CPU tensors).
  Tensor clone() const;
  // A CPU copy converted to dtype (floating types only, or same dtype).
  Tensor to(DType dtype) const;

  const std::shared_ptr<void>& owner() const { return owner_; }
  std::string str() const;  // "bf16[32000, 256]"

 private:
  std::shared_ptr<void> owner_;
  void* data_ = nullptr;
  Shape shape_;
  DType dtype_ = DType::kF32;
  Device device_;
};

}  // namespace tachyon
