// The whole model on the CPU through the real path: a checkpoint folder loaded as
// load_model does it (config mapping, memory-mapped checkpoint, weight mapping, the
// unified decoder on the CPU backend), then ModelRunner::forward timed for a prefill of
// --prompt tokens and for single-token decode steps after it.
//
// Decode steps are timed alternately with a plain prefetching read of as many bytes as
// a decode step's weights (every matrix of every layer and the lm_head; not the
// embedding table unless it is tied to the lm_head), so that the bandwidth bound is
// measured in the same window. Prefill is held to the FMA peak of 2 threads (the GEMM
// FLOPs of the step, attention excluded, at the measured peak).
//
// --profile wraps the backend in a timer per op (one extra clock read per op call) and
// prints where a decode step and a prefill spend their time.
//
// --batch B decodes B sequences (each with its own copy of the prompt) in every step.
//
//   cpu_model_bench --model DIR [--prompt 512] [--decode 32] [--reps 3] [--batch 1]
//                   [--threads N] [--quantization none|int8|int4|fp8] [--profile]
#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <string>

#include "backend/cpu/qgemm.h"
#include "bench_kernels.h"
#include "bench_util.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/hf_config.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "model/registry.h"
#include "model/weights.h"

namespace tachyon {
namespace {

using bench::Clock;
using bench::seconds_since;

// Forwards every op to the CPU backend and adds its wall time to a per-op total.
class ProfilingBackend : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> b) : b_(std::move(b)) {}
  using Totals = std::map<std::string, std::pair<double, int64_t>>;  // op -> (seconds, calls)
  Totals* totals = nullptr;  // where op times go; none while null

  template <typename F>
  auto timed(const char* op, F&& f) {
    const auto t0 = Clock::now();
    struct Add {
      ProfilingBackend* self;
      const char* op;
      Clock::time_point t0;
      ~Add() {
        if (self->totals == nullptr) return;
        auto& e = (*self->totals)[op];
        e.first += seconds_since(t0);
        e.second += 1;
      }
    } add{this, op, t0};
    return f();
  }

