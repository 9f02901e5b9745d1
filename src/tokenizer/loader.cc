#include "tokenizer/loader.h"

#include <simdjson.h>

#include <cmath>

#include "core/base64.h"
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/models.h"
#include "tokenizer/precompiled.h"

namespace tachyon::tok {

struct TokenizerJson::Raw {
  simdjson::dom::parser parser;
  simdjson::padded_string text;
  simdjson::dom::element vocab, merges;
  bool has_vocab = false, has_merges = false;
};

TokenizerJson::TokenizerJson() = default;
TokenizerJson::~TokenizerJson() = default;

namespace {

Json to_nlohmann(const simdjson::dom::element& e, const std::string& what) {
  return parse_json(simdjson::to_string(e), what);
}

std::string_view get_sv(const simdjson::dom::element& e, const std::string& what) {
  std::string_view s;
  if (e.get_string().get(s)) raise<InvalidArgument>("{}: expected a string", what);
  return s;
}

Vocab read_vocab_object(const simdjson::dom::element& e, const std::string& what) {
  simdjson::dom::object obj;
  if (e.get_object().get(obj)) raise<InvalidArgument>("{}: expected an object of token: id", what);
  Vocab v;
  v.reserve(obj.size());
  // In batches, in file order: hash and prefetch the slots of a batch, then insert it.
  constexpr size_t kBatch = 16;
  std::string_view keys[kBatch];
  uint64_t hashes[kBatch];
  int32_t ids[kBatch];
  size_t n = 0;
  auto flush = [&] {
    for (size_t i = 0; i < n; ++i) v.add(keys[i], hashes[i], ids[i], what);
    n = 0;
  };
  for (auto kv : obj) {
    int64_t id;
    if (kv.value.get_int64().get(id) || id < 0 || id > INT32_MAX) {
      flush();  // earlier entries' errors first
      raise<InvalidArgument>("{}['{}']: expected a non-negative integer id", what, kv.key);
    }
    keys[n] = kv.key;
    hashes[n] = hash_bytes(kv.key);
    ids[n] = static_cast<int32_t>(id);
    v.prefetch(hashes[n]);
    if (++n == kBatch) flush();
  }
  flush();
  return v;
}

bool sj_bool(const simdjson::dom::object& o, const char* key, bool fallback,
             const std::string& path) {
  simdjson::dom::element e;
  if (o.at_key(key).get(e) || e.is_null()) return fallback;
  bool b;
  if (e.get_bool().get(b)) raise<InvalidArgument>("{}.{}: expected true or false", path, key);
  return b;
}

// An AddedToken object; `id` is taken from the object unless given.
AddedToken read_added_token(const simdjson::dom::element& e, const std::string& path,
                            std::optional<int32_t> id) {
  simdjson::dom::object o;
  if (e.get_object().get(o)) raise<InvalidArgument>("{}: expected an object", path);
  AddedToken t;
  if (id) {
    t.id = *id;
  } else {
    int64_t v;
    if (o.at_key("id").get_int64().get(v) || v < 0 || v > INT32_MAX) {
      raise<InvalidArgument>("{}.id: expected a token id", path);
    }
    t.id = static_cast<int32_t>(v);
  }
  std::string_view content;
  if (o.at_key("content").get_string().get(content)) {
    raise<InvalidArgument>("{}.content: expected a string", path);
  }
  t.content = std::string(content);
  t.special = sj_bool(o, "special", false, path);
  t.single_word = sj_bool(o, "single_word", false, path);
  t.lstrip = sj_bool(o, "lstrip", false, path);
  t.rstrip = sj_bool(o, "rstrip", false, path);
  t.normalized = sj_bool(o, "normalized", !t.special, path);
  return t;
}

std::optional<std::string> opt_string(const Json& j, const char* key, const std::string& path) {
  auto s = get_opt_string(j, key, path);
  if (s && s->empty()) return std::nullopt;
  return s;
}

std::unique_ptr<Model> build_model(const TokenizerJson& tj) {
  const std::string path = tj.what + ": model";
  const Json& m = tj.model;
  if (!m.is_object()) raise<InvalidArgument>("{}: expected an object", path);
  const auto& raw = *tj.raw;
  std::string type;
  if (m.contains("type")) {
    type = get_string(m, "type", path);
  } else if (raw.has_merges) {
    type = "BPE";
  } else if (m.contains("unk_id")) {
    type = "Unigram";
  } else if (m.contains("max_input_chars_per_word")) {
    type = "WordPiece";
  } else {
    type = "WordLevel";
  }
  if (!raw.has_vocab) raise<InvalidArgument>("{}.vocab: missing", path);
  if (type == "BPE") {
    Vocab vocab = read_vocab_object(raw.vocab, path + ".vocab");
    std::vector<std::pair<std::string_view, std::string_view>> merges;
    if (raw.has_merges) {
      simdjson::dom::array arr;
      if (raw.merges.get_array().get(arr))
        raise<InvalidArgument>("{}.merges: expected an array", path);
      merges.reserve(arr.size());
      size_t i = 0;
      // The item's path, only built for a message.
      auto p = [&] { return path + ".merges[" + std::to_string(i) + "]"; };
      for (auto item : arr) {
        std::string_view s;
        if (!item.get_string().get(s)) {
          size_t sp = s.find(' ');
          if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
            raise<InvalidArgument>("{}: expected 'left right', got '{}'", p(), s);
          }
          merges.push_back({s.substr(0, sp), s.substr(sp + 1)});
        } else {
          simdjson::dom::array pair;
          std::string_view left, right;
          if (item.get_array().get(pair) || pair.size() != 2) {
            raise<InvalidArgument>("{}: expected a string or a pair of strings", p());
          }
          auto it = pair.begin();
          if ((*it).get_string().get(left) || (*++it).get_string().get(right)) {
            raise<InvalidArgument>("{}: expected a string", p());
          }
          merges.push_back({left, right});
        }
        ++i;
      }
    }
    BpeOptions o;
    o.unk_token = opt_string(m, "unk_token", path);
    o.continuing_subword_prefix = get_opt_string(m, "continuing_subword_prefix", path).value_or("");
    o.end_of_word_suffix = get_opt_string(m, "end_of_word_suffix", path).value_or("");
    o.fuse_unk = get_bool(m, "fuse_unk", false, path);
    o.byte_fallback = get_bool(m, "byte_fallback", false, path);
    o.ignore_merges = get_bool(m, "ignore_merges", false, path);
    return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(o), path);
  }
  if (type == "WordPiece") {
    WordPieceOptions o;
    o.unk_token = get_opt_string(m, "unk_token", path).value_or("[UNK]");
    o.continuing_subword_prefix =
        get_opt_string(m, "continuing_subword_prefix", path).value_or("##");
    int64_t mx = get_int(m, "max_input_chars_per_word", 100, path);
    if (mx < 0) raise<InvalidArgument>("{}.max_input_chars_per_word: must be >= 0", path);
    o.max_input_chars_per_word = static_cast<size_t>(mx);
    return std::make_unique<WordPieceModel>(read_vocab_object(raw.vocab, path + ".vocab"),
                                            std::move(o), path);
  }
  if (type == "WordLevel") {
    return std::make_unique<WordLevelModel>(read_vocab_object(raw.vocab, path + ".vocab"),
                                            get_opt_string(m, "unk_token", path).value_or(""),
                                            path);
  }
  if (type == "Unigram") {
    simdjson::dom::array arr;
    if (raw.vocab.get_array().get(arr)) raise<InvalidArgument>("{}.vocab: expected an array", path);
    std::vector<std::pair<std::string, double>> pieces;
    pieces.reserve(arr.size());
    size_t i = 0;
    for (auto item : arr) {
      const std::string p = path + ".vocab[" + std::to_string(i++) + "]";
      simdjson::dom::array pair;
      double score;
      if (item.get_array().get(pair) || pair.size() != 2 || pair.at(1).get_double().get(score) ||
          !std::isfinite(score)) {
        raise<InvalidArgument>("{}: expected [piece, score]", p);
      }
      pieces.push_back({std::string(get_sv(pair.at(0).value_unsafe(), p)), score});
    }
    std::optional<int32_t> unk;
    if (m.contains("unk_id") && !m["unk_id"].is_null()) {
      int64_t u = get_int(m, "unk_id", 0, path);
      if (u < 0 || u > INT32_MAX) raise<InvalidArgument>("{}.unk_id: out of range", path);
      unk = static_cast<int32_t>(u);
    }
    return std::make_unique<UnigramModel>(std::move(pieces), unk,
                                          get_bool(m, "byte_fallback", false, path), path);
  }
  raise<InvalidArgument>("{}.type: unsupported model '{}'", path, type);
}

}  // namespace

