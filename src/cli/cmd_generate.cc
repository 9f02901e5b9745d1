// tachyon generate: a plain generation loop over one sequence (prefill, then one
// token per step through the paged KV cache). Greedy at temperature 0.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_dir.h"
#include "core/error.h"
#include "core/json.h"
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

int32_t pick_token(const float* logits, int64_t vocab, double temperature, std::mt19937_64& rng) {
  if (temperature <= 0)
    return static_cast<int32_t>(std::max_element(logits, logits + vocab) - logits);
  const float mx = *std::max_element(logits, logits + vocab);
  std::vector<double> p(static_cast<size_t>(vocab));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += (p[i] = std::exp((logits[i] - mx) / temperature));
  double r = std::uniform_real_distribution<double>(0, sum)(rng);
  for (int64_t i = 0; i < vocab; ++i) {
    r -= p[i];
    if (r <= 0) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(vocab - 1);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

int cmd_generate(const CommandArgs& argv) {
  Args args(argv,
            {"model", "prompt", "prompt-ids", "max-new-tokens", "temperature", "dump-logits",
             "model-type", "seed"},
            {"ignore-eos", "json"});
  const std::string dir = resolve_model_dir(args.get_or("model", ""));
  if (args.has("prompt") && args.has("prompt-ids"))
    raise<InvalidArgument>("give either --prompt or --prompt-ids, not both");
  if (args.has("prompt"))
    raise<InvalidArgument>(
        "--prompt needs the tokenizer, which is not part of this build yet; "
        "pass token ids with --prompt-ids 1,2,3");
  if (!args.has("prompt-ids")) raise<InvalidArgument>("give --prompt TEXT or --prompt-ids 1,2,3");
  const std::vector<int32_t> prompt = parse_ids(args.require("prompt-ids"));
  const int64_t max_new = args.get_int("max-new-tokens", 32);
  if (max_new < 0) raise<InvalidArgument>("--max-new-tokens must be >= 0, got {}", max_new);
  const double temperature = args.get_double("temperature", 0.0);
  if (!(temperature >= 0)) raise<InvalidArgument>("--temperature must be >= 0");
  const bool ignore_eos = args.flag("ignore-eos");
  std::mt19937_64 rng(static_cast<uint64_t>(args.get_int("seed", 0)));

  LoadOptions opts;
  opts.model_type = args.get_or("model-type", "");
  auto t_load = std::chrono::steady_clock::now();
  std::unique_ptr<Model> model = load_model(dir, opts);
  const double load_s = seconds_since(t_load);
  const int64_t vocab = model->vocab_size();
  for (int32_t id : prompt)
    if (id >= vocab)
      raise<InvalidArgument>("--prompt-ids: token id {} is outside the vocabulary ({})", id, vocab);
  const int64_t max_len = model->max_seq_len();
  if (static_cast<int64_t>(prompt.size()) > max_len)
    raise<InvalidArgument>("the prompt has {} tokens; the model takes at most {}", prompt.size(),
                           max_len);
  const int64_t budget = std::min<int64_t>(max_new, max_len - static_cast<int64_t>(prompt.size()));

  constexpr int32_t kBlock = 16;
  const int64_t total = static_cast<int64_t>(prompt.size()) + budget;
  const int32_t blocks = static_cast<int32_t>((total + kBlock - 1) / kBlock) + 1;
  model->init_kv_cache(blocks, kBlock);
  const auto& eos = model->config().eos_token_ids;

  std::vector<int32_t> tokens = prompt, output;
  std::string finish = "length";
  const std::string dump_path = args.get_or("dump-logits", "");
  double prefill_s = 0, decode_s = 0;
  int32_t computed = 0;
  while (static_cast<int64_t>(output.size()) < budget) {
    ForwardBatch b;
    const int32_t n = static_cast<int32_t>(tokens.size()) - computed;
    for (int32_t i = 0; i < n; ++i) {
      b.token_ids.push_back(tokens[computed + i]);
      b.positions.push_back(computed + i);
    }
    b.query_start = {0, n};
    b.context_lens = {computed + n};
    b.prompt_lens = {static_cast<int32_t>(prompt.size())};
    b.max_blocks_per_seq = blocks;
    for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
    const bool first = computed == 0;
    if (first && !dump_path.empty()) {
      for (int32_t i = 0; i < n; ++i) b.logits_rows.push_back(i);
    } else {
      b.logits_rows = {n - 1};
    }
    auto t0 = std::chrono::steady_clock::now();
    Tensor logits = model->forward(b);
    (first ? prefill_s : decode_s) += seconds_since(t0);
    if (first && !dump_path.empty()) write_safetensors(dump_path, {{"prompt_logits", logits}});
    computed += n;
    const float* last = logits.data<float>() + (logits.dim(0) - 1) * vocab;
    const int32_t next = pick_token(last, vocab, temperature, rng);
    if (!ignore_eos && std::find(eos.begin(), eos.end(), next) != eos.end()) {
      finish = "stop";
      break;
    }
    output.push_back(next);
    tokens.push_back(next);
  }
  if (budget == 0 && !dump_path.empty() && !prompt.empty()) {
    // Nothing to generate: still honour --dump-logits.
    ForwardBatch b;
    const int32_t n = static_cast<int32_t>(prompt.size());
    for (int32_t i = 0; i < n; ++i) {
      b.token_ids.push_back(prompt[i]);
      b.positions.push_back(i);
      b.logits_rows.push_back(i);
    }
    b.query_start = {0, n};
    b.context_lens = {n};
    b.max_blocks_per_seq = blocks;
    for (int32_t i = 0; i < blocks; ++i) b.block_tables.push_back(i);
    write_safetensors(dump_path, {{"prompt_logits", model->forward(b)}});
  }

  if (args.flag("json")) {
    Json j;
    j["prompt_ids"] = prompt;
    j["output_ids"] = output;
    j["text"] = "";  // filled once the tokenizer is part of the build
    j["finish_reason"] = finish;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::string ids;
    for (int32_t t : output) ids += (ids.empty() ? "" : ",") + std::to_string(t);
    std::printf("%s\n", ids.c_str());
  }
  const size_t decoded = output.empty() ? 0 : output.size() - 1;
  std::fprintf(stderr,
               "load %.2f s | prefill %zu tokens %.3f s (%.1f tok/s) | decode %zu tokens %.3f s "
               "(%.1f tok/s) | %s\n",
               load_s, prompt.size(), prefill_s, prefill_s > 0 ? prompt.size() / prefill_s : 0.0,
               decoded, decode_s, decode_s > 0 ? decoded / decode_s : 0.0, finish.c_str());
  return 0;
}

}  // namespace tachyon::cli
