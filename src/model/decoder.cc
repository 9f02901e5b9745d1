#include "model/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tachyon {

Tensor Decoder::Buffer::view(Backend& be, int64_t rows, int64_t cols) {
  return view(be, rows, cols, be.activation_dtype());
}

Tensor Decoder::Buffer::view(Backend& be, int64_t rows, int64_t cols, DType dtype) {
  const int64_t n = rows * cols;
  if (!storage || storage.dtype() != dtype || storage.numel() < n) {
    // Grow with headroom so that slowly growing steps do not reallocate every time.
    const int64_t cap = std::max<int64_t>(n + n / 4, 1);
    storage = be.alloc({cap}, dtype);
  }
  return Tensor::wrap(storage.raw(), {rows, cols}, dtype, storage.owner(), storage.device());
}

namespace {

// Rows of host matrices [n_i, K] of one dtype stacked into one [sum n_i, K] matrix (and
// their f32 biases into one, zeros where a part has none); an empty result when the
// parts do not fit together (other dtypes or widths, not on the host).
LinearWeights stack_rows(const std::vector<const LinearWeights*>& parts) {
  const Tensor& first = parts.front()->w;
  int64_t rows = 0;
  bool any_bias = false;
  for (const LinearWeights* p : parts) {
    if (!p->w || p->w.ndim() != 2 || !p->w.device().is_cpu() || p->w.dtype() != first.dtype() ||
        p->w.dim(1) != first.dim(1))
      return {};
    if (p->b &&
        (p->b.dtype() != DType::kF32 || p->b.numel() != p->w.dim(0) || !p->b.device().is_cpu()))
      return {};
    rows += p->w.dim(0);
    any_bias = any_bias || static_cast<bool>(p->b);
  }
  LinearWeights out;
  out.w = Tensor::empty({rows, first.dim(1)}, first.dtype());
  if (any_bias) out.b = Tensor::zeros({rows}, DType::kF32);
  auto* dst = static_cast<char*>(out.w.raw());
  int64_t row = 0;
  for (const LinearWeights* p : parts) {
    std::memcpy(dst, p->w.raw(), p->w.nbytes());
    dst += p->w.nbytes();
    if (p->b) std::memcpy(out.b.data<float>() + row, p->b.raw(), p->b.nbytes());
    row += p->w.dim(0);
  }
  return out;
}

// On a device backend, or one that repacks linear weights anyway, separate q/k/v and
// gate/up projections become one matrix each (one GEMM instead of three or two per
// layer; the output columns are the same). A CPU that reads the checkpoint in place
// keeps its mapped views.
void fuse_projections(LayerWeights& L, Backend& be) {
  if (be.device().is_cpu() && !be.repacks_linear_weights()) return;
  if (!L.qkv && L.q && L.k && L.v) {
    LinearWeights f = stack_rows({&L.q, &L.k, &L.v});
    if (f) {
      L.qkv = std::move(f);
      L.q = L.k = L.v = {};
    }
  }
  if (!L.gate_up && L.gate && L.up && L.down) {
    LinearWeights f = stack_rows({&L.gate, &L.up});
    if (f) {
      L.gate_up = std::move(f);
      L.gate = L.up = {};
    }
  }
}

// Every weight in the form the backend's kernels read (on a GPU: converted and
// uploaded once; on the CPU: the same tensors).
void prepare_weights(ModelWeights& w, Backend& be) {
  auto prep = [&](Tensor& t) {
    if (t) t = be.prepare_weight(t);
  };
  auto prep_norm = [&](NormParams& n) {
    prep(n.weight);
    prep(n.bias);
  };
  auto prep_linear = [&](LinearWeights& l) {
    if (l.w) l.w = be.prepare_linear_weight(l.w);
    prep(l.b);
  };
  const bool tied = w.lm_head.w.raw() == w.embedding.raw();
  w.tied_lm_head = tied;
  const Tensor table = w.embedding;  // as loaded
  prep(w.embedding);
  prep(w.pos_embedding);
  prep_norm(w.embed_norm);
  prep_norm(w.final_norm);
  prep_linear(w.project_in);
  prep_linear(w.project_out);
  if (tied) {
    // The prepared table itself, unless linear weights are repacked: the embedding's
    // rows are looked up as they are, so the lm_head gets its own copy.
    w.lm_head.w = be.repacks_linear_weights() ? be.prepare_linear_weight(table) : w.embedding;
    prep(w.lm_head.b);
  } else {
    prep_linear(w.lm_head);
  }
  for (LayerWeights& L : w.layers) {
    fuse_projections(L, be);
    for (NormParams* n :
         {&L.attn_norm, &L.mlp_norm, &L.post_attn_norm, &L.post_mlp_norm, &L.q_norm, &L.k_norm})
      prep_norm(*n);
    for (LinearWeights* l :
         {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down, &L.router,
          &L.shared_gate, &L.shared_up, &L.shared_down, &L.shared_expert_gate})
      prep_linear(*l);
    for (MoeExpertWeights& e : L.experts) {
      prep(e.gate_up);
      prep(e.gate);
      prep(e.up);
      prep(e.down);
    }
  }
}

}  // namespace

