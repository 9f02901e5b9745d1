// The optional per-row fields of a step's batch (model/forward.h) on the GPU: the
// scatter kernel against the CPU's; through the runner on the bundled model
// (models/tiny-kjv-chat), injected embeddings, hidden states copied back behind a step
// that samples on the device, allowed-token masks in the device sampler, and tree masks
// (the simple attention kernel) against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "io/checkpoint.h"
#include "model/loader.h"

namespace tachyon::cuda_test {
namespace {

std::string kjv_dir() {
  return std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat";
}

std::unique_ptr<Model> load_on(Device device, DType dtype) {
  LoadOptions o;
  o.device = device;
  o.dtype = dtype;
  auto m = load_model(kjv_dir(), o);
  m->init_kv_cache(32, 16);
  return m;
}

const Device kGpu{DeviceType::kCUDA, 0};
const Device kCpu{DeviceType::kCPU, 0};

// Two prompts from position 0 in blocks {0, 1} and {2, 3}; every row's logits.
ForwardBatch two_prompts() {
  ForwardBatch b;
  b.token_ids = {1, 450, 3681, 310, 29871, 278, 1, 306, 626, 29889, 3};
  b.positions = {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4};
  b.query_start = {0, 6, 11};
  b.context_lens = {6, 5};
  b.block_tables = {0, 1, 2, 3};
  b.max_blocks_per_seq = 2;
  for (int32_t r = 0; r < 11; ++r) b.logits_rows.push_back(r);
  return b;
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    scale = std::max(scale, std::fabs(double{b.data<float>()[i]}));
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, std::fabs(double{a.data<float>()[i]} - b.data<float>()[i]));
  return worst / std::max(scale, 1e-30);
}

// scatter_rows against the CPU's: f32 rows converted to the activation dtype, a row
// out of range skipped, the other rows untouched.
TEST(CudaBatchFields, ScatterRowsMatchesTheCpu) {
  TACHYON_REQUIRE_GPU();
  auto cpu = make_cpu_backend();
  std::mt19937 rng(8);
  const Tensor src = randn({5, 200}, rng);
  const Tensor before = randn({9, 200}, rng);
  const std::vector<int32_t> rows = {8, 2, 40, 0, 5};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto gpu = make_gpu(dt);
    Tensor want = rounded(before, dt);
    Tensor got = to_gpu(*gpu, want, dt);
    cpu->scatter_rows(rounded(src, dt), cpu->upload_i32(rows.data(), 5), want);
    gpu->scatter_rows(gpu->upload(src.data<float>(), {5, 200}, DType::kF32, {}),
                      to_gpu_i32(*gpu, rows), got);
    const std::vector<double> g = host_values(*gpu, got), w = host_values(want);
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_EQ(g[i], w[i]) << dtype_label(dt) << " " << i;
  }
}

TEST(CudaBatchFields, InjectedTableRowsReproduceThePlainLogits) {
  TACHYON_REQUIRE_GPU();
  const Tensor table =
      Checkpoint::open(kjv_dir())->get("model.embed_tokens.weight").to(DType::kF32);
  const int64_t d = table.dim(1);
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto m = load_on(kGpu, dt);
    ASSERT_EQ(m->config().embedding_scale, 1.0);
    const ForwardBatch plain = two_prompts();
    const Tensor base = m->forward(plain).clone();
    ForwardBatch injected = plain;
    Tensor v = Tensor::empty({4, d}, DType::kF32);
    for (int64_t i = 0; i < 4; ++i)
      std::copy_n(table.data<float>() + int64_t{plain.token_ids[2 + i]} * d, d,
                  v.data<float>() + i * d);
    injected.embeddings = {{2, v}};
    const Tensor same = m->forward(injected).clone();
    for (int64_t i = 0; i < base.numel(); ++i)
      ASSERT_EQ(same.data<float>()[i], base.data<float>()[i]) << dtype_label(dt) << " " << i;
    // Other values change the first sequence from row 2 on, nothing else.
    for (int64_t i = 0; i < v.numel(); ++i) v.data<float>()[i] = 0.02f * std::cos(0.3f * i);
    const Tensor other = m->forward(injected).clone();
    const int64_t V = m->vocab_size();
    for (int64_t r = 0; r < 11; ++r) {
      bool equal = true;
      for (int64_t i = 0; i < V; ++i)
        equal = equal && other.data<float>()[r * V + i] == base.data<float>()[r * V + i];
      EXPECT_EQ(equal, r < 2 || r >= 6) << dtype_label(dt) << " row " << r;
    }
  }
}

