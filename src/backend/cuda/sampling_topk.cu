// Token sampling on the device: one block per logits row applies the row's logits
// processing (penalties, bias, bans), then draws greedy or with temperature, top_k,
// top_p and min_p, keyed by the row's Philox counter. No sort of the vocabulary: top_k
// and top_p find their thresholds by radix selection over order-preserving integer
// keys of the logits (four 8-bit passes), counting tokens for top_k and summing their
// probability mass for top_p. Masses are fixed-point integers (2^-40 units of the top
// token's weight), so every sum is exact and associative: a row's token depends only on
// the row and its key, never on thread timing or on the other rows.
//
// Ties follow the host sampler: among equal logits the lower ids are kept first (by
// top_k and by top_p). The kept tokens are drawn from by inverse CDF in a fixed order
// (thread-strided), so the distribution equals the host's; the token drawn for a given
// uniform is not the host's (which walks its candidates sorted).
#include <algorithm>
#include <climits>
#include <cstdint>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"
#include "backend/cuda/sampling_kernels.h"

namespace tachyon::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr float kFixedOne = 1099511627776.0f;  // 2^40

__device__ __forceinline__ uint32_t order_key(float x) {
  const uint32_t u = __float_as_uint(x);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) != 0 ? (k & 0x7fffffffu) : ~k);
}

// Philox4x32-10, as engine/rng.h.
__device__ __forceinline__ uint4 philox(uint4 c, uint2 k) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k.x += 0x9E3779B9u;
      k.y += 0xBB67AE85u;
    }
    const uint32_t hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
    const uint32_t hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
    c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
  }
  return c;
}

__device__ __forceinline__ double uniform(const KSampleRow& p) {
  const uint4 o =
      philox(make_uint4(p.step_lo, p.step_hi, p.seq_index, 0u), make_uint2(p.seed_lo, p.seed_hi));
  const uint64_t bits = (static_cast<uint64_t>(o.x) << 32) | o.y;
  return static_cast<double>(bits >> 11) * 0x1.0p-53;
}

// The row's weight of a logit: exp((x - max) / T) in fixed point; 0 for -inf.
struct Weigher {
  float m, inv_t;
  __device__ __forceinline__ uint64_t operator()(float x) const {
    return static_cast<uint64_t>(expf(__fmul_rn(__fsub_rn(x, m), inv_t)) * kFixedOne);
  }
};

struct Shared {
  unsigned long long mass[256];
  int count[256];
  unsigned long long red[kWarps];
  float red_f[kWarps];
  int red_i[kWarps];
  uint32_t prefix;
  int need;
  int eq_count;
  unsigned long long rem;
  int found;
};

__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& sh) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh.red[threadIdx.x >> 5] = v;
  __syncthreads();
  unsigned long long s = 0;
  for (int w = 0; w < kWarps; ++w) s += sh.red[w];
  return s;
}

// The exclusive prefix of v over the block's threads in order; *total gets the sum.
__device__ unsigned long long block_scan_u64(unsigned long long v, Shared& sh,
                                             unsigned long long* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned long long x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  __syncthreads();
  if (lane == 31) sh.red[warp] = x;
  __syncthreads();
  unsigned long long before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sh.red[w];
    all += sh.red[w];
  }
  *total = all;
  return before + x - v;
}

