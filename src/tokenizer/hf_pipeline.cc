// Running a tokenizer.json pipeline: added tokens are split off first (raw text, then
// normalized text), the rest is normalized, pre-tokenized and given to the model; the
// post-processor adds special tokens. Decoding maps ids to token strings (added tokens
// first) and runs the decoder.
#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/backend.h"
#include "tokenizer/unicode.h"

namespace tachyon::tok {

// ---- AddedVocabulary -----------------------------------------------------------------

void AddedVocabulary::Trie::insert(std::string_view s, int32_t index) {
  if (s.empty()) return;
  uint32_t node = 0;
  first_byte[static_cast<uint8_t>(s[0])] = true;
  for (unsigned char c : s) {
    auto& kids = children[node];
    auto it = std::find_if(kids.begin(), kids.end(), [&](auto& p) { return p.first == c; });
    if (it == kids.end()) {
      uint32_t next = static_cast<uint32_t>(children.size());
      kids.push_back({c, next});
      children.emplace_back();
      token.push_back(-1);
      node = next;
    } else {
      node = it->second;
    }
  }
  if (token[node] < 0) token[node] = index;
}

int32_t AddedVocabulary::Trie::longest(std::string_view text, size_t pos, size_t& len) const {
  if (!first_byte[static_cast<uint8_t>(text[pos])]) return -1;
  uint32_t node = 0;
  int32_t best = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& kids = children[node];
    unsigned char c = static_cast<unsigned char>(text[i]);
    auto it = std::find_if(kids.begin(), kids.end(), [&](auto& p) { return p.first == c; });
    if (it == kids.end()) break;
    node = it->second;
    if (token[node] >= 0) {
      best = token[node];
      len = i + 1 - pos;
    }
  }
  return best;
}

void AddedVocabulary::add(AddedToken t) {
  if (t.content.empty()) return;
  // Replace a token with the same content, or else with the same id.
  std::optional<size_t> at;
  if (auto id = by_content_.find(t.content)) {
    auto it = slot_of_id_.find(*id);
    if (it != slot_of_id_.end()) at = it->second;
  }
  if (!at) {
    auto it = slot_of_id_.find(t.id);
    if (it != slot_of_id_.end()) at = it->second;
  }
  by_content_.insert(t.content, t.id);
  index_of_id_.clear();
  if (at) {
    slot_of_id_.erase(tokens_[*at].id);
    slot_of_id_[t.id] = *at;
    tokens_[*at] = std::move(t);
    return;
  }
  slot_of_id_[t.id] = tokens_.size();
  tokens_.push_back(std::move(t));
}

int32_t AddedVocabulary::max_id() const {
  int32_t m = -1;
  for (const auto& t : tokens_) m = std::max(m, t.id);
  return m;
}

void AddedVocabulary::build(const Normalizer* normalizer) {
  raw_ = Trie();
  normalized_ = Trie();
  any_raw_ = any_normalized_ = false;
  index_of_id_.assign(static_cast<size_t>(max_id() + 1), -1);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    index_of_id_[t.id] = static_cast<int32_t>(i);
    if (t.normalized) {
      std::string s = t.content;
      if (normalizer) normalizer->normalize(s);
      normalized_.insert(s, static_cast<int32_t>(i));
      any_normalized_ = true;
    } else {
      raw_.insert(t.content, static_cast<int32_t>(i));
      any_raw_ = true;
    }
  }
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= index_of_id_.size() || index_of_id_[id] < 0) {
    return nullptr;
  }
  return &tokens_[index_of_id_[id]];
}

namespace {
bool is_word_char(char32_t c) {
  return c == '_' || unicode::is_alphanumeric(c) || unicode::is_mark_nonspacing(c);
}
char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  size_t len;
  return utf8::decode_valid(s.data() + i, len);
}
}  // namespace

