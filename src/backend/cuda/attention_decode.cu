// Paged attention for decode steps (FlashDecoding): a block owns (key split, KV head,
// sequence) and computes all the group's query heads against each key it reads, so a
// K/V row is read from memory once for the whole group. The block's four warps take
// tiles of 32 keys in turn; in a tile, lane j holds key j's full K row in registers
// (16-byte loads straight from the paged cache) and scores it against every query head
// (queries pre-scaled in shared memory, read as broadcasts); an online softmax per head
// and warp follows; then the tile's values are accumulated with lanes splitting the
// head dimension (coalesced V reads, the probabilities broadcast from shared memory).
// The warps merge in shared memory, and the key splits in a second kernel.
//
// Sequences with more than one query token this step (the kernel is chosen on a host
// hint) are handled one query after the other: correct, only slower.
#include <algorithm>
#include <climits>

#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kTile = 32;
constexpr int kSplitUnit = kWarps * kTile;  // keys per split come in multiples of this

template <typename T, int kN>
__device__ __forceinline__ void load_row(const T* src, float* dst) {
  // kN elements (kN * sizeof(T) in {4, 8, 16} bytes, aligned).
  if constexpr (kN * sizeof(T) == 16) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(src));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = to_f(e[i]);
  } else if constexpr (kN * sizeof(T) == 8) {
    const uint2 raw = __ldg(reinterpret_cast<const uint2*>(src));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = to_f(e[i]);
  } else {
    static_assert(kN * sizeof(T) == 4, "row piece of 4, 8 or 16 bytes");
    const unsigned raw = __ldg(reinterpret_cast<const unsigned*>(src));
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = to_f(e[i]);
  }
}

struct DecodePlan {
  int num_splits;
  int split_keys;
  float* part_o;   // [splits, tokens, heads, head_dim]
  float* part_ml;  // [splits, tokens, heads, 2]
};

