// Token sampling on the GPU (CudaBackend::sample) against the host sampler
// (engine/sampler.h) on random logits: greedy exactly, the logits processing exactly,
// the Philox draws bit for bit, seeded sampling deterministic and batch invariant, the
// drawn distribution equal to the one the parameters define (chi-square over many
// keys), and each parameter's boundary values.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "backend/cuda/cuda_test_util.h"
#include "engine/sampler.h"

namespace tachyon {
namespace {

using cuda_test::make_gpu;

struct Gpu {
  std::unique_ptr<cuda::CudaBackend> be = make_gpu(DType::kF32);
};

std::vector<float> random_logits(std::mt19937& rng, int64_t n, float stddev = 3.f) {
  std::normal_distribution<float> d(0.f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// Two more copies of the row's largest logit at random places (ties at the top).
void tie_top(std::vector<float>& row, std::mt19937& rng) {
  const float top = *std::max_element(row.begin(), row.end());
  const int64_t n = static_cast<int64_t>(row.size());
  row[static_cast<size_t>(rng() % n)] = top;
  row[static_cast<size_t>(rng() % n)] = top;
}

// Runs sample() over rows [R, V]; returns the tokens, the processed logits and the
// tokens' log-probabilities.
std::vector<int32_t> run_sample(cuda::CudaBackend& be, const std::vector<float>& logits, int64_t V,
                                const SamplingBatch& batch, std::vector<float>* processed = nullptr,
                                std::vector<float>* logprobs = nullptr) {
  const int64_t R = static_cast<int64_t>(batch.rows.size());
  Tensor d = be.upload(logits.data(), {R, V}, DType::kF32, {});
  Tensor ids = be.alloc({R}, DType::kI32);
  Tensor lp = be.alloc({R}, DType::kF32);
  be.sample(d, batch, ids, lp);
  std::vector<int32_t> out(static_cast<size_t>(R));
  be.download(ids, out.data());
  if (logprobs != nullptr) {
    logprobs->resize(static_cast<size_t>(R));
    be.download(lp, logprobs->data());
  }
  if (processed != nullptr) {
    processed->resize(logits.size());
    be.download(d, processed->data());
  }
  return out;
}

RowSampling device_row(const GenerateConfig& c, uint64_t seed, uint32_t index, uint64_t step) {
  return row_sampling(c, RngKey{seed, index, step, 0});
}

SamplingBatch single_batch(const std::vector<RowSampling>& rows) {
  SamplingBatch b;
  b.rows = rows;
  return b;
}

TEST(CudaSampling, UniformsMatchHostPhilox) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  std::mt19937_64 rng(5);
  std::vector<RowSampling> rows;
  std::vector<double> want;
  for (int i = 0; i < 4096; ++i) {
    RngKey k{rng(), static_cast<uint32_t>(rng()), i % 3 == 0 ? rng() : rng() % 1000, 0};
    if (i < 4) k = RngKey{static_cast<uint64_t>(i), 0, 0, 0};
    RowSampling r;
    r.seed = k.seed;
    r.seq_index = k.seq_index;
    r.step = k.step;
    rows.push_back(r);
    want.push_back(rng_uniform(k));
  }
  const auto got = g.be->sample_uniforms(rows);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "key " << i;
}

// Greedy with every logits processor, against Sampler::sample on the same context.
TEST(CudaSampling, GreedyWithProcessorsMatchesHostExactly) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  std::mt19937 rng(11);
  for (const int64_t V : {int64_t{7}, int64_t{1000}, int64_t{32003}, int64_t{128256}}) {
    const int64_t R = 24;
    std::vector<float> logits;
    SamplingBatch batch;
    batch.adjust_start.push_back(0);
    std::vector<GenerateConfig> cfgs(static_cast<size_t>(R));
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(R));
    const std::vector<int32_t> eos = {2};
    for (int64_t r = 0; r < R; ++r) {
      auto row = random_logits(rng, V, 2.f);
      if (r % 4 == 1) tie_top(row, rng);  // the lowest id wins
      logits.insert(logits.end(), row.begin(), row.end());
      GenerateConfig& c = cfgs[static_cast<size_t>(r)];
      c.temperature = 0.f;
      if (r % 3 == 0) c.repetition_penalty = 1.3f;
      if (r % 3 == 1) c.presence_penalty = 0.7f, c.frequency_penalty = 0.4f;
      if (r % 5 == 2) c.frequency_penalty = -0.6f;
      if (r % 6 == 3) c.logit_bias = {{0, 5.f}, {static_cast<int32_t>(V - 1), -3.f}};
      if (r % 7 == 4) c.no_repeat_ngram_size = 2;
      if (r % 8 == 5) c.min_new_tokens = 100;
      if (r % 9 == 6) c.bad_words_list = {{static_cast<int32_t>(rng() % V)}};
      auto& t = tokens[static_cast<size_t>(r)];
      for (int i = 0; i < 60; ++i)
        t.push_back(static_cast<int32_t>(rng() % std::min<int64_t>(V, 50)));
      SamplingContext ctx{&c, t, 20, eos, {}};
      batch.rows.push_back(device_row(c, 1, 0, 0));
      token_adjustments(ctx, static_cast<int32_t>(V), &batch.adjustments);
      batch.adjust_start.push_back(static_cast<int32_t>(batch.adjustments.size()));
    }
    std::vector<float> processed;
    const auto got = run_sample(*g.be, logits, V, batch, &processed);
    Sampler sampler;
    for (int64_t r = 0; r < R; ++r) {
      const auto& t = tokens[static_cast<size_t>(r)];
      SamplingContext ctx{&cfgs[static_cast<size_t>(r)], t, 20, eos, {}};
      const float* raw = logits.data() + r * V;
      EXPECT_EQ(got[static_cast<size_t>(r)],
                sampler.sample(raw, static_cast<int32_t>(V), ctx).token)
          << "V " << V << " row " << r;
      // The device's processed logits are the host's (the same float operations; a
      // host build that contracts a * b + c into an FMA may differ in the last bit).
      std::vector<float> want(raw, raw + V);
      process_logits(want.data(), static_cast<int32_t>(V), ctx);
      for (int64_t v = 0; v < V; ++v) {
        const float a = processed[static_cast<size_t>(r * V + v)], b = want[static_cast<size_t>(v)];
        if (a == b) continue;
        ASSERT_LE(std::abs(a - b), 1e-6f * std::max(1.f, std::abs(b)))
            << "V " << V << " row " << r << " token " << v << ": " << a << " vs " << b;
      }
    }
  }
}

// The split greedy scan for steps whose rows are all greedy and unadjusted: the ids the
// one-block kernel gives the same rows in a step beside a sampled row, exactly, over
// vocabularies that end mid-chunk, are no multiple of 4 (the scalar path) or take one
// chunk, with ties at the top (also across chunks), a NaN, a +inf and a row of -inf, and
// repeated launches (the counters are left zero).
TEST(CudaSampling, GreedySplitScanMatchesOneBlockKernel) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  std::mt19937 rng(21);
  for (const int64_t V : {int64_t{7}, int64_t{4096}, int64_t{32003}, int64_t{128256}}) {
    const int64_t R = 37;
    std::vector<float> logits;
    for (int64_t r = 0; r < R; ++r) {
      auto row = random_logits(rng, V);
      const float top = *std::max_element(row.begin(), row.end());
      if (r % 4 == 1) tie_top(row, rng);  // anywhere in the row
      if (r % 4 == 2) row[static_cast<size_t>(V - 1)] = top, row[static_cast<size_t>(V / 2)] = top;
      if (r == 3) row[static_cast<size_t>(rng() % V)] = std::nanf("");
      if (r == 5) row[static_cast<size_t>(V - 1)] = INFINITY;
      if (r == 6) std::fill(row.begin(), row.end(), -INFINITY);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    GenerateConfig greedy;
    greedy.temperature = 0.f;
    std::vector<RowSampling> rows;
    for (int64_t r = 0; r < R; ++r) rows.push_back(device_row(greedy, 1, 0, 0));
    const SamplingBatch batch = single_batch(rows);
    // The same rows and one sampled row after them: the one-block kernel for all.
    std::vector<float> with_sampled = logits;
    const auto extra = random_logits(rng, V);
    with_sampled.insert(with_sampled.end(), extra.begin(), extra.end());
    GenerateConfig sampled;
    sampled.temperature = 1.f;
    std::vector<RowSampling> rows_sampled = rows;
    rows_sampled.push_back(device_row(sampled, 5, 0, 0));
    auto want = run_sample(*g.be, with_sampled, V, single_batch(rows_sampled));
    want.pop_back();
    for (int rep = 0; rep < 3; ++rep) {
      const auto got = run_sample(*g.be, logits, V, batch);
      for (int64_t r = 0; r < R; ++r)
        ASSERT_EQ(got[static_cast<size_t>(r)], want[static_cast<size_t>(r)])
            << "V " << V << " row " << r << " rep " << rep;
    }
    EXPECT_EQ(want[3], kTokenBadLogits);
    EXPECT_EQ(want[5], kTokenBadLogits);
    EXPECT_EQ(want[6], kTokenNoneAllowed);
    EXPECT_EQ(want[0], argmax(logits.data(), static_cast<int32_t>(V)));
  }
}

TEST(CudaSampling, ErrorsAndHostRows) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  const int64_t V = 3000;
  std::mt19937 rng(3);
  std::vector<float> logits;
  const int R = 8;
  for (int r = 0; r < R; ++r) {
    auto row = random_logits(rng, V);
    if (r == 0) row[17] = std::nanf("");
    if (r == 1) row[2999] = INFINITY;
    if (r == 2) std::fill(row.begin(), row.end(), -INFINITY);
    if (r == 7) std::fill(row.begin() + 10, row.end(), 1.f);  // ties cut by top_k / top_p
    logits.insert(logits.end(), row.begin(), row.end());
  }
  GenerateConfig sampled;
  sampled.temperature = 0.7f;
  std::vector<RowSampling> rows;
  for (int r = 0; r < R; ++r) rows.push_back(device_row(sampled, 9, 0, static_cast<uint64_t>(r)));
  rows[3].mode = RowSampling::Mode::kHost;
  rows[4].greedy = true;
  rows[5].top_k = 7, rows[5].top_p = 0.9f, rows[5].min_p = 0.01f;
  rows[6].top_p = 0.5f;
  rows[7].top_k = 100, rows[7].top_p = 0.3f;
  std::vector<float> processed;
  const auto got = run_sample(*g.be, logits, V, single_batch(rows), &processed);
  EXPECT_EQ(got[0], kTokenBadLogits);
  EXPECT_EQ(got[1], kTokenBadLogits);
  EXPECT_EQ(got[2], kTokenNoneAllowed);
  EXPECT_EQ(got[3], kTokenOnHost);
  EXPECT_EQ(got[4], argmax(logits.data() + 4 * V, static_cast<int32_t>(V)));
  for (int r = 5; r < R; ++r) EXPECT_GE(got[static_cast<size_t>(r)], 0) << r;
  EXPECT_LT(got[7], 10 + 100) << "top_k keeps the lowest ids of the ties";
  for (int64_t v = 0; v < V; ++v) ASSERT_EQ(processed[3 * V + v], logits[3 * V + v]);
}

