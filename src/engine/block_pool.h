// The paged KV cache's bookkeeping: a flat pool of fixed-size blocks with reference
// counts and a free list in LRU order, and per-sequence block tables on top of it.
// Only integers live here; the model owns the memory the block ids name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/block_hash.h"

namespace tachyon {

// Blocks with reference counts. Free blocks (count 0) sit in a doubly linked list:
// allocation takes the front. A block released with contents worth keeping (a prefix
// cache block) goes to the back, one without to the front, so the cached ones are
// reused last, least recently freed first; a cached block is taken out of the middle
// of the list when a new sequence reuses it.
class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_blocks() const { return static_cast<int32_t>(ref_.size()); }
  int32_t num_free() const { return num_free_; }

  // Takes the least recently freed block and gives it one reference; -1 if none is free.
  int32_t allocate();
  // n blocks at once, all or nothing: false (and nothing taken) if fewer are free.
  bool allocate(int32_t n, std::vector<int32_t>* out);
  void add_ref(int32_t block);
  // Drops one reference; at zero the block goes to the back of the free list (keep) or
  // to its front.
  void release(int32_t block, bool keep = true);
  // Takes a specific free block off the free list (reuse of a cached block).
  void take(int32_t block);
  // Adds blocks [num_blocks(), num_blocks) (num_blocks >= num_blocks()), free, at the
  // front of the free list (taken first: they hold nothing worth keeping).
  void grow(int32_t num_blocks);

  int32_t ref_count(int32_t block) const;
  // The free blocks, least recently freed first.
  std::vector<int32_t> free_list() const;

 private:
  void check_id(int32_t block) const;
  void unlink(int32_t block);
  void push_back(int32_t block);
  void push_front(int32_t block);

  std::vector<int32_t> ref_;
  // Free-list links; index num_blocks() is the sentinel.
  std::vector<int32_t> prev_, next_;
  int32_t num_free_ = 0;
};

struct BlockCopy {
  int32_t src = 0;
  int32_t dst = 0;
  bool operator==(const BlockCopy&) const = default;
};

