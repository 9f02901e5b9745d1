// Tensor-core paged attention for prefill (bf16/f16, head_dim a multiple of 16 up to
// 256), in the FlashAttention-2 schedule: a block owns 64 rows — a tile of query
// tokens times the KV group's heads — of one sequence and KV head; each of its 4 warps
// owns 16 rows. Per tile of 64 keys gathered from the paged cache into shared memory:
//   S = Q Kᵀ on the tensor cores (WMMA 16x16x16, f32 accumulate),
//   online softmax in f32 on the warp's rows (mask, scale, softcap, ALiBi),
//   P (rounded to the storage dtype) V on the tensor cores, O = O * alpha + P V in f32.
// O, m and l live in shared memory (the WMMA accumulator layout is opaque, so the
// per-row rescale goes through shared memory).
#include <mma.h>

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/launch_check.h"

namespace tachyon::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kBr = 64;  // rows per block
constexpr int kBc = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;

template <int HD>
struct MmaLayout {
  static constexpr int kLdq = HD + 8;   // T elements; rows stay 16-byte aligned
  static constexpr int kLds = kBc + 4;  // floats
  static constexpr int kLdp = kBc + 8;  // T elements
  static constexpr int kLdo = HD + 4;   // floats
  static constexpr size_t kQ = 0;
  static constexpr size_t kK = kQ + size_t{kBr} * kLdq * 2;
  static constexpr size_t kV = kK + size_t{kBc} * kLdq * 2;
  static constexpr size_t kS = kV + size_t{kBc} * kLdq * 2;
  static constexpr size_t kP = kS + size_t{kBr} * kLds * 4;
  static constexpr size_t kO = kP + size_t{kBr} * kLdp * 2;
  static constexpr size_t kPv = kO + size_t{kBr} * kLdo * 4;
  static constexpr size_t kM = kPv + size_t{kWarps} * 256 * 4;
  static constexpr size_t kBytes = kM + size_t{3} * kBr * 4;
  static_assert(kK % 128 == 0 && kV % 128 == 0 && kS % 128 == 0 && kP % 128 == 0 && kO % 128 == 0 &&
                    kPv % 128 == 0,
                "WMMA tiles need 32-byte aligned shared memory");
};

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) attention_mma_kernel(const AttentionArgs a) {
  using L = MmaLayout<HD>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* q_s = reinterpret_cast<T*>(smem + L::kQ);
  T* k_s = reinterpret_cast<T*>(smem + L::kK);
  T* v_s = reinterpret_cast<T*>(smem + L::kV);
  float* s_s = reinterpret_cast<float*>(smem + L::kS);
  T* p_s = reinterpret_cast<T*>(smem + L::kP);
  float* o_s = reinterpret_cast<float*>(smem + L::kO);
  float* pv_s = reinterpret_cast<float*>(smem + L::kPv);
  float* m_s = reinterpret_cast<float*>(smem + L::kM);
  float* l_s = m_s + kBr;
  float* al_s = l_s + kBr;
  constexpr int kVec = 8;  // T elements per 16-byte load
  constexpr int kRowVecs = HD / kVec;

  const int group = a.heads / a.kv_heads;
  const int q_tile = kBr / group;
  const int used_rows = q_tile * group;
  const int s = blockIdx.z;
  const int kvh = blockIdx.y;
  const int q0 = a.query_start[s];
  const int q_len = a.query_start[s + 1] - q0;
  const int ctx = a.context_lens[s];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const T* qkv = static_cast<const T*>(a.qkv);
  const T* kc = static_cast<const T*>(a.k_cache);
  const T* vc = static_cast<const T*>(a.v_cache);
  const int32_t* table = a.block_tables + int64_t{s} * a.max_blocks;

  for (int tile0 = blockIdx.x * q_tile; tile0 < q_len; tile0 += gridDim.x * q_tile) {
    __syncthreads();
    const int n_q = min(q_tile, q_len - tile0);
    const int first_idx = ctx - q_len + tile0;
    const int last_idx = first_idx + n_q - 1;
    const int k_begin = a.sliding_window > 0 ? max(0, first_idx - a.sliding_window + 1) : 0;
    const int k_end = last_idx + 1;

    for (int i = tid; i < kBr * kRowVecs; i += kThreads) {
      const int r = i / kRowVecs, c = (i - r * kRowVecs) * kVec;
      const int qi = r / group;
      uint4 v = make_uint4(0, 0, 0, 0);
      if (r < used_rows && qi < n_q) {
        const int64_t t = int64_t{q0} + tile0 + qi;
        const int h = kvh * group + (r - qi * group);
        v = *reinterpret_cast<const uint4*>(qkv + t * a.qkv_cols + int64_t{h} * HD + c);
      }
      *reinterpret_cast<uint4*>(q_s + r * L::kLdq + c) = v;
    }
    for (int i = tid; i < kBr * HD; i += kThreads) {
      const int r = i / HD;
      o_s[r * L::kLdo + (i - r * HD)] = 0.f;
    }
    for (int r = tid; r < kBr; r += kThreads) {
      m_s[r] = -INFINITY;
      l_s[r] = 0.f;
    }
    // Whether this warp has any live row (its first row is the lowest query).
    const int w_row0 = warp * 16;
    const bool warp_live = w_row0 < used_rows && w_row0 / group < n_q;

    for (int kt = k_begin; kt < k_end; kt += kBc) {
      __syncthreads();
      for (int i = tid; i < kBc * kRowVecs; i += kThreads) {
        const int j = i / kRowVecs, c = (i - j * kRowVecs) * kVec;
        const int key = kt + j;
        uint4 kv = make_uint4(0, 0, 0, 0), vv = make_uint4(0, 0, 0, 0);
        if (key < k_end) {
          const int blk = table[key / a.block_size];
          if (blk >= 0 && blk < a.num_blocks) {
            const int64_t off =
                ((int64_t{blk} * a.kv_heads + kvh) * a.block_size + key % a.block_size) * HD + c;
            kv = *reinterpret_cast<const uint4*>(kc + off);
            vv = *reinterpret_cast<const uint4*>(vc + off);
          } else if (c == 0) {
            report(a.err, kErrBlockTable);
          }
        }
        *reinterpret_cast<uint4*>(k_s + j * L::kLdq + c) = kv;
        *reinterpret_cast<uint4*>(v_s + j * L::kLdq + c) = vv;
      }
      __syncthreads();
      if (!warp_live) continue;  // uniform over the warp; no barrier below

        // S = Q Kᵀ for the warp's 16 rows.
#pragma unroll
      for (int j = 0; j < kBc / 16; ++j) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> fb;
          wmma::load_matrix_sync(fa, q_s + w_row0 * L::kLdq + kk * 16, L::kLdq);
          wmma::load_matrix_sync(fb, k_s + (16 * j) * L::kLdq + kk * 16, L::kLdq);
          wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(s_s + w_row0 * L::kLds + 16 * j, acc, L::kLds, wmma::mem_row_major);
      }
      __syncwarp();

      // Online softmax: two lanes per row, 32 keys each.
      {
        const int r = w_row0 + (lane >> 1);
        const int c0 = (lane & 1) * 32;
        const int qi = r / group;
        const bool live = r < used_rows && qi < n_q;
        const int qidx = first_idx + qi;
        const int h = kvh * group + (r - qi * group);
        float* srow = s_s + r * L::kLds + c0;
        float mx = -INFINITY;
        for (int c = 0; c < 32; ++c) {
          const int key = kt + c0 + c;
          const bool valid = live && key < k_end && key <= qidx &&
                             (a.sliding_window <= 0 || key > qidx - a.sliding_window);
          float v = -INFINITY;
          if (valid) {
            v = srow[c] * a.scale;
            if (a.softcap > 0.f) v = a.softcap * tanhf(v / a.softcap);
            if (a.alibi_slopes != nullptr) {
              float b = a.alibi_slopes[h] * static_cast<float>(key);
              if (a.alibi_bias_bf16) b = round_to<bf16_t>(b);
              v += a.alibi_scale * b;
            }
          }
          srow[c] = v;
          mx = fmaxf(mx, v);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        const float m_old = m_s[r];
        const float m_new = fmaxf(m_old, mx);
        float alpha = 1.f;
        if (m_new != -INFINITY) alpha = m_old == -INFINITY ? 0.f : __expf(m_old - m_new);
        T* prow = p_s + r * L::kLdp + c0;
        float sum = 0.f;
        for (int c = 0; c < 32; ++c) {
          const float v = srow[c];
          const float p = (v == -INFINITY) ? 0.f : round_to<T>(__expf(v - m_new));
          prow[c] = from_f<T>(p);
          sum += p;
        }
        sum += __shfl_xor_sync(0xffffffffu, sum, 1);
        __syncwarp();
        if ((lane & 1) == 0) {
          m_s[r] = m_new;
          l_s[r] = l_s[r] * alpha + sum;
          al_s[r] = alpha;
        }
        __syncwarp();
      }

      // O = O * alpha + P V, one 16-wide column tile at a time.
      float* pv = pv_s + warp * 256;
#pragma unroll 1
      for (int dj = 0; dj < HD / 16; ++dj) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.f);
#pragma unroll
        for (int kk = 0; kk < kBc / 16; ++kk) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> fa;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, p_s + w_row0 * L::kLdp + kk * 16, L::kLdp);
          wmma::load_matrix_sync(fb, v_s + (16 * kk) * L::kLdq + dj * 16, L::kLdq);
          wmma::mma_sync(acc, fa, fb, acc);
        }
        wmma::store_matrix_sync(pv, acc, 16, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < 256; e += 32) {
          const int row = w_row0 + e / 16;
          float* o = o_s + row * L::kLdo + dj * 16 + (e & 15);
          *o = *o * al_s[row] + pv[e];
        }
        __syncwarp();
      }
    }
    __syncthreads();

    T* out = static_cast<T*>(a.out);
    const int64_t out_cols = int64_t{a.heads} * HD;
    for (int i = tid; i < kBr * HD; i += kThreads) {
      const int r = i / HD, d = i - r * HD;
      const int qi = r / group;
      if (r >= used_rows || qi >= n_q) continue;
      const int64_t t = int64_t{q0} + tile0 + qi;
      const int h = kvh * group + (r - qi * group);
      const float l = l_s[r];
      out[t * out_cols + int64_t{h} * HD + d] = from_f<T>(l > 0.f ? o_s[r * L::kLdo + d] / l : 0.f);
    }
  }
}

