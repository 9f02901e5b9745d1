// A full KV block's identity in the prefix cache: a 128-bit hash chained over the hash
// of the block before it, the block's token ids and the request's salt (what else the
// K/V depends on: an adapter, injected embeddings). Two blocks with equal hashes hold
// the same K/V. The hash is keyed by a secret drawn at start, so that a client cannot
// craft a prompt whose blocks collide with another's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace tachyon {

struct BlockHash {
  uint64_t hi = 0;
  uint64_t lo = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashKey {
  uint64_t k0 = 0;
  uint64_t k1 = 0;
  static BlockHashKey random();
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi >> 7)); }
};

// The hash of a block of `tokens` after the block hashed `parent` ({} for the first).
BlockHash hash_block(const BlockHashKey& key, const BlockHash& parent,
                     std::span<const int32_t> tokens, uint64_t salt);

}  // namespace tachyon
