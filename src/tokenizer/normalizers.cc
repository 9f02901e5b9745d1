// Normalizers of tokenizer.json.
#include <utf8proc.h>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tachyon::tok {
namespace {

template <typename Fn>
void for_each_char(std::string_view s, Fn&& fn) {
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t c = utf8::decode_valid(s.data() + i, len);
    fn(c, s.substr(i, len));
    i += len;
  }
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Form f) : form_(f) {}
  void normalize(std::string& s) const override { s = unicode::normalize(s, form_); }

 private:
  unicode::Form form_;
};

class Lowercase : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for_each_char(s, [&](char32_t c, std::string_view) { unicode::append_lowercase(out, c); });
    s.swap(out);
  }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override {
    size_t b = 0, e = s.size();
    if (left_) {
      while (b < e) {
        size_t len;
        if (!unicode::is_whitespace(utf8::decode_valid(s.data() + b, len))) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t len;
        if (!unicode::is_whitespace(utf8::decode_valid(s.data() + start, len))) break;
        e = start;
      }
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class StripAccents : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for_each_char(s, [&](char32_t c, std::string_view bytes) {
      if (!unicode::is_mark_nonspacing(c)) out.append(bytes);
    });
    s.swap(out);
  }
};

class Replace : public Normalizer {
 public:
  Replace(const Json& j, const std::string& path) {
    const Json& pat = field(j, "pattern", path);
    content_ = get_string(j, "content", path);
    if (pat.is_object() && pat.contains("String")) {
      literal_ = get_string(pat, "String", path + ".pattern");
    } else if (pat.is_object() && pat.contains("Regex")) {
      regex_ = std::make_unique<Regex>(get_string(pat, "Regex", path + ".pattern"),
                                       path + ".pattern.Regex");
    } else {
      raise<InvalidArgument>("{}.pattern: expected {{\"String\": ...}} or {{\"Regex\": ...}}",
                             path);
    }
  }
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    if (regex_) {
      size_t prev = 0;
      regex_->for_each_match(s, [&](size_t b, size_t e) {
        out.append(s, prev, b - prev);
        out.append(content_);
        prev = e;
      });
      out.append(s, prev, std::string::npos);
    } else {
      if (literal_.empty()) return;
      size_t prev = 0;
      for (size_t pos; (pos = s.find(literal_, prev)) != std::string::npos;) {
        out.append(s, prev, pos - prev);
        out.append(content_);
        prev = pos + literal_.size();
      }
      if (prev == 0) return;
      out.append(s, prev, std::string::npos);
    }
    s.swap(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prepend_(std::move(p)) {}
  void normalize(std::string& s) const override {
    if (!s.empty()) s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip, bool lower)
      : clean_(clean), chinese_(chinese), strip_(strip), lower_(lower) {}
  void normalize(std::string& s) const override {
    std::string out;
    if (clean_) {
      out.reserve(s.size());
      for_each_char(s, [&](char32_t c, std::string_view bytes) {
        if (c == '\t' || c == '\n' || c == '\r') {
          out.push_back(' ');
          return;
        }
        if (c == 0 || c == 0xFFFD || unicode::is_other(c)) return;
        if (unicode::is_whitespace(c)) {
          out.push_back(' ');
        } else {
          out.append(bytes);
        }
      });
      s.swap(out);
      out.clear();
    }
    if (chinese_) {
      for_each_char(s, [&](char32_t c, std::string_view bytes) {
        if (unicode::is_chinese_char(c)) {
          out.push_back(' ');
          out.append(bytes);
          out.push_back(' ');
        } else {
          out.append(bytes);
        }
      });
      s.swap(out);
      out.clear();
    }
    if (strip_) {
      s = unicode::normalize(s, unicode::Form::kNFD);
      StripAccents().normalize(s);
    }
    if (lower_) Lowercase().normalize(s);
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

class Nmt : public Normalizer {
 public:
  void normalize(std::string& s) const override {
    std::string out;
    out.reserve(s.size());
    for_each_char(s, [&](char32_t c, std::string_view bytes) {
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
          c == 0x8F || c == 0x9F) {
        return;
      }
      if (c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
          (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
          c == 0xFEFF || c == 0xFFFD) {
        out.push_back(' ');
      } else {
        out.append(bytes);
      }
    });
    s.swap(out);
  }
};

class ByteLevelNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> v) : items_(std::move(v)) {}
  void normalize(std::string& s) const override {
    for (const auto& n : items_) n->normalize(s);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> items_;
};

}  // namespace

std::string byte_level_encode(std::string_view bytes);

void ByteLevelNormalizer::normalize(std::string& s) const {
  s = byte_level_encode(s);
}

std::unique_ptr<Normalizer> make_normalizer(const Json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, path);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::Form::kNFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::Form::kNFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::Form::kNFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::Form::kNFKD);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Strip") {
    return std::make_unique<Strip>(get_bool(j, "strip_left", true, path),
                                   get_bool(j, "strip_right", true, path));
  }
  if (type == "StripAccents") return std::make_unique<StripAccents>();
  if (type == "Replace") return std::make_unique<Replace>(j, path);
  if (type == "Prepend") return std::make_unique<Prepend>(get_string(j, "prepend", path));
  if (type == "Nmt") return std::make_unique<Nmt>();
  if (type == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (type == "Precompiled") {
    return make_precompiled_normalizer(get_string(j, "precompiled_charsmap", path),
                                       path + ".precompiled_charsmap");
  }
  if (type == "BertNormalizer") {
    bool lower = get_bool(j, "lowercase", true, path);
    bool strip = lower;
    if (j.contains("strip_accents") && !j["strip_accents"].is_null()) {
      strip = get_bool(j, "strip_accents", lower, path);
    }
    return std::make_unique<BertNormalizer>(get_bool(j, "clean_text", true, path),
                                            get_bool(j, "handle_chinese_chars", true, path), strip,
                                            lower);
  }
  if (type == "Sequence") {
    const Json& list = field(j, "normalizers", path);
    if (!list.is_array()) raise<InvalidArgument>("{}.normalizers: expected an array", path);
    std::vector<std::unique_ptr<Normalizer>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      auto n = make_normalizer(list[i], fmt::format("{}.normalizers[{}]", path, i));
      if (n) items.push_back(std::move(n));
    }
    return std::make_unique<Sequence>(std::move(items));
  }
  raise<InvalidArgument>("{}.type: unsupported normalizer '{}'", path, type);
}

}  // namespace tachyon::tok
