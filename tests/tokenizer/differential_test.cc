// Differential test on a multilingual corpus (tests/tokenizer/data/multilingual_corpus.jsonl,
// made by scripts/make_tokenizer_corpus.py from the gettext catalogs of Debian packages
// plus seeded synthetic lines). The expected ids come from an independent implementation
// of the same algorithms: the JavaScript tokenizers of the npm package @lenml/tokenizers
// (a fork of transformers.js), run under node by scripts/make_js_reference.sh into
// build/tokenizers/js_reference/<name>.json. That implementation follows tokenizer.json
// as written, so the pipeline is built without transformers' class-specific rebuilds
// (tokenizer_class is dropped from the config); those are covered by reference_test.cc.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/json.h"
#include "core/mmap.h"
#include "tokenizer/test_util.h"

namespace tachyon::testing {
namespace {

std::vector<std::string> corpus() {
  std::vector<std::string> texts;
  std::ifstream in(std::string(TACHYON_SOURCE_DIR) +
                   "/tests/tokenizer/data/multilingual_corpus.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) texts.push_back(parse_json(line, "corpus")["text"].get<std::string>());
  }
  return texts;
}

class DifferentialTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DifferentialTest, MatchesJavaScriptImplementation) {
  const std::string name = GetParam();
  const std::string dir = reference_dir(name);
  const std::string js =
      std::string(TACHYON_BINARY_DIR) + "/tokenizers/js_reference/" + name + ".json";
  if (!std::filesystem::exists(js) || !std::filesystem::exists(dir + "/tokenizer.json")) {
    FAIL() << js << " is missing: run `scripts/fetch_tokenizers.sh " << TACHYON_BINARY_DIR
           << "/tokenizers && scripts/make_js_reference.sh " << TACHYON_BINARY_DIR
           << "/tokenizers` (scripts/test.sh does both)";
  }
  Json config = load_json_file(dir + "/tokenizer_config.json");
  config.erase("tokenizer_class");
  auto tok = Tokenizer::from_json(read_file(dir + "/tokenizer.json"), config.dump());
  const Json expected = load_json_file(js)["ids"];
  const auto texts = corpus();
  ASSERT_EQ(expected.size(), texts.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto ids = tok->encode(texts[i], false);
    if (ids != to_ids(expected[i])) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << name << " line " << i + 1 << ": " << Json(texts[i]).dump() << "\n got "
                      << Json(ids).dump() << "\n want " << expected[i].dump();
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << texts.size() << " lines";
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, DifferentialTest, ::testing::ValuesIn(reference_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tachyon::testing
