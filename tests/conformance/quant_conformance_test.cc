// Every quantized fixture under tests/conformance/fixtures/quant (a tiny checkpoint in a
// hub quantization format: GPTQ, AWQ, FP8, compressed-tensors, with the reference of the
// same model in float64 with each quantized weight replaced by its dequantized value) is
// loaded through the public path (load_model) on the CPU and checked: prompt logits within
// kLogitTolerance at every position (whole prompts, uneven chunks, all cases in one step),
// and greedy continuations one token per step through the paged KV cache (alone and all
// cases batched) identical to the reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "conformance/fixture_dir.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon {
namespace {

// f32 arithmetic on exactly dequantized weights: far below the references' greedy
// margins (the smallest is recorded in each reference.json).
constexpr double kLogitTolerance = 2e-3;
constexpr int32_t kBlockSize = 4;

struct Case {
  std::vector<int32_t> input_ids;
  std::vector<int32_t> greedy_new_ids;
  Tensor logits;  // [len, vocab] f32
};

class QuantConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    Json ref = load_json_file(testing_util::fixture_source_dir(name) + "/reference.json");
    auto logits = SafetensorsFile::open(testing_util::fixture_reference_logits(name));
    for (size_t i = 0; i < ref["cases"].size(); ++i) {
      Case c;
      for (const auto& v : ref["cases"][i]["input_ids"]) c.input_ids.push_back(v.get<int32_t>());
      for (const auto& v : ref["cases"][i]["greedy_new_ids"])
        c.greedy_new_ids.push_back(v.get<int32_t>());
      c.logits = logits->get("case" + std::to_string(i) + ".logits").clone();
      cases_.push_back(std::move(c));
    }
    LoadOptions opts;
    opts.device = Device{};  // the CPU
    model_ = load_model(testing_util::fixture(name), opts);
    vocab_ = model_->vocab_size();
    int32_t total = 3;
    for (const auto& c : cases_)
      total += static_cast<int32_t>(
          (c.input_ids.size() + c.greedy_new_ids.size() + kBlockSize - 1) / kBlockSize);
    model_->init_kv_cache(total, kBlockSize);
    free_.resize(static_cast<size_t>(total));
    std::iota(free_.begin(), free_.end(), 0);
    std::shuffle(free_.begin(), free_.end(), std::mt19937(11));
  }

  struct Seq {
    std::vector<int32_t> tokens;
    int32_t prompt_len = 0;
    PromptLayout layout;
    int32_t computed = 0;
    std::vector<int32_t> blocks;
  };

  Seq new_seq(const std::vector<int32_t>& prompt) {
    Seq s;
    s.tokens = prompt;
    s.prompt_len = static_cast<int32_t>(prompt.size());
    s.layout = model_->prompt_layout(prompt);
    return s;
  }

  // One step: each (sequence, n) advances by n tokens. The logits of every token of the
  // step, [num_tokens, vocab].
  Tensor step(std::vector<std::pair<Seq*, int32_t>> work) {
    ForwardBatch b;
    b.query_start.push_back(0);
    int32_t max_blocks = 0;
    for (auto& [s, n] : work) {
      while (static_cast<int32_t>(s->blocks.size()) * kBlockSize < s->computed + n) {
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
    b.logits_rows.resize(b.token_ids.size());
    std::iota(b.logits_rows.begin(), b.logits_rows.end(), 0);
    return model_->forward(b);
  }
  Tensor step(Seq& s, int32_t n) { return step({{&s, n}}); }

  void release(Seq& s) {
    for (int32_t blk : s.blocks) free_.push_back(blk);
    s.blocks.clear();
  }

  // Rows [row0, row0 + n) of got against reference rows [ref_row, ref_row + n).
  void expect_logits(const Tensor& got, int64_t row0, const Case& c, int64_t ref_row, int64_t n,
                     const std::string& what) {
    double worst = 0;
    int64_t worst_at = -1;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t v = 0; v < vocab_; ++v) {
        const double want = c.logits.data<float>()[(ref_row + r) * vocab_ + v];
        const double d = std::abs(double{got.data<float>()[(row0 + r) * vocab_ + v]} - want);
        if (!(d <= worst)) {
          worst = d;
          worst_at = (ref_row + r) * vocab_ + v;
        }
      }
    EXPECT_LE(worst, kLogitTolerance) << what << ": worst logit error at row " << worst_at / vocab_
                                      << " token " << worst_at % vocab_;
  }

  int32_t argmax(const Tensor& logits, int64_t row) const {
    const float* p = logits.data<float>() + row * vocab_;
    return static_cast<int32_t>(std::max_element(p, p + vocab_) - p);
  }

  // Greedy tokens after the prompt: `first`, then one decode step per token.
  std::vector<int32_t> decode(Seq& s, int32_t first, size_t count) {
    std::vector<int32_t> out = {first};
    while (out.size() < count) {
      s.tokens.push_back(out.back());
      out.push_back(argmax(step(s, 1), 0));
    }
    return out;
  }

  std::vector<Case> cases_;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  std::vector<int32_t> free_;
};

