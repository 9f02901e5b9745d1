// Tokenizer: finds the checkpoint's tokenizer files, builds the backend and applies
// tokenizer_config.json the way transformers does.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>

#include "chat/chat_template.h"

#include "core/error.h"
#include "core/json.h"
#include "core/mmap.h"
#include "tokenizer/backend.h"
#include "tokenizer/compat.h"
#include "tokenizer/loader.h"

namespace tachyon {

using tok::Backend;

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

namespace {

// A special token value of tokenizer_config.json: a string, an AddedToken object, or null.
std::optional<std::string> special_value(const Json& config, const char* key,
                                         const std::string& what) {
  if (!config.is_object() || !config.contains(key)) return std::nullopt;
  const Json& v = config[key];
  if (v.is_null()) return std::nullopt;
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  raise<InvalidArgument>("{}: {}: expected a string, an AddedToken object or null", what, key);
}

std::vector<std::string> special_list(const Json& config, const char* key,
                                      const std::string& what) {
  std::vector<std::string> out;
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return out;
  const Json& v = config[key];
  auto one = [&](const Json& e) {
    if (e.is_string()) {
      out.push_back(e.get<std::string>());
    } else if (e.is_object() && e.contains("content") && e["content"].is_string()) {
      out.push_back(e["content"].get<std::string>());
    } else {
      raise<InvalidArgument>("{}: {}: expected special token strings", what, key);
    }
  };
  if (v.is_array()) {
    for (const Json& e : v) one(e);
  } else if (v.is_object()) {
    for (const auto& [k, e] : v.items()) one(e);
  } else {
    raise<InvalidArgument>("{}: {}: expected a list or an object", what, key);
  }
  return out;
}

constexpr const char* kCl100kPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kQwenPattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

// A special token of ChatGLM-6B's tokenizer_config.json: absent -> ChatGLMTokenizer's
// default, null -> none; a plain string strips the whitespace around it when the text
// is split (transformers 4.27), an AddedToken object as its lstrip / rstrip say.
std::optional<tok::ChatGLM6BOptions::Special> chatglm6b_special(const Json& config, const char* key,
                                                                const char* fallback,
                                                                const std::string& what) {
  using Special = tok::ChatGLM6BOptions::Special;
  if (!config.is_object() || !config.contains(key)) return Special{fallback};
  const Json& v = config[key];
  auto content = special_value(config, key, what);
  if (!content) return std::nullopt;
  Special s{*content};
  if (v.is_object()) {  // (a plain string keeps Special's defaults)
    s.lstrip = tok::config_bool(v, "lstrip", false);
    s.rstrip = tok::config_bool(v, "rstrip", false);
  }
  return s;
}

bool is_sentencepiece_model(const std::string& path) {
  // A serialized ModelProto starts with field 1 (pieces, length-delimited): tag 0x0A.
  // A tiktoken file is base64 text.
  std::ifstream f(path, std::ios::binary);
  char head = 0;
  return f.get(head) && head == '\x0A';
}

}  // namespace

struct TokenizerBuilder {
  static void apply_config(Tokenizer& t, const Json& config, const std::string& what) {
    t.bos_token_ = special_value(config, "bos_token", what);
    t.eos_token_ = special_value(config, "eos_token", what);
    t.pad_token_ = special_value(config, "pad_token", what);
    t.unk_token_ = special_value(config, "unk_token", what);
    if (config.is_object() && config.contains("clean_up_tokenization_spaces") &&
        config["clean_up_tokenization_spaces"].is_boolean()) {
      t.clean_up_tokenization_spaces_ = config["clean_up_tokenization_spaces"].get<bool>();
    }
    if (config.is_object() && config.contains("model_max_length")) {
      const Json& m = config["model_max_length"];
      if (m.is_number_integer() && m.get<int64_t>() > 0) t.model_max_length_ = m.get<int64_t>();
      if (m.is_number_unsigned() && m.get<uint64_t>() <= uint64_t(INT64_MAX)) {
        t.model_max_length_ = static_cast<int64_t>(m.get<uint64_t>());
      }
    }
    for (auto& [name, source] : chat_templates_from_config(config).templates) {
      t.chat_templates_.push_back({name, std::move(source)});
    }
  }

