// A fake LanguageModel with real paged-cache semantics.
//
// FakeModel keeps, per cache slot, the (token, position) written there. A forward pass
// writes each new token into the slot its block table names, then computes each
// requested row's logits from the history it reads back through the block table. So
// the logits are a pure function of the token history when the engine's paging is
// right, and a wrong block table, a missed copy-on-write or an unwritten slot changes
// the output (and is counted in violations()).
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "model/forward.h"

namespace tachyon::testing {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

using PrefixReuse = LanguageModel::PrefixReuse;

struct FakeModelOptions {
  int32_t vocab = 64;
  int32_t max_seq_len = 512;
  int32_t eos = 2;
  float eos_bias = 0.0f;      // added to the EOS logit (makes sequences shorter)
  float scale = 4.0f;         // logits spread: larger is more peaked
  int32_t poison_token = -1;  // a batch holding it throws InvalidArgument
  int32_t fault_token = -1;   // a batch holding it throws Internal (a device fault)
  int32_t delay_us = 0;       // each forward pass sleeps this long
  // >= 0: prompts are prefix-LM prompts whose bidirectional context ends at the first
  // layout_token (a prompt without one is refused); a step that computes part of a
  // context without all of it counts as a violation.
  int32_t layout_token = -1;
  bool can_grow = false;  // the KV cache can grow (LanguageModel::grow_kv_cache)
  bool can_swap = false;  // it has host blocks (LanguageModel::init_kv_swap)
  PrefixReuse prefix_reuse = PrefixReuse::kAlways;
  int32_t max_adapters = 0;  // LoRA adapters a step may use at once
};

class FakeModel : public LanguageModel {
 public:
  explicit FakeModel(FakeModelOptions o = {}) : o_(o) {}

  // The logits after `history` (the reference: no cache involved).
  static void reference_logits(std::span<const int32_t> history, const FakeModelOptions& o,
                               float* out) {
    uint64_t h = 0x1234567ull;
    for (int32_t t : history) h = mix64(h ^ (static_cast<uint64_t>(t) + 0x9e3779b97f4a7c15ull));
    for (int32_t v = 0; v < o.vocab; ++v) {
      const uint64_t r = mix64(h + static_cast<uint64_t>(v) * 0x632be59bd9b4e019ull);
      const double u = static_cast<double>(r >> 11) * 0x1.0p-53;  // [0, 1)
      out[v] = static_cast<float>((u * 2.0 - 1.0) * o.scale);
    }
    if (o.eos >= 0 && o.eos < o.vocab) out[o.eos] += o.eos_bias;
  }

  int32_t vocab_size() const override { return o_.vocab; }
  int32_t max_seq_len() const override { return o_.max_seq_len; }
  PromptLayout prompt_layout(std::span<const int32_t> prompt) const override {
    if (o_.layout_token < 0) return {};
    auto it = std::find(prompt.begin(), prompt.end(), o_.layout_token);
    if (it == prompt.end()) raise<InvalidArgument>("no context end token {}", o_.layout_token);
    return PromptLayout{static_cast<int32_t>(it - prompt.begin()), true, -1};
  }
  size_t kv_bytes_per_block(int32_t block_size) const override {
    return static_cast<size_t>(block_size) * 64;
  }
  void init_kv_cache(int32_t num_blocks, int32_t block_size) override {
    num_blocks_ = num_blocks;
    block_size_ = block_size;
    slots_.assign(static_cast<size_t>(num_blocks) * block_size, Slot{});
  }
  bool can_grow_kv_cache() const override { return o_.can_grow; }
  void grow_kv_cache(int32_t num_blocks) override {
    if (!o_.can_grow || num_blocks < num_blocks_)
      raise<InvalidArgument>("grow_kv_cache: {} blocks from {}", num_blocks, num_blocks_);
    num_blocks_ = num_blocks;
    slots_.resize(static_cast<size_t>(num_blocks) * block_size_, Slot{});
    ++grows_;
  }
  PrefixReuse prefix_reuse() const override { return o_.prefix_reuse; }
  bool init_kv_swap(int32_t num_blocks) override {
    if (!o_.can_swap) return false;
    host_slots_.assign(static_cast<size_t>(num_blocks) * block_size_, Slot{});
    return true;
  }
  void swap_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& out,
                      const std::vector<std::pair<int32_t, int32_t>>& in) override {
    const auto host_blocks = static_cast<int32_t>(host_slots_.size() / block_size_);
    auto copy = [&](std::vector<Slot>& to, int32_t dst, int32_t to_n, const std::vector<Slot>& from,
                    int32_t src, int32_t from_n) {
      if (src < 0 || src >= from_n || dst < 0 || dst >= to_n)
        raise<InvalidArgument>("swap_kv_blocks: block out of range");
      std::memcpy(&to[static_cast<size_t>(dst) * block_size_],
                  &from[static_cast<size_t>(src) * block_size_], sizeof(Slot) * block_size_);
    };
    for (auto [c, h] : out) copy(host_slots_, h, host_blocks, slots_, c, num_blocks_);
    for (auto [h, c] : in) copy(slots_, c, num_blocks_, host_slots_, h, host_blocks);
    swaps_ += static_cast<int64_t>(out.size() + in.size());
  }
  int64_t swaps() const { return swaps_; }
  int32_t num_blocks() const { return num_blocks_; }
  int64_t grows() const { return grows_; }
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override {
    for (auto [src, dst] : src_dst) {
      if (src < 0 || src >= num_blocks_ || dst < 0 || dst >= num_blocks_)
        raise<InvalidArgument>("copy_kv_blocks: block out of range");
      std::memcpy(&slots_[static_cast<size_t>(dst) * block_size_],
                  &slots_[static_cast<size_t>(src) * block_size_], sizeof(Slot) * block_size_);
    }
    copies_ += static_cast<int64_t>(src_dst.size());
  }

