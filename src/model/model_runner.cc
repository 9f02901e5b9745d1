// The runner's step: the batch checked, its metadata staged and uploaded in one copy,
// the decoder's math on it; and the paged KV cache with its swap space.
#include "model/model_runner.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/settings.h"

namespace tachyon {

ModelRunner::ModelRunner(ModelConfig config, ModelWeights weights, std::unique_ptr<Backend> backend)
    : be_(std::move(backend)),
      decoder_(std::move(config), std::move(weights), *be_),
      cfg_(decoder_.config()) {
  if (cfg_.position == PositionType::kRotary) rope_ = std::make_unique<RopeTable>(cfg_.rope);
  if (!setting_env_bool("graphs")) graphs_on_ = false;
  if (be_->device().is_cpu()) graphs_on_ = false;
  all_sliding_ = cfg_.sliding_window > 0;
  for (int l = 0; l < cfg_.layer_num; ++l) all_sliding_ = all_sliding_ && cfg_.is_sliding(l);
}

size_t ModelRunner::kv_bytes_per_block(int32_t block_size) const {
  // K and V of every layer with attention, a row per token and KV head (kv_cache_shape).
  const DType kv = be_->kv_dtype();
  size_t per_token = 0;
  for (int l = 0; l < cfg_.layer_num; ++l) {
    if (!cfg_.has_attention(l)) continue;
    per_token += 2 * static_cast<size_t>(shape_numel(
                         kv_cache_shape(kv, 1, cfg_.kv_heads(l), 1, cfg_.size_per_head)));
  }
  return per_token * static_cast<size_t>(block_size) * dtype_size(kv);
}

size_t ModelRunner::workspace_bytes(int32_t max_tokens) const {
  // The decoder's activations and logits, and the graph steps' own logits buffer (a
  // padded bucket).
  const size_t t = static_cast<size_t>(std::max(max_tokens, 1));
  const size_t graph_rows =
      graphs_on_ ? std::min<size_t>(t, static_cast<size_t>(kMaxGraphBatch)) : 0;
  return decoder_.workspace_bytes(max_tokens) +
         graph_rows * static_cast<size_t>(cfg_.vocab_size) * sizeof(float);
}

void ModelRunner::init_kv_cache(int32_t num_blocks, int32_t block_size) {
  if (num_blocks <= 0 || block_size <= 0)
    raise<InvalidArgument>("init_kv_cache: {} blocks of {} tokens", num_blocks, block_size);
  kv_.clear();
  kv_.resize(static_cast<size_t>(cfg_.layer_num));
  for (int l = 0; l < cfg_.layer_num; ++l) {
    if (!cfg_.has_attention(l)) continue;  // a pruned layer without attention: no cache
    LayerKvCache& c = kv_[static_cast<size_t>(l)];
    const Shape shape = kv_cache_shape(be_->kv_dtype(), num_blocks, cfg_.kv_heads(l), block_size,
                                       cfg_.size_per_head);
    c.k = be_->alloc(shape, be_->kv_dtype());
    c.v = be_->alloc(shape, be_->kv_dtype());
    be_->fill_zero(c.k);
    be_->fill_zero(c.v);
  }
  block_size_ = block_size;
  num_blocks_ = num_blocks;
  graphs_.clear();
  swap_.clear();
}

bool ModelRunner::can_grow_kv_cache() const {
  return be_->device().is_cpu();
}

void ModelRunner::grow_kv_cache(int32_t num_blocks) {
  if (!can_grow_kv_cache())
    raise<InvalidArgument>("grow_kv_cache: the KV cache on {} cannot grow", be_->device().str());
  if (kv_.empty()) raise<InvalidArgument>("grow_kv_cache: the KV cache is not initialised");
  if (num_blocks < num_blocks_)
    raise<InvalidArgument>("grow_kv_cache: {} blocks is fewer than the {} it has", num_blocks,
                           num_blocks_);
  if (num_blocks == num_blocks_) return;
  // New, larger tensors (zeroed like init_kv_cache's), blocks [0, old) copied in: blocks
  // are the outer dimension, so they are the tensors' leading bytes. Host memory.
  for (LayerKvCache& c : kv_) {
    if (!c.k) continue;
    for (Tensor* t : {&c.k, &c.v}) {
      Shape shape = t->shape();
      shape[0] = num_blocks;
      Tensor bigger = be_->alloc(shape, be_->kv_dtype());
      be_->fill_zero(bigger);
      std::memcpy(bigger.raw(), t->raw(), t->nbytes());
      *t = std::move(bigger);
    }
  }
  num_blocks_ = num_blocks;
}

bool ModelRunner::init_kv_swap(int32_t num_blocks) {
  if (kv_.empty()) raise<InvalidArgument>("init_kv_swap: the KV cache is not initialised");
  if (num_blocks < 0) raise<InvalidArgument>("init_kv_swap: {} blocks", num_blocks);
  swap_.clear();
  if (num_blocks == 0) return true;
  std::vector<LayerKvCache> swap(kv_.size());
  for (size_t l = 0; l < kv_.size(); ++l) {
    if (!kv_[l].k) continue;
    Shape shape = kv_[l].k.shape();
    shape[0] = num_blocks;
    swap[l].k = be_->alloc_swap(shape, be_->kv_dtype());
    swap[l].v = be_->alloc_swap(shape, be_->kv_dtype());
  }
  swap_ = std::move(swap);
  return true;
}

void ModelRunner::swap_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& out,
                                 const std::vector<std::pair<int32_t, int32_t>>& in) {
  if (out.empty() && in.empty()) return;
  if (swap_.empty()) raise<InvalidArgument>("swap_kv_blocks: no swap space (init_kv_swap)");
  for (size_t l = 0; l < kv_.size(); ++l) {
    if (!kv_[l].k) continue;
    be_->copy_blocks_between(kv_[l].k, swap_[l].k, out);
    be_->copy_blocks_between(kv_[l].v, swap_[l].v, out);
  }
  for (size_t l = 0; l < kv_.size(); ++l) {
    if (!kv_[l].k) continue;
    be_->copy_blocks_between(swap_[l].k, kv_[l].k, in);
    be_->copy_blocks_between(swap_[l].v, kv_[l].v, in);
  }
}

