// Every LoRA fixture under tests/conformance/fixtures/lora (a PEFT adapter for one of the
// dense fixtures, with PEFT's float64 references for the adapter and for its base) served
// unmerged on the CPU: the adapters of one base are read by load_lora_adapter and
// registered together in one model (LoadOptions::lora), each request naming its adapter
// (ForwardBatch::adapter_ids). Checked: each adapter alone and the base, prompt logits
// within kLogitTolerance at every position and greedy tokens (one per step through the
// paged KV cache) identical to the reference; every adapter and the base mixed in one
// batch, each row against its own reference; the adapters swapped through a single arena
// slot; and each adapter merged into the weights (merge_lora) giving the same greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "conformance/fixture_dir.h"
#include "conformance/lora_cases.h"
#include "conformance/paged_runner.h"
#include "model/loader.h"
#include "model/lora_adapter.h"

namespace tachyon {
namespace {

// f32 arithmetic against float64 references: far below the references' greedy margins
// (at least 4e-3, reference.json's min_greedy_margin).
constexpr double kLogitTolerance = 1e-3;
constexpr int32_t kBlockSize = 4;
constexpr int32_t kMaxRank = 16;

using Case = testing_util::ConformanceCase;
using Seq = testing_util::PagedSeq;
using testing_util::LoraFixture;

// One base with every LoRA fixture that adapts it.
class LoraConformanceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& n : testing_util::lora_fixture_names()) {
      LoraFixture f = testing_util::load_lora_fixture(n);
      if (f.base == GetParam()) fixtures_.push_back(std::move(f));
    }
    ASSERT_FALSE(fixtures_.empty());
    model_ = load(static_cast<int32_t>(fixtures_.size()));
    vocab_ = model_->vocab_size();
  }

  // The base on the CPU with an arena of `slots` adapters and every fixture's adapter
  // registered (fixture i as adapter id i + 1), its cache sized for every case at once.
  std::unique_ptr<Model> load(int32_t slots) {
    LoadOptions opts;
    opts.device = Device{};  // the CPU
    opts.lora.max_loras = slots;
    opts.lora.max_rank = kMaxRank;
    auto model = load_model(testing_util::fixture(GetParam()), opts);
    for (size_t i = 0; i < fixtures_.size(); ++i) {
      LoraAdapter a = load_lora_adapter(testing_util::fixture(fixtures_[i].name), model->config(),
                                        model->weights().map, {kMaxRank});
      model->add_adapter(static_cast<int32_t>(i + 1), model->prepare_adapter(a));
    }
    std::vector<Case> all;
    for (const auto& f : fixtures_) {
      all.insert(all.end(), f.adapter.begin(), f.adapter.end());
      all.insert(all.end(), f.base_cases.begin(), f.base_cases.end());
    }
    paged_.init(*model, all, kBlockSize, 7);
    return model;
  }

  void expect_logits(const Tensor& got, int64_t row0, const Case& c, const std::string& what) {
    const int64_t n = static_cast<int64_t>(c.input_ids.size());
    double worst = 0;
    int64_t worst_at = -1;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t v = 0; v < vocab_; ++v) {
        const double want = c.logits.data<float>()[r * vocab_ + v];
        const double d = std::abs(double{got.data<float>()[(row0 + r) * vocab_ + v]} - want);
        if (!(d <= worst)) {
          worst = d;
          worst_at = r * vocab_ + v;
        }
      }
    EXPECT_LE(worst, kLogitTolerance) << what << ": worst logit error at row " << worst_at / vocab_
                                      << " token " << worst_at % vocab_;
  }

  int32_t argmax(const Tensor& logits, int64_t row) const {
    const float* p = logits.data<float>() + row * vocab_;
    return static_cast<int32_t>(std::max_element(p, p + vocab_) - p);
  }

  // Prefills every (sequence, case) in one step, then decodes them together one token
  // each per step; each row's logits and greedy tokens against its own case.
  void run_together(std::vector<Seq>& seqs, const std::vector<const Case*>& cases,
                    const std::vector<std::string>& what, testing_util::PagedRunner& paged) {
    std::vector<std::pair<Seq*, int32_t>> work;
    for (auto& s : seqs) work.push_back({&s, static_cast<int32_t>(s.tokens.size())});
    Tensor l = paged.step(work);
    std::vector<std::vector<int32_t>> out(seqs.size());
    int64_t row = 0;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const int64_t n = static_cast<int64_t>(cases[i]->input_ids.size());
      expect_logits(l, row, *cases[i], what[i] + " prompt");
      out[i].push_back(argmax(l, row + n - 1));
      row += n;
    }
    for (size_t k = 1; k < cases[0]->greedy_new_ids.size(); ++k) {
      work.clear();
      for (size_t i = 0; i < seqs.size(); ++i) {
        seqs[i].tokens.push_back(out[i].back());
        work.push_back({&seqs[i], 1});
      }
      Tensor d = paged.step(work);
      for (size_t i = 0; i < seqs.size(); ++i) out[i].push_back(argmax(d, static_cast<int64_t>(i)));
    }
    for (size_t i = 0; i < seqs.size(); ++i) {
      EXPECT_EQ(out[i], cases[i]->greedy_new_ids) << what[i] << " greedy";
      paged.release(seqs[i]);
    }
  }

  // One sequence of case c served by adapter `id` (0: the base).
  void run_alone(int32_t id, const Case& c, const std::string& what,
                 testing_util::PagedRunner& paged) {
    std::vector<Seq> seqs = {paged.new_seq(c.input_ids)};
    seqs[0].adapter_id = id;
    run_together(seqs, {&c}, {what}, paged);
  }

  std::vector<LoraFixture> fixtures_;
  std::unique_ptr<Model> model_;
  int64_t vocab_ = 0;
  testing_util::PagedRunner paged_;
};