Decoder::Decoder(ModelConfig config, ModelWeights weights, std::unique_ptr<Backend> backend)
    : cfg_(std::move(config)), w_(std::move(weights)), be_(std::move(backend)) {
  cfg_.validate();
  prepare_weights(w_, *be_);
  fold_norms();
  TACHYON_CHECK_EQ(static_cast<int32_t>(w_.layers.size()), cfg_.layer_num);
  layout_ = QkvLayout{cfg_.head_num, cfg_.head_num_kv, cfg_.size_per_head};
  if (cfg_.position == PositionType::kRotary) rope_ = std::make_unique<RopeTable>(cfg_.rope);
  Tensor slopes;
  if (cfg_.position == PositionType::kAlibi) {
    std::vector<float> s = alibi_slopes(cfg_.head_num, cfg_.alibi_style, cfg_.alibi_bias_max);
    if (cfg_.alibi_bf16)
      for (float& x : s) x = bf16_to_f32(f32_to_bf16(x));
    slopes = be_->upload(s.data(), {static_cast<int64_t>(s.size())}, DType::kF32, {});
  }
  if (const char* env = std::getenv("TACHYON_GRAPHS"); env != nullptr && std::string(env) == "0")
    graphs_on_ = false;
  if (be_->device().is_cpu()) graphs_on_ = false;
  all_sliding_ = cfg_.sliding_window > 0;
  for (int l = 0; l < cfg_.layer_num; ++l) all_sliding_ = all_sliding_ && cfg_.is_sliding(l);
  attn_params_.resize(static_cast<size_t>(cfg_.layer_num));
  for (int l = 0; l < cfg_.layer_num; ++l) {
    AttentionParams& p = attn_params_[l];
    p.scale = static_cast<float>(cfg_.softmax_scale(l));
    p.softcap = static_cast<float>(cfg_.attn_softcap);
    p.sliding_window = cfg_.is_sliding(l) ? cfg_.sliding_window : 0;
    p.alibi_slopes = slopes;
    p.alibi_scale = cfg_.alibi_scaled ? p.scale : 1.f;
    p.alibi_bias_bf16 = cfg_.alibi_bf16;
  }
}

void Decoder::fold_norms() {
  if (cfg_.residual_from_norm || cfg_.post_norm || cfg_.parallel_residual || cfg_.sandwich_norm ||
      !cfg_.gated_mlp)
    return;
  for (int l = 0; l < cfg_.layer_num; ++l) {
    const LayerWeights& L = w_.layers[l];
    if (cfg_.is_moe(l) || !L.qkv || !L.gate_up || !be_->folds_norm(L.qkv.w, L.attn_norm) ||
        !be_->folds_norm(L.gate_up.w, L.mlp_norm))
      return;
  }
  const std::vector<float> ones(static_cast<size_t>(cfg_.hidden_size), 1.f);
  const Tensor unit =
      be_->upload(ones.data(), {static_cast<int64_t>(ones.size())}, DType::kF32, {});
  for (LayerWeights& L : w_.layers) {
    for (auto [w, norm] :
         {std::pair{&L.qkv.w, &L.attn_norm}, std::pair{&L.gate_up.w, &L.mlp_norm}}) {
      *w = be_->fold_norm(*w, *norm);
      norm->weight = unit;
      norm->weight_offset = 0.f;
    }
  }
  norms_folded_ = true;
}

size_t Decoder::kv_bytes_per_block(int32_t block_size) const {
  return static_cast<size_t>(cfg_.layer_num) * 2 * static_cast<size_t>(cfg_.kv_size()) *
         static_cast<size_t>(block_size) * dtype_size(be_->kv_dtype());
}