// kHd: head_dim; kG: query heads per KV head rounded up (1, 2, 4 or 8).
template <typename T, int kHd, int kG>
__global__ void __launch_bounds__(kWarps * 32)
    decode_kernel(const AttentionArgs a, const DecodePlan plan) {
  constexpr int kVpl = kHd / 32;                       // head dims per lane in the PV product
  constexpr int kEpp = 16 / sizeof(T);                 // elements per 16-byte piece of a K row
  constexpr int kPieces = kHd / kEpp;                  // 16-byte pieces per K row
  constexpr int kChunk = kPieces < 16 ? kPieces : 16;  // pieces in flight per lane
  __shared__ __align__(16) float q_s[kG][kHd];
  __shared__ __align__(16) float p_s[kWarps][kTile][kG];
  __shared__ float o_s[kWarps][kG][kHd];
  __shared__ float ml_s[kWarps][kG][2];

  const int s = blockIdx.z, kvh = blockIdx.y, split = blockIdx.x;
  const int group = a.heads / a.kv_heads;
  const int q0 = a.query_start[s];
  const int q_len = a.query_start[s + 1] - q0;
  const int ctx = a.context_lens[s];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const T* qkv = static_cast<const T*>(a.qkv);
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks;

  for (int qi = 0; qi < q_len; ++qi) {
    const int64_t t = int64_t{q0} + qi;
    const int qidx = ctx - q_len + qi;  // cache index of this query
    int k_begin = a.sliding_window > 0 ? max(0, qidx - a.sliding_window + 1) : 0;
    int k_end = qidx + 1;
    k_begin = max(k_begin, split * plan.split_keys);
    if (split + 1 < plan.num_splits) k_end = min(k_end, (split + 1) * plan.split_keys);

    __syncthreads();  // the previous query is done with shared memory
    for (int i = threadIdx.x; i < kG * kHd; i += blockDim.x) {
      const int g = i / kHd, d = i - g * kHd;
      float v = 0.f;
      if (g < group) v = to_f(qkv[t * a.qkv_cols + int64_t{kvh * group + g} * kHd + d]) * a.scale;
      q_s[g][d] = v;
    }
    __syncthreads();

    float m[kG], l[kG], acc[kG][kVpl];
#pragma unroll
    for (int g = 0; g < kG; ++g) {
      m[g] = -INFINITY;
      l[g] = 0.f;
#pragma unroll
      for (int v = 0; v < kVpl; ++v) acc[g][v] = 0.f;
    }

    for (int kt = k_begin + warp * kTile; kt < k_end; kt += kWarps * kTile) {
      const int key = kt + lane;
      int64_t off = -1;
      if (key < k_end) {
        const int blk = table[key / a.block_size];
        if (blk >= 0 && blk < a.num_blocks)
          off = ((int64_t{blk} * a.kv_heads + kvh) * a.block_size + key % a.block_size) * kHd;
        else
          report(a.err, kErrBlockTable);
      }
      float sc[kG];
#pragma unroll
      for (int g = 0; g < kG; ++g) sc[g] = 0.f;
      if (off >= 0) {
        const uint4* kr = reinterpret_cast<const uint4*>(kc + off);
#pragma unroll
        for (int c0 = 0; c0 < kPieces; c0 += kChunk) {
          uint4 raw[kChunk];
#pragma unroll
          for (int c = 0; c < kChunk; ++c) raw[c] = __ldg(kr + c0 + c);
#pragma unroll
          for (int c = 0; c < kChunk; ++c) {
            const T* e = reinterpret_cast<const T*>(&raw[c]);
            float kf[kEpp];
#pragma unroll
            for (int i = 0; i < kEpp; ++i) kf[i] = to_f(e[i]);
#pragma unroll
            for (int g = 0; g < kG; ++g) {
              const float4* qv = reinterpret_cast<const float4*>(&q_s[g][(c0 + c) * kEpp]);
#pragma unroll
              for (int i4 = 0; i4 < kEpp / 4; ++i4) {
                const float4 q4 = qv[i4];
                sc[g] = fmaf(q4.x, kf[4 * i4], sc[g]);
                sc[g] = fmaf(q4.y, kf[4 * i4 + 1], sc[g]);
                sc[g] = fmaf(q4.z, kf[4 * i4 + 2], sc[g]);
                sc[g] = fmaf(q4.w, kf[4 * i4 + 3], sc[g]);
              }
            }
          }
        }
#pragma unroll
        for (int g = 0; g < kG; ++g) {
          if (a.softcap > 0.f) sc[g] = a.softcap * tanhf(sc[g] / a.softcap);
          if (a.alibi_slopes != nullptr && g < group) {
            float b = a.alibi_slopes[kvh * group + g] * static_cast<float>(key);
            if (a.alibi_bias_bf16) b = round_to<bf16_t>(b);
            sc[g] += a.alibi_scale * b;
          }
        }
      }
      const bool valid = off >= 0;
#pragma unroll
      for (int g = 0; g < kG; ++g) {
        const float sg = valid ? sc[g] : -INFINITY;
        const float m_new = fmaxf(m[g], warp_max(sg));
        const float p = valid ? __expf(sg - m_new) : 0.f;
        const float alpha = m[g] == -INFINITY ? 0.f : __expf(m[g] - m_new);
        l[g] = l[g] * alpha + warp_sum(p);
        m[g] = m_new;
#pragma unroll
        for (int v = 0; v < kVpl; ++v) acc[g][v] *= alpha;
        p_s[warp][lane][g] = p;
      }
      __syncwarp();
      // Values: 8 keys' rows in flight at a time, lanes over the head dimension.
      const int n_keys = min(kTile, k_end - kt);
      for (int j0 = 0; j0 < n_keys; j0 += 8) {
        float vf[8][kVpl];
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const int64_t oj = __shfl_sync(0xffffffffu, off, j0 + j);
          if (j0 + j < n_keys && oj >= 0) {
            load_row<T, kVpl>(vc + oj + lane * kVpl, vf[j]);
          } else {
#pragma unroll
            for (int v = 0; v < kVpl; ++v) vf[j][v] = 0.f;
          }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          float pj[kG];
#pragma unroll
          for (int g = 0; g < kG; ++g) pj[g] = p_s[warp][(j0 + j) & (kTile - 1)][g];
#pragma unroll
          for (int g = 0; g < kG; ++g)
#pragma unroll
            for (int v = 0; v < kVpl; ++v) acc[g][v] = fmaf(pj[g], vf[j][v], acc[g][v]);
        }
      }
      __syncwarp();  // p_s is rewritten by the next tile
    }

    // Merge the warps.
#pragma unroll
    for (int g = 0; g < kG; ++g) {
#pragma unroll
      for (int v = 0; v < kVpl; ++v) o_s[warp][g][lane * kVpl + v] = acc[g][v];
      if (lane == 0) {
        ml_s[warp][g][0] = m[g];
        ml_s[warp][g][1] = l[g];
      }
    }
    __syncthreads();
    T* out = static_cast<T*>(a.out);
    for (int i = threadIdx.x; i < group * kHd; i += blockDim.x) {
      const int g = i / kHd, d = i - g * kHd;
      float mx = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w)
        if (ml_s[w][g][1] > 0.f) mx = fmaxf(mx, ml_s[w][g][0]);
      float lsum = 0.f, o = 0.f;
      if (mx != -INFINITY) {
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          if (ml_s[w][g][1] > 0.f) {
            const float f = __expf(ml_s[w][g][0] - mx);
            lsum += f * ml_s[w][g][1];
            o += f * o_s[w][g][d];
          }
        }
      }
      const int h = kvh * group + g;
      if (plan.num_splits == 1) {
        out[(t * a.heads + h) * kHd + d] = from_f<T>(lsum > 0.f ? o / lsum : 0.f);
      } else {
        const int64_t row = (int64_t{split} * a.tokens + t) * a.heads + h;
        plan.part_o[row * kHd + d] = o;
        if (d == 0) {
          plan.part_ml[2 * row] = mx;
          plan.part_ml[2 * row + 1] = lsum;
        }
      }
    }
  }
}

