// The perplexity of a model on a token sequence, as llama.cpp's llama-perplexity
// computes it: the tokens are split into consecutive chunks of `ctx` tokens (a last
// partial chunk is dropped), each chunk runs as its own sequence from position 0, and
// only its second half is scored (the first half is context):
//   NLL = -mean over the scored tokens t_i (i in [ctx/2, ctx)) of log p(t_i | t_<i),
//   PPL = exp(NLL),
// with the log-softmax of every scored row in double precision. The error reported is
// the standard error of the mean NLL, sqrt(var / (N - 1)), propagated to the PPL
// (PPL * stderr(NLL)), as llama.cpp estimates it.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/forward.h"

namespace tachyon::cli {

struct PerplexityResult {
  int32_t ctx = 0;
  int32_t batch = 0;
  int64_t chunks = 0;            // chunks scored
  int64_t scored_tokens = 0;     // tokens whose log-probability counts
  int64_t evaluated_tokens = 0;  // tokens run through the model (chunks * ctx)
  double nll = 0;                // mean negative log-likelihood per scored token (nats)
  double nll_stderr = 0;
  double ppl = 0;
  double ppl_stderr = 0;
  double seconds = 0;  // in the model's forward passes and the scoring
};

// Called after each chunk with the running result (over the chunks done so far).
using PerplexityProgress = std::function<void(const PerplexityResult& running)>;

// Throws InvalidArgument naming the option when `tokens` tokens cannot be scored in
// chunks of `ctx` with `batch` chunks per pass on a model of `window` tokens: ctx < 2,
// ctx > window, batch < 1, or fewer tokens than one chunk.
void check_perplexity_input(int64_t tokens, int32_t ctx, int32_t batch, int32_t window);

// The perplexity of `model` on `tokens` in chunks of `ctx` tokens, `batch` chunks per
// forward pass (each a sequence of its own; the KV cache is sized for `batch` chunks of
// `ctx` tokens, replacing the model's). With chunk_start >= 0 every chunk's first token is
// replaced by it, as llama.cpp puts BOS at the head of each chunk when the tokenizer adds
// one (that position is context, never scored). Throws InvalidArgument, before any forward pass,
// when ctx < 2, ctx exceeds the model's window, batch < 1, a token (or chunk_start) is
// outside the vocabulary, or the tokens do not fill one chunk.
PerplexityResult compute_perplexity(LanguageModel& model, std::span<const int32_t> tokens,
                                    int32_t ctx, int32_t batch, int32_t chunk_start = -1,
                                    const PerplexityProgress& progress = {});

}  // namespace tachyon::cli
