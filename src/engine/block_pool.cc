#include "engine/block_pool.h"

#include <algorithm>

#include "core/error.h"

namespace tachyon {

BlockPool::BlockPool(int32_t num_blocks) {
  TACHYON_CHECK_GE(num_blocks, 0);
  ref_.assign(static_cast<size_t>(num_blocks), 0);
  prev_.assign(static_cast<size_t>(num_blocks) + 1, 0);
  next_.assign(static_cast<size_t>(num_blocks) + 1, 0);
  const int32_t s = num_blocks;  // sentinel
  prev_[s] = next_[s] = s;
  for (int32_t b = 0; b < num_blocks; ++b) push_back(b);
}

void BlockPool::check_id(int32_t block) const {
  TACHYON_CHECK(block >= 0 && block < num_blocks(), "block id {} outside [0, {})", block,
                num_blocks());
}

void BlockPool::unlink(int32_t b) {
  next_[prev_[b]] = next_[b];
  prev_[next_[b]] = prev_[b];
  --num_free_;
}

void BlockPool::push_back(int32_t b) {
  const int32_t s = num_blocks();
  prev_[b] = prev_[s];
  next_[b] = s;
  next_[prev_[s]] = b;
  prev_[s] = b;
  ++num_free_;
}

void BlockPool::push_front(int32_t b) {
  const int32_t s = num_blocks();
  next_[b] = next_[s];
  prev_[b] = s;
  prev_[next_[s]] = b;
  next_[s] = b;
  ++num_free_;
}

void BlockPool::grow(int32_t num_blocks) {
  const int32_t old = this->num_blocks();
  TACHYON_CHECK(num_blocks >= old, "BlockPool::grow to {} blocks from {}", num_blocks, old);
  if (num_blocks == old) return;
  // The sentinel moves from index old (now a block) to num_blocks.
  const int32_t first = next_[old], last = prev_[old];
  ref_.resize(static_cast<size_t>(num_blocks), 0);
  prev_.resize(static_cast<size_t>(num_blocks) + 1, 0);
  next_.resize(static_cast<size_t>(num_blocks) + 1, 0);
  const int32_t s = num_blocks;
  if (first == old) {
    prev_[s] = next_[s] = s;
  } else {
    next_[s] = first;
    prev_[first] = s;
    prev_[s] = last;
    next_[last] = s;
  }
  for (int32_t b = num_blocks - 1; b >= old; --b) push_front(b);
}

int32_t BlockPool::allocate() {
  if (num_free_ == 0) return -1;
  const int32_t b = next_[num_blocks()];
  unlink(b);
  ref_[b] = 1;
  return b;
}

bool BlockPool::allocate(int32_t n, std::vector<int32_t>* out) {
  if (n > num_free_) return false;
  for (int32_t i = 0; i < n; ++i) out->push_back(allocate());
  return true;
}

void BlockPool::add_ref(int32_t block) {
  check_id(block);
  TACHYON_CHECK_GT(ref_[block], 0);
  ++ref_[block];
}

void BlockPool::release(int32_t block, bool keep) {
  check_id(block);
  TACHYON_CHECK_GT(ref_[block], 0);
  if (--ref_[block] > 0) return;
  if (keep) {
    push_back(block);
  } else {
    push_front(block);
  }
}

void BlockPool::take(int32_t block) {
  check_id(block);
  TACHYON_CHECK_EQ(ref_[block], 0);
  unlink(block);
  ref_[block] = 1;
}

int32_t BlockPool::ref_count(int32_t block) const {
  check_id(block);
  return ref_[block];
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> out;
  out.reserve(static_cast<size_t>(num_free_));
  for (int32_t b = next_[num_blocks()]; b != num_blocks(); b = next_[b]) out.push_back(b);
  return out;
}

KVCacheManager::KVCacheManager(int32_t num_blocks, int32_t block_size, int32_t num_swap_blocks)
    : pool_(num_blocks), block_size_(block_size), swap_pool_(num_swap_blocks) {
  TACHYON_CHECK_GT(block_size, 0);
  block_hash_.resize(static_cast<size_t>(num_blocks));
  hashed_.assign(static_cast<size_t>(num_blocks), 0);
}

void KVCacheManager::grow(int32_t num_blocks) {
  pool_.grow(num_blocks);
  block_hash_.resize(static_cast<size_t>(num_blocks));
  hashed_.resize(static_cast<size_t>(num_blocks), 0);
}

int32_t KVCacheManager::take_free() {
  const int32_t b = pool_.allocate();
  if (b >= 0 && hashed_[static_cast<size_t>(b)]) {
    --cached_free_;
    evict(b);
  }
  return b;
}

void KVCacheManager::release(int32_t block) {
  const bool cached = hashed_[static_cast<size_t>(block)] != 0;
  pool_.release(block, cached);
  if (cached && pool_.ref_count(block) == 0) ++cached_free_;
}

const std::vector<int32_t>& KVCacheManager::block_table(int64_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? kEmpty : it->second;
}

int32_t KVCacheManager::blocks_needed(int64_t seq, int32_t begin, int32_t end) const {
  if (end <= begin) return 0;
  const auto& table = block_table(seq);
  const int32_t have = static_cast<int32_t>(table.size());
  int32_t need = std::max(0, blocks_for(end) - have);
  for (int32_t i = begin / block_size_; i < std::min(have, blocks_for(end)); ++i)
    if (pool_.ref_count(table[static_cast<size_t>(i)]) > 1) ++need;
  return need;
}

int32_t KVCacheManager::max_writable(int64_t seq, int32_t begin, int32_t free_blocks) const {
  const auto& table = block_table(seq);
  const int32_t have = static_cast<int32_t>(table.size());
  // Positions in blocks the sequence holds, from `begin` on, each shared one costing a copy.
  int32_t end = begin;
  for (int32_t i = begin / block_size_; i < have; ++i) {
    if (pool_.ref_count(table[static_cast<size_t>(i)]) > 1) {
      if (free_blocks == 0) return end - begin;
      --free_blocks;
    }
    end = (i + 1) * block_size_;
  }
  end = std::max(end, have * block_size_);
  return end + free_blocks * block_size_ - begin;
}

bool KVCacheManager::prepare_write(int64_t seq, int32_t begin, int32_t end,
                                   std::vector<BlockCopy>* copies) {
  if (end <= begin) return true;
  const int32_t need = blocks_needed(seq, begin, end);
  if (need > pool_.num_free()) return false;
  auto& table = tables_[seq];
  const int32_t have = static_cast<int32_t>(table.size());
  for (int32_t i = begin / block_size_; i < std::min(have, blocks_for(end)); ++i) {
    int32_t& b = table[static_cast<size_t>(i)];
    if (pool_.ref_count(b) > 1) {
      const int32_t fresh = take_free();
      copies->push_back({b, fresh});
      release(b);
      b = fresh;
    }
  }
  while (static_cast<int32_t>(table.size()) < blocks_for(end)) table.push_back(take_free());
  return true;
}

void KVCacheManager::fork(int64_t parent, int64_t child) {
  TACHYON_CHECK(!tables_.count(child), "sequence {} already has a block table", child);
  const auto& src = block_table(parent);
  for (int32_t b : src) pool_.add_ref(b);
  tables_[child] = src;
  if (auto c = chains_.find(parent); c != chains_.end()) chains_[child] = c->second;
}

void KVCacheManager::free(int64_t seq) {
  if (auto sw = swapped_.find(seq); sw != swapped_.end()) {
    for (int32_t b : sw->second) swap_pool_.release(b);
    swapped_.erase(sw);
  }
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  // Last block first: the blocks at the end of a sequence are the least likely to be
  // shared by another prompt, so they should be reused before its first blocks.
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b) release(*b);
  tables_.erase(it);
  if (auto c = chains_.find(seq); c != chains_.end()) c->second.published = 0;
}

