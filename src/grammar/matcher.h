// Matching text against a compiled grammar, and the allowed-token masks for decoding.
//
// A matcher holds the set of parse stacks of a pushdown automaton over bytes: each
// stack lists positions in the grammar's elements (the top one a byte set to match
// next, the ones below where to continue when a rule ends); an empty stack means the
// text so far is complete. A byte advances every stack whose top accepts it. A token is
// allowed when all its bytes advance some stack; since the stacks are alternatives, the
// mask is the union of each stack's mask, which CompiledGrammar caches per stack (a
// walk of the vocabulary's trie, pruning a subtree once no stack survives its prefix).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace tachyon::grammar {

using ParseStack = std::vector<uint32_t>;

class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocabulary> vocab,
                  const GrammarLimits& limits = {});

  const Grammar& grammar() const { return grammar_; }
  const TokenVocabulary& vocab() const { return *vocab_; }
  const GrammarLimits& limits() const { return limits_; }
  int32_t vocab_size() const { return vocab_->size(); }

  // The stacks at the start of the text.
  std::vector<ParseStack> initial_stacks() const;
  // The stacks after one more byte (sorted, without duplicates; empty: refused).
  std::vector<ParseStack> advance(const std::vector<ParseStack>& stacks, uint8_t byte) const;
  // ORs into mask the tokens (non-special, by their bytes) that one non-empty stack
  // accepts; cached.
  void or_stack_mask(const ParseStack& stack, std::span<uint32_t> mask) const;
  // The tokens (non-special, by their bytes) that a set of non-empty stacks accepts,
  // walked at once (not cached: for sets too large to mask stack by stack).
  std::vector<uint32_t> set_mask(const std::vector<ParseStack>& stacks) const;

 private:
  struct StackHash {
    size_t operator()(const ParseStack& s) const;
  };
  using StackSet = std::unordered_set<ParseStack, StackHash>;
  void expand(ParseStack s, std::vector<ParseStack>& out, StackSet& seen) const;

  Grammar grammar_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  GrammarLimits limits_;
  mutable std::mutex mutex_;
  mutable std::unordered_map<ParseStack, std::shared_ptr<const std::vector<uint32_t>>, StackHash>
      mask_cache_;
};

// One sequence's progress through a grammar. Copy it to fork a sequence (n > 1, beams).
class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Advances over a token: false (and nothing changes) when it is not allowed here. An
  // end-of-sequence token is allowed where the grammar may end, and finishes the match.
  bool accept_token(int32_t token);
  // Advances over bytes: false (nothing changes) when the grammar refuses them.
  bool accept_bytes(std::string_view bytes);
  // Whether the text so far is a complete match.
  bool can_end() const;
  // Whether nothing may follow: finished by an end-of-sequence token, or complete with
  // no byte allowed next.
  bool is_terminated() const;
  // Fills mask (token_mask_words(vocab) words) with the tokens allowed next.
  void fill_mask(std::span<uint32_t> mask) const;

  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  std::vector<ParseStack> stacks_;
  bool finished_ = false;
};

}  // namespace tachyon::grammar