  // Adds the config's special tokens and added_tokens_decoder to the backend.
  static void register_specials(Tokenizer& t, Backend& b, const Json& config,
                                const std::vector<tok::AddedToken>& decoder_tokens,
                                const std::string& what) {
    if (auto* hf = dynamic_cast<tok::HfPipeline*>(&b)) {
      bool changed = false;
      for (const tok::AddedToken& a : decoder_tokens) {
        const tok::AddedToken* old = hf->added.by_id(a.id);
        if (old && old->content == a.content && old->special == a.special &&
            old->lstrip == a.lstrip && old->rstrip == a.rstrip &&
            old->single_word == a.single_word && old->normalized == a.normalized) {
          continue;
        }
        hf->added.add(a);
        changed = true;
      }
      if (changed) hf->added.build(hf->normalizer.get());
    }
    std::vector<std::string> specials;
    for (const auto* s : {&t.bos_token_, &t.eos_token_, &t.unk_token_, &t.pad_token_}) {
      if (*s) specials.push_back(**s);
    }
    for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
      for (auto& s : special_list(config, key, what)) specials.push_back(std::move(s));
    }
    auto* hf = dynamic_cast<tok::HfPipeline*>(&b);
    for (const auto& s : specials) {
      if (hf && hf->added.find(s)) continue;
      if (!hf && b.is_special(b.token_to_id(s).value_or(-1))) continue;
      b.add_special_token(s);
    }
    auto id_of = [&](const std::optional<std::string>& s) -> std::optional<int32_t> {
      if (!s) return std::nullopt;
      return b.token_to_id(*s);
    };
    t.bos_id_ = id_of(t.bos_token_);
    t.eos_id_ = id_of(t.eos_token_);
    t.pad_id_ = id_of(t.pad_token_);
    t.unk_id_ = id_of(t.unk_token_);
  }

  static std::unique_ptr<Tokenizer> from_hf(std::string_view tokenizer_json,
                                            const tok::TokenizerConfig& cfg,
                                            const std::string& what) {
    const Json& config = cfg.json;
    auto tj = tok::parse_tokenizer_json(tokenizer_json, what);
    tok::apply_transformers_class(*tj, config);
    auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
    apply_config(*t, config, what);
    auto pipeline = tok::build_pipeline(*tj);
    register_specials(*t, *pipeline, config, cfg.added_tokens_decoder, what);
    if (!pipeline->post_processor) {
      // transformers builds one from add_bos_token / add_eos_token.
      const std::string cls = tok::tokenizer_class(config);
      bool add_bos = config.is_object() && config.value("add_bos_token", cls == "GemmaTokenizer");
      bool add_eos = config.is_object() && config.value("add_eos_token", false);
      if ((add_bos && t->bos_id_) || (add_eos && t->eos_id_)) {
        Json single = Json::array();
        Json specials = Json::object();
        if (add_bos && t->bos_id_) {
          single.push_back({{"SpecialToken", {{"id", *t->bos_token_}, {"type_id", 0}}}});
          specials[*t->bos_token_] = {{"id", *t->bos_token_}, {"ids", {*t->bos_id_}}};
        }
        single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
        if (add_eos && t->eos_id_) {
          single.push_back({{"SpecialToken", {{"id", *t->eos_token_}, {"type_id", 0}}}});
          specials[*t->eos_token_] = {{"id", *t->eos_token_}, {"ids", {*t->eos_id_}}};
        }
        pipeline->post_processor = tok::make_post_processor(
            Json{{"type", "TemplateProcessing"}, {"single", single}, {"special_tokens", specials}},
            what + ": add_bos_token/add_eos_token");
      }
    }
    t->backend_ = std::move(pipeline);
    return t;
  }

