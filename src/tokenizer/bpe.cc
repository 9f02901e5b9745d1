// Byte-pair encoding as `tokenizers` does it: the word starts as one symbol per
// character (with continuing-subword prefix / end-of-word suffix, byte fallback and
// unknown-token fusion), then the adjacent pair with the lowest merge rank is merged
// (leftmost first on ties) until none applies. A binary heap over a linked list of
// symbols keeps this O(n log n) even for a multi-megabyte word.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "core/utf8.h"
#include "tokenizer/models.h"

namespace tachyon::tok {

void Vocab::add(std::string_view token, uint64_t hash, int32_t id, const std::string& what) {
  if (id < 0 || id >= (1 << 26)) raise<InvalidArgument>("{}: token id {} out of range", what, id);
  if (token.size() >= kAbsent) raise<InvalidArgument>("{}: token {} is too long", what, id);
  if (static_cast<size_t>(id) >= entries_.size()) {
    entries_.resize(static_cast<size_t>(id) + 1, Entry{0, kAbsent});
  }
  entries_[id] = Entry{map_.insert(token, hash, id), static_cast<uint32_t>(token.size())};
}

BpeModel::BpeModel(Vocab vocab,
                   const std::vector<std::pair<std::string_view, std::string_view>>& merges,
                   BpeOptions options, const std::string& path)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  // Resolving the token ids of every merge is most of the load time of a large
  // tokenizer (three hash lookups each): do it in parallel, then insert in rank order.
  struct Resolved {
    int32_t a, b, merged;
  };
  std::vector<Resolved> resolved(merges.size());
  const std::string& prefix = options_.continuing_subword_prefix;
  ThreadPool::global().parallel_for(
      0, static_cast<int64_t>(merges.size()), 8192, [&](int64_t lo, int64_t hi) {
        // In batches, so that the hash table's cache misses overlap.
        constexpr size_t kBatch = 16;
        std::string joined[kBatch];
        std::string_view keys[3 * kBatch];
        int32_t ids[3 * kBatch];
        for (int64_t r0 = lo; r0 < hi; r0 += kBatch) {
          const size_t n = static_cast<size_t>(std::min<int64_t>(kBatch, hi - r0));
          for (size_t i = 0; i < n; ++i) {
            const auto& [a, b] = merges[r0 + i];
            std::string_view right = b;
            if (!prefix.empty() && right.substr(0, prefix.size()) == prefix) {
              right.remove_prefix(prefix.size());
            }
            joined[i].assign(a);
            joined[i].append(right);
            keys[3 * i] = a;
            keys[3 * i + 1] = b;
            keys[3 * i + 2] = joined[i];
          }
          vocab_.find_batch<3 * kBatch>(keys, 3 * n, ids);
          for (size_t i = 0; i < n; ++i) {
            resolved[r0 + i] = {ids[3 * i], ids[3 * i + 1], ids[3 * i + 2]};
          }
        }
      });
  merges_.reserve(merges.size());
  constexpr size_t kAhead = 16;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    if (rank + kAhead < merges.size()) {
      merges_.prefetch(resolved[rank + kAhead].a, resolved[rank + kAhead].b);
    }
    const Resolved& m = resolved[rank];
    if (m.a < 0 || m.b < 0) {
      raise<InvalidArgument>("{}.merges[{}]: token '{}' is not in the vocabulary", path, rank,
                             m.a < 0 ? merges[rank].first : merges[rank].second);
    }
    if (m.merged < 0) {
      raise<InvalidArgument>("{}.merges[{}]: merged token '{}{}' is not in the vocabulary", path,
                             rank, merges[rank].first, merges[rank].second);
    }
    merges_.insert(m.a, m.b, {static_cast<uint32_t>(rank), m.merged});
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
  int32_t id;  // -1 once merged into its left neighbour
  int32_t prev;
  int32_t next;
};

// (rank << 32 | position): a min-heap on this is lowest rank first, then leftmost.
using Candidate = uint64_t;
inline Candidate candidate(uint32_t rank, int32_t pos) {
  return (static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(pos);
}

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
    syms.push_back({id, n - 1, -1});
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
  const auto later = std::greater<Candidate>();
  for (size_t p = 0; p + 1 < syms.size(); ++p) {
    if (const auto* m = merges_.find(syms[p].id, syms[p + 1].id)) {
      heap.push_back(candidate(m->rank, static_cast<int32_t>(p)));
    }
  }
  std::make_heap(heap.begin(), heap.end(), later);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate top = heap.back();
    heap.pop_back();
    const int32_t pos = static_cast<int32_t>(top & 0xFFFFFFFFu);
    Symbol& left = syms[pos];
    if (left.id < 0 || left.next < 0) continue;
    Symbol& right = syms[left.next];
    const auto* m = merges_.find(left.id, right.id);
    // Stale: the pair changed since this candidate was queued.
    if (!m || m->rank != static_cast<uint32_t>(top >> 32)) continue;
    left.id = m->id;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = pos;
    if (left.prev >= 0) {
      if (const auto* pm = merges_.find(syms[left.prev].id, left.id)) {
        heap.push_back(candidate(pm->rank, left.prev));
        std::push_heap(heap.begin(), heap.end(), later);
      }
    }
    if (left.next >= 0) {
      if (const auto* nm = merges_.find(left.id, syms[left.next].id)) {
        heap.push_back(candidate(nm->rank, pos));
        std::push_heap(heap.begin(), heap.end(), later);
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
  if (piece.size() <= kMaxCachedWord) {
    tokenize_cached(piece, out);
    return;
  }
  // A long word: cut it where no merge can ever apply across (see safe_cut), and merge
  // the parts separately (they are short and mostly cached). Exact, and it keeps the
  // merge heap small: a Metaspace-style pipeline hands over whole texts as one word.
  const bool plain =
      options_.continuing_subword_prefix.empty() && options_.end_of_word_suffix.empty();
  if (!plain) {
    merge_word(piece, out);
    return;
  }
  std::call_once(inner_pairs_once_, [this] { build_inner_pairs(); });
  size_t start = 0;
  size_t i = 0;
  char32_t prev = 0;
  bool prev_known = false;
  while (i < piece.size()) {
    size_t len;
    char32_t c = utf8::decode_valid(piece.data() + i, len);
    const bool known =
        c < 0x800 ? char_ids_[c] >= 0 : vocab_.find(piece.substr(i, len)).has_value();
    if (i > start && prev_known && known &&
        !inner_pairs_.find(static_cast<int32_t>(prev), static_cast<int32_t>(c))) {
      tokenize_cached(piece.substr(start, i - start), out);
      start = i;
    }
    prev = c;
    prev_known = known;
    i += len;
  }
  tokenize_cached(piece.substr(start), out);
}

void BpeModel::tokenize_cached(std::string_view piece, std::vector<int32_t>& out) const {
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

// Every pair of adjacent characters inside some vocabulary token. Between two
// characters that are each a token and never adjacent inside any token, no merge can
// apply (its result would be a token containing them), so a word can be cut there.
void BpeModel::build_inner_pairs() const {
  inner_pairs_.reserve(static_cast<size_t>(vocab_.size()) * 4);
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    auto t = vocab_.token(id);
    if (!t || !utf8::is_valid(*t)) continue;
    char32_t prev = 0;
    for (size_t i = 0; i < t->size();) {
      size_t len;
      char32_t c = utf8::decode_valid(t->data() + i, len);
      if (i > 0) inner_pairs_.insert(static_cast<int32_t>(prev), static_cast<int32_t>(c), {0, 0});
      prev = c;
      i += len;
    }
  }
}

}  // namespace tachyon::tok
