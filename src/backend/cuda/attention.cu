// Paged attention for prefill, chunked prefill and decode in one kernel family, and
// the one that honours a bidirectional prefix (ChatGLM-6B's prompt context) and the
// tree masks of speculative tokens verified in one step.
//
// A block owns (sequence, KV head, tile of query tokens, key split). Its rows are the
// tile's queries times the KV group's query heads, so GQA/MQA heads that share a KV
// head read each K/V tile once. K/V tiles of kKeyTile keys are gathered from the paged
// cache into shared memory; every warp runs an online softmax (running max m, running
// sum l, unnormalised output o in shared memory, all f32) over its rows. Long contexts
// with few blocks (decode) are split over the keys; a second kernel merges the splits'
// partial (o, m, l).
#include <algorithm>
#include <climits>

#include "backend/cuda/attention_combine.cuh"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

constexpr int kKeyTile = 32;  // one key per lane
constexpr int kThreads = 128;
constexpr int kMaxChunks = 8;  // head_dim <= 8 * 32

// Loads n consecutive elements starting at src (aligned to 16 bytes when kVec) as f32.
template <typename T, int kN>
__device__ __forceinline__ void load_vec(const T* src, float* dst) {
  if constexpr (sizeof(T) * kN == 16) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = to_f(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) dst[i] = to_f(src[i]);
  }
}

struct KernelPlan {
  int q_tile;
  int num_splits;
  int split_keys;
  float* part_o;   // [splits, tokens, heads, head_dim]
  float* part_ml;  // [splits, tokens, heads, 2]
};