// Allowed-token masks: the disallowed tokens of a masked kDevice row become -inf after
// its adjustments (the host's process_logits with ctx.allowed, exactly), an unmasked
// row and a kHost row are untouched, a row with nothing allowed gives kTokenNoneAllowed.
TEST(CudaSampling, TokenMasksMatchHostProcessing) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  const int64_t V = 1000;  // not a multiple of 32: the last word is partial
  const int64_t W = token_mask_words(V);
  std::mt19937 rng(11);
  const int R = 6;
  std::vector<float> logits;
  for (int r = 0; r < R; ++r) {
    const auto row = random_logits(rng, V);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  // Mask 0: every third token and the last one; mask 1: none allowed.
  std::vector<uint32_t> masks(static_cast<size_t>(2 * W), 0u);
  for (int64_t t = 0; t < V; ++t)
    if (t % 3 == 0 || t == V - 1) masks[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
  GenerateConfig greedy;
  greedy.temperature = 0.f;
  greedy.logit_bias = {{3, 50.f}, {4, 60.f}};  // 4 is the best token, but masked off
  GenerateConfig sampled;
  sampled.temperature = 0.8f;
  SamplingBatch b;
  b.adjust_start.push_back(0);
  const std::vector<int32_t> tokens = {1, 2};
  for (int r = 0; r < R; ++r) {
    const GenerateConfig& c = r == 1 ? sampled : greedy;
    b.rows.push_back(device_row(c, 5, static_cast<uint32_t>(r), 0));
    SamplingContext ctx;
    ctx.config = &c;
    ctx.tokens = tokens;
    token_adjustments(ctx, static_cast<int32_t>(V), &b.adjustments);
    b.adjust_start.push_back(static_cast<int32_t>(b.adjustments.size()));
  }
  b.rows[4].mode = RowSampling::Mode::kHost;
  b.token_masks = masks;
  b.mask_of = {0, 0, -1, 1, 0, -1};
  std::vector<float> processed;
  const auto got = run_sample(*g.be, logits, V, b, &processed);
  for (int r : {0, 2}) {
    // The host's processing of the greedy row with its mask (none for row 2).
    std::vector<float> want(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    SamplingContext ctx;
    ctx.config = &greedy;
    ctx.tokens = tokens;
    if (r == 0) ctx.allowed = std::span<const uint32_t>(masks.data(), static_cast<size_t>(W));
    process_logits(want.data(), static_cast<int32_t>(V), ctx);
    for (int64_t v = 0; v < V; ++v)
      ASSERT_EQ(processed[static_cast<size_t>(r * V + v)], want[static_cast<size_t>(v)])
          << r << " " << v;
    EXPECT_EQ(got[static_cast<size_t>(r)], argmax(want.data(), static_cast<int32_t>(V)));
  }
  EXPECT_EQ(got[0], 3);  // the best allowed token
  EXPECT_EQ(got[1] % 3 == 0 || got[1] == V - 1, true) << got[1];
  EXPECT_EQ(got[2], 4);
  EXPECT_EQ(got[3], kTokenNoneAllowed);
  EXPECT_EQ(got[4], kTokenOnHost);
  for (int64_t v = 0; v < V; ++v)
    ASSERT_EQ(processed[static_cast<size_t>(4 * V + v)], logits[static_cast<size_t>(4 * V + v)]);
  EXPECT_EQ(got[5], 4);
}

// Each token chosen on the device comes back with its log-probability in the distribution
// it was drawn from: the host sampler's chosen_logprob of that token (log-softmax of the processed
// row over the temperature, 1 when greedy) for greedy rows (the split scan and the adjusted path),
// sampled rows with every truncation and penalties; 0 for rows without a token.
TEST(CudaSampling, ChosenLogprobsMatchHost) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  std::mt19937 rng(23);
  const std::vector<int32_t> eos{2};
  for (const int64_t V : {int64_t{1000}, int64_t{32003}, int64_t{128256}}) {
    const int64_t R = 12;
    std::vector<float> logits;
    std::vector<GenerateConfig> cfgs(static_cast<size_t>(R));
    std::vector<std::vector<int32_t>> tokens(static_cast<size_t>(R));
    for (int64_t r = 0; r < R; ++r) {
      const auto row = random_logits(rng, V);
      logits.insert(logits.end(), row.begin(), row.end());
      GenerateConfig& c = cfgs[static_cast<size_t>(r)];
      c.temperature = r % 4 == 0 ? 0.f : 0.5f + 0.25f * static_cast<float>(r % 5);
      if (r % 3 == 1) c.top_k = 40;
      if (r % 3 == 2) c.top_p = 0.8f;
      if (r % 5 == 3) c.min_p = 0.05f;
      if (r % 4 == 1) c.repetition_penalty = 1.3f, c.presence_penalty = 0.5f;
      for (int i = 0; i < 30; ++i)
        tokens[static_cast<size_t>(r)].push_back(static_cast<int32_t>(rng() % V));
    }
    auto run = [&](bool all_plain_greedy) {
      SamplingBatch batch;
      if (!all_plain_greedy) batch.adjust_start.push_back(0);
      for (int64_t r = 0; r < R; ++r) {
        GenerateConfig c = cfgs[static_cast<size_t>(r)];
        if (all_plain_greedy) c = GenerateConfig{}, c.temperature = 0.f;
        SamplingContext ctx{&c, tokens[static_cast<size_t>(r)], 10, eos, {}};
        batch.rows.push_back(device_row(c, 31, 0, static_cast<uint64_t>(r)));
        if (all_plain_greedy) continue;
        if (!processors_inactive(ctx))
          token_adjustments(ctx, static_cast<int32_t>(V), &batch.adjustments);
        batch.adjust_start.push_back(static_cast<int32_t>(batch.adjustments.size()));
      }
      if (!all_plain_greedy) batch.rows[5].mode = RowSampling::Mode::kHost;
      std::vector<float> lps;
      const auto got = run_sample(*g.be, logits, V, batch, nullptr, &lps);
      Sampler sampler;
      for (int64_t r = 0; r < R; ++r) {
        const size_t i = static_cast<size_t>(r);
        if (!all_plain_greedy && r == 5) {
          EXPECT_EQ(got[i], kTokenOnHost);
          EXPECT_EQ(lps[i], 0.f);
          continue;
        }
        GenerateConfig c = cfgs[i];
        if (all_plain_greedy) c = GenerateConfig{}, c.temperature = 0.f;
        SamplingContext ctx{&c, tokens[i], 10, eos, RngKey{31, 0, static_cast<uint64_t>(r), 0}};
        // The device draws sampled rows its own way (the same distribution, not the same
        // token as the host's draw): the log-probability is checked for the token it chose.
        const auto Vi = static_cast<int32_t>(V);
        if (c.temperature == 0.f) {
          ASSERT_EQ(got[i], sampler.sample(logits.data() + r * V, Vi, ctx).token)
              << "V " << V << " row " << r;
        }
        ASSERT_TRUE(got[i] >= 0 && got[i] < Vi) << "V " << V << " row " << r;
        std::vector<float> processed(logits.begin() + r * V, logits.begin() + (r + 1) * V);
        process_logits(processed.data(), Vi, ctx);
        const float want = chosen_logprob(processed.data(), Vi, got[i], draw_inv_temperature(c));
        EXPECT_LT(lps[i], 1e-6f);
        EXPECT_NEAR(lps[i], want, 2e-4f + 1e-5f * std::fabs(want))
            << "V " << V << " row " << r << (all_plain_greedy ? " (split greedy)" : "");
      }
    };
    run(true);
    run(false);
  }
}

// A row's token depends on the row and its key only: alone, in a batch at another
// position among other rows, or run again.
TEST(CudaSampling, SeededDeterministicAndBatchInvariant) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  const int64_t V = 128256;
  std::mt19937 rng(17);
  std::vector<GenerateConfig> cfgs(4);
  cfgs[0].temperature = 1.0f;
  cfgs[1].temperature = 0.8f, cfgs[1].top_p = 0.9f;
  cfgs[2].temperature = 1.2f, cfgs[2].top_k = 50, cfgs[2].top_p = 0.95f, cfgs[2].min_p = 0.01f;
  cfgs[3].temperature = 0.6f, cfgs[3].min_p = 0.05f;
  const int64_t R = 16;
  std::vector<float> logits;
  std::vector<RowSampling> rows;
  for (int64_t r = 0; r < R; ++r) {
    auto row = random_logits(rng, V, 2.5f);
    logits.insert(logits.end(), row.begin(), row.end());
    rows.push_back(device_row(cfgs[static_cast<size_t>(r % 4)], 1234 + static_cast<uint64_t>(r),
                              static_cast<uint32_t>(r % 3), static_cast<uint64_t>(r)));
  }
  const auto batch1 = run_sample(*g.be, logits, V, single_batch(rows));
  const auto batch2 = run_sample(*g.be, logits, V, single_batch(rows));
  EXPECT_EQ(batch1, batch2);
  // Reversed order.
  std::vector<float> rev;
  std::vector<RowSampling> rev_rows;
  for (int64_t r = R - 1; r >= 0; --r) {
    rev.insert(rev.end(), logits.begin() + r * V, logits.begin() + (r + 1) * V);
    rev_rows.push_back(rows[static_cast<size_t>(r)]);
  }
  const auto reversed = run_sample(*g.be, rev, V, single_batch(rev_rows));
  for (int64_t r = 0; r < R; ++r) {
    EXPECT_EQ(reversed[static_cast<size_t>(R - 1 - r)], batch1[static_cast<size_t>(r)]) << r;
    const std::vector<float> one(logits.begin() + r * V, logits.begin() + (r + 1) * V);
    EXPECT_EQ(run_sample(*g.be, one, V, single_batch({rows[static_cast<size_t>(r)]}))[0],
              batch1[static_cast<size_t>(r)])
        << r;
  }
}

