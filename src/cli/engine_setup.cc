#include "cli/engine_setup.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/logging.h"
#include "model/loader.h"

namespace tachyon::cli {

std::set<std::string> engine_flags() {
  return {"kv-cache-mb",  "max-num-seqs", "max-batch-tokens",    "block-size",     "model-type",
          "device",       "dtype",        "gpu-memory-fraction", "kv-cache-dtype", "swap-space",
          "overlap-steps"};
}

LoadOptions load_options(const Args& args) {
  LoadOptions opts;
  opts.model_type = args.get_or("model-type", "");
  if (args.has("device")) opts.device = parse_device(args.require("device"));
  if (args.has("dtype")) opts.dtype = parse_compute_dtype(args.require("dtype"));
  if (args.has("kv-cache-dtype"))
    opts.kv_cache_dtype = parse_kv_cache_dtype(args.require("kv-cache-dtype"));
  return opts;
}

int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

EngineBundle open_engine(const std::string& model_dir, const Args& args, int32_t expected_seqs) {
  EngineBundle b;
  const auto t0 = std::chrono::steady_clock::now();
  const LoadOptions opts = load_options(args);
  b.model = load_model(model_dir, opts);
  try {
    b.tokenizer = Tokenizer::load(model_dir);
  } catch (const NotFound& e) {
    log_warning("no tokenizer in {}: token ids only ({})", model_dir, e.what());
  }
  b.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  EngineConfig c;
  c.max_num_seqs = static_cast<int32_t>(args.get_int("max-num-seqs", 128));
  c.max_num_batched_tokens = static_cast<int32_t>(args.get_int("max-batch-tokens", 512));
  c.block_size = static_cast<int32_t>(args.get_int("block-size", 16));
  if (c.max_num_seqs < 1 || c.max_num_seqs > 65536)
    raise<InvalidArgument>("--max-num-seqs {} must be in [1, 65536]", c.max_num_seqs);
  if (c.max_num_batched_tokens < c.max_num_seqs || c.max_num_batched_tokens > (1 << 20))
    raise<InvalidArgument>("--max-batch-tokens {} must be in [max-num-seqs, 1048576]",
                           c.max_num_batched_tokens);
  if (c.block_size < 1 || c.block_size > 1024)
    raise<InvalidArgument>("--block-size {} must be in [1, 1024]", c.block_size);
  for (int64_t id : b.model->config().eos_token_ids)
    c.eos_token_ids.push_back(static_cast<int32_t>(id));
  if (args.has("kv-cache-mb")) {
    const double mb = args.get_double("kv-cache-mb", 0);
    if (!(mb > 0 && mb < 1e9)) raise<InvalidArgument>("--kv-cache-mb {} must be > 0", mb);
    c.kv_cache_bytes = static_cast<int64_t>(mb * 1024 * 1024);
  } else if (!b.model->backend().device().is_cpu()) {
    const double fraction = args.get_double("gpu-memory-fraction", 0.9);
    if (!(fraction > 0 && fraction <= 1))
      raise<InvalidArgument>("--gpu-memory-fraction {} must be in (0, 1]", fraction);
    c.kv_cache_bytes = kv_cache_budget_bytes(*b.model, fraction, c.max_num_batched_tokens);
  } else {
    // A fifth of free memory, but no more than every sequence at full length needs.
    const int64_t per_block = static_cast<int64_t>(b.model->kv_bytes_per_block(c.block_size));
    const int64_t blocks_full = static_cast<int64_t>(c.max_num_seqs) *
                                ((b.model->max_seq_len() + c.block_size - 1) / c.block_size);
    int64_t budget = host_memory_available() / 5;
    if (budget <= 0) budget = int64_t{1} << 30;
    c.kv_cache_bytes = std::min(budget, blocks_full * per_block);
  }
  const double swap_gib = args.get_double("swap-space", -1);
  if (args.has("swap-space") && !(swap_gib >= 0))
    raise<InvalidArgument>("--swap-space {} must be >= 0 GiB", swap_gib);
  c.swap_space_bytes = swap_space_bytes(swap_gib, b.model->backend().device().is_cpu());
  const std::string overlap = args.get_or("overlap-steps", "on");
  if (overlap != "on" && overlap != "off")
    raise<InvalidArgument>("--overlap-steps '{}' must be on or off", overlap);
  c.overlap_steps = overlap == "on";
  std::shared_ptr<const TextTokenizer> text;
  if (b.tokenizer) text = make_text_tokenizer(b.tokenizer, c.eos_token_ids);
  b.engine = std::make_unique<TextEngine>(b.model, text, c);
  return b;
}

std::vector<int32_t> prompt_from_json(const Json& line, const Tokenizer* tokenizer) {
  if (!line.is_object()) raise<InvalidArgument>("expected a JSON object");
  const bool has_text = line.contains("prompt"), has_ids = line.contains("prompt_ids");
  if (has_text == has_ids)
    raise<InvalidArgument>("give exactly one of \"prompt\" and \"prompt_ids\"");
  if (has_text) {
    if (!line["prompt"].is_string()) raise<InvalidArgument>("\"prompt\" must be a string");
    if (!tokenizer) raise<InvalidArgument>("\"prompt\" needs a tokenizer; give \"prompt_ids\"");
    return tokenizer->encode(line["prompt"].get<std::string>(), /*add_special_tokens=*/true);
  }
  const Json& ids = line["prompt_ids"];
  if (!ids.is_array()) raise<InvalidArgument>("\"prompt_ids\" must be an array of token ids");
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const Json& x : ids) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      raise<InvalidArgument>("\"prompt_ids\" must be an array of token ids");
    out.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return out;
}