  Device device() const override { return b_->device(); }
  const char* name() const override { return b_->name(); }
  DType activation_dtype() const override { return b_->activation_dtype(); }
  DType kv_dtype() const override { return b_->kv_dtype(); }
  Tensor prepare_weight(const Tensor& h) override { return b_->prepare_weight(h); }
  Tensor prepare_linear_weight(const Tensor& h) override { return b_->prepare_linear_weight(h); }
  bool repacks_linear_weights() const override { return b_->repacks_linear_weights(); }
  Tensor alloc(const Shape& s, DType d) override { return b_->alloc(s, d); }
  Tensor upload(const void* p, const Shape& s, DType d, Tensor r) override {
    return timed("upload", [&] { return b_->upload(p, s, d, std::move(r)); });
  }
  void download(const Tensor& s, void* d) override { b_->download(s, d); }
  void fill_zero(Tensor& t) override { b_->fill_zero(t); }
  void embedding(const Tensor& t, const Tensor& i, int32_t o, float s, bool a,
                 Tensor& out) override {
    timed("embedding", [&] { b_->embedding(t, i, o, s, a, out); });
  }
  void add_norm(Tensor& r, const Tensor& d1, const Tensor& d2, const NormParams& n,
                Tensor& o) override {
    timed("add_norm", [&] { b_->add_norm(r, d1, d2, n, o); });
  }
  void qk_norm(Tensor& q, const QkvLayout& l, const NormParams& a, const NormParams& b) override {
    timed("qk_norm", [&] { b_->qk_norm(q, l, a, b); });
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& o, int64_t c,
              Activation a) override {
    // The lm_head (the widest matrix) separately from the layers' products.
    timed(w.dim(0) >= 16384 ? "linear (lm_head)" : "linear (layers)",
          [&] { b_->linear(x, w, b, o, c, a); });
  }
  void lora(const Tensor& x, const LoraStep& s, const LoraTarget& t, Tensor& o,
            int64_t c) override {
    timed("lora", [&] { b_->lora(x, s, t, o, c); });
  }
  void gated_activation(const Tensor& i, Activation a, Tensor& o) override {
    timed("gated_activation", [&] { b_->gated_activation(i, a, o); });
  }
  void activation(Tensor& x, Activation a) override {
    timed("activation", [&] { b_->activation(x, a); });
  }
  void add(const Tensor& a, const Tensor& b, Tensor& o) override {
    timed("add", [&] { b_->add(a, b, o); });
  }
  void scale_add(const Tensor& a, float s, const Tensor& b, Tensor& o) override {
    timed("scale_add", [&] { b_->scale_add(a, s, b, o); });
  }
  void softcap(Tensor& x, float c) override {
    timed("softcap", [&] { b_->softcap(x, c); });
  }
  void clamp(Tensor& x, float l) override {
    timed("clamp", [&] { b_->clamp(x, l); });
  }
  void gather_rows(const Tensor& s, const Tensor& r, Tensor& o) override {
    timed("gather_rows", [&] { b_->gather_rows(s, r, o); });
  }
  void scatter_rows(const Tensor& s, const Tensor& r, Tensor& o) override {
    timed("scatter_rows", [&] { b_->scatter_rows(s, r, o); });
  }
  void scatter_ids(const Tensor& s, const Tensor& p, Tensor& ids) override {
    timed("scatter_ids", [&] { b_->scatter_ids(s, p, ids); });
  }
  void add_sigmoid_gated(const Tensor& s, const Tensor& g, Tensor& o) override {
    timed("add_sigmoid_gated", [&] { b_->add_sigmoid_gated(s, g, o); });
  }
  void rotary(Tensor& q, const QkvLayout& l, const Tensor& cs, RotaryStyle s, int32_t d) override {
    timed("rotary", [&] { b_->rotary(q, l, cs, s, d); });
  }
  void write_kv(const Tensor& q, const QkvLayout& l, const Tensor& s, LayerKvCache& c) override {
    timed("write_kv", [&] { b_->write_kv(q, l, s, c); });
  }
  void attention(const Tensor& q, const QkvLayout& l, const LayerKvCache& c, const AttentionMeta& m,
                 const AttentionParams& p, Tensor& o) override {
    timed("attention", [&] { b_->attention(q, l, c, m, p, o); });
  }
  void copy_blocks(Tensor& c, const std::vector<std::pair<int32_t, int32_t>>& p) override {
    b_->copy_blocks(c, p);
  }
  Tensor alloc_swap(const Shape& s, DType d) override { return b_->alloc_swap(s, d); }
  void copy_blocks_between(const Tensor& f, Tensor& t,
                           const std::vector<std::pair<int32_t, int32_t>>& p) override {
    b_->copy_blocks_between(f, t, p);
  }
  void moe_route(const Tensor& l, int32_t k, bool r, Tensor& i, Tensor& w) override {
    timed("moe_route", [&] { b_->moe_route(l, k, r, i, w); });
  }
  void moe_experts(const Tensor& x, const Tensor& i, const Tensor& w,
                   const std::vector<MoeExpertWeights>& e, Activation a, bool acc,
                   Tensor& o) override {
    timed("moe_experts", [&] { b_->moe_experts(x, i, w, e, a, acc, o); });
  }
  void argmax(const Tensor& l, Tensor& i) override { b_->argmax(l, i); }
  void log_softmax(Tensor& l) override { b_->log_softmax(l); }

 private:
  std::unique_ptr<Backend> b_;
};

// Bytes of every weight matrix a decode step reads.
int64_t decode_weight_bytes(const ModelWeights& w) {
  int64_t bytes = 0;
  auto add = [&](const Tensor& t) {
    if (const cpu::QPackedWeight* q = cpu::packed_quantized(t))
      bytes += q->panels() * q->panel_bytes;  // a quantized view's nbytes() is not its size
    else if (t && t.ndim() == 2)
      bytes += static_cast<int64_t>(t.nbytes());
  };
  for (const LayerWeights& L : w.layers) {
    for (const LinearWeights* l :
         {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down, &L.router,
          &L.shared_gate, &L.shared_up, &L.shared_down, &L.shared_expert_gate})
      add(l->w);
  }
  add(w.lm_head.w);
  add(w.project_in.w);
  add(w.project_out.w);
  return bytes;
}

