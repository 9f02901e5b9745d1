// CudaBackend's rotary, KV-cache writes and block copies, and paged attention: which
// kernel runs a step (the flash, decode, mixed or simple kernel: cuda_backend_impl.h)
// and the host-side plans they take.
#include <algorithm>
#include <set>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/swap_memory.h"
#include "core/error.h"

namespace tachyon::cuda {

void CudaBackend::check_kv_write(const Tensor& slots, int64_t tokens, const QkvLayout& layout,
                                 const LayerKvCache& cache, const char* what) const {
  check_here(slots, what);
  TACHYON_CHECK(slots.numel() == tokens && slots.dtype() == DType::kI32,
                "{} slots {} for {} tokens", what, slots.str(), tokens);
  TACHYON_CHECK(cache.k && cache.v && cache.k.ndim() == 4 &&
                    cache.k.dim(1) == layout.num_kv_heads &&
                    cache.k.dim(3) == layout.head_dim + kv_row_extra(kv_dtype_) &&
                    cache.v.shape() == cache.k.shape() && cache.k.dtype() == kv_dtype_ &&
                    cache.v.dtype() == kv_dtype_,
                "{} cache {}", what, cache.k ? cache.k.str() : std::string("none"));
  check_here(cache.k, what);
  check_here(cache.v, what);
}

// The arguments of a rotary on qkv rows (`what` names the op in the errors).
void CudaBackend::check_rotary(const Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                               RotaryStyle style, int32_t rotary_dim, const char* what) const {
  check_act(qkv, what);
  check_here(cos_sin, what);
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "{} qkv {}", what, qkv.str());
  TACHYON_CHECK(rotary_dim % 2 == 0 && rotary_dim <= layout.head_dim, "rotary_dim {} head_dim {}",
                rotary_dim, layout.head_dim);
  TACHYON_CHECK(style != RotaryStyle::kHalf2D || rotary_dim % 4 == 0,
                "rotary_dim {} of a 2-D rotary is not a multiple of 4", rotary_dim);
  TACHYON_CHECK(cos_sin.ndim() == 2 && cos_sin.dim(0) == qkv.dim(0) &&
                    cos_sin.dim(1) == rotary_dim && cos_sin.dtype() == DType::kF32,
                "{} cos_sin {} for {} tokens, rotary_dim {}", what, cos_sin.str(), qkv.dim(0),
                rotary_dim);
}

void CudaBackend::rotary(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                         RotaryStyle style, int32_t rotary_dim) {
  wrote(qkv);
  if (style == RotaryStyle::kNone || rotary_dim == 0) return;
  check_rotary(qkv, layout, cos_sin, style, rotary_dim, "rotary");
  launch_rotary(qkv.raw(), dtype_, qkv.dim(0), qkv.dim(1), layout.num_heads + layout.num_kv_heads,
                layout.head_dim, cos_sin.data<float>(), rotary_dim,
                static_cast<KRotary>(static_cast<int>(style)), stream_);
}

void CudaBackend::write_kv(const Tensor& qkv, const QkvLayout& layout, const Tensor& slots,
                           LayerKvCache& cache) {
  check_act(qkv, "write_kv qkv");
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "write_kv qkv {}", qkv.str());
  check_kv_write(slots, qkv.dim(0), layout, cache, "write_kv");
  if (kv_i8()) {
    launch_write_kv_i8(qkv.raw(), dtype_, qkv.dim(0), qkv.dim(1), layout.q_cols(),
                       layout.num_kv_heads, layout.head_dim, slots.data<int32_t>(), cache.k.raw(),
                       cache.v.raw(), cache.num_blocks(), cache.block_size(), err_dev_, stream_);
    return;
  }
  launch_write_kv(qkv.raw(), dtype_, qkv.dim(0), qkv.dim(1), layout.q_cols(), layout.num_kv_heads,
                  layout.head_dim, slots.data<int32_t>(), cache.k.raw(), cache.v.raw(), kv_fp8(),
                  cache.num_blocks(), cache.block_size(), err_dev_, stream_);
}

void CudaBackend::scale_queries(Tensor& qkv, const QkvLayout& layout, const Tensor& factors) {
  wrote(qkv);
  check_act(qkv, "scale_queries qkv");
  check_here(factors, "scale_queries factors");
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols() &&
                    factors.dtype() == DType::kF32 && factors.numel() == qkv.dim(0),
                "scale_queries qkv {} factors {}", qkv.str(), factors.str());
  launch_scale_rows(qkv.raw(), dtype_, qkv.dim(0), layout.q_cols(), qkv.dim(1),
                    factors.data<float>(), stream_);
}

