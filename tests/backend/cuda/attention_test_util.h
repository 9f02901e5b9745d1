// The fixture of the paged-attention tests on the GPU (attention*_test.cc): a case of
// sequences (cached tokens, tokens of the step), run through each kernel that applies
// and the automatic choice, against the CPU backend.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <string>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/ops.h"
#include "core/error.h"

namespace tachyon::cuda_test {

struct SeqSpec {
  int32_t cached;      // tokens already in the cache
  int32_t q_len;       // tokens of this step
  int32_t prefix = 0;  // a bidirectional prefix (AttentionMeta::prefix_lens)
  bool tree = false;   // a random tree mask over the step's tokens (AttentionMeta::tree_mask)
};

struct AttnCase {
  std::string name;
  int32_t heads, kv_heads, head_dim, block_size;
  std::vector<SeqSpec> seqs;
  int32_t window = 0;
  float softcap = 0.f;
  bool alibi = false;
  bool alibi_bf16 = false;
  // Block-table entries of blocks wholly before a sequence's sliding window are -1 (an
  // engine may have freed them): no kernel may read them.
  bool unset_before_window = false;
  // No host copies of the lengths in the metadata (the flash kernel then runs its dense
  // grid instead of a work list).
  bool no_host_lens = false;
  // Fill the whole cache with random values directly (instead of writing the cached
  // tokens through write_kv): fast enough for contexts of many thousand tokens.
  bool direct_cache = false;
  // > 0: the max_context_len hint (a bucketed bound, as in CUDA-graph replay).
  int32_t ctx_hint = 0;
};

using Kernel = cuda::CudaBackend::AttentionKernel;

inline const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kSimple:
      return "simple";
    case Kernel::kDecode:
      return "decode";
    case Kernel::kFlash:
      return "flash";
    case Kernel::kDecodeAndFlash:
      return "decode+flash";
    default:
      return "auto";
  }
}

// Uniform values in [-1.7, 1.7) (about unit variance) from a counter hash: quick for
// caches of a hundred million elements.
inline Tensor fast_uniform(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t z = seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    p[i] = (static_cast<float>(z >> 40) * (1.f / 16777216.f) - 0.5f) * 3.4f;
  }
  return t;
}

class CudaAttentionTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    TACHYON_REQUIRE_GPU();
    dt_ = GetParam();
    gpu_ = i8_ ? make_gpu_kv(dt_, DType::kI8) : make_gpu(dt_, fp8_);
    cpu_ = make_cpu_backend(i8_ ? DType::kI8 : DType::kF32);
    rng_.seed(99);
  }

  // Runs the case through every kernel that applies (ran() says which did), then once
  // with the automatic choice (auto_ran_).
  void run(const AttnCase& c) {
    const QkvLayout layout{c.heads, c.kv_heads, c.head_dim};
    const int32_t bs = c.block_size;
    const int32_t S = static_cast<int32_t>(c.seqs.size());
    // Blocks, handed out in shuffled order.
    int32_t total_blocks = 2, max_blocks = 0, max_q = 0, max_ctx = 0;
    for (const SeqSpec& s : c.seqs) {
      const int32_t nb = (s.cached + s.q_len + bs - 1) / bs;
      total_blocks += nb;
      max_blocks = std::max(max_blocks, nb);
      max_q = std::max(max_q, s.q_len);
      max_ctx = std::max(max_ctx, s.cached + s.q_len);
    }
    std::vector<int32_t> pool(static_cast<size_t>(total_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng_);
    std::vector<int32_t> tables(static_cast<size_t>(S) * max_blocks, -1);
    for (int32_t s = 0, next = 0; s < S; ++s) {
      const int32_t nb = (c.seqs[s].cached + c.seqs[s].q_len + bs - 1) / bs;
      for (int32_t i = 0; i < nb; ++i) tables[s * max_blocks + i] = pool[next++];
      if (c.unset_before_window && c.window > 0) {
        const int32_t first_key = std::max(0, c.seqs[s].cached - c.window + 1);
        for (int32_t i = 0; (i + 1) * bs <= first_key; ++i) tables[s * max_blocks + i] = -1;
      }
    }
    auto slot_of = [&](int32_t s, int32_t idx) {
      return tables[s * max_blocks + idx / bs] * bs + idx % bs;
    };
    std::vector<int32_t> pre_slots, step_slots, qstart = {0}, ctx;
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t i = 0; i < c.seqs[s].cached; ++i) pre_slots.push_back(slot_of(s, i));
      for (int32_t i = 0; i < c.seqs[s].q_len; ++i)
        step_slots.push_back(slot_of(s, c.seqs[s].cached + i));
      qstart.push_back(qstart.back() + c.seqs[s].q_len);
      ctx.push_back(c.seqs[s].cached + c.seqs[s].q_len);
    }
    const Shape cache_shape = {total_blocks, c.kv_heads, bs, c.head_dim};
    LayerKvCache ref, g;
    // With an fp8 cache the reference holds the e4m3-rounded keys and values.
    auto kv_ref = [&](const Tensor& t) { return fp8_ ? e4m3_rounded(t) : t; };
    if (i8_) {
      // Both caches in int8, each written by its backend's write_kv: the CPU's reference
      // attends over its dequantized rows.
      ASSERT_FALSE(c.direct_cache) << "int8 cases write the cache through write_kv";
      const Shape s8 = kv_cache_shape(DType::kI8, total_blocks, c.kv_heads, bs, c.head_dim);
      g = {gpu_->alloc(s8, DType::kI8), gpu_->alloc(s8, DType::kI8)};
      gpu_->fill_zero(g.k);
      gpu_->fill_zero(g.v);
      ref = {Tensor::zeros(s8, DType::kI8), Tensor::zeros(s8, DType::kI8)};
    } else if (fp8_) {
      ASSERT_FALSE(c.direct_cache) << "fp8 cases write the cache through write_kv";
      g = {gpu_->alloc(cache_shape, DType::kF8E4M3), gpu_->alloc(cache_shape, DType::kF8E4M3)};
      gpu_->fill_zero(g.k);
      gpu_->fill_zero(g.v);
      Tensor zero = Tensor::zeros(cache_shape, DType::kF32);
      ref = {zero.clone(), zero.clone()};
    } else if (c.direct_cache) {
      ref = {rounded(fast_uniform(cache_shape, rng_()), dt_),
             rounded(fast_uniform(cache_shape, rng_()), dt_)};
      g = {to_gpu(*gpu_, ref.k, dt_), to_gpu(*gpu_, ref.v, dt_)};
    } else {
      Tensor zero = Tensor::zeros(cache_shape, DType::kF32);
      ref = {zero.clone(), zero.clone()};
      g = {to_gpu(*gpu_, zero, dt_), to_gpu(*gpu_, zero, dt_)};
    }
    auto host_i32 = [](const std::vector<int32_t>& v) {
      Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::kI32);
      std::copy(v.begin(), v.end(), t.data<int32_t>());
      return t;
    };
    if (!pre_slots.empty() && !c.direct_cache) {
      Tensor pre =
          rounded(randn({static_cast<int64_t>(pre_slots.size()), layout.row_cols()}, rng_), dt_);
      cpu_->write_kv(kv_ref(pre), layout, host_i32(pre_slots), ref);
      gpu_->write_kv(to_gpu(*gpu_, pre, dt_), layout, to_gpu_i32(*gpu_, pre_slots), g);
    }
    const int64_t T = qstart.back();
    Tensor qkv = rounded(randn({T, layout.row_cols()}, rng_), dt_);
    Tensor qkv_g = to_gpu(*gpu_, qkv, dt_);
    cpu_->write_kv(kv_ref(qkv), layout, host_i32(step_slots), ref);
    gpu_->write_kv(qkv_g, layout, to_gpu_i32(*gpu_, step_slots), g);

    AttentionParams p;
    p.scale = 1.f / std::sqrt(static_cast<float>(c.head_dim));
    p.softcap = c.softcap;
    p.sliding_window = c.window;
    AttentionParams pg = p;
    if (c.alibi) {
      Tensor slopes = Tensor::empty({c.heads}, DType::kF32);
      for (int h = 0; h < c.heads; ++h)
        slopes.data<float>()[h] = std::pow(2.f, -8.f * (h + 1) / static_cast<float>(c.heads));
      p.alibi_slopes = slopes;
      p.alibi_scale = 0.7f;
      p.alibi_bias_bf16 = c.alibi_bf16;
      pg = p;
      pg.alibi_slopes = gpu_->prepare_weight(slopes);
    }
    AttentionMeta mh, mg;
    mh.query_start = host_i32(qstart);
    mh.context_lens = host_i32(ctx);
    mh.block_tables = host_i32(tables);
    mg.query_start = to_gpu_i32(*gpu_, qstart);
    mg.context_lens = to_gpu_i32(*gpu_, ctx);
    mg.block_tables = to_gpu_i32(*gpu_, tables);
    for (AttentionMeta* m : {&mh, &mg}) {
      m->num_seqs = S;
      m->max_blocks_per_seq = max_blocks;
      m->max_query_len = max_q;
      m->max_context_len = std::max(max_ctx, c.ctx_hint);
    }
    std::vector<int32_t> prefix;
    for (const SeqSpec& s : c.seqs) prefix.push_back(s.prefix);
    if (std::any_of(prefix.begin(), prefix.end(), [](int32_t p) { return p > 0; })) {
      mh.prefix_lens = host_i32(prefix);
      mg.prefix_lens = to_gpu_i32(*gpu_, prefix);
    }
    // Tree masks: each step token sees itself and a random half of the earlier ones.
    std::vector<int32_t> tree_words, tree_start;
    for (const SeqSpec& s : c.seqs) {
      if (!s.tree) {
        tree_start.push_back(-1);
        continue;
      }
      const int64_t q = s.q_len, start = static_cast<int64_t>(tree_words.size());
      tree_start.push_back(static_cast<int32_t>(start));
      tree_words.resize(static_cast<size_t>(start + (q * q + 31) / 32), 0);
      for (int64_t i = 0; i < q; ++i)
        for (int64_t j = 0; j <= i; ++j)
          if (j == i || rng_() % 2 == 0) {
            const int64_t bit = i * q + j;
            auto& w = tree_words[static_cast<size_t>(start + bit / 32)];
            w = static_cast<int32_t>(static_cast<uint32_t>(w) | (1u << (bit % 32)));
          }
    }
    if (!tree_words.empty()) {
      mh.tree_mask = host_i32(tree_words);
      mh.tree_mask_start = host_i32(tree_start);
      mg.tree_mask = to_gpu_i32(*gpu_, tree_words);
      mg.tree_mask_start = to_gpu_i32(*gpu_, tree_start);
    }
    Tensor out_ref = Tensor::empty({T, layout.q_cols()}, DType::kF32);
    cpu_->attention(qkv, layout, ref, mh, p, out_ref);
    auto want_for = [&](Kernel) { return host_values(out_ref); };
    if (!c.no_host_lens) {
      mg.host_query_start = &qstart;
      mg.host_context_lens = &ctx;
    }
    ran_.clear();
    for (Kernel kernel : {Kernel::kSimple, Kernel::kDecode, Kernel::kFlash}) {
      gpu_->set_attention_kernel(kernel);
      Tensor out = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
      gpu_->attention(qkv_g, layout, g, mg, pg, out);
      if (gpu_->last_attention_kernel() != kernel) continue;  // not applicable here
      ran_.push_back(kernel);
      expect_near(host_values(*gpu_, out), want_for(kernel), bound_for(dt_),
                  dtype_label(dt_) + " " + kernel_name(kernel) + " " + c.name);
    }
    // The automatic choice (which may split a mixed step between two kernels), checked
    // the same way.
    gpu_->set_attention_kernel(Kernel::kAuto);
    Tensor out = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
    gpu_->attention(qkv_g, layout, g, mg, pg, out);
    auto_ran_ = gpu_->last_attention_kernel();
    expect_near(host_values(*gpu_, out), want_for(auto_ran_), bound_for(dt_),
                dtype_label(dt_) + " auto (" + kernel_name(auto_ran_) + ") " + c.name);
    // The flash kernel's other forms (forms_), on the same inputs against the same
    // reference.
    for (const FlashForm& form : forms_) {
      form.set(true);
      gpu_->set_attention_kernel(Kernel::kFlash);
      Tensor fout = poisoned(*gpu_, {T, layout.q_cols()}, dt_);
      gpu_->attention(qkv_g, layout, g, mg, pg, fout);
      const bool took = gpu_->last_attention_kernel() == Kernel::kFlash;
      form.set(false);
      EXPECT_TRUE(took) << c.name << " (" << form.label << ")";
      if (took)
        expect_near(host_values(*gpu_, fout), want_for(Kernel::kFlash), bound_for(dt_),
                    dtype_label(dt_) + " flash (" + form.label + ") " + c.name);
    }
  }

  // A form of the flash kernel: set(true) switches it on, set(false) back off.
  struct FlashForm {
    std::string label;
    std::function<void(bool)> set;
  };
  std::vector<FlashForm> forms_;
  // The wgmma kernel's alternative: the mma.sync kernel that pre-Hopper devices run.
  static std::vector<FlashForm> wgmma_forms() {
    return {{"mma.sync", [](bool on) { cuda::set_flash_wgmma(!on); }}};
  }

  // Whether the last run() ran the kernel (it applied to the case).
  bool ran(Kernel k) const { return std::find(ran_.begin(), ran_.end(), k) != ran_.end(); }
  // run(), and for bf16/f16 a check that the flash kernel took the case; where the
  // wgmma form applies (sm_90a, head_dim 64 or 128), the flash kernel again on the same
  // inputs on mma.sync, and that the wgmma form took the copy-engine loads where they
  // apply (no sliding window and block sizes of whole 8-key runs that tile 64 keys; else
  // it keeps cp.async).
  void run_flash(const AttnCase& c) {
    const bool wgmma = cuda::attention_flash_wgmma_active(dt_, c.head_dim);
    if (wgmma) forms_ = wgmma_forms();
    const int64_t before = cuda::flash_tma_launches();
    run(c);
    forms_.clear();
    if (dt_ != DType::kF32) {
      EXPECT_TRUE(ran(Kernel::kFlash)) << c.name;
    }
    if (!wgmma) return;
    const int bs = c.block_size;
    const bool applies = c.window <= 0 && bs % 8 == 0 && (64 % bs == 0 || bs % 64 == 0);
    EXPECT_EQ(cuda::flash_tma_launches() > before, applies) << c.name << " (tma)";
  }

  // The decode kernel's plan for the case's shape (what it splits the keys by).
  cuda::AttentionPlan decode_plan(const AttnCase& c) const {
    cuda::AttentionArgs a;
    a.type = dt_;
    a.heads = c.heads;
    a.kv_heads = c.kv_heads;
    a.head_dim = c.head_dim;
    a.block_size = c.block_size;
    a.num_seqs = static_cast<int32_t>(c.seqs.size());
    for (const SeqSpec& q : c.seqs) {
      a.tokens += q.q_len;
      a.max_query_len = std::max(a.max_query_len, q.q_len);
      a.max_context_len = std::max(a.max_context_len, q.cached + q.q_len);
    }
    a.max_context_len = std::max(a.max_context_len, c.ctx_hint);
    return cuda::plan_attention_decode(a, gpu_->num_sms());
  }

  // run() for a case the decode kernel must take (in bf16 and f16), with its plan.
  void run_decode(const AttnCase& c) {
    if (dt_ != DType::kF32) {
      const cuda::AttentionPlan p = decode_plan(c);
      std::printf("  %s: decode plan %d split(s) of %d keys%s\n", c.name.c_str(), p.num_splits,
                  p.num_splits > 1 ? p.split_keys : 0, p.cluster ? ", merged in a cluster" : "");
    }
    run(c);
    if (dt_ != DType::kF32) {
      EXPECT_TRUE(ran(Kernel::kDecode)) << c.name << ": the decode kernel did not run";
    }
  }

  bool fp8_ = false;  // the GPU's KV cache in e4m3 (CudaAttentionFp8Test)
  bool i8_ = false;   // the GPU's and the reference's KV caches in int8 (CudaAttentionI8Test)
  DType dt_ = DType::kBF16;
  std::vector<Kernel> ran_;
  Kernel auto_ran_ = Kernel::kAuto;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<Backend> cpu_;
  std::mt19937 rng_;
};

}  // namespace tachyon::cuda_test