// The index of the n-th (from 1) token in id order for which pred(j) holds, or -1.
template <typename Pred>
__device__ int find_nth(int64_t vocab, int n, Pred pred, Shared& sh) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (threadIdx.x == 0) sh.found = -1;
  int seen = 0;
  for (int64_t base = 0; base < vocab; base += kThreads) {
    const int64_t j = base + threadIdx.x;
    const bool f = j < vocab && pred(j);
    const unsigned ballot = __ballot_sync(0xffffffffu, f);
    __syncthreads();
    if (lane == 0) sh.red_i[warp] = __popc(ballot);
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) before += sh.red_i[w];
      total += sh.red_i[w];
    }
    before += __popc(ballot & ((1u << lane) - 1u));
    if (f && seen + before + 1 == n) sh.found = static_cast<int>(j);
    seen += total;
    if (seen >= n) break;  // the same on every thread
  }
  __syncthreads();
  return sh.found;
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(float* __restrict__ logits, int64_t vocab, const KSampleRow* __restrict__ meta,
                  const KAdjust* __restrict__ adj, const int32_t* __restrict__ adj_start,
                  KTokenMasks masks, int32_t* __restrict__ ids) {
  __shared__ Shared sh;
  const int tid = threadIdx.x;
  KSampleRow p;
  if (meta != nullptr) {
    p = meta[blockIdx.x];
  } else {
    p.on_device = 1;
    p.greedy = 1;
  }
  if (p.on_device == 0) {
    if (tid == 0) ids[blockIdx.x] = kSampledOnHost;
    return;
  }
  float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;

  // Logits processing, as the host's process_logits (each token at most once a row).
  if (adj_start != nullptr) {
    for (int i = adj_start[blockIdx.x] + tid; i < adj_start[blockIdx.x + 1]; i += kThreads) {
      const KAdjust a = adj[i];
      if (a.token < 0 || a.token >= vocab) continue;
      float x = row[a.token];
      if ((a.flags & 1u) != 0 && p.repetition_penalty != 1.f)
        x = x < 0.f ? __fmul_rn(x, p.repetition_penalty) : __fdiv_rn(x, p.repetition_penalty);
      if (a.count > 0 && (p.presence_penalty != 0.f || p.frequency_penalty != 0.f))
        x = __fsub_rn(x, __fadd_rn(p.presence_penalty,
                                   __fmul_rn(p.frequency_penalty, static_cast<float>(a.count))));
      if (a.bias != 0.f) x = __fadd_rn(x, a.bias);
      if ((a.flags & 2u) != 0) x = -INFINITY;
      row[a.token] = x;
    }
    __syncthreads();
  }
  // The allowed tokens (structured output): the others become -inf.
  if (masks.mask_of != nullptr && masks.mask_of[blockIdx.x] >= 0) {
    const int64_t words = (vocab + 31) / 32;
    const uint32_t* mask = masks.masks + masks.mask_of[blockIdx.x] * words;
    for (int64_t j = tid; j < vocab; j += kThreads)
      if (((mask[j / 32] >> (j % 32)) & 1u) == 0) row[j] = -INFINITY;
    __syncthreads();
  }

  // The largest logit (lowest id on ties), NaN / +inf, the number of allowed tokens.
  // A row read as float4s where it is aligned, two per thread in flight (the scan is a
  // single block's: what it keeps in flight sets its rate).
  float bv = -INFINITY;
  int bi = INT_MAX;
  int bad = 0, finite = 0;
  auto visit = [&](float x, int64_t j) {
    greedy_visit(x, j, bv, bi, bad);
    finite += x != -INFINITY && !isnan(x);
  };
  auto visit4 = [&](const float4& v, int64_t j) {
    visit(v.x, j);
    visit(v.y, j + 1);
    visit(v.z, j + 2);
    visit(v.w, j + 3);
  };
  if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
    const int64_t n4 = vocab / 4;
    int64_t j = tid;
    for (; j + kThreads < n4; j += 2 * kThreads) {
      const float4 a = r4[j], b = r4[j + kThreads];
      visit4(a, 4 * j);
      visit4(b, 4 * (j + kThreads));
    }
    for (; j < n4; j += kThreads) visit4(r4[j], 4 * j);
  } else {
    for (int64_t j = tid; j < vocab; j += kThreads) visit(row[j], j);
  }
  warp_argmax(bv, bi);
  if ((tid & 31) == 0) {
    sh.red_f[tid >> 5] = bv;
    sh.red_i[tid >> 5] = bi;
  }
  bad = __syncthreads_or(bad);
  for (int w = 0; w < kWarps; ++w) {
    if (argmax_better(sh.red_f[w], sh.red_i[w], bv, bi)) {
      bv = sh.red_f[w];
      bi = sh.red_i[w];
    }
  }
  const int num_finite = static_cast<int>(block_sum_u64(static_cast<unsigned>(finite), sh));
  if (bad != 0 || bv == -INFINITY || p.greedy != 0) {
    if (tid == 0)
      ids[blockIdx.x] = bad != 0 ? kSampledBadLogits : bv == -INFINITY ? kSampledNoneAllowed : bi;
    return;
  }
  const float m = bv;
  const float t = p.temperature;
  const Weigher weight{m, 1.f / t};
  const float min_logit = p.min_p > 0.f ? __fadd_rn(m, __fmul_rn(t, logf(p.min_p))) : -INFINITY;

  // top_k: the k-th largest key by counts; ties at it kept up to id eq_cut_k.
  uint32_t tau_k = 0;
  int eq_cut_k = INT_MAX;
  if (p.top_k > 0 && p.top_k < num_finite) {
    uint32_t prefix = 0, mask = 0;
    int need = p.top_k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) sh.count[b] = 0;
      __syncthreads();
      for (int64_t j = tid; j < vocab; j += kThreads) {
        const float x = row[j];
        if (x == -INFINITY) continue;
        const uint32_t key = order_key(x);
        if ((key & mask) == prefix) atomicAdd(&sh.count[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (tid == 0) {
        int cum = 0, sel = 0;
        for (int b = 255; b >= 0; --b) {
          if (cum + sh.count[b] >= need) {
            sel = b;
            break;
          }
          cum += sh.count[b];
        }
        sh.prefix = prefix | (static_cast<uint32_t>(sel) << shift);
        sh.need = need - cum;
        sh.eq_count = sh.count[sel];
      }
      __syncthreads();
      prefix = sh.prefix;
      need = sh.need;
      mask |= 0xFFu << shift;
    }
    tau_k = prefix;
    if (sh.eq_count > need) {
      const uint32_t tk = tau_k;
      eq_cut_k = find_nth(
          vocab, need, [&](int64_t j) { return order_key(row[j]) == tk && row[j] != -INFINITY; },
          sh);
    }
  }
  auto eligible_k = [&](int64_t j, float x, uint32_t key) {
    return x != -INFINITY && (key > tau_k || (key == tau_k && j <= eq_cut_k));
  };

  // top_p: the smallest most-likely prefix (of the top_k set) holding top_p of its mass,
  // by mass; ties at its last key kept up to id eq_cut_p.
  const bool use_top_p = p.top_p < 1.f;
  uint32_t tau_p = 0;
  int eq_cut_p = INT_MAX;
  if (use_top_p) {
    unsigned long long z = 0;
    for (int64_t j = tid; j < vocab; j += kThreads) {
      const float x = row[j];
      if (eligible_k(j, x, order_key(x))) z += weight(x);
    }
    z = block_sum_u64(z, sh);
    double want_d = ceil(static_cast<double>(p.top_p) * static_cast<double>(z));
    unsigned long long want = want_d < 1.0 ? 1ull : static_cast<unsigned long long>(want_d);
    if (want > z) want = z;
    uint32_t prefix = 0, mask = 0;
    unsigned long long rem = want;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = tid; b < 256; b += kThreads) {
        sh.mass[b] = 0;
        sh.count[b] = 0;
      }
      __syncthreads();
      for (int64_t j = tid; j < vocab; j += kThreads) {
        const float x = row[j];
        const uint32_t key = order_key(x);
        if ((key & mask) != prefix || !eligible_k(j, x, key)) continue;
        const uint32_t b = (key >> shift) & 255u;
        atomicAdd(&sh.mass[b], static_cast<unsigned long long>(weight(x)));
        atomicAdd(&sh.count[b], 1);
      }
      __syncthreads();
      if (tid == 0) {
        unsigned long long cum = 0;
        int sel = -1;
        for (int b = 255; b >= 0; --b) {
          if (cum + sh.mass[b] >= rem) {
            sel = b;
            break;
          }
          cum += sh.mass[b];
        }
        if (sel < 0) {  // cannot happen (the bins hold at least rem); keep the lowest
          sel = 0;
          for (int b = 0; b < 256; ++b)
            if (sh.count[b] > 0) {
              sel = b;
              break;
            }
          cum = 0;
        }
        sh.prefix = prefix | (static_cast<uint32_t>(sel) << shift);
        sh.rem = rem > cum ? rem - cum : 1ull;
        sh.eq_count = sh.count[sel];
      }
      __syncthreads();
      prefix = sh.prefix;
      rem = sh.rem;
      mask |= 0xFFu << shift;
    }
    tau_p = prefix;
    const unsigned long long w_tau = weight(key_value(tau_p));
    const long long n_p =
        w_tau > 0 ? static_cast<long long>((rem + w_tau - 1) / w_tau) : sh.eq_count;
    if (n_p < sh.eq_count) {
      const uint32_t tp = tau_p;
      eq_cut_p = find_nth(
          vocab, static_cast<int>(n_p),
          [&](int64_t j) {
            const float x = row[j];
            const uint32_t key = order_key(x);
            return key == tp && eligible_k(j, x, key);
          },
          sh);
    }
  }
  auto kept = [&](int64_t j, float x) {
    const uint32_t key = order_key(x);
    return eligible_k(j, x, key) && x >= min_logit &&
           (!use_top_p || key > tau_p || (key == tau_p && j <= eq_cut_p));
  };

  // The draw: inverse CDF over the kept tokens in thread-strided order.
  if (tid == 0) ids[blockIdx.x] = bi;  // replaced below (the top token always has weight)
  unsigned long long mine = 0;
  for (int64_t j = tid; j < vocab; j += kThreads) {
    const float x = row[j];
    if (kept(j, x)) mine += weight(x);
  }
  unsigned long long total = 0;
  const unsigned long long before = block_scan_u64(mine, sh, &total);
  unsigned long long target =
      static_cast<unsigned long long>(uniform(p) * static_cast<double>(total));
  if (target >= total) target = total - 1;
  if (mine > 0 && before <= target && target < before + mine) {
    unsigned long long cum = before;
    int last = -1;
    for (int64_t j = tid; j < vocab; j += kThreads) {
      const float x = row[j];
      if (!kept(j, x)) continue;
      const unsigned long long w = weight(x);
      if (w == 0) continue;
      cum += w;
      last = static_cast<int>(j);
      if (cum > target) break;
    }
    ids[blockIdx.x] = last;
  }
}

