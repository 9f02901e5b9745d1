#include "cli/engine_setup.h"

#include "grammar/json_schema.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "cli/draft_setup.h"
#include "cli/speculative_options.h"
#include "core/error.h"
#include "core/logging.h"
#include "core/mmap.h"
#include "engine/kv_sizing.h"
#include "grammar/json_schema.h"
#include "model/loader.h"

namespace tachyon::cli {

LoadOptions load_options(const SettingValues& v, const LoraOptions& lora) {
  LoadOptions opts;
  if (lora.merge && !lora.adapters.empty()) {
    opts.merge_lora = lora.adapters[0].path;
  } else if (lora.enabled) {
    opts.lora.max_loras = lora.max_loras;
    opts.lora.max_rank = lora.max_rank;
  }
  opts.model_type = v.str("model-type");
  opts.sparse_config = v.str("sparse-config");
  opts.device = parse_device(v.str("device"));
  opts.dtype = parse_compute_dtype(v.str("dtype"));
  opts.kv_cache_dtype = parse_kv_cache_dtype(v.str("kv-cache-dtype"));
  opts.quantization = parse_load_quantization(v.str("quantization"));
  return opts;
}

EngineBundle open_engine(const std::string& model_dir, const SettingValues& v,
                         int32_t expected_seqs, const LoraOptions& lora) {
  EngineBundle b;
  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions opts = load_options(v, lora);
  // Checked before the model loads.
  const SpeculativeOptions spec = speculative_options(v);
  const std::string tok_dir = v.str("tokenizer").empty() ? model_dir : v.str("tokenizer");
  try {
    b.tokenizer = Tokenizer::load(tok_dir);
    opts.vocab_size = b.tokenizer->vocab_size();  // a Megatron-LM padded vocabulary's cut
  } catch (const NotFound& e) {
    log_warning("no tokenizer in {}: token ids only ({})", tok_dir, e.what());
  }
  b.model = load_model(model_dir, opts);
  b.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // 0 keeps the engine's default, as serve does.
  EngineConfig c;
  if (v.integer("max-num-seqs") > 0)
    c.max_num_seqs = static_cast<int32_t>(v.integer("max-num-seqs"));
  if (v.integer("max-num-batched-tokens") > 0)
    c.max_num_batched_tokens = static_cast<int32_t>(v.integer("max-num-batched-tokens"));
  c.max_num_batched_tokens = std::max(c.max_num_batched_tokens, c.max_num_seqs);
  if (v.integer("block-size") > 0) c.block_size = static_cast<int32_t>(v.integer("block-size"));
  if (v.integer("num-kv-blocks") > 0)
    c.num_kv_blocks = static_cast<int32_t>(v.integer("num-kv-blocks"));
  for (int64_t id : b.model->config().eos_token_ids)
    c.eos_token_ids.push_back(static_cast<int32_t>(id));
  const double mb = v.number("kv-cache-mb");
  if (c.num_kv_blocks > 0) {
    // The block count decides.
  } else if (b.model->backend().device().is_cpu()) {
    // Up to max-num-seqs full-length sequences (capped by --kv-cache-mb, else by a fifth
    // of free memory), reserved one full-length sequence at a time.
    c.kv_cache_bytes = static_cast<int64_t>(mb * 1024 * 1024);
    size_host_kv_cache(&c, *b.model, host_memory_available());
  } else if (mb > 0) {
    c.kv_cache_bytes = static_cast<int64_t>(mb * 1024 * 1024);
  } else {
    c.kv_cache_bytes =
        kv_cache_budget_bytes(*b.model, v.number("gpu-memory-fraction"), c.max_num_batched_tokens);
  }
  c.swap_space_bytes = swap_space_bytes(v.has("swap-space") ? v.number("swap-space") : -1,
                                        b.model->backend().device().is_cpu());
  c.overlap_steps = v.flag("overlap-steps");
  c.prefix_caching = v.flag("prefix-caching");
  c.prefix_cache_host_bytes =
      static_cast<int64_t>(v.number("prefix-cache-host-gib") * double(int64_t{1} << 30));
  // After the KV budget: a draft model's cache is taken out of it.
  b.proposer = spec.method == "draft_model"
                   ? make_draft_proposer(v, spec, model_dir, *b.model, opts, &c)
                   : make_proposer(spec);
  c.proposer = b.proposer;
  c.num_speculative_tokens = spec.num_speculative_tokens;
  std::shared_ptr<const TextTokenizer> text;
  if (b.tokenizer) text = make_text_tokenizer(b.tokenizer, c.eos_token_ids);
  b.engine = std::make_unique<TextEngine>(b.model, text, c);
  if (lora.enabled) {
    b.adapters =
        std::make_unique<AdapterRegistry>(b.model, b.engine->engine(), lora.max_registered);
    for (const AdapterInfo& a : lora.adapters) b.adapters->load(a.name, a.path);
  }
  return b;
}

std::optional<grammar::GrammarSpec> constraint_flags(const SettingValues& v) {
  using Kind = grammar::GrammarSpec::Kind;
  const int given = (v.given("regex") ? 1 : 0) + (v.given("grammar") ? 1 : 0) +
                    (v.flag("json-object") ? 1 : 0) + (v.given("json-schema") ? 1 : 0);
  if (given > 1)
    raise<InvalidArgument>("--regex, --grammar, --json-object and --json-schema are exclusive");
  if (v.given("regex")) return grammar::GrammarSpec{Kind::kRegex, v.str("regex"), {}};
  if (v.given("grammar"))
    return grammar::GrammarSpec{Kind::kGrammar, read_file(v.str("grammar"), size_t{1} << 20), {}};
  if (v.flag("json-object")) return grammar::GrammarSpec{Kind::kJsonObject, {}, {}};
  if (v.given("json-schema")) {
    grammar::GrammarSpec spec{
        Kind::kJsonSchema, read_file(v.str("json-schema"), size_t{1} << 20), {}};
    try {  // refused here, naming the file, rather than by every request
      grammar::json_schema_rules(spec.text, false, {});
    } catch (const InvalidArgument& e) {
      raise<InvalidArgument>("--json-schema {}: {}", v.str("json-schema"), e.what());
    }
    return spec;
  }
  return std::nullopt;
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
  j["aux_info"] = {{"cost_time", t.total_ms},
                   {"first_token_cost_time", t.first_token_ms},
                   {"queue_time", t.queue_ms},
                   {"iter_count", t.iter_count},
                   {"input_len", t.input_len},
                   {"output_len", t.output_len},
                   {"prefix_len", t.prefix_len},
                   {"reuse_len", t.reuse_len},
                   {"preemptions", t.num_preemptions},
                   {"cum_log_probs", cum},
                   {"speculative_draft_rounds", t.speculative_draft_rounds},
                   {"speculative_accepted_tokens_per_pos", t.speculative_accepted_tokens_per_pos}};
  return j;
}

}  // namespace tachyon::cli
