// The first ChatGLM-6B's tokenizer (THUDM/chatglm-6b: tokenizer_class
// "ChatGLMTokenizer" over ice_text.model, its own tokenization_chatglm.py), as
// transformers 4.27 (the version the checkpoint names) runs it:
//   - ids are the SentencePiece ids plus num_image_tokens (tokenizer_config.json; the
//     class default is 20000); the ids below that are image tokens, "<image_N>";
//   - the text is first split on the special tokens (bos, eos, unk, pad and mask tokens,
//     additional_special_tokens), and the whitespace on both sides of each is stripped
//     (plain-string special tokens; an AddedToken object strips as its lstrip / rstrip
//     say); [gMASK] is not among them and reaches SentencePiece like any text;
//   - each remaining piece, with remove_space, has its whitespace runs collapsed; then
//     "\n" becomes <n>, a tab <|tab|>, and every run of 2..80 spaces <|blank_N|> (runs
//     longer than 80 as blocks of 80 first), and SentencePiece encodes it;
//   - with special tokens, [gMASK] <sop> are appended;
//   - decoding drops <pad> (and the special ids with skip_special_tokens), decodes the
//     SentencePiece pieces and turns <n>, <|tab|> and <|blank_N|> back; image ids decode
//     to nothing.
#include <sentencepiece_processor.h>

#include <algorithm>
#include <string>

#include "chat/jinja_strings.h"
#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/backend.h"

namespace tachyon::tok {
namespace {

constexpr int kMaxBlank = 80;

// The byte length of the whitespace at the start (or end) of s, as str.lstrip / rstrip
// remove it.
size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    size_t len = 0;
    if (!jinja::py_isspace(utf8::decode(s, i, len))) break;
    i += len;
  }
  return i;
}

size_t trailing_space(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 0;
    if (!jinja::py_isspace(utf8::decode(s, start, len))) break;
    end = start;
  }
  return s.size() - end;
}

// " ".join(text.split()).
std::string collapse_spaces(std::string_view text) {
  std::string out;
  for (const std::string& word : jinja::py_split(text, std::nullopt, -1, false)) {
    if (!out.empty()) out += ' ';
    out += word;
  }
  return out;
}

// SPTokenizer._preprocess: newlines, tabs and runs of spaces as their own tokens.
std::string encode_whitespace(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == '\n') {
      out += "<n>";
      ++i;
    } else if (c == '\t') {
      out += "<|tab|>";
      ++i;
    } else if (c == ' ') {
      size_t n = 0;
      while (i + n < text.size() && text[i + n] == ' ') ++n;
      i += n;
      for (; n >= kMaxBlank; n -= kMaxBlank) out += "<|blank_80|>";
      if (n >= 2) out += "<|blank_" + std::to_string(n) + "|>";
      if (n == 1) out += ' ';
    } else {
      out += c;
      ++i;
    }
  }
  return out;
}

// SPTokenizer.postprocess.
std::string decode_whitespace(std::string_view text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, 3, "<n>") == 0) {
      out += '\n';
      i += 3;
      continue;
    }
    if (text.compare(i, 7, "<|tab|>") == 0) {
      out += '\t';
      i += 7;
      continue;
    }
    if (text.compare(i, 8, "<|blank_") == 0) {
      size_t j = i + 8;
      int n = 0;
      while (j < text.size() && j < i + 10 && text[j] >= '0' && text[j] <= '9')
        n = n * 10 + (text[j++] - '0');
      if (j > i + 8 && text.compare(j, 2, "|>") == 0 && n >= 2 && n <= kMaxBlank &&
          text[i + 8] != '0') {
        out.append(static_cast<size_t>(n), ' ');
        i = j + 2;
        continue;
      }
    }
    out += text[i++];
  }
  return out;
}

class ChatGLM6BBackend : public Backend {
 public:
  ChatGLM6BBackend(const std::string& path, const ChatGLM6BOptions& opts)
      : offset_(opts.num_image_tokens), remove_space_(opts.remove_space) {
    auto status = sp_.Load(path);
    if (!status.ok())
      raise<InvalidArgument>("{}: not a SentencePiece model: {}", path, status.ToString());
    if (offset_ < 0 || offset_ > (1 << 24))
      raise<InvalidArgument>("{}: num_image_tokens {} out of range", path, offset_);
    auto piece_id = [&](const std::string& name, const char* what) {
      auto id = token_to_id(name);
      if (!id || *id < offset_)
        raise<InvalidArgument>("{}: the {} '{}' is not a piece of the SentencePiece model", path,
                               what, name);
      return *id;
    };
    gmask_id_ = piece_id(opts.gmask_token, "gmask_token");
    sop_id_ = piece_id(opts.bos_token, "bos_token");
    for (const ChatGLM6BOptions::Special& s : opts.specials) {
      if (s.content.empty()) continue;
      const int32_t id = piece_id(s.content, "special token");
      if (!is_special(id)) specials_.push_back({s.content, id, s.lstrip, s.rstrip});
    }
    if (opts.pad_token) pad_id_ = piece_id(*opts.pad_token, "pad_token");
  }

