// WordPiece, WordLevel and Unigram models (BPE is in bpe.cc).
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/models.h"

namespace tachyon::tok {

// ---- WordPiece: greedy longest-match-first --------------------------------------------

WordPieceModel::WordPieceModel(Vocab vocab, WordPieceOptions options, const std::string& path)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  auto unk = vocab_.find(options_.unk_token);
  if (!unk) {
    raise<InvalidArgument>("{}.unk_token: '{}' is not in the vocabulary", path, options_.unk_token);
  }
  unk_id_ = *unk;
}

void WordPieceModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (utf8::count_chars(piece) > options_.max_input_chars_per_word) {
    out.push_back(unk_id_);
    return;
  }
  const size_t before = out.size();
  std::string buf;
  size_t start = 0;
  while (start < piece.size()) {
    size_t end = piece.size();
    std::optional<int32_t> found;
    while (start < end) {
      std::string_view sub = piece.substr(start, end - start);
      if (start > 0) {
        buf.assign(options_.continuing_subword_prefix);
        buf.append(sub);
        found = vocab_.find(buf);
      } else {
        found = vocab_.find(sub);
      }
      if (found) break;
      // Drop the last character.
      size_t back = end - 1;
      while (back > start && (static_cast<unsigned char>(piece[back]) & 0xC0) == 0x80) --back;
      end = back;
    }
    if (!found) {
      out.resize(before);
      out.push_back(unk_id_);
      return;
    }
    out.push_back(*found);
    start = end;
  }
}

// ---- WordLevel: whole-word lookup ----------------------------------------------------

WordLevelModel::WordLevelModel(Vocab vocab, std::string unk_token, const std::string& path)
    : vocab_(std::move(vocab)) {
  auto unk = vocab_.find(unk_token);
  unk_id_ = unk ? *unk : -1;
  (void)path;
}

void WordLevelModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (auto id = vocab_.find(piece)) {
    out.push_back(*id);
  } else if (unk_id_ >= 0) {
    out.push_back(unk_id_);
  } else {
    raise<InvalidArgument>("WordLevel: '{}' is not in the vocabulary and there is no unk_token",
                           piece.substr(0, 64));
  }
}

// ---- Unigram: Viterbi over the piece lattice -----------------------------------------

namespace {
constexpr double kUnkPenalty = 10.0;
}

UnigramModel::UnigramModel(std::vector<std::pair<std::string, double>> pieces,
                           std::optional<int32_t> unk_id, bool byte_fallback,
                           const std::string& path)
    : scores_(pieces.size()), unk_id_(unk_id), byte_fallback_(byte_fallback) {
  if (pieces.empty()) raise<InvalidArgument>("{}.vocab: empty Unigram vocabulary", path);
  if (unk_id_ && (*unk_id_ < 0 || static_cast<size_t>(*unk_id_) >= pieces.size())) {
    raise<InvalidArgument>("{}.unk_id: {} is outside the vocabulary of {}", path, *unk_id_,
                           pieces.size());
  }
  min_score_ = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < pieces.size(); ++i) {
    // A duplicate piece keeps its first id, as the reverse map of `tokenizers` does not.
    vocab_.add(pieces[i].first, static_cast<int32_t>(i), path + ".vocab");
    scores_[i] = pieces[i].second;
    min_score_ = std::min(min_score_, pieces[i].second);
  }
  build_trie();
}