TEST(CudaBatchFields, HiddenStatesAndTokenMasksOfADeviceSampledStep) {
  TACHYON_REQUIRE_GPU();
  auto gpu = load_on(kGpu, DType::kF32);
  auto cpu = load_on(kCpu, DType::kF32);
  ASSERT_TRUE(gpu->samples_on_device());
  ForwardBatch b = two_prompts();
  b.logits_rows = {5, 10, 3};
  b.hidden_rows = {10, 5};
  const int64_t V = gpu->vocab_size(), W = token_mask_words(V);
  // Row 0 greedy with a mask (ids = 3 mod 7), row 1 greedy without, row 2 on the host.
  std::vector<uint32_t> mask(static_cast<size_t>(W), 0u);
  for (int64_t t = 3; t < V; t += 7) mask[static_cast<size_t>(t / 32)] |= 1u << (t % 32);
  RowSampling greedy;
  greedy.mode = RowSampling::Mode::kDevice;
  greedy.greedy = true;
  b.sampling.rows = {greedy, greedy, RowSampling{}};
  b.sampling.token_masks = mask;
  b.sampling.mask_of = {0, -1, -1};
  const ForwardOutput out = gpu->forward_sample(b);

  // The plain logits of the same step (the same kernels: the same values).
  ForwardBatch plain = b;
  plain.sampling = SamplingBatch{};
  plain.hidden_rows.clear();
  const Tensor logits = gpu->forward(plain).clone();
  auto best = [&](int64_t row, bool masked) {
    int32_t arg = -1;
    for (int32_t t = 0; t < V; ++t) {
      if (masked && !token_allowed(mask, t)) continue;
      if (arg < 0 || logits.data<float>()[row * V + t] > logits.data<float>()[row * V + arg])
        arg = t;
    }
    return arg;
  };
  ASSERT_EQ(out.tokens.size(), 3u);
  EXPECT_EQ(out.tokens[0], best(0, true));
  EXPECT_EQ(out.tokens[0] % 7, 3);
  EXPECT_EQ(out.tokens[1], best(1, false));
  EXPECT_EQ(out.tokens[2], kTokenOnHost);
  ASSERT_EQ(out.logits.shape(), (Shape{1, V}));
  for (int64_t i = 0; i < V; ++i)
    ASSERT_EQ(out.logits.data<float>()[i], logits.data<float>()[2 * V + i]) << i;

  // The hidden states: the CPU's (the same rows, through its ready path) within f32
  // error.
  const int64_t d = gpu->config().hidden_size;
  ASSERT_EQ(out.hidden.shape(), (Shape{2, d}));
  ForwardBatch on_cpu = b;
  on_cpu.sampling = SamplingBatch{};
  const ForwardOutput ref = cpu->forward_sample(on_cpu);
  ASSERT_EQ(ref.hidden.shape(), (Shape{2, d}));
  EXPECT_LT(max_rel_diff(out.hidden, ref.hidden), 2e-3);

  // A bad mask is refused.
  b.sampling.mask_of = {0, 1, -1};
  EXPECT_THROW(gpu->forward_sample(b), InvalidArgument);
}

TEST(CudaBatchFields, TreeMaskedStepMatchesTheCpu) {
  TACHYON_REQUIRE_GPU();
  auto gpu = load_on(kGpu, DType::kF32);
  auto cpu = load_on(kCpu, DType::kF32);
  ForwardBatch prompt = two_prompts();
  prompt.logits_rows = {5};
  ForwardBatch tree;
  tree.token_ids = {278, 310, 450, 306, 626, 29889};
  tree.positions = {6, 7, 6, 7, 8, 5};
  tree.query_start = {0, 5, 6};
  tree.context_lens = {11, 6};
  tree.block_tables = {0, 1, 2, 3};
  tree.max_blocks_per_seq = 2;
  tree.logits_rows = {0, 1, 2, 3, 4, 5};
  // Sequence 0: branches (0, 1) and (2, 3, 4); sequence 1 causal.
  tree.tree_masks = {{1, 0, 0, 0, 0,  //
                      1, 1, 0, 0, 0,  //
                      0, 0, 1, 0, 0,  //
                      0, 0, 1, 1, 0,  //
                      0, 0, 1, 1, 1},
                     {}};
  for (Model* m : {gpu.get(), cpu.get()}) m->forward(prompt);
  const Tensor got = gpu->forward(tree).clone();
  const Tensor want = cpu->forward(tree).clone();
  EXPECT_LT(max_rel_diff(got, want), 2e-3);
}

}  // namespace
}  // namespace tachyon::cuda_test
