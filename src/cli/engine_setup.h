// Opening a model folder as a running engine, for the commands that drive AsyncModel
// (generate, bench): the model, its tokenizer when it has one, and the engine sized by
// the engine settings (core/settings_table.cc: --kv-cache-mb, --max-num-seqs,
// --max-num-batched-tokens, --block-size, --num-kv-blocks, --model-type, --device,
// --dtype, --gpu-memory-fraction, --kv-cache-dtype, --swap-space, --overlap-steps,
// --prefix-caching, --prefix-cache-host-gib), and speculative decoding
// (cli/speculative_options.h; a draft model: cli/draft_setup.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/lora_options.h"
#include "core/settings.h"
#include "engine/async_model.h"
#include "engine/proposer.h"
#include "frontend/adapters.h"
#include "frontend/text_engine.h"
#include "grammar/compile.h"
#include "model/loader.h"
#include "model/model_runner.h"
#include "tokenizer/tokenizer.h"

namespace tachyon::cli {

struct EngineBundle {
  std::shared_ptr<Model> model;
  std::shared_ptr<const Tokenizer> tokenizer;  // null when the folder has none
  std::unique_ptr<TextEngine> engine;
  // The LoRA adapters given at start (null when adapters are not enabled); after the
  // engine, so gone before it.
  std::unique_ptr<AdapterRegistry> adapters;
  // Speculative decoding's draft-model proposer (--draft-model; cli/draft_setup.h), null
  // without one.
  std::shared_ptr<Proposer> proposer;
  double load_seconds = 0;
};

// LoadOptions from --model-type, --device, --dtype and --kv-cache-dtype, and the LoRA
// settings' room for adapters (or the adapter to merge).
LoadOptions load_options(const SettingValues& settings, const LoraOptions& lora = {});
// expected_seqs: sequences the caller will run at once, for the default KV budget
// (0: max-num-seqs). lora: the adapters to register (when enabled) or merge.
EngineBundle open_engine(const std::string& model_dir, const SettingValues& settings,
                         int32_t expected_seqs = 0, const LoraOptions& lora = {});

// The structured-output flags (--regex R, --grammar FILE, --json-object, --json-schema
// FILE) as a request's constraint (InvalidArgument when more than one is given).
std::optional<grammar::GrammarSpec> constraint_flags(const SettingValues& settings);

// A prompt from a JSONL line or flag: {"prompt": "..."} (needs the tokenizer; special
// tokens added as the tokenizer does) or {"prompt_ids": [...]}.
std::vector<int32_t> prompt_from_json(const Json& line, const Tokenizer* tokenizer);

// The RTP-LLM style result object of one finished request.
Json result_json(const GenerateResult& r);

}  // namespace tachyon::cli