size_t Decoder::workspace_bytes(int32_t max_tokens) const {
  // Every activation buffer of forward() at max_tokens rows (they are kept between
  // steps), the f32 logits of every row, the attention split-K partials, and slack for
  // the backend's GEMM workspace and metadata.
  const size_t t = static_cast<size_t>(std::max(max_tokens, 1));
  const size_t es = dtype_size(be_->activation_dtype());
  const size_t d = static_cast<size_t>(cfg_.hidden_size);
  size_t inter = static_cast<size_t>(cfg_.inter_size);
  if (cfg_.moe.num_experts > 0)
    inter = std::max({inter, static_cast<size_t>(cfg_.moe.shared_inter_size),
                      static_cast<size_t>(cfg_.moe.top_k) * static_cast<size_t>(cfg_.inter_size)});
  const size_t per_token = es * (8 * d + static_cast<size_t>(layout_.row_cols()) +
                                 static_cast<size_t>(layout_.q_cols()) + 3 * inter +
                                 static_cast<size_t>(cfg_.moe.num_experts) + 64);
  // The step's logits, and the graph steps' own logits buffer (a padded bucket).
  const size_t graph_rows =
      graphs_on_ ? std::min<size_t>(t, static_cast<size_t>(kMaxGraphBatch)) : 0;
  const size_t logits = (t + graph_rows) * static_cast<size_t>(cfg_.vocab_size) * sizeof(float);
  const size_t split_k = size_t{64} * std::min<size_t>(t, 1024) *
                         static_cast<size_t>(layout_.q_cols() + 2 * cfg_.head_num) * sizeof(float);
  // An fp8 cache: the 16-bit staging of the blocks prefill kernels read (CudaBackend::
  // stage_fp8_cache), K and V, for a step's tokens and one full-length context, doubled
  // for the staging buffers' growth.
  size_t staging = 0;
  if (be_->kv_dtype() == DType::kF8E4M3)
    staging = 2 * (t + static_cast<size_t>(std::max<int64_t>(cfg_.max_seq_len, 0))) * 2 *
              static_cast<size_t>(cfg_.kv_size()) * es;
  return t * per_token * 5 / 4 + logits + split_k + staging + (size_t{64} << 20);
}

void Decoder::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    raise<InvalidArgument>("init_kv_cache: {} blocks of {} tokens", num_blocks, block_size);
  kv_.clear();
  kv_.resize(static_cast<size_t>(cfg_.layer_num));
  const Shape shape = {num_blocks, cfg_.head_num_kv, block_size, cfg_.size_per_head};
  for (auto& c : kv_) {
    c.k = be_->alloc(shape, be_->kv_dtype());
    c.v = be_->alloc(shape, be_->kv_dtype());
    be_->fill_zero(c.k);
    be_->fill_zero(c.v);
  }
  block_size_ = block_size;
  graphs_.clear();
  swap_.clear();
}

bool Decoder::init_kv_swap(int32_t num_blocks) {
  if (kv_.empty()) raise<InvalidArgument>("init_kv_swap: the KV cache is not initialised");
  if (num_blocks < 0) raise<InvalidArgument>("init_kv_swap: {} blocks", num_blocks);
  swap_.clear();
  if (num_blocks == 0) return true;
  Shape shape = kv_[0].k.shape();
  shape[0] = num_blocks;
  std::vector<LayerKvCache> swap(kv_.size());
  for (auto& c : swap) {
    c.k = be_->alloc_swap(shape, be_->kv_dtype());
    c.v = be_->alloc_swap(shape, be_->kv_dtype());
  }
  swap_ = std::move(swap);
  return true;
}

void Decoder::swap_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& out,
                             const std::vector<std::pair<int32_t, int32_t>>& in) {
  if (out.empty() && in.empty()) return;
  if (swap_.empty()) raise<InvalidArgument>("swap_kv_blocks: no swap space (init_kv_swap)");
  for (size_t l = 0; l < kv_.size(); ++l) {
    be_->copy_blocks_between(kv_[l].k, swap_[l].k, out);
    be_->copy_blocks_between(kv_[l].v, swap_[l].v, out);
  }
  for (size_t l = 0; l < kv_.size(); ++l) {
    be_->copy_blocks_between(swap_[l].k, kv_[l].k, in);
    be_->copy_blocks_between(swap_[l].v, kv_[l].v, in);
  }
}

void Decoder::copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (auto& c : kv_) {
    be_->copy_blocks(c.k, src_dst);
    be_->copy_blocks(c.v, src_dst);
  }
}

