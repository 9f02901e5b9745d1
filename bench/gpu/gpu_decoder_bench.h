// What the decoder benchmark (gpu_decoder_bench.cc) and its single-op timings
// (gpu_decoder_bench_ops.cc) share.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/dtype.h"
#include "model_dims.h"

namespace tachyon::decoder_bench {

using Dims = bench::ModelDims;

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct AttnShape {
  int32_t seqs, ctx;
};

// The single ops at the model's shapes: GEMMs (gemms true) and attention through every
// kernel that applies, at prefill and decode shapes.
void op_breakdown(DType dtype, const Dims& dm, bool gemms = true);

// Decode attention alone (one query per sequence, block size 16, the blocks of each
// sequence scattered over the pool), timed on the device: CUDA events around replays
// of a graph of kCalls back-to-back attention calls, call i on cache i % copies, the
// copies together over kRotateBytes so that K/V come from memory as in a real step
// (every layer has its own cache; the L2 holds 60 MB). Reports µs per call and the K/V
// bytes read per second.
void decode_attention_bench(DType dtype, const Dims& dm, std::vector<AttnShape> shapes);

}  // namespace tachyon::decoder_bench