void KVCacheManager::truncate(int64_t seq, int32_t tokens) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  std::vector<int32_t>& table = it->second;
  const size_t keep = static_cast<size_t>(std::max(0, blocks_for(tokens)));
  while (table.size() > keep) {
    release(table.back());
    table.pop_back();
  }
  if (auto c = chains_.find(seq); c != chains_.end())
    c->second.published = std::min(c->second.published, static_cast<int32_t>(keep));
}

bool KVCacheManager::can_swap_out(int64_t seq) const {
  auto it = tables_.find(seq);
  if (it == tables_.end() || swapped_.count(seq)) return false;
  if (static_cast<int64_t>(it->second.size()) > swap_pool_.num_free()) return false;
  for (int32_t b : it->second)
    if (pool_.ref_count(b) != 1) return false;
  return true;
}

bool KVCacheManager::swap_out(int64_t seq, std::vector<BlockCopy>* pairs) {
  if (!can_swap_out(seq)) return false;
  auto it = tables_.find(seq);
  std::vector<int32_t> slots;
  const bool ok = swap_pool_.allocate(static_cast<int32_t>(it->second.size()), &slots);
  TACHYON_CHECK(ok, "swap space for sequence {} was not available", seq);
  for (size_t i = 0; i < slots.size(); ++i) pairs->push_back({it->second[i], slots[i]});
  free(seq);
  swapped_[seq] = std::move(slots);
  return true;
}

