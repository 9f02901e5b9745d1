// tachyon generate: generation through the engine (AsyncModel).
//
// One prompt:
//   tachyon generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [--image FILE ...]
//       [--max-new-tokens N] [--temperature T] [--seed S] [--ignore-eos]
//       [--generate-config JSON]
//       [--regex R | --grammar FILE.gbnf | --json-object | --json-schema FILE.json]
//       [--json | --stream] [--dump-logits FILE]
//       [--lora NAME=DIR ...] (generate_config.adapter_name: NAME)
//   --image: a vision model's image, one per "<image>" of the prompt (the image token in
//   --prompt-ids), in order; each is decoded and goes through the model's image
//   processor (preprocessor_config.json), as the server's images do.
//   prints the generated ids (comma-separated); --stream prints the text as it comes;
//   --json prints one object:
//   {"prompt_ids", "output_ids" (no EOS), "text", "finish_reason", "aux_info"}.
//   --dump-logits writes the prompt's logits [prompt_len, vocab] as safetensors.
// Batch mode (all lines concurrently through one engine, results in input order):
//   tachyon generate --model DIR --input FILE.jsonl [--output FILE.jsonl]
//   each line {"prompt": "..."} or {"prompt_ids": [...]}, optionally with "images":
//   [FILE, ...] (as --image) and "generate_config": {...} (RTP-LLM field names,
//   adapter_name too); the flags above are the defaults.
// Engine flags: see cli/engine_setup.h.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/generate_engine.h"
#include "cli/lora_options.h"
#include "cli/model_dir.h"
#include "core/error.h"
#include "core/json.h"
#include "frontend/image_preprocessor.h"
#include "io/safetensors.h"
#include "model/loader.h"

namespace tachyon::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    std::string item =
        text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) raise<InvalidArgument>("--prompt-ids: empty entry in '{}'", text);
    int64_t v = parse_int(item, "--prompt-ids");
    if (v < 0 || v > INT32_MAX) raise<InvalidArgument>("--prompt-ids: token id {} out of range", v);
    ids.push_back(static_cast<int32_t>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

// The prompt's logits at every position, straight from the model (before the engine
// takes over its cache).
void dump_prompt_logits(Model& model, const std::vector<int32_t>& prompt, const std::string& path) {
  constexpr int32_t kBlock = 16;
  const int32_t n = static_cast<int32_t>(prompt.size());
  const int32_t blocks = (n + kBlock - 1) / kBlock;
  model.init_kv_cache(blocks, kBlock);
  ForwardBatch b;
  for (int32_t i = 0; i < n; ++i) {
    b.token_ids.push_back(prompt[static_cast<size_t>(i)]);
    b.positions.push_back(i);
    b.logits_rows.push_back(i);
  }
  b.query_start = {0, n};
  b.context_lens = {n};
  b.layouts = {model.prompt_layout(prompt)};
  b.max_blocks_per_seq = blocks;
  for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
  write_safetensors(path, {{"prompt_logits", model.forward(b)}});
}

// The defaults that flags give every request, as generate_config JSON.
Json flag_defaults(const SettingValues& v) {
  Json d = Json::object();
  if (v.given("generate-config")) {
    d = parse_json(v.str("generate-config"), "--generate-config");
    if (!d.is_object()) raise<InvalidArgument>("--generate-config must be a JSON object");
  }
  if (v.given("max-new-tokens") || !d.contains("max_new_tokens"))
    d["max_new_tokens"] = v.integer("max-new-tokens");
  if (v.given("temperature") || !d.contains("temperature"))
    d["temperature"] = v.number("temperature");
  if (v.given("seed")) d["random_seed"] = v.integer("seed");
  if (v.flag("ignore-eos")) d["ignore_eos"] = true;
  // A constraint flag replaces any constraint of --generate-config.
  if (auto spec = constraint_flags(v)) {
    for (const char* k : {"regex", "ebnf", "choice", "response_format", "json_schema"}) d.erase(k);
    GenerateConfig c;
    c.constraint = std::move(spec);
    const Json j = c.to_json();
    for (const auto& [k, x] : j.items())
      if (k == "regex" || k == "ebnf" || k == "response_format" || k == "json_schema") d[k] = x;
  }
  return d;
}

constexpr const char* kUsage =
    "usage: tachyon generate [--model DIR] (--prompt TEXT | --prompt-ids 1,2,3) [flags]\n"
    "       tachyon generate [--model DIR] --input FILE.jsonl [--output FILE.jsonl] [flags]\n\n"
    "Generates from one prompt (prints the ids; --stream the text as it comes; --json one\n"
    "object with prompt_ids, output_ids, text, finish_reason, aux_info), or from every line\n"
    "of a JSONL file at once (results in input order).\n";

}  // namespace