std::unique_ptr<TokenizerJson> parse_tokenizer_json(std::string_view text,
                                                    const std::string& what) {
  auto tj = std::make_unique<TokenizerJson>();
  tj->what = what;
  tj->raw = std::make_unique<TokenizerJson::Raw>();
  auto& raw = *tj->raw;
  raw.text = simdjson::padded_string(text);
  simdjson::dom::element doc;
  if (auto err = raw.parser.parse(raw.text).get(doc)) {
    raise<InvalidArgument>("{}: invalid JSON: {}", what, simdjson::error_message(err));
  }
  simdjson::dom::object top;
  if (doc.get_object().get(top)) raise<InvalidArgument>("{}: expected a JSON object", what);
  bool has_model = false;
  for (auto kv : top) {
    const std::string key(kv.key);
    if (key == "model") {
      has_model = true;
      simdjson::dom::object model;
      if (kv.value.get_object().get(model))
        raise<InvalidArgument>("{}: model: expected an object", what);
      tj->model = Json::object();
      for (auto mkv : model) {
        if (mkv.key == "vocab") {
          raw.vocab = mkv.value;
          raw.has_vocab = true;
        } else if (mkv.key == "merges") {
          raw.merges = mkv.value;
          raw.has_merges = true;
        } else {
          tj->model[std::string(mkv.key)] =
              to_nlohmann(mkv.value, what + ": model." + std::string(mkv.key));
        }
      }
    } else if (key == "normalizer") {
      tj->normalizer = to_nlohmann(kv.value, what + ": normalizer");
    } else if (key == "pre_tokenizer") {
      tj->pre_tokenizer = to_nlohmann(kv.value, what + ": pre_tokenizer");
    } else if (key == "post_processor") {
      tj->post_processor = to_nlohmann(kv.value, what + ": post_processor");
    } else if (key == "decoder") {
      tj->decoder = to_nlohmann(kv.value, what + ": decoder");
    } else if (key == "added_tokens" && !kv.value.is_null()) {
      simdjson::dom::array arr;
      if (kv.value.get_array().get(arr))
        raise<InvalidArgument>("{}: added_tokens: expected an array", what);
      size_t i = 0;
      for (auto item : arr) {
        tj->added_tokens.push_back(read_added_token(
            item, what + ": added_tokens[" + std::to_string(i++) + "]", std::nullopt));
      }
    }
  }
  if (!has_model) raise<InvalidArgument>("{}: model: missing", what);
  return tj;
}

