// Decoders of tokenizer.json: each rewrites the list of token strings; the decoded text
// is their concatenation.
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/regex.h"

namespace tachyon::tok {
namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) byte_level_decode(t, bytes);
    tokens.assign(1, utf8::sanitize(bytes));
  }
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(char32_t rep, bool strip_first) : rep_(utf8::encode(rep)), strip_(strip_first) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t k = 0; k < t.size();) {
        if (t.compare(k, rep_.size(), rep_) == 0) {
          if (!(i == 0 && strip_)) out.push_back(' ');
          k += rep_.size();
        } else {
          out.push_back(t[k]);
          ++k;
        }
      }
      tokens[i].swap(out);
    }
  }

 private:
  std::string rep_;
  bool strip_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (utf8::is_valid(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back(utf8::kReplacementUtf8);
      }
      pending.clear();
    };
    for (auto& t : tokens) {
      int byte = parse_byte(t);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens.swap(out);
  }

 private:
  // "<0xXX>" -> XX (as u8::from_str_radix reads the two characters), else -1.
  static int parse_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (t[3] == '+') return hex(t[4]);
    int hi = hex(t[3]), lo = hex(t[4]);
    if (hi < 0 || lo < 0) return -1;
    return hi * 16 + lo;
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all.append(t);
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) {
      std::vector<std::pair<size_t, size_t>> chars;  // (offset, length)
      for (size_t i = 0; i < t.size();) {
        size_t len;
        utf8::decode(t, i, len);
        chars.push_back({i, len});
        i += len;
      }
      auto is_content = [&](size_t k) {
        size_t len;
        return utf8::decode(t, chars[k].first, len) == content_;
      };
      size_t cut_start = 0;
      for (size_t k = 0; k < start_ && k < chars.size(); ++k) {
        if (!is_content(k)) break;
        cut_start = k + 1;
      }
      size_t cut_stop = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        size_t index = chars.size() - k - 1;
        if (!is_content(index)) break;
        cut_stop = index;
      }
      if (cut_stop <= cut_start) {
        t.clear();
        continue;
      }
      size_t b = cut_start < chars.size() ? chars[cut_start].first : t.size();
      size_t e = cut_stop < chars.size() ? chars[cut_stop].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const Json& j, const std::string& path) {
    // Same shape as the Replace normalizer; reuse it on every token.
    norm_ = make_normalizer(Json{{"type", "Replace"},
                                 {"pattern", field(j, "pattern", path)},
                                 {"content", get_string(j, "content", path)}},
                            path);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (auto& t : tokens) norm_->normalize(t);
  }

 private:
  std::unique_ptr<Normalizer> norm_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup)
      : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) {
          t.erase(0, prefix_.size());
        } else {
          t.insert(0, " ");
        }
      }
      if (cleanup_) t = cleanup_tokenization_spaces(t, /*wordpiece=*/true);
    }
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      std::string rep = i + 1 == tokens.size() ? "" : " ";
      std::string out;
      size_t prev = 0;
      for (size_t pos; !suffix_.empty() && (pos = t.find(suffix_, prev)) != std::string::npos;) {
        out.append(t, prev, pos - prev);
        out.append(rep);
        prev = pos + suffix_.size();
      }
      out.append(t, prev, std::string::npos);
      t.swap(out);
    }
  }

 private:
  std::string suffix_;
};

class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delim, bool cleanup)
      : pad_(std::move(pad)), delim_(std::move(delim)), cleanup_(cleanup) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;  // collapse repeats
      std::string t;
      const std::string& raw = tokens[i];
      for (size_t p = 0; p < raw.size();) {
        if (!pad_.empty() && raw.compare(p, pad_.size(), pad_) == 0) {
          p += pad_.size();
        } else {
          t.push_back(raw[p++]);
        }
      }
      if (cleanup_) {
        t = cleanup_tokenization_spaces(t, /*wordpiece=*/true);
        std::string r;
        for (size_t p = 0; p < t.size();) {
          if (!delim_.empty() && t.compare(p, delim_.size(), delim_) == 0) {
            r.push_back(' ');
            p += delim_.size();
          } else {
            r.push_back(t[p++]);
          }
        }
        t.swap(r);
      }
      if (!t.empty()) out.push_back(std::move(t));
    }
    tokens.swap(out);
  }

 private:
  std::string pad_, delim_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> v) : items_(std::move(v)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& d : items_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> items_;
};

}  // namespace

std::string cleanup_tokenization_spaces(std::string_view text, bool wordpiece) {
  static const std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  std::string s(text);
  for (const auto& [from, to] : kRules) {
    if (!wordpiece && from == " do not") continue;
    if (s.find(from) == std::string::npos) continue;
    std::string out;
    size_t prev = 0;
    for (size_t pos; (pos = s.find(from, prev)) != std::string::npos;) {
      out.append(s, prev, pos - prev);
      out.append(to);
      prev = pos + from.size();
    }
    out.append(s, prev, std::string::npos);
    s.swap(out);
  }
  return s;
}

std::unique_ptr<Decoder> make_decoder(const Json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, path);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    bool strip = true;
    if (j.contains("prepend_scheme")) {
      strip = get_string(j, "prepend_scheme", path) != "never";
    } else if (j.contains("add_prefix_space")) {
      strip = get_bool(j, "add_prefix_space", true, path);
    }
    return std::make_unique<MetaspaceDecoder>(get_char(j, "replacement", 0x2581, path), strip);
  }
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    int64_t start = get_int(j, "start", 0, path), stop = get_int(j, "stop", 0, path);
    if (start < 0 || stop < 0) raise<InvalidArgument>("{}: start/stop must be >= 0", path);
    return std::make_unique<StripDecoder>(get_char(j, "content", ' ', path),
                                          static_cast<size_t>(start), static_cast<size_t>(stop));
  }
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, path);
  if (type == "WordPiece") {
    return std::make_unique<WordPieceDecoder>(get_opt_string(j, "prefix", path).value_or("##"),
                                              get_bool(j, "cleanup", true, path));
  }
  if (type == "BPEDecoder") {
    return std::make_unique<BpeDecoder>(get_opt_string(j, "suffix", path).value_or("</w>"));
  }
  if (type == "CTC") {
    return std::make_unique<CtcDecoder>(
        get_opt_string(j, "pad_token", path).value_or("<pad>"),
        get_opt_string(j, "word_delimiter_token", path).value_or("|"),
        get_bool(j, "cleanup", true, path));
  }
  if (type == "Sequence") {
    const Json& list = field(j, "decoders", path);
    if (!list.is_array()) raise<InvalidArgument>("{}.decoders: expected an array", path);
    std::vector<std::unique_ptr<Decoder>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      auto d = make_decoder(list[i], fmt::format("{}.decoders[{}]", path, i));
      if (d) items.push_back(std::move(d));
    }
    return std::make_unique<SequenceDecoder>(std::move(items));
  }
  raise<InvalidArgument>("{}.type: unsupported decoder '{}'", path, type);
}

}  // namespace tachyon::tok
