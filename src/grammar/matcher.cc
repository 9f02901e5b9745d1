#include "grammar/matcher.h"

#include <algorithm>
#include <map>
#include <unordered_set>

#include "core/error.h"

namespace tachyon::grammar {
namespace {

using Element = Grammar::Element;

void sort_unique(std::vector<ParseStack>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Sets of at most this many stacks are masked stack by stack, from the cache.
constexpr size_t kCachedStacks = 8;

// Cached masks held at most (bytes); beyond it the cache starts over.
constexpr size_t kMaskCacheBytes = size_t{64} << 20;

}  // namespace

size_t CompiledGrammar::StackHash::operator()(const ParseStack& s) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t p : s) h = (h ^ p) * 1099511628211ull;
  return static_cast<size_t>(h);
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                                 const GrammarLimits& limits)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), limits_(limits) {
  TACHYON_CHECK(vocab_ != nullptr);
}

// Replaces a stack whose top is not a byte set by the stacks it stands for: a finished
// alternative is popped, a rule reference becomes one stack per alternative (its
// continuation below, dropped when it is the end of an alternative, so that right
// recursion does not grow the stack). Each intermediate stack is expanded once: a
// grammar of nested optional parts reaches the same stack by many paths, and a
// repetition of something that may match nothing reaches it again. `seen` may be
// shared by the expansions of one set's stacks (their results are a union).
void CompiledGrammar::expand(ParseStack s, std::vector<ParseStack>& out, StackSet& seen) const {
  std::vector<ParseStack> work{std::move(s)};
  while (!work.empty()) {
    ParseStack t = std::move(work.back());
    work.pop_back();
    while (!t.empty() && grammar_.elements[t.back()].kind == Element::kEnd) t.pop_back();
    if (!seen.insert(t).second) continue;
    if (seen.size() > limits_.max_stacks * 4)
      raise<InvalidArgument>("the grammar is too ambiguous: more than {} parse stacks",
                             limits_.max_stacks);
    if (t.empty() || grammar_.elements[t.back()].kind == Element::kBytes) {
      out.push_back(std::move(t));
      continue;
    }
    if (t.size() >= limits_.max_stack_depth)
      raise<InvalidArgument>("the text nests the grammar's rules more than {} deep",
                             limits_.max_stack_depth);
    const uint32_t p = t.back();
    for (uint32_t alt : grammar_.rules[grammar_.elements[p].arg]) {
      ParseStack u = t;
      if (grammar_.elements[p + 1].kind == Element::kEnd)
        u.pop_back();
      else
        u.back() = p + 1;
      u.push_back(alt);
      work.push_back(std::move(u));
    }
  }
}

std::vector<ParseStack> CompiledGrammar::initial_stacks() const {
  std::vector<ParseStack> out;
  StackSet seen;
  for (uint32_t a : grammar_.rules[grammar_.root]) expand(ParseStack{a}, out, seen);
  sort_unique(out);
  return out;
}

std::vector<ParseStack> CompiledGrammar::advance(const std::vector<ParseStack>& stacks,
                                                 uint8_t byte) const {
  std::vector<ParseStack> out;
  StackSet seen;  // shared: the stacks are alternatives, their expansions a union
  for (const ParseStack& s : stacks) {
    if (s.empty()) continue;
    const Element e = grammar_.elements[s.back()];
    if (!grammar_.byte_sets[e.arg][byte]) continue;
    ParseStack t = s;
    ++t.back();
    expand(std::move(t), out, seen);
  }
  sort_unique(out);
  if (out.size() > limits_.max_stacks)
    raise<InvalidArgument>("the grammar is too ambiguous: more than {} parse stacks",
                           limits_.max_stacks);
  return out;
}

