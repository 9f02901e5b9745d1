// Rotary, KV-cache writes and paged attention of the CPU backend (attention.cc) against
// float64 references on random data.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/kv_rows.h"
#include "backend/ops.h"
#include "op_test_util.h"

namespace tachyon {
namespace {

using testing_util::as_f64;
using testing_util::expect_close;
using testing_util::random_tensor;

class AttentionOpsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Backend> be_ = make_cpu_backend();
  std::mt19937 rng_{99};
};

// The int8 KV row: scale max|x| / 127 after the values, ties to even, zero rows zero,
// a NaN value at -127 without touching the scale; the AVX2 path byte for byte as the
// portable one.
TEST(Int8KvRow, RoundingAndPathsAgree) {
  const int64_t hd = 32;
  std::mt19937 rng(5);
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> rows;
  std::vector<float> ties(hd);
  ties[0] = 127.f;  // scale exactly 1: q = x, ties at k + 0.5
  for (int64_t d = 1; d < hd; ++d) ties[d] = static_cast<float>(d % 9) - 4.5f;
  rows.push_back(ties);
  rows.emplace_back(hd, 0.f);
  for (int r = 0; r < 50; ++r) {
    std::vector<float> x(hd);
    const float s = std::pow(10.f, static_cast<float>(r % 7) - 3.f);
    for (float& v : x) v = s * nd(rng);
    rows.push_back(x);
  }
  rows.push_back(rows.back());
  rows.back()[3] = std::nanf("");
  std::vector<int8_t> a(hd + 4), b(hd + 4);
  for (size_t r = 0; r < rows.size(); ++r) {
    cpu::quantize_int8_row_portable(rows[r].data(), hd, a.data());
    cpu::quantize_int8_row(rows[r].data(), hd, b.data());
    EXPECT_EQ(a, b) << "row " << r;
    float mx = 0.f;
    for (float v : rows[r])
      if (!std::isnan(v)) mx = std::max(mx, std::fabs(v));
    EXPECT_EQ(cpu::int8_row_scale(a.data(), hd), mx / 127.f) << "row " << r;
    for (int64_t d = 0; d < hd; ++d) {
      const float x = rows[r][d];
      const float want = std::isnan(x) ? -127.f : mx > 0 ? std::nearbyint(x / (mx / 127.f)) : 0.f;
      EXPECT_EQ(a[d], static_cast<int8_t>(want)) << "row " << r << " value " << d;
    }
  }
  // The ties row on its own: -4.5, -3.5, ..., 3.5 to the even neighbour.
  const int8_t even[9] = {-4, -4, -2, -2, 0, 0, 2, 2, 4};
  cpu::quantize_int8_row(ties.data(), hd, b.data());
  EXPECT_EQ(b[0], 127);
  for (int64_t d = 1; d < hd; ++d) EXPECT_EQ(b[d], even[d % 9]) << ties[d];
}

TEST_F(AttentionOpsTest, RotaryAllStylesPartialDims) {
  for (RotaryStyle style : {RotaryStyle::kHalf, RotaryStyle::kInterleaved, RotaryStyle::kHalf2D}) {
    for (int rot : {4, 10, 16}) {
      if (style == RotaryStyle::kHalf2D && rot % 4 != 0) continue;
      QkvLayout l{3, 1, 16};
      const int n = 5;
      Tensor qkv = random_tensor({n, l.row_cols()}, rng_);
      Tensor cs = be_->alloc({n, rot}, DType::kF32);
      std::vector<double> ang(n * rot / 2);
      for (int t = 0; t < n; ++t)
        for (int p = 0; p < rot / 2; ++p) {
          double a = (t * 7 + 3) * std::pow(10000.0, -2.0 * p / rot);
          ang[t * rot / 2 + p] = a;
          cs.data<float>()[t * rot + p] = static_cast<float>(std::cos(a));
          cs.data<float>()[t * rot + rot / 2 + p] = static_cast<float>(std::sin(a));
        }
      auto v = as_f64(qkv);
      std::vector<double> want = v;
      const int cols = static_cast<int>(l.row_cols());
      for (int t = 0; t < n; ++t)
        for (int h = 0; h < 4; ++h) {  // 3 q heads + 1 k head; v untouched
          const double* x = v.data() + t * cols + h * 16;
          double* y = want.data() + t * cols + h * 16;
          for (int p = 0; p < rot / 2; ++p) {
            const double c = std::cos(ang[t * rot / 2 + p]), s = std::sin(ang[t * rot / 2 + p]);
            // kHalf2D: rotate_half inside each half of the rotated dims.
            const int q = rot / 4, half2d = (p / q) * (rot / 2) + p % q;
            const int i0 = style == RotaryStyle::kHalf          ? p
                           : style == RotaryStyle::kInterleaved ? 2 * p
                                                                : half2d;
            const int i1 = style == RotaryStyle::kHalf          ? p + rot / 2
                           : style == RotaryStyle::kInterleaved ? 2 * p + 1
                                                                : half2d + q;
            y[i0] = x[i0] * c - x[i1] * s;
            y[i1] = x[i1] * c + x[i0] * s;
          }
        }
      be_->rotary(qkv, l, cs, style, rot);
      expect_close(qkv, want, 1e-5, 1e-6, "rotary");
    }
  }
}

struct SeqSpec {
  int cached;      // tokens already in the cache
  int q_len;       // tokens this step
  int prefix = 0;  // a bidirectional prefix (AttentionMeta::prefix_lens), <= cached + q_len
};

// Runs write_kv + attention on a shuffled paged cache and compares with a float64
// reference computed on contiguous per-sequence K/V.
void check_paged_attention(Backend& be, std::mt19937& rng, const std::vector<SeqSpec>& seqs,
                           QkvLayout l, int block_size, AttentionParams params,
                           bool drop_blocks_before_window = false) {
  const int S = static_cast<int>(seqs.size());
  const int hd = l.head_dim, H = l.num_heads, KV = l.num_kv_heads;
  int max_blocks = 0, total_blocks = 0;
  for (auto s : seqs) {
    int b = (s.cached + s.q_len + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, b);
    total_blocks += b;
  }
  const int num_blocks = total_blocks + 3;
  std::vector<int32_t> perm(num_blocks);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> table(S * max_blocks, -1), qs(S + 1, 0), ctx(S);
  int next = 0;
  for (int s = 0; s < S; ++s) {
    int b = (seqs[s].cached + seqs[s].q_len + block_size - 1) / block_size;
    for (int i = 0; i < b; ++i) table[s * max_blocks + i] = perm[next++];
    qs[s + 1] = qs[s] + seqs[s].q_len;
    ctx[s] = seqs[s].cached + seqs[s].q_len;
  }
  const int T = qs[S];
  LayerKvCache cache{random_tensor({num_blocks, KV, block_size, hd}, rng),
                     random_tensor({num_blocks, KV, block_size, hd}, rng)};
  // Full per-sequence K/V: the cached part is written first (as an earlier step would).
  std::vector<Tensor> full_k, full_v;
  for (int s = 0; s < S; ++s) {
    const int len = ctx[s];
    Tensor kv = random_tensor({len, l.row_cols()}, rng);
    full_k.push_back(kv);
    std::vector<int32_t> slots;
    for (int p = 0; p < seqs[s].cached; ++p)
      slots.push_back(table[s * max_blocks + p / block_size] * block_size + p % block_size);
    for (int p = seqs[s].cached; p < len; ++p) slots.push_back(-1);  // skipped now
    be.write_kv(kv, l, be.upload_i32(slots.data(), len, {}), cache);
  }
  // This step's qkv: the new tokens' k/v come from the same full tensors.
  Tensor qkv = random_tensor({T, l.row_cols()}, rng);
  std::vector<int32_t> slots;
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < seqs[s].q_len; ++i) {
      const int p = seqs[s].cached + i;
      const int t = qs[s] + i;
      float* row = qkv.data<float>() + t * l.row_cols();
      std::copy_n(full_k[s].data<float>() + p * l.row_cols() + l.q_cols(), 2 * l.kv_cols(),
                  row + l.q_cols());
      slots.push_back(table[s * max_blocks + p / block_size] * block_size + p % block_size);
    }
  be.write_kv(qkv, l, be.upload_i32(slots.data(), T, {}), cache);
  if (drop_blocks_before_window) {
    // Blocks no query of the step can see are released (-1) and must not be read.
    for (int s = 0; s < S; ++s) {
      const int first = std::max(0, seqs[s].cached - params.sliding_window + 1);
      for (int i = 0; i < first / block_size; ++i) table[s * max_blocks + i] = -1;
    }
  }

