#include "core/tensor.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "core/checked.h"

namespace tachyon {

std::string Device::str() const {
  return type == DeviceType::kCPU ? std::string("cpu") : fmt::format("cuda:{}", index);
}

std::string shape_str(const Shape& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) raise<InvalidArgument>("negative dimension in shape {}", shape_str(shape));
    n = mul_or_throw<int64_t>(n, d, "shape size");
  }
  return n;
}

namespace {
std::shared_ptr<void> aligned_alloc_shared(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p == nullptr) raise<ResourceExhausted>("out of memory allocating {} bytes", bytes);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}
}  // namespace

Tensor Tensor::empty(Shape shape, DType dtype) {
  int64_t n = shape_numel(shape);
  size_t bytes = mul_or_throw<size_t>(static_cast<size_t>(n), dtype_size(dtype), "tensor bytes");
  Tensor t;
  t.owner_ = aligned_alloc_shared(bytes);
  t.data_ = t.owner_.get();
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::zeros(Shape shape, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(void* data, Shape shape, DType dtype, std::shared_ptr<void> owner,
                    Device device) {
  shape_numel(shape);  // validates
  Tensor t;
  t.owner_ = std::move(owner);
  t.data_ = data;
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.device_ = device;
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  TACHYON_CHECK(j >= 0 && j < n, "dim {} of a {}-d tensor", i, n);
  return shape_[j];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

Tensor Tensor::reshape(Shape shape) const {
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      TACHYON_CHECK(infer < 0, "reshape with two -1 dims");
      infer = static_cast<int>(i);
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    TACHYON_CHECK(known > 0 && numel() % known == 0, "reshape {} to {}", shape_str(shape_),
                  shape_str(shape));
    shape[infer] = numel() / known;
  }
  TACHYON_CHECK(shape_numel(shape) == numel(), "reshape {} to {}", shape_str(shape_),
                shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::slice_rows(int64_t begin, int64_t end) const {
  TACHYON_CHECK(ndim() >= 1, "slice_rows of a scalar");
  TACHYON_CHECK(0 <= begin && begin <= end && end <= shape_[0], "rows [{}, {}) of {}", begin, end,
                shape_str(shape_));
  int64_t row = shape_[0] == 0 ? 0 : numel() / shape_[0];
  Tensor t = *this;
  t.data_ = static_cast<char*>(data_) + begin * row * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[0] = end - begin;
  return t;
}

Tensor Tensor::clone() const {
  TACHYON_CHECK(device_.is_cpu(), "clone of a {} tensor", device_.str());
  Tensor t = empty(shape_, dtype_);
  if (nbytes() > 0) std::memcpy(t.data_, data_, nbytes());
  return t;
}

Tensor Tensor::to(DType dtype) const {
  TACHYON_CHECK(device_.is_cpu(), "to() of a {} tensor", device_.str());
  if (dtype == dtype_) return clone();
  Tensor t = empty(shape_, dtype);
  int64_t n = numel();
  for (int64_t i = 0; i < n; ++i) {
    float v = load_as_f32(data_, dtype_, static_cast<size_t>(i));
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[i] = v;
        break;
      case DType::kF16:
        t.data<f16>()[i] = f32_to_f16(v);
        break;
      case DType::kBF16:
        t.data<bf16>()[i] = f32_to_bf16(v);
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      default:
        raise<InvalidArgument>("cannot convert to {}", dtype_name(dtype));
    }
  }
  return t;
}

std::string Tensor::str() const {
  return fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
}

}  // namespace tachyon