int32_t KVCacheManager::swapped_blocks(int64_t seq) const {
  auto it = swapped_.find(seq);
  return it == swapped_.end() ? 0 : static_cast<int32_t>(it->second.size());
}

bool KVCacheManager::swap_in(int64_t seq, std::vector<BlockCopy>* pairs) {
  auto it = swapped_.find(seq);
  if (it == swapped_.end() || tables_.count(seq)) return false;
  if (static_cast<int64_t>(it->second.size()) > pool_.num_free()) return false;
  std::vector<int32_t> blocks;
  for (size_t i = 0; i < it->second.size(); ++i) blocks.push_back(take_free());
  for (size_t i = 0; i < blocks.size(); ++i) pairs->push_back({it->second[i], blocks[i]});
  for (int32_t b : it->second) swap_pool_.release(b);
  swapped_.erase(it);
  tables_[seq] = std::move(blocks);
  return true;
}

// ---- prefix cache ----

void KVCacheManager::enable_prefix_cache(int32_t host_blocks, BlockHashKey key) {
  TACHYON_CHECK_GE(host_blocks, 0);
  prefix_ = true;
  key_ = key;
  host_pool_ = BlockPool(host_blocks);
  host_hash_.assign(static_cast<size_t>(host_blocks), BlockHash{});
  host_hashed_.assign(static_cast<size_t>(host_blocks), 0);
}

void KVCacheManager::hash_tokens(int64_t seq, std::span<const int32_t> tokens, uint64_t salt) {
  if (!prefix_) return;
  Chain& c = chains_[seq];
  const size_t full = tokens.size() / static_cast<size_t>(block_size_);
  while (c.hashes.size() < full) {
    const size_t i = c.hashes.size();
    const BlockHash parent = i == 0 ? BlockHash{} : c.hashes[i - 1];
    c.hashes.push_back(
        hash_block(key_, parent, tokens.subspan(i * block_size_, block_size_), salt));
  }
}

std::span<const BlockHash> KVCacheManager::block_hashes(int64_t seq) const {
  auto it = chains_.find(seq);
  if (it == chains_.end()) return {};
  return it->second.hashes;
}