  static std::unique_ptr<Tokenizer> from_tiktoken(const std::string& path,
                                                  const tok::TokenizerConfig& cfg,
                                                  const std::string& what) {
    const Json& config = cfg.json;
    const bool qwen = std::filesystem::path(path).filename() == "qwen.tiktoken";
    std::vector<std::pair<std::string, int32_t>> specials;
    std::string text = read_file(path);
    int32_t next = 0;
    {
      // The number of ranks: specials follow them.
      for (char c : text) next += c == '\n';
      if (!text.empty() && text.back() != '\n') ++next;
    }
    if (!cfg.added_tokens_decoder.empty()) {
      for (const auto& a : cfg.added_tokens_decoder) specials.push_back({a.content, a.id});
    } else if (qwen) {
      // Qwen-1's tokenization_qwen.py: three named specials, then <|extra_0..204|>.
      for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"})
        specials.push_back({s, next++});
      for (int i = 0; i < 205; ++i)
        specials.push_back({"<|extra_" + std::to_string(i) + "|>", next++});
    }
    auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
    apply_config(*t, config, what);
    auto pipeline =
        tok::build_tiktoken_pipeline(text, path, qwen ? kQwenPattern : kCl100kPattern, specials);
    register_specials(*t, *pipeline, config, {}, what);
    if (tok::tokenizer_class(config) == "ChatGLM4Tokenizer") {
      // GLM-4's tokenization_chatglm.py prepends [gMASK] <sop> (no BOS).
      Json single = Json::array();
      Json special_tokens = Json::object();
      for (const char* s : {"[gMASK]", "<sop>"}) {
        auto id = pipeline->added.find(s);
        if (!id)
          raise<InvalidArgument>("{}: ChatGLM4Tokenizer needs the added token '{}'", what, s);
        single.push_back({{"SpecialToken", {{"id", s}, {"type_id", 0}}}});
        special_tokens[s] = {{"id", s}, {"ids", {*id}}};
      }
      single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
      pipeline->post_processor = tok::make_post_processor(Json{{"type", "TemplateProcessing"},
                                                               {"single", single},
                                                               {"special_tokens", special_tokens}},
                                                          what + ": ChatGLM4Tokenizer prefix");
    }
    t->backend_ = std::move(pipeline);
    return t;
  }

  static std::unique_ptr<Tokenizer> from_sentencepiece(const std::string& path,
                                                       const tok::TokenizerConfig& cfg,
                                                       const std::string& what) {
    const Json& config = cfg.json;
    auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
    apply_config(*t, config, what);
    if (tok::tokenizer_class(config) == "ChatGLMTokenizer") {
      // ChatGLM2 / ChatGLM3's own wrapper: its specials follow the SentencePiece vocabulary.
      t->backend_ = tok::make_chatglm_backend(path, cfg.added_tokens_decoder);
      // transformers adds the named special tokens to the added tokens the text is split
      // on, even those the SentencePiece model has (</s>, <unk>).
      for (const auto* s : {&t->bos_token_, &t->eos_token_, &t->unk_token_, &t->pad_token_})
        if (*s) t->backend_->add_special_token(**s);
      register_specials(*t, *t->backend_, config, {}, what);
      return t;
    }
    std::vector<std::string> specials;
    for (const auto* s : {&t->bos_token_, &t->eos_token_, &t->unk_token_, &t->pad_token_}) {
      if (*s) specials.push_back(**s);
    }
    for (auto& s : special_list(config, "additional_special_tokens", what)) specials.push_back(s);
    bool add_bos = config.is_object() ? config.value("add_bos_token", true) : true;
    bool add_eos = config.is_object() ? config.value("add_eos_token", false) : false;
    t->backend_ = tok::make_sentencepiece_backend(path, add_bos, add_eos, specials);
    register_specials(*t, *t->backend_, Json::object(), {}, what);
    return t;
  }

