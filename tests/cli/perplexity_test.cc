// The perplexity computation (cli/perplexity.cc) on the bundled demo model on the CPU,
// against log-probabilities computed here with a fresh forward pass per prefix.
#include "cli/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

const std::string kModel = std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";
const std::string kText = std::string(TACHYON_SOURCE_DIR) + "/tests/cli/data/kjv_genesis_1.txt";

std::unique_ptr<Model> cpu_model() {
  LoadOptions opts;
  opts.device = Device{};  // the CPU
  return load_model(kModel, opts);
}

std::vector<int32_t> kjv_tokens() {
  std::ifstream in(kText);
  std::ostringstream s;
  s << in.rdbuf();
  return Tokenizer::load(kModel)->encode(s.str(), true);
}

// -log p(tokens[n] | tokens[0, n)) from one forward pass over the prefix alone, in a
// fresh cache, with the log-softmax summed here in long double.
double prefix_nll(Model& model, std::span<const int32_t> chunk, int32_t n) {
  const int32_t blocks = (n + 15) / 16;
  model.init_kv_cache(blocks, 16);
  ForwardBatch b;
  for (int32_t i = 0; i < n; ++i) {
    b.token_ids.push_back(chunk[i]);
    b.positions.push_back(i);
  }
  b.query_start = {0, n};
  b.context_lens = {n};
  b.logits_rows = {n - 1};
  b.max_blocks_per_seq = blocks;
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  const Tensor logits = model.forward(b);
  const float* row = logits.data<float>();
  long double sum = 0;
  for (int64_t v = 0; v < logits.dim(1); ++v) sum += std::exp(static_cast<long double>(row[v]));
  return static_cast<double>(std::log(sum) - static_cast<long double>(row[chunk[n]]));
}

TEST(Perplexity, EqualsPerPrefixLogProbabilities) {
  auto model = cpu_model();
  const std::vector<int32_t> tokens = kjv_tokens();
  constexpr int32_t kCtx = 32;
  ASSERT_GT(tokens.size(), 3u * kCtx + 5);
  // Three chunks and a partial one (dropped).
  const std::span<const int32_t> text(tokens.data(), 3 * kCtx + 5);

  ASSERT_EQ(tokens[0], 1);  // BOS
  ASSERT_NE(text[kCtx], 1);

  // The chunks as they are, and each opened with BOS as llama.cpp does.
  std::vector<double> nlls;
  for (int32_t chunk_start : {-1, 1}) {
    SCOPED_TRACE(chunk_start);
    std::vector<double> nll;
    for (int32_t c = 0; c < 3; ++c) {
      const auto from = text.subspan(static_cast<size_t>(c) * kCtx, kCtx);
      std::vector<int32_t> chunk(from.begin(), from.end());
      if (chunk_start >= 0) chunk[0] = chunk_start;
      for (int32_t i = kCtx / 2; i < kCtx; ++i) nll.push_back(prefix_nll(*model, chunk, i));
    }
    double mean = 0;
    for (double x : nll) mean += x;
    mean /= static_cast<double>(nll.size());
    double ss = 0;
    for (double x : nll) ss += (x - mean) * (x - mean);
    const double n = static_cast<double>(nll.size());
    const double stderr_mean = std::sqrt(ss / n / (n - 1));

    const PerplexityResult r = compute_perplexity(*model, text, kCtx, 1, chunk_start);
    EXPECT_EQ(r.chunks, 3);
    EXPECT_EQ(r.scored_tokens, 3 * kCtx / 2);
    EXPECT_EQ(r.evaluated_tokens, 3 * kCtx);
    EXPECT_EQ(r.ctx, kCtx);
    EXPECT_NEAR(r.nll, mean, 1e-4);
    EXPECT_NEAR(r.ppl, std::exp(mean), 1e-4 * std::exp(mean));
    EXPECT_NEAR(r.nll_stderr, stderr_mean, 1e-4);
    EXPECT_NEAR(r.ppl_stderr, std::exp(mean) * stderr_mean, 1e-3 * std::exp(mean) * stderr_mean);
    EXPECT_GT(r.ppl, 1.0);
    nlls.push_back(r.nll);
  }
  // The token at a chunk's head is context the scored half sees.
  EXPECT_GT(std::abs(nlls[0] - nlls[1]), 1e-3);
}