  AttentionMeta meta;
  meta.query_start = be.upload_i32(qs.data(), S + 1, {});
  meta.context_lens = be.upload_i32(ctx.data(), S, {});
  meta.block_tables = be.upload_i32(table.data(), S * max_blocks, {});
  meta.num_seqs = S;
  meta.max_blocks_per_seq = max_blocks;
  std::vector<int32_t> prefix(S);
  for (int s = 0; s < S; ++s) prefix[s] = seqs[s].prefix;
  if (std::any_of(prefix.begin(), prefix.end(), [](int32_t p) { return p > 0; })) {
    meta.prefix_lens = be.upload_i32(prefix.data(), S, {});
  }
  Tensor out = be.alloc({T, int64_t{H} * hd}, DType::kF32);
  be.attention(qkv, l, cache, meta, params, out);

  std::vector<double> slopes =
      params.alibi_slopes ? as_f64(params.alibi_slopes) : std::vector<double>();
  std::vector<double> want(static_cast<size_t>(T) * H * hd);
  auto q_all = as_f64(qkv);
  for (int s = 0; s < S; ++s) {
    auto kv = as_f64(full_k[s]);
    for (int i = 0; i < seqs[s].q_len; ++i) {
      const int t = qs[s] + i, idx = seqs[s].cached + i;
      const int lo = params.sliding_window > 0 ? std::max(0, idx - params.sliding_window + 1) : 0;
      const int hi = std::max(idx, seqs[s].prefix - 1);  // the last key it sees
      for (int h = 0; h < H; ++h) {
        const int g = h / (H / KV);
        std::vector<double> sc;
        for (int j = lo; j <= hi; ++j) {
          double d = 0;
          for (int e = 0; e < hd; ++e)
            d += q_all[t * l.row_cols() + h * hd + e] *
                 kv[j * l.row_cols() + l.q_cols() + g * hd + e];
          d *= params.scale;
          if (params.softcap > 0) d = params.softcap * std::tanh(d / params.softcap);
          if (!slopes.empty()) {
            double b = slopes[h] * j;
            if (params.alibi_bias_bf16) b = bf16_to_f32(f32_to_bf16(static_cast<float>(b)));
            d += params.alibi_scale * b;
          }
          sc.push_back(d);
        }
        double mx = *std::max_element(sc.begin(), sc.end()), sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int e = 0; e < hd; ++e) {
          double acc = 0;
          for (int j = lo; j <= hi; ++j)
            acc += sc[j - lo] * kv[j * l.row_cols() + l.q_cols() + l.kv_cols() + g * hd + e];
          want[(static_cast<size_t>(t) * H + h) * hd + e] = acc / sum;
        }
      }
    }
  }
  expect_close(out, want, 2e-5, 1e-5, "attention");
}

