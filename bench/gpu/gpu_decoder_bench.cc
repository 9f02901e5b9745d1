// End-to-end step timings of the decoder on the GPU: a random Llama-shaped checkpoint
// (written through make-random's code, loaded through the public path), then
//   prefill: tokens/s for one step of S sequences x L prompt tokens;
//   decode:  step time for B sequences advancing one token each at context ~C.
// Each figure is the median of repeated steps after warm-up, timed on the host around
// LanguageModel::forward (which includes the metadata upload, every kernel and the
// logits download), i.e. what the engine sees.
//
// Decode steps of pure-decode batches run as replayed CUDA graphs (the default); each
// decode figure is also timed with graphs off, and one step's logits are compared
// between the two (the benchmark fails when they disagree). Lines starting with
// "RESULT" are for scripts (bench/gpu/llama8b.sh).
//
// The op breakdown ends with decode attention timed on the device (CUDA events around
// a recorded graph of back-to-back calls on caches that do not fit in L2); --attn-only
// runs the attention ops alone (every kernel at the prefill and decode shapes, then
// that), at the config's attention shape, without building a model (--attn-shapes
// SxC,... picks the decode shapes; TACHYON_KV_CACHE_DTYPE=fp8 an e4m3 cache).
//
// Usage: tachyon_gpu_bench [--config CONFIG.json] [--dtype bf16|f16|f32] [--quick]
//                          [--dir WORKDIR] [--prefill SxL,...] [--decode B,...]
//                          [--ctx C] [--no-ops] [--attn-only] [--profile-steps]
//                          [--keep-model] [--trace DIR] [--attn-shapes SxC,...]
//                          [--verify K,... [--tree N,...]]
// --profile-steps: only the steps profile_steps() describes (for ncu).
// --verify K,...: only the verify steps of speculative decoding at batch 1 and context
// --ctx (chains of K drafts; --tree N,...: trees of N tokens) against a decode step.
// --keep-model: keep the random checkpoint in DIR for the next run (and use one kept).
// --trace DIR: a device-clock timeline (CUPTI, kernel_trace.h) of the timed prefill and
// decode steps: a summary printed per figure, every kernel of one step in DIR.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_profiler_api.h>
#include <fmt/format.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/json.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "model/random_model.h"

#include "gpu_decoder_bench.h"
#include "kernel_trace.h"
#include "model_dims.h"

namespace tachyon::decoder_bench {
namespace {

namespace fs = std::filesystem;

// About 1.1B parameters: Llama-3.2-1B's shape with a 32000-token vocabulary.
constexpr const char* kDefaultConfig = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama",
  "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
  "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
  "max_position_embeddings": 8192, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
  "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16"
})";

constexpr int32_t kBlock = 16;

struct Seqs {
  int32_t count = 0;
  int32_t blocks_each = 0;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<int32_t> computed;
};

// One step advancing sequence s by n[s] tokens (logits for each one's last token).
ForwardBatch make_batch(const Seqs& q, const std::vector<int32_t>& n) {
  ForwardBatch b;
  b.query_start = {0};
  b.max_blocks_per_seq = q.blocks_each;
  for (int32_t s = 0; s < q.count; ++s) {
    for (int32_t i = 0; i < n[s]; ++i) {
      b.token_ids.push_back(q.tokens[s][q.computed[s] + i]);
      b.positions.push_back(q.computed[s] + i);
    }
    b.query_start.push_back(static_cast<int32_t>(b.token_ids.size()));
    b.context_lens.push_back(q.computed[s] + n[s]);
    b.logits_rows.push_back(b.query_start.back() - 1);
    for (int32_t i = 0; i < q.blocks_each; ++i) b.block_tables.push_back(s * q.blocks_each + i);
  }
  return b;
}

Seqs make_seqs(int32_t count, int32_t max_len, int32_t vocab, std::mt19937& rng) {
  Seqs q;
  q.count = count;
  q.blocks_each = (max_len + kBlock - 1) / kBlock;
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  q.tokens.resize(static_cast<size_t>(count));
  for (auto& t : q.tokens) {
    t.resize(static_cast<size_t>(max_len));
    for (auto& x : t) x = tok(rng);
  }
  q.computed.assign(static_cast<size_t>(count), 0);
  return q;
}