TEST_P(QuantConformanceTest, PromptLogitsAndGreedy) {
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    Seq s = new_seq(c.input_ids);
    const int32_t n = static_cast<int32_t>(c.input_ids.size());
    Tensor l = step(s, n);
    expect_logits(l, 0, c, 0, n, "case " + std::to_string(i) + " prompt");
    EXPECT_EQ(decode(s, argmax(l, n - 1), c.greedy_new_ids.size()), c.greedy_new_ids)
        << "case " << i << " greedy";
    release(s);
  }
}

TEST_P(QuantConformanceTest, ChunkedPrefill) {
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    Seq s = new_seq(c.input_ids);
    const int32_t n = static_cast<int32_t>(c.input_ids.size());
    int32_t done = 0, last = -1;
    for (int32_t chunk = 2; done < n; chunk += 3) {  // uneven chunks: 2, 5, 8, ...
      const int32_t take = std::min(std::max(chunk, s.layout.atomic_len() - done), n - done);
      Tensor l = step(s, take);
      expect_logits(l, 0, c, done, take,
                    "case " + std::to_string(i) + " chunk at " + std::to_string(done));
      done += take;
      last = argmax(l, take - 1);
    }
    EXPECT_EQ(decode(s, last, c.greedy_new_ids.size()), c.greedy_new_ids)
        << "case " << i << " greedy after chunked prefill";
    release(s);
  }
}

// All cases prefilled in one step, then decoded together, one token each per step.
TEST_P(QuantConformanceTest, BatchedCases) {
  std::vector<Seq> seqs;
  for (const auto& c : cases_) seqs.push_back(new_seq(c.input_ids));
  std::vector<std::pair<Seq*, int32_t>> work;
  for (auto& s : seqs) work.push_back({&s, static_cast<int32_t>(s.tokens.size())});
  Tensor l = step(work);
  std::vector<std::vector<int32_t>> out(seqs.size());
  int64_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(cases_[i].input_ids.size());
    expect_logits(l, row, cases_[i], 0, n, "batched case " + std::to_string(i));
    out[i].push_back(argmax(l, row + n - 1));
    row += n;
  }
  for (size_t k = 1; k < cases_[0].greedy_new_ids.size(); ++k) {
    work.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].tokens.push_back(out[i].back());
      work.push_back({&seqs[i], 1});
    }
    Tensor d = step(work);
    for (size_t i = 0; i < seqs.size(); ++i) out[i].push_back(argmax(d, static_cast<int64_t>(i)));
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    EXPECT_EQ(out[i], cases_[i].greedy_new_ids) << "batched case " << i;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantConformanceTest,
                         ::testing::ValuesIn(testing_util::fixture_names("quant")),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(info.param.find('/') + 1);
                         });

}  // namespace
}  // namespace tachyon