  // The first ChatGLM-6B's ice_text.model with ChatGLMTokenizer's defaults.
  static std::unique_ptr<Tokenizer> from_chatglm6b(const std::string& path,
                                                   const tok::TokenizerConfig& cfg,
                                                   const std::string& what) {
    const Json& config = cfg.json.is_object() ? cfg.json : Json::object();
    if (tok::config_bool(config, "do_lower_case", false))
      raise<InvalidArgument>("{}: do_lower_case = true is not supported", what);
    tok::ChatGLM6BOptions o;
    const Json* images =
        config.contains("num_image_tokens") ? &config["num_image_tokens"] : nullptr;
    if (images != nullptr) {
      if (!images->is_number_integer() || images->get<int64_t>() < 0 ||
          images->get<int64_t>() > (1 << 24))
        raise<InvalidArgument>("{}: num_image_tokens must be an integer in [0, 2^24]", what);
      o.num_image_tokens = images->get<int32_t>();
    }
    o.remove_space = tok::config_bool(config, "remove_space", false);
    auto t = std::unique_ptr<Tokenizer>(new Tokenizer());
    apply_config(*t, config, what);
    if (!config.contains("clean_up_tokenization_spaces"))
      t->clean_up_tokenization_spaces_ = true;  // transformers 4.27's default
    // Each named token: a special of the backend, and (but the mask) the tokenizer's text.
    const struct {
      const char* key;
      const char* fallback;
      std::optional<std::string> Tokenizer::*text;
    } named[] = {{"bos_token", "<sop>", &Tokenizer::bos_token_},
                 {"eos_token", "<eop>", &Tokenizer::eos_token_},
                 {"unk_token", "<unk>", &Tokenizer::unk_token_},
                 {"pad_token", "<pad>", &Tokenizer::pad_token_},
                 {"mask_token", "[MASK]", nullptr}};
    for (const auto& n : named) {
      auto s = chatglm6b_special(config, n.key, n.fallback, what);
      if (s) o.specials.push_back(*s);
      if (n.text != nullptr)
        (*t).*n.text = s ? std::optional<std::string>(s->content) : std::nullopt;
    }
    for (const auto& s : special_list(config, "additional_special_tokens", what))
      o.specials.push_back({s});
    if (!t->bos_token_) raise<InvalidArgument>("{}: ChatGLM-6B needs its bos_token (<sop>)", what);
    o.bos_token = *t->bos_token_;
    if (auto g = chatglm6b_special(config, "gmask_token", "[gMASK]", what))
      o.gmask_token = g->content;
    o.pad_token = t->pad_token_;
    t->backend_ = tok::make_chatglm6b_backend(path, o);
    register_specials(*t, *t->backend_, config, {}, what);
    return t;
  }
};

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                                std::string_view tokenizer_config_json) {
  auto config = tok::parse_tokenizer_config(
      tokenizer_config_json.empty() ? "{}" : tokenizer_config_json, "tokenizer_config.json");
  return TokenizerBuilder::from_hf(tokenizer_json, config, "tokenizer.json");
}

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  if (!fs::is_directory(root)) raise<NotFound>("tokenizer directory '{}' does not exist", dir);
  tok::TokenizerConfig cfg;
  const std::string config_path = (root / "tokenizer_config.json").string();
  if (file_exists(config_path))
    cfg = tok::parse_tokenizer_config(read_file(config_path), config_path);
  Json& config = cfg.json;
  // Older checkpoints keep the special tokens in special_tokens_map.json.
  const std::string map_path = (root / "special_tokens_map.json").string();
  if (file_exists(map_path)) {
    Json m = load_json_file(map_path);
    if (m.is_object()) {
      for (const auto& [k, v] : m.items()) {
        if (!config.contains(k)) config[k] = v;
      }
    }
  }
  const std::string jinja = (root / "chat_template.jinja").string();
  std::unique_ptr<Tokenizer> t;
  const std::string json_path = (root / "tokenizer.json").string();
  const std::string model_path = (root / "tokenizer.model").string();
  if (file_exists(json_path)) {
    auto file = MappedFile::open(json_path);
    t = TokenizerBuilder::from_hf(
        std::string_view(reinterpret_cast<const char*>(file->data()), file->size()), cfg,
        json_path);
  } else if (file_exists(model_path)) {
    t = is_sentencepiece_model(model_path)
            ? TokenizerBuilder::from_sentencepiece(model_path, cfg, model_path)
            : TokenizerBuilder::from_tiktoken(model_path, cfg, model_path);
  } else if (const std::string ice = (root / "ice_text.model").string(); file_exists(ice)) {
    // The first ChatGLM-6B's vocabulary file (ChatGLMTokenizer.vocab_files_names).
    t = TokenizerBuilder::from_chatglm6b(ice, cfg, ice);
  } else {
    std::string tiktoken;
    for (const auto& e : fs::directory_iterator(root)) {
      if (e.path().extension() == ".tiktoken") tiktoken = e.path().string();
    }
    if (tiktoken.empty()) {
      raise<NotFound>("'{}' has no tokenizer.json, tokenizer.model, ice_text.model or *.tiktoken",
                      dir);
    }
    t = TokenizerBuilder::from_tiktoken(tiktoken, cfg, tiktoken);
  }
  // As transformers: template files, when there are any, replace the config's.
  std::vector<ChatTemplateSource> files;
  if (file_exists(jinja)) files.push_back({"default", read_file(jinja)});
  const fs::path extra = root / "additional_chat_templates";
  if (fs::is_directory(extra)) {
    for (const auto& e : fs::directory_iterator(extra)) {
      if (e.path().extension() == ".jinja") {
        files.push_back({e.path().stem().string(), read_file(e.path().string())});
      }
    }
  }
  if (!files.empty()) t->chat_templates_ = std::move(files);
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return backend_->encode(text, add_special_tokens, {});
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens,
                                       std::span<const TextRange> plain) const {
  return backend_->encode(text, add_special_tokens, plain);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string s = backend_->decode(ids, skip_special_tokens);
  if (clean_up_tokenization_spaces_) s = tok::cleanup_tokenization_spaces(s);
  return s;
}