TEST(Perplexity, BatchesAgreeAndReportEveryChunk) {
  auto model = cpu_model();
  const std::vector<int32_t> tokens = kjv_tokens();
  constexpr int32_t kCtx = 48;
  const int64_t chunks = static_cast<int64_t>(tokens.size()) / kCtx;
  ASSERT_GE(chunks, 5);
  std::vector<int64_t> seen;
  const PerplexityResult one = compute_perplexity(
      *model, tokens, kCtx, 1, 1, [&](const PerplexityResult& p) { seen.push_back(p.chunks); });
  ASSERT_EQ(seen.size(), static_cast<size_t>(chunks));
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int64_t>(i) + 1);
  EXPECT_EQ(one.batch, 1);
  // Batches that divide the chunks, that leave a short last pass, and larger than all.
  for (int32_t batch : {2, 3, 100}) {
    PerplexityResult last;
    const PerplexityResult r = compute_perplexity(*model, tokens, kCtx, batch, 1,
                                                  [&](const PerplexityResult& p) { last = p; });
    EXPECT_EQ(r.batch, std::min<int64_t>(batch, chunks)) << batch;
    EXPECT_EQ(r.chunks, one.chunks) << batch;
    EXPECT_EQ(r.scored_tokens, one.scored_tokens) << batch;
    EXPECT_NEAR(r.nll, one.nll, 1e-6) << batch;
    EXPECT_NEAR(r.ppl, one.ppl, 1e-6 * one.ppl) << batch;
    EXPECT_NEAR(r.ppl_stderr, one.ppl_stderr, 1e-5 * one.ppl_stderr) << batch;
    EXPECT_EQ(last.chunks, r.chunks) << batch;
    EXPECT_EQ(last.ppl, r.ppl) << batch;
  }
}

TEST(Perplexity, TrainingStyleTextScoresFarBelowItsTokensShuffled) {
  auto model = cpu_model();
  const std::vector<int32_t> tokens = kjv_tokens();
  std::vector<int32_t> shuffled = tokens;
  std::mt19937 rng(7);
  for (size_t i = shuffled.size() - 1; i > 1; --i)  // BOS stays first
    std::swap(shuffled[i], shuffled[1 + rng() % i]);
  const PerplexityResult kjv = compute_perplexity(*model, tokens, 64, 2, 1);
  const PerplexityResult mixed = compute_perplexity(*model, shuffled, 64, 2, 1);
  EXPECT_EQ(kjv.scored_tokens, mixed.scored_tokens);
  EXPECT_GT(mixed.ppl, 10 * kjv.ppl) << kjv.ppl << " vs " << mixed.ppl;
}

TEST(Perplexity, BadInputIsRefusedNamingTheOption) {
  auto model = cpu_model();
  const std::vector<int32_t> tokens = kjv_tokens();
  auto message = [&](std::span<const int32_t> t, int32_t ctx, int32_t batch,
                     int32_t chunk_start = -1) {
    try {
      compute_perplexity(*model, t, ctx, batch, chunk_start);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(tokens, 1, 1).find("--ctx: 1 is too small"), std::string::npos);
  EXPECT_NE(message(tokens, 1025, 1).find("--ctx: 1025 is larger than the model's window (1024"),
            std::string::npos);
  EXPECT_NE(message(tokens, 32, 0).find("--batch: 0"), std::string::npos);
  EXPECT_NE(message(std::span(tokens).first(31), 32, 1).find("--text: 31 tokens do not fill"),
            std::string::npos);
  std::vector<int32_t> bad(tokens.begin(), tokens.begin() + 32);
  bad[20] = 32000;
  EXPECT_NE(message(bad, 32, 1).find("token id 32000 at 20 is outside the vocabulary"),
            std::string::npos);
  EXPECT_NE(message(tokens, 32, 1, 32000).find("chunk start token 32000 is outside"),
            std::string::npos);
  // A token past the last full chunk is never read.
  std::vector<int32_t> tail(tokens.begin(), tokens.begin() + 32);
  tail.push_back(-1);
  EXPECT_EQ(message(tail, 16, 1), "no error");
}

}  // namespace
}  // namespace tachyon::cli
