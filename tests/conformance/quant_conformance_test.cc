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
#include "conformance/paged_runner.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon {
namespace {

// f32 arithmetic on exactly dequantized weights: far below the references' greedy
// margins (the smallest is recorded in each reference.json).
constexpr double kLogitTolerance = 2e-3;
constexpr int32_t kBlockSize = 4;

using Case = testing_util::ConformanceCase;
using Seq = testing_util::PagedSeq;

class QuantConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string& name = GetParam();
    cases_ = testing_util::load_conformance_cases(name);
    LoadOptions opts;
    opts.device = Device{};  // the CPU
    model_ = load_model(testing_util::fixture(name), opts);
    vocab_ = model_->vocab_size();
    paged_.init(*model_, cases_, kBlockSize, 11);
  }

  Seq new_seq(const std::vector<int32_t>& prompt) const { return paged_.new_seq(prompt); }
  Tensor step(const std::vector<std::pair<Seq*, int32_t>>& work) { return paged_.step(work); }
  Tensor step(Seq& s, int32_t n) { return paged_.step(s, n); }
  void release(Seq& s) { paged_.release(s); }

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
  testing_util::PagedRunner paged_;
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
