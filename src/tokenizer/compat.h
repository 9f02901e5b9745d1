// Internal: what transformers (v5, AutoTokenizer) does on top of tokenizer.json for the
// tokenizer class named in tokenizer_config.json. Some classes rebuild parts of the
// pipeline from their own definition and keep only the vocabulary, merges and
// post-processor of the file:
//   LlamaTokenizer(Fast): BPE with byte_fallback and fuse_unk and no unknown token, no
//     normalizer, a Metaspace pre-tokenizer (prepend_scheme "always" when legacy, else
//     "first"; "never" without add_prefix_space; split off) and the decoder
//     Replace(▁→space), ByteFallback, Fuse, Strip(1 leading space when add_prefix_space).
//   GPT2Tokenizer(Fast): byte-level BPE with GPT-2's own ByteLevel pre-tokenizer
//     (add_prefix_space from the config) and ByteLevel decoder, no normalizer.
// Other classes (PreTrainedTokenizerFast, Qwen2, Gemma, ...) use the file as it is.
// When the pipeline has no post-processor, add_bos_token / add_eos_token give one.
#pragma once

#include "core/json.h"
#include "tokenizer/loader.h"

namespace tachyon::tok {

// Rewrites the sections of `tj` as transformers would for `config`.
void apply_transformers_class(TokenizerJson& tj, const Json& config);

// The tokenizer class of `config` without a "Fast" suffix ("" when absent).
std::string tokenizer_class(const Json& config);

// config[key] when it is a boolean, else fallback (also when config is not an object).
bool config_bool(const Json& config, const char* key, bool fallback);

}  // namespace tachyon::tok