void Decoder::validate(const ForwardBatch& b) const {
  if (kv_.empty())
    raise<InvalidArgument>("forward: the KV cache is not initialised (init_kv_cache)");
  const int64_t T = b.num_tokens();
  const int32_t S = b.num_seqs();
  if (S < 0 || b.query_start.empty())
    raise<InvalidArgument>("forward: query_start must have num_seqs + 1 entries");
  if (static_cast<int64_t>(b.positions.size()) != T)
    raise<InvalidArgument>("forward: {} positions for {} tokens", b.positions.size(), T);
  if (static_cast<int32_t>(b.context_lens.size()) != S)
    raise<InvalidArgument>("forward: {} context_lens for {} sequences", b.context_lens.size(), S);
  if (b.max_blocks_per_seq < 0 ||
      static_cast<int64_t>(b.block_tables.size()) != int64_t{S} * b.max_blocks_per_seq)
    raise<InvalidArgument>("forward: block_tables has {} entries, expected {} x {}",
                           b.block_tables.size(), S, b.max_blocks_per_seq);
  if (b.query_start[0] != 0 || b.query_start[S] != T)
    raise<InvalidArgument>("forward: query_start must run from 0 to {} tokens", T);
  const int32_t nb = kv_[0].num_blocks();
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = b.query_start[s + 1] - b.query_start[s];
    const int32_t ctx = b.context_lens[s];
    if (q < 0) raise<InvalidArgument>("forward: query_start must not decrease (sequence {})", s);
    if (ctx < q || ctx > cfg_.max_seq_len)
      raise<InvalidArgument>("forward: sequence {} has context {} for {} new tokens (max {})", s,
                             ctx, q, cfg_.max_seq_len);
    const int64_t need = (int64_t{ctx} + block_size_ - 1) / block_size_;
    if (need > b.max_blocks_per_seq)
      raise<InvalidArgument>("forward: sequence {} needs {} blocks, the table has {}", s, need,
                             b.max_blocks_per_seq);
    // With a sliding window on every layer, blocks wholly before the window of this
    // step's first query are never read: the engine may have released them.
    int64_t first_key = 0;
    if (all_sliding_) first_key = std::max<int64_t>(0, int64_t{ctx} - q - cfg_.sliding_window + 1);
    for (int64_t i = first_key / block_size_; i < need; ++i) {
      const int32_t blk = b.block_tables[int64_t{s} * b.max_blocks_per_seq + i];
      if (blk < 0 || blk >= nb)
        raise<InvalidArgument>("forward: sequence {} block {} is {} (cache has {} blocks)", s, i,
                               blk, nb);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    if (b.token_ids[t] < 0 || b.token_ids[t] >= cfg_.vocab_size)
      raise<InvalidArgument>("forward: token id {} out of [0, {})", b.token_ids[t],
                             cfg_.vocab_size);
    if (b.positions[t] < 0 || b.positions[t] >= cfg_.max_seq_len)
      raise<InvalidArgument>("forward: position {} out of [0, {})", b.positions[t],
                             cfg_.max_seq_len);
  }
  if (!b.prompt_lens.empty()) {
    if (static_cast<int32_t>(b.prompt_lens.size()) != S)
      raise<InvalidArgument>("forward: {} prompt_lens for {} sequences", b.prompt_lens.size(), S);
    for (int32_t s = 0; s < S; ++s)
      if (b.prompt_lens[s] <= 0 || b.prompt_lens[s] > cfg_.max_seq_len)
        raise<InvalidArgument>("forward: sequence {} has prompt length {} (max {})", s,
                               b.prompt_lens[s], cfg_.max_seq_len);
  }
  for (int32_t r : b.logits_rows)
    if (r < 0 || r >= T) raise<InvalidArgument>("forward: logits row {} out of [0, {})", r, T);
  if (!b.deferred.empty()) {
    const int64_t prev_rows = last_ids_ ? last_ids_.numel() : 0;
    if (prev_rows == 0)
      raise<InvalidArgument>("forward: deferred tokens, but the previous step chose no ids");
    std::vector<bool> seen(static_cast<size_t>(T));
    for (const DeferredToken& d : b.deferred) {
      if (d.index < 0 || d.index >= T || d.row < 0 || d.row >= prev_rows)
        raise<InvalidArgument>(
            "forward: deferred token {} from row {} (the step has {} tokens, the previous one "
            "{} rows)",
            d.index, d.row, T, prev_rows);
      if (seen[static_cast<size_t>(d.index)])
        raise<InvalidArgument>("forward: token {} deferred twice", d.index);
      seen[static_cast<size_t>(d.index)] = true;
    }
  }
  validate_layouts(b);
}

void Decoder::stage(const void* data, Shape shape, DType dtype, Tensor* out) {
  TACHYON_CHECK(dtype_size(dtype) == 4, "stage: {} is not a 4-byte type", dtype_name(dtype));
  const int64_t offset = static_cast<int64_t>(h_staged_.size());
  const int64_t n = shape_numel(shape);
  constexpr int64_t kAlignWords = 64;  // 256 bytes
  h_staged_.resize(static_cast<size_t>(offset + (n + kAlignWords - 1) / kAlignWords * kAlignWords));
  if (n > 0) std::memcpy(h_staged_.data() + offset, data, static_cast<size_t>(n) * 4);
  pieces_.push_back(StagedPiece{offset, std::move(shape), dtype, out});
}

void Decoder::upload_staged() {
  const int64_t words = std::max<int64_t>(static_cast<int64_t>(h_staged_.size()), 1);
  staged_.view(*be_, 1, words, DType::kI32);  // ensure capacity
  Tensor all = be_->upload(h_staged_.data(), {static_cast<int64_t>(h_staged_.size())}, DType::kI32,
                           staged_.storage);
  auto* base = static_cast<int32_t*>(all.raw());
  for (const StagedPiece& piece : pieces_)
    *piece.out =
        Tensor::wrap(base + piece.offset, piece.shape, piece.dtype, all.owner(), all.device());
  h_staged_.clear();
  pieces_.clear();
}