// 2 x the parameters of the step's products, per token (the lm_head for one row only).
double prefill_gemm_flops(const ModelWeights& w, int64_t tokens) {
  double per_token = 0;
  for (const LayerWeights& L : w.layers)
    for (const LinearWeights* l :
         {&L.qkv, &L.q, &L.k, &L.v, &L.o, &L.gate_up, &L.gate, &L.up, &L.down})
      if (l->w) per_token += 2.0 * static_cast<double>(l->w.numel());
  return per_token * static_cast<double>(tokens) + 2.0 * static_cast<double>(w.lm_head.w.numel());
}

struct Options {
  std::string model;
  int prompt = 512;
  int decode = 32;
  int reps = 3;
  int batch = 1;  // sequences in each decode step
  bool profile = false;
  std::string kv_dtype = "auto";      // the KV cache's element type (--kv-cache-dtype)
  std::string quantization = "none";  // at load (--quantization none|int8|int4|fp8)
};

ForwardBatch make_batch(const std::vector<int32_t>& ids, int32_t start, int32_t count,
                        const std::vector<int32_t>& blocks) {
  ForwardBatch b;
  b.token_ids.assign(ids.begin() + start, ids.begin() + start + count);
  for (int32_t i = 0; i < count; ++i) b.positions.push_back(start + i);
  b.query_start = {0, count};
  b.context_lens = {start + count};
  b.block_tables = blocks;
  b.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
  b.prompt_lens = {start == 0 ? count : start};
  b.logits_rows = {count - 1};
  return b;
}

void print_profile(ProfilingBackend::Totals& totals, double steps, double step_s,
                   const char* what) {
  double sum = 0;
  for (const auto& [op, v] : totals) sum += v.first;
  std::printf("  %s, per step (%.0f steps, %.3f ms a step; ops sum to %.3f ms):\n", what, steps,
              1e3 * step_s, 1e3 * sum / steps);
  std::vector<std::pair<double, std::string>> rows;
  for (const auto& [op, v] : totals) rows.push_back({v.first, op});
  std::sort(rows.rbegin(), rows.rend());
  for (const auto& [s, op] : rows)
    std::printf("    %-18s %9.3f ms  %5.1f%%  (%lld calls a step)\n", op.c_str(), 1e3 * s / steps,
                100 * s / steps / step_s,
                static_cast<long long>(totals[op].second / static_cast<int64_t>(steps)));
  std::printf("    %-18s %9.3f ms  %5.1f%%\n", "(outside ops)", 1e3 * (step_s - sum / steps),
              100 * (1 - sum / steps / step_s));
}