TokenizerConfig parse_tokenizer_config(std::string_view text, const std::string& what) {
  TokenizerConfig c;
  simdjson::dom::parser parser;
  simdjson::padded_string padded(text);
  simdjson::dom::element doc;
  if (parser.parse(padded).get(doc)) {
    // simdjson rejects integers beyond 64 bits (model_max_length is often 1e30):
    // take the general parser's reading of the whole file then.
    Json j = parse_json(text, what);
    if (!j.is_object()) raise<InvalidArgument>("{}: expected a JSON object", what);
    if (j.contains("added_tokens_decoder")) {
      const std::string minified = j["added_tokens_decoder"].dump();
      j.erase("added_tokens_decoder");
      auto inner = parse_tokenizer_config("{\"added_tokens_decoder\":" + minified + "}", what);
      c.added_tokens_decoder = std::move(inner.added_tokens_decoder);
    }
    c.json = std::move(j);
    return c;
  }
  simdjson::dom::object top;
  if (doc.get_object().get(top)) raise<InvalidArgument>("{}: expected a JSON object", what);
  for (auto kv : top) {
    const std::string key(kv.key);
    if (key != "added_tokens_decoder") {
      c.json[key] = to_nlohmann(kv.value, what + ": " + key);
      continue;
    }
    simdjson::dom::object d;
    if (kv.value.get_object().get(d)) {
      raise<InvalidArgument>("{}: added_tokens_decoder: expected an object", what);
    }
    for (auto e : d) {
      const std::string path = what + ": added_tokens_decoder." + std::string(e.key);
      int64_t id = 0;
      bool ok = !e.key.empty() && e.key.size() <= 10;
      for (char ch : e.key) {
        ok = ok && ch >= '0' && ch <= '9';
        if (ok) id = id * 10 + (ch - '0');
      }
      if (!ok || id > INT32_MAX) raise<InvalidArgument>("{}: key is not a token id", path);
      c.added_tokens_decoder.push_back(read_added_token(e.value, path, static_cast<int32_t>(id)));
    }
  }
  return c;
}

