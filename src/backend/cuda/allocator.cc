#include "backend/cuda/allocator.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"
#include "core/logging.h"

namespace tachyon::cuda {

struct DeviceAllocator::State {
  int device = 0;
  mutable std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;
  size_t cached = 0;
  size_t used = 0;

  ~State() {
    for (auto& [size, blocks] : free)
      for (void* p : blocks) cudaFree(p);
  }

  void give_back(void* p, size_t size) {
    std::lock_guard<std::mutex> lock(mu);
    free[size].push_back(p);
    cached += size;
    used -= size;
  }
};

DeviceAllocator::DeviceAllocator(int device) : state_(std::make_shared<State>()), device_(device) {
  state_->device = device;
}

DeviceAllocator::~DeviceAllocator() = default;

size_t DeviceAllocator::size_class(size_t bytes) {
  bytes = std::max<size_t>(bytes, 512);
  constexpr size_t kMiB = size_t{1} << 20;
  if (bytes <= kMiB) {
    size_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }
  return (bytes + 2 * kMiB - 1) / (2 * kMiB) * (2 * kMiB);
}

Tensor DeviceAllocator::alloc_bytes(size_t bytes) {
  return alloc({static_cast<int64_t>(bytes)}, DType::kU8);
}

Tensor DeviceAllocator::alloc(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  const size_t size = size_class(bytes);
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->free.find(size);
    if (it != state_->free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      state_->cached -= size;
    }
    if (p != nullptr) state_->used += size;
  }
  if (p == nullptr) {
    cudaError_t err = cudaMalloc(&p, size);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      release_cached();
      err = cudaMalloc(&p, size);
    }
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      raise<ResourceExhausted>("CUDA device {} is out of memory allocating {} bytes ({} in use)",
                               device_, size, used_bytes());
    }
    TACHYON_CUDA_CHECK(err);
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->used += size;
  }
  std::shared_ptr<State> st = state_;
  std::shared_ptr<void> owner(p, [st, size](void* q) { st->give_back(q, size); });
  return Tensor::wrap(p, shape, dtype, std::move(owner), Device{DeviceType::kCUDA, device_});
}

void DeviceAllocator::release_cached() {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    blocks.swap(state_->free);
    state_->cached = 0;
  }
  for (auto& [size, list] : blocks)
    for (void* p : list) TACHYON_CUDA_CHECK(cudaFree(p));
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->cached;
}

size_t DeviceAllocator::used_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->used;
}

// ---- PinnedRing ----------------------------------------------------------------------

PinnedRing::PinnedRing(size_t capacity) : capacity_(capacity) {
  TACHYON_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&base_), capacity_, cudaHostAllocDefault));
}

PinnedRing::~PinnedRing() {
  for (Region& r : inflight_) {
    cudaEventSynchronize(r.done);
    cudaEventDestroy(r.done);
  }
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  cudaFreeHost(base_);
}

cudaEvent_t PinnedRing::take_event() {
  if (!spare_events_.empty()) {
    cudaEvent_t e = spare_events_.back();
    spare_events_.pop_back();
    return e;
  }
  cudaEvent_t e;
  TACHYON_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

char* PinnedRing::acquire(size_t bytes) {
  if (head_ + bytes > capacity_) head_ = 0;
  // Completed copies at the front free their space without waiting.
  while (!inflight_.empty() && cudaEventQuery(inflight_.front().done) == cudaSuccess) {
    spare_events_.push_back(inflight_.front().done);
    inflight_.pop_front();
  }
  cudaGetLastError();  // cudaEventQuery's "not ready" is not an error
  // The newest region overlapping [head, head + bytes): once it is done, so is every
  // older one (one stream, events complete in order).
  int64_t last = -1;
  for (size_t i = 0; i < inflight_.size(); ++i) {
    const Region& r = inflight_[i];
    if (r.begin < head_ + bytes && head_ < r.end) last = static_cast<int64_t>(i);
  }
  if (last >= 0) {
    TACHYON_CUDA_CHECK(cudaEventSynchronize(inflight_[static_cast<size_t>(last)].done));
    for (int64_t i = 0; i <= last; ++i) {
      spare_events_.push_back(inflight_.front().done);
      inflight_.pop_front();
    }
  }
  return base_ + head_;
}

void PinnedRing::commit(size_t bytes, cudaStream_t stream) {
  cudaEvent_t e = take_event();
  TACHYON_CUDA_CHECK(cudaEventRecord(e, stream));
  inflight_.push_back(Region{head_, head_ + bytes, e});
  head_ += bytes;
}

void PinnedRing::copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  const size_t piece_max = max_piece();
  for (size_t off = 0; off < bytes; off += piece_max) {
    const size_t n = std::min(piece_max, bytes - off);
    const size_t rounded = (n + 255) / 256 * 256;
    char* p = acquire(rounded);
    std::memcpy(p, static_cast<const char*>(src) + off, n);
    TACHYON_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(dst) + off, p, n, cudaMemcpyHostToDevice, stream));
    commit(rounded, stream);
  }
}

}  // namespace tachyon::cuda