std::vector<int32_t> parse_ints(const std::string& s, char sep = ',') {
  std::vector<int32_t> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string::npos) j = s.size();
    v.push_back(std::stoi(s.substr(i, j - i)));
    i = j + 1;
  }
  return v;
}

// For a profiler started with --profile-from-start off (ncu): after warm-up, one
// prefill step of 1 x prompt tokens, then one decode step at batch 1 and one at batch 64
// at context ctx, between cudaProfilerStart and cudaProfilerStop.
void profile_steps(Model& model, int32_t prompt, int32_t ctx, std::mt19937& rng) {
  const int32_t vocab = model.vocab_size();
  const int32_t len = std::max(prompt, ctx) + 8;
  Seqs p = make_seqs(1, len, vocab, rng);
  Seqs d1 = make_seqs(1, len, vocab, rng);
  Seqs d64 = make_seqs(64, len, vocab, rng);
  const int32_t each = p.blocks_each;
  model.init_kv_cache(66 * each, kBlock);
  auto place = [&](ForwardBatch& b, int32_t first_seq) {
    for (int32_t s = 0; s < b.num_seqs(); ++s)
      for (int32_t i = 0; i < each; ++i) b.block_tables[s * each + i] = (first_seq + s) * each + i;
  };
  auto prefill = [&](Seqs& q, int32_t first_seq, int32_t n) {
    std::fill(q.computed.begin(), q.computed.end(), 0);
    ForwardBatch b = make_batch(q, std::vector<int32_t>(static_cast<size_t>(q.count), n));
    place(b, first_seq);
    model.forward(b);
    std::fill(q.computed.begin(), q.computed.end(), n);
  };
  auto decode = [&](Seqs& q, int32_t first_seq) {
    ForwardBatch b = make_batch(q, std::vector<int32_t>(static_cast<size_t>(q.count), 1));
    place(b, first_seq);
    model.forward(b);
  };
  for (int r = 0; r < 2; ++r) prefill(p, 0, prompt);
  prefill(d1, 1, ctx);
  for (int32_t s0 = 0; s0 < 64; s0 += 8) {
    Seqs sub;
    sub.count = 8;
    sub.blocks_each = each;
    for (int32_t s = s0; s < s0 + 8; ++s) {
      sub.tokens.push_back(d64.tokens[s]);
      sub.computed.push_back(0);
    }
    prefill(sub, 2 + s0, ctx);
  }
  std::fill(d64.computed.begin(), d64.computed.end(), ctx);
  for (int r = 0; r < 3; ++r) {  // warm-up: eager, recording, replay
    decode(d1, 1);
    decode(d64, 2);
  }
  model.backend().synchronize();
  cudaProfilerStart();
  prefill(p, 0, prompt);
  decode(d1, 1);
  decode(d64, 2);
  model.backend().synchronize();
  cudaProfilerStop();
  std::printf("profiled: prefill 1 x %d, decode batch 1 and 64 at context %d\n", prompt, ctx);
}

// One decode step's logits for every sequence of q (no advance).
Tensor decode_logits(Model& model, const Seqs& q) {
  return model.forward(make_batch(q, std::vector<int32_t>(static_cast<size_t>(q.count), 1)));
}