template <typename T, int HD>
void launch_hd(const AttentionArgs& a, cudaStream_t stream) {
  using L = MmaLayout<HD>;
  auto kernel = attention_mma_kernel<T, HD>;
  allow_dynamic_smem(reinterpret_cast<const void*>(kernel), L::kBytes);
  const int group = a.heads / a.kv_heads;
  const int q_tile = kBr / group;
  const dim3 grid(ceil_div(a.max_query_len, q_tile), static_cast<unsigned>(a.kv_heads),
                  static_cast<unsigned>(a.num_seqs));
  kernel<<<grid, kThreads, L::kBytes, stream>>>(a);
  TACHYON_CUDA_LAUNCH_CHECK();
}

template <typename T>
bool launch_typed(const AttentionArgs& a, cudaStream_t stream) {
  switch (a.head_dim) {
    case 16:
      launch_hd<T, 16>(a, stream);
      return true;
    case 32:
      launch_hd<T, 32>(a, stream);
      return true;
    case 64:
      launch_hd<T, 64>(a, stream);
      return true;
    case 80:
      launch_hd<T, 80>(a, stream);
      return true;
    case 96:
      launch_hd<T, 96>(a, stream);
      return true;
    case 128:
      launch_hd<T, 128>(a, stream);
      return true;
    case 256:
      launch_hd<T, 256>(a, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace

bool attention_mma_supports(const AttentionArgs& a) {
  if (a.type != DType::kBF16 && a.type != DType::kF16) return false;
  if (a.kv_heads <= 0 || a.heads % a.kv_heads != 0 || a.heads / a.kv_heads > kBr) return false;
  if (a.num_seqs > 65535 || a.kv_heads > 65535) return false;
  switch (a.head_dim) {
    case 16:
    case 32:
    case 64:
    case 80:
    case 96:
    case 128:
    case 256:
      return true;
    default:
      return false;
  }
}

bool launch_attention_mma(const AttentionArgs& a, cudaStream_t stream) {
  if (!attention_mma_supports(a)) return false;
  if (a.tokens == 0 || a.num_seqs == 0) return true;
  if (a.type == DType::kBF16) return launch_typed<bf16_t>(a, stream);
  return launch_typed<f16_t>(a, stream);
}

}  // namespace tachyon::cuda
