// The decoder's math on the inputs it is handed (Decoder::compute), apart from the
// runner: a prompt's step and a decode step after it, their inputs made here on the
// CPU, give the logits ModelRunner::forward gives for the same steps, bit for bit, with
// the rotary rows handed as rows or as a table gathered at the step's positions. The
// decode step reads the prompt's K/V from the slots the prompt step named.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/decoder.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_test_util.h"
#include "model/registry.h"
#include "model/rope.h"
#include "model/weights.h"

namespace tachyon {
namespace {

using testing_util::fixture;
using testing_util::one_seq;

constexpr int32_t kBlock = 4;
const std::vector<int32_t> kBlocks = {3, 0, 2, 1};

// One sequence's step on a bare Decoder: `tokens` after `computed` cached ones, the
// logits of its last token.
class BareDecoder {
 public:
  explicit BareDecoder(const std::string& dir) : be_(make_cpu_backend()) {
    HfConfig cfg = HfConfig::load(dir + "/config.json");
    const ArchSpec& spec = find_arch(cfg, "");
    ModelConfig mc = map_model_config(cfg, "", dir + "/generation_config.json");
    ckpt_ = Checkpoint::open(dir);
    ModelWeights weights = load_weights(*ckpt_, mc, spec.map_weights(mc));
    decoder_ = std::make_unique<Decoder>(std::move(mc), std::move(weights), *be_);
    const ModelConfig& c = decoder_->config();
    kv_.resize(static_cast<size_t>(c.layer_num));
    const int64_t blocks = static_cast<int64_t>(kBlocks.size());
    for (LayerKvCache& l : kv_) {
      l.k = be_->alloc({blocks, c.head_num_kv, kBlock, c.size_per_head}, be_->kv_dtype());
      l.v = be_->alloc({blocks, c.head_num_kv, kBlock, c.size_per_head}, be_->kv_dtype());
      be_->fill_zero(l.k);
      be_->fill_zero(l.v);
    }
  }

  Tensor step(const std::vector<int32_t>& tokens, int32_t computed, bool gather) {
    const ModelConfig& c = decoder_->config();
    const int32_t T = static_cast<int32_t>(tokens.size());
    const int32_t ctx = computed + T;
    std::vector<int32_t> positions, slots;
    for (int32_t i = 0; i < T; ++i) {
      const int32_t p = computed + i;
      positions.push_back(p);
      slots.push_back(kBlocks[static_cast<size_t>(p / kBlock)] * kBlock + p % kBlock);
    }
    query_start_ = {0, T};
    context_lens_ = {ctx};
    const int32_t last_row = T - 1;
    StepInputs in;
    in.ids = be_->upload_i32(tokens.data(), T);
    in.slots = be_->upload_i32(slots.data(), T);
    in.meta.query_start = be_->upload_i32(query_start_.data(), 2);
    in.meta.context_lens = be_->upload_i32(context_lens_.data(), 1);
    in.meta.block_tables = be_->upload_i32(kBlocks.data(), static_cast<int64_t>(kBlocks.size()));
    in.meta.num_seqs = 1;
    in.meta.max_blocks_per_seq = static_cast<int32_t>(kBlocks.size());
    in.meta.max_query_len = T;
    in.meta.max_context_len = ctx;
    in.meta.host_query_start = &query_start_;
    in.meta.host_context_lens = &context_lens_;
    in.logits_rows = T == 1 ? Tensor() : be_->upload_i32(&last_row, 1);
    RopeTable rope(c.rope);
    const int32_t rot = rope.dim();
    std::vector<float> rows;
    if (gather) {
      rows.resize(static_cast<size_t>(ctx * rot));
      rope.rows(ctx, rows.data());
      in.rope_rows = be_->upload(rows.data(), {ctx, rot}, DType::kF32, {});
      in.rope_positions = be_->upload_i32(positions.data(), T);
    } else {
      const std::vector<int32_t> lens(static_cast<size_t>(T), ctx);
      rows.resize(static_cast<size_t>(T * rot));
      rope.fill(positions.data(), lens.data(), T, rows.data());
      in.cos_sin = be_->upload(rows.data(), {T, rot}, DType::kF32, {});
    }
    Tensor logits = be_->alloc({1, c.vocab_size}, DType::kF32);
    decoder_->compute(in, kv_, logits);
    return logits;
  }

 private:
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Checkpoint> ckpt_;  // the weights' mapped views
  std::unique_ptr<Decoder> decoder_;
  std::vector<LayerKvCache> kv_;
  std::vector<int32_t> query_start_, context_lens_;
};

void expect_same(const Tensor& got, const Tensor& want) {
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.nbytes()), 0);
}

TEST(Decoder, ComputesTheRunnersLogitsFromHandedInputs) {
  const std::string dir = fixture("llama");
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77, 5, 64, 3, 150};
  const int32_t computed = static_cast<int32_t>(prompt.size());
  auto runner = load_model(dir);
  ASSERT_EQ(runner->config().position, PositionType::kRotary);
  runner->init_kv_cache(static_cast<int32_t>(kBlocks.size()), kBlock);
  const Tensor want_prompt = runner->forward(one_seq(prompt, 0, kBlocks));
  const Tensor want_next = runner->forward(one_seq({42}, computed, kBlocks));
  for (bool gather : {false, true}) {
    SCOPED_TRACE(gather ? "rows gathered" : "rows handed");
    BareDecoder d(dir);
    expect_same(d.step(prompt, 0, gather), want_prompt);
    expect_same(d.step({42}, computed, gather), want_next);
  }
  // A decode step on caches that never saw the prompt differs: the prompt's K/V were read.
  BareDecoder fresh(dir);
  const Tensor cold = fresh.step({42}, computed, false);
  EXPECT_NE(std::memcmp(cold.raw(), want_next.raw(), cold.nbytes()), 0);
}

}  // namespace
}  // namespace tachyon