namespace {

// Whether the metadata carries host copies of the step's lengths that fit the call.
bool host_lengths(const AttentionArgs& a, const AttentionMeta& meta) {
  return meta.host_query_start != nullptr && meta.host_context_lens != nullptr &&
         static_cast<int32_t>(meta.host_query_start->size()) == a.num_seqs + 1 &&
         static_cast<int32_t>(meta.host_context_lens->size()) == a.num_seqs &&
         meta.host_query_start->back() == a.tokens;
}

}  // namespace

// Built on the host from the step's lengths once, uploaded, and reused by every layer of
// the step (the key is compared in place: O(sequences) per call).
const int32_t* CudaBackend::flash_items(const AttentionArgs& a, const AttentionMeta& meta,
                                        int32_t& n) {
  n = 0;
  if (!host_lengths(a, meta)) return nullptr;
  const std::vector<int32_t>& qs = *meta.host_query_start;
  const std::vector<int32_t>& ctx = *meta.host_context_lens;
  // An upload while a graph is being recorded would replay stale lengths.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TACHYON_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;
  const int32_t q_tile = attention_flash_q_tile(a);
  const int32_t multi_only = a.multi_queries_only ? 1 : 0;
  const size_t key_size = 3 + qs.size() + ctx.size();
  const bool same = flash_key_.size() == key_size && flash_key_[0] == q_tile &&
                    flash_key_[1] == multi_only && flash_key_[2] == a.num_seqs &&
                    std::equal(qs.begin(), qs.end(), flash_key_.begin() + 3) &&
                    std::equal(ctx.begin(), ctx.end(), flash_key_.begin() + 3 + qs.size());
  if (!same) {
    attention_flash_items(a, qs.data(), ctx.data(), flash_host_items_);
    flash_items_ =
        upload(flash_host_items_.data(), {static_cast<int64_t>(flash_host_items_.size())},
               DType::kI32, flash_items_);
    flash_num_items_ = static_cast<int32_t>(flash_host_items_.size() / kFlashItemInts);
    flash_key_.assign({q_tile, multi_only, a.num_seqs});
    flash_key_.insert(flash_key_.end(), qs.begin(), qs.end());
    flash_key_.insert(flash_key_.end(), ctx.begin(), ctx.end());
  }
  n = flash_num_items_;
  return flash_items_.data<int32_t>();
}

void CudaBackend::run_decode(const AttentionArgs& a) {
  const AttentionPlan plan = plan_attention_decode(a, num_sms_);
  void* ws = plan.scratch_bytes > 0 ? scratch(attn_scratch_, plan.scratch_bytes) : nullptr;
  launch_attention_decode(a, plan, ws, merge_counters_.data<int32_t>(), kMergeCounters, stream_);
}

// A mixed step, decode rows beside prefill chunks: the decode kernel takes the
// sequences of one query (split keys, every warp busy), the flash kernel the others
// afterwards (the decode kernel's split merge writes every row; flash's rows win).
// False (nothing launched) when the step is not mixed or a kernel does not apply.
bool CudaBackend::attention_mixed(const AttentionArgs& a, const AttentionMeta& meta) {
  if (!host_lengths(a, meta)) return false;
  const std::vector<int32_t>& qs = *meta.host_query_start;
  const std::vector<int32_t>& ctx = *meta.host_context_lens;
  int32_t singles = 0, single_ctx = 1;
  for (int32_t s = 0; s < a.num_seqs; ++s)
    if (qs[s + 1] - qs[s] == 1) {
      ++singles;
      single_ctx = std::max(single_ctx, ctx[s]);
    }
  AttentionArgs d = a, f = a;
  d.single_queries_only = true;
  d.max_query_len = 1;
  d.max_context_len = single_ctx;
  f.multi_queries_only = true;
  if (singles == 0 || singles == a.num_seqs || !attention_decode_supports(d) ||
      !attention_flash_supports(f))
    return false;
  run_decode(d);
  // An fp8 cache: the decode kernel reads it, flash the other sequences' staged blocks.
  if (f.kv_fp8) stage_fp8_cache(f, meta, /*multi_only=*/true);
  int32_t n_items = 0;
  const int32_t* items = flash_items(f, meta, n_items);
  launch_attention_flash(f, items, n_items, stream_);
  return true;
}

