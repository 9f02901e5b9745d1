#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/lora_kernels.h"
#include "backend/cuda/swap_memory.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/settings.h"

namespace tachyon {

int cuda_device_count() {
  return cuda::device_count();
}

std::unique_ptr<Backend> make_cuda_backend(const CudaBackendOptions& options) {
  return std::make_unique<cuda::CudaBackend>(options);
}

namespace cuda {
namespace {

std::mutex& swap_memory_mu() {
  static std::mutex mu;
  return mu;
}
std::map<uintptr_t, size_t>& swap_memory() {
  static std::map<uintptr_t, size_t> m;  // start -> bytes
  return m;
}

constexpr size_t kRingBytes = size_t{64} << 20;
constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

std::string error_names(int code) {
  std::string s;
  auto add = [&](int bit, const char* what) {
    if ((code & bit) == 0) return;
    if (!s.empty()) s += ", ";
    s += what;
  };
  add(kErrEmbeddingId, "embedding id out of range");
  add(kErrKvSlot, "KV slot out of range");
  add(kErrBlockTable, "block table entry out of range");
  add(kErrExpertId, "expert id out of range");
  add(kErrGatherRow, "gathered row out of range");
  add(kErrLoraSlot, "LoRA slot or rank out of range");
  return s;
}

}  // namespace

void add_swap_memory(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(swap_memory_mu());
  swap_memory()[reinterpret_cast<uintptr_t>(p)] = bytes;
}

void remove_swap_memory(const void* p) {
  std::lock_guard<std::mutex> lock(swap_memory_mu());
  swap_memory().erase(reinterpret_cast<uintptr_t>(p));
}

bool is_swap_memory(const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(swap_memory_mu());
  const auto& m = swap_memory();
  auto it = m.upper_bound(a);
  if (it == m.begin()) return false;
  --it;
  return a >= it->first && a + bytes <= it->first + it->second;
}

CudaBackend::CudaBackend(const CudaBackendOptions& options)
    : batch_invariant_(options.batch_invariant), device_(options.device), dtype_(options.dtype) {
  if (dtype_ != DType::kBF16 && dtype_ != DType::kF16 && dtype_ != DType::kF32)
    raise<InvalidArgument>("the CUDA backend computes in bf16, f16 or f32, not {}",
                           dtype_name(dtype_));
  kv_dtype_ = options.kv_dtype.value_or(dtype_);
  if (kv_dtype_ != dtype_ && !((kv_dtype_ == DType::kF8E4M3 || kv_dtype_ == DType::kI8) &&
                               (dtype_ == DType::kBF16 || dtype_ == DType::kF16)))
    raise<InvalidArgument>(
        "KV cache dtype {} with compute dtype {}: the cache holds the compute dtype, or "
        "f8_e4m3 or int8 with bf16 or f16 compute",
        dtype_name(kv_dtype_), dtype_name(dtype_));
  const int n = device_count();
  if (device_ < 0 || device_ >= n)
    raise<Unavailable>("CUDA device {} is not available ({} visible)", device_, n);
  TACHYON_CUDA_CHECK(cudaSetDevice(device_));
  batch_invariant_ = batch_invariant_ || setting_env_bool("batch-invariant");
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms_, cudaDevAttrMultiProcessorCount, device_));
  // Programmatic dependent launch (launch.cuh) and the decode kernel's cluster merge
  // from compute capability 9.0 on.
  int major = 0;
  TACHYON_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
  set_pdl_enabled(major >= 9);
  set_decode_cluster_merge(major >= 9);
  TACHYON_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  alloc_ = std::make_unique<DeviceAllocator>(device_);
  ring_ = std::make_unique<PinnedRing>(kRingBytes);
  gemm_workspace_ = alloc_->alloc_bytes(kGemmWorkspaceBytes);
  gemm_ = std::make_unique<Gemm>(stream_, gemm_workspace_.raw(), kGemmWorkspaceBytes);
  merge_counters_ = alloc_->alloc({kMergeCounters}, DType::kI32);
  TACHYON_CUDA_CHECK(
      cudaMemsetAsync(merge_counters_.raw(), 0, kMergeCounters * sizeof(int32_t), stream_));
  // The error word lives in mapped pinned memory: kernels set it through err_dev_, and
  // the host reads it after a synchronisation without a copy.
  TACHYON_CUDA_CHECK(
      cudaHostAlloc(reinterpret_cast<void**>(&err_host_), sizeof(int), cudaHostAllocMapped));
  *err_host_ = 0;
  TACHYON_CUDA_CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&err_dev_), err_host_, 0));
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaBackend::~CudaBackend() {
  cudaStreamSynchronize(stream_);
  gemm_.reset();
  ring_.reset();
  bias_cache_.clear();
  if (pinned_ != nullptr) cudaFreeHost(pinned_);
  if (err_host_ != nullptr) cudaFreeHost(err_host_);
  for (const Fence& f : fences_) cudaEventDestroy(f.event);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  // Device tensors handed out may outlive the backend; they return their memory to the
  // allocator's shared state, which frees it when the last one goes.
  cudaStreamDestroy(stream_);
}

