#include "backend/cpu/packed_weight.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

#include "backend/cpu/gemm.h"
#include "core/error.h"

namespace tachyon::cpu {
namespace {

// The owner of a packed copy: its memory (where the data starts) and its shape.
struct PackedOwner {
  std::shared_ptr<void> memory;
  Shape shape;
};

// The deleter type marks a packed copy (std::get_deleter finds it in the owner).
struct PackedOwnerDeleter {
  void operator()(PackedOwner* p) const { delete p; }
};

}  // namespace

std::shared_ptr<void> alloc_large(size_t bytes) {
  constexpr size_t kHuge = size_t{2} << 20;
  if (bytes >= kHuge) {
    const size_t len = (bytes + kHuge - 1) / kHuge * kHuge + kHuge;  // room to align
    void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      const uintptr_t a = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~uintptr_t{kHuge - 1};
      madvise(reinterpret_cast<void*>(a), len - (a - reinterpret_cast<uintptr_t>(p)),
              MADV_HUGEPAGE);
      std::shared_ptr<void> mapping(p, [len](void* q) { munmap(q, len); });
      return std::shared_ptr<void>(mapping, reinterpret_cast<void*>(a));  // aliasing
    }
  }
  void* p = ::operator new[](std::max<size_t>(bytes, 1), std::align_val_t(64));
  return std::shared_ptr<void>(p, [](void* q) { ::operator delete[](q, std::align_val_t(64)); });
}

Tensor pack_linear_weight(const Tensor& w, ThreadPool& pool) {
  TACHYON_CHECK(
      w && w.ndim() == 2 && w.device().is_cpu() &&
          (w.dtype() == DType::kF32 || w.dtype() == DType::kF16 || w.dtype() == DType::kBF16),
      "pack_linear_weight: {} is not a 2-d f32/f16/bf16 host matrix",
      w ? w.str() : std::string("none"));
  const int64_t n = w.dim(0), k = w.dim(1);
  const size_t bytes =
      static_cast<size_t>(packed_weight_elems(w.dtype(), n, k)) * dtype_size(w.dtype());
  std::shared_ptr<void> memory = alloc_large(bytes);
  pack_weight(w.raw(), w.dtype(), n, k, memory.get(), &pool);
  void* data = memory.get();
  std::shared_ptr<PackedOwner> owner(new PackedOwner{std::move(memory), w.shape()},
                                     PackedOwnerDeleter{});
  return Tensor::wrap(data, w.shape(), w.dtype(), std::move(owner));
}

bool is_packed_weight(const Tensor& t) {
  if (!t || std::get_deleter<PackedOwnerDeleter>(t.owner()) == nullptr) return false;
  const auto* owner = static_cast<const PackedOwner*>(t.owner().get());
  TACHYON_CHECK(t.raw() == owner->memory.get() && t.shape() == owner->shape,
                "{} is a view of part of a packed weight {}", t.str(), shape_str(owner->shape));
  return true;
}

}  // namespace tachyon::cpu