// The greedy rows' split scan: block (s, r) takes elements [s, s + 1) * kGreedyChunk of
// row r, four float4s a thread in flight where the row allows. Beside the argmax it sums
// exp(x - max) over its elements (online, rebased as the max moves), so the last block
// of a row also gives the chosen token's log-probability, -log(sum over the row of
// exp(x - max)) (the token is the max), with no second pass over the logits.
constexpr int kGreedyThreads = 256;
constexpr int kGreedyChunk = 4096;
constexpr int kGreedyMaxSplits = 64;

struct GreedyPartial {
  float value;  // the split's largest logit
  int index;
  int bad;
  float sum;  // sum of exp(x - value) over the split's finite logits
};

__global__ void __launch_bounds__(kGreedyThreads)
    greedy_split_kernel(const float* __restrict__ logits, int64_t vocab, int splits,
                        GreedyPartial* __restrict__ part, int* __restrict__ counters,
                        int32_t* __restrict__ ids, float* __restrict__ logprobs) {
  __shared__ float red_v[kGreedyThreads / 32];
  __shared__ int red_i[kGreedyThreads / 32];
  __shared__ float red_m[kGreedyThreads / 32], red_s[kGreedyThreads / 32];
  pdl_wait();  // the logits come from the kernels before
  pdl_launch_dependents();
  const int r = blockIdx.y, s = blockIdx.x, tid = threadIdx.x;
  const int lane = tid & 31, warp = tid >> 5;
  const float* row = logits + static_cast<int64_t>(r) * vocab;
  const int64_t begin = int64_t{s} * kGreedyChunk;
  const int64_t end = min(vocab, begin + kGreedyChunk);
  float bv = -INFINITY;
  int bi = INT_MAX;
  int bad = 0;
  float m = -INFINITY, sum = 0.f;
  auto visit = [&](float x, int64_t j) {
    greedy_visit(x, j, bv, bi, bad);
    lse_add(x, m, sum);
  };
  if (vocab % 4 == 0 && reinterpret_cast<uintptr_t>(row) % 16 == 0) {
    const float4* r4 = reinterpret_cast<const float4*>(row);
#pragma unroll 4
    for (int64_t j = begin / 4 + tid; j < end / 4; j += kGreedyThreads) {
      const float4 v = r4[j];
      visit(v.x, 4 * j);
      visit(v.y, 4 * j + 1);
      visit(v.z, 4 * j + 2);
      visit(v.w, 4 * j + 3);
    }
  } else {
    for (int64_t j = begin + tid; j < end; j += kGreedyThreads) visit(row[j], j);
  }
  warp_argmax(bv, bi);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, sum, o);
    lse_merge(m, sum, m2, s2);
  }
  if (lane == 0) {
    red_v[warp] = bv;
    red_i[warp] = bi;
    red_m[warp] = m;
    red_s[warp] = sum;
  }
  bad = __syncthreads_or(bad);
  if (tid == 0) {
    for (int w = 1; w < kGreedyThreads / 32; ++w) {
      if (argmax_better(red_v[w], red_i[w], bv, bi)) {
        bv = red_v[w];
        bi = red_i[w];
      }
      lse_merge(m, sum, red_m[w], red_s[w]);
    }
    // m is the split's largest finite logit, bv its largest value: the same unless the
    // split holds no finite value (bv -inf or +inf: then no log-probability is reported).
    part[int64_t{r} * splits + s] = GreedyPartial{bv, bi, bad, m == bv ? sum : 0.f};
  }
  if (!last_block_arrives(counters + r, splits)) return;
  if (warp != 0) return;
  bv = -INFINITY;
  bi = INT_MAX;
  bad = 0;
  m = -INFINITY;
  sum = 0.f;
  for (int i = lane; i < splits; i += 32) {
    const GreedyPartial p = part[int64_t{r} * splits + i];
    bad |= p.bad;
    if (argmax_better(p.value, p.index, bv, bi)) {
      bv = p.value;
      bi = p.index;
    }
    if (p.sum > 0.f) lse_merge(m, sum, p.value, p.sum);
  }
  warp_argmax(bv, bi);
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, sum, o);
    lse_merge(m, sum, m2, s2);
  }
  bad = __any_sync(0xffffffffu, bad != 0);
  if (lane == 0) {
    const bool none = bv == -INFINITY;
    ids[r] = bad != 0 ? kSampledBadLogits : none ? kSampledNoneAllowed : bi;
    // The token is the row's largest logit: its log-probability is -log(sum).
    logprobs[r] = bad != 0 || none || sum <= 0.f ? 0.f : -logf(sum);
  }
}

