// The entry point of the grammar parsers' fuzz target, shared with the corpus replay
// test so the same code runs under libFuzzer (clang) and in the ordinary test binary.
//
// An input's first byte picks the parser ('j': JSON Schema, 'J': JSON Schema in strict
// mode, else even: regex, odd: GBNF); the rest is the text.
// When it compiles, a matcher over a vocabulary of the 128 ASCII bytes, a few
// multi-byte tokens and an end-of-sequence token fills masks and accepts the allowed
// tokens the input's own bytes name, for up to 32 steps. Refusals are InvalidArgument;
// any other exception is a bug, reported by abort() with a message.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"

namespace tachyon::fuzz {

[[noreturn]] inline void grammar_parsers_bug(const char* what) {
  std::fprintf(stderr, "grammar parsers fuzz: %s\n", what);
  std::fflush(stderr);
  std::abort();
}

inline std::shared_ptr<const grammar::TokenVocabulary> grammar_fuzz_vocab() {
  static const auto vocab = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 128; ++b) t.emplace_back(1, static_cast<char>(b));
    for (const char* s : {"ab", "\":", "{\"", "\xC3\xA9", "\xC3", "\xA9", "root", "  "})
      t.push_back(s);
    t.push_back("");
    std::vector<bool> special(t.size(), false);
    return std::make_shared<const grammar::TokenVocabulary>(
        t, special, std::vector<int32_t>{static_cast<int32_t>(t.size()) - 1});
  }();
  return vocab;
}

// True when the input compiled.
inline bool grammar_parsers_one(const uint8_t* data, size_t size) {
  if (size == 0) return false;
  grammar::GrammarSpec spec;
  spec.kind =
      data[0] % 2 == 0 ? grammar::GrammarSpec::Kind::kRegex : grammar::GrammarSpec::Kind::kGrammar;
  if (data[0] == 'j' || data[0] == 'J') {
    spec.kind = grammar::GrammarSpec::Kind::kJsonSchema;
    spec.strict = data[0] == 'J';
  }
  spec.text.assign(reinterpret_cast<const char*>(data + 1), size - 1);
  std::shared_ptr<const grammar::CompiledGrammar> g;
  try {
    g = std::make_shared<const grammar::CompiledGrammar>(grammar::build_grammar(spec),
                                                         grammar_fuzz_vocab());
  } catch (const InvalidArgument&) {
    return false;
  } catch (const std::exception& e) {
    grammar_parsers_bug(e.what());
  }
  try {
    grammar::GrammarMatcher m(g);
    std::vector<uint32_t> mask(static_cast<size_t>((g->vocab_size() + 31) / 32));
    for (size_t step = 0; step < 32 && !m.is_terminated(); ++step) {
      m.fill_mask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < g->vocab_size(); ++t)
        if ((mask[static_cast<size_t>(t) / 32] >> (t % 32)) & 1u) allowed.push_back(t);
      if (allowed.empty()) break;
      const int32_t t = allowed[data[step % size] % allowed.size()];
      if (!m.accept_token(t)) grammar_parsers_bug("an allowed token was refused");
    }
  } catch (const InvalidArgument&) {
  } catch (const std::exception& e) {
    grammar_parsers_bug(e.what());
  }
  return true;
}

}  // namespace tachyon::fuzz