void CudaBackend::check_here(const Tensor& t, const char* what) const {
  TACHYON_CHECK(t && t.device() == device(), "{}: {} is not on {}", what,
                t ? t.str() + " on " + t.device().str() : std::string("none"), device().str());
}

void CudaBackend::check_act(const Tensor& t, const char* what) const {
  check_here(t, what);
  TACHYON_CHECK(t.dtype() == dtype_, "{}: {} is not in the activation dtype {}", what, t.str(),
                dtype_name(dtype_));
}

void CudaBackend::raise_device_errors() {
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // The stream is idle: no kernel of this backend writes the word now.
  raise_error_word();
}

void CudaBackend::raise_error_word() {
  volatile int* word = err_host_;
  const int code = *word;
  if (code == 0) return;
  *word = 0;
  raise<Internal>("CUDA kernel saw bad input: {}", error_names(code));
}

void CudaBackend::synchronize() {
  TACHYON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  raise_device_errors();
}

Backend::MemoryInfo CudaBackend::memory_info() const {
  size_t free = 0, total = 0;
  TACHYON_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return MemoryInfo{static_cast<int64_t>(free + alloc_->cached_bytes()),
                    static_cast<int64_t>(total)};
}

// ---- memory ----------------------------------------------------------------------

Tensor CudaBackend::alloc(const Shape& shape, DType dtype) {
  return alloc_->alloc(shape, dtype);
}

Tensor CudaBackend::alloc_swap(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* host = nullptr;
  // Pinned and mapped: the copy kernels read and write it directly over the bus.
  const cudaError_t e =
      cudaHostAlloc(&host, std::max<size_t>(bytes, 1), cudaHostAllocMapped | cudaHostAllocPortable);
  if (e != cudaSuccess) {
    cudaGetLastError();
    raise<ResourceExhausted>("swap space: cannot pin {} bytes of host memory ({})", bytes,
                             cudaGetErrorString(e));
  }
  std::shared_ptr<void> owner(host, [](void* p) {
    remove_swap_memory(p);
    cudaFreeHost(p);
  });
  void* dev = nullptr;
  TACHYON_CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
  TACHYON_CHECK(dev == host, "swap space: mapped host memory has a different device address");
  add_swap_memory(host, std::max<size_t>(bytes, 1));
  return Tensor::wrap(host, shape, dtype, std::move(owner));
}

Tensor CudaBackend::upload(const void* data, const Shape& shape, DType dtype, Tensor reuse) {
  const int64_t n = shape_numel(shape);
  Tensor dst;
  if (reuse && reuse.device() == device() && reuse.dtype() == dtype && reuse.numel() >= n)
    dst = reuse;
  else
    dst = alloc_->alloc({std::max<int64_t>(n, 1)}, dtype);
  wrote(dst.raw(), static_cast<size_t>(n) * dtype_size(dtype));
  if (n > 0)
    ring_->copy_to_device(dst.raw(), data, static_cast<size_t>(n) * dtype_size(dtype), stream_);
  return Tensor::wrap(dst.raw(), shape, dtype, dst.owner(), device());
}

