// Structured-output benchmark: the cost of a constraint for a model's vocabulary.
// Prints, each the median of --reps fresh runs (CPU time of this thread):
//   vocab      the tokens' bytes and the vocabulary's trie (once per engine)
//   lower      the spec into the grammar form (JSON Schema: the schema's lowering)
//   compile    the grammar against the vocabulary
//   first mask the mask at the start (a cold cache)
//   walk cold  mean time per token to fill the mask and accept the token, along a valid
//              instance's tokens, every mask new to the cache
//   walk warm  the same again on the same compiled grammar (masks cached)
//
// Usage: grammar_bench [--model DIR] [--schema FILE] [--instance JSON] [--reps N]
//   (default: models/tiny-kjv-chat, bench/schemas/person.json and an instance of it;
//   json_object is measured alongside for reference)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "frontend/text.h"
#include "grammar/compile.h"
#include "grammar/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace tachyon;

double thread_cpu() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(1);
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::shared_ptr<const grammar::TokenVocabulary> vocabulary(const TextTokenizer& t) {
  const int32_t n = t.vocab_size();
  std::vector<std::string> bytes(static_cast<size_t>(n));
  std::vector<bool> special(static_cast<size_t>(n), true);
  for (int32_t id = 0; id < n; ++id)
    if (auto b = t.token_bytes(id)) {
      bytes[static_cast<size_t>(id)] = std::move(*b);
      special[static_cast<size_t>(id)] = false;
    }
  return std::make_shared<const grammar::TokenVocabulary>(std::move(bytes), std::move(special),
                                                          t.eos_token_ids());
}

// Mean seconds per token to mask and accept `ids`.
double walk(const std::shared_ptr<const grammar::CompiledGrammar>& g,
            const std::vector<int32_t>& ids) {
  grammar::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>((g->vocab_size() + 31) / 32));
  const double t0 = thread_cpu();
  for (int32_t id : ids) {
    m.fill_mask(mask);
    if (!m.accept_token(id)) {
      std::fprintf(stderr, "the instance's token %d ('%s') is refused\n", id,
                   g->vocab().bytes(id).c_str());
      std::exit(1);
    }
  }
  return (thread_cpu() - t0) / static_cast<double>(ids.size());
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "models/tiny-kjv-chat", schema_path = "bench/schemas/person.json";
  std::string instance =
      R"({"name": "Ruth", "age": 31, "email": "ruth@moab.example", "address": {"street": )"
      R"("1 Field Way", "city": "Bethlehem", "zip": "12345"}, "tags": ["family", "work"], )"
      R"("created": "2026-12-06T10:00:00Z", "score": 4.5})";
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--model"))
      model = argv[i + 1];
    else if (!std::strcmp(argv[i], "--schema"))
      schema_path = argv[i + 1];
    else if (!std::strcmp(argv[i], "--instance"))
      instance = argv[i + 1];
    else if (!std::strcmp(argv[i], "--reps"))
      reps = std::max(1, std::atoi(argv[i + 1]));
  }
  auto tok = std::shared_ptr<const Tokenizer>(Tokenizer::load(model));
  auto text = make_text_tokenizer(tok);
  std::vector<double> vocab_t;
  std::shared_ptr<const grammar::TokenVocabulary> vocab;
  for (int r = 0; r < reps; ++r) {
    const double t0 = thread_cpu();
    vocab = vocabulary(*text);
    vocab_t.push_back(thread_cpu() - t0);
  }
  std::printf("vocabulary: %d tokens, %.2f ms\n", vocab->size(), median(vocab_t) * 1e3);
  // The instance's tokens, without the space a SentencePiece tokenizer puts before it.
  std::vector<int32_t> ids = tok->encode(instance, false);
  auto find = [&](const std::string& bytes) {
    for (int32_t id = 0; id < vocab->size(); ++id)
      if (!vocab->is_special(id) && vocab->bytes(id) == bytes) return id;
    return int32_t{-1};
  };
  if (!ids.empty() && vocab->bytes(ids[0]).rfind(' ', 0) == 0) {
    const std::string rest = vocab->bytes(ids[0]).substr(1);
    std::vector<int32_t> head;
    if (int32_t id = find(rest); id >= 0) {
      head.push_back(id);
    } else {
      for (char c : rest) head.push_back(find(std::string(1, c)));
    }
    ids.erase(ids.begin());
    ids.insert(ids.begin(), head.begin(), head.end());
  }

  grammar::GrammarSpec object{grammar::GrammarSpec::Kind::kJsonObject, "", {}};
  grammar::GrammarSpec schema{grammar::GrammarSpec::Kind::kJsonSchema, read_file(schema_path), {}};
  for (const auto& [name, spec] : {std::pair{"json_object", object}, {"json_schema", schema}}) {
    std::vector<double> lower_t, compile_t, first_t, cold_t, warm_t;
    size_t rules = 0;
    for (int r = 0; r < reps; ++r) {
      double t0 = thread_cpu();
      grammar::Grammar g = grammar::build_grammar(spec);
      lower_t.push_back(thread_cpu() - t0);
      rules = g.rules.size();
      t0 = thread_cpu();
      auto compiled = std::make_shared<const grammar::CompiledGrammar>(std::move(g), vocab);
      compile_t.push_back(thread_cpu() - t0);
      std::vector<uint32_t> mask(static_cast<size_t>((vocab->size() + 31) / 32));
      t0 = thread_cpu();
      grammar::GrammarMatcher(compiled).fill_mask(mask);
      first_t.push_back(thread_cpu() - t0);
      auto fresh = std::make_shared<const grammar::CompiledGrammar>(compiled->grammar(), vocab);
      cold_t.push_back(walk(fresh, ids));
      warm_t.push_back(walk(fresh, ids));
    }
    std::printf(
        "%-11s %5zu rules: lower %.3f ms, compile %.3f ms, first mask %.3f ms, walk of %zu "
        "tokens cold %.3f ms/token, warm %.4f ms/token\n",
        name, rules, median(lower_t) * 1e3, median(compile_t) * 1e3, median(first_t) * 1e3,
        ids.size(), median(cold_t) * 1e3, median(warm_t) * 1e3);
  }
  return 0;
}