// The distribution a config defines on one row of logits, in double: the host's rules
// (top_k then top_p over the sorted order, lower ids first on ties, then min_p).
std::vector<double> reference_probs(const std::vector<float>& x, const GenerateConfig& c) {
  const int64_t V = static_cast<int64_t>(x.size());
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  const double m = x[static_cast<size_t>(order[0])];
  auto w = [&](int32_t i) { return std::exp((x[static_cast<size_t>(i)] - m) / c.temperature); };
  size_t keep = static_cast<size_t>(V);
  if (c.top_k > 0 && c.top_k < V) keep = static_cast<size_t>(c.top_k);
  if (c.top_p < 1.f) {
    double z = 0;
    for (size_t i = 0; i < keep; ++i) z += w(order[i]);
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += w(order[i]);
      if (cum >= c.top_p * z) {
        keep = i + 1;
        break;
      }
    }
  }
  const double min_logit = c.min_p > 0 ? m + c.temperature * std::log(c.min_p) : -INFINITY;
  std::vector<double> p(static_cast<size_t>(V), 0.0);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) {
    const int32_t t = order[i];
    if (x[static_cast<size_t>(t)] < min_logit) continue;
    p[static_cast<size_t>(t)] = w(t);
    total += w(t);
  }
  for (double& v : p) v /= total;
  return p;
}