void CudaBackend::download(const Tensor& src, void* dst) {
  const size_t bytes = src.nbytes();
  if (src.device().is_cpu()) {
    std::memcpy(dst, src.raw(), bytes);
    return;
  }
  check_here(src, "download");
  if (bytes > pinned_bytes_) {
    if (pinned_ != nullptr) TACHYON_CUDA_CHECK(cudaFreeHost(pinned_));
    pinned_ = nullptr;
    pinned_bytes_ = std::max(bytes, pinned_bytes_ * 2);
    TACHYON_CUDA_CHECK(
        cudaHostAlloc(reinterpret_cast<void**>(&pinned_), pinned_bytes_, cudaHostAllocDefault));
  }
  if (bytes > 0)
    TACHYON_CUDA_CHECK(cudaMemcpyAsync(pinned_, src.raw(), bytes, cudaMemcpyDeviceToHost, stream_));
  raise_device_errors();  // synchronises
  if (bytes > 0) std::memcpy(dst, pinned_, bytes);
}

Tensor CudaBackend::alloc_host(const Shape& shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  void* host = nullptr;
  const cudaError_t e = cudaHostAlloc(&host, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
  if (e != cudaSuccess) {
    cudaGetLastError();
    raise<ResourceExhausted>("cannot pin {} bytes of host memory ({})", bytes,
                             cudaGetErrorString(e));
  }
  std::shared_ptr<void> owner(host, [](void* p) { cudaFreeHost(p); });
  return Tensor::wrap(host, shape, dtype, std::move(owner));
}

void CudaBackend::download_async(const Tensor& src, void* dst) {
  check_here(src, "download_async");
  if (src.nbytes() > 0)
    TACHYON_CUDA_CHECK(
        cudaMemcpyAsync(dst, src.raw(), src.nbytes(), cudaMemcpyDeviceToHost, stream_));
}

uint64_t CudaBackend::fence() {
  cudaEvent_t e = nullptr;
  if (spare_events_.empty()) {
    TACHYON_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } else {
    e = spare_events_.back();
    spare_events_.pop_back();
  }
  TACHYON_CUDA_CHECK(cudaEventRecord(e, stream_));
  fences_.push_back(Fence{next_fence_, e});
  return next_fence_++;
}

void CudaBackend::wait_fence(uint64_t f) {
  while (!fences_.empty() && fences_.front().id <= f) {
    const Fence done = fences_.front();
    fences_.pop_front();
    spare_events_.push_back(done.event);
    TACHYON_CUDA_CHECK(cudaEventSynchronize(done.event));
  }
  // Kernels queued after the fence may still run, and may set the word too: a fault
  // reported a step early is still the device's fault.
  raise_error_word();
}

Tensor CudaBackend::to_host(const Tensor& t) {
  if (t.device().is_cpu()) return t;
  Tensor h = Tensor::empty(t.shape(), t.dtype());
  download(t, h.raw());
  return h;
}

void CudaBackend::fill_zero(Tensor& t) {
  wrote(t);
  check_here(t, "fill_zero");
  if (t.nbytes() > 0) TACHYON_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, t.nbytes(), stream_));
}

void* CudaBackend::scratch(Tensor& slot, size_t bytes) {
  if (!slot || slot.nbytes() < bytes) {
    slot = alloc_->alloc_bytes(std::max(bytes, slot ? slot.nbytes() * 2 : size_t{0}));
    ++*scratch_epoch_;
  }
  return slot.raw();
}

// ---- weights ---------------------------------------------------------------------

