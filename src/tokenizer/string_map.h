// Compact hash tables for vocabularies: token string -> id (keys packed in one arena,
// open addressing), and (id, id) -> (rank, id) for BPE merges. Built once, read-only
// afterwards, so lookups are safe from many threads.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tachyon::tok {

inline uint64_t hash_bytes(std::string_view s) {
  // FNV-1a over 8-byte words, then a final mix; fast enough for short tokens.
  uint64_t h = 0xcbf29ce484222325ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x100000001b3ull;
  h ^= h >> 32;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return h;
}

class StringIdMap {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    if (cap > slots_.size()) rehash(cap);
  }

  // Inserts or overwrites; returns where the key's bytes are (see key_at).
  uint32_t insert(std::string_view key, int32_t id) { return insert(key, hash_bytes(key), id); }
  // The same with the key's hash_bytes() computed by the caller (see prefetch).
  uint32_t insert(std::string_view key, uint64_t h, int32_t id) {
    if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.empty() ? 16 : slots_.size() * 2);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    size_t pos = h & mask_;
    while (slots_[pos].len != kEmpty) {
      Slot& e = slots_[pos];
      if (e.tag == tag && view(e) == key) {
        e.id = id;
        return e.offset;
      }
      pos = (pos + 1) & mask_;
    }
    const auto offset = static_cast<uint32_t>(arena_.size());
    slots_[pos] = Slot{tag, offset, static_cast<uint32_t>(key.size()), id};
    arena_.append(key);
    ++size_;
    return offset;
  }

  // A hint that a key with hash_bytes() `h` is inserted or looked up soon: filling a
  // table larger than the caches in batches of (hash and prefetch all, then insert
  // all) overlaps the cache misses.
  void prefetch(uint64_t h) const {
    if (!slots_.empty()) __builtin_prefetch(&slots_[h & mask_]);
  }

  // The bytes of a key inserted at `offset` (as insert returned) with length `len`.
  std::string_view key_at(uint32_t offset, uint32_t len) const {
    return {arena_.data() + offset, len};
  }

  // find() for n keys at once, with their slots and key bytes fetched ahead of the
  // comparisons (a table larger than the caches costs a memory round trip per probe:
  // overlapping them is several times faster). out[i] is -1 where keys[i] is absent.
  template <size_t kMax>
  void find_batch(const std::string_view* keys, size_t n, int32_t* out) const {
    static_assert(kMax <= 64);
    if (size_ == 0) {
      for (size_t i = 0; i < n; ++i) out[i] = -1;
      return;
    }
    uint64_t hashes[kMax];
    size_t first[kMax];
    for (size_t i = 0; i < n; ++i) {
      hashes[i] = hash_bytes(keys[i]);
      __builtin_prefetch(&slots_[hashes[i] & mask_]);
    }
    // The first slot with a matching tag is almost always the key's own.
    for (size_t i = 0; i < n; ++i) {
      const auto tag = static_cast<uint32_t>(hashes[i] >> 32);
      size_t pos = hashes[i] & mask_;
      while (slots_[pos].len != kEmpty && slots_[pos].tag != tag) pos = (pos + 1) & mask_;
      first[i] = pos;
      if (slots_[pos].len != kEmpty) __builtin_prefetch(arena_.data() + slots_[pos].offset);
    }
    for (size_t i = 0; i < n; ++i) {
      const auto tag = static_cast<uint32_t>(hashes[i] >> 32);
      out[i] = -1;
      for (size_t pos = first[i]; slots_[pos].len != kEmpty; pos = (pos + 1) & mask_) {
        const Slot& e = slots_[pos];
        if (e.tag == tag && e.len == keys[i].size() &&
            std::memcmp(arena_.data() + e.offset, keys[i].data(), keys[i].size()) == 0) {
          out[i] = e.id;
          break;
        }
      }
    }
  }

  std::optional<int32_t> find(std::string_view key) const {
    if (size_ == 0) return std::nullopt;
    const uint64_t h = hash_bytes(key);
    const uint32_t tag = static_cast<uint32_t>(h >> 32);
    size_t pos = h & mask_;
    while (slots_[pos].len != kEmpty) {
      const Slot& e = slots_[pos];
      if (e.tag == tag && e.len == key.size() &&
          std::memcmp(arena_.data() + e.offset, key.data(), key.size()) == 0) {
        return e.id;
      }
      pos = (pos + 1) & mask_;
    }
    return std::nullopt;
  }

  size_t size() const { return size_; }

  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& e : slots_) {
      if (e.len != kEmpty) fn(view(e), e.id);
    }
  }

 private:
  static constexpr uint32_t kEmpty = 0xFFFFFFFFu;
  // One probe touches one 16-byte slot; the key bytes are read only on a tag match.
  struct Slot {
    uint32_t tag;
    uint32_t offset;
    uint32_t len;
    int32_t id;
  };
  std::string_view view(const Slot& e) const { return {arena_.data() + e.offset, e.len}; }
  void rehash(size_t cap) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(cap, Slot{0, 0, kEmpty, 0});
    mask_ = cap - 1;
    for (const Slot& e : old) {
      if (e.len == kEmpty) continue;
      size_t pos = hash_bytes(view(e)) & mask_;
      while (slots_[pos].len != kEmpty) pos = (pos + 1) & mask_;
      slots_[pos] = e;
    }
  }
  std::string arena_;
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// (left id, right id) -> (rank, merged id).
class PairMap {
 public:
  struct Value {
    uint32_t rank;
    int32_t id;
  };
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Value{0, 0});
    mask_ = cap - 1;
    size_ = 0;
  }
  // Inserts or overwrites (a later duplicate merge wins, as in `tokenizers`).
  void insert(int32_t a, int32_t b, Value v) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.empty() ? 16 : keys_.size() * 2);
    uint64_t k = key(a, b);
    size_t pos = mix(k) & mask_;
    while (keys_[pos] != kEmpty && keys_[pos] != k) pos = (pos + 1) & mask_;
    if (keys_[pos] == kEmpty) ++size_;
    keys_[pos] = k;
    values_[pos] = v;
  }
  // A hint that (a, b) is inserted or looked up soon.
  void prefetch(int32_t a, int32_t b) const {
    if (keys_.empty()) return;
    const size_t pos = mix(key(a, b)) & mask_;
    __builtin_prefetch(&keys_[pos]);
    __builtin_prefetch(&values_[pos]);
  }
  const Value* find(int32_t a, int32_t b) const {
    if (size_ == 0) return nullptr;
    uint64_t k = key(a, b);
    size_t pos = mix(k) & mask_;
    while (keys_[pos] != kEmpty) {
      if (keys_[pos] == k) return &values_[pos];
      pos = (pos + 1) & mask_;
    }
    return nullptr;
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
  }
  void rehash(size_t cap) {
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<Value> old_values = std::move(values_);
    keys_.assign(cap, kEmpty);
    values_.assign(cap, Value{0, 0});
    mask_ = cap - 1;
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] == kEmpty) continue;
      size_t pos = mix(old_keys[i]) & mask_;
      while (keys_[pos] != kEmpty) pos = (pos + 1) & mask_;
      keys_[pos] = old_keys[i];
      values_[pos] = old_values[i];
    }
  }
  std::vector<uint64_t> keys_;
  std::vector<Value> values_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace tachyon::tok