template <typename T, int kHd, int kG>
void launch_typed(const AttentionArgs& a, const AttentionPlan& p, const DecodePlan& dp,
                  cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_splits), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(a.num_seqs));
  decode_kernel<T, kHd, kG><<<grid, kWarps * 32, 0, stream>>>(a, dp);
  TACHYON_CUDA_LAUNCH_CHECK();
  if (p.num_splits > 1) {
    const int64_t rows = a.tokens * a.heads;
    combine_splits_kernel<T><<<ceil_div(rows, 4), 128, 0, stream>>>(
        dp.part_o, dp.part_ml, p.num_splits, a.tokens, a.heads, a.head_dim, static_cast<T*>(a.out));
    TACHYON_CUDA_LAUNCH_CHECK();
  }
}

template <typename T, int kHd>
void launch_hd(const AttentionArgs& a, const AttentionPlan& p, const DecodePlan& dp,
               cudaStream_t stream) {
  const int group = a.heads / a.kv_heads;
  if (group <= 1)
    launch_typed<T, kHd, 1>(a, p, dp, stream);
  else if (group <= 2)
    launch_typed<T, kHd, 2>(a, p, dp, stream);
  else if (group <= 4)
    launch_typed<T, kHd, 4>(a, p, dp, stream);
  else
    launch_typed<T, kHd, 8>(a, p, dp, stream);
}

}  // namespace

bool attention_decode_supports(const AttentionArgs& a) {
  if (a.type != DType::kBF16 && a.type != DType::kF16) return false;
  if (a.head_dim != 64 && a.head_dim != 128 && a.head_dim != 256) return false;
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.heads / a.kv_heads > 8) return false;
  return a.num_seqs <= 65535 && a.kv_heads <= 65535;
}

AttentionPlan plan_attention_decode(const AttentionArgs& a, int num_sms) {
  AttentionPlan p;
  p.q_tile = 1;
  const int64_t base = int64_t{a.kv_heads} * a.num_seqs;
  const int64_t ctx = std::max<int64_t>(a.max_context_len, 1);
  // Enough blocks for several per SM, but at least one tile per warp in a split.
  const int64_t want = (8 * int64_t{num_sms} + base - 1) / base;
  const int64_t by_len = (ctx + kSplitUnit - 1) / kSplitUnit;
  int64_t splits = std::max<int64_t>(1, std::min<int64_t>({want, by_len, 256}));
  int64_t keys = (ctx + splits - 1) / splits;
  keys = (keys + kSplitUnit - 1) / kSplitUnit * kSplitUnit;
  splits = (ctx + keys - 1) / keys;
  p.num_splits = static_cast<int>(splits);
  p.split_keys = splits > 1 ? static_cast<int>(keys) : INT_MAX / 2;
  if (splits > 1)
    p.scratch_bytes = static_cast<size_t>(splits) * static_cast<size_t>(a.tokens) *
                      static_cast<size_t>(a.heads) * static_cast<size_t>(a.head_dim + 2) *
                      sizeof(float);
  return p;
}

void launch_attention_decode(const AttentionArgs& a, const AttentionPlan& p, void* scratch,
                             cudaStream_t stream) {
  if (a.tokens == 0 || a.num_seqs == 0) return;
  TACHYON_KERNEL_CHECK(attention_decode_supports(a), "attention_decode: unsupported arguments");
  DecodePlan dp{p.num_splits, p.split_keys, nullptr, nullptr};
  if (p.num_splits > 1) {
    TACHYON_KERNEL_CHECK(scratch != nullptr, "attention_decode: split-K needs scratch");
    dp.part_o = static_cast<float*>(scratch);
    dp.part_ml = dp.part_o + static_cast<size_t>(p.num_splits) * a.tokens * a.heads * a.head_dim;
  }
  auto by_hd = [&](auto tag) {
    using T = decltype(tag);
    if (a.head_dim == 64)
      launch_hd<T, 64>(a, p, dp, stream);
    else if (a.head_dim == 128)
      launch_hd<T, 128>(a, p, dp, stream);
    else
      launch_hd<T, 256>(a, p, dp, stream);
  };
  if (a.type == DType::kBF16)
    by_hd(bf16_t{});
  else
    by_hd(f16_t{});
}

}  // namespace tachyon::cuda