  std::vector<int32_t> encode(std::string_view input, bool add_special_tokens,
                              std::span<const TextRange> plain) const override {
    std::string text;
    std::vector<TextRange> ranges;
    sanitize_ranges(input, plain, text, ranges);
    const Regions regions(ranges, text.size());
    // PreTrainedTokenizer.tokenize: split on the specials, then strip their neighbours.
    struct Part {
      std::string_view text;
      int32_t special = -1;  // index into specials_
    };
    std::vector<Part> parts;
    size_t start = 0;
    for (size_t pos = 0; pos < text.size();) {
      // Specials are matched only outside the plain ranges, never across their edges.
      const Regions::Region region =
          ranges.empty() ? Regions::Region{0, text.size(), false} : regions.at(pos);
      if (region.plain) {
        pos = region.end;
        continue;
      }
      int32_t best = -1;
      for (size_t k = 0; k < specials_.size(); ++k) {
        const std::string& c = specials_[k].content;
        if (c.size() <= region.end - pos && text.compare(pos, c.size(), c) == 0 &&
            (best < 0 || c.size() > specials_[static_cast<size_t>(best)].content.size()))
          best = static_cast<int32_t>(k);
      }
      if (best < 0) {
        ++pos;
        continue;
      }
      if (pos > start) parts.push_back({std::string_view(text).substr(start, pos - start)});
      parts.push_back({{}, best});
      pos += specials_[static_cast<size_t>(best)].content.size();
      start = pos;
    }
    if (start < text.size()) parts.push_back({std::string_view(text).substr(start)});
    for (size_t i = 0; i < parts.size(); ++i) {
      if (parts[i].special < 0) continue;
      const Special& s = specials_[static_cast<size_t>(parts[i].special)];
      if (s.rstrip && i + 1 < parts.size() && parts[i + 1].special < 0)
        parts[i + 1].text.remove_prefix(leading_space(parts[i + 1].text));
      if (s.lstrip && i > 0 && parts[i - 1].special < 0)
        parts[i - 1].text.remove_suffix(trailing_space(parts[i - 1].text));
    }
    std::vector<int32_t> ids;
    for (const Part& p : parts) {
      if (p.special >= 0) {
        ids.push_back(specials_[static_cast<size_t>(p.special)].id);
        continue;
      }
      const std::string piece =
          encode_whitespace(remove_space_ ? collapse_spaces(p.text) : std::string(p.text));
      std::vector<int> sp_ids;
      auto status = sp_.Encode(piece, &sp_ids);
      if (!status.ok()) raise<InvalidArgument>("sentencepiece: {}", status.ToString());
      for (int id : sp_ids) ids.push_back(id + offset_);
    }
    if (add_special_tokens) {
      ids.push_back(gmask_id_);
      ids.push_back(sop_id_);
    }
    return ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::vector<int> run;
    for (int32_t id : ids) {
      if (id < offset_ || id >= vocab_size() || id == pad_id_) continue;
      if (skip_special_tokens && is_special(id)) continue;
      run.push_back(id - offset_);
    }
    std::string text;
    sp_.Decode(run, &text);
    return utf8::sanitize(decode_whitespace(text));
  }

  int32_t vocab_size() const override { return offset_ + sp_.GetPieceSize(); }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    if (token.size() > 8 && token.substr(0, 7) == "<image_" && token.back() == '>') {
      int64_t n = 0;
      for (char c : token.substr(7, token.size() - 8)) {
        if (c < '0' || c > '9' || n > offset_) return std::nullopt;
        n = n * 10 + (c - '0');
      }
      if (n < offset_) return static_cast<int32_t>(n);
      return std::nullopt;
    }
    const int id = sp_.PieceToId(token);
    if (id == sp_.unk_id() && token != sp_.IdToPiece(id)) return std::nullopt;
    return id + offset_;
  }

  std::optional<std::string> id_to_token(int32_t id) const override {
    if (id < 0 || id >= vocab_size()) return std::nullopt;
    if (id < offset_) return "<image_" + std::to_string(id) + ">";
    return sp_.IdToPiece(id - offset_);
  }

  bool is_special(int32_t id) const override {
    return std::any_of(specials_.begin(), specials_.end(),
                       [&](const Special& s) { return s.id == id; });
  }

  int32_t add_special_token(std::string_view content) override {
    auto id = token_to_id(content);
    if (!id)
      raise<InvalidArgument>("ChatGLM-6B tokenizer: special token '{}' is not in the vocabulary",
                             content);
    if (!is_special(*id)) specials_.push_back({std::string(content), *id, true, true});
    return *id;
  }

 private:
  struct Special {
    std::string content;
    int32_t id = 0;
    bool lstrip = true;  // strip the whitespace before it
    bool rstrip = true;  // strip the whitespace after it
  };

  sentencepiece::SentencePieceProcessor sp_;
  int32_t offset_ = 0;
  bool remove_space_ = false;
  int32_t gmask_id_ = 0, sop_id_ = 0, pad_id_ = -1;
  std::vector<Special> specials_;
};

}  // namespace

std::unique_ptr<Backend> make_chatglm6b_backend(const std::string& model_path,
                                                const ChatGLM6BOptions& options) {
  return std::make_unique<ChatGLM6BBackend>(model_path, options);
}

}  // namespace tachyon::tok