// The paged attention on every instruction-set path this CPU has (the AVX-512 tile
// kernel takes head dims that are multiples of 16, AVX2 multiples of 8, the scalar
// loop the rest).
class PagedAttentionTest : public ::testing::TestWithParam<cpu::CpuIsa> {
 protected:
  void SetUp() override {
    if (!cpu::cpu_isa_supported(GetParam()))
      GTEST_SKIP() << "CPU lacks " << cpu::cpu_isa_name(GetParam());
    be_ = std::make_unique<cpu::CpuBackend>(nullptr, GetParam());
  }
  std::unique_ptr<Backend> be_;
  std::mt19937 rng_{99};
};

TEST_P(PagedAttentionTest, PrefillAndDecodeMixed) {
  AttentionParams p;
  p.scale = 0.25f;
  // A fresh prefill, a chunk after cached tokens, two decodes (one at a block edge).
  check_paged_attention(*be_, rng_, {{0, 13}, {7, 6}, {24, 1}, {9, 1}}, QkvLayout{4, 2, 16}, 5, p);
  check_paged_attention(*be_, rng_, {{0, 1}}, QkvLayout{2, 2, 8}, 1, p);
  check_paged_attention(*be_, rng_, {{30, 17}}, QkvLayout{6, 1, 12}, 16, p);
  // Wide heads, a large group (tiles split), long contexts over many blocks.
  p.scale = 0.125f;
  check_paged_attention(*be_, rng_, {{40, 33}, {100, 1}, {0, 5}}, QkvLayout{16, 2, 64}, 16, p);
}