  Tensor forward(const ForwardBatch& b) override {
    ++forwards_;
    check(b);
    if (o_.delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(o_.delay_us));
    max_batch_tokens_ = std::max<int64_t>(max_batch_tokens_, b.num_tokens());
    for (int32_t t : b.token_ids) {
      if (t == o_.fault_token) raise<Internal>("fake device fault");
      if (t == o_.poison_token) raise<InvalidArgument>("poisoned token {}", t);
    }
    const int32_t n = b.num_seqs();
    check_layouts(b);
    if (!b.adapter_ids.empty()) {
      if (static_cast<int32_t>(b.adapter_ids.size()) != n) ++violations_;
      std::vector<int32_t> distinct;
      for (int32_t s = 0; s < n && s < static_cast<int32_t>(b.adapter_ids.size()); ++s) {
        const int32_t id = b.adapter_ids[static_cast<size_t>(s)];
        const auto first = static_cast<size_t>(b.query_start[s]);
        if (b.positions[first] == 0) adapter_log_.emplace_back(b.token_ids[first], id);
        if (id == 0) continue;
        if (std::find(adapters_.begin(), adapters_.end(), id) == adapters_.end()) ++violations_;
        if (std::find(distinct.begin(), distinct.end(), id) == distinct.end())
          distinct.push_back(id);
      }
      if (static_cast<int32_t>(distinct.size()) > o_.max_adapters) ++violations_;
    }
    // Write this step's tokens.
    for (int32_t s = 0; s < n; ++s)
      for (int32_t i = b.query_start[s]; i < b.query_start[s + 1]; ++i)
        slot(b, s, b.positions[i]) = Slot{b.token_ids[i], b.positions[i]};
    Tensor out = Tensor::empty({static_cast<int64_t>(b.logits_rows.size()), o_.vocab}, DType::kF32);
    std::vector<int32_t> history;
    for (size_t r = 0; r < b.logits_rows.size(); ++r) {
      const int32_t row = b.logits_rows[r];
      int32_t s = 0;
      while (b.query_start[s + 1] <= row) ++s;
      const int32_t pos = b.positions[row];
      history.clear();
      for (int32_t p = 0; p <= pos; ++p) {
        const Slot& sl = slot(b, s, p);
        if (sl.pos != p) ++violations_;
        history.push_back(sl.pos == p ? sl.token : -1000 - p);
      }
      reference_logits(history, o_, out.data<float>() + r * o_.vocab);
    }
    return out;
  }

  int64_t violations() const { return violations_; }

  // LoRA adapters: registered ids, and per step the adapter of each sequence (a step
  // naming an unregistered adapter, or more than max_adapters, is a violation).
  int32_t max_adapters() const override { return o_.max_adapters; }
  void add_adapter(int32_t id, std::shared_ptr<const PreparedAdapter> adapter) override {
    (void)adapter;
    if (id <= 0 || std::find(adapters_.begin(), adapters_.end(), id) != adapters_.end())
      raise<InvalidArgument>("add_adapter {}", id);
    adapters_.push_back(id);
  }
  void remove_adapter(int32_t id) override { std::erase(adapters_, id); }
  const std::vector<int32_t>& adapters() const { return adapters_; }
  // (first prompt token, adapter) of every step's sequences that start their prompt.
  const std::vector<std::pair<int32_t, int32_t>>& adapter_log() const { return adapter_log_; }
  int64_t context_steps() const { return context_steps_; }
  int64_t forwards() const { return forwards_; }
  int64_t copies() const { return copies_; }
  int64_t max_batch_tokens() const { return max_batch_tokens_; }
  const FakeModelOptions& options() const { return o_; }

