// The decoder's side of folded input norms (Decoder::prepare_input_norms,
// Backend::prepare_input_norm), run on every build: a CPU backend that folds the way the
// CUDA backend does. It moves the norms' scales into the weights that read them and
// marks the norms folded; the layer-level products' default forms then normalise with
// a weight of ones. The logits must be those of the plain CPU backend.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "model/model_test_util.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon {
namespace {

using testing_util::fixture;
using testing_util::one_seq;

class FoldingBackend : public cpu::CpuBackend {
 public:
  // stack: q/k/v and gate/up stacked into one matrix each (the decoder stacks them for
  // backends that repack), else the parts read in place.
  explicit FoldingBackend(bool stack) : stack_(stack) {}

  bool repacks_linear_weights() const override { return stack_; }
  Tensor prepare_linear_weight(const Tensor& host) override { return host; }

  void prepare_input_norm(NormParams& norm, std::span<Tensor* const> readers) override {
    ASSERT_FALSE(norm.folded);
    ASSERT_EQ(norm.type, NormType::kRMSNorm);
    ASSERT_FALSE(readers.empty());
    const Tensor scale = norm.weight.to(DType::kF32);
    for (Tensor* w : readers) {
      const int64_t n = w->dim(0), k = w->dim(1);
      ASSERT_EQ(k, scale.numel());
      Tensor out = w->to(DType::kF32);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < k; ++c)
          out.data<float>()[r * k + c] *= norm.weight_offset + scale.data<float>()[c];
      *w = out;
      ++folded_weights;
    }
    Tensor ones = Tensor::empty({scale.numel()}, DType::kF32);
    for (int64_t c = 0; c < scale.numel(); ++c) ones.data<float>()[c] = 1.f;
    norm.weight = ones;
    norm.weight_offset = 0.f;
    norm.folded = true;
    ++folded_norms;
  }

  int folded_norms = 0;
  int folded_weights = 0;

 private:
  bool stack_;
};

// The fixture's model on `backend`, as load_model builds it.
std::unique_ptr<ModelRunner> decoder_on(const std::string& dir, std::unique_ptr<Backend> backend,
                                        std::unique_ptr<Checkpoint>& ckpt) {
  HfConfig cfg = HfConfig::load(dir + "/config.json");
  const ArchSpec& spec = find_arch(cfg, "");
  ModelConfig mc = map_model_config(cfg, "", dir + "/generation_config.json");
  ckpt = Checkpoint::open(dir);
  ModelWeights weights = load_weights(*ckpt, mc, spec.map_weights(mc));
  return std::make_unique<ModelRunner>(std::move(mc), std::move(weights), std::move(backend));
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < b.numel(); ++i)
    scale = std::max(scale, double{std::abs(b.data<float>()[i])});
  for (int64_t i = 0; i < a.numel(); ++i)
    worst = std::max(worst, double{std::abs(a.data<float>()[i] - b.data<float>()[i])});
  return worst / scale;
}

// A prefill of 12 tokens and three decode steps with every input norm folded, against
// the plain CPU backend: both norms of every layer are offered, with their readers (one
// stacked matrix each, or q, k, v and gate, up).
TEST(FoldedNorms, FoldedInputNormsGiveThePlainLogits) {
  const std::string dir = fixture("llama");
  auto plain = load_model(dir);
  plain->init_kv_cache(8, 4);
  const std::vector<int32_t> prompt = {11, 200, 37, 480, 9, 9, 301, 77, 5, 64, 3, 150};
  const std::vector<int32_t> next = {42, 7, 311};
  const std::vector<int32_t> blocks = {0, 1, 2, 3};
  std::vector<Tensor> want = {plain->forward(one_seq(prompt, 0, blocks))};
  for (size_t i = 0; i < next.size(); ++i)
    want.push_back(
        plain->forward(one_seq({next[i]}, static_cast<int32_t>(prompt.size() + i), blocks)));
  const int layers = plain->config().layer_num;
  for (bool stack : {true, false}) {
    SCOPED_TRACE(stack ? "stacked" : "separate");
    auto owned = std::make_unique<FoldingBackend>(stack);
    FoldingBackend* be = owned.get();
    std::unique_ptr<Checkpoint> ckpt;
    auto folded = decoder_on(dir, std::move(owned), ckpt);
    EXPECT_EQ(be->folded_norms, 2 * layers);
    EXPECT_EQ(be->folded_weights, (stack ? 2 : 5) * layers);
    folded->init_kv_cache(8, 4);
    std::vector<Tensor> got = {folded->forward(one_seq(prompt, 0, blocks))};
    for (size_t i = 0; i < next.size(); ++i)
      got.push_back(
          folded->forward(one_seq({next[i]}, static_cast<int32_t>(prompt.size() + i), blocks)));
    for (size_t s = 0; s < got.size(); ++s) {
      ASSERT_EQ(got[s].shape(), want[s].shape());
      EXPECT_LE(max_rel_diff(got[s], want[s]), 1e-4) << "step " << s;
    }
  }
}

// Every residual form: a pre-norm or sandwich layer offers both norms (a MoE layer only
// its attention norm), the others none (post-norm, the residual from the norm and a
// parallel layer read their norms otherwise); the logits stay the plain ones.
TEST(FoldedNorms, EachResidualFormOffersOnlyItsInputNorms) {
  for (const char* name :
       {"gemma2", "qwen2_moe", "phi3", "gpt_neox", "opt_project_postln"}) {
    SCOPED_TRACE(name);
    const std::string dir = fixture(name);
    auto plain = load_model(dir);
    auto owned = std::make_unique<FoldingBackend>(true);
    FoldingBackend* be = owned.get();
    std::unique_ptr<Checkpoint> ckpt;
    auto folded = decoder_on(dir, std::move(owned), ckpt);
    const ModelConfig& c = plain->config();
    int offered = 0;
    if (!c.post_norm && !c.residual_from_norm && !c.parallel_residual)
      for (int l = 0; l < c.layer_num; ++l) offered += c.is_moe(l) ? 1 : 2;
    EXPECT_EQ(be->folded_norms, offered);
    const std::vector<int32_t> prompt = {11, 20, 37, 48, 9, 9, 31};
    const std::vector<int32_t> blocks = {0, 1};
    plain->init_kv_cache(4, 4);
    folded->init_kv_cache(4, 4);
    const Tensor want = plain->forward(one_seq(prompt, 0, blocks));
    const Tensor got = folded->forward(one_seq(prompt, 0, blocks));
    ASSERT_EQ(got.shape(), want.shape());
    EXPECT_LE(max_rel_diff(got, want), 1e-4);
  }
}

}  // namespace
}  // namespace tachyon
