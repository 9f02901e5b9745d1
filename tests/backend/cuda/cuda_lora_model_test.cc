// LoRA adapters served unmerged on the GPU, on the bundled model and its trained adapter
// (models/tiny-kjv-chat, models/lora-shout): in f32, greedy decoding through the paged
// cache gives transformers' base + adapter tokens exactly (the base model's on the same
// model with no adapter), one step at a time and as replayed decode graphs; adapters
// copied into their device slots from the host memory they are prepared in.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>

#include "backend/cuda/cuda_test_util.h"
#include "core/json.h"
#include "model/loader.h"
#include "model/lora_adapter.h"
#include "model/model_runner.h"

namespace tachyon::cuda_test {
namespace {

constexpr int32_t kBlock = 16;
const std::string kRoot = TACHYON_SOURCE_DIR;

std::unique_ptr<Model> load_kjv(DType dtype, int32_t max_loras,
                                std::optional<LoadQuantization> quant = {}) {
  LoadOptions o;
  o.device = Device{DeviceType::kCUDA, 0};
  o.dtype = dtype;
  o.quantization = quant;
  o.lora.max_loras = max_loras;
  o.lora.max_rank = 16;
  auto m = load_model(kRoot + "/models/tiny-kjv-chat", o);
  m->add_adapter(1, m->prepare_adapter(load_lora_adapter(kRoot + "/models/lora-shout", m->config(),
                                                         m->weights().map, {16})));
  m->init_kv_cache(96, kBlock);
  return m;
}

// Greedy decoding of `prompt` on `adapter` (0: none), `n` tokens at most, stopping at eos.
std::vector<int32_t> greedy(Model& m, std::vector<int32_t> tokens, size_t n, int32_t adapter) {
  const int32_t eos = static_cast<int32_t>(m.config().eos_token_ids.at(0));
  const int64_t vocab = m.vocab_size();
  std::vector<int32_t> out;
  int32_t computed = 0;
  while (out.size() < n) {
    ForwardBatch b;
    const int32_t q = static_cast<int32_t>(tokens.size()) - computed;
    for (int32_t i = 0; i < q; ++i) {
      b.token_ids.push_back(tokens[computed + i]);
      b.positions.push_back(computed + i);
    }
    b.query_start = {0, q};
    b.context_lens = {computed + q};
    b.max_blocks_per_seq = (computed + q + kBlock - 1) / kBlock;
    for (int32_t i = 0; i < b.max_blocks_per_seq; ++i) b.block_tables.push_back(95 - i);
    b.logits_rows = {q - 1};
    if (adapter != 0) b.adapter_ids = {adapter};
    Tensor l = m.forward(b);
    computed += q;
    const float* p = l.data<float>();
    const int32_t next = static_cast<int32_t>(std::max_element(p, p + vocab) - p);
    out.push_back(next);
    if (next == eos) break;
    tokens.push_back(next);
  }
  return out;
}

TEST(CudaLoraModel, KjvF32AdapterMatchesTransformers) {
  TACHYON_REQUIRE_GPU();
  auto m = load_kjv(DType::kF32, 2);
  auto* runner = dynamic_cast<ModelRunner*>(m.get());
  ASSERT_NE(runner, nullptr);
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json")["models"];
  for (const auto& [entry, adapter] :
       {std::pair<std::string, int32_t>{"tiny-kjv-chat+lora-shout", 1}, {"tiny-kjv-chat", 0}})
    for (const Json& c : ref[entry]) {
      const std::vector<int32_t> want = c["greedy"][0].get<std::vector<int32_t>>();
      EXPECT_EQ(greedy(*m, c["prompt_ids"].get<std::vector<int32_t>>(), want.size(), adapter), want)
          << entry << ": " << c["prompt"].get<std::string>();
    }
  EXPECT_GE(runner->lora_swaps(), 1);
  EXPECT_GT(runner->graph_replays(), 0);  // decode steps ran as graphs, with the adapter
}

// bf16: the adapter's tokens against the f32 model's along the same path, where the
// f32 margin leaves room for bf16's rounding.
TEST(CudaLoraModel, KjvBf16AdapterFollowsF32) {
  TACHYON_REQUIRE_GPU();
  auto f32 = load_kjv(DType::kF32, 1);
  auto bf16 = load_kjv(DType::kBF16, 1);
  const Json ref = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json")["models"];
  size_t same = 0, total = 0;
  for (const Json& c : ref["tiny-kjv-chat+lora-shout"]) {
    const std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto a = greedy(*f32, prompt, 24, 1), b = greedy(*bf16, prompt, 24, 1);
    // Up to the first difference (a near tie then sends the two on different paths).
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    same += k;
    total += a.size();
  }
  EXPECT_GE(same * 10, total * 7) << same << " of " << total;
}

// On a base quantized to int8 at load, the adapter still applies: its greedy tokens follow
// the 16-bit model's with the adapter, not the base model's.
TEST(CudaLoraModel, KjvAdapterOnAnInt8Base) {
  TACHYON_REQUIRE_GPU();
  auto ref = load_kjv(DType::kBF16, 1);
  auto q = load_kjv(DType::kBF16, 1, LoadQuantization::kInt8);
  const Json cases = load_json_file(kRoot + "/tests/engine/data/kjv_reference.json")["models"];
  size_t same = 0, same_base = 0, total = 0;
  for (const Json& c : cases["tiny-kjv-chat+lora-shout"]) {
    const std::vector<int32_t> prompt = c["prompt_ids"].get<std::vector<int32_t>>();
    const auto want = greedy(*ref, prompt, 24, 1);
    const auto got = greedy(*q, prompt, 24, 1), base = greedy(*q, prompt, 24, 0);
    auto prefix = [&](const std::vector<int32_t>& x) {
      size_t k = 0;
      while (k < x.size() && k < want.size() && x[k] == want[k]) ++k;
      return k;
    };
    same += prefix(got);
    same_base += prefix(base);
    total += want.size();
  }
  EXPECT_GE(same * 10, total * 6) << same << " of " << total;
  EXPECT_LE(same_base * 10, total * 3) << same_base << " of " << total;
}

}  // namespace
}  // namespace tachyon::cuda_test
