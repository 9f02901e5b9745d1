// Differential cases: every template in data/jinja_cases.json was rendered by jinja2
// (transformers' chat-template environment) with scripts/jinja_reference.py; the
// interpreter must give the same bytes, or fail where jinja2 failed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "chat/jinja.h"
#include "core/error.h"

namespace tachyon::jinja {
namespace {

nlohmann::ordered_json load_cases() {
  std::ifstream f(TACHYON_SOURCE_DIR "/tests/chat/data/jinja_cases.json");
  std::stringstream ss;
  ss << f.rdbuf();
  return nlohmann::ordered_json::parse(ss.str());
}

TEST(JinjaCases, MatchJinja2) {
  auto cases = load_cases();
  ASSERT_GT(cases.size(), 100u);
  int failures = 0;
  for (const auto& c : cases) {
    std::string name = c["name"];
    Vars vars;
    for (auto it = c["vars"].begin(); it != c["vars"].end(); ++it)
      vars.emplace_back(it.key(), from_json(it.value()));
    bool want_error = c.contains("error");
    try {
      auto t = Template::parse(c["template"].get<std::string>());
      std::string got = t.render(vars);
      if (want_error) {
        ++failures;
        ADD_FAILURE() << name << ": expected an error like [" << c["error"].get<std::string>()
                      << "], got [" << got << "]";
      } else if (got != c["expected"].get<std::string>()) {
        ++failures;
        ADD_FAILURE() << name << ":\n  want [" << c["expected"].get<std::string>() << "]\n  got  ["
                      << got << "]";
      }
    } catch (const InvalidArgument& e) {
      if (!want_error) {
        ++failures;
        ADD_FAILURE() << name << ": unexpected error: " << e.what();
      }
    }
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace tachyon::jinja