Tensor CudaBackend::prepare_weight(const Tensor& host) {
  if (!host) return host;
  // A quantized matrix is only read by products (MoE experts come this way).
  if (quantized(host) != nullptr || quant_weight(host) != nullptr)
    return prepare_linear_weight(host);
  TACHYON_CHECK(is_floating(host.dtype()) && host.dtype() != DType::kF64,
                "prepare_weight: {} is not an f32/f16/bf16 weight", host.str());
  const DType target = host.ndim() >= 2 ? dtype_ : DType::kF32;
  if (host.device() == device()) {
    if (host.dtype() == target) return host;
    Tensor out = alloc_->alloc(host.shape(), target);
    launch_convert(host.raw(), host.dtype(), out.raw(), target, host.numel(), stream_);
    return out;
  }
  TACHYON_CHECK(host.device().is_cpu(), "prepare_weight: {} on {}", host.str(),
                host.device().str());
  Tensor out = alloc_->alloc(host.shape(), target);
  const size_t total = host.nbytes();
  if (host.dtype() == target) {
    ring_->copy_to_device(out.raw(), host.raw(), total, stream_);
    return out;
  }
  // Convert on the device, a piece at a time: raw bytes up through the pinned ring
  // into a device staging buffer, then a conversion kernel into place. One stream
  // orders each piece's copy after the previous piece's conversion.
  const size_t src_elem = dtype_size(host.dtype()), dst_elem = dtype_size(target);
  const size_t piece_elems = ring_->max_piece() / src_elem;
  Tensor staging = alloc_->alloc_bytes(piece_elems * src_elem);
  const auto* src = static_cast<const char*>(host.raw());
  auto* dst = static_cast<char*>(out.raw());
  const size_t n = static_cast<size_t>(host.numel());
  for (size_t i = 0; i < n; i += piece_elems) {
    const size_t m = std::min(piece_elems, n - i);
    ring_->copy_to_device(staging.raw(), src + i * src_elem, m * src_elem, stream_);
    launch_convert(staging.raw(), host.dtype(), dst + i * dst_elem, target, static_cast<int64_t>(m),
                   stream_);
  }
  return out;
}

const void* CudaBackend::bias_for(const Tensor& bias, DType y_type) {
  if (!bias) return nullptr;
  check_here(bias, "linear bias");
  TACHYON_CHECK(bias.dtype() == DType::kF32, "linear bias {} must be f32", bias.str());
  if (y_type == DType::kF32) return bias.raw();
  auto it = bias_cache_.find(bias.raw());
  if (it != bias_cache_.end()) {
    auto owner = it->second.owner.lock();
    if (owner && owner.get() == bias.owner().get() && it->second.converted.dtype() == y_type &&
        it->second.converted.numel() == bias.numel())
      return it->second.converted.raw();
    bias_cache_.erase(it);
  }
  Tensor conv = alloc_->alloc(bias.shape(), y_type);
  launch_convert(bias.raw(), DType::kF32, conv.raw(), y_type, bias.numel(), stream_);
  bias_cache_[bias.raw()] = BiasEntry{bias.owner(), conv};
  return conv.raw();
}

// ---- sampling helpers --------------------------------------------------------------

void CudaBackend::argmax(const Tensor& logits, Tensor& ids) {
  check_here(logits, "argmax logits");
  check_here(ids, "argmax ids");
  TACHYON_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "argmax logits {}",
                logits.str());
  TACHYON_CHECK(ids.dtype() == DType::kI32 && ids.numel() == logits.dim(0), "argmax ids {}",
                ids.str());
  launch_argmax(logits.data<float>(), logits.dim(0), logits.dim(1), ids.data<int32_t>(), stream_);
}

void CudaBackend::log_softmax(Tensor& logits) {
  wrote(logits);
  check_here(logits, "log_softmax");
  TACHYON_CHECK(logits.ndim() == 2 && logits.dtype() == DType::kF32, "log_softmax {}",
                logits.str());
  launch_log_softmax(logits.data<float>(), logits.dim(0), logits.dim(1), stream_);
}

}  // namespace cuda
}  // namespace tachyon