// Draws n tokens from one row with n different keys (steps), in batches of rows.
std::vector<int64_t> histogram(cuda::CudaBackend& be, const std::vector<float>& row,
                               const GenerateConfig& c, int n) {
  const int64_t V = static_cast<int64_t>(row.size());
  std::vector<int64_t> h(static_cast<size_t>(V), 0);
  const int kBatch = 2048;
  std::vector<float> logits;
  for (int i = 0; i < kBatch; ++i) logits.insert(logits.end(), row.begin(), row.end());
  for (int done = 0; done < n; done += kBatch) {
    std::vector<RowSampling> rows;
    for (int i = 0; i < kBatch; ++i)
      rows.push_back(device_row(c, 77, 1, static_cast<uint64_t>(done + i)));
    for (int32_t t : run_sample(be, logits, V, single_batch(rows))) {
      EXPECT_GE(t, 0);
      if (t >= 0) ++h[static_cast<size_t>(t)];
    }
  }
  return h;
}

// Chi-square of counts against probabilities; tokens of probability 0 must not occur.
void expect_distribution(const std::vector<int64_t>& h, const std::vector<double>& p, int n,
                         const std::string& what) {
  double chi2 = 0, pooled_p = 0, pooled_n = 0;
  int dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) {
      EXPECT_EQ(h[i], 0) << what << ": token " << i << " is outside the kept set";
      continue;
    }
    const double e = p[i] * n;
    if (e < 5) {
      pooled_p += e;
      pooled_n += static_cast<double>(h[i]);
      continue;
    }
    chi2 += (static_cast<double>(h[i]) - e) * (static_cast<double>(h[i]) - e) / e;
    ++dof;
  }
  if (pooled_p >= 5) {
    chi2 += (pooled_n - pooled_p) * (pooled_n - pooled_p) / pooled_p;
    ++dof;
  }
  dof = std::max(dof, 1);
  // Far in the tail (p < 1e-6 for these degrees of freedom); the draws are seeded, so
  // the verdict is fixed.
  const double limit = dof + 7.0 * std::sqrt(2.0 * dof) + 25.0;
  std::printf("  %-40s chi2 %.1f  dof %d  (limit %.1f)\n", what.c_str(), chi2, dof, limit);
  EXPECT_LT(chi2, limit) << what;
}