// Block tables of the live sequences. A sequence's table covers its positions in
// order: block i holds positions [i * block_size, (i + 1) * block_size). Tables may
// share blocks (forks); a shared block is copied before it is written (copy-on-write).
//
// Prefix cache (enable_prefix_cache): a full block whose K/V is computed is entered in
// an index under its BlockHash (publish). It keeps its contents after its sequences let
// go of it, sitting at the back of the free list, until the pool runs out of blocks
// that hold nothing: then the least recently freed cached block is evicted (and, with a
// host tier, copied to host memory first). A new sequence takes the longest run of
// cached blocks its hashes name (match_prefix): from the index, or copied back from
// the host tier. Pinned blocks (pin) are never evicted.
//
// Swap space (num_swap_blocks > 0): a second pool of blocks in host memory. A sequence
// whose blocks are all its own can be swapped out (its table moves to swap blocks, the
// cache blocks are freed) and later swapped in (fresh cache blocks, the swap blocks
// freed); the model copies the contents as the returned pairs say.
class KVCacheManager {
 public:
  KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t num_swap_blocks = 0);

  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return pool_.num_blocks(); }
  // Free blocks, cached ones included (they are evicted when needed).
  int32_t num_free_blocks() const { return pool_.num_free(); }
  // Free blocks that hold nothing cached: taken before any cached one is evicted.
  int32_t num_free_uncached() const { return pool_.num_free() - cached_free_; }
  const BlockPool& pool() const { return pool_; }
  // More cache blocks: ids [num_blocks(), num_blocks), free (BlockPool::grow).
  void grow(int32_t num_blocks);

  // Blocks a sequence needs before writing positions [begin, end): new blocks past its
  // table, plus one copy for every shared block in the written range.
  int32_t blocks_needed(int64_t seq, int32_t begin, int32_t end) const;
  // The most positions from `begin` on the sequence could write using at most
  // `free_blocks` new blocks (copy-on-write included).
  int32_t max_writable(int64_t seq, int32_t begin, int32_t free_blocks) const;
  // Makes positions [begin, end) writable: appends blocks, replaces shared blocks in the
  // range by private copies (appended to `copies` for the model to carry out). All or
  // nothing: returns false and changes nothing when the pool is short.
  bool prepare_write(int64_t seq, int32_t begin, int32_t end, std::vector<BlockCopy>* copies);

  // The child shares every block of the parent (one more reference each).
  void fork(int64_t parent, int64_t child);
  // Releases all blocks of the sequence (a no-op for an unknown one).
  void free(int64_t seq);
  // Releases the blocks of the sequence past those `tokens` tokens need (the tentative
  // tokens of speculative decoding that were rejected).
  void truncate(int64_t seq, int32_t tokens);

  bool has(int64_t seq) const { return tables_.count(seq) > 0; }
  // The sequence's table; empty for an unknown sequence.
  const std::vector<int32_t>& block_table(int64_t seq) const;
  size_t num_sequences() const { return tables_.size(); }

  // Blocks needed by `width` sequences of `max_len` tokens each without any sharing:
  // the most one request can ever hold at once.
  static int64_t worst_case_blocks(int64_t max_len, int64_t width, int32_t block_size);

  // ---- prefix cache ----
  // Turns it on, with host_blocks blocks of host memory as a second tier: swap ids
  // [num_swap_blocks(), num_swap_blocks() + host_blocks) of the model's swap space.
  void enable_prefix_cache(int32_t host_blocks, BlockHashKey key = BlockHashKey::random());
  bool prefix_caching() const { return prefix_; }
  // Extends the sequence's chain of block hashes over the full blocks of `tokens` (its
  // tokens known so far, from the first) under `salt`. The chain outlives the
  // sequence's blocks (preemption) until forget().
  void hash_tokens(int64_t seq, std::span<const int32_t> tokens, uint64_t salt);
  // The sequence's chain of block hashes so far (empty for an unknown sequence).
  std::span<const BlockHash> block_hashes(int64_t seq) const;
  // Gives a sequence that holds no blocks the longest run, at most max_blocks, of cached
  // blocks its chain names, in the index or in the host tier (copied back: take_moves).
  // Returns the blocks taken.
  int32_t match_prefix(int64_t seq, int32_t max_blocks);
  // Enters the sequence's blocks that are full within [0, computed) and hashed in the
  // index (a block whose hash is already there stays out: it is a duplicate).
  void publish(int64_t seq, int32_t computed);
  // Pins the sequence's blocks that are in the index: never evicted. Returns how many.
  int32_t pin(int64_t seq);
  // Drops the sequence's chain of hashes (it has ended).
  void forget(int64_t seq) { chains_.erase(seq); }
  // The host tier's copies decided since the last call, appended: (cache block, swap
  // id) offloads of evicted blocks, to run with the swap-outs, and (swap id, cache
  // block) reloads, with the swap-ins.
  void take_moves(std::vector<BlockCopy>* out, std::vector<BlockCopy>* in);
  int32_t num_cached_blocks() const { return static_cast<int32_t>(index_.size()); }
  int32_t num_pinned_blocks() const { return static_cast<int32_t>(pinned_.size()); }
  int32_t num_host_blocks() const { return host_pool_.num_blocks(); }
  int32_t num_host_cached_blocks() const { return static_cast<int32_t>(host_index_.size()); }
  int64_t host_hit_blocks() const { return host_hits_; }
  // Whether the block is in the index.
  bool is_cached(int32_t block) const { return hashed_.at(static_cast<size_t>(block)) != 0; }

  // ---- swap space ----
  int32_t num_swap_blocks() const { return swap_pool_.num_blocks(); }
  int32_t num_free_swap_blocks() const { return swap_pool_.num_free(); }
  // Whether swap_out(seq) would succeed: the sequence has a table, shares none of its
  // blocks, and the swap space has room for all of them.
  bool can_swap_out(int64_t seq) const;
  // Moves the sequence's blocks to swap space: `pairs` gets (cache block, swap block)
  // for every block, in table order, and the cache blocks are freed. All or nothing.
  bool swap_out(int64_t seq, std::vector<BlockCopy>* pairs);
  bool is_swapped(int64_t seq) const { return swapped_.count(seq) > 0; }
  // Cache blocks swap_in(seq) takes (0 for a sequence not swapped out).
  int32_t swapped_blocks(int64_t seq) const;
  // Moves a swapped-out sequence back: `pairs` gets (swap block, cache block) for every
  // block, the swap blocks are freed. All or nothing (false when the cache is short).
  bool swap_in(int64_t seq, std::vector<BlockCopy>* pairs);

 private:
  int32_t blocks_for(int64_t tokens) const {
    return static_cast<int32_t>((tokens + block_size_ - 1) / block_size_);
  }

  // A free block for a sequence: one holding nothing cached if any, else the least
  // recently freed cached one, evicted (offloaded to the host tier). -1 if none is free.
  int32_t take_free();
  void evict(int32_t block);
  // Drops one reference, the block kept (at the back of the free list) if cached.
  void release(int32_t block);

  struct Chain {
    std::vector<BlockHash> hashes;  // of its full blocks of known tokens, in order
    int32_t published = 0;          // leading blocks of its table offered to the index
  };

  BlockPool pool_;
  int32_t block_size_;
  bool prefix_ = false;
  BlockHashKey key_;
  std::unordered_map<int64_t, Chain> chains_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> index_;  // hash -> cache block
  std::vector<BlockHash> block_hash_;                              // per cache block, where hashed_
  std::vector<uint8_t> hashed_;
  int32_t cached_free_ = 0;
  std::vector<int32_t> pinned_;
  BlockPool host_pool_{0};
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> host_index_;  // hash -> host slot
  std::vector<BlockHash> host_hash_;
  std::vector<uint8_t> host_hashed_;
  std::vector<int32_t> host_held_;  // slots read by reloads not yet taken (take_moves)
  std::vector<BlockCopy> offloads_, reloads_;
  int64_t host_hits_ = 0;
  std::unordered_map<int64_t, std::vector<int32_t>> tables_;
  BlockPool swap_pool_;
  std::unordered_map<int64_t, std::vector<int32_t>> swapped_;  // tables in swap blocks
};

}  // namespace tachyon
