// Byte-pair encoding as `tokenizers` does it: the word starts as one symbol per
// character (with continuing-subword prefix / end-of-word suffix, byte fallback and
// unknown-token fusion), then the adjacent pair with the lowest merge rank is merged
// (leftmost first on ties) until none applies. A binary heap over a linked list of
// symbols keeps this O(n log n) even for a multi-megabyte word.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/models.h"

namespace tachyon::tok {

void Vocab::add(std::string_view token, int32_t id, const std::string& what) {
  if (id < 0 || id >= (1 << 26)) raise<InvalidArgument>("{}: token id {} out of range", what, id);
  if (static_cast<size_t>(id) >= tokens_.size()) {
    tokens_.resize(static_cast<size_t>(id) + 1);
    present_.resize(static_cast<size_t>(id) + 1, false);
  }
  tokens_[id] = std::string(token);
  present_[id] = true;
  map_.insert(token, id);
}

std::optional<std::string_view> Vocab::token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !present_[id]) return std::nullopt;
  return std::string_view(tokens_[id]);
}

BpeModel::BpeModel(Vocab vocab,
                   const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                   BpeOptions options, const std::string& path)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  merges_.reserve(merges.size());
  std::string joined;
  const size_t prefix_len = options_.continuing_subword_prefix.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a);
    auto ib = vocab_.find(b);
    if (!ia || !ib) {
      raise<InvalidArgument>("{}.merges[{}]: token '{}' is not in the vocabulary", path, rank,
                             ia ? b : a);
    }
    // The merged token drops the right part's continuing-subword prefix.
    joined.assign(a);
    std::string_view right = b;
    if (prefix_len > 0 && right.substr(0, prefix_len) == options_.continuing_subword_prefix) {
      right.remove_prefix(prefix_len);
    }
    joined.append(right);
    auto merged = vocab_.find(joined);
    if (!merged) {
      raise<InvalidArgument>("{}.merges[{}]: merged token '{}' is not in the vocabulary", path,
                             rank, joined);
    }
    merges_.insert(*ia, *ib, {static_cast<uint32_t>(rank), *merged});
  }
  init_char_table();
}

BpeModel::BpeModel(Vocab vocab, PairMap merges, BpeOptions options)
    : vocab_(std::move(vocab)), merges_(std::move(merges)), options_(std::move(options)) {
  init_char_table();
}

void BpeModel::init_char_table() {
  if (options_.unk_token) {
    unk_id_ = vocab_.find(*options_.unk_token);
  }
  for (int b = 0; b < 256; ++b) {
    auto id = vocab_.find(fmt::format("<0x{:02X}>", b));
    byte_ids_[b] = id ? *id : -1;
  }
  char_ids_.assign(0x800, -1);
  std::string s;
  for (char32_t c = 0; c < 0x800; ++c) {
    s.clear();
    utf8::append(s, c);
    auto id = vocab_.find(s);
    char_ids_[c] = id ? *id : -1;
  }
  cache_ = std::make_unique<Shard[]>(kShards);
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  bool alive;
};

struct Candidate {
  uint32_t rank;
  int32_t pos;
  int32_t new_id;
  // Heap order: lowest rank first, then leftmost position.
  bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
};

struct Scratch {
  std::vector<Symbol> symbols;
  std::vector<Candidate> heap;
  std::string buf;
};

Scratch& scratch() {
  thread_local Scratch s;
  return s;
}

}  // namespace

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  Scratch& sc = scratch();
  auto& syms = sc.symbols;
  syms.clear();
  auto push = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(syms.size());
    syms.push_back({id, n - 1, -1, true});
    if (n > 0) syms[n - 1].next = n;
  };
  const bool plain =
      options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  // A pending unknown token: (present, id).
  bool unk_pending = false;
  for (size_t i = 0; i < word.size();) {
    size_t len;
    char32_t c = utf8::decode_valid(word.data() + i, len);
    const bool first = i == 0;
    const bool last = i + len >= word.size();
    std::optional<int32_t> id;
    std::string_view s = word.substr(i, len);
    if (plain) {
      if (c < 0x800) {
        if (char_ids_[c] >= 0) id = char_ids_[c];
      } else {
        id = vocab_.find(s);
      }
    } else {
      sc.buf.clear();
      if (!first) sc.buf.append(options_.continuing_subword_prefix);
      sc.buf.append(s);
      if (last) sc.buf.append(options_.end_of_word_suffix);
      s = sc.buf;
      id = vocab_.find(s);
    }
    i += len;
    if (id) {
      if (unk_pending) {
        push(*unk_id_);
        unk_pending = false;
      }
      push(*id);
      continue;
    }
    if (options_.byte_fallback) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : s) push(byte_ids_[b]);
        continue;
      }
    }
    if (options_.unk_token) {
      if (!unk_id_) {
        raise<InvalidArgument>("tokenizer.json: model.unk_token '{}' is not in the vocabulary",
                               *options_.unk_token);
      }
      if (unk_pending && !options_.fuse_unk) push(*unk_id_);
      unk_pending = true;
    }
    // Without an unknown token the character is dropped, as `tokenizers` does.
  }
  if (unk_pending) push(*unk_id_);

  auto& heap = sc.heap;
  heap.clear();
  for (size_t p = 0; p + 1 < syms.size(); ++p) {
    if (const auto* m = merges_.find(syms[p].id, syms[p + 1].id)) {
      heap.push_back({m->rank, static_cast<int32_t>(p), m->id});
    }
  }
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    const auto* m = merges_.find(left.id, right.id);
    if (!m || m->id != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const auto* pm = merges_.find(syms[left.prev].id, left.id)) {
        heap.push_back({pm->rank, left.prev, pm->id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
    if (left.next >= 0) {
      if (const auto* nm = merges_.find(left.id, syms[left.next].id)) {
        heap.push_back({nm->rank, top.pos, nm->id});
        std::push_heap(heap.begin(), heap.end());
      }
    }
  }
  for (int32_t p = syms.empty() ? -1 : 0; p >= 0; p = syms[p].next) out.push_back(syms[p].id);
}

void BpeModel::tokenize(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (options_.ignore_merges) {
    if (auto id = vocab_.find(piece)) {
      out.push_back(*id);
      return;
    }
  }
  if (piece.size() > kMaxCachedWord) {
    merge_word(piece, out);
    return;
  }
  Shard& shard = cache_[hash_bytes(piece) % kShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    auto it = shard.map.find(std::string(piece));
    if (it != shard.map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t before = out.size();
  merge_word(piece, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.map.size() >= kShardCapacity) shard.map.clear();
  shard.map.emplace(std::string(piece), std::move(ids));
}

}  // namespace tachyon::tok