__global__ void uniforms_kernel(const KSampleRow* meta, int64_t n, double* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = uniform(meta[i]);
}

}  // namespace

void launch_sample(float* logits, int64_t rows, int64_t vocab, const KSampleRow* rows_meta,
                   const KAdjust* adj, const int32_t* adj_start, KTokenMasks masks, int32_t* ids,
                   cudaStream_t stream) {
  if (rows == 0) return;
  TACHYON_KERNEL_CHECK(rows <= INT_MAX && vocab > 0 && vocab < (int64_t{1} << 23),
                       "sample: rows must fit an int and the vocabulary be in (0, 2^23)");
  sample_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab, rows_meta, adj,
                                                                      adj_start, masks, ids);
  TACHYON_CUDA_LAUNCH_CHECK();
}

int greedy_splits(int64_t vocab) {
  return static_cast<int>(
      std::clamp<int64_t>((vocab + kGreedyChunk - 1) / kGreedyChunk, 1, kGreedyMaxSplits));
}

size_t greedy_partial_bytes(int64_t rows, int64_t vocab) {
  return static_cast<size_t>(rows) * static_cast<size_t>(greedy_splits(vocab)) *
         sizeof(GreedyPartial);
}

void launch_sample_greedy(const float* logits, int64_t rows, int64_t vocab, void* partial,
                          int* counters, int32_t* ids, float* logprobs, cudaStream_t stream) {
  if (rows == 0) return;
  static_assert(kGreedyMaxVocab == int64_t{kGreedyChunk} * kGreedyMaxSplits);
  TACHYON_KERNEL_CHECK(rows <= kGreedyMaxRows && vocab > 0 && vocab <= kGreedyMaxVocab,
                       "sample_greedy: at most 65535 rows and 262144 logits a row");
  const int splits = greedy_splits(vocab);
  launch_kernel(greedy_split_kernel,
                dim3(static_cast<unsigned>(splits), static_cast<unsigned>(rows)),
                dim3(kGreedyThreads), 0, stream, logits, vocab, splits,
                static_cast<GreedyPartial*>(partial), counters, ids, logprobs);
}

void launch_sample_uniforms(const KSampleRow* rows_meta, int64_t n, double* out,
                            cudaStream_t stream) {
  if (n == 0) return;
  uniforms_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(rows_meta, n, out);
  TACHYON_CUDA_LAUNCH_CHECK();
}

}  // namespace tachyon::cuda
