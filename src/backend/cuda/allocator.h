// Device and pinned host memory for the CUDA backend.
//
// DeviceAllocator: a caching allocator. Sizes are rounded to classes (powers of two up
// to 1 MiB, then multiples of 2 MiB); a freed block goes back to its class's free list
// and is handed out again without cudaMalloc, so steady-state steps allocate nothing
// from the driver. Everything runs on one stream, so a block freed while kernels that
// use it are still queued is only reused by work queued after them. Tensors share
// ownership of the allocator's state, so they may outlive the backend.
//
// PinnedRing: a ring of pinned host memory for host-to-device copies. Each staged
// region is guarded by an event; a region is reused only after its copy completed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace tachyon::cuda {

class DeviceAllocator {
 public:
  explicit DeviceAllocator(int device);
  ~DeviceAllocator();
  DeviceAllocator(const DeviceAllocator&) = delete;
  DeviceAllocator& operator=(const DeviceAllocator&) = delete;

  // An uninitialised device tensor. Throws ResourceExhausted when the device is full.
  Tensor alloc(const Shape& shape, DType dtype);
  // Raw bytes with the same lifetime rules (the tensor is a 1-d u8 view).
  Tensor alloc_bytes(size_t bytes);
  // Returns every cached (unused) block to the driver.
  void release_cached();
  // Bytes held in the free lists (unused but not returned to the driver).
  size_t cached_bytes() const;
  // Bytes of live allocations (rounded sizes).
  size_t used_bytes() const;

  static size_t size_class(size_t bytes);

 private:
  struct State;
  std::shared_ptr<State> state_;
  int device_;
};

class PinnedRing {
 public:
  explicit PinnedRing(size_t capacity);
  ~PinnedRing();
  PinnedRing(const PinnedRing&) = delete;
  PinnedRing& operator=(const PinnedRing&) = delete;

  // Copies `bytes` host bytes to device memory `dst` asynchronously on `stream`,
  // through pinned staging (in pieces of at most capacity / 4). `src` may be reused as
  // soon as the call returns.
  void copy_to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  size_t max_piece() const { return capacity_ / 4; }

 private:
  struct Region {
    size_t begin, end;
    cudaEvent_t done;
  };
  // Pinned space for `bytes` (<= max_piece), waiting for older copies out of it.
  char* acquire(size_t bytes);
  void commit(size_t bytes, cudaStream_t stream);
  cudaEvent_t take_event();

  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t head_ = 0;
  std::deque<Region> inflight_;
  std::vector<cudaEvent_t> spare_events_;
};

}  // namespace tachyon::cuda