// kVec: elements per vector load of a K/V row (16 bytes when head_dim allows, else 1).
template <typename T, int kVec>
__global__ void __launch_bounds__(kThreads)
    attention_kernel(const AttentionArgs a, const KernelPlan plan) {
  extern __shared__ float smem[];
  const int hd = a.head_dim;
  const int group = a.heads / a.kv_heads;
  const int rows = plan.q_tile * group;
  float* q_s = smem;                       // [rows][hd], pre-scaled
  float* o_s = q_s + rows * hd;            // [rows][hd]
  float* m_s = o_s + rows * hd;            // [rows]
  float* l_s = m_s + rows;                 // [rows]
  float* k_s = l_s + rows;                 // [kKeyTile][hd + 1] (padded: lane j reads row j)
  float* v_s = k_s + kKeyTile * (hd + 1);  // [kKeyTile][hd]

  const int s = blockIdx.z;
  const int kvh = blockIdx.y / plan.num_splits;
  const int split = blockIdx.y % plan.num_splits;
  const int q0 = a.query_start[s];
  const int q_len = a.query_start[s + 1] - q0;
  const int ctx = a.context_lens[s];
  // Tiles beyond gridDim.x (a max_query_len hint that was too small) loop here.
  for (int tile0 = blockIdx.x * plan.q_tile; tile0 < q_len; tile0 += gridDim.x * plan.q_tile) {
    __syncthreads();  // the previous tile's rows are written out
    const int n_q = min(plan.q_tile, q_len - tile0);
    const int first_idx = ctx - q_len + tile0;  // cache index of the tile's first query
    const int last_idx = first_idx + n_q - 1;
    // A bidirectional prefix widens every query's keys to [0, prefix) at least.
    const int prefix = a.prefix_lens != nullptr ? a.prefix_lens[s] : 0;
    int k_begin = a.sliding_window > 0 ? max(0, first_idx - a.sliding_window + 1) : 0;
    int k_end = max(last_idx + 1, min(prefix, ctx));
    k_begin = max(k_begin, split * plan.split_keys);
    if (split + 1 < plan.num_splits) k_end = min(k_end, (split + 1) * plan.split_keys);

    // A tree mask over the step's own keys (cache indices step0 ..), or null.
    const int step0 = ctx - q_len;
    const uint32_t* tree = a.tree_mask != nullptr && a.tree_mask_start[s] >= 0
                               ? a.tree_mask + a.tree_mask_start[s]
                               : nullptr;

    const T* qkv = static_cast<const T*>(a.qkv);
    const int tid = threadIdx.x;
    for (int i = tid; i < rows * hd; i += blockDim.x) {
      const int r = i / hd, d = i - r * hd;
      const int qi = r / group;
      float v = 0.f;
      if (qi < n_q) {
        const int64_t t = int64_t{q0} + tile0 + qi;
        const int h = kvh * group + (r - qi * group);
        v = to_f(qkv[t * a.qkv_cols + int64_t{h} * hd + d]) * a.scale;
      }
      q_s[i] = v;
      o_s[i] = 0.f;
    }
    for (int r = tid; r < rows; r += blockDim.x) {
      m_s[r] = -INFINITY;
      l_s[r] = 0.f;
    }

    const T* kc = static_cast<const T*>(a.k_cache);
    const T* vc = static_cast<const T*>(a.v_cache);
    const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks;
    const int lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    const int vecs_per_row = hd / kVec;

    for (int kt = k_begin; kt < k_end; kt += kKeyTile) {
      __syncthreads();  // the previous tile is consumed (and q/o are initialised)
      for (int i = tid; i < kKeyTile * vecs_per_row; i += blockDim.x) {
        const int j = i / vecs_per_row;
        const int d0 = (i - j * vecs_per_row) * kVec;
        const int key = kt + j;
        float kv[kVec], vv[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) kv[e] = vv[e] = 0.f;
        if (key < k_end) {
          const int blk = table[key / a.block_size];
          if (blk >= 0 && blk < a.num_blocks) {
            const int64_t off =
                ((int64_t{blk} * a.kv_heads + kvh) * a.block_size + key % a.block_size) * hd + d0;
            load_vec<T, kVec>(kc + off, kv);
            load_vec<T, kVec>(vc + off, vv);
          } else if (d0 == 0) {
            report(a.err, kErrBlockTable);
          }
        }
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          k_s[j * (hd + 1) + d0 + e] = kv[e];
          v_s[j * hd + d0 + e] = vv[e];
        }
      }
      __syncthreads();

      for (int r = warp; r < rows; r += nwarps) {
        const int qi = r / group;
        if (qi >= n_q) continue;  // uniform over the warp
        const int qidx = first_idx + qi;
        const int h = kvh * group + (r - qi * group);
        const int key = kt + lane;
        bool valid = key < k_end && (key <= qidx || key < prefix) &&
                     (a.sliding_window <= 0 || key > qidx - a.sliding_window);
        if (valid && tree != nullptr && key >= step0) {
          // The step's own keys: those the tree mask lets this query see.
          const int64_t bit = int64_t{tile0 + qi} * q_len + (key - step0);
          valid = ((tree[bit / 32] >> (bit % 32)) & 1u) != 0;
        }
        float sc = -INFINITY;
        if (valid) {
          const float* qr = q_s + r * hd;
          const float* kr = k_s + lane * (hd + 1);
          float acc = 0.f;
          for (int d = 0; d < hd; ++d) acc = fmaf(qr[d], kr[d], acc);
          if (a.softcap > 0.f) acc = a.softcap * tanhf(acc / a.softcap);
          if (a.alibi_slopes != nullptr) {
            float b = a.alibi_slopes[h] * static_cast<float>(key);
            if (a.alibi_bias_bf16) b = round_to<bf16_t>(b);
            acc += a.alibi_scale * b;
          }
          sc = acc;
        }
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, warp_max(sc));
        if (m_new == -INFINITY) continue;  // nothing visible yet; uniform over the warp
        const float p = valid ? __expf(sc - m_new) : 0.f;
        const float alpha = m_old == -INFINITY ? 0.f : __expf(m_old - m_new);
        const float l_new = l_s[r] * alpha + warp_sum(p);
        float acc[kMaxChunks];
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
          const int d = lane + 32 * c;
          acc[c] = d < hd ? o_s[r * hd + d] * alpha : 0.f;
        }
        for (int j = 0; j < kKeyTile; ++j) {
          const float pj = __shfl_sync(0xffffffffu, p, j);
          if (pj == 0.f) continue;  // uniform over the warp
          const float* vr = v_s + j * hd;
#pragma unroll
          for (int c = 0; c < kMaxChunks; ++c) {
            const int d = lane + 32 * c;
            if (d < hd) acc[c] = fmaf(pj, vr[d], acc[c]);
          }
        }
#pragma unroll
        for (int c = 0; c < kMaxChunks; ++c) {
          const int d = lane + 32 * c;
          if (d < hd) o_s[r * hd + d] = acc[c];
        }
        __syncwarp();
        if (lane == 0) {
          m_s[r] = m_new;
          l_s[r] = l_new;
        }
        __syncwarp();
      }
    }
    __syncthreads();

    T* out = static_cast<T*>(a.out);
    const int64_t out_cols = int64_t{a.heads} * hd;
    for (int r = warp; r < rows; r += nwarps) {
      const int qi = r / group;
      if (qi >= n_q) continue;
      const int64_t t = int64_t{q0} + tile0 + qi;
      const int h = kvh * group + (r - qi * group);
      if (plan.num_splits == 1) {
        const float l = l_s[r];
        const float inv = l > 0.f ? 1.f / l : 0.f;
        for (int d = lane; d < hd; d += 32)
          out[t * out_cols + int64_t{h} * hd + d] = from_f<T>(o_s[r * hd + d] * inv);
      } else {
        const int64_t row = (int64_t{split} * a.tokens + t) * a.heads + h;
        for (int d = lane; d < hd; d += 32) plan.part_o[row * hd + d] = o_s[r * hd + d];
        if (lane == 0) {
          plan.part_ml[2 * row] = m_s[r];
          plan.part_ml[2 * row + 1] = l_s[r];
        }
      }
    }
  }  // tiles
}

