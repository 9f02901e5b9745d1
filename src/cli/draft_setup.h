// Speculative decoding with a draft model, from the settings (core/settings_table.cc):
// --draft-model DIR (RTP-LLM's SP_CHECKPOINT_PATH), --draft-model-type (SP_MODEL_TYPE,
// checked against the draft's config), --draft-dtype (SP_WEIGHT_TYPE) and
// --num-speculative-tokens (GEN_NUM_PER_CIRCLE). The draft is loaded like any model, on
// the target's device, and proposes through engine/draft_model_proposer.h.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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

// The draft settings; nullopt without --draft-model. Throws InvalidArgument naming the
// setting: a folder that does not exist, a dtype other than auto, bf16, f16, f32.
std::optional<DraftOptions> draft_options(const SettingValues& settings);

// Throws InvalidArgument naming what differs when the draft cannot propose tokens for
// the target: vocabulary sizes of the two configs that differ (unless the tokenizer's
// vocabulary fits both, a padded embedding), tokenizers that map a token to other ids
// or have other special tokens, or (without tokenizers) other BOS / EOS ids.
void check_draft_vocabulary(const std::string& target_dir, const ModelConfig& target,
                            const std::string& draft_dir, const ModelConfig& draft);

// Loads the draft of the settings (nullptr without --draft-model) and builds its
// proposer, after the engine's KV budget is set (engine->kv_cache_bytes or
// num_kv_blocks, as open_engine sets them): the draft's cache comes out of that budget.
// target_opts: how the target was loaded (device, dtype). Throws InvalidArgument for a
// draft that does not match the target (check_draft_vocabulary, its model type) or a
// budget with no room for its cache.
std::shared_ptr<Proposer> make_draft_proposer(const SettingValues& settings,
                                              const std::string& target_dir, Model& target,
                                              const LoadOptions& target_opts, EngineConfig* engine);

}  // namespace tachyon::cli
