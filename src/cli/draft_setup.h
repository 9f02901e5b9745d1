// Speculative decoding with a draft model: the folder and the number of drafts from the
// speculative options (cli/speculative_options.h: --draft-model DIR / RTP-LLM's
// SP_CHECKPOINT_PATH, or "model" in --speculative-config; --num-speculative-tokens /
// GEN_NUM_PER_CIRCLE), and from the settings --draft-model-type (SP_MODEL_TYPE, checked
// against the draft's config) and --draft-dtype (SP_WEIGHT_TYPE). The draft is loaded
// like any model, on the target's device, and proposes through
// engine/draft_model_proposer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cli/speculative_options.h"
#include "core/settings.h"
#include "engine/async_model.h"
#include "engine/proposer.h"
#include "model/config.h"
#include "model/loader.h"

namespace tachyon::cli {

struct DraftOptions {
  std::string dir;                     // the draft's folder
  std::string model_type;              // empty: not checked
  std::optional<DType> dtype;          // unset: the target's compute dtype
  int32_t num_speculative_tokens = 5;  // k: drafts per sequence and step
  std::string source;                  // the setting that named the folder, for messages
};

// The draft settings; nullopt unless the speculative method is draft_model. Throws
// InvalidArgument naming the setting: a folder that does not exist, a dtype other than
// auto, bf16, f16, f32, a draft setting without a draft model.
std::optional<DraftOptions> draft_options(const SettingValues& settings,
                                          const SpeculativeOptions& spec);

// Throws InvalidArgument naming what differs when the draft cannot propose tokens for
// the target: vocabulary sizes of the two configs that differ (unless the tokenizer's
// vocabulary fits both, a padded embedding), tokenizers that map a token to other ids
// or have other special tokens, or (without tokenizers) other BOS / EOS ids.
void check_draft_vocabulary(const std::string& target_dir, const ModelConfig& target,
                            const std::string& draft_dir, const ModelConfig& draft);

// Loads the draft of the options (nullptr unless the method is draft_model) and builds its
// proposer, after the engine's KV budget is set (engine->kv_cache_bytes or
// num_kv_blocks, as open_engine sets them): the draft's cache comes out of that budget.
// target_opts: how the target was loaded (device, dtype). Throws InvalidArgument for a
// draft that does not match the target (check_draft_vocabulary, its model type) or a
// budget with no room for its cache.
std::shared_ptr<Proposer> make_draft_proposer(const SettingValues& settings,
                                              const SpeculativeOptions& spec,
                                              const std::string& target_dir, Model& target,
                                              const LoadOptions& target_opts, EngineConfig* engine);

}  // namespace tachyon::cli