size_t smem_for(int rows, int hd) {
  return static_cast<size_t>(2 * rows * hd + 2 * rows + kKeyTile * (2 * hd + 1)) * sizeof(float);
}

template <typename T, int kVec>
void launch_typed(const AttentionArgs& a, const AttentionPlan& p, const KernelPlan& kp,
                  cudaStream_t stream) {
  auto kernel = attention_kernel<T, kVec>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), p.smem_bytes);
  const dim3 grid(ceil_div(a.max_query_len, p.q_tile),
                  static_cast<unsigned>(a.kv_heads * p.num_splits),
                  static_cast<unsigned>(a.num_seqs));
  kernel<<<grid, kThreads, p.smem_bytes, stream>>>(a, kp);
  TACHYON_CUDA_LAUNCH_CHECK();
  if (p.num_splits > 1) {
    const int64_t rows = a.tokens * a.heads;
    combine_splits_kernel<T><<<ceil_div(rows, 4), 128, 0, stream>>>(
        kp.part_o, kp.part_ml, p.num_splits, a.tokens, a.heads, a.head_dim, static_cast<T*>(a.out));
    TACHYON_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace

AttentionPlan plan_attention(const AttentionArgs& a, int num_sms) {
  TACHYON_KERNEL_CHECK(a.kv_heads > 0 && a.heads % a.kv_heads == 0,
                       "attention: heads must be a multiple of kv heads");
  TACHYON_KERNEL_CHECK(a.head_dim > 0 && a.head_dim <= 32 * kMaxChunks,
                       "attention: head_dim must be in (0, 256]");
  TACHYON_KERNEL_CHECK(a.num_seqs <= 65535 && a.kv_heads <= 65535,
                       "attention: more than 65535 sequences or kv heads in one call");
  AttentionPlan p;
  const int group = a.heads / a.kv_heads;
  const int rows_target = a.head_dim <= 128 ? 64 : 32;
  p.q_tile = std::max(1, rows_target / group);
  p.q_tile = std::min(p.q_tile, std::max(1, a.max_query_len));
  const int rows = p.q_tile * group;
  p.smem_bytes = smem_for(rows, a.head_dim);
  TACHYON_KERNEL_CHECK(p.smem_bytes <= 227 * 1024,
                       "attention: the query group needs more shared memory than a block has");
  const int64_t blocks = int64_t{ceil_div(a.max_query_len, p.q_tile)} * a.kv_heads * a.num_seqs;
  int splits = 1;
  if (a.max_context_len > 256 && blocks < 2 * int64_t{num_sms}) {
    const int64_t want = (2 * int64_t{num_sms} + blocks - 1) / blocks;
    const int64_t by_len = (a.max_context_len + 127) / 128;
    splits = static_cast<int>(std::min<int64_t>({want, by_len, 64}));
  }
  if (splits > 1) {
    int keys = (a.max_context_len + splits - 1) / splits;
    keys = (keys + kKeyTile - 1) / kKeyTile * kKeyTile;
    splits = (a.max_context_len + keys - 1) / keys;
    p.split_keys = keys;
  }
  if (splits > 1 && static_cast<int64_t>(a.kv_heads) * splits > 65535) splits = 1;
  p.num_splits = splits;
  if (splits == 1) p.split_keys = INT_MAX / 2;
  if (splits > 1)
    p.scratch_bytes = static_cast<size_t>(splits) * static_cast<size_t>(a.tokens) *
                      static_cast<size_t>(a.heads) * static_cast<size_t>(a.head_dim + 2) *
                      sizeof(float);
  return p;
}

void launch_attention(const AttentionArgs& a, const AttentionPlan& p, void* scratch,
                      cudaStream_t stream) {
  if (a.tokens == 0 || a.num_seqs == 0) return;
  KernelPlan kp{p.q_tile, p.num_splits, p.split_keys, nullptr, nullptr};
  if (p.num_splits > 1) {
    TACHYON_KERNEL_CHECK(scratch != nullptr, "attention: split-K needs scratch");
    kp.part_o = static_cast<float*>(scratch);
    kp.part_ml = kp.part_o + static_cast<size_t>(p.num_splits) * a.tokens * a.heads * a.head_dim;
  }
  TACHYON_DISPATCH_FLOAT(a.type, T, {
    constexpr int kV = static_cast<int>(16 / sizeof(T));
    if (a.head_dim % kV == 0)
      launch_typed<T, kV>(a, p, kp, stream);
    else
      launch_typed<T, 1>(a, p, kp, stream);
  });
}

}  // namespace tachyon::cuda