TEST(CudaSampling, DistributionMatchesParameters) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  std::mt19937 rng(23);
  const int64_t V = 4099;
  // A head of 40 likely tokens over a long tail.
  std::vector<float> row = random_logits(rng, V, 1.f);
  for (int i = 0; i < 40; ++i) row[static_cast<size_t>(rng() % V)] += 6.f + (i % 5);
  struct Case {
    const char* name;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const Case cases[] = {
      {"temperature 1", 1.f, 0, 1.f, 0.f},
      {"temperature 0.5", 0.5f, 0, 1.f, 0.f},
      {"top_k 5", 1.f, 5, 1.f, 0.f},
      {"top_p 0.6", 1.f, 0, 0.6f, 0.f},
      {"min_p 0.1", 1.f, 0, 1.f, 0.1f},
      {"top_k 20 top_p 0.8", 0.9f, 20, 0.8f, 0.f},
      {"all three", 1.3f, 30, 0.9f, 0.02f},
      {"temperature 3", 3.f, 0, 1.f, 0.f},
      {"top_k V-1", 1.f, static_cast<int32_t>(V - 1), 1.f, 0.f},
  };
  const int n = 32768;
  for (const Case& k : cases) {
    GenerateConfig c;
    c.temperature = k.temperature;
    c.top_k = k.top_k;
    c.top_p = k.top_p;
    c.min_p = k.min_p;
    expect_distribution(histogram(*g.be, row, c, n), reference_probs(row, c), n, k.name);
  }
}