int32_t Tokenizer::vocab_size() const {
  return backend_->vocab_size();
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  return backend_->token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  return backend_->id_to_token(id).value_or("");
}

bool Tokenizer::is_special(int32_t id) const {
  return backend_->is_special(id);
}

std::optional<std::string> Tokenizer::chat_template(std::string_view name) const {
  for (const auto& c : chat_templates_) {
    if (c.name == name) return c.source;
  }
  return std::nullopt;
}

}  // namespace tachyon

namespace tachyon {

std::shared_ptr<const ChatTemplate> Tokenizer::compiled_template(const std::string& name) const {
  std::lock_guard<std::mutex> lock(chat_mu_);
  auto it = compiled_.find(name);
  if (it != compiled_.end()) return it->second;
  auto source = chat_template(name);
  if (!source) raise<InvalidArgument>("the tokenizer has no chat template named '{}'", name);
  auto compiled = std::make_shared<const ChatTemplate>(ChatTemplate::compile(*source));
  compiled_.emplace(name, compiled);
  return compiled;
}

template <typename J>
ChatEncoding Tokenizer::apply_chat_template_impl(const BasicChatRequest<J>& request) const {
  ChatTemplateSet set;
  for (const auto& c : chat_templates_) set.templates[c.name] = c.source;
  if (set.empty()) {
    raise<InvalidArgument>(
        "cannot apply a chat template: the tokenizer has none (no chat_template in "
        "tokenizer_config.json and no chat_template.jinja)");
  }
  const bool has_tools = !request.tools.is_null() && !request.tools.empty();
  const std::string& source = set.select(request.template_name, has_tools);
  std::string name;
  for (const auto& [n, src] : set.templates) {
    if (&src == &source) name = n;
  }
  auto tmpl = compiled_template(name);
  BasicChatTemplateInputs<J> in;
  in.messages = request.messages;
  in.add_generation_prompt = request.add_generation_prompt;
  in.tools = request.tools;
  in.documents = request.documents;
  in.extra = request.extra.is_null() ? J::object() : request.extra;
  in.bos_token = bos_token_.value_or("");
  in.eos_token = eos_token_.value_or("");
  in.pad_token = pad_token_.value_or("");
  in.unk_token = unk_token_.value_or("");
  RenderedChat r = tmpl->render_marked(in);
  ChatEncoding out;
  out.rendered = std::move(r.text);
  std::vector<TextRange> plain;
  if (!request.special_tokens_in_content) {
    plain.reserve(r.untrusted.size());
    for (const auto& s : r.untrusted) plain.push_back({s.begin, s.end});
  }
  out.ids = encode(out.rendered, /*add_special_tokens=*/false, plain);
  return out;
}

ChatEncoding Tokenizer::apply_chat_template(const ChatRequest& request) const {
  return apply_chat_template_impl(request);
}

ChatEncoding Tokenizer::apply_chat_template(const OrderedChatRequest& request) const {
  return apply_chat_template_impl(request);
}

}  // namespace tachyon