void ModelRunner::copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (auto& c : kv_) {
    if (!c.k) continue;
    be_->copy_blocks(c.k, src_dst);
    be_->copy_blocks(c.v, src_dst);
  }
}

void ModelRunner::validate(const ForwardBatch& b) const {
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
  const int32_t nb = num_blocks_;
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
  for (int32_t r : b.hidden_rows)
    if (r < 0 || r >= T) raise<InvalidArgument>("forward: hidden row {} out of [0, {})", r, T);
  validate_embeddings(b);
  validate_tree_masks(b);
  if (!b.adapter_ids.empty()) {
    if (static_cast<int32_t>(b.adapter_ids.size()) != S)
      raise<InvalidArgument>("forward: {} adapter ids for {} sequences", b.adapter_ids.size(), S);
    for (int32_t id : b.adapter_ids)
      if (id != 0 && (!lora_ || !lora_->has(id)))
        raise<InvalidArgument>("forward: no adapter {} loaded", id);
  }
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

void ModelRunner::validate_embeddings(const ForwardBatch& b) const {
  if (b.embeddings.empty()) return;
  const int64_t T = b.num_tokens();
  const int64_t E = cfg_.embed_dim();
  std::vector<bool> taken(static_cast<size_t>(T));
  for (const InjectedEmbeddings& e : b.embeddings) {
    const Tensor& v = e.values;
    if (!v || v.ndim() != 2 || v.dim(1) != E || v.dtype() != DType::kF32 || !v.device().is_cpu())
      raise<InvalidArgument>(
          "forward: injected embeddings at row {} must be f32 [n, {}] on the host, not {}", e.row,
          E, v ? v.str() : std::string("empty"));
    const int64_t n = v.dim(0);
    if (e.row < 0 || e.row + n > T)
      raise<InvalidArgument>("forward: injected embeddings rows {} .. {} out of [0, {})", e.row,
                             e.row + n - 1, T);
    for (int64_t r = e.row; r < e.row + n; ++r) {
      if (taken[static_cast<size_t>(r)])
        raise<InvalidArgument>("forward: row {} has injected embeddings twice", r);
      taken[static_cast<size_t>(r)] = true;
    }
  }
}

void ModelRunner::stage(const void* data, Shape shape, DType dtype, Tensor* out) {
  TACHYON_CHECK(dtype_size(dtype) == 4, "stage: {} is not a 4-byte type", dtype_name(dtype));
  const int64_t offset = static_cast<int64_t>(h_staged_.size());
  const int64_t n = shape_numel(shape);
  constexpr int64_t kAlignWords = 64;  // 256 bytes
  h_staged_.resize(static_cast<size_t>(offset + (n + kAlignWords - 1) / kAlignWords * kAlignWords));
  if (n > 0) std::memcpy(h_staged_.data() + offset, data, static_cast<size_t>(n) * 4);
  pieces_.push_back(StagedPiece{offset, std::move(shape), dtype, out});
}

void ModelRunner::upload_staged() {
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

void ModelRunner::ensure_rope_rows(int64_t n) {
  const int64_t have = rope_rows_ ? rope_rows_.dim(0) : 0;
  if (n <= have) return;
  const int64_t rows = std::max(n, std::min(2 * have, int64_t{cfg_.max_seq_len}));
  const int32_t rot = rope_->dim();
  std::vector<float> host(static_cast<size_t>(rows * rot));
  rope_->rows(static_cast<int32_t>(rows), host.data());
  rope_rows_ = be_->upload(host.data(), {rows, rot}, DType::kF32, {});
}

void ModelRunner::stage_metadata(const ForwardBatch& b, int64_t live_tokens, bool gather_rope) {
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
  stage_i32(b.query_start, &in_.meta.query_start);
  stage_i32(b.context_lens, &in_.meta.context_lens);
  stage_i32(b.block_tables, &in_.meta.block_tables);
  in_.meta.num_seqs = S;
  in_.meta.max_blocks_per_seq = b.max_blocks_per_seq;
  in_.meta.max_query_len = max_q;
  in_.meta.max_context_len = max_ctx;
  in_.meta.host_query_start = &b.query_start;
  in_.meta.host_context_lens = &b.context_lens;
  stage_prefix_lens(b);
  stage_tree_masks(b);
  stage_i32(h_slots_, &in_.slots);
  if (cfg_.logn_scaling_len > 0) {
    // log(p + 1) / log(n) past the training length n, 1 before it.
    bool logn_active = false;  // some token of this step is past logn_scaling_len
    h_logn_.assign(static_cast<size_t>(T), 1.f);
    const double log_n = std::log(static_cast<double>(cfg_.logn_scaling_len));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t p1 = int64_t{b.positions[t]} + 1;
      if (p1 > cfg_.logn_scaling_len) {
        h_logn_[t] = static_cast<float>(std::log(static_cast<double>(p1)) / log_n);
        logn_active = true;
      }
    }
    if (logn_active)
      stage(h_logn_.data(), {T}, DType::kF32, &in_.logn);
    else
      in_.logn = Tensor();
  }
  in_.rope_rows = in_.rope_positions = Tensor();
  if (cfg_.position == PositionType::kRotary && gather_rope && rope_gather_rows_ > 0 &&
      T >= rope_gather_rows_ && rope_->position_only()) {
    int32_t max_pos = 0;
    for (int32_t p : b.positions) max_pos = std::max(max_pos, p);
    ensure_rope_rows(int64_t{max_pos} + 1);  // validated: below max_seq_len
    stage_i32(b.positions, &in_.rope_positions);
    in_.rope_rows = rope_rows_;
    in_.cos_sin = Tensor();  // the decoder gathers them
  } else if (cfg_.position == PositionType::kRotary) {
    const int32_t rot = rope_->dim();
    h_cos_sin_.resize(static_cast<size_t>(T * rot));
    if (cfg_.glm_2d_positions()) {
      rotary_positions(b);
      rope_->fill(h_pos_.data(), h_seq_len_.data(), T, h_cos_sin_.data(), h_block_.data());
    } else {
      rope_->fill(b.positions.data(), h_seq_len_.data(), T, h_cos_sin_.data());
    }
    stage(h_cos_sin_.data(), {T, rot}, DType::kF32, &in_.cos_sin);
  }
}

Tensor ModelRunner::forward(const ForwardBatch& b) {
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

Tensor ModelRunner::device_logits(const ForwardBatch& b) {
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
  if (in_.rope_rows) ++rope_gathers_;
  compute(logits);
  return logits;
}

void ModelRunner::stage_inputs(const ForwardBatch& b) {
  const int64_t T = b.num_tokens();
  const int64_t R = static_cast<int64_t>(b.logits_rows.size());
  stage(b.token_ids.data(), {T}, DType::kI32, &in_.ids);
  if (cfg_.position == PositionType::kLearned)
    stage(b.positions.data(), {T}, DType::kI32, &in_.positions);
  // Rows that are the step's rows in order (every decode graph step) need no gather.
  bool in_order = R == T;
  for (int64_t r = 0; in_order && r < R; ++r) in_order = b.logits_rows[r] == r;
  if (R > 0 && !in_order)
    stage(b.logits_rows.data(), {R}, DType::kI32, &in_.logits_rows);
  else
    in_.logits_rows = Tensor();
  stage_lora(b);
  // Last: the pieces before keep their places whether or not a step has deferred tokens
  // (the step graphs were recorded on those places).
  static_assert(sizeof(DeferredToken) == 2 * sizeof(int32_t));
  if (!b.deferred.empty())
    stage(b.deferred.data(), {static_cast<int64_t>(b.deferred.size()), 2}, DType::kI32,
          &deferred_t_);
  else
    deferred_t_ = Tensor();
  // Fields no graph step has (graph_eligible).
  in_.hidden_rows = Tensor();
  if (!b.hidden_rows.empty())
    stage(b.hidden_rows.data(), {static_cast<int64_t>(b.hidden_rows.size())}, DType::kI32,
          &in_.hidden_rows);
  in_.inject_rows = in_.inject_values = Tensor();
  if (!b.embeddings.empty()) {
    const int64_t E = cfg_.embed_dim();
    h_inject_rows_.clear();
    h_inject_values_.clear();
    for (const InjectedEmbeddings& e : b.embeddings) {
      const int64_t n = e.values.dim(0);
      for (int64_t i = 0; i < n; ++i) h_inject_rows_.push_back(static_cast<int32_t>(e.row + i));
      const float* v = e.values.data<float>();
      h_inject_values_.insert(h_inject_values_.end(), v, v + n * E);
    }
    const int64_t n = static_cast<int64_t>(h_inject_rows_.size());
    stage(h_inject_rows_.data(), {n}, DType::kI32, &in_.inject_rows);
    stage(h_inject_values_.data(), {n, E}, DType::kF32, &in_.inject_values);
  }
}

void ModelRunner::take_deferred() {
  if (deferred_t_) be_->scatter_ids(last_ids_, deferred_t_, in_.ids);
}

}  // namespace tachyon