void Decoder::ensure_rope_rows(int64_t n) {
  const int64_t have = rope_rows_ ? rope_rows_.dim(0) : 0;
  if (n <= have) return;
  const int64_t rows = std::max(n, std::min(2 * have, int64_t{cfg_.max_seq_len}));
  const int32_t rot = rope_->dim();
  std::vector<float> host(static_cast<size_t>(rows * rot));
  rope_->rows(static_cast<int32_t>(rows), host.data());
  rope_rows_ = be_->upload(host.data(), {rows, rot}, DType::kF32, {});
}

void Decoder::stage_metadata(const ForwardBatch& b, int64_t live_tokens, bool gather_rope) {
  const int64_t T = b.num_tokens();
  const int32_t S = b.num_seqs();
  h_slots_.resize(static_cast<size_t>(T));
  h_seq_len_.resize(static_cast<size_t>(T));
  int32_t max_q = 0, max_ctx = 0;
  const bool rope_at_prompt = cfg_.position == PositionType::kRotary &&
                              rope_uses_prompt_length(cfg_.rope) && !b.prompt_lens.empty();
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = b.query_start[s + 1] - b.query_start[s], ctx = b.context_lens[s];
    const int32_t rope_len = rope_at_prompt ? b.prompt_lens[s] : ctx;
    max_q = std::max(max_q, q);
    max_ctx = std::max(max_ctx, ctx);
    for (int32_t i = 0; i < q; ++i) {
      const int64_t t = b.query_start[s] + i;
      const int32_t idx = ctx - q + i;
      h_slots_[t] = t >= live_tokens
                        ? -1
                        : b.block_tables[int64_t{s} * b.max_blocks_per_seq + idx / block_size_] *
                                  block_size_ +
                              idx % block_size_;
      h_seq_len_[t] = rope_len;
    }
  }
  auto stage_i32 = [&](const std::vector<int32_t>& v, Tensor* out) {
    stage(v.data(), {static_cast<int64_t>(v.size())}, DType::kI32, out);
  };
  stage_i32(b.query_start, &meta_.query_start);
  stage_i32(b.context_lens, &meta_.context_lens);
  stage_i32(b.block_tables, &meta_.block_tables);
  meta_.num_seqs = S;
  meta_.max_blocks_per_seq = b.max_blocks_per_seq;
  meta_.max_query_len = max_q;
  meta_.max_context_len = max_ctx;
  meta_.host_query_start = &b.query_start;
  meta_.host_context_lens = &b.context_lens;
  stage_prefix_lens(b);
  stage_i32(h_slots_, &slots_t_);
  logn_active_ = false;
  if (cfg_.logn_scaling_len > 0) {
    // log(p + 1) / log(n) past the training length n, 1 before it.
    h_logn_.assign(static_cast<size_t>(T), 1.f);
    const double log_n = std::log(static_cast<double>(cfg_.logn_scaling_len));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p1 = int64_t{b.positions[t]} + 1;
      if (p1 > cfg_.logn_scaling_len) {
        h_logn_[t] = static_cast<float>(std::log(static_cast<double>(p1)) / log_n);
        logn_active_ = true;
      }
    }
    if (logn_active_)
      stage(h_logn_.data(), {T}, DType::kF32, &logn_t_);
    else
      logn_t_ = Tensor();
  }
  rope_gather_ = false;
  if (cfg_.position == PositionType::kRotary && gather_rope && rope_gather_rows_ > 0 &&
      T >= rope_gather_rows_ && rope_->position_only()) {
    int32_t max_pos = 0;
    for (int32_t p : b.positions) max_pos = std::max(max_pos, p);
    ensure_rope_rows(int64_t{max_pos} + 1);  // validated: below max_seq_len
    stage_i32(b.positions, &rope_pos_t_);
    rope_gather_ = true;
  }
  if (cfg_.position == PositionType::kRotary && !rope_gather_) {
    const int32_t rot = rope_->dim();
    h_cos_sin_.resize(static_cast<size_t>(T * rot));
    if (cfg_.glm_2d_positions()) {
      rotary_positions(b);
      rope_->fill(h_pos_.data(), h_seq_len_.data(), T, h_cos_sin_.data(), h_block_.data());
    } else {
      rope_->fill(b.positions.data(), h_seq_len_.data(), T, h_cos_sin_.data());
    }
    stage(h_cos_sin_.data(), {T, rot}, DType::kF32, &cos_sin_t_);
  }
}

