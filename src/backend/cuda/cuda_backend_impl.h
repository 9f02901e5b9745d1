// The CudaBackend class (internal to backend/cuda). Its methods are grouped by topic:
// cuda_backend.cc (device, memory, weights, sampling helpers), cuda_ops.cc (embedding,
// norms, elementwise ops), cuda_linear.cc (products and the layer-level products),
// cuda_attention.cc (rotary, KV cache, attention), cuda_moe.cc (mixture of experts) and
// cuda_sampling.cc (sampling on the device).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <deque>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "backend/cuda/allocator.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/quant_weight.h"

namespace tachyon::cuda {

// GEMMs of at most this many rows go to the matrix-vector kernel (gemv.cu, which takes
// up to kGemvMaxRows): measured on the H200 at Llama-3-8B shapes it beats cuBLASLt at
// m = 1 (by 2-20%) and loses at m = 4.
constexpr int64_t kGemvAutoRows = 1;
// Counters of the kernels whose last block merges split partials (one per (sequence,
// KV head) of decode attention; one per row of the split greedy sampling scan), zero
// between launches. Kernels on the stream run one after another past their dependency
// wait, so they share them.
constexpr int64_t kMergeCounters = 1 << 16;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const CudaBackendOptions& options);
  ~CudaBackend() override;

  Device device() const override { return Device{DeviceType::kCUDA, device_}; }
  const char* name() const override { return "cuda"; }

  DType activation_dtype() const override { return dtype_; }
  DType kv_dtype() const override { return kv_dtype_; }
  bool kv_fp8() const { return kv_dtype_ == DType::kF8E4M3; }
  bool kv_i8() const { return kv_dtype_ == DType::kI8; }
  Tensor prepare_weight(const Tensor& host) override;
  // A quantized view (core/quant.h) uploaded once into the quantized kernels' layout
  // (cuda_quant.cc); a dense matrix as prepare_weight.
  Tensor prepare_linear_weight(const Tensor& host) override;
  Tensor to_host(const Tensor& t) override;
  void synchronize() override;
  MemoryInfo memory_info() const override;
  std::unique_ptr<DeviceGraph> record(const std::function<void()>& fn) override;

  Tensor alloc(const Shape& shape, DType dtype) override;
  Tensor upload(const void* data, const Shape& shape, DType dtype, Tensor reuse) override;
  void download(const Tensor& src, void* dst) override;
  void fill_zero(Tensor& t) override;
  Tensor alloc_host(const Shape& shape, DType dtype) override;
  void download_async(const Tensor& src, void* dst) override;
  uint64_t fence() override;
  void wait_fence(uint64_t f) override;

  void embedding(const Tensor& table, const Tensor& ids, int32_t id_offset, float scale,
                 bool accumulate, Tensor& out) override;
  void add_norm(Tensor& residual, const Tensor& delta1, const Tensor& delta2,
                const NormParams& norm, Tensor& out) override;
  void qk_norm(Tensor& qkv, const QkvLayout& layout, const NormParams& q_norm,
               const NormParams& k_norm) override;

  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, int64_t col_offset,
              Activation act) override;
  // The layer-level products (backend/ops.h), fused where the kernels allow:
  // - attention_input on the wgmma GEMM with the rotary and the cache write in its
  //   epilogue warps, from kEpilogueRows rows, without bias, clamp, per-head norms or
  //   per-query scales; a folded norm rides on it (its rows scaled by 1 / rms).
  // - mlp_input on the wgmma GEMM with the gate in its epilogue from kGatedMinRows rows,
  //   without bias (Hopper); a folded norm rides on it from kGatedHandoffRows rows.
  // - linear_residual: for a few rows the matrix-vector kernel adds into the residual;
  //   from kEpilogueRows rows, for products at least kDeepK deep without bias, the wgmma
  //   GEMM's epilogue warps add the rounded product (and keep the new rows' sums of
  //   squares, one per 256 columns, which spare the folded norm of the product that
  //   reads them next its pass over the rows); otherwise cuBLASLt's C input. The
  //   batch-invariant kernel keeps its product and a separate add.
  // The rest runs the ops' default forms.
  void attention_input(const Tensor& x, const NormParams* norm, const AttentionInput& p,
                       const Tensor& cos_sin, const Tensor& logn, const Tensor& slots,
                       LayerKvCache& cache, Tensor& qkv, const LoraStep* lora) override;
  void mlp_input(const Tensor& x, const NormParams* norm, const MlpInput& p, Tensor& out,
                 const LoraStep* lora) override;
  void linear_residual(const Tensor& x, const LinearWeights& w, Tensor& residual,
                       const LoraStep* lora) override;
  void lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
            int64_t col_offset) override;
  // RMS norms without bias folded into the 16-bit and f32 weights that read them (with
  // the down projection's add on the wgmma GEMM, the 8 x 1024 prefill step of a
  // Llama-3-8B shape took 182.0 ms against 184.5 unfolded).
  void prepare_input_norm(NormParams& norm, std::span<Tensor* const> readers) override;
  static constexpr int64_t kGatedMinRows = 512;
  // From these rows on, with its epilogue on warps of its own (the hand-off): measured
  // 3.5 ms faster in the 8 x 1024 prefill step, 0.6-1.2 ms slower in the 1 x 1024 one.
  static constexpr int64_t kGatedHandoffRows = 2048;
  // The residual add's and the rotary's epilogues exist only on the hand-off warps: they
  // apply from the same rows.
  static constexpr int64_t kEpilogueRows = kGatedHandoffRows;
  void gated_activation(const Tensor& in, Activation act, Tensor& out) override;
  void activation(Tensor& x, Activation act) override;
  void scale_add(const Tensor& a, float scale, const Tensor& b, Tensor& out) override;
  void softcap(Tensor& x, float cap) override;
  void clamp(Tensor& x, float limit) override;
  void gather_rows(const Tensor& src, const Tensor& rows, Tensor& out) override;
  void scatter_rows(const Tensor& src, const Tensor& rows, Tensor& out) override;
  void scatter_ids(const Tensor& src, const Tensor& pairs, Tensor& ids) override;
  void add_sigmoid_gated(const Tensor& src, const Tensor& gate_logit, Tensor& out) override;

  void rotary(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin, RotaryStyle style,
              int32_t rotary_dim) override;
  void scale_queries(Tensor& qkv, const QkvLayout& layout, const Tensor& factors) override;
  void write_kv(const Tensor& qkv, const QkvLayout& layout, const Tensor& slots,
                LayerKvCache& cache) override;
  void rotary_write_kv(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                       RotaryStyle style, int32_t rotary_dim, const Tensor& slots,
                       LayerKvCache& cache) override;
  void attention(const Tensor& qkv, const QkvLayout& layout, const LayerKvCache& cache,
                 const AttentionMeta& meta, const AttentionParams& params, Tensor& out) override;
  void copy_blocks(Tensor& cache, const std::vector<std::pair<int32_t, int32_t>>& pairs) override;
  Tensor alloc_swap(const Shape& shape, DType dtype) override;
  void copy_blocks_between(const Tensor& from, Tensor& to,
                           const std::vector<std::pair<int32_t, int32_t>>& pairs) override;

  void moe_route(const Tensor& logits, int32_t top_k, bool renormalize, Tensor& ids,
                 Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const std::vector<MoeExpertWeights>& experts, Activation act, bool accumulate,
                   Tensor& out) override;

  void argmax(const Tensor& logits, Tensor& ids) override;
  void log_softmax(Tensor& logits) override;
  bool supports_sampling() const override { return true; }
  void sample(Tensor& logits, const SamplingBatch& batch, Tensor& ids, Tensor& logprobs) override;
  // The uniform draws of the rows' keys, computed on the device (for tests).
  std::vector<double> sample_uniforms(const std::vector<RowSampling>& rows);

  // Which attention kernel runs. kAuto: for prefill-sized steps (a sequence with at
  // least 16 queries) the flash kernel (attention_flash.cu: Hopper's wgmma form,
  // attention_flash_wgmma.cu, on sm_90 at head_dim 64 and 128, mma.sync elsewhere) where
  // it applies (bf16/f16, its head dims, no softcap/ALiBi); the decode kernel
  // (attention_decode.cu) for steps of one query per sequence where it applies; a mixed
  // step (sequences of one query beside prefill chunks) runs the decode kernel on the
  // former and the flash kernel on the latter (kDecodeAndFlash). Everything else runs
  // the CUDA-core split-K kernel (kSimple, attention.cu), the one that takes every case:
  // f32, softcap, ALiBi, head dims the tensor-core kernels lack, a bidirectional prefix
  // and batch-invariant mode. Tests force a kernel with set_attention_kernel (one that
  // does not apply falls back to the simple one).
  enum class AttentionKernel { kAuto, kSimple, kDecode, kFlash, kDecodeAndFlash };
  void set_attention_kernel(AttentionKernel k) { attention_kernel_ = k; }
  // The kernel the last attention() call ran (for tests and benchmarks).
  AttentionKernel last_attention_kernel() const { return last_attention_kernel_; }

  // The depth from which linear_residual runs on the wgmma GEMM.
  static constexpr int64_t kDeepK = 8192;
  // Which kernel the last product (linear()) ran on (for tests and benchmarks).
  // kQuantGemv / kQuantDequant: a quantized weight's matrix-vector kernel, or its
  // dequantized pieces on the dense GEMM.
  enum class LinearPath { kCublas, kGemv, kInvariant, kWgmma, kQuantGemv, kQuantDequant };
  LinearPath last_linear_path() const { return last_linear_path_; }

  cudaStream_t stream() const { return stream_; }
  bool batch_invariant() const { return batch_invariant_; }
  DeviceAllocator& allocator() { return *alloc_; }
  int num_sms() const { return num_sms_; }

 private:
  // Checks that t lives on this device (and, when dtype is given, has it).
  void check_here(const Tensor& t, const char* what) const;
  void check_act(const Tensor& t, const char* what) const;
  void check_rotary(const Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                    RotaryStyle style, int32_t rotary_dim, const char* what) const;
  void check_kv_write(const Tensor& slots, int64_t tokens, const QkvLayout& layout,
                      const LayerKvCache& cache, const char* what) const;
  // Synchronises the stream, then raise_error_word().
  void raise_device_errors();
  // Raises Internal (and clears the word) when a kernel reported bad indices.
  void raise_error_word();
  // The bias in the GEMM output dtype (converted once and cached for 16-bit outputs).
  const void* bias_for(const Tensor& bias, DType y_type);
  // A scratch buffer of at least `bytes`, kept and grown between calls.
  void* scratch(Tensor& slot, size_t bytes);
  // The flash kernel's work list for the step (null: the kernel's dense grid).
  const int32_t* flash_items(const AttentionArgs& a, const AttentionMeta& meta, int32_t& n);
  // The decode kernel with its plan, scratch and merge counters.
  void run_decode(const AttentionArgs& a);
  // A mixed step through the decode and flash kernels (flash from staged blocks of an
  // fp8 cache); false when it does not apply.
  bool attention_mixed(const AttentionArgs& a, const AttentionMeta& meta);
  // An fp8 cache's step: the decode kernel reads it; the other kernels get the blocks
  // of the step's sequences (those of more than one query when multi_only) staged as
  // 16-bit elements: `a` rewritten to read the staging cache.
  void stage_fp8_cache(AttentionArgs& a, const AttentionMeta& meta, bool multi_only);
  // An int8 cache's step: every sequence's blocks staged as 16-bit elements (the
  // attention kernels read 16-bit caches); `a` rewritten to read the staging cache.
  void stage_i8_cache(AttentionArgs& a);
  // linear()'s and linear_residual()'s argument checks.
  void check_linear(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& out,
                    int64_t col_offset);
  // accumulate: y += the product (the matrix-vector kernel or cuBLASLt's C input).
  void gemm(const Tensor& x, int64_t x_row0, int64_t m, const Tensor& w, void* y, DType y_type,
            int64_t ldy, const Tensor& bias, Activation act, bool accumulate = false);
  // gemm() of a quantized weight (cuda_quant.cc).
  void quant_product(const Tensor& x, int64_t x_row0, int64_t m, const QuantWeight& w, void* y,
                     DType y_type, int64_t ldy, const Tensor& bias, Activation act,
                     bool accumulate);
  // Its scratch: x's gathered columns (act-order) and the dequantized rows.
  Tensor quant_x_, quant_w_;

  // Bumped whenever backend-owned scratch a recorded graph may use is reallocated.
  std::shared_ptr<uint64_t> scratch_epoch_ = std::make_shared<uint64_t>(0);
  LinearPath last_linear_path_ = LinearPath::kCublas;
  // The scales 1 / sqrt(mean(x_row²) + eps) of x's rows in row_scale_, for a product
  // that applies a folded norm: from the squares linear_residual kept where they are
  // x's, else one pass over x.
  const float* row_scales(const Tensor& x, float eps);
  // linear_residual's product and add, without the adapters.
  void linear_residual_product(const Tensor& x, const LinearWeights& w, Tensor& residual);
  // Whether a product may apply the norm itself (folded, its eps usable).
  static bool rides(const NormParams& norm) {
    return norm.folded && norm.eps >= 0.f && std::isfinite(norm.eps);
  }
  Tensor row_scale_;
  // What the last linear_residual that kept squares kept: the rows (address, count,
  // width) and the parts in row_squares_. Every op that writes device memory forgets
  // them where it overlaps (wrote()).
  struct KeptSquares {
    const void* data = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int parts = 0;
  };
  KeptSquares kept_squares_;
  Tensor row_squares_;
  void wrote(const Tensor& t) { wrote(t.raw(), t.nbytes()); }
  void wrote(const void* p, size_t bytes);
  Tensor workspace(Workspace slot, int64_t rows, int64_t cols, DType dtype) override;
  Tensor ws_[static_cast<size_t>(Workspace::kCount)];
  Tensor merge_counters_;
  AttentionKernel attention_kernel_ = AttentionKernel::kAuto;
  bool batch_invariant_ = false;
  AttentionKernel last_attention_kernel_ = AttentionKernel::kAuto;
  // The flash work list of the last step, kept across its layers: what it was built
  // from (q_tile, multi-query-only, sequences, then query_start and context_lens) and its
  // device copy.
  std::vector<int32_t> flash_key_;
  std::vector<int32_t> flash_host_items_;
  Tensor flash_items_;
  int32_t flash_num_items_ = 0;
  int device_ = 0;
  DType dtype_ = DType::kBF16;
  DType kv_dtype_ = DType::kBF16;
  int num_sms_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<DeviceAllocator> alloc_;
  std::unique_ptr<PinnedRing> ring_;
  Tensor gemm_workspace_;
  std::unique_ptr<Gemm> gemm_;
  int* err_host_ = nullptr;  // the error word: mapped pinned memory (host address)
  int* err_dev_ = nullptr;   // its device address, for the kernels
  // Fences (fence()): events recorded on the stream, oldest first, and spare events.
  struct Fence {
    uint64_t id;
    cudaEvent_t event;
  };
  std::deque<Fence> fences_;
  std::vector<cudaEvent_t> spare_events_;
  uint64_t next_fence_ = 1;
  char* pinned_ = nullptr;  // download staging
  size_t pinned_bytes_ = 0;

  struct BiasEntry {
    std::weak_ptr<void> owner;
    Tensor converted;
  };
  std::unordered_map<const void*, BiasEntry> bias_cache_;

  Tensor attn_scratch_;
  // The fp8 cache's staging (stage_fp8_cache): K and V blocks, tables, work items (and
  // the host copy of the items last uploaded).
  Tensor fp8_stage_k_, fp8_stage_v_, fp8_stage_tables_, fp8_stage_items_;
  // The int8 cache's staging (stage_i8_cache).
  Tensor i8_stage_k_, i8_stage_v_, i8_stage_tables_;
  std::vector<int32_t> fp8_stage_host_, fp8_stage_uploaded_;
  // Device sampling (cuda_sampling.cc): per-row parameters and adjustments.
  Tensor sample_meta_, sample_adj_, sample_start_, sample_partial_, sample_masks_, sample_mask_of_;
  // The LoRA shrink's partial products (lora()).
  Tensor lora_scratch_;
  // MoE scratch.
  Tensor moe_meta_, moe_x_, moe_h_, moe_a_, moe_y_;
  std::vector<int32_t> moe_ids_host_, moe_sorted_token_, moe_row_of_, moe_offsets_;
};