void CudaBackend::stage_fp8_cache(AttentionArgs& a, const AttentionMeta& meta, bool multi_only) {
  // Items (sequence, first staging block, blocks): every listed sequence's blocks up to
  // its context (the step's longest without host lengths; the kernel stops at each
  // sequence's own on the device).
  const int32_t bs = a.block_size;
  const bool host = host_lengths(a, meta);
  fp8_stage_host_.clear();
  int64_t total = 0;
  int32_t widest = 0;
  for (int32_t s = 0; s < a.num_seqs; ++s) {
    int64_t ctx = a.max_context_len;
    if (host) {
      const std::vector<int32_t>& qs = *meta.host_query_start;
      if (multi_only && qs[s + 1] - qs[s] == 1) continue;
      ctx = (*meta.host_context_lens)[s];
    }
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(a.max_blocks, (ctx + bs - 1) / bs));
    if (n <= 0) continue;
    fp8_stage_host_.insert(fp8_stage_host_.end(), {s, static_cast<int32_t>(total), n});
    total += n;
    widest = std::max(widest, n);
    // The kernels index cache rows ((block * kv_heads + head) * block_size + slot) in 32 bits.
    if (total * a.kv_heads * bs > INT32_MAX)
      raise<ResourceExhausted>(
          "attention over an fp8 KV cache: the step's {}+ blocks do not fit one staging cache",
          total);
  }
  const int64_t block_elems = int64_t{a.kv_heads} * bs * a.head_dim;
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(total, 1) * block_elems) * dtype_size(dtype_);
  void* ks = scratch(fp8_stage_k_, bytes);
  void* vs = scratch(fp8_stage_v_, bytes);
  auto* tables = static_cast<int32_t*>(
      scratch(fp8_stage_tables_,
              static_cast<size_t>(std::max<int64_t>(int64_t{a.num_seqs} * a.max_blocks, 1)) *
                  sizeof(int32_t)));
  const int n_items = static_cast<int>(fp8_stage_host_.size() / 3);
  if (n_items > 0) {
    // The step's layers stage the same items: uploaded once.
    if (fp8_stage_host_ != fp8_stage_uploaded_) {
      fp8_stage_items_ =
          upload(fp8_stage_host_.data(), {static_cast<int64_t>(fp8_stage_host_.size())},
                 DType::kI32, fp8_stage_items_);
      fp8_stage_uploaded_ = fp8_stage_host_;
    }
    launch_stage_fp8_kv(a.k_cache, a.v_cache, dtype_, a.block_tables, a.query_start, a.context_lens,
                        a.max_blocks, a.num_blocks, bs, a.sliding_window, block_elems,
                        fp8_stage_items_.data<int32_t>(), n_items, widest, ks, vs, tables, err_dev_,
                        stream_);
  }
  a.k_cache = ks;
  a.v_cache = vs;
  a.kv_fp8 = false;
  a.block_tables = tables;
  a.num_blocks = static_cast<int32_t>(total);
}

void CudaBackend::stage_i8_cache(AttentionArgs& a) {
  const int64_t blocks = int64_t{a.num_seqs} * a.max_blocks;
  // The kernels index cache rows ((block * kv_heads + head) * block_size + slot) in 32 bits.
  if (blocks * a.kv_heads * a.block_size > INT32_MAX)
    raise<ResourceExhausted>(
        "attention over an int8 KV cache: the step's {} x {} blocks do not fit one staging "
        "cache",
        a.num_seqs, a.max_blocks);
  const size_t bytes =
      static_cast<size_t>(std::max<int64_t>(blocks, 1) * a.kv_heads * a.block_size * a.head_dim) *
      dtype_size(dtype_);
  void* ks = scratch(i8_stage_k_, bytes);
  void* vs = scratch(i8_stage_v_, bytes);
  auto* tables = static_cast<int32_t*>(
      scratch(i8_stage_tables_, static_cast<size_t>(std::max<int64_t>(blocks, 1)) * 4));
  launch_stage_i8_kv(a.k_cache, a.v_cache, dtype_, a.block_tables, a.query_start, a.context_lens,
                     a.num_seqs, a.max_blocks, a.num_blocks, a.block_size, a.sliding_window,
                     a.kv_heads, a.head_dim, ks, vs, tables, err_dev_, stream_);
  a.k_cache = ks;
  a.v_cache = vs;
  a.block_tables = tables;
  a.num_blocks = static_cast<int32_t>(blocks);
}