void UnigramModel::build_trie() {
  // Sort the token ids by their bytes, then lay the trie out breadth-first from ranges.
  std::vector<int32_t> order(static_cast<size_t>(vocab_.size()));
  std::iota(order.begin(), order.end(), 0);
  std::vector<std::string_view> text(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    text[i] = vocab_.token(static_cast<int32_t>(i)).value_or("");
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return text[a] != text[b] ? text[a] < text[b] : a < b; });
  struct Range {
    size_t lo, hi, depth;
  };
  // Node 0 is the root covering every token.
  std::vector<Range> queue{{0, order.size(), 0}};
  first_child_.clear();
  child_keys_.clear();
  child_nodes_.clear();
  node_token_.clear();
  for (size_t q = 0; q < queue.size(); ++q) {
    Range r = queue[q];
    size_t lo = r.lo;
    int32_t tok = -1;
    // Tokens ending exactly here come first in sorted order (prefix sorts before).
    while (lo < r.hi && text[order[lo]].size() == r.depth) {
      if (tok < 0 && !text[order[lo]].empty()) tok = *vocab_.find(text[order[lo]]);
      ++lo;
    }
    node_token_.push_back(tok);
    first_child_.push_back(static_cast<uint32_t>(child_keys_.size()));
    while (lo < r.hi) {
      uint8_t key = static_cast<uint8_t>(text[order[lo]][r.depth]);
      size_t hi = lo;
      while (hi < r.hi && static_cast<uint8_t>(text[order[hi]][r.depth]) == key) ++hi;
      child_keys_.push_back(key);
      child_nodes_.push_back(static_cast<uint32_t>(queue.size()));
      queue.push_back({lo, hi, r.depth + 1});
      lo = hi;
    }
  }
  first_child_.push_back(static_cast<uint32_t>(child_keys_.size()));
  // first_child_ is indexed by node in BFS order, but children were appended while
  // visiting parents in the same order, so [first_child_[n], first_child_[n+1]) holds.
}

void UnigramModel::tokenize(std::string_view s, std::vector<int32_t>& out) const {
  if (s.empty()) return;
  const size_t n = s.size();
  struct Best {
    double score = 0;
    int64_t start = -1;
    int32_t id = 0;
  };
  std::vector<Best> best(n + 1);
  best[0].start = 0;
  const double unk_score = min_score_ - kUnkPenalty;
  for (size_t pos = 0; pos < n;) {
    const size_t mblen = utf8::char_len(static_cast<unsigned char>(s[pos]));
    const double base = best[pos].score;
    bool has_single = false;
    uint32_t node = 0;
    for (size_t k = pos; k < n; ++k) {
      uint8_t c = static_cast<uint8_t>(s[k]);
      uint32_t lo = first_child_[node], hi = first_child_[node + 1];
      auto it = std::lower_bound(child_keys_.begin() + lo, child_keys_.begin() + hi, c);
      if (it == child_keys_.begin() + hi || *it != c) break;
      node = child_nodes_[static_cast<size_t>(it - child_keys_.begin())];
      int32_t tok = node_token_[node];
      if (tok < 0) continue;
      size_t end = k + 1;
      double cand = base + scores_[tok];
      if (best[end].start < 0 || cand > best[end].score) best[end] = {cand, int64_t(pos), tok};
      if (end - pos == mblen) has_single = true;
    }
    if (!has_single) {
      if (!unk_id_)
        raise<InvalidArgument>("Unigram: text needs the unknown token but unk_id is null");
      size_t end = pos + mblen;
      double cand = base + unk_score;
      if (best[end].start < 0 || cand > best[end].score) best[end] = {cand, int64_t(pos), *unk_id_};
    }
    pos += mblen;
  }
  // Backtrack; consecutive unknown pieces are fused into one string.
  std::vector<std::string_view> pieces;
  size_t end = n;
  size_t unk_end = 0;
  bool in_unk = false;
  while (end > 0) {
    const Best& b = best[end];
    size_t start = static_cast<size_t>(b.start);
    if (unk_id_ && b.id == *unk_id_) {
      if (!in_unk) unk_end = end;
      in_unk = true;
    } else {
      if (in_unk) pieces.push_back(s.substr(end, unk_end - end));
      in_unk = false;
      pieces.push_back(s.substr(start, end - start));
    }
    end = start;
  }
  if (in_unk) pieces.push_back(s.substr(0, unk_end));
  for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
    if (auto id = vocab_.find(*it)) {
      out.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      bool ok = true;
      for (unsigned char c : *it) {
        auto id = vocab_.find(fmt::format("<0x{:02X}>", c));
        if (!id) {
          ok = false;
          break;
        }
        bytes.push_back(*id);
      }
      if (ok) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    out.push_back(*unk_id_);
  }
}

}  // namespace tachyon::tok
