// The decoder's side of the folded norms (Decoder::fold_norms, RowRms, RowSquares), run
// on every build: a CPU backend that takes the folding hooks the way the CUDA backend
// does. It folds the norms' scales into the qkv and gate/up weights, takes the row-
// normalising products (the rows scaled by 1 / rms, from the input or from the squares
// the add before kept), and keeps the squares of the rows its adds write. Every token
// the decoder passes on is checked against the rows the product reads: the squares kept
// must be those rows' squares now, i.e. nothing wrote them since.
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
  // decline_adds: every other linear_add declines (the caller adds itself), so the
  // decoder's paths without a fused add run too.
  explicit FoldingBackend(bool decline_adds) : decline_adds_(decline_adds) {}

  // Stacked q/k/v and gate/up (the decoder fuses them for backends that repack), kept
  // in the checkpoint's layout.
  bool repacks_linear_weights() const override { return true; }
  Tensor prepare_linear_weight(const Tensor& host) override { return host; }

  bool folds_norm(const Tensor& w, const NormParams& norm) const override {
    return norm.type == NormType::kRMSNorm && !norm.bias && norm.weight &&
           norm.weight.dtype() == DType::kF32 && w.dtype() == DType::kF32 && w.ndim() == 2 &&
           norm.weight.numel() == w.dim(1);
  }
  Tensor fold_norm(const Tensor& w, const NormParams& norm) override {
    ++folds;
    const int64_t n = w.dim(0), k = w.dim(1);
    Tensor out = Tensor::empty({n, k}, DType::kF32);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < k; ++c)
        out.data<float>()[r * k + c] =
            w.data<float>()[r * k + c] * (norm.weight_offset + norm.weight.data<float>()[c]);
    return out;
  }

  bool linear_add(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& out,
                  RowSquares* squares) override {
    if (squares != nullptr) *squares = RowSquares{};
    if (decline_adds_ && (adds_++ % 2 == 1)) return false;
    Tensor y = Tensor::empty(out.shape(), DType::kF32);
    linear(x, w, bias, y, 0, Activation::kIdentity);
    add(out, y, out);
    if (squares != nullptr) {
      kept_ = row_squares(out);
      kept_data_ = out.raw();
      *squares = RowSquares{out.raw(), out.dim(0), ++token_};
    }
    return true;
  }

  bool linear_gated(const Tensor& x, const Tensor& w, const Tensor& bias, Activation act,
                    Tensor& out, const RowRms* rms) override {
    if (rms == nullptr) return false;
    Tensor gu = Tensor::empty({x.dim(0), w.dim(0)}, DType::kF32);
    linear(normalised(x, *rms), w, bias, gu, 0, Activation::kIdentity);
    gated_activation(gu, act, out);
    return true;
  }

  bool linear_rotary_kv(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& qkv,
                        const QkvLayout& layout, const Tensor& cos_sin, RotaryStyle style,
                        int32_t rotary_dim, const Tensor& slots, LayerKvCache& cache,
                        const RowRms* rms) override {
    if (rms == nullptr) return false;
    linear(normalised(x, *rms), w, bias, qkv, 0, Activation::kIdentity);
    rotary_write_kv(qkv, layout, cos_sin, style, rotary_dim, slots, cache);
    return true;
  }

  int folds = 0;
  int from_kept = 0, from_rows = 0;  // row scales from kept squares / from the rows
  int stale = 0;                     // kept squares honoured that are not the rows' own

 private:
  static std::vector<double> row_squares(const Tensor& x) {
    const int64_t m = x.dim(0), k = x.dim(1);
    std::vector<double> ss(static_cast<size_t>(m), 0.0);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < k; ++c) {
        const double v = x.data<float>()[r * k + c];
        ss[r] += v * v;
      }
    return ss;
  }

  // x's rows scaled by 1 / sqrt(mean(x²) + eps), the squares from the token where it
  // names these rows and is the last one handed out (as the CUDA backend decides).
  Tensor normalised(const Tensor& x, const RowRms& rms) {
    const int64_t m = x.dim(0), k = x.dim(1);
    std::vector<double> ss = row_squares(x);
    const RowSquares* sq = rms.squares;
    if (sq != nullptr && sq->token != 0 && sq->token == token_ && sq->data == x.raw() &&
        sq->rows == m && kept_data_ == x.raw()) {
      ++from_kept;
      for (int64_t r = 0; r < m; ++r)
        if (std::abs(kept_[r] - ss[r]) > 1e-9 * (1.0 + ss[r])) {
          ++stale;
          break;
        }
      ss = kept_;
    } else {
      ++from_rows;
    }
    Tensor h = Tensor::empty({m, k}, DType::kF32);
    for (int64_t r = 0; r < m; ++r) {
      const double inv = 1.0 / std::sqrt(ss[r] / static_cast<double>(k) + rms.eps);
      for (int64_t c = 0; c < k; ++c)
        h.data<float>()[r * k + c] = static_cast<float>(x.data<float>()[r * k + c] * inv);
    }
    return h;
  }

  bool decline_adds_;
  int adds_ = 0;
  std::vector<double> kept_;
  const void* kept_data_ = nullptr;
  uint64_t token_ = 0;
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

// A prefill of 12 tokens and three decode steps, folded, against the unfolded model on
// the plain CPU backend. With every add fused, each layer's qkv and gate/up products
// normalise their own rows, all but the first layer's qkv from the squares the add
// before kept. With every other add declined, the decoder adds those itself (the norm
// pass takes the deltas): no squares may be honoured for rows it wrote since.
TEST(FoldedNorms, DecoderPassesKeptSquaresOnlyForUnchangedRows) {
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
  for (bool decline : {false, true}) {
    SCOPED_TRACE(decline ? "every other add declined" : "every add fused");
    auto owned = std::make_unique<FoldingBackend>(decline);
    FoldingBackend* be = owned.get();
    std::unique_ptr<Checkpoint> ckpt;
    auto folded = decoder_on(dir, std::move(owned), ckpt);
    EXPECT_EQ(be->folds, 2 * layers);
    folded->init_kv_cache(8, 4);
    std::vector<Tensor> got = {folded->forward(one_seq(prompt, 0, blocks))};
    for (size_t i = 0; i < next.size(); ++i)
      got.push_back(
          folded->forward(one_seq({next[i]}, static_cast<int32_t>(prompt.size() + i), blocks)));
    for (size_t s = 0; s < got.size(); ++s) {
      ASSERT_EQ(got[s].shape(), want[s].shape());
      EXPECT_LE(max_rel_diff(got[s], want[s]), 1e-4) << "step " << s;
    }
    const int steps = static_cast<int>(got.size());
    EXPECT_EQ(be->stale, 0);
    if (!decline) {
      EXPECT_EQ(be->from_kept, steps * (2 * layers - 1));
      EXPECT_EQ(be->from_rows, steps);
    } else {
      EXPECT_GT(be->from_kept + be->from_rows, 0);
      EXPECT_LT(be->from_kept, steps * (2 * layers - 1));
    }
  }
}

}  // namespace
}  // namespace tachyon
