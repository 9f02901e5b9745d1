// The cost of verifying draft tokens (speculative decoding) at batch 1: one sequence at
// context ctx computes its last token and k drafts in one step (a chain: k + 1 rows, each
// chosen greedily on the device), or a tree of n tokens (a tree mask over the step's own
// tokens, each row chosen on the device), against the one-token decode step the engine
// runs without speculation (a replayed graph, the token chosen on the device). Every
// step rewrites the same positions, so all figures see the same context. Host-timed
// around forward_sample (metadata upload, kernels, ids back), medians after warm-up.
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "gpu_decoder_bench.h"
#include "model/model_runner.h"

namespace tachyon::decoder_bench {
namespace {

constexpr int32_t kBlock = 16;

// A step of one sequence computing `tokens` at cache indices [ctx, ctx + n), at the given
// positions, every row sampled greedily on the device; `mask` empty for a causal chain.
ForwardBatch verify_batch(const std::vector<int32_t>& tokens, const std::vector<int32_t>& positions,
                          int32_t ctx, int32_t blocks, std::vector<uint8_t> mask) {
  ForwardBatch b;
  const int32_t n = static_cast<int32_t>(tokens.size());
  b.token_ids = tokens;
  b.positions = positions;
  b.query_start = {0, n};
  b.context_lens = {ctx + n};
  b.max_blocks_per_seq = blocks;
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  RowSampling r;
  r.mode = RowSampling::Mode::kDevice;
  r.greedy = true;
  for (int32_t i = 0; i < n; ++i) {
    b.logits_rows.push_back(i);
    b.sampling.rows.push_back(r);
  }
  if (!mask.empty()) b.tree_masks.push_back(std::move(mask));
  return b;
}

// A tree of n nodes, breadth first, node i's parent (i - 1) / 3 (node 0 the root): its
// depths and its mask (a node sees its ancestors and itself).
void ternary_tree(int32_t n, std::vector<int32_t>* depth, std::vector<uint8_t>* mask) {
  std::vector<int32_t> parent(static_cast<size_t>(n), -1);
  depth->assign(static_cast<size_t>(n), 0);
  mask->assign(static_cast<size_t>(n) * n, 0);
  for (int32_t i = 1; i < n; ++i) {
    parent[i] = (i - 1) / 3;
    (*depth)[i] = (*depth)[parent[i]] + 1;
  }
  for (int32_t i = 0; i < n; ++i)
    for (int32_t j = i; j >= 0; j = parent[j]) (*mask)[static_cast<size_t>(i) * n + j] = 1;
}

}  // namespace

void verify_bench(Model& model, int32_t ctx, const std::vector<int32_t>& drafts,
                  const std::vector<int32_t>& trees, int reps, const std::function<void()>& mark,
                  const std::function<void(const std::string&, const std::string&)>& report) {
  auto time_steps = [&](const ForwardBatch& b, const std::string& label) {
    std::vector<double> times;
    for (int r = 0; r < reps + 3; ++r) {
      if (r >= 3) mark();
      const double a = now_s();
      model.forward_sample(b);
      if (r >= 3) times.push_back(now_s() - a);
    }
    report(label, "verify_" + label + ".txt");
    return median(times);
  };
  int32_t widest = 1;
  for (int32_t k : drafts) widest = std::max(widest, k + 1);
  for (int32_t n : trees) widest = std::max(widest, n);
  const int32_t blocks = (ctx + widest + kBlock - 1) / kBlock;
  model.init_kv_cache(blocks, kBlock);
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, model.vocab_size() - 1);
  std::vector<int32_t> ids(static_cast<size_t>(ctx + widest));
  for (auto& x : ids) x = tok(rng);
  // The context, in chunks of at most 4096 tokens.
  for (int32_t done = 0; done < ctx;) {
    const int32_t n = std::min(4096, ctx - done);
    ForwardBatch b;
    b.token_ids.assign(ids.begin() + done, ids.begin() + done + n);
    for (int32_t i = 0; i < n; ++i) b.positions.push_back(done + i);
    b.query_start = {0, n};
    b.context_lens = {done + n};
    b.max_blocks_per_seq = blocks;
    for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
    b.logits_rows = {n - 1};
    model.forward(b);
    done += n;
  }
  auto chain = [&](int32_t n) {
    std::vector<int32_t> t(ids.begin() + ctx, ids.begin() + ctx + n), p;
    for (int32_t i = 0; i < n; ++i) p.push_back(ctx + i);
    return verify_batch(t, p, ctx, blocks, {});
  };
  const double decode = time_steps(chain(1), "decode");
  std::printf("\nverify steps, batch 1, context %d (host-timed, median of %d)\n", ctx, reps);
  std::printf("%-34s %12s %10s\n", "figure", "step ms", "x decode");
  std::printf("%-34s %12.3f %10.3f\n", "decode 1 token", decode * 1e3, 1.0);
  std::printf("RESULT verify_ctx%d_decode_ms %.4f\n", ctx, decode * 1e3);
  for (int32_t k : drafts) {
    const double t = time_steps(chain(k + 1), "chain" + std::to_string(k));
    std::printf("chain k=%-2d (%2d tokens)              %12.3f %10.3f\n", k, k + 1, t * 1e3,
                t / decode);
    std::printf("RESULT verify_ctx%d_chain_k%d_ms %.4f ratio %.4f\n", ctx, k, t * 1e3, t / decode);
  }
  for (int32_t n : trees) {
    std::vector<int32_t> depth;
    std::vector<uint8_t> mask;
    ternary_tree(n, &depth, &mask);
    std::vector<int32_t> t(ids.begin() + ctx, ids.begin() + ctx + n), p;
    for (int32_t i = 0; i < n; ++i) p.push_back(ctx + depth[i]);
    const double s = time_steps(verify_batch(t, p, ctx, blocks, mask), "tree" + std::to_string(n));
    std::printf("tree of %-2d tokens                   %12.3f %10.3f\n", n, s * 1e3, s / decode);
    std::printf("RESULT verify_ctx%d_tree%d_ms %.4f ratio %.4f\n", ctx, n, s * 1e3, s / decode);
  }
}

}  // namespace tachyon::decoder_bench
