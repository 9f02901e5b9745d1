#include "cli/bench_workload.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tachyon::cli {
namespace {

int64_t min_input_len(const PromptShape& s) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::floor(s.input_len * (1 - s.range_ratio))));
}

std::vector<int32_t> random_tokens(const PromptShape& s, int64_t n, std::mt19937_64& rng) {
  std::uniform_int_distribution<int32_t> token(s.low_token, s.high_token);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = token(rng);
  return ids;
}

}  // namespace

int64_t PromptShape::max_input_len() const {
  return static_cast<int64_t>(std::ceil(input_len * (1 + range_ratio)));
}

void PromptShape::validate() const {
  if (input_len < 1) raise<InvalidArgument>("--input-len must be >= 1, got {}", input_len);
  if (range_ratio < 0 || range_ratio >= 1)
    raise<InvalidArgument>("--range-ratio must be in [0, 1), got {}", range_ratio);
  if (shared_prefix_len < 0)
    raise<InvalidArgument>("--shared-prefix-len must be >= 0, got {}", shared_prefix_len);
  if (low_token < 0 || high_token < low_token)
    raise<InvalidArgument>("no token ids to draw prompts from ([{}, {}])", low_token, high_token);
}

std::vector<std::vector<int32_t>> make_random_prompts(const PromptShape& shape, int64_t n,
                                                      std::mt19937_64& rng) {
  shape.validate();
  const std::vector<int32_t> prefix = random_tokens(shape, shape.shared_prefix_len, rng);
  std::uniform_int_distribution<int64_t> length(min_input_len(shape), shape.max_input_len());
  std::vector<std::vector<int32_t>> prompts;
  prompts.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int32_t> p = prefix;
    const std::vector<int32_t> own = random_tokens(shape, length(rng), rng);
    p.insert(p.end(), own.begin(), own.end());
    prompts.push_back(std::move(p));
  }
  return prompts;
}

Conversation::Conversation(std::vector<std::vector<int32_t>> user_parts)
    : user_parts_(std::move(user_parts)) {
  if (user_parts_.empty()) raise<InvalidArgument>("a conversation needs at least one turn");
  prompt_ = user_parts_.front();
}

const std::vector<int32_t>& Conversation::user_part(int64_t k) const {
  if (k < 0 || k >= turns())
    raise<InvalidArgument>("turn {} of a conversation of {} turns", k, turns());
  return user_parts_[static_cast<size_t>(k)];
}

void Conversation::answer(const std::vector<int32_t>& output_ids) {
  if (done()) raise<InvalidArgument>("the conversation's {} turns are all answered", turns());
  ++turn_;
  if (done()) return;
  prompt_.insert(prompt_.end(), output_ids.begin(), output_ids.end());
  const auto& next = user_parts_[static_cast<size_t>(turn_)];
  prompt_.insert(prompt_.end(), next.begin(), next.end());
}

std::vector<Conversation> make_conversations(const PromptShape& shape, int64_t n, int64_t turns,
                                             std::mt19937_64& rng) {
  if (turns < 1) raise<InvalidArgument>("--multi-turn must be >= 1, got {}", turns);
  // The first turns hold the shared prefix; the later user parts are drawn without it.
  std::vector<std::vector<int32_t>> first = make_random_prompts(shape, n, rng);
  PromptShape later = shape;
  later.shared_prefix_len = 0;
  std::vector<Conversation> conversations;
  conversations.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    std::vector<std::vector<int32_t>> parts;
    parts.push_back(std::move(first[static_cast<size_t>(i)]));
    std::vector<std::vector<int32_t>> rest = make_random_prompts(later, turns - 1, rng);
    for (auto& r : rest) parts.push_back(std::move(r));
    conversations.emplace_back(std::move(parts));
  }
  return conversations;
}

int64_t longest_prompt(const PromptShape& shape, int64_t turns, int64_t output_len) {
  return shape.shared_prefix_len + turns * shape.max_input_len() + (turns - 1) * output_len;
}

void check_fits(const PromptShape& shape, int64_t turns, int64_t output_len, int64_t max_seq_len) {
  const int64_t longest = longest_prompt(shape, turns, output_len);
  if (longest < max_seq_len) return;
  const char* own = shape.range_ratio > 0 ? "--input-len, --range-ratio" : "--input-len";
  if (turns > 1)
    raise<InvalidArgument>(
        "prompts of up to {} tokens (--shared-prefix-len {} + --multi-turn {} turns of up to {} "
        "tokens ({}) and {} between them (--output-len)) do not fit the model's maximum length "
        "of {} tokens with one generated: lower those flags",
        longest, shape.shared_prefix_len, turns, shape.max_input_len(), own, output_len,
        max_seq_len);
  raise<InvalidArgument>(
      "prompts of up to {} tokens (--shared-prefix-len {} + up to {} of {}) do not fit the "
      "model's maximum length of {} tokens with one generated: lower those flags",
      longest, shape.shared_prefix_len, shape.max_input_len(), own, max_seq_len);
}

std::string random_words(int64_t n, std::mt19937_64& rng) {
  static const char* kWords[] = {"the", "lord", "spake", "unto", "moses", "saying",
                                 "and", "it",   "came",  "to",   "pass"};
  std::string text;
  for (int64_t i = 0; i < n; ++i) text += std::string(i ? " " : "") + kWords[rng() % 11];
  return text;
}

}  // namespace tachyon::cli
