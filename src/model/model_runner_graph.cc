// Decode and verify steps as replayed device graphs. A step whose sequences all compute
// the same number of tokens Q (1: decode; up to kMaxGraphQueries: a sequence's last token
// and its draft tokens, chained or in a tree mask) and want the logits of every token is
// padded to a batch bucket; its metadata goes into the runner's device buffers in place
// (block tables repacked to a width fixed by the context bucket, attention hints set to
// the bucket), and the recorded kernels of that (batch, context, Q, tree, adapters)
// bucket run again. Padding sequences have context Q on block 0 and write no K/V; their
// logits rows are dropped. (Such a step never has a query inside a bidirectional
// context, so the graphs never carry prefix lengths.) The first step of a bucket runs
// eagerly (sizing every buffer and scratch), then is recorded; a graph whose buffers
// have moved since (a larger step regrew them) is recorded again.
// (The runner's graph steps apart from its eager step, model_runner.cc: the padding,
// the buckets and the recordings are one part of the runner that the rest never reads.)
#include <algorithm>

#include "core/error.h"
#include "model/model_runner.h"

namespace tachyon {
namespace {

int32_t batch_bucket(int32_t s) {
  static constexpr int32_t kBuckets[] = {1,   2,   4,   8,   16,  24,  32,  48,  64,
                                         80,  96,  112, 128, 160, 192, 224, 256, 288,
                                         320, 352, 384, 416, 448, 480, 512};
  for (int32_t b : kBuckets)
    if (s <= b) return b;
  return s;
}

// Multiples of 512 up to 8192 tokens, then powers of two.
int32_t context_bucket(int32_t ctx) {
  if (ctx <= 8192) return std::max<int32_t>(512, (ctx + 511) / 512 * 512);
  int64_t b = 8192;
  while (b < ctx) b *= 2;
  return static_cast<int32_t>(b);
}

}  // namespace

bool ModelRunner::graph_eligible(const ForwardBatch& b) const {
  if (!graphs_on_ || kv_.empty()) return false;
  const int32_t S = b.num_seqs();
  if (S <= 0 || S > kMaxGraphBatch || b.num_tokens() % S != 0) return false;
  const int32_t Q = b.num_tokens() / S;
  if (Q > kMaxGraphQueries || int64_t{batch_bucket(S)} * Q > kMaxGraphBatch) return false;
  if (static_cast<int32_t>(b.logits_rows.size()) != S * Q) return false;
  if (!b.embeddings.empty() || !b.hidden_rows.empty()) return false;
  for (int32_t s = 0; s <= S; ++s)
    if (b.query_start[s] != s * Q) return false;
  for (int32_t r = 0; r < S * Q; ++r)
    if (b.logits_rows[r] != r) return false;
  // Steps that go through host memory (log-n query scaling, MoE routing) stay eager.
  if (cfg_.logn_scaling_len > 0 || cfg_.moe.num_experts > 0) return false;
  int32_t max_ctx = 0;
  for (int32_t c : b.context_lens) max_ctx = std::max(max_ctx, c);
  if (context_bucket(max_ctx) > cfg_.max_seq_len + 512) return false;
  return true;
}

std::vector<const void*> ModelRunner::buffer_addresses() const {
  std::vector<const void*> a = {staged_.storage.raw()};
  decoder_.buffer_addresses(a);  // the activations
  a.push_back(graph_logits_.storage.raw());
  // The staged pieces (their offsets in staged_ follow the step's shapes).
  for (const Tensor* t : {&in_.ids, &in_.positions, &in_.logits_rows, &in_.slots, &in_.cos_sin,
                          &in_.logn, &in_.meta.query_start, &in_.meta.context_lens,
                          &in_.meta.block_tables, &in_.meta.prefix_lens, &in_.meta.tree_mask,
                          &in_.meta.tree_mask_start, &in_.lora.row_slots, &in_.lora.arena})
    a.push_back(t->raw());
  for (const LayerKvCache& c : kv_) {
    a.push_back(c.k.raw());
    a.push_back(c.v.raw());
  }
  return a;
}

Tensor ModelRunner::forward_graph(const ForwardBatch& b) {
  const int32_t S = b.num_seqs();
  const int32_t Q = b.num_tokens() / S;  // tokens per sequence (graph_eligible)
  const int32_t B = batch_bucket(S);
  int32_t max_ctx = 0;
  for (int32_t c : b.context_lens) max_ctx = std::max(max_ctx, c);
  const int32_t C = context_bucket(max_ctx);
  const int32_t W = (C + block_size_ - 1) / block_size_;
  const int64_t V = cfg_.vocab_size;

  ForwardBatch& p = padded_;
  p.token_ids.assign(b.token_ids.begin(), b.token_ids.end());
  p.positions.assign(b.positions.begin(), b.positions.end());
  p.context_lens.assign(b.context_lens.begin(), b.context_lens.end());
  p.prompt_lens.clear();
  if (!b.prompt_lens.empty()) p.prompt_lens.assign(b.prompt_lens.begin(), b.prompt_lens.end());
  p.layouts.assign(b.layouts.begin(), b.layouts.end());
  p.max_blocks_per_seq = W;
  p.block_tables.assign(static_cast<size_t>(B) * W, -1);
  const int32_t copy = std::min(W, b.max_blocks_per_seq);
  for (int32_t s = 0; s < S; ++s)
    std::copy_n(b.block_tables.begin() + int64_t{s} * b.max_blocks_per_seq, copy,
                p.block_tables.begin() + int64_t{s} * W);
  for (int32_t s = S; s < B; ++s) {
    for (int32_t i = 0; i < Q; ++i) {
      p.token_ids.push_back(0);
      p.positions.push_back(i);
    }
    p.context_lens.push_back(Q);
    if (!p.prompt_lens.empty()) p.prompt_lens.push_back(Q);
    // A Q-token causal context: positions (0, 0) ...
    if (!p.layouts.empty()) p.layouts.push_back(PromptLayout{Q, false, 0});
    p.block_tables[static_cast<size_t>(s) * W] = 0;
  }
  p.tree_masks.assign(b.tree_masks.begin(), b.tree_masks.end());
  if (!p.tree_masks.empty()) p.tree_masks.resize(static_cast<size_t>(B));  // causal padding
  p.deferred.assign(b.deferred.begin(), b.deferred.end());                 // same token indices
  p.adapter_ids.assign(b.adapter_ids.begin(), b.adapter_ids.end());
  if (!p.adapter_ids.empty()) p.adapter_ids.resize(static_cast<size_t>(B), 0);
  p.query_start.resize(static_cast<size_t>(B) + 1);
  p.logits_rows.resize(static_cast<size_t>(B) * Q);
  for (int32_t s = 0; s <= B; ++s) p.query_start[s] = s * Q;
  for (int32_t r = 0; r < B * Q; ++r) p.logits_rows[r] = r;

  // The recorded step reads in_.cos_sin as staged.
  stage_metadata(p, int64_t{S} * Q, /*gather_rope=*/false);
  in_.meta.max_query_len = Q;
  in_.meta.max_context_len = C;
  stage_inputs(p);
  upload_staged();
  take_deferred();  // before the graph, whose first kernel reads the ids
  Tensor logits = graph_logits_.view(*be_, int64_t{B} * Q, V, DType::kF32);

  const GraphKey key{B, C, Q, !p.tree_masks.empty(), static_cast<bool>(in_.lora.row_slots)};
  auto it = graphs_.find(key);
  bool ran = false;
  if (it != graphs_.end() && it->second.addresses == buffer_addresses())
    ran = it->second.graph->replay();
  if (ran) {
    ++graph_replays_;
  } else {
    if (it != graphs_.end()) graphs_.erase(it);
    // Eagerly (this step's result), then recorded for the next steps of the bucket.
    compute(logits);
    if (graphs_.size() >= 64) graphs_.clear();
    std::unique_ptr<DeviceGraph> g = be_->record([&] { compute(logits); });
    if (g) {
      ++graph_records_;
      graphs_[key] = StepGraph{std::move(g), buffer_addresses()};
    }
  }
  return Tensor::wrap(logits.raw(), {int64_t{S} * Q, V}, DType::kF32, logits.owner(),
                      logits.device());
}

}  // namespace tachyon