std::vector<uint32_t> CompiledGrammar::set_mask(const std::vector<ParseStack>& stacks) const {
  std::vector<uint32_t> mask((static_cast<size_t>(vocab_->size()) + 31) / 32, 0);
  const auto& trie = vocab_->trie();
  const auto& tokens = vocab_->trie_tokens();
  // The stack sets met on the walk, numbered: many trie nodes reach the same set (in a
  // JSON string, every letter leaves the same stacks), so each (set, byte) step is
  // computed once and then looked up.
  std::vector<std::vector<ParseStack>> sets{stacks};
  std::map<std::vector<ParseStack>, int32_t> set_ids{{sets[0], 0}};
  std::unordered_map<uint32_t, int32_t> step;  // set << 8 | byte -> set (-1: refused)
  // level[d]: the set after the first d bytes of the current trie path.
  std::vector<int32_t> level(vocab_->max_token_bytes() + 1, 0);
  for (uint32_t i = 0; i < trie.size();) {
    const auto& node = trie[i];
    const uint32_t key = static_cast<uint32_t>(level[node.depth - 1]) << 8 | node.byte;
    auto it = step.find(key);
    if (it == step.end()) {
      std::vector<ParseStack> next =
          advance(sets[static_cast<size_t>(level[node.depth - 1])], node.byte);
      int32_t id = -1;
      if (!next.empty()) {
        auto [pos, fresh] = set_ids.emplace(next, static_cast<int32_t>(sets.size()));
        if (fresh) sets.push_back(std::move(next));
        id = pos->second;
      }
      it = step.emplace(key, id).first;
    }
    if (it->second < 0) {
      i = node.subtree_end;
      continue;
    }
    level[node.depth] = it->second;
    for (uint32_t k = node.token_begin; k < node.token_end; ++k)
      mask[static_cast<size_t>(tokens[k]) / 32] |= 1u << (static_cast<uint32_t>(tokens[k]) % 32);
    ++i;
  }
  return mask;
}

void CompiledGrammar::or_stack_mask(const ParseStack& stack, std::span<uint32_t> mask) const {
  std::shared_ptr<const std::vector<uint32_t>> m;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = mask_cache_.find(stack); it != mask_cache_.end()) m = it->second;
  }
  if (!m) {
    m = std::make_shared<const std::vector<uint32_t>>(set_mask({stack}));
    std::lock_guard<std::mutex> lock(mutex_);
    if ((mask_cache_.size() + 1) * m->size() * sizeof(uint32_t) > kMaskCacheBytes)
      mask_cache_.clear();
    mask_cache_.emplace(stack, m);
  }
  for (size_t i = 0; i < mask.size(); ++i) mask[i] |= (*m)[i];
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), stacks_(grammar_->initial_stacks()) {}

bool GrammarMatcher::accept_token(int32_t token) {
  const TokenVocabulary& v = grammar_->vocab();
  if (finished_ || token < 0 || token >= v.size()) return false;
  if (v.is_eos(token)) {
    if (!can_end()) return false;
    finished_ = true;
    return true;
  }
  if (v.is_special(token) || v.bytes(token).empty()) return false;
  return accept_bytes(v.bytes(token));
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (finished_) return false;
  std::vector<ParseStack> s = stacks_;
  for (unsigned char c : bytes) {
    s = grammar_->advance(s, c);
    if (s.empty()) return false;
  }
  stacks_ = std::move(s);
  return true;
}

bool GrammarMatcher::can_end() const {
  return !finished_ && !stacks_.empty() && stacks_.front().empty();  // sorted: empty first
}

bool GrammarMatcher::is_terminated() const {
  if (finished_) return true;
  for (const ParseStack& s : stacks_)
    if (!s.empty()) return false;
  return true;
}

void GrammarMatcher::fill_mask(std::span<uint32_t> mask) const {
  TACHYON_CHECK_EQ(mask.size(), (static_cast<size_t>(grammar_->vocab_size()) + 31) / 32);
  std::fill(mask.begin(), mask.end(), 0u);
  if (finished_) return;
  // A few stacks: each one's mask, cached (they recur from step to step); many (an
  // ambiguous grammar): one walk for them all.
  const size_t live = stacks_.size() - (can_end() ? 1 : 0);
  if (live <= kCachedStacks) {
    for (const ParseStack& s : stacks_)
      if (!s.empty()) grammar_->or_stack_mask(s, mask);
  } else {
    std::vector<ParseStack> nonempty(stacks_.begin() + (can_end() ? 1 : 0), stacks_.end());
    const std::vector<uint32_t> m = grammar_->set_mask(nonempty);
    std::copy(m.begin(), m.end(), mask.begin());
  }
  if (can_end())
    for (int32_t e : grammar_->vocab().eos()) mask[static_cast<size_t>(e) / 32] |= 1u << (e % 32);
}

}  // namespace tachyon::grammar