Tensor Decoder::forward(const ForwardBatch& b) {
  Tensor logits = device_logits(b);
  if (logits.device().is_cpu()) return logits;
  // Straight into a pooled host buffer (pinned on a GPU; reused once the caller drops the
  // result): no second copy of the rows on the host.
  Tensor buf = host_buffer(logits.numel(), DType::kF32);
  Tensor out = Tensor::wrap(buf.raw(), logits.shape(), DType::kF32, buf.owner(), buf.device());
  be_->download_async(logits, out.raw());
  be_->wait_fence(be_->fence());
  return out;
}

Tensor Decoder::device_logits(const ForwardBatch& b) {
  validate(b);
  const int64_t T = b.num_tokens();
  const int64_t R = static_cast<int64_t>(b.logits_rows.size());
  const int64_t V = cfg_.vocab_size;
  if (T == 0) return be_->alloc({R, V}, DType::kF32);  // R is 0 (validated)
  if (graph_eligible(b)) return forward_graph(b);
  stage_metadata(b, T);
  stage_inputs(b);
  upload_staged();
  take_deferred();
  Tensor logits = be_->alloc({R, V}, DType::kF32);
  compute(T, R, logits);
  return logits;
}

void Decoder::stage_inputs(const ForwardBatch& b) {
  const int64_t T = b.num_tokens();
  const int64_t R = static_cast<int64_t>(b.logits_rows.size());
  stage(b.token_ids.data(), {T}, DType::kI32, &ids_t_);
  if (cfg_.position == PositionType::kLearned) stage(b.positions.data(), {T}, DType::kI32, &pos_t_);
  // Rows that are the step's rows in order (every decode graph step) need no gather.
  bool in_order = R == T;
  for (int64_t r = 0; in_order && r < R; ++r) in_order = b.logits_rows[r] == r;
  if (R > 0 && !in_order)
    stage(b.logits_rows.data(), {R}, DType::kI32, &rows_t_);
  else
    rows_t_ = Tensor();
  // Last: the pieces before keep their places whether or not a step has deferred tokens
  // (the step graphs were recorded on those places).
  static_assert(sizeof(DeferredToken) == 2 * sizeof(int32_t));
  if (!b.deferred.empty())
    stage(b.deferred.data(), {static_cast<int64_t>(b.deferred.size()), 2}, DType::kI32,
          &deferred_t_);
  else
    deferred_t_ = Tensor();
}

void Decoder::take_deferred() {
  if (deferred_t_) be_->scatter_ids(last_ids_, deferred_t_, ids_t_);
}