int32_t KVCacheManager::match_prefix(int64_t seq, int32_t max_blocks) {
  TACHYON_CHECK(block_table(seq).empty(), "sequence {} already holds blocks", seq);
  auto c = chains_.find(seq);
  if (!prefix_ || c == chains_.end()) return 0;
  const int32_t n = std::min(max_blocks, static_cast<int32_t>(c->second.hashes.size()));
  std::vector<int32_t> table;
  for (int32_t i = 0; i < n; ++i) {
    const BlockHash& h = c->second.hashes[static_cast<size_t>(i)];
    if (auto it = index_.find(h); it != index_.end()) {
      const int32_t b = it->second;
      if (pool_.ref_count(b) == 0) {
        pool_.take(b);
        --cached_free_;
      } else {
        pool_.add_ref(b);
      }
      table.push_back(b);
      continue;
    }
    auto host = host_index_.find(h);
    if (host == host_index_.end()) break;
    const int32_t slot = host->second;
    // Held until its copy is handed over (take_moves), so that the eviction below cannot
    // offload another block into it; that one is copied out before this one comes in.
    host_pool_.take(slot);
    const int32_t b = take_free();
    if (b < 0) {
      host_pool_.release(slot, /*keep=*/true);
      break;
    }
    host_held_.push_back(slot);
    reloads_.push_back({swap_pool_.num_blocks() + slot, b});
    index_[h] = b;
    block_hash_[static_cast<size_t>(b)] = h;
    hashed_[static_cast<size_t>(b)] = 1;
    ++host_hits_;
    table.push_back(b);
  }
  const int32_t matched = static_cast<int32_t>(table.size());
  if (matched > 0) tables_[seq] = std::move(table);
  c->second.published = matched;
  return matched;
}

void KVCacheManager::publish(int64_t seq, int32_t computed) {
  auto c = chains_.find(seq);
  auto t = tables_.find(seq);
  if (!prefix_ || c == chains_.end() || t == tables_.end()) return;
  Chain& chain = c->second;
  const int32_t n = std::min({static_cast<int32_t>(chain.hashes.size()), computed / block_size_,
                              static_cast<int32_t>(t->second.size())});
  for (int32_t i = chain.published; i < n; ++i) {
    const int32_t b = t->second[static_cast<size_t>(i)];
    if (hashed_[static_cast<size_t>(b)]) continue;
    const BlockHash& h = chain.hashes[static_cast<size_t>(i)];
    if (!index_.emplace(h, b).second) continue;  // the same K/V is cached in another block
    block_hash_[static_cast<size_t>(b)] = h;
    hashed_[static_cast<size_t>(b)] = 1;
  }
  chain.published = std::max(chain.published, n);
}

int32_t KVCacheManager::pin(int64_t seq) {
  int32_t pinned = 0;
  for (int32_t b : block_table(seq)) {
    if (!hashed_[static_cast<size_t>(b)]) break;
    pool_.add_ref(b);
    pinned_.push_back(b);
    ++pinned;
  }
  return pinned;
}

void KVCacheManager::evict(int32_t b) {
  const BlockHash h = block_hash_[static_cast<size_t>(b)];
  hashed_[static_cast<size_t>(b)] = 0;
  index_.erase(h);
  if (host_pool_.num_blocks() == 0 || host_index_.count(h)) return;
  // Offload into the least recently filled free host slot (the held ones are not free).
  const int32_t slot = host_pool_.allocate();
  if (slot < 0) return;
  if (host_hashed_[static_cast<size_t>(slot)])
    host_index_.erase(host_hash_[static_cast<size_t>(slot)]);
  host_index_[h] = slot;
  host_hash_[static_cast<size_t>(slot)] = h;
  host_hashed_[static_cast<size_t>(slot)] = 1;
  host_pool_.release(slot, /*keep=*/true);
  offloads_.push_back({b, swap_pool_.num_blocks() + slot});
}

void KVCacheManager::take_moves(std::vector<BlockCopy>* out, std::vector<BlockCopy>* in) {
  out->insert(out->end(), offloads_.begin(), offloads_.end());
  in->insert(in->end(), reloads_.begin(), reloads_.end());
  offloads_.clear();
  reloads_.clear();
  for (int32_t slot : host_held_) host_pool_.release(slot, /*keep=*/true);
  host_held_.clear();
}

int64_t KVCacheManager::worst_case_blocks(int64_t max_len, int64_t width, int32_t block_size) {
  return width * ((max_len + block_size - 1) / block_size);
}

}  // namespace tachyon
