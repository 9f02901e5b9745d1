// The entry point of the jinja fuzz target, shared with the corpus replay test so the
// same code runs under libFuzzer (clang) and in the ordinary test binary (g++).
// Returns true when the template parsed and rendered; InvalidArgument is a clean
// refusal, and anything else (a crash, a sanitizer report, another exception, untrusted
// spans that are not sorted, disjoint, non-empty ranges of the text) is a bug.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "chat/chat_template.h"
#include "core/error.h"

namespace tachyon::fuzz {

inline bool jinja_one(const uint8_t* data, size_t size) {
  static const OrderedChatTemplateInputs inputs = [] {
    OrderedChatTemplateInputs in;
    in.messages = nlohmann::ordered_json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris? 六"},
      {"role": "assistant", "content": null, "tool_calls": [{"type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "content": "{\"t\": 21}"},
      {"role": "assistant", "content": "<think>\nok\n</think>\n\nIt is 21C."}])");
    in.tools =
        nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
    in.add_generation_prompt = true;
    in.bos_token = "<s>";
    in.eos_token = "</s>";
    return in;
  }();
  jinja::RenderOptions opt;
  opt.now = 1721995200;
  opt.limits.max_steps = 200000;  // small limits keep each run fast
  opt.limits.max_output_bytes = 1 << 20;
  opt.limits.max_string_bytes = 1 << 20;
  opt.limits.max_items = 100000;
  try {
    ChatTemplate t =
        ChatTemplate::compile(std::string_view(reinterpret_cast<const char*>(data), size));
    const RenderedChat r = t.render_marked(inputs, opt);
    size_t at = 0;
    for (const auto& s : r.untrusted) {
      if (s.begin < at || s.begin >= s.end || s.end > r.text.size()) {
        std::fprintf(stderr, "jinja fuzz: bad untrusted span [%zu, %zu) after %zu in %zu bytes\n",
                     s.begin, s.end, at, r.text.size());
        std::abort();
      }
      at = s.end;
    }
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

}  // namespace tachyon::fuzz
