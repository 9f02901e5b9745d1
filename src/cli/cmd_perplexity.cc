// tachyon perplexity: a model's perplexity on a text file (cli/perplexity.h), to judge
// a quantized or otherwise changed model against its original on real text.
//   tachyon perplexity [--model DIR] --text FILE [--ctx N] [--batch B] [--json]
// The text is tokenized whole as a prompt (with the special tokens the tokenizer adds,
// BOS for most); when that opens with BOS, so does every chunk. Prints "PPL = X +/- E" with the
// chunks, tokens and tokens/s (--json: one object); a running value per chunk goes to stderr.
#include <algorithm>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/model_dir.h"
#include "cli/perplexity.h"
#include "core/error.h"
#include "core/json.h"
#include "core/mmap.h"
#include "model/loader.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {
namespace {

constexpr int32_t kDefaultMaxCtx = 512;

constexpr const char* kUsage =
    "usage: tachyon perplexity [--model DIR] --text FILE [--ctx N] [--batch B] [--json]\n\n"
    "The model's perplexity on a text file, as llama.cpp's llama-perplexity computes it: the\n"
    "text is tokenized whole, split into chunks of --ctx tokens (the last partial one\n"
    "dropped), and each chunk is scored on its second half. Prints PPL +/- its standard\n"
    "error, the chunks, the tokens scored and tokens/s; a running value per chunk goes to\n"
    "stderr.\n";

std::string read_text(const std::string& path) {
  std::string text;
  try {
    text = read_file(path);
  } catch (const Error& e) {
    raise<InvalidArgument>("--text: cannot read '{}': {}", path, e.what());
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    raise<InvalidArgument>("--text: '{}' is empty", path);
  return text;
}

}  // namespace

int cmd_perplexity(const CommandArgs& argv) {
  const auto parsed = parse_command("perplexity", argv, kUsage);
  if (!parsed) return 0;
  const SettingValues& args = *parsed;
  if (!args.given("text") || args.str("text").empty())
    raise<InvalidArgument>("give --text FILE, the text to score");
  const std::string path = args.str("text");
  const std::string dir = resolve_model_dir(args.str("model"));
  const LoadOptions opts = load_options(args);

  // Everything that can be checked before the weights load is.
  const std::string text = read_text(path);
  std::unique_ptr<Tokenizer> tok;
  try {
    tok = Tokenizer::load(dir);
  } catch (const NotFound& e) {
    raise<InvalidArgument>("perplexity needs the model's tokenizer: {}", e.what());
  }
  const std::vector<int32_t> tokens = tok->encode(text, /*add_special_tokens=*/true);
  // The one token the tokenizer puts before any text (BOS), if it does: llama.cpp's
  // chunks each open with it.
  const std::vector<int32_t> lead = tok->encode("", /*add_special_tokens=*/true);
  const int32_t chunk_start =
      lead.size() == 1 && !tokens.empty() && tokens.front() == lead[0] ? lead[0] : -1;
  const int32_t window = static_cast<int32_t>(load_model_config(dir, opts).max_seq_len);
  const int32_t ctx = args.integer("ctx") > 0 ? static_cast<int32_t>(args.integer("ctx"))
                                              : std::min(window, kDefaultMaxCtx);
  const int32_t batch = static_cast<int32_t>(args.integer("batch"));
  check_perplexity_input(static_cast<int64_t>(tokens.size()), ctx, batch, window);

  auto model = load_model(dir, opts);
  const int64_t total = static_cast<int64_t>(tokens.size()) / ctx;
  const PerplexityResult r =
      compute_perplexity(*model, tokens, ctx, batch, chunk_start, [&](const PerplexityResult& p) {
        std::fprintf(stderr, "perplexity: chunk %lld/%lld, PPL %.4f +/- %.4f\n",
                     static_cast<long long>(p.chunks), static_cast<long long>(total), p.ppl,
                     p.ppl_stderr);
      });
  const double tok_s = r.seconds > 0 ? static_cast<double>(r.evaluated_tokens) / r.seconds : 0.0;
  if (args.flag("json")) {
    const Json j = {{"ppl", r.ppl},
                    {"ppl_stderr", r.ppl_stderr},
                    {"nll", r.nll},
                    {"nll_stderr", r.nll_stderr},
                    {"chunks", r.chunks},
                    {"ctx", r.ctx},
                    {"batch", r.batch},
                    {"text_tokens", tokens.size()},
                    {"scored_tokens", r.scored_tokens},
                    {"evaluated_tokens", r.evaluated_tokens},
                    {"seconds", r.seconds},
                    {"tokens_per_second", tok_s}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "PPL = %.4f +/- %.4f | %lld chunks of %d tokens (%zu in the text), %lld tokens scored "
        "| %.1f tok/s\n",
        r.ppl, r.ppl_stderr, static_cast<long long>(r.chunks), r.ctx, tokens.size(),
        static_cast<long long>(r.scored_tokens), tok_s);
  }
  return 0;
}

}  // namespace tachyon::cli
