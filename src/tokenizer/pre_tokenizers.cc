// Pre-tokenizers of tokenizer.json. Splitting follows `tokenizers`: a pattern yields
// (range, is_match) pieces covering the text, the behaviour decides what is kept and
// how matches attach to their neighbours, and empty pieces are dropped.
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/precompiled.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace tachyon::tok {
namespace {

using Range = std::pair<size_t, size_t>;
using Matches = std::vector<std::pair<Range, bool>>;

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const Json& j, const std::string& path, Behavior fallback) {
  if (!j.contains("behavior")) return fallback;
  std::string b = get_string(j, "behavior", path);
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  raise<InvalidArgument>("{}.behavior: unknown split behavior '{}'", path, b);
}

// Every character for which pred(c) holds is a one-character match.
template <typename Pred>
Matches char_matches(std::string_view s, Pred&& pred) {
  Matches m;
  if (s.empty()) {
    m.push_back({{0, 0}, false});
    return m;
  }
  size_t last = 0;
  for (size_t i = 0; i < s.size();) {
    size_t len;
    char32_t c = utf8::decode_valid(s.data() + i, len);
    if (pred(c)) {
      if (last < i) m.push_back({{last, i}, false});
      m.push_back({{i, i + len}, true});
      last = i + len;
    }
    i += len;
  }
  if (last < s.size()) m.push_back({{last, s.size()}, false});
  return m;
}

Matches literal_matches(std::string_view s, std::string_view lit) {
  Matches m;
  if (s.empty() || lit.empty()) {
    m.push_back({{0, s.size()}, false});
    return m;
  }
  size_t prev = 0;
  for (size_t pos; (pos = s.find(lit, prev)) != std::string_view::npos;) {
    if (prev != pos) m.push_back({{prev, pos}, false});
    m.push_back({{pos, pos + lit.size()}, true});
    prev = pos + lit.size();
  }
  if (prev != s.size()) m.push_back({{prev, s.size()}, false});
  return m;
}

// Applies `behavior` to `matches` of piece `p` and appends the resulting pieces.
void split_piece(const Piece& p, Matches matches, Behavior behavior, Pieces& out) {
  std::vector<std::pair<Range, bool>> splits;  // (range, remove)
  switch (behavior) {
    case Behavior::kIsolated:
      for (auto& [r, m] : matches) splits.push_back({r, false});
      break;
    case Behavior::kRemoved:
      splits = std::move(matches);
      break;
    case Behavior::kContiguous: {
      bool prev_match = false;
      for (auto& [r, m] : matches) {
        if (m == prev_match && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto& [r, m] : matches) {
        if (m && !prev_match && !splits.empty()) {
          splits.back().first.second = r.second;
        } else {
          splits.push_back({r, false});
        }
        prev_match = m;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool prev_match = false;
      for (auto it = matches.rbegin(); it != matches.rend(); ++it) {
        if (it->second && !prev_match && !splits.empty()) {
          splits.back().first.first = it->first.first;
        } else {
          splits.push_back({it->first, false});
        }
        prev_match = it->second;
      }
      std::reverse(splits.begin(), splits.end());
      break;
    }
  }
  for (auto& [r, remove] : splits) {
    if (remove || r.first == r.second) continue;
    out.push_back({p.text.substr(r.first, r.second - r.first), p.at_origin && r.first == 0});
  }
}

template <typename MatchFn>
void split_all(Pieces& pieces, Behavior behavior, MatchFn&& find) {
  Pieces out;
  out.reserve(pieces.size() * 2);
  for (const Piece& p : pieces) split_piece(p, find(p.text), behavior, out);
  pieces.swap(out);
}

Matches invert(Matches m) {
  for (auto& [r, is_match] : m) is_match = !is_match;
  return m;
}

class Split : public PreTokenizer {
 public:
  Split(const Json& j, const std::string& path) {
    const Json& pat = field(j, "pattern", path);
    if (pat.is_object() && pat.contains("String")) {
      literal_ = get_string(pat, "String", path + ".pattern");
    } else if (pat.is_object() && pat.contains("Regex")) {
      regex_ = std::make_unique<Regex>(get_string(pat, "Regex", path + ".pattern"),
                                       path + ".pattern.Regex");
    } else {
      raise<InvalidArgument>("{}.pattern: expected {{\"String\": ...}} or {{\"Regex\": ...}}",
                             path);
    }
    behavior_ = parse_behavior(j, path, Behavior::kRemoved);
    if (!j.contains("behavior")) raise<InvalidArgument>("{}.behavior: missing", path);
    invert_ = get_bool(j, "invert", false, path);
  }
  void pre_tokenize(Pieces& pieces) const override {
    split_all(pieces, behavior_, [&](const std::string& s) {
      Matches m = regex_ ? regex_->find_matches(s) : literal_matches(s, literal_);
      return invert_ ? invert(std::move(m)) : m;
    });
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  Behavior behavior_;
  bool invert_;
};

constexpr std::string_view kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space),
        regex_(use_regex ? std::make_unique<Regex>(kGpt2Pattern, "ByteLevel") : nullptr) {}
  void pre_tokenize(Pieces& pieces) const override {
    if (add_prefix_space_) {
      for (Piece& p : pieces) {
        if (p.text.empty() || p.text[0] != ' ') p.text.insert(0, " ");
      }
    }
    if (regex_) {
      split_all(pieces, Behavior::kIsolated,
                [&](const std::string& s) { return regex_->find_matches(s); });
    }
    for (Piece& p : pieces) p.text = byte_level_encode(p.text);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;
};

class Metaspace : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  Metaspace(char32_t replacement, Prepend prepend, bool split)
      : replacement_(replacement),
        rep_(utf8::encode(replacement)),
        prepend_(prepend),
        split_(split) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (Piece& p : pieces) {
      std::string out;
      out.reserve(p.text.size() + rep_.size());
      for (char c : p.text) {
        if (c == ' ') {
          out.append(rep_);
        } else {
          out.push_back(c);
        }
      }
      bool starts = out.compare(0, rep_.size(), rep_) == 0;
      if (!starts &&
          (prepend_ == Prepend::kAlways || (prepend_ == Prepend::kFirst && p.at_origin))) {
        out.insert(0, rep_);
      }
      p.text.swap(out);
    }
    if (split_) {
      split_all(pieces, Behavior::kMergedWithNext, [&](const std::string& s) {
        return char_matches(s, [&](char32_t c) { return c == replacement_; });
      });
    }
  }

 private:
  char32_t replacement_;
  std::string rep_;
  Prepend prepend_;
  bool split_;
};

class CharSplit : public PreTokenizer {
 public:
  enum class Kind { kWhitespaceSplit, kPunctuation, kDigits, kDelimiter, kBert };
  CharSplit(Kind kind, Behavior behavior, char32_t delim = 0)
      : kind_(kind), behavior_(behavior), delim_(delim) {}
  void pre_tokenize(Pieces& pieces) const override {
    switch (kind_) {
      case Kind::kWhitespaceSplit:
        split_all(pieces, Behavior::kRemoved,
                  [](const std::string& s) { return char_matches(s, unicode::is_whitespace); });
        break;
      case Kind::kPunctuation:
        split_all(pieces, behavior_, [](const std::string& s) { return char_matches(s, is_punc); });
        break;
      case Kind::kDigits:
        split_all(pieces, behavior_,
                  [](const std::string& s) { return char_matches(s, unicode::is_numeric); });
        break;
      case Kind::kDelimiter:
        split_all(pieces, Behavior::kRemoved, [&](const std::string& s) {
          return char_matches(s, [&](char32_t c) { return c == delim_; });
        });
        break;
      case Kind::kBert:
        split_all(pieces, Behavior::kRemoved,
                  [](const std::string& s) { return char_matches(s, unicode::is_whitespace); });
        split_all(pieces, Behavior::kIsolated,
                  [](const std::string& s) { return char_matches(s, is_punc); });
        break;
    }
  }

 private:
  static bool is_punc(char32_t c) {
    if (c < 0x80)
      return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
             (c >= 0x7B && c <= 0x7E);
    return unicode::is_punctuation(c);
  }
  Kind kind_;
  Behavior behavior_;
  char32_t delim_;
};

class Whitespace : public PreTokenizer {
 public:
  Whitespace() : regex_("\\w+|[^\\w\\s]+", "Whitespace") {}
  void pre_tokenize(Pieces& pieces) const override {
    split_all(pieces, Behavior::kRemoved,
              [&](const std::string& s) { return invert(regex_.find_matches(s)); });
  }

 private:
  Regex regex_;
};

class Sequence : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> v) : items_(std::move(v)) {}
  void pre_tokenize(Pieces& pieces) const override {
    for (const auto& p : items_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> items_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const Json& j, const std::string& path) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, path);
  if (type == "Split") return std::make_unique<Split>(j, path);
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevel>(get_bool(j, "add_prefix_space", true, path),
                                       get_bool(j, "use_regex", true, path));
  }
  if (type == "Metaspace") {
    char32_t rep = get_char(j, "replacement", 0x2581, path);
    Metaspace::Prepend scheme = Metaspace::Prepend::kAlways;
    if (j.contains("prepend_scheme")) {
      std::string s = get_string(j, "prepend_scheme", path);
      if (s == "always") {
        scheme = Metaspace::Prepend::kAlways;
      } else if (s == "first") {
        scheme = Metaspace::Prepend::kFirst;
      } else if (s == "never") {
        scheme = Metaspace::Prepend::kNever;
      } else {
        raise<InvalidArgument>("{}.prepend_scheme: unknown value '{}'", path, s);
      }
    } else if (j.contains("add_prefix_space")) {
      scheme = get_bool(j, "add_prefix_space", true, path) ? Metaspace::Prepend::kAlways
                                                           : Metaspace::Prepend::kNever;
    }
    return std::make_unique<Metaspace>(rep, scheme, get_bool(j, "split", true, path));
  }
  if (type == "Whitespace") return std::make_unique<Whitespace>();
  if (type == "WhitespaceSplit") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kWhitespaceSplit, Behavior::kRemoved);
  }
  if (type == "Punctuation") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kPunctuation,
                                       parse_behavior(j, path, Behavior::kIsolated));
  }
  if (type == "Digits") {
    bool individual = get_bool(j, "individual_digits", false, path);
    return std::make_unique<CharSplit>(CharSplit::Kind::kDigits,
                                       individual ? Behavior::kIsolated : Behavior::kContiguous);
  }
  if (type == "CharDelimiterSplit") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kDelimiter, Behavior::kRemoved,
                                       get_char(j, "delimiter", 0, path));
  }
  if (type == "BertPreTokenizer") {
    return std::make_unique<CharSplit>(CharSplit::Kind::kBert, Behavior::kIsolated);
  }
  if (type == "Sequence") {
    const Json& list = field(j, "pretokenizers", path);
    if (!list.is_array()) raise<InvalidArgument>("{}.pretokenizers: expected an array", path);
    std::vector<std::unique_ptr<PreTokenizer>> items;
    for (size_t i = 0; i < list.size(); ++i) {
      auto p = make_pre_tokenizer(list[i], fmt::format("{}.pretokenizers[{}]", path, i));
      if (p) items.push_back(std::move(p));
    }
    return std::make_unique<Sequence>(std::move(items));
  }
  raise<InvalidArgument>("{}.type: unsupported pre-tokenizer '{}'", path, type);
}

}  // namespace tachyon::tok
