// Synthetic workloads of the benchmarks (`tachyon bench`, `tachyon bench-serving`):
// random token-id prompts, optionally all opening with one shared prefix, and
// multi-turn conversations whose every turn extends the one before with what the model
// answered and a new user part. Drawn from a seeded generator: the same seed gives the
// same workload.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace tachyon::cli {

// How the random prompts are drawn.
struct PromptShape {
  int32_t low_token = 16, high_token = 1000;  // ids uniform in [low, high]
  int64_t input_len = 128;                    // a request's own tokens
  double range_ratio = 0;                     // own lengths uniform in [L(1-R), L(1+R)]
  int64_t shared_prefix_len = 0;              // tokens every prompt opens with
  // The longest own part a prompt can have.
  int64_t max_input_len() const;
  // Checks the shape; raises InvalidArgument naming the flag at fault.
  void validate() const;
};

// `n` prompts: the shared prefix (drawn first, once) followed by each prompt's own
// random part.
std::vector<std::vector<int32_t>> make_random_prompts(const PromptShape& shape, int64_t n,
                                                      std::mt19937_64& rng);

// One conversation of a multi-turn workload. Turn 0's prompt is the first user part
// (which holds the shared prefix, if any); turn k's prompt is turn k-1's prompt, the
// tokens the model produced for it, and user part k.
class Conversation {
 public:
  explicit Conversation(std::vector<std::vector<int32_t>> user_parts);

  int64_t turns() const { return static_cast<int64_t>(user_parts_.size()); }
  // The turn whose prompt prompt() is (0-based); turns() once the last one is answered.
  int64_t turn() const { return turn_; }
  bool done() const { return turn_ >= turns(); }
  const std::vector<int32_t>& prompt() const { return prompt_; }
  const std::vector<int32_t>& user_part(int64_t k) const;
  // Records the model's output for the current turn and moves to the next one.
  void answer(const std::vector<int32_t>& output_ids);

 private:
  std::vector<std::vector<int32_t>> user_parts_;
  std::vector<int32_t> prompt_;
  int64_t turn_ = 0;
};

// `n` conversations of `turns` turns each, their user parts drawn as make_random_prompts
// draws prompts (the shared prefix only in front of the first turn's).
std::vector<Conversation> make_conversations(const PromptShape& shape, int64_t n, int64_t turns,
                                             std::mt19937_64& rng);

// The longest prompt a conversation of `turns` turns can reach when every turn produces
// `output_len` tokens: the shared prefix, every user part at its longest and the outputs
// of all turns but the last.
int64_t longest_prompt(const PromptShape& shape, int64_t turns, int64_t output_len);

// Raises InvalidArgument, naming the flags, when that longest prompt leaves no room for a
// generated token within `max_seq_len`.
void check_fits(const PromptShape& shape, int64_t turns, int64_t output_len, int64_t max_seq_len);

// Text for the HTTP chat and multi-turn workloads: `n` words drawn from a small list.
std::string random_words(int64_t n, std::mt19937_64& rng);

}  // namespace tachyon::cli
