#include "frontend/text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace tachyon {
namespace {

// Feeds pieces; returns (everything emitted, whether it stopped).
std::pair<std::string, bool> run(std::vector<std::string> stops,
                                 const std::vector<std::string>& pieces) {
  StopStringMatcher m(std::move(stops));
  std::string out;
  for (const auto& p : pieces) {
    auto r = m.push(p);
    out += r.emit;
    if (r.stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopStringMatcher, NoStopsPassesThrough) {
  StopStringMatcher m({});
  EXPECT_FALSE(m.active());
  EXPECT_EQ(m.push("abc").emit, "abc");
}

TEST(StopStringMatcher, MatchesAcrossPieces) {
  EXPECT_EQ(run({"STOP"}, {"hello S", "T", "OP world"}),
            std::make_pair(std::string("hello "), true));
  EXPECT_EQ(run({"\n\n"}, {"a\n", "\nb"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(run({"xyz"}, {"x", "y", "z"}), std::make_pair(std::string(""), true));
}

TEST(StopStringMatcher, HoldsBackOnlyWhatMightStartAStop) {
  StopStringMatcher m({"abc"});
  EXPECT_EQ(m.push("xxa").emit, "xx");  // "a" might begin "abc"
  EXPECT_EQ(m.push("b").emit, "");      // "ab" too
  EXPECT_EQ(m.push("d").emit, "abd");   // not a stop after all
  EXPECT_EQ(m.push("ab").emit, "");
  EXPECT_EQ(m.flush(), "ab");  // the end: nothing can follow
}

TEST(StopStringMatcher, EarliestOfSeveralStops) {
  EXPECT_EQ(run({"world", "lo w"}, {"hello world"}), std::make_pair(std::string("hel"), true));
  EXPECT_EQ(run({"bb", "abbb"}, {"a", "b", "b", "b"}), std::make_pair(std::string("a"), true));
}

TEST(StopStringMatcher, StopsOnceAndDropsTheRest) {
  StopStringMatcher m({"!"});
  auto r = m.push("hi!there");
  EXPECT_EQ(r.emit, "hi");
  EXPECT_TRUE(r.stopped);
  EXPECT_TRUE(m.push("more").stopped);
  EXPECT_EQ(m.flush(), "");
}

TEST(StopStringMatcher, RandomSplitsAgreeWithWholeText) {
  // Whatever the split of a text into pieces, the output is the text cut before the
  // first stop string (or all of it), and the emitted prefix never runs ahead of it.
  std::mt19937 rng(5);
  const std::vector<std::string> stops = {"aba", "cc", "bcb"};
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int len = static_cast<int>(rng() % 14);
    for (int i = 0; i < len; ++i) text += static_cast<char>('a' + rng() % 3);
    size_t first = std::string::npos;
    for (const auto& s : stops) first = std::min(first, text.find(s));
    const std::string expected = first == std::string::npos ? text : text.substr(0, first);
    std::vector<std::string> pieces;
    for (size_t i = 0; i < text.size();) {
      const size_t n = 1 + rng() % 3;
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    StopStringMatcher m(stops);
    std::string out, fed;
    bool stopped = false;
    for (const auto& p : pieces) {
      fed += p;
      auto r = m.push(p);
      out += r.emit;
      ASSERT_EQ(expected.compare(0, out.size(), out), 0) << text;
      if (r.stopped) {
        stopped = true;
        break;
      }
    }
    if (!stopped) out += m.flush();
    EXPECT_EQ(out, expected) << text;
    EXPECT_EQ(stopped, first != std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tachyon
