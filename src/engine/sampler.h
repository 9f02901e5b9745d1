// Logits to tokens, per sequence, with the request's own parameters: any mix of greedy
// and sampled requests can share a batch, and a row's result depends only on that row,
// the sequence's tokens and its RNG key (counter-based), never on its neighbours.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/sampling.h"
#include "engine/generate_config.h"
#include "engine/rng.h"

namespace tachyon {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
};

// What the sampler knows of one sequence.
struct SamplingContext {
  const GenerateConfig* config = nullptr;
  std::span<const int32_t> tokens;  // prompt + generated so far
  int32_t prompt_len = 0;
  std::span<const int32_t> eos_ids;  // banned while fewer than min_new_tokens are generated
  RngKey rng;
  // The tokens allowed next (structured output): a bitmask of token_mask_words(vocab)
  // words (backend/sampling.h), or empty: every token. The last processor (-inf on the
  // others); not part of token_adjustments() (SamplingBatch::token_masks carries it).
  std::span<const uint32_t> allowed = {};
};

struct SampledToken {
  int32_t token = -1;
  float logprob = 0.0f;  // of the model's distribution (raw log-softmax); with return_logprobs
  // Of the distribution the token was drawn from: chosen_logprob of the processed logits
  // (always set; the sequence's cum_log_prob sums these).
  float sample_logprob = 0.0f;
  std::vector<TokenLogprob> top;  // top_logprobs alternatives, most likely first
};

// The logits processors, in place, in this order: repetition penalty, presence and
// frequency penalties, logit bias, then bans (-inf): no_repeat_ngram_size, bad words,
// EOS before min_new_tokens, the tokens outside ctx.allowed. Works on logits or
// log-probabilities alike.
void process_logits(float* logits, int32_t vocab, const SamplingContext& ctx);

// True when process_logits would change nothing for this context.
bool processors_inactive(const SamplingContext& ctx);

// Index of the largest value, lowest index on ties. Throws InvalidArgument when a value
// is NaN or every value is -inf.
int32_t argmax(const float* x, int32_t n);

// log(sum(exp(x))) in double precision.
double log_sum_exp(const float* x, int32_t n);

// The log-probability of `token` in the distribution a row is drawn from, as RTP-LLM
// reports it: log-softmax of the processed logits (after penalties, bias and bans) divided
// by the temperature (1 for greedy rows), over the whole vocabulary: top_k / top_p /
// min_p choose among the tokens but do not renormalize it. 1 / temperature is inv_t.
float chosen_logprob(const float* processed, int32_t vocab, int32_t token, float inv_t);
// inv_t of a config's draw: 1 for greedy decoding, else 1 / temperature.
float draw_inv_temperature(const GenerateConfig& config);

// The k largest entries of log-softmax(x) (lse = log_sum_exp(x)), largest first, lowest
// index first on ties.
std::vector<TokenLogprob> top_logprobs(const float* x, int32_t n, double lse, int32_t k);

// process_logits in sparse form, for sampling on a device: every token it would touch
// for this context, once each, sorted by token (appended to *out).
void token_adjustments(const SamplingContext& ctx, int32_t vocab,
                       std::vector<TokenAdjustment>* out);
// Applies a row's adjustments in place as the device does (the reference of tests):
// the same result as process_logits on the context they came from.
void apply_token_adjustments(float* logits, int32_t vocab, const RowSampling& row,
                             std::span<const TokenAdjustment> adjustments);
// The device-side parameters of a config's draw keyed by `key` (mode kDevice).
RowSampling row_sampling(const GenerateConfig& config, const RngKey& key);

class Sampler {
 public:
  // Chooses the next token from one row of raw logits [vocab]. Throws InvalidArgument
  // when the row has NaNs or the processors left no token allowed.
  SampledToken sample(const float* logits, int32_t vocab, const SamplingContext& ctx);

  // The token drawn from processed logits with temperature / top_k / top_p / min_p
  // (greedy when the config says so).
  int32_t choose(const float* logits, int32_t vocab, const GenerateConfig& config,
                 const RngKey& key);

  // sample() in parts, for callers that choose the token otherwise (speculative
  // decoding's verification): the row's processed logits (the row itself when no
  // processor acts; valid until the next call), and what sample() reports for `token`
  // drawn from them (`logits`: the raw row, for return_logprobs).
  const float* process(const float* logits, int32_t vocab, const SamplingContext& ctx);
  static SampledToken describe(const float* logits, const float* processed, int32_t vocab,
                               int32_t token, const GenerateConfig& config);

 private:
  std::vector<float> processed_;  // processed logits
  std::vector<float> weights_;    // sampling weights
  struct Cand {
    float logit;
    int32_t token;
    double weight;  // exp((logit - max) / temperature)
  };
  std::vector<Cand> cands_;
};

}  // namespace tachyon