void CudaBackend::rotary_write_kv(Tensor& qkv, const QkvLayout& layout, const Tensor& cos_sin,
                                  RotaryStyle style, int32_t rotary_dim, const Tensor& slots,
                                  LayerKvCache& cache) {
  wrote(qkv);
  // An int8 cache's rows are quantized by write_kv's kernel (a row's scale needs the
  // whole rotated row).
  if (style == RotaryStyle::kNone || rotary_dim == 0 || layout.head_dim % 2 != 0 || kv_i8()) {
    rotary(qkv, layout, cos_sin, style, rotary_dim);
    write_kv(qkv, layout, slots, cache);
    return;
  }
  check_rotary(qkv, layout, cos_sin, style, rotary_dim, "rotary_write_kv");
  check_kv_write(slots, qkv.dim(0), layout, cache, "rotary_write_kv");
  launch_rotary_write_kv(qkv.raw(), dtype_, qkv.dim(0), qkv.dim(1), layout.num_heads,
                         layout.num_kv_heads, layout.head_dim, cos_sin.data<float>(), rotary_dim,
                         static_cast<KRotary>(static_cast<int>(style)), slots.data<int32_t>(),
                         cache.k.raw(), cache.v.raw(), kv_fp8(), cache.num_blocks(),
                         cache.block_size(), err_dev_, stream_);
}