// Helpers of the op files.

// kernels.h mirrors the op enums value for value.
static_assert(static_cast<int>(KAct::kQuickGelu) == static_cast<int>(Activation::kQuickGelu) &&
              static_cast<int>(KAct::kRelu) == static_cast<int>(Activation::kRelu) &&
              static_cast<int>(KAct::kGeluTanh) == static_cast<int>(Activation::kGeluTanh) &&
              static_cast<int>(KAct::kGelu) == static_cast<int>(Activation::kGelu) &&
              static_cast<int>(KAct::kSilu) == static_cast<int>(Activation::kSilu));
static_assert(static_cast<int>(KNorm::kLayerNorm) == static_cast<int>(NormType::kLayerNorm));
static_assert(static_cast<int>(KRotary::kInterleaved) ==
                  static_cast<int>(RotaryStyle::kInterleaved) &&
              static_cast<int>(KRotary::kHalf) == static_cast<int>(RotaryStyle::kHalf));

inline KAct kact(Activation a) {
  return static_cast<KAct>(static_cast<int>(a));
}

inline void check_2d(const Tensor& t, const char* what) {
  TACHYON_CHECK(t && t.ndim() == 2, "{} must be 2-d, got {}", what,
                t ? t.str() : std::string("none"));
}

inline NormArgs norm_args(const NormParams& p, int64_t d) {
  TACHYON_CHECK(p.weight && p.weight.dtype() == DType::kF32 && p.weight.numel() == d &&
                    !p.weight.device().is_cpu(),
                "norm weight {} for dim {} (f32 on the device)",
                p.weight ? p.weight.str() : std::string("none"), d);
  TACHYON_CHECK(!p.bias || (p.bias.dtype() == DType::kF32 && p.bias.numel() == d &&
                            !p.bias.device().is_cpu()),
                "norm bias {}", p.bias.str());
  NormArgs a;
  a.weight = p.weight.data<float>();
  a.bias = p.bias ? p.bias.data<float>() : nullptr;
  a.type = static_cast<KNorm>(static_cast<int>(p.type));
  a.eps = p.eps;
  a.weight_offset = p.weight_offset;
  return a;
}

}  // namespace tachyon::cuda
