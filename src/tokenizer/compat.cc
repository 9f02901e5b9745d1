#include "tokenizer/compat.h"

#include "core/error.h"
#include "tokenizer/pipeline.h"

namespace tachyon::tok {

std::string tokenizer_class(const Json& config) {
  if (!config.is_object() || !config.contains("tokenizer_class") ||
      !config["tokenizer_class"].is_string()) {
    return "";
  }
  std::string c = config["tokenizer_class"].get<std::string>();
  if (c.size() > 4 && c.compare(c.size() - 4, 4, "Fast") == 0) c.resize(c.size() - 4);
  return c;
}

bool config_bool(const Json& config, const char* key, bool fallback) {
  if (!config.is_object() || !config.contains(key) || !config[key].is_boolean()) return fallback;
  return config[key].get<bool>();
}

namespace {

bool is_bpe(const TokenizerJson& tj) {
  return tj.model.is_object() && tj.model.value("type", std::string("BPE")) == "BPE";
}

void rebuild_llama(TokenizerJson& tj, const Json& config) {
  const bool add_prefix_space = config_bool(config, "add_prefix_space", true);
  const bool legacy = config_bool(config, "legacy", false);
  const char* scheme = add_prefix_space ? (legacy ? "always" : "first") : "never";
  tj.model["fuse_unk"] = true;
  tj.model["byte_fallback"] = true;
  tj.model["unk_token"] = nullptr;
  tj.model["ignore_merges"] = false;
  tj.model["continuing_subword_prefix"] = nullptr;
  tj.model["end_of_word_suffix"] = nullptr;
  tj.normalizer = nullptr;
  tj.pre_tokenizer = Json{{"type", "Metaspace"},
                          {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", scheme},
                          {"split", false}};
  Json decoders = Json::array({
      Json{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
      Json{{"type", "ByteFallback"}},
      Json{{"type", "Fuse"}},
  });
  if (add_prefix_space) {
    decoders.push_back(Json{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  }
  tj.decoder = Json{{"type", "Sequence"}, {"decoders", decoders}};
}

void rebuild_gpt2(TokenizerJson& tj, const Json& config) {
  tj.model["continuing_subword_prefix"] = "";
  tj.model["end_of_word_suffix"] = "";
  tj.model["fuse_unk"] = false;
  tj.model["unk_token"] = nullptr;
  tj.model["byte_fallback"] = false;
  tj.model["ignore_merges"] = false;
  tj.normalizer = nullptr;
  tj.pre_tokenizer = Json{{"type", "ByteLevel"},
                          {"add_prefix_space", config_bool(config, "add_prefix_space", false)},
                          {"trim_offsets", true},
                          {"use_regex", true}};
  tj.decoder = Json{{"type", "ByteLevel"}};
}

}  // namespace

void apply_transformers_class(TokenizerJson& tj, const Json& config) {
  const std::string cls = tokenizer_class(config);
  if (cls == "LlamaTokenizer" && is_bpe(tj)) rebuild_llama(tj, config);
  if (cls == "GPT2Tokenizer" && is_bpe(tj)) rebuild_gpt2(tj, config);
}

}  // namespace tachyon::tok