void Decoder::compute(int64_t T, int64_t R, Tensor& logits) {
  const int64_t D = cfg_.hidden_size;
  // Embeddings.
  const Tensor& ids = ids_t_;
  Tensor residual = residual_.view(*be_, T, D);
  const float escale = static_cast<float>(cfg_.embedding_scale);
  if (w_.project_in) {
    Tensor e = embed_.view(*be_, T, cfg_.embed_dim());
    be_->embedding(w_.embedding, ids, 0, escale, false, e);
    be_->linear(e, w_.project_in.w, Tensor(), residual);
  } else {
    be_->embedding(w_.embedding, ids, 0, escale, false, residual);
  }
  if (cfg_.position == PositionType::kLearned)
    be_->embedding(w_.pos_embedding, pos_t_, cfg_.learned_pos_offset, 1.f, true, residual);
  if (cfg_.embedding_norm) be_->add_norm(residual, Tensor(), Tensor(), w_.embed_norm, residual);

  if (rope_gather_) {
    cos_sin_t_ = rope_gathered_.view(*be_, T, rope_->dim(), DType::kF32);
    be_->embedding(rope_rows_, rope_pos_t_, 0, 1.f, false, cos_sin_t_);
    ++rope_gathers_;
  }

  Tensor h = h_.view(*be_, T, D);
  Tensor o = o_.view(*be_, T, D);
  Tensor m = mlp_.view(*be_, T, D);
  Tensor pending1, pending2;
  squares_ = RowSquares{};
  const float rscale = static_cast<float>(cfg_.residual_scale);
  for (int l = 0; l < cfg_.layer_num; ++l) {
    const LayerWeights& L = w_.layers[l];
    if (cfg_.residual_from_norm) {
      // h = s * n1(x) + attn(n1(x)); x' = s * n2(h) + mlp(n2(h)).
      be_->add_norm(residual, Tensor(), Tensor(), L.attn_norm, h);
      attention_block(l, h, o);
      be_->scale_add(h, rscale, o, residual);
      be_->add_norm(residual, Tensor(), Tensor(), L.mlp_norm, h);
      mlp_block(l, h, m);
      be_->scale_add(h, rscale, m, residual);
      continue;
    }
    if (cfg_.post_norm) {
      attention_block(l, residual, o);
      be_->add_norm(residual, o, Tensor(), L.attn_norm, residual);
      mlp_block(l, residual, m);
      be_->add_norm(residual, m, Tensor(), L.mlp_norm, residual);
      continue;
    }
    if (!cfg_.parallel_residual && !cfg_.sandwich_norm) {
      // The o and down projections add into the residual stream themselves where the
      // backend can (the next norm then reads one tensor instead of two). With the norms
      // folded, a product may normalise the residual's rows itself (no norm pass).
      bool o_added;
      if (norms_folded_ && !pending1 && !pending2) {
        o_added = attention_block(l, residual, o, &residual, &L.attn_norm);
      } else {
        be_->add_norm(residual, pending1, pending2, L.attn_norm, h);
        squares_ = RowSquares{};
        o_added = attention_block(l, h, o, &residual);
      }
      bool m_added;
      if (norms_folded_ && o_added) {
        m_added = mlp_block(l, residual, m, &residual, &L.mlp_norm);
      } else {
        be_->add_norm(residual, o_added ? Tensor() : o, Tensor(), L.mlp_norm, h);
        squares_ = RowSquares{};
        m_added = mlp_block(l, h, m, &residual);
      }
      pending1 = m_added ? Tensor() : m;
      pending2 = Tensor();
      continue;
    }
    be_->add_norm(residual, pending1, pending2, L.attn_norm, h);
    if (cfg_.parallel_residual) {
      attention_block(l, h, o);
      if (cfg_.parallel_shared_norm) {
        mlp_block(l, h, m);
      } else {
        Tensor h2 = h2_.view(*be_, T, D);
        be_->add_norm(residual, Tensor(), Tensor(), L.mlp_norm, h2);
        mlp_block(l, h2, m);
      }
      pending1 = o;
      pending2 = m;
    } else {  // sandwich_norm
      attention_block(l, h, o);
      be_->add_norm(o, Tensor(), Tensor(), L.post_attn_norm, o);
      be_->add_norm(residual, o, Tensor(), L.mlp_norm, h);
      mlp_block(l, h, m);
      be_->add_norm(m, Tensor(), Tensor(), L.post_mlp_norm, m);
      pending1 = m;
      pending2 = Tensor();
    }
  }
  Tensor final_h = residual;
  if (cfg_.final_norm) {
    be_->add_norm(residual, pending1, pending2, w_.final_norm, h);
    final_h = h;
  } else {
    if (pending1) be_->add(residual, pending1, residual);
    if (pending2) be_->add(residual, pending2, residual);
  }

  // Logits for the requested rows only.
  if (R == 0) return;
  Tensor g = final_h;
  if (rows_t_) {
    g = final_.view(*be_, R, D);
    be_->gather_rows(final_h, rows_t_, g);
  }
  if (w_.project_out) {
    Tensor gp = final_proj_.view(*be_, R, cfg_.embed_dim());
    be_->linear(g, w_.project_out.w, Tensor(), gp);
    g = gp;
  }
  be_->linear(g, w_.lm_head.w, w_.lm_head.b, logits);
  if (cfg_.final_softcap > 0) be_->softcap(logits, static_cast<float>(cfg_.final_softcap));
}

bool Decoder::attention_block(int l, const Tensor& in, Tensor& out, Tensor* add_into,
                              const NormParams* rms) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = in.dim(0);
  Tensor qkv = qkv_.view(*be_, T, layout_.row_cols());
  const bool rotary = cfg_.position == PositionType::kRotary;
  // The product, the rotary and the cache write in one pass, where nothing else touches
  // the rows between them (and, given rms, the rows' normalisation).
  const RowRms row_rms{rms != nullptr ? rms->eps : 0.f, &squares_};
  const bool fused =
      L.qkv && rotary && cfg_.clip_qkv <= 0 && !cfg_.qk_norm && !logn_active_ &&
      be_->linear_rotary_kv(in, L.qkv.w, L.qkv.b, qkv, layout_, cos_sin_t_, cfg_.rope.style,
                            rope_->dim(), slots_t_, kv_[l], rms != nullptr ? &row_rms : nullptr);
  const Tensor h = rms != nullptr && !fused ? normed(in, *rms) : in;
  if (!fused) {
    if (L.qkv) {
      be_->linear(h, L.qkv.w, L.qkv.b, qkv);
    } else {
      be_->linear(h, L.q.w, L.q.b, qkv, 0);
      be_->linear(h, L.k.w, L.k.b, qkv, layout_.q_cols());
      be_->linear(h, L.v.w, L.v.b, qkv, layout_.q_cols() + layout_.kv_cols());
    }
    if (cfg_.clip_qkv > 0) be_->clamp(qkv, static_cast<float>(cfg_.clip_qkv));
    if (cfg_.qk_norm) be_->qk_norm(qkv, layout_, L.q_norm, L.k_norm);
    if (logn_active_) be_->scale_queries(qkv, layout_, logn_t_);
    if (rotary)
      be_->rotary_write_kv(qkv, layout_, cos_sin_t_, cfg_.rope.style, rope_->dim(), slots_t_,
                           kv_[l]);
    else
      be_->write_kv(qkv, layout_, slots_t_, kv_[l]);
  }
  Tensor attn = attn_.view(*be_, T, layout_.q_cols());
  be_->attention(qkv, layout_, kv_[l], meta_, attn_params_[l], attn);
  if (add_into != nullptr && be_->linear_add(attn, L.o.w, L.o.b, *add_into, squares_out()))
    return true;
  be_->linear(attn, L.o.w, L.o.b, out);
  return false;
}