// Boundary values: exact kept sets on rows of equal logits (ties: lower ids first).
TEST(CudaSampling, BoundaryValues) {
  TACHYON_REQUIRE_GPU();
  Gpu g;
  const int64_t V = 1000;
  std::vector<float> flat(static_cast<size_t>(V), 0.5f);
  auto support = [&](const std::vector<float>& row, const GenerateConfig& c, int n = 2048) {
    std::set<int32_t> s;
    const auto h = histogram(*g.be, row, c, n);
    for (size_t i = 0; i < h.size(); ++i)
      if (h[i] > 0) s.insert(static_cast<int32_t>(i));
    return s;
  };
  auto range = [](int32_t a, int32_t b) {
    std::set<int32_t> s;
    for (int32_t i = a; i < b; ++i) s.insert(i);
    return s;
  };
  GenerateConfig c;
  c.temperature = 1.f;
  c.top_k = 3;
  EXPECT_EQ(support(flat, c), range(0, 3)) << "top_k 3 on ties";
  c.top_k = 0;
  c.top_p = 0.0005f;  // half of a token's mass: one token
  EXPECT_EQ(support(flat, c), range(0, 1)) << "tiny top_p on ties";
  c.top_p = 0.0105f;  // just over 10 tokens' mass: 11
  EXPECT_EQ(support(flat, c), range(0, 11)) << "top_p on ties";
  c.top_p = 1.f;
  c.min_p = 1.f;  // the eight tokens equal to the top
  std::vector<float> eight(static_cast<size_t>(V), -1.f);
  std::fill(eight.begin() + 100, eight.begin() + 108, 0.5f);
  EXPECT_EQ(support(eight, c), range(100, 108)) << "min_p 1 on ties";
  c.min_p = 0.f;
  c.top_k = 8;
  EXPECT_EQ(support(eight, c), range(100, 108)) << "top_k at the edge of ties";

  std::mt19937 rng(31);
  const auto row = random_logits(rng, V);
  const int32_t top = argmax(row.data(), static_cast<int32_t>(V));
  GenerateConfig b;
  b.temperature = 1.f;
  b.top_k = 1;  // through the sampling path (not the greedy flag): the argmax
  RowSampling r = device_row(b, 1, 0, 0);
  r.greedy = false;
  EXPECT_EQ(run_sample(*g.be, row, V, single_batch({r}))[0], top);
  b = GenerateConfig{};
  b.min_p = 1.f;
  EXPECT_EQ(support(row, b), std::set<int32_t>{top}) << "min_p 1";
  b = GenerateConfig{};
  b.top_p = 1e-7f;
  EXPECT_EQ(support(row, b), std::set<int32_t>{top}) << "top_p tiny";
  b = GenerateConfig{};
  b.temperature = 1e-4f;
  EXPECT_EQ(support(row, b), std::set<int32_t>{top}) << "temperature tiny";
  for (const int32_t k : {static_cast<int32_t>(V), static_cast<int32_t>(V + 5)}) {
    b = GenerateConfig{};
    b.temperature = 50.f;  // nearly uniform: every token shows up
    b.top_k = k;
    EXPECT_GT(support(row, b, 16384).size(), static_cast<size_t>(V * 9 / 10)) << "top_k " << k;
  }
  b = GenerateConfig{};
  b.top_k = static_cast<int32_t>(V - 1);
  b.temperature = 50.f;
  const auto s = support(row, b);
  const int32_t bottom =
      static_cast<int32_t>(std::min_element(row.begin(), row.end()) - row.begin());
  EXPECT_EQ(s.count(bottom), 0u) << "top_k V-1 drops the smallest";
  // Some tokens banned: never drawn, even at high temperature.
  std::vector<float> banned = row;
  for (int64_t v = 0; v < V; v += 2) banned[static_cast<size_t>(v)] = -INFINITY;
  b = GenerateConfig{};
  b.temperature = 20.f;
  for (int32_t t : support(banned, b)) EXPECT_EQ(t % 2, 1) << t;
}

}  // namespace
}  // namespace tachyon