TEST_P(PagedAttentionTest, ManyDecodesAndHeadSizes) {
  AttentionParams p;
  p.scale = 0.18f;
  // Decode steps of many sequences at contexts around and across block edges (the
  // shape of a batched decode step), head dims of 1..8 vectors and odd ones.
  std::vector<SeqSpec> decodes;
  for (int s = 0; s < 12; ++s) decodes.push_back({100 + 7 * s, 1});
  for (int hd : {16, 24, 32, 80, 128}) {
    check_paged_attention(*be_, rng_, decodes, QkvLayout{8, 4, hd}, 16, p);
    check_paged_attention(*be_, rng_, {{0, 40}, {45, 3}, {17, 1}}, QkvLayout{8, 1, hd}, 16, p);
  }
  // Block sizes that are no multiple of the key chunk.
  check_paged_attention(*be_, rng_, {{50, 1}, {33, 4}, {0, 21}}, QkvLayout{4, 2, 32}, 7, p);
  check_paged_attention(*be_, rng_, {{61, 1}, {0, 3}}, QkvLayout{4, 2, 32}, 40, p);
}

TEST_P(PagedAttentionTest, SlidingWindowAndSoftcap) {
  AttentionParams p;
  p.scale = 0.3f;
  p.sliding_window = 4;
  check_paged_attention(*be_, rng_, {{0, 11}, {6, 3}, {13, 1}}, QkvLayout{4, 2, 8}, 3, p);
  check_paged_attention(*be_, rng_, {{20, 2}, {31, 1}, {9, 1}}, QkvLayout{4, 2, 8}, 3, p, true);
  check_paged_attention(*be_, rng_, {{20, 2}, {31, 1}}, QkvLayout{4, 2, 12}, 3, p, true);
  check_paged_attention(*be_, rng_, {{40, 2}, {35, 1}}, QkvLayout{4, 2, 32}, 16, p, true);
  p.sliding_window = 0;
  p.softcap = 2.f;
  check_paged_attention(*be_, rng_, {{0, 9}, {5, 1}}, QkvLayout{4, 4, 8}, 4, p);
  check_paged_attention(*be_, rng_, {{0, 19}, {35, 1}}, QkvLayout{4, 2, 32}, 16, p);
}

TEST_P(PagedAttentionTest, Alibi) {
  AttentionParams p;
  p.scale = 0.35f;
  p.alibi_slopes = random_tensor({6}, rng_, 0.3f, DType::kF32, 0.5f);
  check_paged_attention(*be_, rng_, {{0, 10}, {4, 2}}, QkvLayout{6, 6, 8}, 4, p);
  check_paged_attention(*be_, rng_, {{0, 10}, {20, 1}}, QkvLayout{6, 3, 16}, 16, p);
  p.alibi_scale = 0.35f;
  p.alibi_bias_bf16 = true;
  check_paged_attention(*be_, rng_, {{3, 20}}, QkvLayout{6, 1, 8}, 7, p);
  check_paged_attention(*be_, rng_, {{3, 20}, {30, 1}}, QkvLayout{6, 2, 32}, 16, p);
}

TEST_P(PagedAttentionTest, BidirectionalPrefix) {
  AttentionParams p;
  p.scale = 0.3f;
  // A prompt whose context is all but its last token, one that is all context, a causal
  // prompt in the same step, a decode after a context, a one-token context.
  for (QkvLayout l :
       {QkvLayout{4, 2, 16}, QkvLayout{3, 3, 12}}) {  // tiled and scalar paths of each ISA
    check_paged_attention(*be_, rng_, {{0, 13, 12}, {0, 6, 6}, {0, 7, 0}, {24, 1, 10}, {0, 3, 1}},
                          l, 5, p);
    check_paged_attention(*be_, rng_, {{0, 40, 37}}, l, 16, p);
  }
}

std::string isa_name(const ::testing::TestParamInfo<cpu::CpuIsa>& info) {
  return std::string(cpu::cpu_isa_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(AllPaths, PagedAttentionTest,
                         ::testing::Values(cpu::CpuIsa::kPortable, cpu::CpuIsa::kAvx2,
                                           cpu::CpuIsa::kAvx512),
                         isa_name);

}  // namespace
}  // namespace tachyon