int run(int argc, char** argv) {
  std::string config_path, dir = (fs::temp_directory_path() / "tachyon_gpu_bench").string();
  std::string dtype_name_s = "bf16", prefill_s, decode_s, trace_dir, verify_s, tree_s;
  bool quick = false, ops = true, attn_only = false, profile = false, keep = false;
  std::vector<AttnShape> attn_shapes;
  int32_t decode_ctx = 512;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--config" && i + 1 < argc)
      config_path = argv[++i];
    else if (a == "--dtype" && i + 1 < argc)
      dtype_name_s = argv[++i];
    else if (a == "--dir" && i + 1 < argc)
      dir = argv[++i];
    else if (a == "--prefill" && i + 1 < argc)
      prefill_s = argv[++i];
    else if (a == "--decode" && i + 1 < argc)
      decode_s = argv[++i];
    else if (a == "--ctx" && i + 1 < argc)
      decode_ctx = std::stoi(argv[++i]);
    else if (a == "--verify" && i + 1 < argc)
      verify_s = argv[++i];
    else if (a == "--tree" && i + 1 < argc)
      tree_s = argv[++i];
    else if (a == "--quick")
      quick = true;
    else if (a == "--no-ops")
      ops = false;
    else if (a == "--attn-only")
      attn_only = true;
    else if (a == "--attn-shapes" && i + 1 < argc) {
      std::string v = argv[++i];
      std::replace(v.begin(), v.end(), ',', 'x');
      const std::vector<int32_t> n = parse_ints(v, 'x');
      if (n.size() % 2 != 0) raise<InvalidArgument>("--attn-shapes: expected SxC,...");
      for (size_t k = 0; k < n.size(); k += 2) attn_shapes.push_back({n[k], n[k + 1]});
    } else if (a == "--profile-steps")
      profile = true;
    else if (a == "--keep-model")
      keep = true;
    else if (a == "--trace" && i + 1 < argc)
      trace_dir = argv[++i];
    else
      raise<InvalidArgument>("unknown argument '{}'", a);
  }
  const auto dtype = parse_dtype(dtype_name_s);
  if (!dtype) raise<InvalidArgument>("--dtype: unknown dtype '{}'", dtype_name_s);
  fs::create_directories(dir);
  // The timeline: recording starts before any graph is recorded; a window of timed
  // steps is read back per figure.
  const bool trace = !trace_dir.empty();
  // Host timestamps at the start of each timed step (then one at the end): the steps'
  // bounds in the trace.
  std::vector<uint64_t> trace_bounds;
  auto trace_mark = [&] {
    if (trace) trace_bounds.push_back(bench::KernelTrace::now());
  };
  auto trace_report = [&](const std::string& label, const std::string& file) {
    if (trace && !trace_bounds.empty()) {
      TACHYON_CUDA_CHECK(cudaDeviceSynchronize());
      trace_mark();
      // between() flushes CUPTI's buffers, so it goes first.
      const auto records = bench::KernelTrace::between(trace_bounds.front(), trace_bounds.back());
      const auto calls =
          bench::KernelTrace::calls_between(trace_bounds.front(), trace_bounds.back());
      bench::print_step_timeline(records, trace_bounds, label, trace_dir + "/" + file, calls);
    }
    trace_bounds.clear();
  };
  if (trace) {
    if (!bench::KernelTrace::kAvailable) raise<InvalidArgument>("--trace: this build has no CUPTI");
    fs::create_directories(trace_dir);
    bench::KernelTrace::start();
  }
  if (config_path.empty()) {
    config_path = dir + "/bench_config.json";
    std::ofstream(config_path) << kDefaultConfig;
  }
  const Dims dims = bench::model_dims(load_json_file(config_path));
  if (attn_only) {
    op_breakdown(*dtype, dims, /*gemms=*/false);
    decode_attention_bench(*dtype, dims, attn_shapes);
    return 0;
  }
  const std::string model_dir = dir + "/model";
  double t0 = now_s();
  RandomModelOptions ro;
  ro.dtype = DType::kBF16;
  uint64_t params = 0;
  const std::string params_file = model_dir + "/params.txt";
  if (keep && fs::exists(params_file)) {
    std::ifstream(params_file) >> params;  // written by an earlier --keep-model run
    std::printf("random checkpoint: %.3f B parameters, kept from an earlier run\n", params / 1e9);
  } else {
    params = write_random_model(config_path, model_dir, ro);
    if (keep) std::ofstream(params_file) << params;
    std::printf("random checkpoint: %.3f B parameters, written in %.1f s\n", params / 1e9,
                now_s() - t0);
  }
  std::printf("RESULT params %llu\n", static_cast<unsigned long long>(params));
  t0 = now_s();
  LoadOptions lo;
  lo.device = Device{DeviceType::kCUDA, 0};
  lo.dtype = *dtype;
  auto model = load_model(model_dir, lo);
  auto* decoder = dynamic_cast<ModelRunner*>(model.get());
  const auto mem = model->backend().memory_info();
  std::printf("loaded on the GPU in %.1f s (%s); device memory %.1f GiB free of %.1f GiB\n",
              now_s() - t0, dtype_name_s.c_str(), mem.free_bytes / double(1 << 30),
              mem.total_bytes / double(1 << 30));
  if (!keep) fs::remove_all(model_dir);  // loaded: the disk copy is no longer needed

  const int32_t vocab = model->vocab_size();
  std::mt19937 rng(1);
  if (profile) {
    profile_steps(*model, 1024, decode_ctx, rng);
    return 0;
  }
  const int reps = quick ? 3 : 7;
  if (!verify_s.empty()) {
    verify_bench(*model, decode_ctx, parse_ints(verify_s),
                 tree_s.empty() ? std::vector<int32_t>{} : parse_ints(tree_s), 4 * reps, trace_mark,
                 trace_report);
    return 0;
  }
  std::vector<std::pair<int32_t, int32_t>> prefills = {{1, 128}, {1, 1024}, {8, 512}, {4, 2048}};
  if (!prefill_s.empty()) {
    prefills.clear();
    size_t i = 0;
    while (i < prefill_s.size()) {
      size_t j = prefill_s.find(',', i);
      if (j == std::string::npos) j = prefill_s.size();
      const std::vector<int32_t> sl = parse_ints(prefill_s.substr(i, j - i), 'x');
      if (sl.size() != 2) raise<InvalidArgument>("--prefill: expected SxL, got '{}'", prefill_s);
      prefills.emplace_back(sl[0], sl[1]);
      i = j + 1;
    }
  }
  const std::vector<int32_t> batches = !decode_s.empty() ? parse_ints(decode_s)
                                       : quick           ? std::vector<int32_t>{1, 32}
                                                         : std::vector<int32_t>{1, 8, 32, 64, 128};
  const int32_t decode_steps = quick ? 8 : 24;
  // Enough blocks for the largest figure.
  int32_t need = 0;
  for (auto [s, l] : prefills) need = std::max(need, s * ((l + kBlock - 1) / kBlock));
  for (int32_t b : batches)
    need = std::max(need, b * ((decode_ctx + 4 * decode_steps + 16 + kBlock - 1) / kBlock));
  model->init_kv_cache(need, kBlock);

  std::printf("\n%-34s %12s %14s\n", "figure", "step ms", "tokens/s");
  for (auto [s, l] : prefills) {
    Seqs q = make_seqs(s, l, vocab, rng);
    std::vector<double> times;
    for (int r = 0; r < reps + 2; ++r) {
      std::fill(q.computed.begin(), q.computed.end(), 0);
      ForwardBatch b = make_batch(q, std::vector<int32_t>(static_cast<size_t>(s), l));
      if (r >= 2) trace_mark();
      const double a = now_s();
      model->forward(b);
      if (r >= 2) times.push_back(now_s() - a);
    }
    trace_report(fmt::format("prefill {} x {}", s, l), fmt::format("prefill_{}x{}.txt", s, l));
    const double t = median(times);
    std::printf("prefill %3d x %-5d               %12.3f %14.0f\n", s, l, t * 1e3, s * l / t);
    std::printf("RESULT prefill_%dx%d_ms %.4f tok_s %.1f\n", s, l, t * 1e3, s * l / t);
  }
  bool agree = true;
  for (int32_t bsz : batches) {
    // Three timed modes of decode_steps steps and three check steps.
    Seqs q = make_seqs(bsz, decode_ctx + 4 * decode_steps + 16, vocab, rng);
    // Fill the context in prefill steps of at most 8192 tokens.
    for (int32_t s0 = 0; s0 < bsz;) {
      const int32_t take = std::max(1, std::min(bsz - s0, 8192 / decode_ctx));
      // A batch over the chosen sequences only, on their own blocks.
      Seqs sub;
      sub.count = take;
      sub.blocks_each = q.blocks_each;
      for (int32_t s = s0; s < s0 + take; ++s) {
        sub.tokens.push_back(q.tokens[s]);
        sub.computed.push_back(0);
      }
      ForwardBatch b = make_batch(sub, std::vector<int32_t>(static_cast<size_t>(take), decode_ctx));
      for (int32_t s = 0; s < take; ++s)
        for (int32_t i = 0; i < q.blocks_each; ++i)
          b.block_tables[s * q.blocks_each + i] = (s0 + s) * q.blocks_each + i;
      model->forward(b);
      for (int32_t s = s0; s < s0 + take; ++s) q.computed[s] = decode_ctx;
      s0 += take;
    }
    // Graphs against eager on the same step (the step's K/V rewritten identically). The
    // two differ only in summation order (the graph's attention is split for the context
    // bucket, not the exact context), so the relative L2 error of the logits stays at
    // bf16 rounding level; a stale or misplaced buffer gives errors of order 1.
    if (decoder != nullptr) {
      decoder->set_step_graphs(false);
      const Tensor eager = decode_logits(*model, q);
      decoder->set_step_graphs(true);
      decode_logits(*model, q);  // eager run + recording
      const Tensor graph = decode_logits(*model, q);
      double num = 0, den = 0;
      bool finite = true;
      for (int64_t i = 0; i < eager.numel(); ++i) {
        const double e = eager.data<float>()[i], g = graph.data<float>()[i];
        finite = finite && std::isfinite(e) && std::isfinite(g);
        num += (g - e) * (g - e);
        den += e * e;
      }
      const double rel = std::sqrt(num / std::max(den, 1e-30));
      const bool ok = finite && den > 0 && rel <= 5e-2;
      agree = agree && ok;
      std::printf("check decode batch %d: graph vs eager logits, relative error %.2e %s\n", bsz,
                  rel, ok ? "ok" : "MISMATCH");
      std::printf("RESULT check_decode_b%d_rel %.3e %s\n", bsz, rel, ok ? "ok" : "MISMATCH");
    }
    // sampled: graphs, greedy tokens chosen on the device and only their ids back (the
    // engine's step); graphs: logits of every row back to the host; eager: graphs off.
    for (int mode = 0; mode < (decoder != nullptr ? 3 : 1); ++mode) {
      const bool graphs = mode != 2;
      if (decoder != nullptr) decoder->set_step_graphs(graphs);
      std::vector<double> times;
      const std::vector<int32_t> one(static_cast<size_t>(bsz), 1);
      for (int32_t step = 0; step < decode_steps; ++step) {
        if (step >= 3) trace_mark();
        ForwardBatch b = make_batch(q, one);
        if (mode == 0) {
          RowSampling r;
          r.mode = RowSampling::Mode::kDevice;
          r.greedy = true;
          b.sampling.rows.assign(static_cast<size_t>(bsz), r);
        }
        const double a = now_s();
        if (mode == 0)
          model->forward_sample(b);
        else
          model->forward(b);
        if (step >= 3) times.push_back(now_s() - a);
        for (auto& c : q.computed) ++c;
      }
      const char* tag = mode == 0 ? "sampled" : graphs ? "graphs" : "eager";
      trace_report(fmt::format("decode batch {} ctx {} {}", bsz, decode_ctx, tag),
                   fmt::format("decode_b{}_{}.txt", bsz, tag));
      const double t = median(times);
      std::printf("decode batch %-4d ctx %-5d %-7s %12.3f %14.0f\n", bsz, decode_ctx, tag, t * 1e3,
                  bsz / t);
      std::printf("RESULT decode_b%d_ctx%d_%s_ms %.4f tok_s %.1f\n", bsz, decode_ctx, tag, t * 1e3,
                  bsz / t);
    }
  }
  if (decoder != nullptr)
    std::printf("graph replays %lld, recordings %lld\n",
                static_cast<long long>(decoder->graph_replays()),
                static_cast<long long>(decoder->graph_records()));
  model.reset();
  if (ops) {
    op_breakdown(*dtype, dims);
    decode_attention_bench(*dtype, dims, attn_shapes);
  }
  if (!agree) {
    std::fprintf(stderr, "tachyon_gpu_bench: graph and eager decode logits disagree\n");
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace tachyon::decoder_bench

int main(int argc, char** argv) {
  try {
    return tachyon::decoder_bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tachyon_gpu_bench: %s\n", e.what());
    return 1;
  }
}