void AddedVocabulary::split(std::string_view text, bool normalized_pass, std::vector<Segment>& out,
                            std::span<const TextRange> plain, bool all_plain) const {
  const Trie& trie = normalized_pass ? normalized_ : raw_;
  const bool any = normalized_pass ? any_normalized_ : any_raw_;
  if (!any || text.empty()) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  const Regions regions(plain, text.size());
  Regions::Region region = plain.empty() ? Regions::Region{0, text.size(), false} : regions.at(0);
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    if (!plain.empty() && (pos < region.begin || pos >= region.end)) region = regions.at(pos);
    size_t len = 0;
    // A match ends inside the region it starts in.
    int32_t index = trie.longest(text.substr(0, region.end), pos, len);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& t = tokens_[index];
    size_t start = pos, stop = pos + len;
    pos = stop;  // the next search starts after this match
    if (region.plain && (t.special || all_plain)) continue;  // text here
    if (t.single_word) {
      size_t l;
      bool start_space = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      bool stop_space =
          stop == text.size() || !is_word_char(utf8::decode_valid(text.data() + stop, l));
      if (!start_space || !stop_space) continue;
    }
    // lstrip / rstrip take the whitespace next to the token from any region, as they do
    // with none (spaces are no special token).
    if (t.lstrip) {
      size_t s = start;
      while (s > 0) {
        size_t b = s - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        size_t l;
        if (!unicode::is_whitespace(utf8::decode_valid(text.data() + b, l))) break;
        s = b;
      }
      start = std::max(s, start_offset);
    }
    if (t.rstrip) {
      while (stop < text.size()) {
        size_t l;
        if (!unicode::is_whitespace(utf8::decode_valid(text.data() + stop, l))) break;
        stop += l;
      }
    }
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, t.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

// ---- HfPipeline ----------------------------------------------------------------------

namespace {
// Where the plain ranges of text[begin, end) lie once that part is normalized: each edge
// at the length of the normalized text before it.
std::vector<TextRange> normalized_ranges(std::string_view text, size_t begin, size_t end,
                                         const std::vector<TextRange>& plain,
                                         const Normalizer* normalizer, size_t normalized_size) {
  auto edge = [&](size_t at) {
    if (!normalizer) return std::min(at - begin, normalized_size);
    std::string prefix(text.substr(begin, at - begin));
    normalizer->normalize(prefix);
    return std::min(prefix.size(), normalized_size);
  };
  std::vector<TextRange> out;
  for (const TextRange& r : plain) {
    const size_t b = std::max(r.begin, begin), e = std::min(r.end, end);
    if (b >= e) continue;
    TextRange n{edge(b), edge(e)};
    if (!out.empty()) n.begin = std::max(n.begin, out.back().end);
    if (n.begin < n.end) out.push_back(n);
  }
  return out;
}
}  // namespace

std::vector<int32_t> HfPipeline::encode(std::string_view input, bool add_special_tokens,
                                        std::span<const TextRange> plain) const {
  std::string text;
  std::vector<TextRange> ranges;
  sanitize_ranges(input, plain, text, ranges);
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Segment> raw, norm;
  added.split(text, false, raw, ranges);
  Pieces pieces;
  std::vector<TextRange> seg_ranges;
  for (const auto& seg : raw) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    std::string s = text.substr(seg.begin, seg.end - seg.begin);
    if (normalizer) normalizer->normalize(s);
    seg_ranges.clear();
    if (!ranges.empty() && added.any_normalized())
      seg_ranges = normalized_ranges(text, seg.begin, seg.end, ranges, normalizer.get(), s.size());
    norm.clear();
    added.split(s, true, norm, seg_ranges);
    for (const auto& sub : norm) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(
          {s.substr(sub.begin, sub.end - sub.begin), seg.begin == 0 && sub.begin == 0});
      if (pre_tokenizer) pre_tokenizer->pre_tokenize(pieces);
      for (const Piece& p : pieces) {
        if (!p.text.empty()) model->tokenize(p.text, ids);
      }
    }
  }
  if (add_special_tokens && post_processor) post_processor->process(ids);
  return ids;
}

std::string HfPipeline::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (const AddedToken* t = added.by_id(id)) {
      if (skip_special_tokens && t->special) continue;
      tokens.push_back(t->content);
    } else if (auto s = model->id_to_token(id)) {
      tokens.emplace_back(*s);
    }
  }
  if (!decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i) out.push_back(' ');
      out.append(tokens[i]);
    }
    return out;
  }
  decoder->decode_chain(tokens);
  std::string out;
  for (const auto& t : tokens) out.append(t);
  return out;
}

int32_t HfPipeline::vocab_size() const {
  return std::max(model->vocab_size(), added.max_id() + 1);
}

std::optional<int32_t> HfPipeline::token_to_id(std::string_view token) const {
  if (auto id = added.find(token)) return id;
  return model->token_to_id(token);
}

std::optional<std::string> HfPipeline::id_to_token(int32_t id) const {
  if (const AddedToken* t = added.by_id(id)) return t->content;
  if (auto s = model->id_to_token(id)) return std::string(*s);
  return std::nullopt;
}

bool HfPipeline::is_special(int32_t id) const {
  const AddedToken* t = added.by_id(id);
  return t && t->special;
}

int32_t HfPipeline::add_special_token(std::string_view content) {
  if (auto id = token_to_id(content)) {
    // Present in the model vocabulary: make it a special added token with that id.
    if (!added.find(content)) {
      added.add({std::string(content), *id, true, false, false, false, false});
      added.build(normalizer.get());
    }
    return *id;
  }
  int32_t id = vocab_size();
  added.add({std::string(content), id, true, false, false, false, false});
  added.build(normalizer.get());
  return id;
}

}  // namespace tachyon::tok
