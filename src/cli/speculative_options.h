// The speculative decoding settings of `tachyon serve`, `generate` and `bench`
// (core/settings_table.cc: --speculative / SP_TYPE, --speculative-config,
// --num-speculative-tokens / GEN_NUM_PER_CIRCLE, --prompt-lookup-min / SP_MIN_TOKEN_MATCH,
// --prompt-lookup-max / SP_MAX_TOKEN_MATCH, --draft-model) checked into one description,
// and the proposer it names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/settings.h"
#include "engine/proposer.h"

namespace tachyon::cli {

struct SpeculativeOptions {
  std::string method;  // "" (off), "ngram" or "draft_model"
  int32_t num_speculative_tokens = 5;
  int32_t prompt_lookup_min = 1;  // ngram
  int32_t prompt_lookup_max = 4;
  std::string draft_model;  // draft_model: the draft model's folder
};

// Throws InvalidArgument naming the setting: an unknown method, two methods at once
// (e.g. --speculative ngram and a draft model), --speculative-config that is not a JSON
// object of the known keys with values of their types, a number of tokens outside 1..16,
// prompt_lookup_min < 1 or above prompt_lookup_max, draft_model without a model.
SpeculativeOptions speculative_options(const SettingValues& settings);

// The proposer of a method that needs no model (n-gram lookup); null when off or for
// draft_model, whose proposer needs the loaded model (cli/draft_setup.h
// make_draft_proposer).
std::shared_ptr<Proposer> make_proposer(const SpeculativeOptions& options);

}  // namespace tachyon::cli
