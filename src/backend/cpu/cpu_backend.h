// The CPU implementation of backend/ops.h. Methods are split over cpu_backend.cc
// (memory, embeddings, norms, dense and elementwise ops), attention.cc (rotary, KV
// cache, paged attention) and moe.cc (routing and experts).
#pragma once

#include <optional>
#include <vector>

#include "backend/cpu/gemm.h"
#include "backend/ops.h"

namespace tachyon {
class ThreadPool;
}

namespace tachyon::cpu {

class CpuBackend : public Backend {
 public:
  // pool: the thread pool the kernels use (the global pool when null). isa: the
  // instruction-set path of the products and attention (the active one when unset;
  // tests run every path the CPU has). Elementwise ops follow use_avx2(). kv_dtype: the
  // KV cache's element type, f32, bf16, f8_e4m3 or i8 (write_kv and attention read the type of
  // the cache they are given).
  explicit CpuBackend(ThreadPool* pool = nullptr, std::optional<CpuIsa> isa = std::nullopt,
                      DType kv_dtype = DType::kF32);

  Device device() const override { return Device{}; }
  const char* name() const override { return "cpu"; }
  DType kv_dtype() const override { return kv_dtype_; }

  // Linear weights are packed (backend/cpu/gemm.h) on the AVX-512 path; quantized
  // views (core/quant.h) are repacked (backend/cpu/qgemm.h) on every path, by
  // prepare_weight() too (MoE experts).
  Tensor prepare_weight(const Tensor& host) override;
  Tensor prepare_linear_weight(const Tensor& host) override;
  bool repacks_linear_weights() const override;

  Tensor alloc(const Shape& shape, DType dtype) override;
  Tensor upload(const void* data, const Shape& shape, DType dtype, Tensor reuse) override;
  void download(const Tensor& src, void* dst) override;
  void fill_zero(Tensor& t) override;

  void embedding(const Tensor& table, const Tensor& ids, int32_t id_offset, float scale,
                 bool accumulate, Tensor& out) override;
  void add_norm(Tensor& residual, const Tensor& delta1, const Tensor& delta2,
                const NormParams& norm, Tensor& out) override;
  void qk_norm(Tensor& qkv, const QkvLayout& layout, const NormParams& q_norm,
               const NormParams& k_norm) override;

  void linear(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out, int64_t col_offset,
              Activation act) override;
  void lora(const Tensor& x, const LoraStep& step, const LoraTarget& target, Tensor& out,
            int64_t col_offset) override;
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
  void write_kv(const Tensor& qkv, const QkvLayout& layout, const Tensor& slots,
                LayerKvCache& cache) override;
  void attention(const Tensor& qkv, const QkvLayout& layout, const LayerKvCache& cache,
                 const AttentionMeta& meta, const AttentionParams& params, Tensor& out) override;
  void copy_blocks(Tensor& cache, const std::vector<std::pair<int32_t, int32_t>>& pairs) override;
  void copy_blocks_between(const Tensor& from, Tensor& to,
                           const std::vector<std::pair<int32_t, int32_t>>& pairs) override;

  void moe_route(const Tensor& logits, int32_t top_k, bool renormalize, Tensor& ids,
                 Tensor& weights) override;
  void moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const std::vector<MoeExpertWeights>& experts, Activation act, bool accumulate,
                   Tensor& out) override;

  void argmax(const Tensor& logits, Tensor& ids) override;
  void log_softmax(Tensor& logits) override;

 private:
  // y[m, n] = x[m, k] · wᵀ (+ bias) for any weight form linear() takes (dense, packed,
  // quantized), with row strides ldx and ldy.
  void product(const float* x, int64_t m, int64_t k, int64_t ldx, const Tensor& w,
               const float* bias, float* y, int64_t ldy);

  ThreadPool& pool_;
  CpuIsa isa_;
  DType kv_dtype_;
  // MoE scratch, reused between calls (one forward at a time per backend).
  std::vector<float> moe_x_, moe_h_, moe_y_;
  std::vector<int32_t> moe_rows_;
  std::vector<float> moe_w_;
};

}  // namespace tachyon::cpu