int cmd_generate(const CommandArgs& argv) {
  const auto parsed = parse_command("generate", argv, kUsage);
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  const std::string dir = resolve_model_dir(args.str("model"));
  const Json defaults = flag_defaults(args);
  const LoraOptions lora = lora_options(args);
  if (args.given("input")) {
    if (args.given("prompt") || args.given("prompt-ids") || args.given("dump-logits") ||
        args.given("image"))
      raise<InvalidArgument>(
          "--input does not mix with --prompt, --prompt-ids, --image or --dump-logits (a line "
          "gives its own \"images\")");
    EngineBundle b = open_engine(dir, args, 0, lora);
    const auto pre = ImagePreprocessor::load(dir, b.model->config());
    const int failed =
        run_generate_batch(b, lora, args.str("input"), args.str("output"), defaults, pre.get());
    return failed == 0 ? 0 : 1;
  }
  if (args.given("prompt") == args.given("prompt-ids"))
    raise<InvalidArgument>("give --prompt TEXT or --prompt-ids 1,2,3 (or --input FILE.jsonl)");
  const RequestConfig rc = request_config(defaults);
  const GenerateConfig& config = rc.config;
  // The adapter and the images are checked before the model loads.
  make_request(lora, nullptr, {}, rc);
  const std::vector<RequestImage> images = read_images(args.list("image"), "--image");
  if (!images.empty() && args.given("dump-logits"))
    raise<InvalidArgument>("--dump-logits does not take --image");

  EngineBundle b;
  std::vector<int32_t> prompt;
  if (args.given("prompt-ids")) prompt = parse_ids(args.str("prompt-ids"));
  if (args.given("dump-logits")) {
    const std::string path = args.str("dump-logits");
    // The model alone first; the engine then sizes the cache its own way.
    LoadOptions lo = load_options(args, lora);
    if (prompt.empty()) {
      auto tok = Tokenizer::load(args.str("tokenizer").empty() ? dir : args.str("tokenizer"));
      prompt = tok->encode(args.str("prompt"), true);
      lo.vocab_size = tok->vocab_size();
    }
    auto model = load_model(dir, lo);
    for (int32_t id : prompt)
      if (id >= model->vocab_size())
        raise<InvalidArgument>("--prompt-ids: token id {} is outside the vocabulary ({})", id,
                               model->vocab_size());
    if (!prompt.empty()) dump_prompt_logits(*model, prompt, path);
  }
  b = open_engine(dir, args, std::max(config.width(), 1), lora);
  const auto pre = ImagePreprocessor::load(dir, b.model->config());
  if (prompt.empty()) {
    if (!b.tokenizer) raise<InvalidArgument>("--prompt needs a tokenizer; pass --prompt-ids");
    prompt = b.tokenizer->encode(args.str("prompt"), true);
  }
  // The request, its images in place (the prompt echoed is the one given).
  GenerateRequest request = make_request(lora, b.adapters.get(), prompt, rc);
  attach_images(pre.get(), *b.model, request, images, "--image");
  const bool json = args.flag("json");
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> prompt_copy = prompt;
  GenerateResult r;
  if (json) {
    r = run_generate_one(b, std::move(request), /*json=*/true);
    Json j = result_json(r);
    j["prompt_ids"] = prompt_copy;
    std::printf("%s\n", j.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
  } else if (args.flag("stream")) {
    r = run_generate_one(b, std::move(request), /*json=*/false);
  } else {
    r = b.engine->submit(std::move(request))->wait();
    std::string ids;
    if (!r.sequences.empty())
      for (int32_t t : r.sequences[0].output_ids)
        ids += (ids.empty() ? "" : ",") + std::to_string(t);
    std::printf("%s\n", ids.c_str());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const RequestTimings& t = r.timings;
  std::fprintf(stderr,
               "load %.2f s | prompt %d tokens, first token %.1f ms | %d tokens in %.3f s "
               "(%.1f tok/s) | %s\n",
               b.load_seconds, t.input_len, t.first_token_ms, t.output_len, s,
               s > 0 ? t.output_len / s : 0.0,
               r.sequences.empty()
                   ? "error"
                   : std::string(finish_reason_name(r.sequences[0].finish_reason)).c_str());
  if (r.error) {
    std::fprintf(stderr, "error: %s\n", r.error->message.c_str());
    return 1;
  }
  return 0;
}

}  // namespace tachyon::cli
