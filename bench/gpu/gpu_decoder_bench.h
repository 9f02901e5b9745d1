// What the decoder benchmark (gpu_decoder_bench.cc) and its single-op timings
// (gpu_decoder_bench_ops.cc) share.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/model_runner.h"
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

// Verify steps of speculative decoding at batch 1 and context ctx (chains of k drafts,
// trees of n tokens) against a one-token decode step (gpu_decoder_bench_verify.cc).
// `mark` is called before each timed step, `report(label, file)` after each figure's
// (the --trace timeline).
void verify_bench(Model& model, int32_t ctx, const std::vector<int32_t>& drafts,
                  const std::vector<int32_t>& trees, int reps, const std::function<void()>& mark,
                  const std::function<void(const std::string&, const std::string&)>& report);

}  // namespace tachyon::decoder_bench