int run(const Options& opt) {
  const auto t_load = Clock::now();
  const HfConfig hf = HfConfig::load(opt.model + "/config.json");
  const ArchSpec& spec = find_arch(hf, "");
  ModelConfig mc = map_model_config(hf, "", opt.model + "/generation_config.json");
  std::unique_ptr<Checkpoint> ckpt = Checkpoint::open(opt.model);
  ModelWeights weights = load_weights(*ckpt, mc, spec.map_weights(mc));
  if (auto q = parse_load_quantization(opt.quantization)) {
    const auto t_q = Clock::now();
    quantize_at_load(weights, *q, ThreadPool::global());
    std::printf("quantized to %s in %.2f s\n", load_quantization_name(*q), seconds_since(t_q));
  }
  const DType kv = parse_kv_cache_dtype(opt.kv_dtype).value_or(DType::kF32);
  auto prof = std::make_unique<ProfilingBackend>(make_cpu_backend(kv));
  ProfilingBackend* pb = prof.get();
  std::unique_ptr<Backend> backend;
  if (opt.profile)
    backend = std::move(prof);
  else
    backend = make_cpu_backend(kv);
  ModelRunner model(mc, std::move(weights), std::move(backend));
  const int64_t wbytes = decode_weight_bytes(model.weights());
  const double flops = prefill_gemm_flops(model.weights(), opt.prompt);
  std::printf(
      "%s: %s, %d layers, hidden %lld, vocab %lld, %lld parameters; decode reads %.1f MB of "
      "weights; %d threads; loaded in %.2f s\n",
      opt.model.c_str(), mc.architecture.c_str(), mc.layer_num,
      static_cast<long long>(mc.hidden_size), static_cast<long long>(mc.vocab_size),
      static_cast<long long>(model.weights().total_params), wbytes / 1e6,
      ThreadPool::global().num_threads(), seconds_since(t_load));

  const int32_t bs = 16;
  std::printf("KV cache %s: %zu bytes a block of %d tokens\n", std::string(dtype_name(kv)).c_str(),
              model.kv_bytes_per_block(bs), bs);
  const int32_t total = opt.prompt + opt.decode;
  const int32_t nblocks = (total + bs - 1) / bs;  // per sequence
  // A cache of at least 256 blocks, as an engine would size it (the backend may put
  // large buffers in 2 MiB pages).
  model.init_kv_cache(std::max(nblocks * opt.batch, 256), bs);
  std::vector<std::vector<int32_t>> seq_blocks(static_cast<size_t>(opt.batch));
  for (int32_t s = 0; s < opt.batch; ++s)
    for (int32_t i = 0; i < nblocks; ++i) seq_blocks[s].push_back(s * nblocks + i);
  const std::vector<int32_t>& blocks = seq_blocks[0];
  std::mt19937 rng(7);
  std::vector<int32_t> ids(static_cast<size_t>(total));
  for (auto& t : ids)
    t = 16 + static_cast<int32_t>(rng() % static_cast<uint32_t>(mc.vocab_size - 16));

  // A plain read of a decode step's weight bytes.
  const size_t nfloat = static_cast<size_t>(wbytes / 4);
  auto buf = bench::aligned_array<float>(nfloat);
  for (size_t i = 0; i < nfloat; i += 1024) std::memset(buf.get() + i, 0, 4096);
  std::memset(buf.get(), 0, nfloat * 4);
  volatile float sink = 0;
  // Split over the pool's threads as the products are (4 pieces a thread).
  ThreadPool& pool = ThreadPool::global();
  const int64_t pieces = pool.num_threads() * 4;
  const size_t per = nfloat / static_cast<size_t>(pieces) / 64 * 64;
  auto read = [&] {
    pool.run(pieces, [&](int64_t t) {
      sink = sink + bench::read_sum(buf.get() + static_cast<size_t>(t) * per, per);
    });
  };

  const ForwardBatch prefill = make_batch(ids, 0, opt.prompt, blocks);
  std::vector<double> t_prefill, t_decode, t_read, ratio;
  ProfilingBackend::Totals prof_prefill, prof_decode;
  auto profile_into = [&](ProfilingBackend::Totals* t) { pb->totals = opt.profile ? t : nullptr; };
  model.forward(prefill);  // warm-up (touches the mapped weights, grows the buffers)
  // With --batch, the other sequences' prompts too (same tokens, their own blocks).
  for (int32_t s = 1; s < opt.batch; ++s)
    model.forward(make_batch(ids, 0, opt.prompt, seq_blocks[s]));
  // A decode step of every sequence at position `pos`.
  auto decode_step = [&](int32_t pos) {
    if (opt.batch == 1) return make_batch(ids, pos, 1, blocks);
    ForwardBatch b;
    b.query_start = {0};
    b.max_blocks_per_seq = nblocks;
    for (int32_t s = 0; s < opt.batch; ++s) {
      b.token_ids.push_back(ids[pos]);
      b.positions.push_back(pos);
      b.query_start.push_back(s + 1);
      b.context_lens.push_back(pos + 1);
      b.block_tables.insert(b.block_tables.end(), seq_blocks[s].begin(), seq_blocks[s].end());
      b.prompt_lens.push_back(opt.prompt);
      b.logits_rows.push_back(s);
    }
    return b;
  };
  for (int rep = 0; rep < opt.reps; ++rep) {
    profile_into(&prof_prefill);
    auto t0 = Clock::now();
    model.forward(prefill);
    t_prefill.push_back(seconds_since(t0));
    for (int32_t d = 0; d < opt.decode; ++d) {
      const ForwardBatch step = decode_step(opt.prompt + d);
      profile_into(&prof_decode);
      t0 = Clock::now();
      model.forward(step);
      t_decode.push_back(seconds_since(t0));
      profile_into(nullptr);
      t0 = Clock::now();
      read();
      t_read.push_back(seconds_since(t0));
      ratio.push_back(t_read.back() / t_decode.back());
    }
  }
  if (opt.profile) {
    // Means per step (the op totals are sums), next to the mean step time.
    auto mean = [](const std::vector<double>& v) {
      double s = 0;
      for (double x : v) s += x;
      return s / static_cast<double>(v.size());
    };
    print_profile(prof_prefill, opt.reps, mean(t_prefill), "prefill");
    print_profile(prof_decode, static_cast<double>(t_decode.size()), mean(t_decode), "decode");
  }
  auto p10 = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 10];
  };
  const double pm = bench::median(t_prefill), pp = p10(t_prefill);
  const double dm = bench::median(t_decode), dp = p10(t_decode);
  const double rm = bench::median(t_read), rp = p10(t_read);
  const double peak = 390e9;  // f32 FMA peak of 2 threads (cpu_machine_bench)
  std::printf(
      "prefill %d tokens: median %.1f ms -> %.1f tok/s | p10 %.1f ms -> %.1f tok/s | "
      "GEMMs %.1f GFLOP -> %.0f GFLOP/s (median); bound at %.0f GFLOP/s: %.0f tok/s\n",
      opt.prompt, 1e3 * pm, opt.prompt / pm, 1e3 * pp, opt.prompt / pp, flops / 1e9,
      flops / pm / 1e9, peak / 1e9, opt.prompt / (flops / peak));
  std::printf(
      "decode (context %d..%d): median %.2f ms -> %.1f tok/s (%.1f GB/s) | p10 %.2f ms -> "
      "%.1f tok/s\n",
      opt.prompt + 1, total, 1e3 * dm, 1 / dm, wbytes / dm / 1e9, 1e3 * dp, 1 / dp);
  std::printf(
      "read of %.1f MB, alternately: median %.2f ms (%.1f GB/s) -> bound %.1f tok/s | p10 "
      "%.2f ms -> %.1f tok/s; decode at %.0f%% of the bound (median of pairs)\n",
      wbytes / 1e6, 1e3 * rm, wbytes / rm / 1e9, 1 / rm, 1e3 * rp, 1 / rp,
      100 * bench::median(ratio));
  return 0;
}

}  // namespace
}  // namespace tachyon

int main(int argc, char** argv) {
  tachyon::Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--model")
      opt.model = next();
    else if (a == "--prompt")
      opt.prompt = std::stoi(next());
    else if (a == "--decode")
      opt.decode = std::stoi(next());
    else if (a == "--reps")
      opt.reps = std::stoi(next());
    else if (a == "--threads")
      tachyon::ThreadPool::set_global_threads(std::stoi(next()));
    else if (a == "--batch")
      opt.batch = std::stoi(next());
    else if (a == "--profile")
      opt.profile = true;
    else if (a == "--kv-cache-dtype")
      opt.kv_dtype = next();
    else if (a == "--quantization")
      opt.quantization = next();
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  if (opt.model.empty() || opt.prompt < 1 || opt.decode < 1 || opt.reps < 1 || opt.batch < 1) {
    std::fprintf(stderr,
                 "usage: cpu_model_bench --model DIR [--prompt 512] [--decode 32] [--reps 3] "
                 "[--batch 1] [--threads N] [--kv-cache-dtype auto|bf16|int8] "
                 "[--quantization none|int8|int4|fp8] [--profile]\n");
    return 2;
  }
  try {
    return tachyon::run(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
