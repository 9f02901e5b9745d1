// Per-request generation parameters, with RTP-LLM's field names. Parsed from JSON with
// every field checked: a wrong type, an out-of-range value or an unknown field is
// refused with an InvalidArgument naming the field.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/json.h"
#include "grammar/compile.h"

namespace tachyon {

// Upper bounds that keep one request from asking for unbounded work.
inline constexpr int32_t kMaxTopLogprobs = 20;
inline constexpr int32_t kMaxNumBeams = 64;
inline constexpr int32_t kMaxNumReturnSequences = 64;
inline constexpr int32_t kMaxStopWords = 64;
inline constexpr size_t kMaxStopStringBytes = 1024;
inline constexpr size_t kMaxTokenListEntries = 4096;

struct GenerateConfig {
  // Tokens to generate at most. Unset: up to the model's maximum sequence length.
  std::optional<int32_t> max_new_tokens;
  // EOS and stop words/strings are not honoured before this many tokens.
  int32_t min_new_tokens = 0;

  // Sampling. temperature 0 or top_k 1 is greedy decoding (argmax, lowest id on ties).
  float temperature = 1.0f;
  int32_t top_k = 0;   // 0: off
  float top_p = 1.0f;  // (0, 1]
  float min_p = 0.0f;  // [0, 1]: drop tokens below min_p * the top token's probability
  std::optional<uint64_t> random_seed;  // unset: a fresh seed per request

  // Logits processing (applied before temperature). repetition_penalty follows
  // transformers (over prompt and output: positive logits divided, negative multiplied);
  // presence/frequency penalties follow OpenAI (over output tokens only).
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t no_repeat_ngram_size = 0;  // 0: off; over prompt and output, as transformers
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias), sorted by token
  std::vector<std::vector<int32_t>> bad_words_list;   // token sequences never generated

  // Stopping. Stop strings match the text across token boundaries (the frontend's
  // output processor, with a tokenizer; AsyncModel refuses them); the stop string is not
  // part of the output text. stop_words_list holds token sequences (the engine's).
  std::vector<std::string> stop_words_str;
  std::vector<std::vector<int32_t>> stop_words_list;
  bool ignore_eos = false;
  int64_t timeout_ms = 0;  // 0: none; counted from submission
  // Plain decoding for this request where the engine speculates (RTP-LLM's field).
  bool force_disable_sp_run = false;

  // Several outputs per prompt: independent samples (num_return_sequences) or beam
  // search (num_beams > 1, returning the best num_return_sequences beams).
  int32_t num_return_sequences = 1;
  int32_t num_beams = 1;
  float length_penalty = 1.0f;  // beam score = sum logprobs / generated_len^length_penalty

  // Per-token log-probabilities of the model's distribution (before any processing),
  // with the top_logprobs most likely alternatives. Sampled sequences only: beams
  // report their summed log-probability (cum_log_prob) instead.
  bool return_logprobs = false;
  int32_t top_logprobs = 0;

  // Structured output: the text generated matches a regex, is one of a list of choices,
  // follows a GBNF grammar or is a JSON object (generate_config fields regex, choice,
  // ebnf, response_format {"type": "json_object"}; at most one). The engine needs it
  // compiled against the model's vocabulary (`grammar`: TextEngine compiles it from the
  // tokenizer at submission); each sequence then keeps a matcher that masks the tokens
  // the grammar refuses, allows EOS only where the text is complete, and stops the
  // sequence once nothing may follow.
  std::optional<grammar::GrammarSpec> constraint;
  std::shared_ptr<const grammar::CompiledGrammar> grammar;

  bool is_greedy() const { return temperature == 0.0f || top_k == 1; }
  bool is_beam_search() const { return num_beams > 1; }
  // Sequences the request runs at once.
  int32_t width() const { return is_beam_search() ? num_beams : num_return_sequences; }

  // Parses a JSON object; throws InvalidArgument naming the offending field.
  static GenerateConfig from_json(const Json& json);
  Json to_json() const;

  // Model-independent value checks (from_json runs them); throws InvalidArgument.
  void validate() const;
  // Checks that need the model: token ids within the vocabulary, lengths within the
  // model's maximum sequence length for a prompt of prompt_len tokens, a constraint
  // compiled for a vocabulary of vocab_size.
  void validate_for_model(int32_t vocab_size, int32_t max_seq_len, int32_t prompt_len) const;
};

}  // namespace tachyon
