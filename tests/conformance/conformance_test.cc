// Every fixture folder under tests/conformance/fixtures (a tiny Hugging Face
// checkpoint with transformers' reference outputs) is loaded through the public path
// (load_model) and checked: prompt logits within 1e-3 at every position, and greedy
// continuations through the paged KV cache — whole-prompt prefill, chunked prefill,
// and all cases batched in one step. Each sequence carries the model's layout of its
// prompt (LanguageModel::prompt_layout), and chunked prefill computes a bidirectional
// prompt context in its first chunk, as the scheduler does.
//
// On a device computing in bf16/f16 (TACHYON_DEVICE=cuda), logits are held to a
// relative tolerance instead (kRelTolerance16 of the reference's largest magnitude),
// and greedy tokens are compared up to the first step whose top-1/top-2 margin is
// within kMarginFactor times the largest logit error seen: past a near tie at that
// precision the continuations may rightly part.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <random>

#include "conformance/fixture_dir.h"
#include "conformance/paged_runner.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/loader.h"
#include "model/rope.h"

namespace tachyon {
namespace {

namespace fs = std::filesystem;

constexpr double kLogitTolerance = 1e-3;
constexpr double kRelTolerance16 = 3e-2;
constexpr double kMarginFactor = 3.0;
constexpr int32_t kBlockSize = 4;

using testing_util::fixture_names;

using Case = testing_util::ConformanceCase;
using Seq = testing_util::PagedSeq;

class ConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = testing_util::fixture(GetParam());
    cases_ = testing_util::load_conformance_cases(GetParam());
    model_ = load_model(dir_);
    vocab_ = model_->vocab_size();
    half_ = model_->backend().activation_dtype() != DType::kF32;
    paged_.init(*model_, cases_, kBlockSize, 7);
  }

  Seq new_seq(const std::vector<int32_t>& prompt) const { return paged_.new_seq(prompt); }
  Tensor step(const std::vector<std::pair<Seq*, int32_t>>& work) { return paged_.step(work); }
  Tensor step(Seq& s, int32_t n) { return paged_.step(s, n); }
  void release(Seq& s) { paged_.release(s); }

  // Compares logits rows [row0, row0 + n) of `got` with reference rows starting at ref_row.
  void expect_logits(const Tensor& got, int64_t row0, const Case& c, int64_t ref_row, int64_t n,
                     const std::string& what) {
    double worst = 0, ref_max = 0;
    int64_t worst_at = -1;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t v = 0; v < vocab_; ++v) {
        const double want = c.logits.data<float>()[(ref_row + r) * vocab_ + v];
        double d = std::abs(double{got.data<float>()[(row0 + r) * vocab_ + v]} - want);
        ref_max = std::max(ref_max, std::abs(want));
        if (!(d <= worst)) {
          worst = d;
          worst_at = (ref_row + r) * vocab_ + v;
        }
      }
    worst_error_ = std::max(worst_error_, worst);
    const double tol = half_ ? kRelTolerance16 * std::max(1.0, ref_max) : kLogitTolerance;
    EXPECT_LE(worst, tol) << what << ": worst logit error at row " << worst_at / vocab_ << " token "
                          << worst_at % vocab_;
  }

  // Top-1 minus top-2 logit of a row.
  double margin(const Tensor& logits, int64_t row) const {
    const float* p = logits.data<float>() + row * vocab_;
    float a = -INFINITY, b = -INFINITY;
    for (int64_t v = 0; v < vocab_; ++v) {
      if (p[v] > a) {
        b = a;
        a = p[v];
      } else if (p[v] > b) {
        b = p[v];
      }
    }
    return double{a} - b;
  }

  // Exact at f32; at 16-bit precision, up to the first near tie (see the top).
  void expect_greedy(const std::vector<int32_t>& got, const std::vector<double>& margins,
                     const std::vector<int32_t>& want, const std::string& what) {
    if (!half_) {
      EXPECT_EQ(got, want) << what;
      return;
    }
    const double tie = kMarginFactor * std::max(worst_error_, kLogitTolerance);
    for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
      if (margins[i] <= tie) break;
      EXPECT_EQ(got[i], want[i]) << what << " at step " << i << " (margin " << margins[i] << ")";
      if (got[i] != want[i]) break;
    }
  }

  static int32_t argmax(const Tensor& logits, int64_t row, int64_t vocab) {
    const float* p = logits.data<float>() + row * vocab;
    return static_cast<int32_t>(std::max_element(p, p + vocab) - p);
  }

  // Greedy decoding one token per step after the prompt has been computed; margins_
  // gets each step's top-1/top-2 margin (the first one is first_margin).
  std::vector<int32_t> decode_greedy(Seq& s, int32_t first, size_t count,
                                     double first_margin = INFINITY) {
    std::vector<int32_t> out = {first};
    margins_ = {first_margin};
    while (out.size() < count) {
      s.tokens.push_back(out.back());
      Tensor l = step({{&s, 1}});
      out.push_back(argmax(l, 0, vocab_));
      margins_.push_back(margin(l, 0));
    }
    return out;
  }

  std::string dir_;
  std::vector<Case> cases_;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  testing_util::PagedRunner paged_;
  bool half_ = false;       // the model computes in bf16/f16
  double worst_error_ = 0;  // largest logit error seen so far
  std::vector<double> margins_;
};

