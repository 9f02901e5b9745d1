// Steps queued ahead on the GPU (ModelRunner::launch / collect): a step whose input tokens
// are the previous step's ids, taken on the device (ForwardBatch::deferred), launched
// before the previous step is collected, must choose exactly what the same step chooses
// with those tokens given by the host. Two copies of the bundled model (step graphs on)
// are fed the same sequences: one step at a time with forward_sample(), and queued one
// step ahead. Greedy device sampling, so the ids must be identical; a row sampled on the
// host comes back as logits, which must match too. Also scatter_ids against its
// definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/step_batch.h"
#include "model/loader.h"
#include "model/model_runner.h"

namespace tachyon::cuda_test {
namespace {

constexpr int32_t kBlock = 16;
constexpr int32_t kBlocksEach = 32;

std::unique_ptr<Model> load() {
  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = DType::kBF16;
  auto m = load_model(std::string(TACHYON_SOURCE_DIR) + "/models/tiny-kjv-chat", o);
  m->init_kv_cache(8 * kBlocksEach, kBlock);
  return m;
}

using Seq = StepSeq;

// A step over every sequence's uncomputed tokens, a greedy device row each (row
// `host_row` sampled on the host instead).
ForwardBatch make_batch(const std::vector<Seq*>& seqs, int host_row = -1) {
  ForwardBatch b =
      step_batch(seqs, kBlocksEach, [](int32_t slot, int32_t i) { return slot * kBlocksEach + i; });
  for (size_t r = 0; r < seqs.size(); ++r) {
    RowSampling row;
    row.mode =
        static_cast<int>(r) == host_row ? RowSampling::Mode::kHost : RowSampling::Mode::kDevice;
    row.greedy = true;
    b.sampling.rows.push_back(row);
  }
  return b;
}

TEST(CudaOverlap, DeferredTokensMatchStepByStep) {
  TACHYON_REQUIRE_GPU();
  auto serial = load();
  auto ahead = load();
  std::mt19937 rng(3);
  const int32_t vocab = serial->vocab_size();
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  // Both copies see the same sequences: prompts of 9, 40 and 130 tokens, then decode.
  std::vector<Seq> a, b;
  for (int32_t i = 0; i < 3; ++i) {
    Seq s{i, {}, 0};
    for (int32_t k = 0; k < (i == 0 ? 9 : i == 1 ? 40 : 130); ++k) s.tokens.push_back(tok(rng));
    a.push_back(s);
    b.push_back(s);
  }
  std::vector<Seq*> pa = {&a[0], &a[1], &a[2]}, pb = {&b[0], &b[1], &b[2]};
  // Prefill, one step each way: its ids are the first decode inputs.
  const ForwardBatch pre = make_batch(pa);
  const ForwardOutput first = serial->forward_sample(pre);
  ahead->launch(make_batch(pb));
  for (size_t i = 0; i < 3; ++i) {
    a[i].computed = b[i].computed = static_cast<int32_t>(a[i].tokens.size());
    a[i].tokens.push_back(first.tokens[i]);
    b[i].tokens.push_back(0);  // the deferred token's placeholder
  }
  constexpr int kSteps = 24;
  std::vector<std::vector<int32_t>> ids_serial, ids_ahead;
  std::vector<float> host_serial, host_ahead;
  for (int step = 0; step < kSteps; ++step) {
    const int host_row = step == 7 ? 1 : -1;  // one step with a row sampled on the host
    // Serial: the host knows every input token.
    const ForwardOutput o = serial->forward_sample(make_batch(pa, host_row));
    ids_serial.push_back(o.tokens);
    if (host_row >= 0) {
      const float* p = o.logits.data<float>();
      host_serial.assign(p, p + vocab);
    }
    for (size_t i = 0; i < 3; ++i) {
      a[i].computed = static_cast<int32_t>(a[i].tokens.size());
      a[i].tokens.push_back(o.tokens[i] >= 0 ? o.tokens[i] : 0);
    }
    // Ahead: this step's inputs are the ids of the step still in flight (row i).
    ForwardBatch next = make_batch(pb, host_row);
    for (int32_t i = 0; i < 3; ++i) next.deferred.push_back(DeferredToken{next.query_start[i], i});
    ahead->launch(next);
    const ForwardOutput prev = ahead->collect();  // the step before
    for (size_t i = 0; i < 3; ++i) {
      b[i].tokens.back() = prev.tokens[i];
      b[i].computed = static_cast<int32_t>(b[i].tokens.size());
      b[i].tokens.push_back(0);
    }
    if (step > 0) ids_ahead.push_back(prev.tokens);
    if (step == 8) {  // collected the step with the host row
      ASSERT_EQ(prev.logits.dim(0), 1);
      const float* p = prev.logits.data<float>();
      host_ahead.assign(p, p + vocab);
    }
  }
  ids_ahead.push_back(ahead->collect().tokens);
  ASSERT_EQ(ids_ahead.size(), ids_serial.size());
  for (size_t s = 0; s < ids_serial.size(); ++s) {
    // A step's host row has no id (kTokenOnHost); the next step took id 0 for it, as the
    // serial run did.
    EXPECT_EQ(ids_ahead[s], ids_serial[s]) << "step " << s;
  }
  EXPECT_EQ(host_ahead, host_serial);
  EXPECT_EQ(std::count(ids_serial[7].begin(), ids_serial[7].end(), kTokenOnHost), 1);
  // Real decoding happened (not all one token).
  std::vector<int32_t> distinct;
  for (const auto& v : ids_serial) distinct.insert(distinct.end(), v.begin(), v.end());
  std::sort(distinct.begin(), distinct.end());
  EXPECT_GT(std::unique(distinct.begin(), distinct.end()) - distinct.begin(), 5);
  const auto* d = dynamic_cast<const ModelRunner*>(ahead.get());
  ASSERT_NE(d, nullptr);
  EXPECT_GT(d->graph_replays(), kSteps / 2);  // the deferred ids went into replayed graphs
}

TEST(CudaOverlap, ScatterIds) {
  TACHYON_REQUIRE_GPU();
  auto be = make_gpu(DType::kBF16);
  std::mt19937 rng(9);
  std::vector<int32_t> src(50), ids(200), pairs;
  for (auto& v : src) v = static_cast<int32_t>(rng() % 1000) - 100;  // some negative
  for (auto& v : ids) v = static_cast<int32_t>(rng() % 1000);
  std::vector<int32_t> want = ids;
  std::vector<int32_t> dsts(200);
  std::iota(dsts.begin(), dsts.end(), 0);
  std::shuffle(dsts.begin(), dsts.end(), rng);
  for (int j = 0; j < 120; ++j) {
    const int32_t dst = dsts[static_cast<size_t>(j)], from = static_cast<int32_t>(rng() % 50);
    pairs.push_back(dst);
    pairs.push_back(from);
    want[static_cast<size_t>(dst)] = src[static_cast<size_t>(from)] >= 0 ? src[from] : 0;
  }
  // Out of range on either side: skipped.
  for (int32_t bad : {-1, 200, 5000}) {
    pairs.push_back(bad);
    pairs.push_back(3);
    pairs.push_back(4);
    pairs.push_back(bad == 200 ? 50 : bad);
  }
  Tensor s = be->upload_i32(src.data(), 50);
  Tensor p = be->upload(pairs.data(), {static_cast<int64_t>(pairs.size() / 2), 2}, DType::kI32, {});
  Tensor out = be->upload_i32(ids.data(), 200);
  be->scatter_ids(s, p, out);
  std::vector<int32_t> got(200);
  be->download(out, got.data());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tachyon::cuda_test