std::unique_ptr<HfPipeline> build_pipeline(const TokenizerJson& tj) {
  auto p = std::make_unique<HfPipeline>();
  p->normalizer = make_normalizer(tj.normalizer, tj.what + ": normalizer");
  p->pre_tokenizer = make_pre_tokenizer(tj.pre_tokenizer, tj.what + ": pre_tokenizer");
  p->post_processor = make_post_processor(tj.post_processor, tj.what + ": post_processor");
  p->decoder = make_decoder(tj.decoder, tj.what + ": decoder");
  p->model = build_model(tj);
  for (const AddedToken& t : tj.added_tokens) {
    if (!utf8::is_valid(t.content)) {
      raise<InvalidArgument>("{}: added_tokens: content of token {} is not valid UTF-8", tj.what,
                             t.id);
    }
    p->added.add(t);
  }
  p->added.build(p->normalizer.get());
  return p;
}

std::unique_ptr<HfPipeline> build_tiktoken_pipeline(
    std::string_view text, const std::string& what, const std::string& pattern,
    const std::vector<std::pair<std::string, int32_t>>& specials) {
  Vocab vocab;
  std::vector<std::string> by_rank;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    if (sp == std::string_view::npos) {
      raise<InvalidArgument>("{}:{}: expected 'base64-token rank'", what, line_no);
    }
    std::string bytes = base64_decode(line.substr(0, sp), what + ":" + std::to_string(line_no));
    int64_t rank = 0;
    std::string_view num = line.substr(sp + 1);
    if (num.empty() || num.size() > 9) raise<InvalidArgument>("{}:{}: bad rank", what, line_no);
    for (char c : num) {
      if (c < '0' || c > '9') raise<InvalidArgument>("{}:{}: bad rank '{}'", what, line_no, num);
      rank = rank * 10 + (c - '0');
    }
    if (bytes.empty()) raise<InvalidArgument>("{}:{}: empty token", what, line_no);
    std::string token = byte_level_encode(bytes);
    vocab.add(token, static_cast<int32_t>(rank), what);
    if (by_rank.size() <= static_cast<size_t>(rank)) by_rank.resize(static_cast<size_t>(rank) + 1);
    by_rank[rank] = std::move(bytes);
  }
  // tiktoken merges the adjacent pair whose concatenation has the lowest rank: every
  // split of a multi-byte token into two tokens is a merge with that token's rank.
  PairMap merges;
  std::string left, right;
  for (size_t r = 0; r < by_rank.size(); ++r) {
    const std::string& b = by_rank[r];
    if (b.size() < 2) continue;
    for (size_t k = 1; k < b.size(); ++k) {
      auto a = vocab.find(byte_level_encode(std::string_view(b).substr(0, k)));
      auto c = vocab.find(byte_level_encode(std::string_view(b).substr(k)));
      if (a && c) merges.insert(*a, *c, {static_cast<uint32_t>(r), static_cast<int32_t>(r)});
    }
  }
  auto p = std::make_unique<HfPipeline>();
  p->pre_tokenizer = make_pre_tokenizer(
      Json{{"type", "Sequence"},
           {"pretokenizers",
            {{{"type", "Split"},
              {"pattern", {{"Regex", pattern}}},
              {"behavior", "Isolated"},
              {"invert", false}},
             {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}},
      what + ": pre_tokenizer");
  p->decoder = make_decoder(Json{{"type", "ByteLevel"}}, what + ": decoder");
  BpeOptions o;
  o.ignore_merges = true;  // a whole chunk that is a token is that token
  p->model = std::make_unique<BpeModel>(std::move(vocab), std::move(merges), std::move(o));
  for (const auto& [content, id] : specials) {
    p->added.add({content, id, true, false, false, false, false});
  }
  p->added.build(nullptr);
  return p;
}

}  // namespace tachyon::tok