void CudaBackend::attention(const Tensor& qkv, const QkvLayout& layout, const LayerKvCache& cache,
                            const AttentionMeta& meta, const AttentionParams& params, Tensor& out) {
  wrote(out);
  check_act(qkv, "attention qkv");
  check_act(out, "attention out");
  TACHYON_CHECK(qkv.ndim() == 2 && qkv.dim(1) == layout.row_cols(), "attention qkv {}", qkv.str());
  const int64_t n = qkv.dim(0);
  const int H = layout.num_heads, KV = layout.num_kv_heads, hd = layout.head_dim;
  TACHYON_CHECK(out.ndim() == 2 && out.dim(0) == n && out.dim(1) == int64_t{H} * hd,
                "attention out {}", out.str());
  TACHYON_CHECK(cache.k && cache.k.dim(1) == KV && cache.k.dim(3) == hd + kv_row_extra(kv_dtype_) &&
                    cache.k.dtype() == kv_dtype_ && cache.v && cache.v.shape() == cache.k.shape() &&
                    cache.v.dtype() == kv_dtype_,
                "attention cache {}", cache.k ? cache.k.str() : std::string("none"));
  TACHYON_CHECK(!params.alibi_slopes || (params.alibi_slopes.numel() == H &&
                                         params.alibi_slopes.dtype() == DType::kF32),
                "alibi slopes {}", params.alibi_slopes.str());
  if (params.alibi_slopes) check_here(params.alibi_slopes, "alibi slopes");
  check_here(meta.query_start, "attention query_start");
  check_here(meta.context_lens, "attention context_lens");
  check_here(meta.block_tables, "attention block_tables");
  if (n == 0 || meta.num_seqs == 0) return;
  TACHYON_CHECK(meta.max_query_len > 0 && meta.max_context_len >= meta.max_query_len,
                "attention hints: max_query_len {} max_context_len {}", meta.max_query_len,
                meta.max_context_len);
  AttentionArgs a;
  a.qkv = qkv.raw();
  a.qkv_cols = qkv.dim(1);
  a.tokens = n;
  a.k_cache = cache.k.raw();
  a.v_cache = cache.v.raw();
  a.kv_fp8 = kv_fp8();
  a.out = out.raw();
  a.type = dtype_;
  a.query_start = meta.query_start.data<int32_t>();
  a.context_lens = meta.context_lens.data<int32_t>();
  a.block_tables = meta.block_tables.data<int32_t>();
  a.num_seqs = meta.num_seqs;
  a.max_blocks = meta.max_blocks_per_seq;
  a.max_query_len = meta.max_query_len;
  a.max_context_len = meta.max_context_len;
  a.num_blocks = cache.num_blocks();
  a.block_size = cache.block_size();
  a.heads = H;
  a.kv_heads = KV;
  a.head_dim = hd;
  a.scale = params.scale;
  a.softcap = params.softcap;
  a.sliding_window = params.sliding_window;
  a.alibi_slopes = params.alibi_slopes ? params.alibi_slopes.data<float>() : nullptr;
  a.alibi_scale = params.alibi_scale;
  a.alibi_bias_bf16 = params.alibi_bias_bf16;
  a.err = err_dev_;
  if (meta.prefix_lens) {
    // Only the simple kernel below widens queries to a bidirectional prefix.
    check_here(meta.prefix_lens, "attention prefix_lens");
    TACHYON_CHECK(meta.prefix_lens.numel() == meta.num_seqs &&
                      meta.prefix_lens.dtype() == DType::kI32 && params.sliding_window == 0,
                  "attention prefix_lens {} for {} sequences (sliding window {})",
                  meta.prefix_lens.str(), meta.num_seqs, params.sliding_window);
    a.prefix_lens = meta.prefix_lens.data<int32_t>();
  }
  if (meta.tree_mask) {
    // The simple and decode kernels narrow a step's own keys to a tree; flash does not.
    check_here(meta.tree_mask, "attention tree_mask");
    check_here(meta.tree_mask_start, "attention tree_mask_start");
    TACHYON_CHECK(meta.tree_mask_start.numel() == meta.num_seqs &&
                      meta.tree_mask_start.dtype() == DType::kI32 && !meta.prefix_lens,
                  "attention tree_mask_start {} for {} sequences (prefix {})",
                  meta.tree_mask_start.str(), meta.num_seqs, static_cast<bool>(meta.prefix_lens));
    a.tree_mask = static_cast<const uint32_t*>(meta.tree_mask.raw());
    a.tree_mask_start = meta.tree_mask_start.data<int32_t>();
  }
  // Steps only the simple kernel takes; steps the flash kernel cannot take.
  const bool simple_only = a.prefix_lens != nullptr;
  const bool tree = a.tree_mask != nullptr;
  if (a.kv_fp8) {
    // The decode kernel reads e4m3 itself: decode steps (and every step a graph
    // records), and the one-query sequences of a mixed step, whose other sequences then
    // go to the flash kernel from staged blocks. Any other step stages all its
    // sequences' blocks and takes the kernel choice below.
    if (!attention_decode_supports(a))
      raise<InvalidArgument>(
          "an fp8 KV cache needs head_dim 64, 128 or 256 and at most 8 query heads per KV "
          "head (this model: head_dim {}, {} heads, {} KV heads)",
          hd, H, KV);
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    TACHYON_CUDA_CHECK(cudaStreamIsCapturing(stream_, &capture));
    const bool decode_ok = !batch_invariant_ && !simple_only &&
                           (attention_kernel_ == AttentionKernel::kAuto ||
                            attention_kernel_ == AttentionKernel::kDecode);
    if (decode_ok &&
        (meta.max_query_len <= kDecodeMaxQueries || capture != cudaStreamCaptureStatusNone ||
         attention_kernel_ == AttentionKernel::kDecode)) {
      last_attention_kernel_ = AttentionKernel::kDecode;
      run_decode(a);
      return;
    }
    if (capture != cudaStreamCaptureStatusNone)
      raise<InvalidArgument>(
          "attention over an fp8 KV cache cannot be recorded in a graph in batch-invariant "
          "mode, with a bidirectional prefix, or with a forced kernel");
    // A mixed step (as below): decode rows from the fp8 cache, the flash kernel's from
    // the staged blocks of the other sequences.
    if (attention_kernel_ == AttentionKernel::kAuto && decode_ok && !tree &&
        meta.max_query_len > kDecodeMaxQueries && attention_mixed(a, meta)) {
      last_attention_kernel_ = AttentionKernel::kDecodeAndFlash;
      return;
    }
    stage_fp8_cache(a, meta, /*multi_only=*/false);
  }
  if (kv_i8()) stage_i8_cache(a);
  // A kernel runs when forced (set_attention_kernel) and applicable, or under kAuto
  // when applicable and the step has its shape; batch-invariant mode and steps with a
  // bidirectional prefix run through the simple kernel below, and so do steps with tree
  // masks and long queries (flash takes no tree).
  auto pick = [&](AttentionKernel k, bool applies, bool auto_shape) {
    if (batch_invariant_ || simple_only || !applies) return false;
    return attention_kernel_ == k || (attention_kernel_ == AttentionKernel::kAuto && auto_shape);
  };
  if (attention_kernel_ == AttentionKernel::kAuto && !batch_invariant_ && !simple_only && !tree &&
      meta.max_query_len > kDecodeMaxQueries && attention_mixed(a, meta)) {
    last_attention_kernel_ = AttentionKernel::kDecodeAndFlash;
    return;
  }
  // Prefill steps (mixed ones too: a sequence's single query fills `group` of a
  // block's 128 rows, the block's other warps idle).
  const bool use_flash = pick(AttentionKernel::kFlash, attention_flash_supports(a) && !tree,
                              meta.max_query_len > kDecodeMaxQueries);
  if (use_flash) {
    last_attention_kernel_ = AttentionKernel::kFlash;
    int32_t n_items = 0;
    const int32_t* items = flash_items(a, meta, n_items);
    launch_attention_flash(a, items, n_items, stream_);
    return;
  }
  const bool use_decode = pick(AttentionKernel::kDecode, attention_decode_supports(a),
                               meta.max_query_len <= kDecodeMaxQueries);
  if (use_decode) {
    last_attention_kernel_ = AttentionKernel::kDecode;
    run_decode(a);
    return;
  }
  last_attention_kernel_ = AttentionKernel::kSimple;
  AttentionArgs shape = a;
  if (batch_invariant_) {
    // One query per tile (a tile's key range follows its own query) and no key split:
    // what a query computes is then the same in any batch.
    shape.max_query_len = 1;
    shape.max_context_len = 1;
  }
  const AttentionPlan plan = plan_attention(shape, num_sms_);
  void* ws = plan.scratch_bytes > 0 ? scratch(attn_scratch_, plan.scratch_bytes) : nullptr;
  launch_attention(a, plan, ws, stream_);
}