namespace {

Json sequence_json(const SequenceOutput& s, bool with_logprobs) {
  Json j;
  j["output_ids"] = s.output_ids;
  j["text"] = s.text;
  j["finish_reason"] = std::string(finish_reason_name(s.finish_reason));
  if (with_logprobs) {
    j["logprobs"] = s.logprobs;
    Json top = Json::array();
    for (const auto& alts : s.top_logprobs) {
      Json a = Json::array();
      for (const auto& t : alts) a.push_back({{"token", t.token}, {"logprob", t.logprob}});
      top.push_back(a);
    }
    j["top_logprobs"] = top;
  }
  return j;
}

}  // namespace

Json result_json(const GenerateResult& r) {
  Json j;
  bool logprobs = false;
  for (const auto& s : r.sequences) logprobs |= !s.logprobs.empty();
  if (!r.sequences.empty()) j = sequence_json(r.sequences[0], logprobs);
  if (r.sequences.size() > 1) {
    Json all = Json::array();
    for (const auto& s : r.sequences) all.push_back(sequence_json(s, logprobs));
    j["outputs"] = all;
  }
  if (r.error) {
    j["error"] = r.error->message;
    j["error_code"] = std::string(error_code_name(r.error->code));
  }
  // Summed log-probabilities exist with return_logprobs (and for beams).
  Json cum = Json::array();
  bool have_cum = logprobs;
  for (const auto& s : r.sequences) {
    cum.push_back(s.cum_log_prob);
    have_cum |= s.cum_log_prob != 0.0;
  }
  const RequestTimings& t = r.timings;
  j["aux_info"] = {{"cost_time", t.total_ms},          {"first_token_cost_time", t.first_token_ms},
                   {"queue_time", t.queue_ms},         {"iter_count", t.iter_count},
                   {"input_len", t.input_len},         {"output_len", t.output_len},
                   {"prefix_len", t.prefix_len},       {"reuse_len", t.reuse_len},
                   {"preemptions", t.num_preemptions}, {"cum_log_probs", cum}};
  return j;
}

}  // namespace tachyon::cli
