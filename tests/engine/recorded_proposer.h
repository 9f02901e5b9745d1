// A test proposer for real models: it knows each prompt's plain greedy output and
// proposes its next tokens (every draft right), random tokens, or a mix of both.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/proposer.h"

namespace tachyon::testing {

class RecordedProposer : public Proposer {
 public:
  enum Mode { kRight, kRandom, kMix };
  RecordedProposer(Mode mode, int32_t vocab) : mode_(mode), vocab_(vocab) {}
  // The plain output of a prompt (before any request runs).
  void add(std::vector<int32_t> prompt, std::vector<int32_t> output) {
    runs_.push_back({std::move(prompt), std::move(output)});
  }
  std::string_view name() const override { return "recorded"; }
  void propose(std::span<const ProposalRequest> reqs, std::span<Proposal> out) override {
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto& t = reqs[i].tokens;
      std::mt19937 rng(static_cast<uint32_t>(t.size() * 7919 + static_cast<size_t>(t.back())));
      const std::vector<int32_t>* right = nullptr;
      size_t at = 0;
      for (const Run& r : runs_) {
        if (t.size() < r.prompt.size() || t.size() > r.prompt.size() + r.output.size()) continue;
        if (!std::equal(r.prompt.begin(), r.prompt.end(), t.begin())) continue;
        if (!std::equal(t.begin() + static_cast<ptrdiff_t>(r.prompt.size()), t.end(),
                        r.output.begin()))
          continue;
        right = &r.output;
        at = t.size() - r.prompt.size();
        break;
      }
      for (int32_t j = 0; j < reqs[i].max_tokens; ++j) {
        const bool random = mode_ == kRandom || (mode_ == kMix && rng() % 3 == 0) || !right ||
                            at + static_cast<size_t>(j) >= right->size();
        out[i].tokens.push_back(random ? static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab_))
                                       : (*right)[at + static_cast<size_t>(j)]);
      }
      ++proposals_;
    }
  }
  int64_t proposals() const { return proposals_; }

 private:
  struct Run {
    std::vector<int32_t> prompt, output;
  };
  Mode mode_;
  int32_t vocab_;
  std::vector<Run> runs_;
  std::atomic<int64_t> proposals_{0};
};

}  // namespace tachyon::testing