 private:
  struct Slot {
    int32_t token = -1;
    int32_t pos = -1;
  };

  Slot& slot(const ForwardBatch& b, int32_t s, int32_t p) {
    const int32_t block =
        b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + p / block_size_];
    return slots_[static_cast<size_t>(block) * block_size_ + p % block_size_];
  }

  void check(const ForwardBatch& b) const {
    const int32_t n = b.num_seqs();
    auto bad = [](const char* what) { raise<InvalidArgument>("inconsistent batch: {}", what); };
    if (n < 1 || b.query_start[0] != 0 || b.query_start[n] != b.num_tokens()) bad("query_start");
    if (b.positions.size() != b.token_ids.size()) bad("positions");
    if (static_cast<int32_t>(b.context_lens.size()) != n) bad("context_lens");
    if (b.block_tables.size() != static_cast<size_t>(n) * b.max_blocks_per_seq) bad("block_tables");
    for (int32_t s = 0; s < n; ++s) {
      const int32_t q0 = b.query_start[s], q1 = b.query_start[s + 1];
      if (q1 <= q0) bad("empty sequence");
      for (int32_t i = q0; i < q1; ++i)
        if (b.positions[i] != b.context_lens[s] - (q1 - i)) bad("positions not contiguous");
      const int32_t need = (b.context_lens[s] + block_size_ - 1) / block_size_;
      if (need > b.max_blocks_per_seq) bad("block table too short");
      for (int32_t k = 0; k < b.max_blocks_per_seq; ++k) {
        const int32_t blk = b.block_tables[static_cast<size_t>(s) * b.max_blocks_per_seq + k];
        if (k < need && (blk < 0 || blk >= num_blocks_)) bad("block id out of range");
      }
    }
    for (int32_t r : b.logits_rows)
      if (r < 0 || r >= b.num_tokens()) bad("logits row");
  }

  // With layout_token: every sequence has a layout, and a step that starts inside a
  // bidirectional context covers all of it.
  void check_layouts(const ForwardBatch& b) {
    if (o_.layout_token < 0) return;
    if (static_cast<int32_t>(b.layouts.size()) != b.num_seqs()) {
      ++violations_;
      return;
    }
    for (int32_t s = 0; s < b.num_seqs(); ++s) {
      const int32_t ctx = b.context_lens[s];
      const int32_t start = ctx - (b.query_start[s + 1] - b.query_start[s]);
      const PromptLayout& l = b.layouts[s];
      if (!l.bidirectional || start >= l.context_len) continue;
      ++context_steps_;
      if (start != 0 || ctx < l.context_len) ++violations_;
    }
  }

  FakeModelOptions o_;
  int32_t num_blocks_ = 0;
  int32_t block_size_ = 16;
  std::vector<Slot> slots_;
  std::vector<int32_t> adapters_;
  std::vector<std::pair<int32_t, int32_t>> adapter_log_;
  std::vector<Slot> host_slots_;
  int64_t swaps_ = 0;
  int64_t violations_ = 0;
  int64_t context_steps_ = 0;
  int64_t forwards_ = 0;
  int64_t copies_ = 0;
  int64_t grows_ = 0;
  int64_t max_batch_tokens_ = 0;
};

// Greedy (or any deterministic pick) continuation computed from reference logits alone.
inline std::vector<int32_t> reference_greedy(std::vector<int32_t> prompt, const FakeModelOptions& o,
                                             int32_t max_new, bool stop_at_eos) {
  std::vector<int32_t> out;
  std::vector<float> logits(static_cast<size_t>(o.vocab));
  for (int32_t i = 0; i < max_new; ++i) {
    FakeModel::reference_logits(prompt, o, logits.data());
    int32_t best = 0;
    for (int32_t v = 1; v < o.vocab; ++v)
      if (logits[v] > logits[best]) best = v;
    if (stop_at_eos && best == o.eos) break;
    out.push_back(best);
    prompt.push_back(best);
  }
  return out;
}

}  // namespace tachyon::testing