TEST_P(LoraConformanceTest, EachAdapterAloneAndTheBase) {
  for (size_t f = 0; f < fixtures_.size(); ++f)
    for (size_t i = 0; i < fixtures_[f].adapter.size(); ++i) {
      const std::string what = fixtures_[f].name + " case " + std::to_string(i);
      run_alone(static_cast<int32_t>(f + 1), fixtures_[f].adapter[i], what, paged_);
      run_alone(0, fixtures_[f].base_cases[i], what + " base", paged_);
    }
}

// Every case of every adapter and of the base in one batch: each sequence names its own
// adapter, and adapters of different ranks and targets share each step.
TEST_P(LoraConformanceTest, AdaptersAndBaseMixedInOneBatch) {
  std::vector<Seq> seqs;
  std::vector<const Case*> cases;
  std::vector<std::string> what;
  for (size_t f = 0; f < fixtures_.size(); ++f)
    for (size_t i = 0; i < fixtures_[f].adapter.size(); ++i) {
      for (int32_t id : {static_cast<int32_t>(f + 1), 0}) {
        seqs.push_back(paged_.new_seq(fixtures_[f].adapter[i].input_ids));
        seqs.back().adapter_id = id;
        cases.push_back(id ? &fixtures_[f].adapter[i] : &fixtures_[f].base_cases[i]);
        what.push_back("mixed " + fixtures_[f].name + " case " + std::to_string(i) +
                       (id ? "" : " base"));
      }
    }
  run_together(seqs, cases, what, paged_);
}

// An arena of one slot: each request swaps its adapter in, evicting the last one.
TEST_P(LoraConformanceTest, AdaptersSwappedThroughOneSlot) {
  model_ = load(1);
  for (int round = 0; round < 2; ++round)
    for (size_t f = 0; f < fixtures_.size(); ++f) {
      const Case& c = fixtures_[f].adapter.back();
      run_alone(static_cast<int32_t>(f + 1), c,
                "one slot, round " + std::to_string(round) + ", " + fixtures_[f].name, paged_);
    }
  const auto* runner = dynamic_cast<const ModelRunner*>(model_.get());
  ASSERT_NE(runner, nullptr);
  const int64_t n = static_cast<int64_t>(fixtures_.size());
  EXPECT_EQ(runner->lora_swaps(), n == 1 ? 1 : 2 * n);  // every request but a lone adapter's
}

TEST_P(LoraConformanceTest, MergedAdapterGivesTheSameGreedyTokens) {
  for (const LoraFixture& f : fixtures_) {
    auto merged = testing_util::load_merged_model(testing_util::fixture(GetParam()),
                                                  testing_util::fixture(f.name));
    testing_util::PagedRunner paged;
    paged.init(*merged, f.adapter, kBlockSize, 5);
    for (size_t i = 0; i < f.adapter.size(); ++i) {
      const Case& c = f.adapter[i];
      Seq s = paged.new_seq(c.input_ids);
      const int32_t n = static_cast<int32_t>(c.input_ids.size());
      std::vector<int32_t> out = {argmax(paged.step(s, n), n - 1)};
      while (out.size() < c.greedy_new_ids.size()) {
        s.tokens.push_back(out.back());
        out.push_back(argmax(paged.step(s, 1), 0));
      }
      EXPECT_EQ(out, c.greedy_new_ids) << f.name << " merged, case " << i;
      paged.release(s);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Bases, LoraConformanceTest,
                         ::testing::ValuesIn(testing_util::lora_fixture_bases()));

}  // namespace
}  // namespace tachyon
