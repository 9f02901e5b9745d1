#include "cli/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "engine/sampler.h"

namespace tachyon::cli {
namespace {

constexpr int32_t kBlockSize = 16;

// The result so far from the sums of the scored tokens' NLL and its square.
void finish(PerplexityResult& r, double sum, double sum_sq) {
  const double n = static_cast<double>(r.scored_tokens);
  r.nll = sum / n;
  const double var = std::max(sum_sq / n - r.nll * r.nll, 0.0);
  r.nll_stderr = r.scored_tokens > 1 ? std::sqrt(var / (n - 1)) : 0.0;
  r.ppl = std::exp(r.nll);
  r.ppl_stderr = r.ppl * r.nll_stderr;
}

}  // namespace

void check_perplexity_input(int64_t tokens, int32_t ctx, int32_t batch, int32_t window) {
  if (ctx < 2) raise<InvalidArgument>("--ctx: {} is too small (at least 2 tokens)", ctx);
  if (ctx > window)
    raise<InvalidArgument>("--ctx: {} is larger than the model's window ({} tokens)", ctx, window);
  if (batch < 1) raise<InvalidArgument>("--batch: {} is too small (at least 1 chunk)", batch);
  if (tokens < ctx)
    raise<InvalidArgument>("--text: {} tokens do not fill one chunk of --ctx {} tokens", tokens,
                           ctx);
}

PerplexityResult compute_perplexity(LanguageModel& model, std::span<const int32_t> tokens,
                                    int32_t ctx, int32_t batch, int32_t chunk_start,
                                    const PerplexityProgress& progress) {
  check_perplexity_input(static_cast<int64_t>(tokens.size()), ctx, batch, model.max_seq_len());
  const int64_t chunks = static_cast<int64_t>(tokens.size()) / ctx;
  const int64_t vocab = model.vocab_size();
  for (int64_t i = 0; i < chunks * ctx; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      raise<InvalidArgument>("token id {} at {} is outside the vocabulary ({})", tokens[i], i,
                             vocab);
  if (chunk_start >= vocab)
    raise<InvalidArgument>("chunk start token {} is outside the vocabulary ({})", chunk_start,
                           vocab);

  batch = static_cast<int32_t>(std::min<int64_t>(batch, chunks));
  const int32_t blocks_per_seq = (ctx + kBlockSize - 1) / kBlockSize;
  model.init_kv_cache(batch * blocks_per_seq, kBlockSize);

  const int32_t first = ctx / 2;  // the first scored position of a chunk
  PerplexityResult r;
  r.ctx = ctx;
  r.batch = batch;
  double sum = 0, sum_sq = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c0 = 0; c0 < chunks; c0 += batch) {
    const int32_t n = static_cast<int32_t>(std::min<int64_t>(batch, chunks - c0));
    ForwardBatch b;
    b.query_start.push_back(0);
    b.max_blocks_per_seq = blocks_per_seq;
    for (int32_t s = 0; s < n; ++s) {
      const auto text = tokens.subspan(static_cast<size_t>((c0 + s) * ctx), ctx);
      std::vector<int32_t> chunk(text.begin(), text.end());
      if (chunk_start >= 0) chunk[0] = chunk_start;
      const int32_t base = s * ctx;
      for (int32_t i = 0; i < ctx; ++i) {
        b.token_ids.push_back(chunk[i]);
        b.positions.push_back(i);
      }
      // Row i's logits predict token i + 1: rows first - 1 .. ctx - 2.
      for (int32_t i = first - 1; i < ctx - 1; ++i) b.logits_rows.push_back(base + i);
      b.query_start.push_back(base + ctx);
      b.context_lens.push_back(ctx);
      b.prompt_lens.push_back(ctx);
      b.layouts.push_back(model.prompt_layout(chunk));
      for (int32_t k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s * blocks_per_seq + k);
    }
    const Tensor logits = model.forward(b);
    const float* data = logits.data<float>();
    for (int32_t s = 0; s < n; ++s) {
      const int64_t start = (c0 + s) * ctx;
      for (int32_t i = first; i < ctx; ++i) {
        const int64_t row = static_cast<int64_t>(s) * (ctx - first) + (i - first);
        const float* logits = data + row * vocab;  // -log p(token): log-softmax in double
        const double nll = log_sum_exp(logits, static_cast<int32_t>(vocab)) -
                           static_cast<double>(logits[tokens[start + i]]);
        sum += nll;
        sum_sq += nll * nll;
      }
      r.chunks += 1;
      r.scored_tokens += ctx - first;
      r.evaluated_tokens += ctx;
      finish(r, sum, sum_sq);
      r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (progress) progress(r);
    }
  }
  return r;
}

}  // namespace tachyon::cli