bool Decoder::mlp_block(int l, const Tensor& in, Tensor& out, Tensor* add_into,
                        const NormParams* rms) {
  const LayerWeights& L = w_.layers[l];
  const int64_t T = in.dim(0);
  Tensor h = in;
  if (rms != nullptr) {
    // gate/up with the gated activation and the rows' normalisation in one product, or
    // the weightless norm's pass first.
    const RowRms row_rms{rms->eps, &squares_};
    Tensor a = act_.view(*be_, T, cfg_.inter_size);
    if (cfg_.gated_mlp && L.gate_up &&
        be_->linear_gated(in, L.gate_up.w, L.gate_up.b, cfg_.activation, a, &row_rms))
      return down_block(l, a, out, add_into);
    h = normed(in, *rms);
  }
  if (cfg_.is_moe(l)) {
    const int32_t E = cfg_.moe.num_experts, K = cfg_.moe.top_k;
    Tensor logits = router_.view(*be_, T, E);
    be_->linear(h, L.router.w, Tensor(), logits);
    Tensor ids = moe_ids_.view(*be_, T, K, DType::kI32);
    Tensor wts = moe_w_.view(*be_, T, K, DType::kF32);
    be_->moe_route(logits, K, cfg_.moe.norm_topk_prob, ids, wts);
    be_->moe_experts(h, ids, wts, L.experts, cfg_.activation, false, out);
    if (cfg_.moe.shared_inter_size > 0) {
      const int64_t Is = cfg_.moe.shared_inter_size;
      Tensor gu = gate_up_.view(*be_, T, 2 * Is);
      be_->linear(h, L.shared_gate.w, Tensor(), gu, 0);
      be_->linear(h, L.shared_up.w, Tensor(), gu, Is);
      Tensor a = act_.view(*be_, T, Is);
      be_->gated_activation(gu, cfg_.activation, a);
      Tensor sh = shared_.view(*be_, T, cfg_.hidden_size);
      be_->linear(a, L.shared_down.w, Tensor(), sh);
      if (L.shared_expert_gate) {
        Tensor gl = shared_logit_.view(*be_, T, 1);
        be_->linear(h, L.shared_expert_gate.w, Tensor(), gl);
        be_->add_sigmoid_gated(sh, gl, out);
      } else {
        be_->add(out, sh, out);
      }
    }
    return false;
  }
  const int64_t I = cfg_.inter_size;
  Tensor a = act_.view(*be_, T, I);
  if (cfg_.gated_mlp) {
    Tensor gu = gate_up_.view(*be_, T, 2 * I);
    if (L.gate_up && be_->linear_gated(h, L.gate_up.w, L.gate_up.b, cfg_.activation, a)) {
      // gate, up and the activation in one product
    } else if (L.gate_up) {
      be_->linear(h, L.gate_up.w, L.gate_up.b, gu);
      be_->gated_activation(gu, cfg_.activation, a);
    } else {
      be_->linear(h, L.gate.w, L.gate.b, gu, 0);
      be_->linear(h, L.up.w, L.up.b, gu, I);
      be_->gated_activation(gu, cfg_.activation, a);
    }
  } else {
    be_->linear(h, L.up.w, L.up.b, a, 0, cfg_.activation);
  }
  return down_block(l, a, out, add_into);
}

Tensor Decoder::normed(const Tensor& in, const NormParams& norm) {
  Tensor h = h_.view(*be_, in.dim(0), cfg_.hidden_size);
  Tensor residual = in;  // (no deltas: read only)
  be_->add_norm(residual, Tensor(), Tensor(), norm, h);
  return h;
}

bool Decoder::down_block(int l, const Tensor& a, Tensor& out, Tensor* add_into) {
  const LayerWeights& L = w_.layers[l];
  if (add_into != nullptr && be_->linear_add(a, L.down.w, L.down.b, *add_into, squares_out()))
    return true;
  be_->linear(a, L.down.w, L.down.b, out);
  return false;
}

}  // namespace tachyon