void CudaBackend::copy_blocks(Tensor& cache,
                              const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  if (!cache || pairs.empty()) return;
  check_here(cache, "copy_blocks cache");
  const int64_t nb = cache.dim(0);
  const int64_t block_bytes = static_cast<int64_t>(cache.nbytes()) / nb;
  std::vector<int32_t> flat;
  flat.reserve(pairs.size() * 2);
  std::set<int32_t> sources, dests;
  bool overlapping = false;
  for (const auto& [src, dst] : pairs) {
    if (src < 0 || src >= nb || dst < 0 || dst >= nb)
      raise<InvalidArgument>("copy_kv_blocks: block pair ({}, {}) out of [0, {})", src, dst, nb);
    if (src == dst) continue;
    overlapping |= dests.count(src) > 0 || dests.count(dst) > 0 || sources.count(dst) > 0;
    sources.insert(src);
    dests.insert(dst);
    flat.push_back(src);
    flat.push_back(dst);
  }
  if (flat.empty()) return;
  const int n_pairs = static_cast<int>(flat.size() / 2);
  Tensor dev = upload(flat.data(), {static_cast<int64_t>(flat.size())}, DType::kI32, {});
  if (!overlapping) {
    launch_copy_blocks(cache.raw(), block_bytes, dev.data<int32_t>(), n_pairs, stream_);
    return;
  }
  // Pairs that read a block another pair writes run one after another, in order.
  for (int i = 0; i < n_pairs; ++i)
    launch_copy_blocks(cache.raw(), block_bytes, dev.data<int32_t>() + 2 * i, 1, stream_);
}

void CudaBackend::copy_blocks_between(const Tensor& from, Tensor& to,
                                      const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  const int64_t block_bytes = check_block_pairs(from, to, pairs);
  if (pairs.empty() || block_bytes == 0) return;
  // Each side on this device, or host memory the device can reach (alloc_swap).
  for (const Tensor* t : {&from, static_cast<const Tensor*>(&to)}) {
    if (!t->device().is_cpu()) {
      check_here(*t, "copy_blocks_between");
      continue;
    }
    if (!is_swap_memory(t->raw(), t->nbytes()))
      raise<InvalidArgument>(
          "copy_blocks_between: {} is host memory the device cannot reach (not from alloc_swap)",
          t->str());
  }
  if (from.raw() == to.raw()) return copy_blocks(to, pairs);
  std::vector<int32_t> flat;
  flat.reserve(pairs.size() * 2);
  for (const auto& [src, dst] : pairs) {
    flat.push_back(src);
    flat.push_back(dst);
  }
  Tensor dev = upload(flat.data(), {static_cast<int64_t>(flat.size())}, DType::kI32, {});
  launch_copy_blocks(from.raw(), to.raw(), block_bytes, dev.data<int32_t>(),
                     static_cast<int>(pairs.size()), stream_);
}

}  // namespace tachyon::cuda
