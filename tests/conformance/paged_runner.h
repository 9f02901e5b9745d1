// What the conformance tests share: a fixture's reference cases, and a model driven step
// by step through its paged KV cache (sequences whose blocks are handed out from a
// shuffled pool, so that they lie scattered over it).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon::testing_util {

struct ConformanceCase {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> greedy_new_ids;
  Tensor logits;  // [len, vocab] f32
};

// The cases of fixture `name`: reference.json's prompts and greedy tokens, and the
// reference logits of every prompt position.
inline std::vector<ConformanceCase> load_conformance_cases(const std::string& name) {
  Json ref = load_json_file(fixture_source_dir(name) + "/reference.json");
  auto logits = SafetensorsFile::open(fixture_reference_logits(name));
  std::vector<ConformanceCase> cases;
  for (size_t i = 0; i < ref["cases"].size(); ++i) {
    ConformanceCase c;
    for (const auto& v : ref["cases"][i]["input_ids"]) c.input_ids.push_back(v.get<int32_t>());
    for (const auto& v : ref["cases"][i]["greedy_new_ids"])
      c.greedy_new_ids.push_back(v.get<int32_t>());
    c.logits = logits->get("case" + std::to_string(i) + ".logits").clone();
    cases.push_back(std::move(c));
  }
  return cases;
}

// One sequence's state in the paged cache: its tokens and its blocks.
struct PagedSeq {
  std::vector<int32_t> tokens;
  int32_t prompt_len = 0;
  PromptLayout layout;
  int32_t computed = 0;
  std::vector<int32_t> blocks;
  int32_t adapter_id = 0;  // the LoRA adapter serving it (ForwardBatch::adapter_ids), 0: none
};

class PagedRunner {
 public:
  // Sizes model's cache for every case at full length (and 3 blocks more), in blocks of
  // block_size handed out in an order shuffled by `seed`.
  void init(Model& model, const std::vector<ConformanceCase>& cases, int32_t block_size,
            uint32_t seed) {
    model_ = &model;
    block_size_ = block_size;
    int32_t total = 3;
    for (const auto& c : cases)
      total += static_cast<int32_t>(
          (c.input_ids.size() + c.greedy_new_ids.size() + block_size - 1) / block_size);
    model.init_kv_cache(total, block_size);
    free_.resize(static_cast<size_t>(total));
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(seed));
  }

  PagedSeq new_seq(const std::vector<int32_t>& prompt) const {
    PagedSeq s;
    s.tokens = prompt;
    s.prompt_len = static_cast<int32_t>(prompt.size());
    s.layout = model_->prompt_layout(prompt);
    return s;
  }

  // One step: each (sequence, n) advances the sequence by n tokens. Returns the logits
  // of every token of the step, [num_tokens, vocab].
  Tensor step(const std::vector<std::pair<PagedSeq*, int32_t>>& work) {
    ForwardBatch b;
    b.query_start.push_back(0);
    int32_t max_blocks = 0;
    for (auto& [s, n] : work) {
      while (static_cast<int32_t>(s->blocks.size()) * block_size_ < s->computed + n) {
        EXPECT_FALSE(free_.empty());
        s->blocks.push_back(free_.back());
        free_.pop_back();
      }
      max_blocks = std::max(max_blocks, static_cast<int32_t>(s->blocks.size()));
    }
    for (auto& [s, n] : work) {
      for (int32_t i = 0; i < n; ++i) {
        b.token_ids.push_back(s->tokens[s->computed + i]);
        b.positions.push_back(s->computed + i);
      }
      b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
      b.context_lens.push_back(s->computed + n);
      b.prompt_lens.push_back(s->prompt_len);
      b.layouts.push_back(s->layout);
      for (int32_t i = 0; i < max_blocks; ++i)
        b.block_tables.push_back(i < static_cast<int32_t>(s->blocks.size()) ? s->blocks[i] : -1);
      s->computed += n;
    }
    b.max_blocks_per_seq = max_blocks;
    if (std::any_of(work.begin(), work.end(),
                    [](const auto& w) { return w.first->adapter_id != 0; }))
      for (auto& [s, n] : work) b.adapter_ids.push_back(s->adapter_id);
    b.logits_rows.resize(b.token_ids.size());
    std::iota(b.logits_rows.begin(), b.logits_rows.end(), 0);
    return model_->forward(b);
  }
  Tensor step(PagedSeq& s, int32_t n) { return step({{&s, n}}); }

  // The sequence's blocks back to the pool.
  void release(PagedSeq& s) {
    for (int32_t blk : s.blocks) free_.push_back(blk);
    s.blocks.clear();
  }

 private:
  Model* model_ = nullptr;
  int32_t block_size_ = 0;
  std::vector<int32_t> free_;
};

}  // namespace tachyon::testing_util