TEST_P(ConformanceTest, PromptLogitsAndGreedyIncremental) {
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    Seq s = new_seq(c.input_ids);
    const int32_t n = static_cast<int32_t>(c.input_ids.size());
    Tensor l = step({{&s, n}});
    expect_logits(l, 0, c, 0, n, "case " + std::to_string(i) + " prompt");
    auto greedy =
        decode_greedy(s, argmax(l, n - 1, vocab_), c.greedy_new_ids.size(), margin(l, n - 1));
    expect_greedy(greedy, margins_, c.greedy_new_ids, "case " + std::to_string(i) + " greedy");
    release(s);
  }
}

TEST_P(ConformanceTest, ChunkedPrefill) {
  // Frequencies fixed by the prompt length (given in prompt_lens) do not change with
  // chunking; those that follow the length seen so far do, by design.
  if (rope_length_dependent(model_->config().rope) &&
      !rope_uses_prompt_length(model_->config().rope) &&
      model_->config().position == PositionType::kRotary)
    GTEST_SKIP() << "rope frequencies depend on the sequence length seen so far; chunking changes "
                    "them by design";
  for (size_t i = 0; i < cases_.size(); ++i) {
    const Case& c = cases_[i];
    Seq s = new_seq(c.input_ids);
    const int32_t n = static_cast<int32_t>(c.input_ids.size());
    int32_t done = 0, last = -1;
    double last_margin = INFINITY;
    for (int32_t chunk = 3; done < n; chunk += 2) {  // uneven chunks: 3, 5, 7, ...
      // The first chunk covers a bidirectional context whole.
      const int32_t take = std::min(std::max(chunk, s.layout.atomic_len() - done), n - done);
      Tensor l = step({{&s, take}});
      expect_logits(l, 0, c, done, take,
                    "case " + std::to_string(i) + " chunk at " + std::to_string(done));
      done += take;
      last = argmax(l, take - 1, vocab_);
      last_margin = margin(l, take - 1);
    }
    auto greedy = decode_greedy(s, last, c.greedy_new_ids.size(), last_margin);
    expect_greedy(greedy, margins_, c.greedy_new_ids,
                  "case " + std::to_string(i) + " greedy after chunked prefill");
    release(s);
  }
}

TEST_P(ConformanceTest, BatchedCases) {
  std::vector<Seq> seqs;
  for (const auto& c : cases_) seqs.push_back(new_seq(c.input_ids));
  std::vector<std::pair<Seq*, int32_t>> work;
  for (auto& s : seqs) work.push_back({&s, static_cast<int32_t>(s.tokens.size())});
  Tensor l = step(work);
  std::vector<std::vector<int32_t>> out(seqs.size());
  std::vector<std::vector<double>> margins(seqs.size());
  int64_t row = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t n = static_cast<int64_t>(cases_[i].input_ids.size());
    expect_logits(l, row, cases_[i], 0, n, "batched case " + std::to_string(i));
    out[i].push_back(argmax(l, row + n - 1, vocab_));
    margins[i].push_back(margin(l, row + n - 1));
    row += n;
  }
  // Decode all cases together, one token each per step.
  for (size_t k = 1; k < cases_[0].greedy_new_ids.size(); ++k) {
    work.clear();
    for (size_t i = 0; i < seqs.size(); ++i) {
      seqs[i].tokens.push_back(out[i].back());
      work.push_back({&seqs[i], 1});
    }
    Tensor d = step(work);
    for (size_t i = 0; i < seqs.size(); ++i) {
      out[i].push_back(argmax(d, static_cast<int64_t>(i), vocab_));
      margins[i].push_back(margin(d, static_cast<int64_t>(i)));
    }
  }
  for (size_t i = 0; i < seqs.size(); ++i)
    expect_greedy(out[i], margins[i], cases_[i].greedy_new_ids,
                  "batched case " + std::to_string(i));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConformanceTest, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace tachyon
