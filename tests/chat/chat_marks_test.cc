// ChatTemplate::render_marked: which bytes of a rendered prompt came from the request's
// values (shown here between [ and ]) and which from the template.
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"

namespace tachyon {
namespace {

std::string show(const RenderedChat& r) {
  std::string out;
  size_t at = 0;
  for (const auto& s : r.untrusted) {
    EXPECT_LE(at, s.begin);
    EXPECT_LT(s.begin, s.end);
    EXPECT_LE(s.end, r.text.size());
    out += r.text.substr(at, s.begin - at) + "[" + r.text.substr(s.begin, s.end - s.begin) + "]";
    at = s.end;
  }
  return out + r.text.substr(at);
}

std::string marked(const std::string& source, const Json& contents, const Json& extra = {}) {
  ChatTemplateInputs in;
  for (const auto& c : contents) in.messages.push_back({{"role", "user"}, {"content", c}});
  in.bos_token = "<s>";
  in.tools = Json::array({{{"name", "f"}}});
  if (!extra.is_null()) in.extra = extra;
  RenderedChat r = ChatTemplate::compile(source).render_marked(in);
  EXPECT_EQ(r.text, ChatTemplate::compile(source).render(in));
  return show(r);
}

TEST(ChatMarks, OutputAndConcatenationKeepTheContentBytes) {
  const Json ab = {"ab"};
  EXPECT_EQ(marked("{{ '<s>' + messages[0].content + '</s>' }}", ab), "<s>[ab]</s>");
  EXPECT_EQ(marked("<s>{{ messages[0].role ~ ':' ~ messages[0].content }}", ab), "<s>[user]:[ab]");
  EXPECT_EQ(marked("{{ bos_token }}{{ messages[0].content }}", ab), "<s>[ab]");
  EXPECT_EQ(marked("{{ messages[0].content }}{{ messages[0].content }}", ab), "[abab]");
  EXPECT_EQ(marked("{% for m in messages %}<t>{{ m.content }}{% endfor %}", Json{"a", "b"}),
            "<t>[a]<t>[b]");
  EXPECT_EQ(marked("{{ messages | map(attribute='content') | join('<sep>') }}", Json{"a", "b"}),
            "[a]<sep>[b]");
  EXPECT_EQ(marked("{{ '<sep>'.join(['<a>', messages[0].content]) }}", ab), "<a><sep>[ab]");
}

TEST(ChatMarks, TrimAndStripKeepTheirPart) {
  const Json padded = {"  ab \n"};
  EXPECT_EQ(marked("{{ '<s>' + (messages[0].content | trim) + '</s>' }}", padded), "<s>[ab]</s>");
  EXPECT_EQ(marked("{{ '<s>' + messages[0].content.strip() + '</s>' }}", padded), "<s>[ab]</s>");
  EXPECT_EQ(marked("{{ ('<s>' ~ messages[0].content ~ '  ') | trim }}", padded), "<s>[  ab]");
  EXPECT_EQ(marked("{{ ('<s> ' ~ messages[0].content).lstrip('<s> ') }}", Json{"ab"}), "[ab]");
}

TEST(ChatMarks, CapturedOutputKeepsItsMarks) {
  const Json ab = {"ab"};
  EXPECT_EQ(marked("{% macro m(c) %}<b>{{ c }}</b>{% endmacro %}{{ m(messages[0].content) }}", ab),
            "<b>[ab]</b>");
  EXPECT_EQ(marked("{% set x %}<i>{{ messages[0].content }}</i>{% endset %}{{ x }}", ab),
            "<i>[ab]</i>");
  EXPECT_EQ(marked("{% set ns = namespace(p='') %}{% set ns.p = ns.p + '<r>' + "
                   "messages[0].content %}{{ ns.p }}",
                   ab),
            "<r>[ab]");
}

TEST(ChatMarks, DerivedStringsAreUntrustedAsAWhole) {
  const Json ab = {"a|b"};
  EXPECT_EQ(marked("{{ messages[0].content | upper }}", ab), "[A|B]");
  EXPECT_EQ(marked("{{ ('<s>' ~ messages[0].content) | upper }}", ab), "[<S>A|B]");
  EXPECT_EQ(marked("{{ '<s>%s' % messages[0].content }}", ab), "[<s>a|b]");
  EXPECT_EQ(marked("{{ messages[0].content.split('|')[1] }}<e>", ab), "[b]<e>");
  EXPECT_EQ(marked("{{ messages[0].content[1:] }}<e>", ab), "[|b]<e>");
  EXPECT_EQ(marked("{% for c in messages[0].content %}{{ c }}-{% endfor %}", Json{"ab"}),
            "[a]-[b]-");
  EXPECT_EQ(marked("{{ messages[0].content.replace('|', '<s>') }}", ab), "[a<s>b]");
  EXPECT_EQ(marked("<t>{{ tools | tojson }}", ab), "<t>[[{\"name\": \"f\"}]]");
  EXPECT_EQ(marked("<m>{{ messages[0] }}", ab), "<m>[{'content': 'a|b', 'role': 'user'}]");
  EXPECT_EQ(marked("{% set j = joiner(messages[0].content) %}<a>{{ j() }}<b>{{ j() }}", ab),
            "<a><b>[a|b]");
  EXPECT_EQ(marked("{{ strftime_now(messages[0].content) }}", Json{"<s>"}), "[<s>]");
  EXPECT_EQ(marked("{% for k in dict(**messages[0]) %}<k>{{ k }}{% endfor %}", ab),
            "<k>[content]<k>[role]");
  // Template text built without the request's values stays trusted.
  EXPECT_EQ(marked("{{ ('<s>' ~ 'x') | upper }}{{ messages | length }}", ab), "<S>X1");
}

TEST(ChatMarks, KwargsAreUntrustedTheSpecialTokensGivenAreNot) {
  EXPECT_EQ(marked("{{ bos_token }}{{ sys }}", Json::array(), {{"sys", "<s>"}}), "<s>[<s>]");
  // A kwarg that replaces a special token is the client's value.
  EXPECT_EQ(marked("{{ bos_token }}", Json::array(), {{"bos_token", "<x>"}}), "[<x>]");
}

}  // namespace
}  // namespace tachyon
